// least_requests (spec §2): the argmin of the router's own in-flight counts, ties to the lowest
// index. In cache_only mode nothing completes, so it is the fewest requests routed so far (spec
// §8's load).
#include <algorithm>

#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class LeastRequestsRouter final : public Router {
 public:
  RouteDecision route(const RouteInput&, std::span<const ReplicaLoad> loads) override {
    // Keys (in_flight, index) packed in 64 bits (replicas < 2^16): the smallest key is the argmin
    // with its tie-break, the second smallest the runner-up. Four independent lanes of
    // branchless min/max, then merged: no compare waits on the one before.
    constexpr std::uint64_t kNone = ~std::uint64_t{0};
    std::uint64_t first[4] = {kNone, kNone, kNone, kNone};
    std::uint64_t second[4] = {kNone, kNone, kNone, kNone};
    const std::size_t n = loads.size();
    for (std::size_t r = 0; r < n; ++r) {
      const std::size_t l = r & 3;
      const std::uint64_t key = static_cast<std::uint64_t>(loads[r].in_flight) << 16 | r;
      second[l] = std::min(second[l], std::max(first[l], key));
      first[l] = std::min(first[l], key);
    }
    for (std::size_t l = 1; l < 4; ++l) {
      second[0] = std::min({second[0], second[l], std::max(first[0], first[l])});
      first[0] = std::min(first[0], first[l]);
    }
    const std::uint64_t best = first[0], runner = second[0];
    RouteDecision d;
    d.replica = static_cast<std::int32_t>(best & 0xffff);
    d.branch = "least_requests";
    d.has_score = true;
    d.score = static_cast<double>(best >> 16);
    if (n > 1) {
      d.runner_up = static_cast<std::int32_t>(runner & 0xffff);
      d.runner_up_score = static_cast<double>(runner >> 16);
    }
    return d;
  }
};

}  // namespace

std::unique_ptr<Router> make_least_requests_router() {
  return std::make_unique<LeastRequestsRouter>();
}

}  // namespace kvsim
