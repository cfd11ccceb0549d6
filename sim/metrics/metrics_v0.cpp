// MetricsCollector's vLLM V0 figures (enable_v0): swaps, copy-on-write copies, the CPU pool, the
// swapped queue, preemptions by mode and the KV memory saved by sharing (sim/OUTPUTS.md).

#include <fmt/format.h>

#include <algorithm>

#include "sim/metrics/metrics.h"

namespace kvsim {

namespace {

/// vLLM V0's cpu_cache_usage_sys: 1 - free / total (0 without a CPU pool).
double cpu_usage(const KVPoolStats& pool) {
  return pool.num_cpu_blocks > 0 ? 1.0 - static_cast<double>(pool.num_free_cpu_blocks) /
                                             static_cast<double>(pool.num_cpu_blocks)
                                 : 0.0;
}

}  // namespace

void MetricsCollector::on_step_v0(const V0Moves& m, std::int64_t swapped, const KVPoolStats& pool) {
  swapped_in_ += m.swapped_in;
  swapped_out_ += m.swapped_out;
  cow_copies_ += m.copies;
  preemptions_swap_ += m.by_swap;
  preemptions_recompute_ += m.by_recompute;
  const double cpu = cpu_usage(pool);
  const std::int64_t used = pool.num_blocks - pool.num_free_blocks;
  num_cpu_blocks_ = pool.num_cpu_blocks;
  sum_swapped_ += static_cast<double>(swapped);
  max_swapped_ = std::max(max_swapped_, swapped);
  sum_cpu_usage_ += cpu;
  max_cpu_usage_ = std::max(max_cpu_usage_, cpu);
  sum_table_blocks_ += static_cast<double>(pool.num_table_blocks);
  sum_used_blocks_ += static_cast<double>(used);
  StepRecord& r = pending_;
  r.num_swapped = swapped;
  r.cpu_cache_usage_perc = cpu;
  r.blocks_without_sharing = pool.num_table_blocks;
  r.blocks_used = used;
  r.swapped_in_blocks += m.swapped_in;
  r.swapped_out_blocks += m.swapped_out;
  r.cow_copies += m.copies;
  r.preemptions_swap += m.by_swap;
  r.preemptions_recompute += m.by_recompute;
}

void MetricsCollector::summary_v0(std::string& o) const {
  auto i64 = [&](const char* k, std::int64_t v) { o += fmt::format("  \"{}\": {},\n", k, v); };
  auto f6 = [&](const char* k, double v) { o += fmt::format("  \"{}\": {:.6f},\n", k, v); };
  auto f9 = [&](const char* k, double v) { o += fmt::format("  \"{}\": {:.9f},\n", k, v); };
  const double steps = num_steps_ ? static_cast<double>(num_steps_) : 1.0;
  i64("num_cpu_blocks", num_cpu_blocks_);
  i64("ignored", ignored_);
  i64("num_preemptions_swap", preemptions_swap_);
  i64("num_preemptions_recompute", preemptions_recompute_);
  i64("num_swapped_in_blocks", swapped_in_);
  i64("num_swapped_out_blocks", swapped_out_);
  i64("swapped_in_bytes", swapped_in_ * page_bytes_);
  i64("swapped_out_bytes", swapped_out_ * page_bytes_);
  i64("num_cow_copies", cow_copies_);
  f6("mean_num_swapped", sum_swapped_ / steps);
  i64("max_num_swapped", max_swapped_);
  f9("mean_cpu_cache_usage_perc", sum_cpu_usage_ / steps);
  f9("max_cpu_cache_usage_perc", max_cpu_usage_);
  f6("mean_blocks_without_sharing", sum_table_blocks_ / steps);
  f6("mean_blocks_used", sum_used_blocks_ / steps);
  f9("kv_sharing_saved_share",
     sum_table_blocks_ > 0 ? (sum_table_blocks_ - sum_used_blocks_) / sum_table_blocks_ : 0.0);
}

}  // namespace kvsim
