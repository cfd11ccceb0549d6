#pragma once
// OffloadTier: the CPU tier of one vllm-0.20 engine in a timed run (cache.kv_offloading_*):
// vLLM v0.20.1's OffloadingConnector plugged into the V1 scheduler (core/offload/), its worker
// side (core/offload/offload_worker.h) and the copy engine replaced by the transfer clock of
// shared/spec/vllm-0.20-offload-semantics.md §10:
//   * a job of n GPU blocks takes llround(host_link_latency_us * 1e3) +
//     llround(n * page_bytes / host_link_bytes_per_s * 1e9) ns;
//   * two channels, GPU->CPU (stores) and CPU->GPU (loads), each running its jobs one after
//     another in submission order;
//   * a step starting at t submits at t the stores its previous step prepared, waits for the
//     stores of the requests it preempted (the forward pass starts at s, the latest of t and
//     their ends), submits its loads at s; the jobs ended by s are what this step reports
//     (finished_sending / finished_recving, applied by update_from_output at the step's end).
// The simulator calls begin_step and report around each step of its synchronous loop and keeps
// the requests the scheduler holds for the connector (a delayed free) alive until it lets go.

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/offload/offload_worker.h"
#include "core/offload/offloading_connector.h"
#include "core/v1/scheduler.h"
#include "sim/common/sim_types.h"

namespace kvsim {

struct Scenario;

/// Running totals of a tier (summary.json's kv_offload, steps.csv's tier columns).
struct OffloadTierStats {
  std::int64_t num_cpu_blocks = 0;
  std::int64_t page_bytes = 0;
  std::int64_t load_jobs = 0, load_gpu_blocks = 0;    // submitted to the copy engine
  std::int64_t store_jobs = 0, store_gpu_blocks = 0;  // submitted to the copy engine
  std::int64_t flushed_store_jobs = 0;                // finished by a preemption's flush
  SimTimeNs flush_wait_ns = 0;                        // forward passes waiting for flushes
  std::int64_t cpu_evicted_blocks = 0;
  // The connector's prefix-cache stats (vLLM's connector_prefix_cache_stats), every lookup.
  std::int64_t cpu_hit_queries = 0, cpu_hit_tokens = 0, cpu_hit_requests = 0;
  std::int64_t finished_sending = 0, finished_recving = 0;           // request ids reported
  std::int64_t bytes_gpu_to_cpu = 0, bytes_cpu_to_gpu = 0;           // of the jobs reported done
  SimTimeNs transfer_ns_gpu_to_cpu = 0, transfer_ns_cpu_to_gpu = 0;  // their transfer times
  std::int64_t empty_steps = 0;                                      // steps that scheduled nothing
  std::int64_t polling_steps = 0;    // of those, followed by EngineCore's 1 ms sleep
  std::int64_t cpu_blocks_used = 0;  // the tier's blocks holding a key, now
};

class OffloadTier {
 public:
  /// The tier of `scenario` (its `offload` plan is set) plugged into `scheduler` (which must
  /// outlive the tier and have no request yet). `instant`: transfers take no time (cache_only).
  OffloadTier(const Scenario& scenario, Scheduler& scheduler, bool instant = false);
  ~OffloadTier();

  /// The worker's side before a step's forward pass, for the step `out` that schedule() just
  /// built at `t_ns`: the deferred stores are submitted, the flush waited for and the step's
  /// loads submitted. Returns when the forward pass starts.
  SimTimeNs begin_step(SimTimeNs t_ns, const SchedulerOutput& out);
  /// After the forward pass was launched at `start_ns`: the step's stores are recorded (when it
  /// scheduled tokens: `executed`), the jobs ended by `start_ns` are reported and handed to the
  /// scheduler for its update_from_output.
  void report(SimTimeNs start_ns, bool executed, const SchedulerOutput& out);
  /// A step that scheduled nothing ended; `polling`: EngineCore sleeps 1 ms before the next.
  void count_empty_step(bool polling) {
    ++stats_.empty_steps;
    stats_.polling_steps += polling;
  }

  /// cache_only with the tier: `request` (max_tokens 1) through the scheduler and the connector
  /// at `now_ns`, every transfer done as soon as it is submitted: steps until its prompt is
  /// computed and it finished, then until its stores are reported and its blocks freed. vLLM's
  /// code decides the GPU and CPU hits, the loads, the stores and the CPU evictions. Returns its
  /// computed tokens when it first ran (GPU hits + tokens loaded from the tier); a request that
  /// can never fit the pool is aborted (0). The caller checks the scheduler's step_error.
  std::int64_t serve_cache_only(Request& request, SimTimeNs now_ns);

  /// Whether a transfer is unfinished (submitted or deferred).
  bool transfers_pending() const { return !worker_.in_flight().empty(); }
  /// Whether the last report handed the scheduler anything.
  bool reported_anything() const { return !sending_.empty() || !recving_.empty(); }

  /// Whether the scheduler holds `request` for the connector (finished, blocks not yet freed).
  bool holds(const Request& request) const;
  /// Keeps a finished request the scheduler holds (and its live slot) until it is let go.
  void park(std::unique_ptr<Request> request, std::int64_t slot) {
    parked_.push_back({std::move(request), slot});
  }
  /// Destroys the parked requests that neither the scheduler nor the worker refers to any
  /// more; their slots are appended to `free_slots`.
  void reap(std::vector<std::int64_t>& free_slots);
  /// Requests parked now.
  std::size_t num_parked() const { return parked_.size(); }

  const OffloadTierStats& stats() const { return stats_; }
  const OffloadingConnector& connector() const { return connector_; }
  const OffloadWorker& worker() const { return worker_; }
  /// The first broken invariant of the connector or the worker ("" if none).
  std::string find_violation() const;

 private:
  SimTimeNs job_ns(std::size_t num_gpu_blocks) const;

  Scheduler& scheduler_;
  OffloadingConnector connector_;
  OffloadWorker worker_;
  SimTimeNs latency_ns_ = 0;
  double link_bytes_per_s_ = 1;  // hardware.host_link_bytes_per_s
  bool instant_ = false;         // cache_only: transfers take no time
  SchedulerOutput scratch_out_;  // serve_cache_only's steps
  std::vector<RequestOutput> scratch_outputs_;
  SimTimeNs store_free_ns_ = 0, load_free_ns_ = 0;  // when each channel's last job ends
  std::vector<Request*> sending_, recving_;
  struct Parked {
    std::unique_ptr<Request> request;
    std::int64_t slot = 0;
  };
  std::vector<Parked> parked_;
  OffloadTierStats stats_;
};

}  // namespace kvsim
