// least_waiting (spec §2): the argmin of the polled waiting queues, ties to the lowest index.
#include <algorithm>
#include <vector>

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

namespace kvsim {
namespace {

/// least_waiting over the polled view: each replica's waiting queue at its last step end before
/// the last refresh (every `interval`, llm-d's 50 ms scrape by default).
class LeastWaitingRouter final : public Router {
 public:
  LeastWaitingRouter(std::int32_t n, SimTimeNs interval, SimTimeNs phase)
      : view_(static_cast<std::size_t>(n)), interval_(interval), phase_(phase) {}
  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad>) override {
    RouteDecision d = least_waiting_pick(view_);
    d.view_age_ns = in.now_ns - refreshed_ns_;
    return d;
  }
  SimTimeNs refresh_interval_ns() const override { return interval_; }
  SimTimeNs refresh_phase_ns() const override { return phase_; }
  void on_refresh(SimTimeNs now_ns, std::span<const ReplicaView> step_end) override {
    std::copy(step_end.begin(), step_end.end(), view_.begin());
    refreshed_ns_ = now_ns;
  }

 private:
  std::vector<ReplicaView> view_;
  SimTimeNs interval_, phase_;
  SimTimeNs refreshed_ns_ = 0;
};

}  // namespace

std::unique_ptr<Router> make_least_waiting_router(std::int32_t num_replicas,
                                                  SimTimeNs refresh_interval_ns,
                                                  SimTimeNs phase_ns) {
  return std::make_unique<LeastWaitingRouter>(num_replicas, refresh_interval_ns, phase_ns);
}

}  // namespace kvsim
