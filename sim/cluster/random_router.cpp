// random (spec §2): a uniform integer in [0, N) from the router's seeded stream, one draw per
// request.
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class RandomRouter final : public Router {
 public:
  explicit RandomRouter(std::uint64_t seed) : rng_(make_stream(seed, "router.random")) {}
  RouteDecision route(const RouteInput&, std::span<const ReplicaLoad> loads) override {
    RouteDecision d;
    d.replica = static_cast<std::int32_t>(uniform_below(rng_, loads.size()));
    d.branch = "random";
    return d;
  }

 private:
  RngStream rng_;
};

}  // namespace

std::unique_ptr<Router> make_random_router(std::uint64_t seed) {
  return std::make_unique<RandomRouter>(seed);
}

}  // namespace kvsim
