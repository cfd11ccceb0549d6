// prefix_ideal and prefix_bounded (spec §8), the reference routers of cache-only cluster replays:
//   prefix_ideal: the replica with the most leading cached tokens for the request as its own
//     engine's lookup returns them (get_computed_blocks before the full-hit rule: the leading
//     cached full blocks, at most (prompt - 1) / block_size of them -- vLLM v0.7.2 drops the last
//     block of a block-aligned prompt from its lookup, v0.8+ caps the hit at prompt - 1 tokens:
//     the same count); ties -> fewest requests routed so far -> lowest index.
//   prefix_bounded(eps): the same among the replicas whose routed count is < ceil((1 + eps) (i +
//     1) / N) before request i (0-based) is placed (consistent hashing with bounded loads).
// The cached blocks come from the replicas' KV events (KvBlockIndex, counting copies): a
// decision walks the prompt's blocks once, O(prompt blocks + N).
// Branches: "prefix" (the chosen replica matches a block), "no_hit" (none matches any), and for
// prefix_bounded "bound" (a replica with a longer match was over the bound).
#include <cmath>
#include <vector>

#include "core/common/assert.h"
#include "sim/cluster/router.h"

namespace kvsim {
namespace {

class PrefixIdealRouter final : public Router {
 public:
  PrefixIdealRouter(std::int32_t n, std::int64_t block_size, double eps, bool bounded)
      : matched_(static_cast<std::size_t>(n)),
        block_size_(block_size),
        eps_(eps),
        bounded_(bounded) {}

  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) override {
    KVSIM_ASSERT(in.kv_index != nullptr);
    const auto n = static_cast<std::int32_t>(loads.size());
    const std::int64_t lookup_blocks =
        in.prompt_tokens > 0 ? (in.prompt_tokens - 1) / block_size_ : 0;
    in.kv_index->longest_prefix(
        in.content_hashes.first(static_cast<std::size_t>(std::min<std::int64_t>(
            lookup_blocks, static_cast<std::int64_t>(in.content_hashes.size())))),
        matched_);
    std::int64_t limit = 0;
    if (bounded_)
      limit = static_cast<std::int64_t>(
          std::ceil((1.0 + eps_) * static_cast<double>(in.index + 1) / static_cast<double>(n)));
    // a before b: more matched, then fewer routed, then the lower index (the scan order).
    const auto better = [&](std::int32_t a, std::int32_t b) {
      const auto ua = static_cast<std::size_t>(a), ub = static_cast<std::size_t>(b);
      if (matched_[ua] != matched_[ub]) return matched_[ua] > matched_[ub];
      return loads[ua].routed < loads[ub].routed;
    };
    std::int32_t best = -1, second = -1, best_any = 0;
    for (std::int32_t r = 0; r < n; ++r) {
      if (better(r, best_any)) best_any = r;
      if (bounded_ && loads[static_cast<std::size_t>(r)].routed >= limit) continue;
      if (best < 0 || better(r, best)) {
        second = best;
        best = r;
      } else if (second < 0 || better(r, second)) {
        second = r;
      }
    }
    KVSIM_ASSERT(best >= 0, "prefix_bounded: every replica over the bound");
    RouteDecision d;
    d.replica = best;
    d.has_score = true;
    const auto tokens = [&](std::int32_t r) {
      return static_cast<double>(matched_[static_cast<std::size_t>(r)] * block_size_);
    };
    d.score = tokens(best);
    d.runner_up = second;
    if (second >= 0) d.runner_up_score = tokens(second);
    d.matched_blocks = matched_[static_cast<std::size_t>(best)];
    if (matched_[static_cast<std::size_t>(best_any)] > d.matched_blocks)
      d.branch = "bound";
    else
      d.branch = d.matched_blocks > 0 ? "prefix" : "no_hit";
    return d;
  }
  std::optional<KvBlockIndex::Removal> kv_index_removal() const override {
    return KvBlockIndex::Removal::kCount;
  }

 private:
  std::vector<std::int64_t> matched_;
  std::int64_t block_size_;
  double eps_;
  bool bounded_;
};

}  // namespace

std::unique_ptr<Router> make_prefix_ideal_router(std::int32_t num_replicas,
                                                 std::int64_t block_size) {
  return std::make_unique<PrefixIdealRouter>(num_replicas, block_size, 0.0, false);
}

std::unique_ptr<Router> make_prefix_bounded_router(std::int32_t num_replicas,
                                                   std::int64_t block_size, double eps) {
  return std::make_unique<PrefixIdealRouter>(num_replicas, block_size, eps, true);
}

}  // namespace kvsim
