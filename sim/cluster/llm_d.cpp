#include "sim/cluster/llm_d.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

LlmDPicker::LlmDPicker(LlmDParams params, std::uint64_t seed)
    : params_(params), rng_(make_stream(seed, "router.llm_d")) {}

RouteDecision LlmDPicker::pick(std::span<const LlmDEndpoint> eps, std::int64_t total_blocks) {
  const std::size_t n = eps.size();
  KVSIM_ASSERT(n >= 1);
  const LlmDWeights& w = params_.weights;
  std::int64_t q_min = eps[0].num_waiting, q_max = q_min, c_max = 0;
  std::int64_t p_min = -1, p_max = -1;
  for (const LlmDEndpoint& e : eps) {
    q_min = std::min(q_min, e.num_waiting);
    q_max = std::max(q_max, e.num_waiting);
    c_max = std::max(c_max, e.active);
    if (e.precise_raw >= 0) {
      p_min = p_min < 0 ? e.precise_raw : std::min(p_min, e.precise_raw);
      p_max = std::max(p_max, e.precise_raw);
    }
  }
  const auto clamp01 = [](double x) { return std::clamp(x, 0.0, 1.0); };
  totals_.assign(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    const LlmDEndpoint& e = eps[i];
    double t = 0;
    if (w.queue != 0) {
      const double s = q_max == q_min ? 1.0
                                      : static_cast<double>(q_max - e.num_waiting) /
                                            static_cast<double>(q_max - q_min);
      t += w.queue * clamp01(s);
    }
    if (w.kv_usage != 0) t += w.kv_usage * clamp01(1.0 - e.kv_usage);
    if (w.prefix != 0) {
      const double s = total_blocks > 0 ? static_cast<double>(e.matched_blocks) /
                                              static_cast<double>(total_blocks)
                                        : 0.0;
      t += w.prefix * clamp01(s);
    }
    if (w.precise_prefix != 0) {
      double s = 0;
      if (e.precise_raw >= 0)
        s = p_max == p_min ? 1.0
                           : static_cast<double>(e.precise_raw - p_min) /
                                 static_cast<double>(p_max - p_min);
      t += w.precise_prefix * clamp01(s);
    }
    if (w.load_aware != 0) {
      const double s =
          e.num_waiting == 0
              ? 0.5
              : 0.5 * (1.0 - static_cast<double>(std::min<std::int64_t>(e.num_waiting, 128)) / 128.0);
      t += w.load_aware * clamp01(s);
    }
    if (w.active_request != 0) {
      const double s = e.active <= params_.idle_threshold || c_max == 0
                           ? 1.0
                           : static_cast<double>(c_max - e.active) / static_cast<double>(c_max) *
                                 params_.max_busy_score;
      t += w.active_request * clamp01(s);
    }
    totals_[i] = t;
  }
  // The max-score picker: shuffle, then a stable sort by total, highest first.
  order_.resize(n);
  for (std::size_t i = 0; i < n; ++i) order_[i] = static_cast<std::int32_t>(i);
  for (std::size_t i = n - 1; i > 0; --i)
    std::swap(order_[i], order_[uniform_below(rng_, i + 1)]);
  // The first and second of the stable sort, found in two passes over the shuffled order (no
  // sort buffer).
  const auto total = [&](std::int32_t i) { return totals_[static_cast<std::size_t>(i)]; };
  std::int32_t first = order_[0];
  for (std::int32_t i : order_)
    if (total(i) > total(first)) first = i;
  std::int32_t second = -1;
  for (std::int32_t i : order_)
    if (i != first && (second < 0 || total(i) > total(second))) second = i;
  RouteDecision d;
  d.replica = first;
  d.has_score = true;
  d.score = totals_[static_cast<std::size_t>(d.replica)];
  d.matched_blocks = eps[static_cast<std::size_t>(d.replica)].matched_blocks;
  d.branch = "score";
  if (n > 1) {
    d.runner_up = second;
    d.runner_up_score = totals_[static_cast<std::size_t>(d.runner_up)];
    if (d.runner_up_score == d.score) d.branch = "tie_random";
  }
  return d;
}

}  // namespace kvsim
