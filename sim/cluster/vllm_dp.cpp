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

namespace kvsim {
namespace {

/// vllm_dp with the coordinator's snapshots (spec §3.2-3.3). Dense: a snapshot of zeros at each
/// tick (phase + k 5 s): round-robin from `start`, restarted at each tick. MoE: at each 100 ms
/// tick, a snapshot of the replicas' counts at their last step ends when any changed since the
/// last snapshot, or when 5 s have passed since it (the coordinator's idle publish).
class VllmDpRouter final : public Router {
 public:
  VllmDpRouter(std::int32_t n, std::int32_t api_servers, bool moe, SimTimeNs interval,
               SimTimeNs phase)
      : dp_(n, api_servers), moe_(moe), interval_(interval), phase_(phase),
        published_(static_cast<std::size_t>(n)) {}
  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad>) override {
    RouteDecision d = dp_.pick();
    d.view_age_ns = in.now_ns - snapshot_ns_;
    return d;
  }
  SimTimeNs refresh_interval_ns() const override { return interval_; }
  SimTimeNs refresh_phase_ns() const override { return phase_; }
  void on_refresh(SimTimeNs now_ns, std::span<const ReplicaView> step_end) override {
    if (!moe_) {
      dp_.on_zero_snapshot();
      snapshot_ns_ = now_ns;
      return;
    }
    bool changed = false;
    for (std::size_t i = 0; i < published_.size(); ++i)
      changed |= step_end[i].num_waiting != published_[i].num_waiting ||
                 step_end[i].num_running != published_[i].num_running;
    if (!changed && now_ns - snapshot_ns_ < kIdlePublishNs) return;
    for (std::size_t i = 0; i < published_.size(); ++i) published_[i] = step_end[i];
    dp_.on_snapshot(published_);
    snapshot_ns_ = now_ns;
  }

 private:
  static constexpr SimTimeNs kIdlePublishNs = 5'000'000'000;  // coordinator.py: every 5 s
  VllmDpBalancer dp_;
  bool moe_;
  SimTimeNs interval_, phase_;
  std::vector<ReplicaView> published_;
  SimTimeNs snapshot_ns_ = 0;
};

}  // namespace

std::unique_ptr<Router> make_vllm_dp_router(std::int32_t num_replicas, std::int32_t api_servers,
                                            bool moe, SimTimeNs refresh_interval_ns,
                                            SimTimeNs phase_ns) {
  return std::make_unique<VllmDpRouter>(num_replicas, api_servers, moe, refresh_interval_ns,
                                        phase_ns);
}

}  // namespace kvsim
