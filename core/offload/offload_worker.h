#pragma once
// OffloadWorker: the OffloadingConnector's worker side as the scheduler sees it
// (OffloadingConnectorWorker's job bookkeeping, vllm/distributed/kv_transfer/kv_connector/v1/
// offloading/worker.py) with the copy engine replaced by transfers that finish when the caller
// says: jobs (one counter for loads and stores), stores deferred to the next step, the blocking
// flush of preempted requests, and get_finished's finished_sending / finished_recving.
// shared/spec/vllm-0.20-offload-semantics.md §5. No I/O, no clock (the caller decides when a
// transfer ends: the replayer's completion modes, the simulator's transfer clock).

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/request.h"
#include "core/offload/offloading_connector.h"

namespace kvsim {

class OffloadWorker {
 public:
  struct Job {
    std::int64_t id = 0;
    Request* request = nullptr;
    bool store = false;
    bool submitted = false;
    bool flushed = false;  // finished by a preemption flush
    /// When the transfer ends on the caller's clock (-1: not timed; set_end_times).
    std::int64_t end_ns = -1;
    std::vector<std::int64_t> gpu_block_ids, cpu_block_ids;
  };

  /// handle_preemptions: submits the stores deferred by the previous step (submit_deferred);
  /// the submitted store jobs of the `flush` requests finish now (the worker waits for them).
  void handle_preemptions(std::span<Request* const> flush);
  /// The first half of handle_preemptions: the stores deferred by the previous step are
  /// submitted. (A caller with a clock times them before the flush waits for them.)
  void submit_deferred() {
    for (Job& j : jobs_) j.submitted = true;  // only deferred stores were unsubmitted
  }
  /// start_load_kv: one submitted job per load.
  void start_loads(std::span<const OffloadTransfer> loads);
  /// wait_for_save (only in a step that scheduled tokens): one job per store, submitted at the
  /// next step's handle_preemptions.
  void prepare_stores(std::span<const OffloadTransfer> stores);

  // ---- a clock (the simulator's transfer clock: sim/engine/offload_tier.h) ----
  /// Gives every submitted job without an end time `end_of(job)`, in submission order.
  template <class F>
  void set_end_times(F end_of) {
    for (Job& j : jobs_)
      if (j.submitted && j.end_ns < 0) j.end_ns = end_of(const_cast<const Job&>(j));
  }
  /// The latest end of the submitted store jobs of the `flush` requests (-1: none): when the
  /// blocking wait of handle_preemptions returns.
  std::int64_t flush_end(std::span<Request* const> flush) const;
  /// The submitted jobs whose end time is at most `t_ns` finish (loads first, then stores, each
  /// in submission order, as complete_all).
  void complete_ended_by(std::int64_t t_ns);

  /// Transfers that finish now (submitted, unfinished ones): every one, or those of a request.
  void complete_all();
  void complete_loads(const Request& request);
  void complete_stores(const Request& request);

  /// get_finished(finished_req_ids): takes the jobs finished since the last call (done() lists
  /// them, in finishing order) and answers the requests whose load finished (finished_recving)
  /// and those finished (`finished`: since the previous step) or finished earlier whose store
  /// jobs are all done (finished_sending). Both sorted by request_id.
  /// (`finished`: request indices.)
  void get_finished(std::span<const std::int64_t> finished, std::vector<Request*>& finished_sending,
                    std::vector<Request*>& finished_recving);
  /// The jobs the last get_finished took, in the order they finished.
  std::span<const Job> done() const { return done_; }

  // ---- views (in submission order) ----
  std::span<const Job> in_flight() const { return jobs_; }  // unsubmitted stores included
  bool waiting_for_store(const Request& r) const;
  /// Whether the worker still refers to the request (a job, a store count, a wait).
  bool references(const Request& r) const;
  template <class F>
  void for_each_waiting_for_store(F f) const {
    for (const Request* r : finished_waiting_) f(*r);
  }
  std::string find_violation() const;

 private:
  struct StoreCount {
    Request* request = nullptr;
    std::int64_t pending = 0;  // store jobs not finished
  };
  StoreCount* store_count(const Request& r);
  void finish_job(std::size_t i);
  /// A new job at the end of jobs_, from spare_ when it has one (its block lists keep their
  /// capacity: a warm worker allocates nothing per job).
  Job& new_job();

  std::int64_t next_job_id_ = 0;
  std::vector<Job> jobs_;      // unfinished, in creation order
  std::vector<Job> finished_;  // finished, not yet reported, in finishing order
  std::vector<Job> done_;
  std::vector<Job> spare_;  // reported jobs, kept for their capacity
  // vLLM's _store_jobs: requests that ever created a store job and were not reported yet.
  std::vector<StoreCount> store_counts_;
  std::vector<Request*> finished_waiting_;  // _finished_reqs_waiting_for_store
};

}  // namespace kvsim
