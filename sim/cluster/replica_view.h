#pragma once
// What a router's view holds of a replica's engine (shared/spec/cluster-routing.md §1.3): the
// polled metrics as of the replica's last step end before the view's last refresh (ReplicaView,
// router.h). The timed routers' decision functions read it; the timed loop fills it at each
// refresh (Router::on_refresh).

#include <cstdint>
#include <span>

#include "sim/cluster/router.h"

namespace kvsim {

/// least_waiting (§2): the argmin of the view's waiting queues, ties to the lowest index; score
/// = the chosen replica's waiting count, runner-up the best other one. O(N). Precondition: N >= 1.
[[nodiscard]] RouteDecision least_waiting_pick(std::span<const ReplicaView> views);

/// A uniform double in [0, 1) from `rng`: the top 53 bits of one draw times 2^-53.
[[nodiscard]] inline double uniform_01(RngStream& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace kvsim
