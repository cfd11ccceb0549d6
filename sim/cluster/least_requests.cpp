// least_requests (spec §2): the argmin of the router's own in-flight counts, ties to the lowest
// index. In cache_only mode nothing completes, so it is the fewest requests routed so far (spec
// §8's load).
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class LeastRequestsRouter final : public Router {
 public:
  RouteDecision route(const RouteInput&, std::span<const ReplicaLoad> loads) override {
    std::int32_t best = 0, second = -1;
    for (std::int32_t r = 1; r < static_cast<std::int32_t>(loads.size()); ++r) {
      if (loads[static_cast<std::size_t>(r)].in_flight <
          loads[static_cast<std::size_t>(best)].in_flight) {
        second = best;
        best = r;
      } else if (second < 0 || loads[static_cast<std::size_t>(r)].in_flight <
                                   loads[static_cast<std::size_t>(second)].in_flight) {
        second = r;
      }
    }
    RouteDecision d;
    d.replica = best;
    d.branch = "least_requests";
    d.has_score = true;
    d.score = static_cast<double>(loads[static_cast<std::size_t>(best)].in_flight);
    d.runner_up = second;
    if (second >= 0)
      d.runner_up_score = static_cast<double>(loads[static_cast<std::size_t>(second)].in_flight);
    return d;
  }
};

}  // namespace

std::unique_ptr<Router> make_least_requests_router() {
  return std::make_unique<LeastRequestsRouter>();
}

}  // namespace kvsim
