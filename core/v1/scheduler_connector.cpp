// The KV connector's parts of the vllm-0.20 scheduler (vllm/v1/core/sched/scheduler.py at
// v0.20.1): skipped_waiting and its selection, the promotion of loaded requests, the connector's
// lookup and its stats, the step's connector metadata, delayed frees and the worker's reports.
// Reached only when a connector is set (core/v1/kv_connector.h); without one the scheduler never
// calls into this file.

#include <algorithm>

#include "core/common/assert.h"
#include "core/v1/scheduler.h"

namespace kvsim {

namespace {
// The priority policy's order (vLLM's Request.__lt__), as in scheduler.cpp.
bool runs_first(const Request& a, const Request& b) {
  if (a.priority != b.priority) return a.priority < b.priority;
  if (a.arrival_time != b.arrival_time) return a.arrival_time < b.arrival_time;
  if (a.request_id != b.request_id) return a.request_id < b.request_id;
  return a.index() < b.index();
}
}  // namespace

RingDeque<Request*>& Scheduler::waiting_queue_to_schedule() {
  if (!config_.priority_policy) return skipped_waiting_.empty() ? waiting_ : skipped_waiting_;
  if (waiting_.empty()) return skipped_waiting_;
  if (skipped_waiting_.empty()) return waiting_;
  return runs_first(*waiting_.front(), *skipped_waiting_.front()) ? waiting_ : skipped_waiting_;
}

const Request* Scheduler::waiting_queue_to_schedule_front() const {
  if (waiting_.empty() || (!config_.priority_policy))
    return skipped_waiting_.front();  // FCFS: skipped_waiting first
  return runs_first(*waiting_.front(), *skipped_waiting_.front()) ? waiting_.front()
                                                                  : skipped_waiting_.front();
}

void Scheduler::enqueue_skipped(Request& request) {
  skipped_waiting_.push_back(&request);
  for (std::size_t j = skipped_waiting_.size() - 1;
       j > 0 && runs_first(*skipped_waiting_[j], *skipped_waiting_[j - 1]); --j)
    std::swap(skipped_waiting_[j], skipped_waiting_[j - 1]);
}

bool Scheduler::try_promote(Request& req) {
  const auto it = std::find(finished_recving_.begin(), finished_recving_.end(), &req);
  if (it == finished_recving_.end()) return false;
  finished_recving_.erase(it);
  // _update_waiting_for_remote_kv: the loaded blocks are cached now; a full hit recomputes its
  // last token to sample.
  const BlockPool& pool = kv_.pool();
  const std::vector<BlockId>& table = req.kv_groups[0].blocks;
  const auto num_hashed = [&] {  // leading entries that carry a hash (or are null)
    std::int32_t n = 0;
    while (n < static_cast<std::int32_t>(table.size()) &&
           (table[n] == pool.null_block() || pool.block(table[n]).block_hash != kNoHash))
      ++n;
    return n;
  };
  Promotion& p = promoted_.emplace_back();
  p.request = &req;
  p.first_cached = p.end_cached = num_hashed();
  if (kv_.config().enable_caching) {
    const AllocStatus st = kv_.coordinator()->cache_blocks(req, req.num_computed_tokens);
    if (st != AllocStatus::kOk) step_error_ = alloc_status_message(st);
    p.end_cached = num_hashed();
  }
  if (req.num_computed_tokens == req.num_tokens()) req.num_computed_tokens = req.num_tokens() - 1;
  p.num_computed_tokens = req.num_computed_tokens;
  req.status = req.num_preemptions > 0 ? RequestStatus::kPreempted : RequestStatus::kWaiting;
  return true;
}

bool Scheduler::connector_lookup(Request& req, std::int64_t local_hits, std::int64_t& external,
                                 bool& load_async) {
  kv_.sync_block_hashes(req);  // the connector's keys come from the request's hashes
  const ExternalMatch m = connector_->lookup(req, local_hits);
  if (m.ask_later) return false;
  external = m.num_tokens;
  load_async = m.load_async;
  connector_queries_ = req.num_tokens() - local_hits;
  return true;
}

void Scheduler::connector_allocated(Request& req, std::int64_t /*local_hits*/,
                                    std::int64_t external) {
  const std::vector<BlockId>& table = req.kv_groups[0].blocks;
  const BlockPool& pool = kv_.pool();
  std::size_t first = 0;  // the first block that is neither null nor hashed
  while (first < table.size() &&
         (table[first] == pool.null_block() || pool.block(table[first]).block_hash != kNoHash))
    ++first;
  connector_->update_state_after_alloc(req, {table, static_cast<std::int64_t>(first)}, external);
  if (connector_queries_ != 0) {
    ConnectorCacheStats& s = connector_stats_;
    if (req.num_preemptions > 0) {
      ++s.preempted_requests;
      s.preempted_queries += connector_queries_;
      s.preempted_hits += external;
    } else {
      ++s.requests;
      s.queries += connector_queries_;
      s.hits += external;
    }
  }
}

void Scheduler::connector_step_end(SchedulerOutput& out) {
  // The requests skipped in this step go back to the front, in visiting order (priority: in
  // order).
  if (config_.priority_policy) {
    for (Request* r : step_skipped_) enqueue_skipped(*r);
  } else {
    for (std::size_t i = step_skipped_.size(); i-- > 0;) skipped_waiting_.push_front(step_skipped_[i]);
  }
  step_skipped_.clear();
  if (step_error_[0] != 0) return;
  // vLLM hashes a request's blocks as its tokens arrive: the keys of the blocks to store exist.
  for (const ScheduledRequest& s : out.scheduled) kv_.sync_block_hashes(*s.request);
  if (const char* e = connector_->build_connector_meta(out); e[0] != 0) step_error_ = e;
}

bool Scheduler::connector_finished(Request& req) {
  // Out-of-window blocks are freed before the connector sees the table.
  kv_.coordinator()->remove_skipped_blocks(req, req.num_computed_tokens);
  return connector_->request_finished(req, req.kv_groups[0].blocks);
}

void Scheduler::free_blocks(Request& req) {
  kv_.free(req);
  kv_.release_request(req);
}

void Scheduler::apply_connector_output() {
  released_.clear();
  const ConnectorOutput output = connector_output_;
  connector_output_ = {};
  connector_->update_connector_output(output);
  const auto release = [&](Request* r) {
    const auto it = std::find(held_.begin(), held_.end(), r);
    if (it == held_.end()) {  // vLLM: assert req_id in self.requests
      step_error_ = "AssertionError: req_id in self.requests";
      return;
    }
    held_.erase(it);
    free_blocks(*r);
    released_.push_back(r);
  };
  for (Request* r : output.finished_recving) {
    if (r->status == RequestStatus::kWaitingForRemoteKvs) {
      finished_recving_.push_back(r);
    } else if (is_finished(r->status)) {
      release(r);
    } else {
      step_error_ = "AssertionError: RequestStatus.is_finished(req.status)";
    }
  }
  for (Request* r : output.finished_sending) release(r);
}

ConnectorCacheStats Scheduler::take_connector_cache_stats() {
  const ConnectorCacheStats s = connector_stats_;
  connector_stats_ = {};
  return s;
}

}  // namespace kvsim
