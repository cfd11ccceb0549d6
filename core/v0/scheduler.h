#pragma once
// Scheduler: vLLM V0's Scheduler (vllm/core/scheduler.py at v0.7.2) and the engine step around it
// (LLMEngine._process_model_outputs, sync path): waiting / running / swapped queues, the default
// and chunked-prefill policies, FCFS or priority, swap or recompute preemption, ignored requests,
// stop checks. It drives a BlockManager and implements EngineCore for the simulator (a kvsim
// Request is one sequence group). Spec: shared/spec/vllm-v0-semantics.md.
//
// Two levels of API: the group level (what vLLM's Scheduler offers; the op-trace replayer uses
// it) and EngineCore (scheduler_engine.cpp). A vLLM exception is a VllmError; the engine is then
// in vLLM's broken state and must not be used further.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/ring_deque.h"
#include "core/common/step_buckets.h"
#include "core/engine_api.h"
#include "core/v0/block_manager.h"
#include "core/v0/scheduler_outputs.h"
#include "core/v0/v0_config.h"

namespace kvsim::v0 {

/// What the model produced for the step scheduled last: a token for every sampling sequence,
/// and (v0.6.3-style parallel sampling, op protocol `forks`) children to fork.
class SampleSource {
 public:
  struct Fork {
    SeqId child_id = -1;  // -1: the engine's counter
    Token token = 0;
    Request* request = nullptr;  // the engine's forks: the Request whose tokens the child uses
  };
  virtual ~SampleSource() = default;
  /// The token `seq` of `g` samples (called just before it is appended).
  virtual Token token(const SequenceGroup& g, const Sequence& seq) = 0;
  /// The children `parent` forks in this step, in order (into `out`, cleared by the caller).
  virtual void forks(const SequenceGroup& /*g*/, const Sequence& /*parent*/,
                     std::vector<Fork>& /*out*/) {}
};

class Scheduler final : public EngineCore {
 public:
  /// VllmError(ValueError) if v0_config_error(config) is not empty.
  explicit Scheduler(const V0Config& config);
  ~Scheduler() override;

  // ---- group level (vLLM's Scheduler) -------------------------------------------------------

  /// A pooled group with no sequences; the caller adds them (add_initial) then add_seq_group.
  SequenceGroup& create_group(std::string_view request_id, Request* request, SamplingParams params,
                              double arrival_time, std::int64_t priority);
  /// A pooled WAITING sequence registered with the block manager. `id` < 0 takes the counter's
  /// next id; an explicit id moves the counter past it.
  Sequence& create_seq(SeqId id, std::span<const Token> prompt, Request* request = nullptr);
  /// add_seq_group: appends to waiting.
  void add_seq_group(SequenceGroup& g) { waiting_.push_back(&g); }
  /// schedule(): _schedule() then the per-group metadata pass (block tables, access times,
  /// computed blocks, do_sample) and mark_blocks_as_computed. The result stays valid until the
  /// next schedule(). Advances nothing but the queues; the clock is set_clock()'s.
  const SchedulerOutputs& schedule();
  /// The engine step for the last schedule() (spec §6): computed tokens, sampled tokens (and
  /// forks), stop checks, frees; free_finished_seq_groups() if a group finished.
  void process_model_outputs(SampleSource& samples, StepOutputs& out);
  /// abort_seq_group for one group: removed from its queue (waiting, running, swapped), its
  /// unfinished sequences FINISHED_ABORTED and freed. False if it is in no queue.
  bool abort_group(SequenceGroup& g);
  /// free_seq, fork_seq, free_finished_seq_groups.
  void free_seq(Sequence& seq) { bm_.free(seq); }
  void fork_seq(Sequence& parent, Sequence& child) { bm_.fork(parent, child); }
  void free_finished_seq_groups();
  /// The group leaves the caller's hands: its objects return to the pools at the next
  /// schedule() (so the last outputs stay readable). Precondition: in no queue.
  void retire_group(SequenceGroup& g);
  /// get_and_reset_finished_requests_ids into `out` (replaced).
  void take_finished_request_ids(std::vector<std::string>& out);

  const RingDeque<SequenceGroup*>& waiting() const { return waiting_; }
  const RingDeque<SequenceGroup*>& running_groups() const { return running_; }
  const RingDeque<SequenceGroup*>& swapped() const { return swapped_; }
  BlockManager& block_manager() { return bm_; }
  const BlockManager& block_manager() const { return bm_; }
  const V0Config& config() const { return config_; }
  /// The time.time() the scheduler reads (the op clock; the engine's step count).
  double now() const { return now_; }
  void set_clock(double now) { now_ = now; }
  const SchedulerOutputs& last_outputs() const { return out_; }
  std::int64_t num_cumulative_preemption() const { return num_cumulative_preemption_; }

  // ---- EngineCore (scheduler_engine.cpp) -----------------------------------------------------

  Profile profile() const override;
  void add_request(Request& request) override;
  /// Ticks the engine clock by 1, then schedule(). A vLLM exception (CPU swap space exhausted)
  /// becomes EngineAborted (the victim's request, the CPU pool's size): the engine is dead.
  void schedule(SchedulerOutput& out) override;
  void update_from_output(std::vector<RequestOutput>& outputs) override;
  bool abort_request(Request& request) override;
  bool supports_forking() const override { return true; }
  void add_forking_request(Request& parent, std::span<Request* const> children) override;
  std::int64_t cache_only_request(Request& request) override;
  std::span<Request* const> running() const override { return running_requests_; }
  std::int64_t num_waiting() const override { return static_cast<std::int64_t>(waiting_.size()); }
  std::int64_t num_swapped() const override { return static_cast<std::int64_t>(swapped_.size()); }
  const Request* first_waiting() const override;
  KVPoolStats pool_stats() const override;
  KVBreakdown kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const override;
  std::span<const BlockId> block_table(const Request& request) const override;
  void cached_blocks(std::vector<BlockId>& out) const override;
  /// Fast-forward (scheduler_decode.cpp): runs of the default or chunked-prefill policy (FCFS)
  /// in which every running group is one sequence decoding, nothing is swapped, and the waiting
  /// head stays where it is (no request waits, the budget keeps it out, or can_allocate says
  /// LATER throughout). With prefix caching the LATER bound assumes that every block filled in
  /// the run may free one by deduplication, so the horizon may end a few steps early there.
  std::int64_t decode_horizon(std::int64_t max_steps) const override;
  void advance_decode(std::int64_t k, std::span<KVPoolStats> pool_after) override;
  /// Block manager invariants plus queue consistency (statuses, tables, no group twice).
  std::string find_violation() const override;
  /// Tests only: the scheduler's clock, delay and budget bookkeeping, its queues (each group's
  /// sequences: id, status, stage, tokens, computed count) and the block manager's
  /// state_string(): two schedulers in the same state give the same string.
  std::string state_string() const;

 private:
  struct PrefillOutputs;
  struct RunningOutputs;
  struct SwappedOutputs;
  struct Budget;

  // scheduler_policies.cpp
  void schedule_default(SchedulerOutputs& out);
  void schedule_chunked_prefill(SchedulerOutputs& out);
  static void finish_outputs(const Budget& budget, const PrefillOutputs& prefills,
                             const RunningOutputs& running, const SwappedOutputs& swapped,
                             SchedulerOutputs& out);
  void schedule_running(Budget& budget, bool enable_chunking, RunningOutputs& ret);
  void schedule_swapped(Budget& budget, bool enable_chunking, SwappedOutputs& ret);
  void schedule_prefills(Budget& budget, bool enable_chunking, PrefillOutputs& ret);
  void schedule_priority_preemption(Budget& budget);
  void get_num_new_tokens(SequenceGroup& g, SeqStatus status, bool enable_chunking,
                          const Budget& budget, std::int64_t& uncached, std::int64_t& cached);
  /// get_num_new_tokens with each PREFILL sequence's cached-token count from `cached_of`
  /// (scheduler_internal.h).
  template <class CachedOf>
  void count_new_tokens(const SequenceGroup& g, SeqStatus status, bool enable_chunking,
                        const Budget& budget, CachedOf&& cached_of, std::int64_t& uncached,
                        std::int64_t& cached) const;
  std::int64_t prompt_limit() const;
  bool passed_delay(double now);
  // scheduler.cpp
  PreemptionMode preempt(SequenceGroup& g, std::vector<BlockIdPair>& blocks_to_swap_out);
  void allocate_and_set_running(SequenceGroup& g);
  void append_slots(SequenceGroup& g, std::vector<BlockIdPair>& blocks_to_copy);
  void swap_in(SequenceGroup& g, std::vector<BlockIdPair>& blocks_to_swap_in);
  void recycle_retired();
  SeqId take_seq_id(SeqId explicit_id);
  // scheduler_step.cpp
  void process_group(SequenceGroup& g, SampleSource& samples, StepOutputs& out);
  // scheduler_decode.cpp
  /// The first step (1-based) of a run whose output stops the group's sequence, or
  /// max_steps + 1.
  std::int64_t steps_to_stop(const SequenceGroup& g, std::int64_t max_steps) const;
  /// The first token slot of `seq`'s table whose append allocates a block or (caching) fills one.
  std::int64_t next_decode_event(const Sequence& seq) const;
  /// How many of the steps 1 .. max_steps keep can_allocate at LATER for a head that needs
  /// `threshold` free blocks (its blocks + the watermark).
  std::int64_t steps_head_stays_later(std::int64_t threshold, std::int64_t max_steps) const;
  // scheduler_views.cpp
  /// pool_stats() without num_table_blocks (O(1)).
  KVPoolStats gpu_pool_stats() const;
  // scheduler_engine.cpp
  void refresh_running_requests();
  SequenceGroup* group_of(const Request& r) const;
  void set_group_of(const Request& r, SequenceGroup* g);
  /// The sequence of `r` (its group's first or a forked child), or nullptr.
  Sequence* seq_of(const Request& r) const;
  void add_scheduled(const ScheduledSeqGroup& s, Sequence& seq, SchedulerOutput& out);
  /// The requests still to fork from `g` end with it, with `status`.
  void finish_unforked(SequenceGroup& g, RequestStatus status);

  V0Config config_;
  BlockManager bm_;
  RingDeque<SequenceGroup*> waiting_, running_, swapped_;
  double now_ = 0;
  double prev_time_ = 0;
  bool prev_prompt_ = false;
  double last_prompt_latency_ = 0;
  std::int64_t num_cumulative_preemption_ = 0;
  const SequenceGroup* swap_victim_ = nullptr;  // the group a failed swap-out was for
  SeqId next_seq_id_ = 0;
  std::uint64_t budget_mark_ = 0;
  std::vector<std::string> finished_ids_;
  std::vector<std::int64_t> finished_request_indices_;  // engine: the same, as Request indices

  SchedulerOutputs out_;
  std::unique_ptr<PrefillOutputs> prefills_;
  std::unique_ptr<RunningOutputs> running_out_;
  std::unique_ptr<SwappedOutputs> swapped_in_;
  std::vector<SequenceGroup*> scratch_groups_;
  std::vector<const Sequence*> scratch_seqs_;
  std::vector<BlockId> scratch_blocks_;
  std::vector<std::pair<Sequence*, Sequence*>> step_pairs_;  // (seq, parent) of one group
  std::vector<SampleSource::Fork> step_forks_;
  std::vector<Sequence*> step_parents_;

  // pools
  std::vector<std::unique_ptr<SequenceGroup>> group_pool_;
  std::vector<SequenceGroup*> free_groups_;
  std::vector<std::unique_ptr<Sequence>> seq_pool_;
  std::vector<Sequence*> free_seqs_;
  std::vector<SequenceGroup*> retired_;

  // engine (EngineCore) state
  std::vector<SequenceGroup*> group_by_request_;  // by Request::index()
  std::vector<Request*> running_requests_;
  StepOutputs step_out_;

  // advance_decode's scratch: each running position's table fill at the run's start, its
  // sequence, and the positions due at each step.
  std::vector<std::int64_t> decode_base_;
  std::vector<Sequence*> decode_seqs_;
  StepBuckets decode_due_;
  std::vector<BlockIdPair> decode_cows_;
  mutable std::vector<std::int64_t> horizon_free_delta_;  // decode_horizon's per-step changes
};

}  // namespace kvsim::v0
