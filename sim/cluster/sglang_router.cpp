// sglang_cache_aware as a router (spec §6.1): the decision function of sglang_cache_aware.h over
// the router's own in-flight counts and its own approximate radix tree. The tree is modelled over
// the engine's token blocks (the real router matches characters): a node per chained block id,
// tagged with the tenants (replicas) whose requests passed through it; a tenant's size is the
// tokens of the nodes tagged with it. Match: the prompt's blocks (a partial last one included)
// while the tree has them; matched = their tokens; the tenant of the deepest matched node (the
// lowest index of several). After each decision the prompt is inserted into the chosen tenant's
// tree. The LRU trim to max_tree_size (2^26 characters per tenant by default) is not modelled:
// no run here comes near it.
#include <algorithm>
#include <bit>
#include <unordered_map>
#include <vector>

#include "core/common/assert.h"
#include "sim/cluster/sglang_cache_aware.h"

namespace kvsim {
namespace {

class SglangRouter final : public Router {
 public:
  SglangRouter(std::int32_t n, const SglangParams& params, std::int64_t block_size)
      : params_(params), workers_(static_cast<std::size_t>(n)), block_size_(block_size) {}

  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) override {
    SglangMatch m;
    m.text_chars = in.prompt_tokens;
    std::int64_t matched_blocks = 0;
    for (std::size_t j = 0; j < in.block_ids.size(); ++j) {
      const auto it = nodes_.find(in.block_ids[j]);
      if (it == nodes_.end()) break;
      m.matched_chars += len(in, j);
      m.tenant = std::countr_zero(it->second);
      ++matched_blocks;
    }
    for (std::size_t i = 0; i < workers_.size(); ++i) workers_[i].load = loads[i].in_flight;
    RouteDecision d = sglang_cache_aware_pick(workers_, m, params_);
    d.matched_blocks = d.replica == m.tenant ? matched_blocks : 0;
    // Insert the text into the chosen tenant's tree.
    const std::uint64_t bit = std::uint64_t{1} << d.replica;
    for (std::size_t j = 0; j < in.block_ids.size(); ++j) {
      std::uint64_t& mask = nodes_[in.block_ids[j]];
      if ((mask & bit) == 0) {
        mask |= bit;
        workers_[static_cast<std::size_t>(d.replica)].tree_chars += len(in, j);
      }
    }
    return d;
  }
  std::int64_t block_ids_needed() const override { return kMaxBlocks; }

 private:
  static constexpr std::int64_t kMaxBlocks = std::int64_t{1} << 20;
  /// Tokens of block j of the prompt (the last one may be partial).
  std::int64_t len(const RouteInput& in, std::size_t j) const {
    return std::min(block_size_, in.prompt_tokens - static_cast<std::int64_t>(j) * block_size_);
  }
  SglangParams params_;
  std::vector<SglangWorker> workers_;
  std::unordered_map<std::uint64_t, std::uint64_t> nodes_;  // block id -> tenant bits
  std::int64_t block_size_;
};

}  // namespace

std::unique_ptr<Router> make_sglang_router(std::int32_t num_replicas, const SglangParams& params,
                                           std::int64_t block_size) {
  KVSIM_ASSERT(num_replicas >= 1 && num_replicas <= 64, "sglang_cache_aware: 1 to 64 replicas");
  return std::make_unique<SglangRouter>(num_replicas, params, block_size);
}

}  // namespace kvsim
