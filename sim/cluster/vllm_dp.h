#pragma once
// vllm_dp: vLLM v0.20.1's internal data-parallel load balancing (spec §3), the API server's
// DPLBAsyncMPClient.get_core_engine_for_request (vllm/v1/engine/core_client.py:1350-1378):
//   s_i = 4 waiting_i + running_i; scan i = start, start + 1, ... (mod N), start =
//   (N * client_index) // client_count; keep the first strictly smaller score (ties go to the
//   earliest in scan order); then waiting_e += client_count in the local view.
// A snapshot replaces the whole view, discarding the local bumps (core_client.py:1266-1287). For a
// dense model the snapshot is all zeros every 5 s (the v0.20.1 defect of §3.2): the rule is then
// round-robin from start, restarted at each snapshot -- the timed loop delivers those snapshots.

#include <cstdint>
#include <span>
#include <vector>

#include "sim/cluster/replica_view.h"

namespace kvsim {

class VllmDpBalancer {
 public:
  /// Precondition: num_engines >= 1, client_count >= 1, 0 <= client_index < client_count.
  VllmDpBalancer(std::int32_t num_engines, std::int32_t client_count = 1,
                 std::int32_t client_index = 0);
  /// A coordinator snapshot: the view becomes `views` (waiting, running), bumps discarded.
  void on_snapshot(std::span<const ReplicaView> views);
  /// A snapshot of zeros (a dense model's coordinator, §3.2).
  void on_zero_snapshot();
  /// One decision (and its bump). O(N), no allocation. Branch "dp_lb"; score = the chosen
  /// engine's s_i before the bump; runner-up the best other engine in scan order.
  RouteDecision pick();
  std::int64_t waiting(std::int32_t i) const { return waiting_[static_cast<std::size_t>(i)]; }
  std::int64_t running(std::int32_t i) const { return running_[static_cast<std::size_t>(i)]; }
  std::int32_t start() const { return start_; }

 private:
  std::vector<std::int64_t> waiting_, running_;
  std::int32_t start_;
  std::int32_t client_count_;
};

}  // namespace kvsim
