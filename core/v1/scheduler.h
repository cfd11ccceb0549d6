#pragma once
// Scheduler: vLLM V1's scheduler, exactly, at v0.7.2 (vllm/v1/core/scheduler.py, spec §9), at
// v0.8.5.post1 (vllm/v1/core/sched/scheduler.py, §11) or at v0.20.1 (the same file, and
// async_scheduler.py; shared/spec/vllm-0.20-semantics.md §8-§9), as the profile's V1Policy says:
// running requests first under a token budget (and the release's chunk caps), preemption of the
// last running request (v0.20's priority policy: of the largest (priority, arrival time)), FCFS or
// priority admission of waiting requests with prefix-cache hits (v0.20: only when the whole
// sequence fits, with scheduler_reserve_full_isl), no admission in a step that preempted, and
// update_from_output with the release's stop checks. At v0.20 the outputs of several steps may be
// in flight (EngineCore's batch queue): update_from_output applies the oldest.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/hot.h"
#include "core/common/request.h"
#include "core/common/ring_deque.h"
#include "core/common/step_buckets.h"
#include "core/engine_api.h"
#include "core/v1/kv_cache_manager.h"
#include "core/v1/kv_connector.h"
#include "core/v1/v1_policy.h"

namespace kvsim {

/// Running totals since construction. Every field counts tokens or events as named.
struct SchedulerStats {
  std::int64_t prefix_queries_tokens = 0;  // request.num_tokens at every lookup (vLLM's queries)
  std::int64_t prefix_hits_tokens =
      0;  // hit tokens used at every lookup (after the last-block rule)
  std::int64_t num_preemptions = 0;
  std::int64_t num_steps = 0;
};

/// vLLM's connector_prefix_cache_stats (PrefixCacheStats of the KV connector's hits), since the
/// last take. Tokens as named; `reset` once reset_prefix_cache(reset_connector) succeeded.
struct ConnectorCacheStats {
  std::int64_t requests = 0, queries = 0, hits = 0;  // first lookups of a request
  std::int64_t preempted_requests = 0, preempted_queries = 0, preempted_hits = 0;
  bool reset = false;
};

/// One request of a step in flight (vLLM v0.20): its scheduled entry, what update_from_output
/// needs of it (request is nullptr once the request finished).
using InFlightRequest = ScheduledRequest;

class Scheduler final : public EngineCore {
 public:
  /// The scheduler of `profile` (a V1 profile: its V1Policy is v1_policy(profile)).
  Scheduler(const SchedulerConfig& config, const KVCacheConfig& kv_config,
            Profile profile = Profile::kVllm072, BlockHashTable::BucketHashFn hash_fn = nullptr);

  Profile profile() const override { return profile_; }
  const V1Policy& policy() const { return kv_.policy(); }

  /// Queues a new request (status WAITING) at the back of waiting (priority policy: in order).
  /// The caller owns `request` and keeps it alive until it is reported finished
  /// (update_from_output or finish_requests).
  void add_request(Request& request) override;

  /// One scheduling step into `out` (cleared first). O(running + admitted); no heap allocation
  /// once the vectors have reached their high-water marks.
  void schedule(SchedulerOutput& out) override;

  /// Advances every scheduled request by its scheduled tokens; a request that caught up appends
  /// its `sampled_token` and is checked for stop (length, EOS, stop tokens). Finished requests
  /// are freed, dropped from running and reported in the next schedule(). Replaces `outputs`.
  /// v0.20: applies the oldest step in flight (nothing when none is).
  void update_from_output(std::vector<RequestOutput>& outputs) override;

  /// vLLM's finish_requests(id, FINISHED_ABORTED) for one request; false if it is not live.
  bool abort_request(Request& request) override;

  /// vLLM v0.20's reset_prefix_cache(reset_running_requests, reset_connector): with the flag
  /// every running request is preempted first (last first; an in-flight token of theirs is
  /// dropped by the async scheduler). False when the cache could not be reset. With
  /// reset_running_requests and a cache that still cannot be reset (blocks held for a
  /// connector's load) vLLM raises: step_error() says so.
  bool reset_prefix_cache(bool reset_running_requests, bool reset_connector = false);

  // ---- KV connector (vLLM v0.20; core/v1/kv_connector.h) ----
  /// Plugs `connector` in (nullptr: none), before the first request. Not owned.
  void set_connector(KVConnector* connector) { connector_ = connector; }
  KVConnector* connector() const { return connector_; }
  /// The worker's report for the step update_from_output applies next (spans valid until then).
  void set_connector_output(const ConnectorOutput& output) { connector_output_ = output; }
  /// vLLM's skipped_waiting queue (requests loading, or skipped for a deferred lookup).
  const RingDeque<Request*>& skipped_waiting() const { return skipped_waiting_; }
  /// Finished requests whose blocks are held for the connector (a delayed free), in finishing
  /// order; they leave when the worker reports them (finished_sending / finished_recving).
  std::span<Request* const> held() const { return held_; }
  /// Requests whose held blocks the last update_from_output freed (the caller may forget them).
  std::span<Request* const> released() const { return released_; }
  /// Requests whose load finished and that the waiting loop has not promoted yet.
  std::span<Request* const> finished_recving_pending() const { return finished_recving_; }
  /// A request the last schedule() promoted out of WAITING_FOR_REMOTE_KVS: group 0's table
  /// entries [first_cached, end_cached) got their hashes in the promotion, after which it had
  /// num_computed_tokens (the last-token rule applied).
  struct Promotion {
    Request* request = nullptr;
    std::int32_t first_cached = 0, end_cached = 0;
    std::int64_t num_computed_tokens = 0;
  };
  std::span<const Promotion> promoted() const { return promoted_; }
  /// The connector's prefix-cache stats since the last call (then zeroed).
  ConnectorCacheStats take_connector_cache_stats();
  /// Steps scheduled and not yet applied by update_from_output (v0.20), oldest first.
  std::size_t num_steps_in_flight() const { return inflight_count_; }
  /// The requests of the oldest step in flight, in scheduling order (empty when none).
  std::span<const InFlightRequest> oldest_in_flight() const;

  /// The scheduler's full-hit rule on the manager, without a scheduler step: lookup, allocate and
  /// cache the rest of the prompt (a prompt larger than the pool: the longest prefix that fits
  /// beside its hits), then free (tail first). Returns the hit tokens counted by the lookup.
  std::int64_t cache_only_request(Request& request) override;
  /// Reserves the block table and hash list for `max_total_tokens` plus preallocation and
  /// lookahead.
  void reserve_request(Request& request, std::int64_t max_total_tokens) override;

  std::span<Request* const> running() const override { return running_; }
  const RingDeque<Request*>& waiting() const { return waiting_; }
  /// vLLM's waiting and skipped_waiting queues (the latter only with a KV connector).
  std::int64_t num_waiting() const override {
    return static_cast<std::int64_t>(waiting_.size() + skipped_waiting_.size());
  }
  /// The request the waiting loop looks at first.
  const Request* first_waiting() const override {
    if (!skipped_waiting_.empty()) [[unlikely]]
      return waiting_queue_to_schedule_front();
    return waiting_.empty() ? nullptr : waiting_.front();
  }
  /// vLLM's has_finished_requests: requests finished since the last schedule() (which lists
  /// them to the worker).
  bool has_finished_requests() const { return !finished_ids_.empty(); }
  KVPoolStats pool_stats() const override;
  /// Walks the running requests' tables: a shared prefix (ref_cnt > 1) counts once as token
  /// states; a request's own blocks split into computed, still-to-fill and never-filled slots;
  /// the null block is never-filled, once; null entries of sliding-window tables hold nothing.
  /// Several KV cache groups: every group's tables, each block once.
  KVBreakdown kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const override;
  /// The same walk, each group's share into `by_group` (a block counts in the group whose table
  /// holds it; a free cached block in the group of its cache key).
  KVBreakdown kv_breakdown_by_group(std::span<const std::int64_t> final_kv_tokens,
                                    std::span<KVGroupShare> by_group) const override;
  std::span<const BlockId> block_table(const Request& request) const override {
    return kv_.coordinator() ? std::span<const BlockId>(request.kv_groups[0].blocks)
                             : std::span<const BlockId>(request.blocks);
  }
  std::int32_t num_kv_cache_groups() const override { return kv_.num_groups(); }
  std::span<const BlockId> group_block_table(const Request& request,
                                             std::int32_t group) const override;
  void cached_blocks(std::vector<BlockId>& out) const override;
  bool set_kv_event_log(std::vector<KvEvent>* log) override {
    kv_.set_kv_event_log(log);
    return true;
  }
  KVCacheManager& kv_cache_manager() { return kv_; }
  const KVCacheManager& kv_cache_manager() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  const SchedulerStats& stats() const { return stats_; }

  /// Manager invariants over every live request, plus: no request both running and waiting,
  /// waiting requests hold no blocks, running ones are RUNNING. Returns the first violation.
  std::string find_violation() const override;

  /// Fast-forward (core/engine_api.h) for every release with one KV cache group of full
  /// attention and no connector, v0.20 on its synchronous loop; 0 otherwise
  /// (core/v1/scheduler_decode.cpp).
  std::int64_t decode_horizon(std::int64_t max_steps) const override;
  void advance_decode(std::int64_t k, std::span<KVPoolStats> pool_after) override;

 private:
  /// The first step j in [1, max_steps] whose update_from_output would stop `request` (a
  /// running request decoding), or max_steps + 1.
  std::int64_t steps_to_stop(const Request& request, std::int64_t max_steps) const;
  /// The KV cache group 0 table of a v0.20 request (the coordinator's), nullptr before v0.20.
  const KVGroupTable* decode_table(const Request& request) const;
  /// The next num_computed_tokens >= the request's at which its decode allocation may do
  /// something (exact before v0.20; a candidate that fits() tests again at v0.20).
  std::int64_t next_decode_candidate(const Request& request) const;
  /// advance_decode's scratch: each request's next allocation that leaves allocate_slots' fast
  /// path, by step.
  StepBuckets decode_due_;
  std::vector<std::int64_t> decode_base_;  // num_computed_tokens before the run, by position

  /// check_stop's decision for a request of `num_tokens` tokens, `num_outputs` of them outputs,
  /// whose last token is `last` (stops() on values; the fast-forward's scan asks it ahead).
  struct StopCheck {
    bool stop = false;
    bool stop_token = false;  // stopped by one of limits.stop_token_ids (the stop_reason)
    RequestStatus status = RequestStatus::kFinishedLengthCapped;
  };
  KVSIM_HOT StopCheck stop_check(const SamplingLimits& limits, std::int64_t num_tokens,
                                 std::int64_t num_outputs, Token last) const {
    const bool v020 = kv_.policy().stop_tokens_before_length;
    // v0.20: nothing stops a request before min_tokens outputs (asked only of a request that
    // would stop otherwise: the same answer, without the test on most calls).
    const auto below_min_tokens = [&] { return v020 && num_outputs < limits.min_tokens; };
    const bool at_length = num_tokens >= config_.max_model_len || num_outputs >= limits.max_tokens;
    if (!v020 && at_length) return {true, false, RequestStatus::kFinishedLengthCapped};
    if (!limits.ignore_eos && limits.eos_token_id && last == *limits.eos_token_id)
      return {!below_min_tokens(), false, RequestStatus::kFinishedStopped};
    for (const Token t : limits.stop_token_ids) {  // (a loop: most lists are empty)
      if (t != last) continue;
      if (below_min_tokens()) return {false, false, RequestStatus::kFinishedStopped};
      return {true, true, RequestStatus::kFinishedStopped};
    }
    // v0.20: stop tokens before the length limits
    return {v020 && at_length && !below_min_tokens(), false,
            RequestStatus::kFinishedLengthCapped};
  }
  /// vLLM's check_stop: whether the request stops after its last token, and with which status
  /// (sets its stop_reason for a stop token). v0.20: min_tokens first, then EOS and stop tokens,
  /// then the length limits; before: the length limits first.
  bool stops(Request& request, RequestStatus& status) const;
  /// stops(), then finish() when it does.
  bool check_stop(Request& request);
  void finish(Request& request, RequestStatus status);
  void preempt_last(SchedulerOutput& out);
  /// v0.20: frees `victim` (running, already out of running_) and queues it again.
  void preempt(Request& victim, SchedulerOutput* out);
  /// Puts a request into waiting: FCFS at the back (or the front), priority in order.
  void enqueue_waiting(Request& request, bool front);
  void schedule_waiting(SchedulerOutput& out, std::int64_t& budget, std::int64_t max_chunk);
  /// vLLM v0.20's schedule(): running loop (priority preemption), waiting loop (reserve_full_isl,
  /// chunked prefill off), then the step goes in flight.
  void schedule_v020(SchedulerOutput& out);
  template <bool async>
  KVSIM_HOT void schedule_running_v020(SchedulerOutput& out, std::int64_t& budget,
                                       std::int64_t max_chunk);
  /// allocate_running_v020's answer (returned in registers).
  struct RunningAllocation {
    bool scheduled = false;
    std::int32_t unscheduled = 0;  // entries of this step taken out again (priority preemption)
    std::int64_t refund = 0;       // their tokens, back to the budget
  };
  template <bool async>
  RunningAllocation allocate_running_v020(SchedulerOutput& out, Request& req, std::int64_t n);
  template <bool kConnector>
  void schedule_waiting_v020(SchedulerOutput& out, std::int64_t& budget, std::int64_t max_chunk);
  // The connector's parts of the v0.20 scheduler (scheduler_connector.cpp).
  /// _select_waiting_queue_for_scheduling: skipped_waiting first (FCFS), or the queue whose head
  /// runs first (priority).
  RingDeque<Request*>& waiting_queue_to_schedule();
  /// f(const Request*) for every request whose tables hold blocks: the running ones, then (with
  /// a KV connector) the finished ones held for it and the waiting ones holding blocks of a load.
  template <class F>
  void for_each_table_holder(F f) const {
    for (const Request* r : running_) f(r);
    if (connector_ == nullptr) [[likely]]
      return;
    for (const Request* r : held_) f(r);
    for (const Request* r : skipped_waiting_)
      if (!r->kv_groups.empty() && !r->kv_groups[0].blocks.empty()) f(r);
  }
  /// The front of waiting_queue_to_schedule() (skipped_waiting is not empty).
  const Request* waiting_queue_to_schedule_front() const;
  /// _try_promote_blocked_waiting_request for a WAITING_FOR_REMOTE_KVS request: false while its
  /// load is not reported; else its blocks are cached and it becomes WAITING / PREEMPTED.
  bool try_promote(Request& request);
  /// Asks the connector after the GPU lookup: false = skip the request (ask again later).
  bool connector_lookup(Request& request, std::int64_t local_hits, std::int64_t& external,
                        bool& load_async);
  /// After a successful allocation: update_state_after_alloc and the connector's stats.
  void connector_allocated(Request& request, std::int64_t local_hits, std::int64_t external);
  /// The step's connector metadata and the requests skipped in it back at the queue's front.
  void connector_step_end(SchedulerOutput& out);
  /// _connector_finished: true when the request's blocks must stay (a delayed free).
  bool connector_finished(Request& request);
  /// _update_from_kv_xfer_finished with the worker's report.
  void apply_connector_output();
  /// Puts a request into skipped_waiting (priority: in order).
  void enqueue_skipped(Request& request);
  /// _mamba_block_aligned_split: with a mamba group in 'align' mode, a prefill chunk of `n` > 0
  /// tokens (after `hits` new hit tokens) ends on a block boundary, or at the last one.
  std::int64_t mamba_aligned_split(const Request& req, std::int64_t n, std::int64_t hits) const;
  /// Appends a scheduled entry (with the manager's new blocks of every group when `allocated`)
  /// and advances the request as _update_after_schedule does (`async`: the scheduling mode).
  void add_scheduled_v020(SchedulerOutput& out, Request& req, std::int64_t num_tokens,
                          std::int64_t num_computed, ScheduledRequest::Kind kind, bool allocated,
                          bool async);
  void update_in_scheduling_order(std::vector<RequestOutput>& outputs);
  /// update_in_scheduling_order's walk of the step that ends, for one scheduling mode.
  template <bool async>
  KVSIM_HOT void apply_outputs(std::span<const InFlightRequest> step,
                               std::vector<RequestOutput>& outputs);
  std::int64_t cache_only_request_v020(Request& request);
  /// kv_breakdown; `by_group` empty or one share per group.
  KVBreakdown breakdown(std::span<const std::int64_t> final_kv_tokens,
                        std::span<KVGroupShare> by_group) const;
  KVBreakdown kv_breakdown_groups(std::span<const std::int64_t> final_kv_tokens,
                                  std::span<KVGroupShare> by_group) const;
  /// Forgets a finished request in the steps in flight.
  void drop_in_flight(const Request& request);
  /// Frees a finished request's blocks and hash references (vLLM's _free_blocks).
  void free_blocks(Request& request);

  SchedulerConfig config_;
  Profile profile_;
  KVCacheManager kv_;
  std::vector<Request*> running_;
  RingDeque<Request*> waiting_;
  std::vector<Request*> next_running_;      // scratch for update_from_output
  std::vector<std::int64_t> finished_ids_;  // since the last schedule()
  std::vector<BlockId> hits_;               // scratch for get_computed_blocks
  GroupBlockLists group_hits_;              // v0.20: the same per group
  // kv_breakdown's scratch: a block's stamp == epoch once counted in this call.
  mutable std::vector<std::uint32_t> stamp_;
  mutable std::uint32_t epoch_ = 0;
  struct GroupTally {
    KVGroupShare share;
    std::int64_t hashed = 0;  // blocks of the share that carry a hash
  };
  mutable std::vector<GroupTally> group_scratch_;  // kv_breakdown_groups, by group
  SchedulerStats stats_;
  // A schedule() whose num_scheduled_tokens no update_from_output has consumed (and reset) yet.
  bool scheduled_unconsumed_ = false;
  // v0.20: the steps in flight, a ring of buffers (oldest at inflight_head_). A buffer keeps the
  // length of the longest step it held (never value-initialized again); `size` is its step's.
  struct InFlightStep {
    std::vector<InFlightRequest> buffer;
    std::size_t size = 0;
    std::span<InFlightRequest> entries() { return {buffer.data(), size}; }
    std::span<const InFlightRequest> entries() const { return {buffer.data(), size}; }
  };
  std::vector<InFlightStep> inflight_;
  std::size_t inflight_head_ = 0;
  std::size_t inflight_count_ = 0;
  /// The ring's index of the k-th step from the oldest (k < inflight_.size(); no division).
  std::size_t in_flight_slot(std::size_t k) const {
    const std::size_t i = inflight_head_ + k;
    return i < inflight_.size() ? i : i - inflight_.size();
  }
  std::vector<std::int32_t> common_prefix_;  // schedule_v020's scratch
  // KV connector (null: none; every connector branch below is taken once per step at most,
  // except per admitted request inside the connector's own waiting loop).
  KVConnector* connector_ = nullptr;
  RingDeque<Request*> skipped_waiting_;
  std::vector<Request*> step_skipped_;       // requests skipped in this step, in visiting order
  std::vector<Request*> finished_recving_;   // loads reported, promotion pending
  std::vector<Request*> held_;               // finished, blocks held (delayed free)
  std::vector<Request*> released_;           // held requests freed by the last update
  std::vector<Promotion> promoted_;          // promotions of the last schedule()
  ConnectorOutput connector_output_;
  ConnectorCacheStats connector_stats_;
  std::int64_t connector_queries_ = 0;  // the current request's lookup (0: none)
  /// v0.20: vLLM's exception in the last schedule() or update_from_output ("" if none).
  const char* step_error_ = "";

 public:
  /// v0.20: "" normally, else the exception vLLM raises out of the last schedule() or
  /// update_from_output (the manager's admission-cap defect of shared/spec/vllm-0.20-semantics.md
  /// §12; an output placeholder count going negative). The state after it is unspecified.
  const char* step_error() const override { return step_error_; }
};

}  // namespace kvsim
