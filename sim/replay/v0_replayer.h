#pragma once
// V0Replayer: the op protocol of vLLM V0 (shared/spec/ops-format-v0.md) against kvsim's V0
// BlockManager (bm mode, bm_init) or Scheduler (sched mode, sched_init), one JSON result line
// per op (Replayer). A vLLM error (VllmError) answers an error line; in sched mode it also kills
// the engine: every later op but an init or a comment answers an error until the next init.
// Files: v0_replayer.cpp (dispatch, init, ops of both modes, snapshot), v0_replayer_bm.cpp,
// v0_replayer_sched.cpp.

#include <xxhash.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/v0/block_manager.h"
#include "core/v0/scheduler.h"
#include "sim/replay/replayer.h"

namespace kvsim {

class V0Replayer final : public Replayer {
 public:
  explicit V0Replayer(ReplayOptions options = {});
  ~V0Replayer() override;

 private:
  struct StrHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const { return XXH3_64bits(s.data(), s.size()); }
  };
  using GroupMap = std::unordered_map<std::string, v0::SequenceGroup*, StrHash, std::equal_to<>>;
  class UpdateSamples;

  void dispatch(std::string_view op, JsonWriter& w) override;
  void dispatch_mode_op(std::string_view op, JsonWriter& w);
  void check_all_invariants() const override;
  void reset();

  // v0_replayer.cpp: init and the ops of both modes
  void op_bm_init(JsonWriter& w);
  void op_sched_init(JsonWriter& w);
  void op_add_seq_group(JsonWriter& w);
  void op_append_token(JsonWriter& w);
  void op_computed(JsonWriter& w);
  void op_get_block_table(JsonWriter& w);
  void op_snapshot(JsonWriter& w);
  void write_device(JsonWriter& w, v0::Device d) const;
  // v0_replayer_bm.cpp
  void op_can_allocate(JsonWriter& w);
  void op_allocate(JsonWriter& w);
  void op_can_append_slots(JsonWriter& w);
  void op_append_slots(JsonWriter& w);
  void op_can_swap_out(JsonWriter& w);
  void op_swap(JsonWriter& w, bool in);
  void op_can_swap_in(JsonWriter& w);
  void op_fork(JsonWriter& w);
  void op_free(JsonWriter& w);
  void op_remove_group(JsonWriter& w);
  void op_set_status(JsonWriter& w);
  void op_access(JsonWriter& w);
  void op_common_computed(JsonWriter& w);
  void op_num_cached_tokens(JsonWriter& w);
  // v0_replayer_sched.cpp
  void op_schedule(JsonWriter& w);
  void op_update(JsonWriter& w);
  void op_finish(JsonWriter& w);
  void op_abort(JsonWriter& w);
  void write_queues(JsonWriter& w);  // also stamps every queued group with queue_stamp_
  void drop_finished(const std::vector<v0::SequenceGroup*>& groups);

  // objects and lookups
  v0::BlockManager& manager();
  v0::SequenceGroup& group(std::string_view id);
  v0::Sequence& seq(std::int64_t id);
  v0::Sequence& seq_field(std::string_view key) { return seq(get_int(key)); }
  v0::Sequence& new_seq(v0::SeqId id, std::span<const Token> prompt);  // a WAITING sequence
  /// Forgets a tracked group and its sequences; a group vLLM still queues (a `finish` of a
  /// waiting or swapped sequence) stays alive as an orphan until the next init.
  void drop_group(v0::SequenceGroup& g, bool still_queued = false);
  void require_bm(const char* op) const;
  void require_sched(const char* op) const;
  double get_double_or(std::string_view key, double dflt) const;
  void write_ids(JsonWriter& w, std::span<const BlockId> ids) const;
  void write_pairs(JsonWriter& w, const std::vector<v0::BlockIdPair>& pairs) const;
  void write_free(JsonWriter& w);
  void write_tables_of(JsonWriter& w, const v0::SequenceGroup& g, bool running_only);
  void write_seq_key(JsonWriter& w, v0::SeqId id);

  enum class Mode : std::uint8_t { kNone, kBm, kSched } mode_ = Mode::kNone;
  std::optional<std::string> dead_;  // sched mode: the error that killed the engine
  bool tainted_ = false;             // bm mode: state unspecified after a vLLM error
  std::unique_ptr<v0::BlockManager> bm_;
  std::unique_ptr<v0::Scheduler> sched_;
  double bm_now_ = 0;          // bm mode's clock (sched mode: the scheduler's)
  v0::SeqId bm_next_seq_ = 0;  // bm mode's seq_id counter
  GroupMap groups_;            // tracked groups by request id
  std::unordered_map<v0::SeqId, v0::Sequence*> seqs_;  // their sequences by seq id
  std::vector<v0::SequenceGroup*> orphans_;  // untracked groups still in a scheduler queue
  bool schedule_pending_ = false;
  std::uint64_t queue_stamp_ = 0;

  // bm mode's object pools (sched mode uses the scheduler's)
  std::vector<std::unique_ptr<v0::SequenceGroup>> group_pool_;
  std::vector<v0::SequenceGroup*> free_groups_;
  std::vector<std::unique_ptr<v0::Sequence>> seq_pool_;
  std::vector<v0::Sequence*> free_seqs_;

  // scratch
  std::vector<Token> tokens_;
  std::vector<v0::BlockIdPair> pairs_;
  std::vector<BlockId> blocks_;
  std::vector<const v0::Sequence*> seq_list_;
  std::vector<v0::SequenceGroup*> group_list_;
  std::vector<std::string> finished_ids_;
  v0::StepOutputs step_;
  char num_buf_[24];
};

}  // namespace kvsim
