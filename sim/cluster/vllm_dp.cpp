#include "sim/cluster/vllm_dp.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

VllmDpBalancer::VllmDpBalancer(std::int32_t num_engines, std::int32_t client_count,
                               std::int32_t client_index)
    : waiting_(static_cast<std::size_t>(num_engines), 0),
      running_(static_cast<std::size_t>(num_engines), 0),
      start_(static_cast<std::int32_t>((std::int64_t{num_engines} * client_index) / client_count)),
      client_count_(client_count) {
  KVSIM_ASSERT(num_engines >= 1 && client_count >= 1 && client_index >= 0 &&
               client_index < client_count);
}

void VllmDpBalancer::on_snapshot(std::span<const ReplicaView> views) {
  KVSIM_ASSERT(views.size() == waiting_.size());
  for (std::size_t i = 0; i < views.size(); ++i) {
    waiting_[i] = views[i].num_waiting;
    running_[i] = views[i].num_running;
  }
}

void VllmDpBalancer::on_zero_snapshot() {
  std::fill(waiting_.begin(), waiting_.end(), 0);
  std::fill(running_.begin(), running_.end(), 0);
}

RouteDecision VllmDpBalancer::pick() {
  const auto n = static_cast<std::int32_t>(waiting_.size());
  std::int32_t best = -1, second = -1;
  std::int64_t best_s = 0, second_s = 0;
  for (std::int32_t k = 0; k < n; ++k) {
    const std::int32_t i = (start_ + k) % n;
    const std::int64_t s =
        4 * waiting_[static_cast<std::size_t>(i)] + running_[static_cast<std::size_t>(i)];
    if (best < 0 || s < best_s) {
      second = best;
      second_s = best_s;
      best = i;
      best_s = s;
    } else if (second < 0 || s < second_s) {
      second = i;
      second_s = s;
    }
  }
  waiting_[static_cast<std::size_t>(best)] += client_count_;
  RouteDecision d;
  d.replica = best;
  d.branch = "dp_lb";
  d.has_score = true;
  d.score = static_cast<double>(best_s);
  d.runner_up = second;
  d.runner_up_score = static_cast<double>(second_s);
  return d;
}

}  // namespace kvsim
