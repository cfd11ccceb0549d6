#pragma once
// Scheduler: vLLM v0.7.2's vllm/v1/core/scheduler.py (spec §9): running requests first under a
// token budget, preemption of the last running request, FCFS admission of waiting requests with
// prefix-cache hits (the full-hit last-block rule), no admission in a step that preempted, and
// update_from_output with vLLM's stop checks.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/v1/kv_cache_manager.h"
#include "core/common/request.h"
#include "core/common/ring_deque.h"

namespace kvsim {

struct SchedulerConfig {
  std::int64_t max_num_seqs = 256;
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t max_model_len = 8192;
};

/// One request scheduled in a step, in scheduling order.
struct ScheduledRequest {
  Request* request = nullptr;
  std::int64_t num_tokens = 0;           // tokens scheduled in this step
  std::int64_t num_computed_tokens = 0;  // before this step (the hits for new/resumed requests)
  std::int32_t num_new_blocks = 0;       // running requests: the last num_new_blocks of its table
  enum class Kind : std::uint8_t { kNew, kResumed, kRunning } kind = Kind::kRunning;
};

/// What schedule() decided. Reused across steps: its vectors keep their capacity.
struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;  // scheduling order (running first, then admissions)
  std::vector<Request*> preempted;          // in preemption order
  std::vector<std::int64_t> finished;       // request indices finished since the previous step
  std::int64_t total_num_scheduled_tokens = 0;
  std::int32_t num_common_prefix_blocks = 0;
  std::int64_t prefix_queries_tokens = 0;  // this step's lookups (see SchedulerStats)
  std::int64_t prefix_hits_tokens = 0;
};

/// One generated token (vLLM's EngineCoreOutput), produced by update_from_output.
struct RequestOutput {
  Request* request = nullptr;
  Token token = 0;
  bool finished = false;
};

/// Running totals since construction. Every field counts tokens or events as named.
struct SchedulerStats {
  std::int64_t prefix_queries_tokens = 0;  // request.num_tokens at every lookup (vLLM's queries)
  std::int64_t prefix_hits_tokens =
      0;  // hit tokens used at every lookup (after the last-block rule)
  std::int64_t num_preemptions = 0;
  std::int64_t num_steps = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, const KVCacheConfig& kv_config,
            BlockHashTable::BucketHashFn hash_fn = nullptr);

  /// Queues a new request (status WAITING) at the back of waiting. The caller owns `request` and
  /// keeps it alive until it is reported finished (update_from_output or finish_requests).
  void add_request(Request& request);

  /// One scheduling step into `out` (cleared first). O(running + admitted); no heap allocation
  /// once the vectors have reached their high-water marks.
  void schedule(SchedulerOutput& out);

  /// Advances every scheduled request by its scheduled tokens; a request that caught up appends
  /// its `sampled_token` and is checked for stop (length, EOS, stop tokens). Finished requests
  /// are freed, dropped from running and reported in the next schedule(). Replaces `outputs`.
  void update_from_output(std::vector<RequestOutput>& outputs);

  /// vLLM's finish_requests(id, FINISHED_ABORTED) for one request; false if it is not live.
  bool abort_request(Request& request);

  const std::vector<Request*>& running() const { return running_; }
  const RingDeque<Request*>& waiting() const { return waiting_; }
  std::int64_t num_unfinished_requests() const {
    return static_cast<std::int64_t>(running_.size() + waiting_.size());
  }
  KVCacheManager& kv_cache_manager() { return kv_; }
  const KVCacheManager& kv_cache_manager() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }
  const SchedulerStats& stats() const { return stats_; }

  /// Manager invariants over every live request, plus: no request both running and waiting,
  /// waiting requests hold no blocks, running ones are RUNNING. Returns the first violation.
  std::string find_violation() const;
  /// Aborts with the violation's message if find_violation() finds one.
  void check_invariants() const;

 private:
  bool check_stop(Request& request);
  void finish(Request& request, RequestStatus status);
  void preempt_last(SchedulerOutput& out);

  SchedulerConfig config_;
  KVCacheManager kv_;
  std::vector<Request*> running_;
  RingDeque<Request*> waiting_;
  std::vector<Request*> next_running_;      // scratch for update_from_output
  std::vector<std::int64_t> finished_ids_;  // since the last schedule()
  std::vector<BlockId> hits_;               // scratch for get_computed_blocks
  SchedulerStats stats_;
  // A schedule() whose num_scheduled_tokens no update_from_output has consumed (and reset) yet.
  bool scheduled_unconsumed_ = false;
};

}  // namespace kvsim
