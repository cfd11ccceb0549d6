// MetricsCollector's CPU tier figures (enable_offload): steps.csv's cpu_tier columns,
// summary.json's empty_steps and kv_offload, vLLM's connector series in metrics.prom
// (sim/OUTPUTS.md).

#include <fmt/format.h>

#include "sim/metrics/metrics.h"

namespace kvsim {

void MetricsCollector::on_empty_step(const StepView& v) {
  // vLLM's PrefixCacheStats count every lookup, those of a step that then scheduled nothing too.
  const SchedulerOutput& out = *v.out;
  prefix_queries_ += out.prefix_queries_tokens;
  prefix_hits_ += out.prefix_hits_tokens;
  pending_.prefix_queries += out.prefix_queries_tokens;
  pending_.prefix_hits += out.prefix_hits_tokens;
}

void MetricsCollector::take_offload_deltas() {
  const OffloadTierStats& now = *offload_;
  OffloadTierStats& seen = offload_seen_;
  StepRecord& r = pending_;
  r.cpu_tier_blocks_used = now.cpu_blocks_used;
  r.cpu_tier_hit_tokens += now.cpu_hit_tokens - seen.cpu_hit_tokens;
  r.cpu_tier_loaded_blocks += now.load_gpu_blocks - seen.load_gpu_blocks;
  r.cpu_tier_stored_blocks += now.store_gpu_blocks - seen.store_gpu_blocks;
  r.cpu_tier_evicted_blocks += now.cpu_evicted_blocks - seen.cpu_evicted_blocks;
  r.bytes_gpu_to_cpu += now.bytes_gpu_to_cpu - seen.bytes_gpu_to_cpu;
  r.bytes_cpu_to_gpu += now.bytes_cpu_to_gpu - seen.bytes_cpu_to_gpu;
  seen = now;
}

void MetricsCollector::summary_offload(std::string& o) const {
  const OffloadTierStats& t = *offload_;
  o += fmt::format("  \"empty_steps\": {},\n", t.empty_steps);
  o += fmt::format(
      "  \"kv_offload\": {{\"num_cpu_blocks\": {}, \"page_bytes\": {}, \"cpu_blocks_used_at_end\": "
      "{}, \"load_jobs\": {}, \"load_gpu_blocks\": {}, \"store_jobs\": {}, \"store_gpu_blocks\": "
      "{}, \"flushed_store_jobs\": {}, \"flush_wait_ns\": {}, \"cpu_evicted_blocks\": {}, "
      "\"cpu_hit_queries\": {}, \"cpu_hit_tokens\": {}, \"cpu_hit_requests\": {}, "
      "\"finished_sending\": {}, \"finished_recving\": {}, \"bytes_gpu_to_cpu\": {}, "
      "\"bytes_cpu_to_gpu\": {}, \"transfer_s_gpu_to_cpu\": {:.9f}, \"transfer_s_cpu_to_gpu\": "
      "{:.9f}, \"polling_steps\": {}}},\n",
      t.num_cpu_blocks, t.page_bytes, t.cpu_blocks_used, t.load_jobs, t.load_gpu_blocks,
      t.store_jobs, t.store_gpu_blocks, t.flushed_store_jobs, t.flush_wait_ns, t.cpu_evicted_blocks,
      t.cpu_hit_queries, t.cpu_hit_tokens, t.cpu_hit_requests, t.finished_sending,
      t.finished_recving, t.bytes_gpu_to_cpu, t.bytes_cpu_to_gpu,
      static_cast<double>(t.transfer_ns_gpu_to_cpu) / 1e9,
      static_cast<double>(t.transfer_ns_cpu_to_gpu) / 1e9, t.polling_steps);
}

void MetricsCollector::prometheus_offload(std::string& o, const std::string& label) const {
  const OffloadTierStats& t = *offload_;
  const auto counter = [&](const char* name, const char* help, double v) {
    o += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n{0}{{{2}}} {3}\n", name, help, label, v);
  };
  counter("vllm:external_prefix_cache_queries_total",
          "External prefix cache queries from KV connector cross-instance cache sharing, in terms "
          "of number of queried tokens.",
          static_cast<double>(t.cpu_hit_queries));
  counter("vllm:external_prefix_cache_hits_total",
          "External prefix cache hits from KV connector cross-instance cache sharing, in terms of "
          "number of cached tokens.",
          static_cast<double>(t.cpu_hit_tokens));
  // OffloadPromMetrics (offloading/metrics.py), one series per transfer type.
  const auto by_type = [&](const char* name, const char* help, double gpu_to_cpu,
                           double cpu_to_gpu) {
    o += fmt::format("# HELP {0} {1}\n# TYPE {0} counter\n", name, help);
    o += fmt::format("{}{{{},transfer_type=\"GPU_to_CPU\"}} {}\n", name, label, gpu_to_cpu);
    o += fmt::format("{}{{{},transfer_type=\"CPU_to_GPU\"}} {}\n", name, label, cpu_to_gpu);
  };
  by_type("vllm:kv_offload_total_bytes_total", "Number of bytes offloaded by KV connector",
          static_cast<double>(t.bytes_gpu_to_cpu), static_cast<double>(t.bytes_cpu_to_gpu));
  by_type("vllm:kv_offload_total_time_total", "Total time measured by all KV offloading operations",
          static_cast<double>(t.transfer_ns_gpu_to_cpu) / 1e9,
          static_cast<double>(t.transfer_ns_cpu_to_gpu) / 1e9);
  o += fmt::format(
      "# HELP kvsim:cpu_tier_blocks_used CPU tier blocks holding a key.\n# TYPE "
      "kvsim:cpu_tier_blocks_used gauge\nkvsim:cpu_tier_blocks_used{{{}}} {}\n",
      label, t.cpu_blocks_used);
}

}  // namespace kvsim
