#pragma once
// What a router's view holds of a replica's engine (shared/spec/cluster-routing.md §1.3): the
// polled metrics as of the replica's last step end before the view's last refresh. The timed
// routers' decision functions read it; the timed loop (to come) fills it at each refresh.

#include <cstdint>
#include <span>

#include "sim/cluster/router.h"

namespace kvsim {

struct ReplicaView {
  std::int64_t num_waiting = 0;  // vllm:num_requests_waiting (waiting + skipped waiting)
  std::int64_t num_running = 0;  // vllm:num_requests_running
  double kv_usage = 0;           // vllm:kv_cache_usage_perc, in [0, 1]
};

/// least_waiting (§2): the argmin of the view's waiting queues, ties to the lowest index; score
/// = the chosen replica's waiting count, runner-up the best other one. O(N). Precondition: N >= 1.
[[nodiscard]] RouteDecision least_waiting_pick(std::span<const ReplicaView> views);

/// A uniform double in [0, 1) from `rng`: the top 53 bits of one draw times 2^-53.
[[nodiscard]] inline double uniform_01(RngStream& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

}  // namespace kvsim
