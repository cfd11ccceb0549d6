#include "sim/cluster/sglang_cache_aware.h"

#include "core/common/assert.h"

namespace kvsim {

RouteDecision sglang_cache_aware_pick(std::span<const SglangWorker> workers,
                                      const SglangMatch& match, const SglangParams& params) {
  KVSIM_ASSERT(!workers.empty());
  const auto n = static_cast<std::int32_t>(workers.size());
  const auto w = [&](std::int32_t i) -> const SglangWorker& {
    return workers[static_cast<std::size_t>(i)];
  };
  std::int32_t least = 0, most = 0, smallest = 0;
  for (std::int32_t i = 1; i < n; ++i) {
    if (w(i).load < w(least).load) least = i;
    if (w(i).load > w(most).load) most = i;
    if (w(i).tree_chars < w(smallest).tree_chars) smallest = i;
  }
  const std::int64_t max_load = w(most).load, min_load = w(least).load;
  const bool imbalanced = max_load - min_load > params.balance_abs_threshold &&
                          static_cast<double>(max_load) >
                              params.balance_rel_threshold * static_cast<double>(min_load);
  RouteDecision d;
  d.has_score = true;
  if (imbalanced) {
    d.replica = least;
    d.branch = "balance";
    d.score = static_cast<double>(min_load);
    return d;
  }
  const double rate = match.text_chars > 0 ? static_cast<double>(match.matched_chars) /
                                                 static_cast<double>(match.text_chars)
                                           : 0.0;
  d.score = rate;
  if (rate > params.cache_threshold && match.tenant >= 0) {
    d.replica = match.tenant;
    d.branch = "cache";
  } else {
    d.replica = smallest;
    d.branch = "smallest_tenant";
  }
  return d;
}

}  // namespace kvsim
