// Scheduler at vLLM v0.20.1 (policy outputs_in_scheduling_order): schedule() with the priority
// policy, scheduler_reserve_full_isl, chunked prefill off and async placeholders; the steps in
// flight; update_from_output in scheduling order; reset_prefix_cache(reset_running_requests).
// shared/spec/vllm-0.20-semantics.md §8-§9 (vllm/v1/core/sched/scheduler.py, async_scheduler.py).

#include <algorithm>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/common/assert.h"
#include "core/common/hot.h"
#include "core/v1/scheduler.h"

namespace kvsim {

void Scheduler::preempt(Request& victim, SchedulerOutput* out) {
  KVSIM_ASSERT(victim.status == RequestStatus::kRunning, "only running requests are preempted");
  kv_.free(victim);
  victim.status = RequestStatus::kPreempted;
  victim.num_computed_tokens = 0;
  ++victim.num_preemptions;
  enqueue_waiting(victim, /*front=*/true);
  if (out) out->preempted.push_back(&victim);
  ++stats_.num_preemptions;
}

// Inlined into both loops: once per scheduled request and step. Appends the entry (the new
// blocks of every group when `allocated`; none otherwise) and applies _update_after_schedule to
// it at once (and the AsyncScheduler's placeholder): the request's computed tokens advance.
// Nothing later in schedule() reads what this changes, except a priority preemption of an entry,
// which undoes it (schedule_running_v020).
[[gnu::always_inline]] inline void Scheduler::add_scheduled_v020(SchedulerOutput& out, Request& req,
                                                                 std::int64_t num_tokens,
                                                                 std::int64_t num_computed,
                                                                 ScheduledRequest::Kind kind,
                                                                 bool allocated, bool async) {
  const KVCacheCoordinator& c = *kv_.coordinator();
  ScheduledRequest& s =
      out.add_scheduled(req, num_tokens, num_computed, allocated ? c.new_blocks(0) : 0, kind);
  if (allocated && c.num_groups() > 1)
    for (std::int32_t g = 0; g < c.num_groups(); ++g)
      out.group_new_blocks.push_back(c.new_blocks(g));
  const std::int64_t computed = num_computed + num_tokens;
  req.num_computed_tokens = computed;
  const bool chunk = computed < req.num_tokens() + req.num_output_placeholders;
  s.prefill_chunk = chunk;
  if (async && !chunk) ++req.num_output_placeholders;
}

KVSIM_HOT void Scheduler::schedule_v020(SchedulerOutput& out) {
  step_error_ = "";
  if (connector_) promoted_.clear();
  kv_.coordinator()->new_step_starts();
  const std::int64_t max_budget = config_.max_num_scheduled_tokens > 0
                                      ? config_.max_num_scheduled_tokens
                                      : config_.max_num_batched_tokens;
  const std::int64_t max_chunk = config_.long_prefill_token_threshold > 0
                                     ? config_.long_prefill_token_threshold
                                     : std::numeric_limits<std::int64_t>::max();
  std::int64_t budget = max_budget;
  // One running loop per scheduling mode: the mode's tests leave the loop.
  if (config_.async_scheduling)
    schedule_running_v020<true>(out, budget, max_chunk);
  else
    schedule_running_v020<false>(out, budget, max_chunk);
  if (out.preempted.empty() && step_error_[0] == 0) {
    if (connector_)
      schedule_waiting_v020<true>(out, budget, max_chunk);
    else
      schedule_waiting_v020<false>(out, budget, max_chunk);
  }
  out.total_num_scheduled_tokens = max_budget - budget;

  // The common prefix of every group, asked for the first running request.
  KVCacheCoordinator& c = *kv_.coordinator();
  if (c.num_groups() == 1) {
    out.num_common_prefix_blocks = running_.empty() || !kv_.config().enable_caching
                                       ? 0
                                       : c.manager(0).num_common_prefix_blocks(*running_.front());
  } else {
    if (running_.empty())
      out.group_common_prefix_blocks.assign(static_cast<std::size_t>(c.num_groups()), 0);
    else
      c.num_common_prefix_blocks(*running_.front(), out.group_common_prefix_blocks);
    out.num_common_prefix_blocks = out.group_common_prefix_blocks[0];
  }

  // The step goes in flight (its requests were advanced as they were scheduled): one copy of the
  // entries into the ring of steps, oldest at inflight_head_.
  if (inflight_count_ == inflight_.size()) {  // grow the ring, keeping its order
    std::vector<InFlightStep> bigger(std::max<std::size_t>(4, inflight_.size() * 2));
    for (std::size_t k = 0; k < inflight_count_; ++k)
      std::swap(bigger[k], inflight_[in_flight_slot(k)]);
    inflight_.swap(bigger);
    inflight_head_ = 0;
  }
  // A byte copy: assign() would copy entry by entry (ScheduledRequest's member initializers
  // make it non-trivial for the library).
  static_assert(std::is_trivially_copyable_v<InFlightRequest>);
  InFlightStep& slot = inflight_[in_flight_slot(inflight_count_)];
  slot.size = out.scheduled.size();
  if (slot.buffer.size() < slot.size) slot.buffer.resize(slot.size);
  if (slot.size > 0)
    std::memcpy(slot.buffer.data(), out.scheduled.data(), slot.size * sizeof(InFlightRequest));
  ++inflight_count_;
  ++stats_.num_steps;
  if (connector_) connector_step_end(out);
}

template <bool async>
KVSIM_HOT void Scheduler::schedule_running_v020(SchedulerOutput& out, std::int64_t& budget_left,
                                                std::int64_t max_chunk) {
  // Constants in locals: the loop's stores through Request& may alias the members. (i and
  // budget have no address taken: they stay in registers.)
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  const std::int64_t max_model_len = config_.max_model_len;
  const KVCacheManager::NoOpAllocation no_op = kv_.no_op_allocation();
  const bool align_split = kv_.coordinator()->mamba_align();
  const auto min = [](std::int64_t a, std::int64_t b) { return a < b ? a : b; };
  std::int64_t budget = budget_left;
  for (auto& h : group_hits_) h.clear();  // "no hits" for allocate_running_v020
  std::size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request& req = *running_[i];
    const std::int64_t computed = req.num_computed_tokens;
    // (The synchronous loop makes no placeholders.)
    const std::int64_t placeholders = async ? req.num_output_placeholders : 0;
    // Async: the steps in flight already produce its last allowed token.
    if (placeholders > 0 &&
        computed + 2 - placeholders >= req.num_prompt_tokens() + req.limits.max_tokens) {
      ++i;
      continue;
    }
    const std::int64_t num_tokens = req.num_tokens();
    // min(tokens left, max_chunk, budget, max_model_len - 1 - computed)
    std::int64_t n = min(min(num_tokens + placeholders - computed, max_chunk),
                         min(budget, max_model_len - 1 - computed));
    if (align_split && n > 0) n = mamba_aligned_split(req, n, 0);
    if (n <= 0) {  // nothing to compute now (vLLM: `continue`, the next request may run)
      ++i;
      continue;
    }
    // Most decode steps need no allocation (computed + n < max_model_len here).
    const std::int64_t end = computed + n;
    const bool allocates = !no_op.enabled || !no_op.fits(req.kv_groups[0], end,
                                                         min(end + lookahead, max_model_len),
                                                         num_tokens, false);
    if (allocates) {
      const RunningAllocation r = allocate_running_v020<async>(out, req, n);
      i -= r.unscheduled;  // entries of this step that a priority preemption took out again
      budget += r.refund;
      if (!r.scheduled) break;
    }
    add_scheduled_v020(out, req, n, computed, ScheduledRequest::Kind::kRunning, allocates, async);
    budget -= n;
    ++i;
  }
  budget_left = budget;
}

// The running loop's allocation for `req` (out of line: one call in four or fewer), with the
// preemptions it takes. Not scheduled when the loop stops (the request itself was preempted, or
// vLLM raised: step_error_). A priority preemption of an entry scheduled earlier in this step
// takes it out again: the loop's index and budget follow (`unscheduled`, `refund`).
template <bool async>
[[gnu::noinline]] KVSIM_HOT Scheduler::RunningAllocation Scheduler::allocate_running_v020(
    SchedulerOutput& out, Request& req, std::int64_t n) {
  // Straight to the coordinator: the manager's entry would repeat the no-op test, which no
  // preemption below can change (it frees other requests' blocks only).
  KVCacheCoordinator& coordinator = *kv_.coordinator();
  const bool one_full_group = kv_.no_op_allocation().enabled;
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  RunningAllocation result;
  while (true) {
    const AllocStatus st =
        one_full_group ? coordinator.allocate_slots_running(req, n, lookahead)
                       : coordinator.allocate_slots(req, n, 0, group_hits_, lookahead, false);
    if (st == AllocStatus::kOk) {
      result.scheduled = true;
      return result;
    }
    if (st != AllocStatus::kNoFreeBlocks) {  // vLLM raises out of schedule()
      step_error_ = alloc_status_message(st);
      return result;
    }
    Request* victim;
    if (config_.priority_policy) {
      // The running request of the largest (priority, arrival time), the first such in the
      // list, even one scheduled earlier in this step (its tokens go back to the budget).
      std::size_t vi = 0;
      for (std::size_t k = 1; k < running_.size(); ++k) {
        const Request& a = *running_[k];
        const Request& b = *running_[vi];
        if (a.priority > b.priority ||
            (a.priority == b.priority && a.arrival_time > b.arrival_time))
          vi = k;
      }
      victim = running_[vi];
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(vi));
      const auto it = std::find_if(out.scheduled.begin(), out.scheduled.end(),
                                   [&](const ScheduledRequest& s) { return s.request == victim; });
      if (it != out.scheduled.end()) {
        // Out of the step again: its placeholder is taken back (preempt() resets its computed
        // tokens).
        result.refund += it->num_tokens;
        if (async && !it->prefill_chunk) --victim->num_output_placeholders;
        const auto pos = it - out.scheduled.begin();
        if (!out.group_new_blocks.empty()) {
          const auto g = static_cast<std::ptrdiff_t>(kv_.num_groups());
          out.group_new_blocks.erase(out.group_new_blocks.begin() + pos * g,
                                     out.group_new_blocks.begin() + (pos + 1) * g);
        }
        out.scheduled.erase(it);
        ++result.unscheduled;
      }
    } else {
      victim = running_.back();
      running_.pop_back();
    }
    preempt(*victim, &out);
    if (victim == &req) return result;
  }
}

// The waiting loop, without a connector (kConnector false: the code of vLLM's loop that a
// scheduler without one runs) or with it (skipped_waiting, promotions of loaded requests, the
// connector's lookup and its loads). Each scheduler dispatches to one of them once per step.
template <bool kConnector>
KVSIM_HOT void Scheduler::schedule_waiting_v020(SchedulerOutput& out, std::int64_t& budget,
                                                std::int64_t max_chunk) {
  if constexpr (kConnector) step_skipped_.clear();
  while ((!waiting_.empty() || (kConnector && !skipped_waiting_.empty())) && budget > 0) {
    if (static_cast<std::int64_t>(running_.size()) >= config_.max_num_seqs) break;
    RingDeque<Request*>* queue = &waiting_;
    if constexpr (kConnector) queue = &waiting_queue_to_schedule();
    Request& req = *queue->front();
    if constexpr (kConnector) {
      connector_queries_ = 0;
      if (req.status == RequestStatus::kWaitingForRemoteKvs && !try_promote(req)) {
        queue->pop_front();  // still loading: skipped (a promoted one is admitted below)
        step_skipped_.push_back(&req);
        continue;
      }
    }
    std::int64_t hits = 0;
    std::int64_t external = 0;  // the connector's tokens
    bool load_async = false;
    AllocStatus st = AllocStatus::kOk;
    if (req.num_computed_tokens == 0) {
      hits = kv_.get_computed_blocks(req, group_hits_, st);
      if (st != AllocStatus::kOk) {
        step_error_ = alloc_status_message(st);
        return;
      }
      if (kv_.config().enable_caching && !req.wants_prompt_logprobs) {
        stats_.prefix_queries_tokens += req.num_tokens();
        stats_.prefix_hits_tokens += hits;
        out.prefix_queries_tokens += req.num_tokens();
        out.prefix_hits_tokens += hits;
      }
      if constexpr (kConnector) {
        if (!connector_lookup(req, hits, external, load_async)) {
          queue->pop_front();  // the connector asks again later
          step_skipped_.push_back(&req);
          continue;
        }
      }
    } else {
      for (auto& h : group_hits_) h.clear();
    }
    // (A request reaching here with computed tokens is a loaded one, promoted.)
    const std::int64_t computed = req.num_computed_tokens + hits + external;
    std::int64_t n = 0;  // a load: nothing to compute before it arrives
    if (!(kConnector && load_async)) {
      n = std::min(req.num_tokens() - computed, max_chunk);
      if (!config_.enable_chunked_prefill && n > budget) break;  // no partial prompt: stop here
      n = std::min(n, budget);
      KVSIM_ASSERT(n > 0, "a waiting request has nothing to compute");
    }
    if (kv_.coordinator()->mamba_align()) {
      n = mamba_aligned_split(req, n, hits);
      if (n == 0) break;
    }
    if (config_.scheduler_reserve_full_isl) {  // the whole sequence must fit
      const bool fits =
          kv_.coordinator()->can_fit_full_sequence(req, hits, group_hits_, st, external);
      if (st != AllocStatus::kOk) {
        step_error_ = alloc_status_message(st);
        return;
      }
      if (!fits) break;
    }
    // No lookahead slots for a request without computed tokens; a load's blocks are cached once
    // it arrives.
    st = kv_.allocate_slots(req, n, hits, group_hits_, 0, kConnector && load_async, external);
    if (st == AllocStatus::kNoFreeBlocks) break;
    if (st != AllocStatus::kOk) {
      step_error_ = alloc_status_message(st);
      return;
    }
    if constexpr (kConnector) connector_allocated(req, hits, external);
    queue->pop_front();
    if constexpr (kConnector) {
      if (load_async) {  // waits for its load, holding its blocks
        req.status = RequestStatus::kWaitingForRemoteKvs;
        req.num_computed_tokens = computed;
        step_skipped_.push_back(&req);
        continue;
      }
    }
    running_.push_back(&req);
    const auto kind = req.status == RequestStatus::kPreempted ? ScheduledRequest::Kind::kResumed
                                                              : ScheduledRequest::Kind::kNew;
    req.status = RequestStatus::kRunning;
    add_scheduled_v020(out, req, n, computed, kind, /*allocated=*/true, config_.async_scheduling);
    budget -= n;
  }
}

std::int64_t Scheduler::mamba_aligned_split(const Request& req, std::int64_t n,
                                             std::int64_t hits) const {
  const std::int64_t computed = req.num_computed_tokens + hits;
  // Prefill only (resumed requests included); a decode step passes.
  if (computed >= std::max(req.num_prompt_tokens(), req.num_tokens() - 1)) return n;
  const std::int64_t bs = kv_.config().block_size;  // the cache config's block size
  std::int64_t last_cached = req.num_tokens() - req.num_tokens() % bs;
  if (kv_.config().use_eagle) last_cached = std::max<std::int64_t>(last_cached - bs, 0);
  const std::int64_t after = computed + n;
  if (after < last_cached) return n / bs * bs;  // whole blocks (0 when less than one fits)
  if (computed < last_cached && last_cached < after) return last_cached - computed;
  return n;  // the last few tokens
}

std::span<const InFlightRequest> Scheduler::oldest_in_flight() const {
  if (inflight_count_ == 0) return {};
  return inflight_[inflight_head_].entries();
}

void Scheduler::drop_in_flight(const Request& request) {
  for (std::size_t k = 0; k < inflight_count_; ++k)
    for (InFlightRequest& e : inflight_[in_flight_slot(k)].entries())
      if (e.request == &request) e.request = nullptr;
}

KVSIM_HOT void Scheduler::update_in_scheduling_order(std::vector<RequestOutput>& outputs) {
  step_error_ = "";
  outputs.clear();
  if (inflight_count_ == 0) {
    if (connector_) apply_connector_output();
    return;
  }
  // Out of the ring first: a request finishing below is then looked for in the later steps only.
  const std::span<const InFlightRequest> step = inflight_[inflight_head_].entries();
  inflight_head_ = in_flight_slot(1);
  --inflight_count_;
  // One loop per scheduling mode: the mode's tests leave the loop.
  if (config_.async_scheduling)
    apply_outputs<true>(step, outputs);
  else
    apply_outputs<false>(step, outputs);
  if (connector_) apply_connector_output();  // the worker's report, after the tokens
}

template <bool async>
KVSIM_HOT void Scheduler::apply_outputs(std::span<const InFlightRequest> step,
                                        std::vector<RequestOutput>& outputs) {
  KVCacheCoordinator& coordinator = *kv_.coordinator();
  const KVCacheCoordinator::NothingToCache nothing_to_cache = coordinator.nothing_to_cache();
  bool stopped_waiting = false;
  bool stopped_running = false;
  for (const InFlightRequest& e : step) {
    if (e.request == nullptr) continue;  // finished since it was scheduled
    Request& r = *e.request;
    if (e.prefill_chunk) continue;  // the model samples nothing for a partial prefill
    if (async && r.discard_latest_async_tokens) {  // preempted by a reset: dropped
      r.discard_latest_async_tokens = false;
      continue;
    }
    const RequestStatus before = r.status;
    r.append_output_token(r.next_sampled_token());  // (its hashes follow when read)
    RequestStatus final_status;
    const bool stopped = stops(r, final_status);
    if constexpr (async) {
      if (--r.num_output_placeholders < 0) {  // vLLM's assertion (a reset's dropped token)
        r.num_output_placeholders = 0;
        step_error_ = "AssertionError: request.num_output_placeholders >= 0";
      }
      // Output blocks are cached one step late (not for a preempted request).
      const std::int64_t cached_end = r.num_computed_tokens - r.num_output_placeholders;
      if (before == RequestStatus::kRunning && !nothing_to_cache(r, cached_end)) {
        const AllocStatus st = coordinator.cache_blocks(r, cached_end);
        if (st != AllocStatus::kOk) step_error_ = alloc_status_message(st);
      }
    }
    if (stopped) {  // freed right away, in scheduling order
      finish(r, final_status);
      (before == RequestStatus::kRunning ? stopped_running : stopped_waiting) = true;
    }
    outputs.push_back({&r, r.all_token_ids().back(), stopped});
  }
  if (stopped_running)
    running_.erase(std::remove_if(running_.begin(), running_.end(),
                                  [](const Request* r) { return is_finished(r->status); }),
                   running_.end());
  if (stopped_waiting)
    for (std::size_t i = waiting_.size(); i-- > 0;)
      if (is_finished(waiting_[i]->status)) waiting_.erase_at(i);
}

bool Scheduler::reset_prefix_cache(bool reset_running_requests, bool reset_connector) {
  step_error_ = "";
  if (reset_running_requests) {
    // Last first, so that they come back in FIFO order; their token in flight is dropped.
    while (!running_.empty()) {
      Request& r = *running_.back();
      running_.pop_back();
      preempt(r, nullptr);
      r.num_output_placeholders = 0;
      r.discard_latest_async_tokens = true;
    }
  }
  bool ok = kv_.reset_prefix_cache();
  if (reset_running_requests && !ok)  // blocks held for a connector's load
    step_error_ =
        "RuntimeError: Failed to reset KV cache even when all the running requests are preempted";
  if (reset_connector) {
    // reset_connector_cache: a connector without reset_cache (None) counts as a success.
    bool connector_ok = connector_ != nullptr;
    if (connector_) {
      const std::optional<bool> r = connector_->reset_cache();
      connector_ok = !r || *r;
      if (connector_ok) connector_stats_.reset = true;
    }
    ok = connector_ok && ok;
  }
  return ok;
}

}  // namespace kvsim
