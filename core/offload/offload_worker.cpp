#include "core/offload/offload_worker.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

OffloadWorker::StoreCount* OffloadWorker::store_count(const Request& r) {
  for (StoreCount& c : store_counts_)
    if (c.request == &r) return &c;
  return nullptr;
}

bool OffloadWorker::waiting_for_store(const Request& r) const {
  return std::find(finished_waiting_.begin(), finished_waiting_.end(), &r) !=
         finished_waiting_.end();
}

bool OffloadWorker::references(const Request& r) const {
  const auto same = [&](const auto& x) { return x.request == &r; };
  return std::any_of(jobs_.begin(), jobs_.end(), same) ||
         std::any_of(finished_.begin(), finished_.end(), same) ||
         std::any_of(done_.begin(), done_.end(), same) ||
         std::any_of(store_counts_.begin(), store_counts_.end(), same) || waiting_for_store(r);
}

void OffloadWorker::finish_job(std::size_t i) {
  finished_.push_back(std::move(jobs_[i]));
  jobs_.erase(jobs_.begin() + static_cast<std::ptrdiff_t>(i));
}

OffloadWorker::Job& OffloadWorker::new_job() {
  if (spare_.empty()) return jobs_.emplace_back();
  jobs_.push_back(std::move(spare_.back()));
  spare_.pop_back();
  Job& j = jobs_.back();
  j.store = j.submitted = j.flushed = false;
  j.end_ns = -1;
  j.gpu_block_ids.clear();
  j.cpu_block_ids.clear();
  return j;
}

void OffloadWorker::handle_preemptions(std::span<Request* const> flush) {
  submit_deferred();
  for (Request* r : flush)
    for (std::size_t i = 0; i < jobs_.size();) {
      if (jobs_[i].store && jobs_[i].request == r) {
        jobs_[i].flushed = true;
        finish_job(i);
      } else {
        ++i;
      }
    }
}

void OffloadWorker::start_loads(std::span<const OffloadTransfer> loads) {
  for (const OffloadTransfer& t : loads) {
    Job& j = new_job();
    j.id = next_job_id_++;
    j.request = t.request;
    j.submitted = true;
    j.gpu_block_ids.assign(t.gpu_block_ids.begin(), t.gpu_block_ids.end());
    j.cpu_block_ids.assign(t.cpu_block_ids.begin(), t.cpu_block_ids.end());
  }
}

void OffloadWorker::prepare_stores(std::span<const OffloadTransfer> stores) {
  for (const OffloadTransfer& t : stores) {
    Job& j = new_job();
    j.id = next_job_id_++;
    j.request = t.request;
    j.store = true;
    j.gpu_block_ids.assign(t.gpu_block_ids.begin(), t.gpu_block_ids.end());
    j.cpu_block_ids.assign(t.cpu_block_ids.begin(), t.cpu_block_ids.end());
    if (StoreCount* c = store_count(*t.request))
      ++c->pending;
    else
      store_counts_.push_back({t.request, 1});
  }
}

void OffloadWorker::complete_all() {
  // Each direction's jobs finish in submission order; loads are reported first (a choice: the
  // two lists are reported apart and the request sets are sorted, so the order is not visible).
  for (const bool store : {false, true})
    for (std::size_t i = 0; i < jobs_.size();)
      if (jobs_[i].submitted && jobs_[i].store == store)
        finish_job(i);
      else
        ++i;
}

std::int64_t OffloadWorker::flush_end(std::span<Request* const> flush) const {
  std::int64_t end = -1;
  for (const Job& j : jobs_)
    if (j.store && j.submitted && std::find(flush.begin(), flush.end(), j.request) != flush.end())
      end = std::max(end, j.end_ns);
  return end;
}

void OffloadWorker::complete_ended_by(std::int64_t t_ns) {
  for (const bool store : {false, true})
    for (std::size_t i = 0; i < jobs_.size();)
      if (jobs_[i].submitted && jobs_[i].store == store && jobs_[i].end_ns >= 0 &&
          jobs_[i].end_ns <= t_ns)
        finish_job(i);
      else
        ++i;
}

void OffloadWorker::complete_loads(const Request& r) {
  for (std::size_t i = 0; i < jobs_.size();)
    if (jobs_[i].submitted && !jobs_[i].store && jobs_[i].request == &r)
      finish_job(i);
    else
      ++i;
}

void OffloadWorker::complete_stores(const Request& r) {
  for (std::size_t i = 0; i < jobs_.size();)
    if (jobs_[i].submitted && jobs_[i].store && jobs_[i].request == &r)
      finish_job(i);
    else
      ++i;
}

void OffloadWorker::get_finished(std::span<const std::int64_t> finished,
                                 std::vector<Request*>& finished_sending,
                                 std::vector<Request*>& finished_recving) {
  finished_sending.clear();
  finished_recving.clear();
  const auto add = [](std::vector<Request*>& v, Request* r) {
    if (std::find(v.begin(), v.end(), r) == v.end()) v.push_back(r);
  };
  const auto drop_count = [&](const Request* r) {
    store_counts_.erase(std::find_if(store_counts_.begin(), store_counts_.end(),
                                     [&](const StoreCount& c) { return c.request == r; }));
  };
  for (const Job& j : finished_) {
    if (!j.store) {
      add(finished_recving, j.request);
      continue;
    }
    StoreCount* c = store_count(*j.request);
    KVSIM_ASSERT(c != nullptr && c->pending > 0, "a finished store job was not counted");
    if (--c->pending > 0) continue;
    const auto w = std::find(finished_waiting_.begin(), finished_waiting_.end(), j.request);
    if (w != finished_waiting_.end()) {
      finished_waiting_.erase(w);
      add(finished_sending, j.request);
      drop_count(j.request);
    }
  }
  for (const std::int64_t index : finished) {
    const auto c = std::find_if(store_counts_.begin(), store_counts_.end(),
                                [&](const StoreCount& s) { return s.request->index() == index; });
    if (c == store_counts_.end()) continue;  // never stored: never reported
    Request* r = c->request;
    if (c->pending > 0) {
      if (!waiting_for_store(*r)) finished_waiting_.push_back(r);
    } else {
      add(finished_sending, r);
      drop_count(r);
    }
  }
  for (Job& j : done_) spare_.push_back(std::move(j));  // the previous report's jobs
  done_.clear();
  done_.swap(finished_);
  const auto by_id = [](const Request* a, const Request* b) {
    return a->request_id < b->request_id;
  };
  std::sort(finished_sending.begin(), finished_sending.end(), by_id);
  std::sort(finished_recving.begin(), finished_recving.end(), by_id);
}

std::string OffloadWorker::find_violation() const {
  for (const StoreCount& c : store_counts_) {
    std::int64_t n = 0;
    for (const Job& j : jobs_) n += j.store && j.request == c.request;
    for (const Job& j : finished_) n += j.store && j.request == c.request;
    KVSIM_CHECK(n == c.pending, "a request's pending store count differs from its store jobs");
  }
  for (const Job& j : jobs_) {
    KVSIM_CHECK(j.store || j.submitted, "a load job was not submitted");
    if (j.store)
      KVSIM_CHECK(std::any_of(store_counts_.begin(), store_counts_.end(),
                              [&](const StoreCount& c) { return c.request == j.request; }),
                  "a store job's request has no store count");
  }
  for (const Request* r : finished_waiting_)
    KVSIM_CHECK(std::any_of(store_counts_.begin(), store_counts_.end(),
                            [&](const StoreCount& c) { return c.request == r && c.pending > 0; }),
                "a finished request waits for stores it does not have");
  return {};
}

}  // namespace kvsim
