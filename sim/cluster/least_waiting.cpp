// least_waiting (spec §2): the argmin of the polled waiting queues, ties to the lowest index.
#include "core/common/assert.h"
#include "sim/cluster/replica_view.h"

namespace kvsim {

RouteDecision least_waiting_pick(std::span<const ReplicaView> views) {
  KVSIM_ASSERT(!views.empty());
  std::int32_t best = 0, second = -1;
  const auto w = [&](std::int32_t i) { return views[static_cast<std::size_t>(i)].num_waiting; };
  for (std::int32_t r = 1; r < static_cast<std::int32_t>(views.size()); ++r) {
    if (w(r) < w(best)) {
      second = best;
      best = r;
    } else if (second < 0 || w(r) < w(second)) {
      second = r;
    }
  }
  RouteDecision d;
  d.replica = best;
  d.branch = "least_waiting";
  d.has_score = true;
  d.score = static_cast<double>(w(best));
  d.runner_up = second;
  if (second >= 0) d.runner_up_score = static_cast<double>(w(second));
  return d;
}

}  // namespace kvsim
