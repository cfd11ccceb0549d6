#include "sim/cluster/dynamo_kv.h"

#include <cmath>

#include "core/common/assert.h"

namespace kvsim {

DynamoKvSelector::DynamoKvSelector(DynamoParams params, std::uint64_t seed, std::string_view stream)
    : params_(params), rng_(make_stream(seed, stream)) {}

double DynamoKvSelector::cost(const DynamoWorker& w, std::int64_t isl, std::int64_t block_size,
                              double overlap_score_weight) {
  const double prefill_blocks =
      static_cast<double>(isl - w.overlap_blocks * block_size + w.active_tokens) /
      static_cast<double>(block_size);
  const double new_blocks =
      w.tracked ? static_cast<double>(w.new_blocks) : std::floor(prefill_blocks);
  const double decode_blocks = new_blocks + static_cast<double>(w.active_blocks);
  return overlap_score_weight * prefill_blocks + decode_blocks;
}

RouteDecision DynamoKvSelector::select(std::span<const DynamoWorker> workers, std::int64_t isl,
                                       std::int64_t block_size) {
  const auto n = static_cast<std::int32_t>(workers.size());
  KVSIM_ASSERT(n >= 1);
  costs_.resize(workers.size());
  double lo = 0, hi = 0;
  for (std::int32_t i = 0; i < n; ++i) {
    const double c = cost(workers[static_cast<std::size_t>(i)], isl, block_size,
                          params_.overlap_score_weight);
    costs_[static_cast<std::size_t>(i)] = c;
    if (i == 0 || c < lo) lo = c;
    if (i == 0 || c > hi) hi = c;
  }
  RouteDecision d;
  d.has_score = true;
  if (params_.router_temperature <= 0) {
    candidates_.clear();
    for (std::int32_t i = 0; i < n; ++i)
      if (costs_[static_cast<std::size_t>(i)] == lo) candidates_.push_back(i);
    if (candidates_.size() == 1) {
      d.replica = candidates_[0];
      d.branch = "cost";
    } else {
      bool equal_trees = true;
      std::int32_t smallest = candidates_[0];
      for (std::int32_t c : candidates_) {
        const std::int64_t t = workers[static_cast<std::size_t>(c)].tree_size;
        if (t != workers[static_cast<std::size_t>(candidates_[0])].tree_size) equal_trees = false;
        if (t < workers[static_cast<std::size_t>(smallest)].tree_size) smallest = c;
      }
      if (equal_trees) {
        d.replica = candidates_[uniform_below(rng_, candidates_.size())];
        d.branch = "tie_random";
      } else {
        d.replica = smallest;
        d.branch = "tie_tree_size";
      }
    }
  } else if (hi == lo) {
    d.replica = static_cast<std::int32_t>(uniform_below(rng_, workers.size()));
    d.branch = "softmax_uniform";
  } else {
    // x_w = -c_w / ((hi - lo) T); the largest x is the smallest cost's.
    const double scale = (hi - lo) * params_.router_temperature;
    const double x_max = -lo / scale;
    double total = 0;
    for (std::int32_t i = 0; i < n; ++i)
      total += std::exp(-costs_[static_cast<std::size_t>(i)] / scale - x_max);
    const double u = uniform_01(rng_);
    double cum = 0;
    d.replica = n - 1;
    for (std::int32_t i = 0; i < n; ++i) {
      cum += std::exp(-costs_[static_cast<std::size_t>(i)] / scale - x_max) / total;
      if (cum >= u) {
        d.replica = i;
        break;
      }
    }
    d.branch = "softmax";
  }
  d.score = costs_[static_cast<std::size_t>(d.replica)];
  for (std::int32_t i = 0; i < n; ++i) {
    if (i == d.replica) continue;
    if (d.runner_up < 0 ||
        costs_[static_cast<std::size_t>(i)] < costs_[static_cast<std::size_t>(d.runner_up)])
      d.runner_up = i;
  }
  if (d.runner_up >= 0) d.runner_up_score = costs_[static_cast<std::size_t>(d.runner_up)];
  return d;
}

}  // namespace kvsim
