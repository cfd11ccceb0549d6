#include "core/v1/scheduler.h"

#include <algorithm>
#include <limits>

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {

namespace {
// The manager's view of the scheduler's settings: vLLM v0.20's Scheduler passes its
// max_num_batched_tokens (the admission cap of sliding-window and chunked-local groups).
KVCacheConfig manager_config(const SchedulerConfig& config, KVCacheConfig kv, Profile profile) {
  if (v1_policy(profile).kv_cache_coordinator)
    kv.max_num_batched_tokens = config.max_num_batched_tokens;
  return kv;
}
}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, const KVCacheConfig& kv_config, Profile profile,
                     BlockHashTable::BucketHashFn hash_fn)
    : config_(config),
      profile_(profile),
      kv_(manager_config(config, kv_config, profile), v1_policy(profile), hash_fn) {
  KVSIM_ASSERT(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0);
  KVSIM_ASSERT(config.long_prefill_token_threshold >= 0 && config.num_lookahead_tokens >= 0);
  KVSIM_ASSERT(config.num_lookahead_tokens == 0 || kv_.policy().lookahead_slots,
               "this release has no lookahead slots");
  KVSIM_ASSERT(kv_.policy().v020_scheduler_settings ||
                   (config.enable_chunked_prefill && !config.scheduler_reserve_full_isl &&
                    !config.priority_policy && !config.async_scheduling &&
                    config.max_num_scheduled_tokens == 0),
               "this release has none of vLLM v0.20's scheduler settings");
  if (kv_.coordinator()) group_hits_.resize(static_cast<std::size_t>(kv_.num_groups()));
  // At most max_num_seqs requests finish in one step (aborts aside): no growth on the hot path.
  const auto seqs = static_cast<std::size_t>(std::min<std::int64_t>(config.max_num_seqs, 1 << 16));
  finished_ids_.reserve(seqs);
  next_running_.reserve(seqs);
}

KVSIM_HOT void Scheduler::reserve_request(Request& req, std::int64_t max_total_tokens) {
  const std::int64_t tokens = max_total_tokens + config_.num_lookahead_tokens;
  if (const KVCacheCoordinator* c = kv_.coordinator()) {
    c->init_request(req, tokens);
    return;
  }
  const auto max_blocks =
      static_cast<std::size_t>(cdiv(tokens, kv_.block_size()) + kv_.num_preallocate_blocks());
  req.blocks.reserve(max_blocks);
  req.block_hashes.reserve(max_blocks);
}

KVSIM_HOT void Scheduler::add_request(Request& request) {
  request.status = RequestStatus::kWaiting;
  // Room in the tables and the hash list for every token the request's token list has room for
  // (its prompt and the outputs it may generate): the step loop then grows neither, whoever
  // drives it (the simulator reserves its exact final length first; reserve() keeps the larger).
  reserve_request(request, static_cast<std::int64_t>(request.all_token_ids().capacity()));
  if (!kv_.coordinator()) {
    waiting_.push_back(&request);
    return;
  }
  kv_.add_request(request);  // v0.20: the request's tables, its prompt's hashes
  enqueue_waiting(request, /*front=*/false);
}

namespace {
// The priority policy's order (vLLM's Request.__lt__): (priority, arrival_time, request_id).
bool runs_before(const Request& a, const Request& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.arrival_time != b.arrival_time) return a.arrival_time < b.arrival_time;
  if (a.request_id != b.request_id) return a.request_id < b.request_id;
  return a.index() < b.index();
}
}  // namespace

KVSIM_HOT void Scheduler::enqueue_waiting(Request& request, bool front) {
  if (!config_.priority_policy) {
    if (front)
      waiting_.push_front(&request);
    else
      waiting_.push_back(&request);
    return;
  }
  // A heap in vLLM; a sorted queue here, which pops, peeks and lists in the same order.
  waiting_.push_back(&request);
  for (std::size_t j = waiting_.size() - 1; j > 0 && runs_before(*waiting_[j], *waiting_[j - 1]);
       --j)
    std::swap(waiting_[j], waiting_[j - 1]);
}

void Scheduler::preempt_last(SchedulerOutput& out) {
  Request* victim = running_.back();
  running_.pop_back();
  kv_.free(*victim);
  victim->status = RequestStatus::kPreempted;
  victim->num_computed_tokens = 0;
  ++victim->num_preemptions;
  waiting_.push_front(victim);
  out.preempted.push_back(victim);
  ++stats_.num_preemptions;
}

KVSIM_HOT void Scheduler::schedule(SchedulerOutput& out) {
  out.begin_step(finished_ids_);
  finished_ids_.clear();
  if (kv_.policy().outputs_in_scheduling_order) return schedule_v020(out);
  if (scheduled_unconsumed_)  // a schedule() without update(): its counts do not carry over
    for (Request* r : running_) r->num_scheduled_tokens = 0;
  scheduled_unconsumed_ = true;
  const V1Policy& policy = kv_.policy();
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  // v0.8.5: a chunk is at most long_prefill_token_threshold tokens (when > 0).
  const std::int64_t max_chunk =
      policy.long_prefill_token_threshold && config_.long_prefill_token_threshold > 0
          ? config_.long_prefill_token_threshold
          : std::numeric_limits<std::int64_t>::max();
  std::int64_t budget = config_.max_num_batched_tokens;

  // 1. Running requests, in priority order; victims come from the back of the list.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Request& req = *running_[i];
    std::int64_t n = std::min({req.num_tokens() - req.num_computed_tokens, max_chunk, budget});
    if (policy.running_chunk_capped_by_max_model_len)
      n = std::min(n, config_.max_model_len - req.num_computed_tokens);
    if (n <= 0) {
      // v0.8.5 skips it (`continue`): all its tokens are scheduled already, awaiting their
      // update. (n < 0 only for a prompt longer than max_model_len, which vLLM refuses.)
      KVSIM_ASSERT(policy.advance_computed_in_schedule, "a running request has nothing to compute");
      ++i;
      continue;
    }
    AllocResult res;
    bool scheduled = true;
    while (true) {
      res = kv_.allocate_slots(req, n, {}, lookahead);
      if (res.status != AllocStatus::kNoFreeBlocks) break;
      const bool self = running_.back() == &req;
      preempt_last(out);
      if (self) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    KVSIM_ASSERT(res.ok(), "allocate_slots failed for a running request");
    req.num_scheduled_tokens = n;
    out.add_scheduled(req, n, req.num_computed_tokens, res.num_new_blocks,
                      ScheduledRequest::Kind::kRunning);
    budget -= n;
    ++i;
  }

  // 2. Waiting requests (FCFS), only when nothing was preempted in this step.
  if (out.preempted.empty()) schedule_waiting(out, budget, max_chunk);

  out.total_num_scheduled_tokens = config_.max_num_batched_tokens - budget;
  out.num_common_prefix_blocks =
      running_.empty() ? 0
                       : kv_.get_num_common_prefix_blocks(
                             *running_.front(), static_cast<std::int64_t>(running_.size()));
  // v0.8.3+: the scheduled tokens count as computed from now on (out keeps the counts before).
  if (policy.advance_computed_in_schedule)
    for (const ScheduledRequest& s : out.scheduled) s.request->num_computed_tokens += s.num_tokens;
  ++stats_.num_steps;
}

KVSIM_HOT void Scheduler::schedule_waiting(SchedulerOutput& out, std::int64_t& budget,
                                           std::int64_t max_chunk) {
  const V1Policy& policy = kv_.policy();
  const std::int64_t bs = kv_.block_size();
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  {
    while (!waiting_.empty() && budget > 0) {
      if (static_cast<std::int64_t>(running_.size()) >= config_.max_num_seqs) break;
      Request& req = *waiting_.front();
      std::int64_t num_computed = kv_.get_computed_blocks(req, hits_);
      std::int64_t n = req.num_tokens() - num_computed;
      if (n == 0 && !policy.last_block_excluded_from_lookup) {
        // v0.7.2: every block hit: recompute the whole last block (allocate_slots needs
        // block-aligned computed tokens). From v0.8.3 the lookup never hits the last block.
        num_computed -= bs;
        n = bs;
        hits_.pop_back();
      }
      stats_.prefix_queries_tokens += req.num_tokens();
      stats_.prefix_hits_tokens += num_computed;
      out.prefix_queries_tokens += req.num_tokens();
      out.prefix_hits_tokens += num_computed;
      n = std::min({n, max_chunk, budget});
      KVSIM_ASSERT(n > 0, "a waiting request has nothing to compute");
      const AllocResult res = kv_.allocate_slots(req, n, hits_, lookahead);
      if (res.status == AllocStatus::kNoFreeBlocks) break;
      KVSIM_ASSERT(res.ok(), "allocate_slots failed for a waiting request");
      waiting_.pop_front();
      running_.push_back(&req);
      const auto kind = req.status == RequestStatus::kPreempted ? ScheduledRequest::Kind::kResumed
                                                                : ScheduledRequest::Kind::kNew;
      req.status = RequestStatus::kRunning;
      req.num_computed_tokens = num_computed;
      req.num_scheduled_tokens = n;
      out.add_scheduled(req, n, num_computed, res.num_new_blocks, kind);
      budget -= n;
    }
  }
}

KVSIM_HOT bool Scheduler::stops(Request& req, RequestStatus& status) const {
  const StopCheck c =
      stop_check(req.limits, req.num_tokens(), req.num_output_tokens(), req.all_token_ids().back());
  status = c.status;
  if (c.stop_token) req.stop_reason = req.all_token_ids().back();
  return c.stop;
}

KVSIM_HOT bool Scheduler::check_stop(Request& req) {
  RequestStatus status;
  if (!stops(req, status)) return false;
  finish(req, status);
  return true;
}

KVSIM_HOT void Scheduler::finish(Request& req, RequestStatus status) {
  const bool loading = req.status == RequestStatus::kWaitingForRemoteKvs;  // (an abort)
  req.status = status;
  finished_ids_.push_back(req.index());
  if (inflight_count_ > 0) drop_in_flight(req);
  if (connector_) {
    // finish_requests: an aborted load not reported yet keeps the blocks it writes into; then
    // _connector_finished may delay the free as well.
    bool delay = false;
    if (loading) {
      const auto it = std::find(finished_recving_.begin(), finished_recving_.end(), &req);
      delay = it == finished_recving_.end();
      if (!delay) finished_recving_.erase(it);
    }
    delay = connector_finished(req) || delay;
    if (delay) {
      held_.push_back(&req);
      return;
    }
  }
  free_blocks(req);
}

KVSIM_HOT void Scheduler::update_from_output(std::vector<RequestOutput>& outputs) {
  if (kv_.policy().outputs_in_scheduling_order) return update_in_scheduling_order(outputs);
  scheduled_unconsumed_ = false;
  outputs.clear();
  next_running_.clear();
  const bool advance_in_schedule = kv_.policy().advance_computed_in_schedule;
  for (Request* r : running_) {
    Request& req = *r;
    const std::int64_t n = req.num_scheduled_tokens;
    req.num_scheduled_tokens = 0;
    if (!advance_in_schedule) req.num_computed_tokens += n;
    KVSIM_ASSERT(req.num_computed_tokens <= req.num_tokens());
    if (n > 0 && req.num_computed_tokens == req.num_tokens()) {
      const Token token = req.next_sampled_token();
      req.append_output_token(token);
      const bool stopped = check_stop(req);
      outputs.push_back({&req, token, stopped});
      if (stopped) continue;
    }
    next_running_.push_back(&req);
  }
  running_.swap(next_running_);
}

bool Scheduler::abort_request(Request& req) {
  if (is_finished(req.status)) return false;
  if (req.status == RequestStatus::kRunning) {
    auto it = std::find(running_.begin(), running_.end(), &req);
    if (it == running_.end()) return false;
    running_.erase(it);
  } else {
    std::size_t i = 0;
    while (i < waiting_.size() && waiting_[i] != &req) ++i;
    if (i < waiting_.size()) {
      waiting_.erase_at(i);
    } else {
      i = 0;
      while (i < skipped_waiting_.size() && skipped_waiting_[i] != &req) ++i;
      if (i == skipped_waiting_.size()) return false;
      skipped_waiting_.erase_at(i);
    }
  }
  req.num_scheduled_tokens = 0;
  finish(req, RequestStatus::kFinishedAborted);
  return true;
}

}  // namespace kvsim
