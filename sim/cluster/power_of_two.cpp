// power_of_two (spec §2): draw two distinct replicas uniformly (a in [0, N), then b in [0, N - 1)
// shifted past a); send to the one with the smaller router-side in-flight count; equal counts go
// to the first drawn. One replica: it, without a draw.
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class PowerOfTwoRouter final : public Router {
 public:
  explicit PowerOfTwoRouter(std::uint64_t seed) : rng_(make_stream(seed, "router.power_of_two")) {}
  RouteDecision route(const RouteInput&, std::span<const ReplicaLoad> loads) override {
    RouteDecision d;
    const std::uint64_t n = loads.size();
    if (n == 1) {
      d.replica = 0;
      d.branch = "single";
      return d;
    }
    const std::uint64_t a = uniform_below(rng_, n);
    std::uint64_t b = uniform_below(rng_, n - 1);
    if (b >= a) ++b;
    const std::int64_t la = loads[a].in_flight, lb = loads[b].in_flight;
    const bool take_b = lb < la;
    d.replica = static_cast<std::int32_t>(take_b ? b : a);
    d.runner_up = static_cast<std::int32_t>(take_b ? a : b);
    d.branch = la == lb ? "tie_first_drawn" : "less_loaded";
    d.has_score = true;
    d.score = static_cast<double>(take_b ? lb : la);
    d.runner_up_score = static_cast<double>(take_b ? la : lb);
    return d;
  }

 private:
  RngStream rng_;
};

}  // namespace

std::unique_ptr<Router> make_power_of_two_router(std::uint64_t seed) {
  return std::make_unique<PowerOfTwoRouter>(seed);
}

}  // namespace kvsim
