// round_robin (spec §2): the k-th routed request (0-based, in routing order) goes to replica
// (k + start) mod N.
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class RoundRobinRouter final : public Router {
 public:
  explicit RoundRobinRouter(std::int64_t start) : start_(start) {}
  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) override {
    const auto n = static_cast<std::int64_t>(loads.size());
    RouteDecision d;
    d.replica = static_cast<std::int32_t>((in.index + start_) % n);
    d.branch = "round_robin";
    return d;
  }

 private:
  std::int64_t start_;
};

}  // namespace

std::unique_ptr<Router> make_round_robin_router(std::int64_t start) {
  return std::make_unique<RoundRobinRouter>(start);
}

}  // namespace kvsim
