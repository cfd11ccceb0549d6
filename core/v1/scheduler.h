#pragma once
// Scheduler: vLLM V1's scheduler, exactly, at v0.7.2 (vllm/v1/core/scheduler.py, spec §9) or at
// v0.8.5.post1 (vllm/v1/core/sched/scheduler.py, §11), as the profile's V1Policy says: running
// requests first under a token budget (and v0.8.5's chunk caps), preemption of the last running
// request, FCFS admission of waiting requests with prefix-cache hits (the full-hit last-block
// rule), no admission in a step that preempted, and update_from_output with vLLM's stop checks.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/request.h"
#include "core/common/ring_deque.h"
#include "core/engine_api.h"
#include "core/v1/kv_cache_manager.h"
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

class Scheduler final : public EngineCore {
 public:
  /// The scheduler of `profile` (a V1 profile: its V1Policy is v1_policy(profile)).
  Scheduler(const SchedulerConfig& config, const KVCacheConfig& kv_config,
            Profile profile = Profile::kVllm072, BlockHashTable::BucketHashFn hash_fn = nullptr);

  Profile profile() const override { return profile_; }
  const V1Policy& policy() const { return kv_.policy(); }

  /// Queues a new request (status WAITING) at the back of waiting. The caller owns `request` and
  /// keeps it alive until it is reported finished (update_from_output or finish_requests).
  void add_request(Request& request) override;

  /// One scheduling step into `out` (cleared first). O(running + admitted); no heap allocation
  /// once the vectors have reached their high-water marks.
  void schedule(SchedulerOutput& out) override;

  /// Advances every scheduled request by its scheduled tokens; a request that caught up appends
  /// its `sampled_token` and is checked for stop (length, EOS, stop tokens). Finished requests
  /// are freed, dropped from running and reported in the next schedule(). Replaces `outputs`.
  void update_from_output(std::vector<RequestOutput>& outputs) override;

  /// vLLM's finish_requests(id, FINISHED_ABORTED) for one request; false if it is not live.
  bool abort_request(Request& request) override;

  /// The scheduler's full-hit rule on the manager, without a scheduler step: lookup, allocate and
  /// cache the rest of the prompt (a prompt larger than the pool: the longest prefix that fits
  /// beside its hits), then free (tail first). Returns the hit tokens counted by the lookup.
  std::int64_t cache_only_request(Request& request) override;
  /// Reserves the block table and hash list for `max_total_tokens` plus preallocation and
  /// lookahead.
  void reserve_request(Request& request, std::int64_t max_total_tokens) override;

  std::span<Request* const> running() const override { return running_; }
  const RingDeque<Request*>& waiting() const { return waiting_; }
  std::int64_t num_waiting() const override { return static_cast<std::int64_t>(waiting_.size()); }
  const Request* first_waiting() const override {
    return waiting_.empty() ? nullptr : waiting_.front();
  }
  KVPoolStats pool_stats() const override;
  /// Walks the running requests' tables: a shared prefix (ref_cnt > 1) counts once as token
  /// states; a request's own blocks split into computed, still-to-fill and never-filled slots;
  /// the null block is never-filled, once; null entries of sliding-window tables hold nothing.
  KVBreakdown kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const override;
  std::span<const BlockId> block_table(const Request& request) const override {
    return request.blocks;
  }
  void cached_blocks(std::vector<BlockId>& out) const override;
  KVCacheManager& kv_cache_manager() { return kv_; }
  const KVCacheManager& kv_cache_manager() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  const SchedulerStats& stats() const { return stats_; }

  /// Manager invariants over every live request, plus: no request both running and waiting,
  /// waiting requests hold no blocks, running ones are RUNNING. Returns the first violation.
  std::string find_violation() const override;

 private:
  bool check_stop(Request& request);
  void finish(Request& request, RequestStatus status);
  void preempt_last(SchedulerOutput& out);

  SchedulerConfig config_;
  Profile profile_;
  KVCacheManager kv_;
  std::vector<Request*> running_;
  RingDeque<Request*> waiting_;
  std::vector<Request*> next_running_;      // scratch for update_from_output
  std::vector<std::int64_t> finished_ids_;  // since the last schedule()
  std::vector<BlockId> hits_;               // scratch for get_computed_blocks
  // kv_breakdown's scratch: a block's stamp == epoch once counted in this call.
  mutable std::vector<std::uint32_t> stamp_;
  mutable std::uint32_t epoch_ = 0;
  SchedulerStats stats_;
  // A schedule() whose num_scheduled_tokens no update_from_output has consumed (and reset) yet.
  bool scheduled_unconsumed_ = false;
};

}  // namespace kvsim
