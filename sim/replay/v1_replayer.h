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
//
// vllm-0.20 (shared/spec/ops-format-v0.20.md): `kv_cache_groups` switch block-id fields to one
// list per group; the init ops' hash_algo, hash_block_size, max_num_batched_tokens and the
// scheduler settings (enable_chunked_prefill, scheduler_reserve_full_isl, policy,
// async_scheduling, max_num_scheduled_tokens); add_request's min_tokens, priority, arrival_time,
// cache_salt, lora_name; allocate_slots' num_new_computed_tokens and delay_cache_blocks; the ops
// can_fit_full_sequence, cache_blocks, new_step (kvm) and prefix_cache_stats; several schedule
// outputs in flight, each update applying the oldest. sched_init's kv_offload plugs in the CPU tier
// (offload_sched.cpp, ops-format-offload.md), its kv_pd the NixlConnector of one P/D engine with a
// simulated NIXL worker (pd_sched.cpp, ops-format-pd.md).

#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/offload/key_lists.h"
#include "core/offload/offloading_connector.h"
#include "core/v1/kv_cache_manager.h"
#include "core/v1/scheduler.h"
#include "sim/replay/replayer.h"

namespace kvsim {

class OffmReplay;
struct OffloadSched;
struct PdConfig;
struct PdSched;
struct NixlRecv;

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
  // vllm-0.20 (v1_replayer_v020.cpp)
  void op_get_computed_blocks_v020(JsonWriter& w);
  void op_allocate_slots_v020(JsonWriter& w);
  void op_can_fit_full_sequence(JsonWriter& w);
  void op_cache_blocks(JsonWriter& w);
  void op_new_step(JsonWriter& w);
  void op_prefix_cache_stats(JsonWriter& w);
  void op_common_prefix_v020(JsonWriter& w);
  // vllm-0.20's offm mode (offload_offm.cpp; shared/spec/ops-format-offload.md §2)
  void op_offload(std::string_view op, JsonWriter& w);
  /// The op's key list `name` (ints or strings), interned, into `out`.
  void read_offload_keys(std::string_view name, std::vector<OffloadKey>& out);
  // sched mode with the OffloadingConnector (offload_sched.cpp; ops-format-offload.md §1)
  /// sched_init's kv_offload object, checked as v0.20.1 checks it at start-up.
  OffloadingConnectorConfig read_kv_offload(JsonLine::Index obj, const KVCacheConfig& c,
                                            bool& manual, bool& kv_events) const;
  void start_offload(const OffloadingConnectorConfig& cfg, bool manual, bool kv_events);
  /// add_request's kv_transfer_params: do_remote_decode reaches the connector.
  void offload_read_transfer_params(const Request& r);
  /// Keeps the step's connector metadata for its update.
  void offload_record_step();
  void offload_after_schedule(JsonWriter& w);
  /// The worker side of the step the update applies, before update_from_output.
  void offload_before_update();
  void offload_after_update(JsonWriter& w);
  void write_offload_snapshot(JsonWriter& w) const;
  void write_transfers(JsonWriter& w, std::span<const OffloadTransfer> transfers) const;
  void write_skipped(JsonWriter& w) const;
  void write_sorted_ids(JsonWriter& w, std::vector<std::string_view> ids) const;
  void op_connector_cache_stats(JsonWriter& w);
  // sched mode with the NixlConnector (pd_sched.cpp; shared/spec/ops-format-pd.md)
  /// sched_init's kv_pd object, checked.
  PdConfig read_kv_pd(JsonLine::Index obj, const KVCacheConfig& c) const;
  void start_pd(const PdConfig& config);
  /// add_request's kv_transfer_params, as the connector reads them.
  void pd_read_transfer_params(const Request& r);
  /// The op's `now` moves the clock (never backwards).
  void pd_set_clock();
  /// Keeps the step's connector metadata for its update.
  void pd_record_step();
  void pd_after_schedule(JsonWriter& w);
  /// The worker side of the step the update applies, before update_from_output.
  void pd_before_update();
  void pd_after_update(JsonWriter& w);
  /// A finished output's kv_transfer_params and delay_free.
  void pd_write_finish(JsonWriter& w, const Request& r) const;
  /// skipped_waiting, waiting_for_remote_kvs, held.
  void pd_write_queue_keys(JsonWriter& w) const;
  void pd_write_local_blocks(JsonWriter& w, const NixlRecv& r) const;
  void write_pd_snapshot(JsonWriter& w) const;
  /// Forgets a finished request unless the scheduler holds its blocks (a delayed free).
  void forget_unless_held(const Request& r);
  /// The v0.20 fields of init/sched_init (kv_cache_groups, hash_algo, hash_block_size) into `c`.
  void read_v020_kv_fields(KVCacheConfig& c) const;
  /// new_computed_blocks of the current op (flat or grouped) into group_hits_ (all empty when
  /// absent or null).
  void read_group_hits(const KVCacheManager& kv);
  /// A request's tables: its one table (flat) or one list per group (grouped).
  void write_tables(JsonWriter& w, const Request& r) const;
  /// Per-group lists (grouped) or the first group's list (flat).
  void write_group_lists(JsonWriter& w, const GroupBlockLists& lists) const;
  /// Group g's last `n[g]` table entries (flat: group 0's), `n` indexed by group.
  void write_new_blocks(JsonWriter& w, const Request& r, std::span<const std::int32_t> n) const;
  void write_group_counts(JsonWriter& w, std::span<const std::int32_t> counts) const;
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

  bool v020() const { return v020_; }

  Profile profile_;
  bool v020_ = false;           // the profile's manager is a KV cache coordinator (vllm-0.20)
  bool grouped_ = false;        // the init op gave kv_cache_groups: block ids per group
  std::int64_t num_added_ = 0;  // add_request ops since the init op (default arrival times)
  enum class Mode : std::uint8_t { kNone, kKvm, kSched, kOffm } mode_ = Mode::kNone;
  std::unique_ptr<KVCacheManager> kvm_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<OffmReplay> offm_;  // offm mode
  std::unique_ptr<OffloadSched> offload_;  // sched mode with kv_offload
  std::unique_ptr<PdSched> pd_;            // sched mode with kv_pd
  std::vector<std::unique_ptr<Request>> requests_;  // by request index; null once forgotten
  std::vector<std::string> names_;  // by request index (kept for "finished" reports)
  NameMap live_;                    // id -> request index
  bool schedule_pending_ = false;
  SchedulerOutput sched_out_;
  std::vector<RequestOutput> outputs_;
  std::vector<BlockId> scratch_blocks_;
  std::vector<Token> scratch_tokens_;
  GroupBlockLists group_hits_;
  std::vector<std::int32_t> scratch_counts_;
  std::vector<Request*> scratch_requests_;
  std::vector<std::size_t> running_pos_;  // op_schedule: running-list positions before the step
};

}  // namespace kvsim
