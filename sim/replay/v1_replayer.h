#pragma once
// V1Replayer: the op protocol of vLLM V1 (shared/spec/ops-format.md) against kvsim's
// KVCacheManager (kvm mode) or Scheduler (sched mode) of one V1 profile (vllm-0.7.2 or
// vllm-0.8.5), one JSON result line per op (Replayer).
//
// Fields read beyond those every profile shares: `sliding_window` (init, sched_init; used from
// v0.8.5), `long_prefill_token_threshold` (sched_init; v0.8.5), `prompt_logprobs` (add_request;
// any non-null value disables the lookup from v0.8.5), `num_lookahead_tokens` (allocate_slots;
// v0.8.5, an error at v0.7.2 unless 0). kvsim extensions (vLLM sets them from its speculative
// config): `use_eagle` (init, sched_init) and `num_lookahead_tokens` (sched_init), v0.8.5 only.
// Refused where vLLM would fail an assertion later inside schedule(): a sched_init whose
// sliding_window is not longer than block_size (v0.8.5, with prefix caching).

#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/v1/kv_cache_manager.h"
#include "core/v1/scheduler.h"
#include "sim/replay/replayer.h"

namespace kvsim {

class V1Replayer final : public Replayer {
 public:
  /// A replayer of `profile`'s V1 release. Precondition: a profile of the V1 family.
  explicit V1Replayer(Profile profile = Profile::kVllm072, ReplayOptions options = {});
  ~V1Replayer() override;

 private:
  struct StrHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }
  };
  using NameMap = std::unordered_map<std::string, std::int64_t, StrHash, std::equal_to<>>;

  void dispatch(std::string_view op, JsonWriter& w) override;
  void op_init(JsonWriter& w);
  void op_sched_init(JsonWriter& w);
  void op_add_request(JsonWriter& w);
  void op_get_computed_blocks(JsonWriter& w);
  void op_allocate_slots(JsonWriter& w);
  void op_append_output(JsonWriter& w);
  void op_set_num_computed_tokens(JsonWriter& w);
  void op_free(JsonWriter& w, bool forget);
  void op_common_prefix(JsonWriter& w);
  void op_reset_prefix_cache(JsonWriter& w);
  void op_req_info(JsonWriter& w);
  void op_snapshot(JsonWriter& w);
  void op_schedule(JsonWriter& w);
  void op_update(JsonWriter& w);
  void op_abort(JsonWriter& w);
  void check_all_invariants() const override;
  KVCacheConfig read_kv_config() const;  // the fields init and sched_init share
  void reset();                          // drops every request, then the manager and the scheduler

  Request& live_request(std::string_view id);
  KVCacheManager& manager();
  void require_kvm_mode(const char* op) const;
  void forget(std::int64_t index);
  void write_blocks(JsonWriter& w, const std::vector<BlockId>& blocks) const;
  /// Writes "running" and "waiting": the scheduler's queues, by request id (sched mode).
  void write_queues(JsonWriter& w) const;
  std::string_view name_of(const Request& r) const {
    return names_[static_cast<std::size_t>(r.index())];
  }

  Profile profile_;
  enum class Mode : std::uint8_t { kNone, kKvm, kSched } mode_ = Mode::kNone;
  std::unique_ptr<KVCacheManager> kvm_;
  std::unique_ptr<Scheduler> sched_;
  std::vector<std::unique_ptr<Request>> requests_;  // by request index; null once forgotten
  std::vector<std::string> names_;  // by request index (kept for "finished" reports)
  NameMap live_;                    // id -> request index
  bool schedule_pending_ = false;
  SchedulerOutput sched_out_;
  std::vector<RequestOutput> outputs_;
  std::vector<BlockId> scratch_blocks_;
  std::vector<Token> scratch_tokens_;
};

}  // namespace kvsim
