#pragma once
// OpReplayer: executes an op trace (shared/spec/ops-format.md) against kvsim's KVCacheManager
// (kvm mode) or Scheduler (sched mode) and renders exactly one JSON result line per op. Malformed
// or misused ops produce {"error": "..."} and the replay goes on.

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
#include "sim/replay/json_line.h"

namespace kvsim {

class OpReplayer {
 public:
  struct Options {
    bool check_invariants = false;  // run check_invariants() after every op (aborts on failure)
  };
  OpReplayer();
  explicit OpReplayer(Options options);
  ~OpReplayer();

  /// Processes one line. Blank lines produce nothing and return false; any other line appends
  /// exactly one JSON line (with '\n') to `out` and returns true.
  bool process_line(std::string_view line, OutBuf& out);
  /// The same, appending to a string (convenient in tests; slower).
  bool process_line(std::string_view line, std::string& out);

  /// Number of ops that produced an error line.
  std::int64_t num_errors() const { return num_errors_; }

 private:
  struct OpError {
    std::string message;
  };
  struct StrHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }
  };
  using NameMap = std::unordered_map<std::string, std::int64_t, StrHash, std::equal_to<>>;

  void dispatch(std::string_view op, JsonWriter& w);
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
  void check_all_invariants() const;
  KVCacheConfig read_kv_config() const;  // the fields init and sched_init share
  void reset();                          // drops every request, then the manager and the scheduler

  // Field access on the current op; throw OpError on a missing field or a wrong type.
  JsonLine::Index field(std::string_view key) const;
  std::int64_t get_int(std::string_view key) const;
  std::int64_t get_int_or(std::string_view key, std::int64_t dflt) const;
  bool get_bool_or(std::string_view key, bool dflt) const;
  std::string_view get_string(std::string_view key) const;
  void read_tokens(JsonLine::Index arr, std::vector<Token>& out) const;
  std::int64_t int_value(JsonLine::Index i, std::string_view what) const;

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

  Options options_;
  JsonLine json_;
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
  OutBuf string_out_;
  std::int64_t num_errors_ = 0;
};

}  // namespace kvsim
