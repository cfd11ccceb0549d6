// least_requests (spec §2): the argmin of the router's own in-flight counts, ties to the lowest
// index. In cache_only mode nothing completes, so it is the fewest requests routed so far (spec
// §8's load).
//
// The counts live in a tournament tree of keys (in_flight, index) packed in 64 bits (replicas <
// 2^16), kept by the cluster's on_in_flight reports: a change is O(log N), the decision reads the
// root (the argmin with its tie-break) and the runner-up among the log N subtrees the winner beat.
#include <algorithm>
#include <vector>

#include "core/common/assert.h"
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class LeastRequestsRouter final : public Router {
 public:
  explicit LeastRequestsRouter(std::int32_t n) : n_(n) {
    KVSIM_ASSERT(n >= 1 && n < (1 << 16));
    while (leaves_ < n) leaves_ *= 2;
    tree_.assign(static_cast<std::size_t>(2 * leaves_), kNone);
    for (std::int32_t r = 0; r < n; ++r) tree_[leaf(r)] = key(0, r);
    for (std::int32_t i = leaves_ - 1; i >= 1; --i)
      tree_[idx(i)] = std::min(tree_[idx(2 * i)], tree_[idx(2 * i + 1)]);
  }
  bool tracks_in_flight() const override { return true; }
  void on_in_flight(std::int32_t r, std::int64_t in_flight) override {
    std::size_t i = leaf(r);
    tree_[i] = key(in_flight, r);
    for (; i > 1; i /= 2) tree_[i / 2] = std::min(tree_[i], tree_[i ^ 1]);
  }
  RouteDecision route(const RouteInput&, std::span<const ReplicaLoad> loads) override {
    KVSIM_ASSERT(static_cast<std::int32_t>(loads.size()) == n_);
    const std::uint64_t best = tree_[1];
    // The runner-up: the smallest key of the subtrees beside the winner's path.
    std::uint64_t runner = kNone;
    for (std::size_t i = leaf(static_cast<std::int32_t>(best & 0xffff)); i > 1; i /= 2)
      runner = std::min(runner, tree_[i ^ 1]);
    RouteDecision d;
    d.replica = static_cast<std::int32_t>(best & 0xffff);
    d.branch = "least_requests";
    d.has_score = true;
    d.score = static_cast<double>(best >> 16);
    if (n_ > 1) {
      d.runner_up = static_cast<std::int32_t>(runner & 0xffff);
      d.runner_up_score = static_cast<double>(runner >> 16);
    }
    return d;
  }

 private:
  static constexpr std::uint64_t kNone = ~std::uint64_t{0};  // padding leaves
  static std::uint64_t key(std::int64_t in_flight, std::int32_t r) {
    return static_cast<std::uint64_t>(in_flight) << 16 | static_cast<std::uint64_t>(r);
  }
  static std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }
  std::size_t leaf(std::int32_t r) const { return static_cast<std::size_t>(leaves_ + r); }

  std::int32_t n_;
  std::int32_t leaves_ = 1;
  std::vector<std::uint64_t> tree_;  // 1-based heap layout; [0] unused
};

}  // namespace

std::unique_ptr<Router> make_least_requests_router(std::int32_t num_replicas) {
  return std::make_unique<LeastRequestsRouter>(num_replicas);
}

}  // namespace kvsim
