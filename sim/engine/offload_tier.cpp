#include "sim/engine/offload_tier.h"

#include <algorithm>
#include <cmath>

#include "core/common/assert.h"
#include "sim/config/scenario.h"

namespace kvsim {

namespace {

OffloadingConnectorConfig connector_config(const Scenario& s) {
  KVSIM_ASSERT(s.offload && s.cache.kv_offloading, "a CPU tier without its plan");
  const KvOffloadingConfig& o = *s.cache.kv_offloading;
  OffloadingConnectorConfig c;
  c.gpu_block_size = static_cast<std::int32_t>(s.cache.sizing.block_size);
  c.block_size_factor = s.offload->block_size_factor;
  c.enable_prefix_caching = s.cache.enable_prefix_caching;
  c.manager.num_blocks = s.offload->num_cpu_blocks;
  c.manager.eviction_policy = o.eviction_policy;
  c.manager.store_threshold = o.store_threshold;
  return c;
}

}  // namespace

OffloadTier::OffloadTier(const Scenario& scenario, Scheduler& scheduler, bool instant)
    : scheduler_(scheduler),
      connector_(connector_config(scenario), scheduler.kv_cache_manager().hashes()) {
  instant_ = instant;
  // EngineCore hashes every request's blocks when a connector is set, prefix caching or not.
  scheduler_.kv_cache_manager().coordinator()->hash_without_caching();
  scheduler_.set_connector(&connector_);
  latency_ns_ = std::llround(scenario.hardware.host_link_latency_us * 1e3);
  stats_.page_bytes = scenario.offload->page_bytes;
  stats_.num_cpu_blocks = scenario.offload->num_cpu_blocks;
  link_bytes_per_s_ = scenario.hardware.gpu.host_link_bytes_per_s;
}

OffloadTier::~OffloadTier() { scheduler_.set_connector(nullptr); }

SimTimeNs OffloadTier::job_ns(std::size_t num_gpu_blocks) const {
  if (instant_) return 0;
  // llround(n * page_bytes / bandwidth * 1e9), in that order (the bytes are exact integers).
  const auto bytes =
      static_cast<double>(static_cast<std::int64_t>(num_gpu_blocks) * stats_.page_bytes);
  return latency_ns_ + std::llround(bytes / link_bytes_per_s_ * 1e9);
}

SimTimeNs OffloadTier::begin_step(SimTimeNs t_ns, const SchedulerOutput& /*out*/) {
  // handle_preemptions: the stores the previous step prepared go to the GPU->CPU channel now.
  worker_.submit_deferred();
  worker_.set_end_times([&](const OffloadWorker::Job& j) {
    KVSIM_ASSERT(j.store, "a load submitted outside start_load_kv");
    const SimTimeNs start = std::max(t_ns, store_free_ns_);
    store_free_ns_ = start + job_ns(j.gpu_block_ids.size());
    ++stats_.store_jobs;
    stats_.store_gpu_blocks += static_cast<std::int64_t>(j.gpu_block_ids.size());
    return store_free_ns_;
  });
  // The blocking wait for the preempted requests' stores, then the forward pass's start.
  const std::span<Request* const> flush = connector_.flush();
  const SimTimeNs start = std::max(t_ns, worker_.flush_end(flush));
  stats_.flush_wait_ns += start - t_ns;
  worker_.handle_preemptions(flush);
  // start_load_kv: the step's loads go to the CPU->GPU channel.
  worker_.start_loads(connector_.loads());
  worker_.set_end_times([&](const OffloadWorker::Job& j) {
    const SimTimeNs begin = std::max(start, load_free_ns_);
    load_free_ns_ = begin + job_ns(j.gpu_block_ids.size());
    ++stats_.load_jobs;
    stats_.load_gpu_blocks += static_cast<std::int64_t>(j.gpu_block_ids.size());
    return load_free_ns_;
  });
  stats_.cpu_evicted_blocks += static_cast<std::int64_t>(connector_.evicted().size());
  const ConnectorCacheStats cs = scheduler_.take_connector_cache_stats();
  stats_.cpu_hit_requests += cs.requests + cs.preempted_requests;
  stats_.cpu_hit_queries += cs.queries + cs.preempted_queries;
  stats_.cpu_hit_tokens += cs.hits + cs.preempted_hits;
  return start;
}

void OffloadTier::report(SimTimeNs start_ns, bool executed, const SchedulerOutput& out) {
  // wait_for_save (a step with a forward pass): the step's stores, submitted by the next step.
  if (executed) worker_.prepare_stores(connector_.stores());
  // get_finished: a non-blocking query right after the forward pass was launched.
  worker_.complete_ended_by(start_ns);
  worker_.get_finished(out.finished, sending_, recving_);
  for (const OffloadWorker::Job& j : worker_.done()) {
    const std::int64_t bytes =
        static_cast<std::int64_t>(j.gpu_block_ids.size()) * stats_.page_bytes;
    (j.store ? stats_.bytes_gpu_to_cpu : stats_.bytes_cpu_to_gpu) += bytes;
    (j.store ? stats_.transfer_ns_gpu_to_cpu : stats_.transfer_ns_cpu_to_gpu) +=
        job_ns(j.gpu_block_ids.size());
    stats_.flushed_store_jobs += j.flushed;
  }
  stats_.finished_sending += static_cast<std::int64_t>(sending_.size());
  stats_.finished_recving += static_cast<std::int64_t>(recving_.size());
  stats_.cpu_blocks_used = connector_.manager().cpu().num_held();
  scheduler_.set_connector_output({sending_, recving_});
}

std::int64_t OffloadTier::serve_cache_only(Request& req, SimTimeNs now_ns) {
  scheduler_.add_request(req);
  std::int64_t computed = -1;
  const auto idle = [&] {
    return is_finished(req.status) && !holds(req) && !transfers_pending() &&
           !scheduler_.has_finished_requests() && scheduler_.num_unfinished_requests() == 0;
  };
  for (std::int64_t step = 0; !idle(); ++step) {
    KVSIM_ASSERT(step < (std::int64_t{1} << 24), "cache_only: a request that never ends");
    SchedulerOutput& out = scratch_out_;
    scheduler_.schedule(out);
    if (scheduler_.step_error()[0] != '\0') return 0;
    for (const ScheduledRequest& s : out.scheduled)
      if (s.request == &req && computed < 0) computed = s.num_computed_tokens;
    const bool executed = out.total_num_scheduled_tokens > 0;
    const SimTimeNs start = begin_step(now_ns, out);
    report(start, executed, out);
    scheduler_.update_from_output(scratch_outputs_);
    if (scheduler_.step_error()[0] != '\0') return 0;
    // Nothing ran, nothing moves and it still waits: it can never fit the pool.
    if (!executed && !is_finished(req.status) && scheduler_.running().empty() &&
        !transfers_pending() && !reported_anything())
      scheduler_.abort_request(req);
  }
  return std::max<std::int64_t>(computed, 0);
}

bool OffloadTier::holds(const Request& request) const {
  const std::span<Request* const> held = scheduler_.held();
  return std::find(held.begin(), held.end(), &request) != held.end();
}

void OffloadTier::reap(std::vector<std::int64_t>& free_slots) {
  std::erase_if(parked_, [&](Parked& p) {
    if (holds(*p.request) || worker_.references(*p.request)) return false;
    free_slots.push_back(p.slot);
    return true;
  });
}

std::string OffloadTier::find_violation() const {
  if (std::string v = connector_.find_violation(); !v.empty()) return v;
  return worker_.find_violation();
}

}  // namespace kvsim
