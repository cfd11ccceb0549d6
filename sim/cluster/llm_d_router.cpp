// llm_d as a router (spec §4): the EPP's weighted scorers (llm_d.h's LlmDPicker) over the polled
// view (vllm:num_requests_waiting, vllm:kv_cache_usage_perc at the replicas' last step ends as of
// the last 50 ms scrape), the router's own in-flight counts, and GIE's approximate prefix index:
//   - the prompt's full blocks (at most 256), each named by its chained content id;
//   - lookup (matchLongestPrefix): for block j = 0, 1, ...: the pods whose LRU holds block j;
//     stop at the first block no pod holds; every pod in the set gets +1;
//   - update (PreRequest), right after the decision: the request's blocks go into the chosen
//     pod's LRU (most recent first); a pod's LRU holds at most `capacity` blocks and an eviction
//     drops the pod from that block's set. It never learns of the engines' own evictions.
// Modelled over the engine's token blocks (the real scorer hashes 4 characters per token).
// The precise prefix scorer (weight precise_prefix) reads the cluster's index of the pods' KV
// events (KvBlockIndex, a BlockRemoved dropping the pod, as llm-d's kvblock index does): each
// pod's longest leading run of the prompt's full blocks. Its speculative entries (added at
// dispatch with a 2 s TTL) are not modelled.
#include <bit>
#include <list>
#include <unordered_map>
#include <vector>

#include "core/common/assert.h"
#include "sim/cluster/llm_d.h"

namespace kvsim {
namespace {

/// GIE's approximate prefix index: block id -> the pods (a bit each) whose LRU holds it.
class ApproximatePrefixIndex {
 public:
  ApproximatePrefixIndex(std::int32_t num_pods, std::int64_t capacity)
      : lru_(static_cast<std::size_t>(num_pods)), capacity_(capacity) {}
  /// matched[p] = how many of the first k blocks pod p holds, k = where no pod holds block k.
  /// O(k x pods holding each block).
  void match(std::span<const std::uint64_t> ids, std::span<std::int64_t> matched) const {
    std::fill(matched.begin(), matched.end(), 0);
    for (std::uint64_t id : ids) {
      const auto it = pods_.find(id);
      if (it == pods_.end() || it->second == 0) return;
      for (std::uint64_t m = it->second; m != 0; m &= m - 1) ++matched[std::countr_zero(m)];
    }
  }
  /// Records `ids` on pod p (most recently used), evicting its least recently used beyond capacity.
  void add(std::int32_t p, std::span<const std::uint64_t> ids) {
    Lru& l = lru_[static_cast<std::size_t>(p)];
    const std::uint64_t bit = std::uint64_t{1} << p;
    for (std::uint64_t id : ids) {
      if (const auto it = l.where.find(id); it != l.where.end()) {
        l.order.splice(l.order.begin(), l.order, it->second);
        continue;
      }
      l.order.push_front(id);
      l.where.emplace(id, l.order.begin());
      pods_[id] |= bit;
      if (static_cast<std::int64_t>(l.order.size()) > capacity_) {
        const std::uint64_t old = l.order.back();
        l.order.pop_back();
        l.where.erase(old);
        const auto it = pods_.find(old);
        it->second &= ~bit;
        if (it->second == 0) pods_.erase(it);
      }
    }
  }

 private:
  struct Lru {
    std::list<std::uint64_t> order;  // front = most recently used
    std::unordered_map<std::uint64_t, std::list<std::uint64_t>::iterator> where;
  };
  std::unordered_map<std::uint64_t, std::uint64_t> pods_;  // block id -> pod bits
  std::vector<Lru> lru_;
  std::int64_t capacity_;
};

class LlmDRouter final : public Router {
 public:
  LlmDRouter(std::int32_t n, const LlmDParams& params, std::uint64_t seed, SimTimeNs interval,
             SimTimeNs phase, std::int64_t lru_capacity, std::int64_t block_size)
      : picker_(params, seed),
        index_(n, lru_capacity),
        view_(static_cast<std::size_t>(n)),
        endpoints_(static_cast<std::size_t>(n)),
        matched_(static_cast<std::size_t>(n)),
        precise_(static_cast<std::size_t>(n)),
        interval_(interval),
        phase_(phase),
        block_size_(block_size),
        uses_prefix_(params.weights.prefix != 0),
        uses_precise_(params.weights.precise_prefix != 0) {}

  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) override {
    // Full blocks only, at most maxPrefixBlocksToMatch.
    const std::int64_t full = std::min<std::int64_t>(in.prompt_tokens / block_size_, kMaxBlocks);
    const std::span<const std::uint64_t> ids = in.block_ids.first(static_cast<std::size_t>(
        std::min<std::int64_t>(full, static_cast<std::int64_t>(in.block_ids.size()))));
    if (uses_prefix_) index_.match(ids, matched_);
    if (uses_precise_) in.kv_index->longest_prefix(in.content_hashes, precise_);
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
      LlmDEndpoint& e = endpoints_[i];
      e.num_waiting = view_[i].num_waiting;
      e.kv_usage = view_[i].kv_usage;
      e.matched_blocks = uses_prefix_ ? matched_[i] : 0;
      // A pod holding not even the first block has no entry in the scorer's map.
      e.precise_raw = uses_precise_ && precise_[i] > 0 ? precise_[i] : -1;
      e.active = loads[i].in_flight;
    }
    RouteDecision d = picker_.pick(endpoints_, static_cast<std::int64_t>(ids.size()));
    if (!uses_prefix_)
      d.matched_blocks = uses_precise_ ? precise_[static_cast<std::size_t>(d.replica)] : -1;
    d.prefix_blocks = uses_prefix_    ? matched_[static_cast<std::size_t>(d.replica)]
                      : uses_precise_ ? precise_[static_cast<std::size_t>(d.replica)]
                                      : 0;
    if (uses_prefix_) index_.add(d.replica, ids);  // PreRequest
    d.view_age_ns = in.now_ns - refreshed_ns_;
    return d;
  }
  std::int64_t block_ids_needed() const override { return uses_prefix_ ? kMaxBlocks : 0; }
  std::optional<KvBlockIndex::Removal> kv_index_removal() const override {
    if (!uses_precise_) return std::nullopt;
    return KvBlockIndex::Removal::kDrop;
  }
  SimTimeNs refresh_interval_ns() const override { return interval_; }
  SimTimeNs refresh_phase_ns() const override { return phase_; }
  void on_refresh(SimTimeNs now_ns, std::span<const ReplicaView> step_end) override {
    std::copy(step_end.begin(), step_end.end(), view_.begin());
    refreshed_ns_ = now_ns;
  }

 private:
  static constexpr std::int64_t kMaxBlocks = 256;  // maxPrefixBlocksToMatch
  LlmDPicker picker_;
  ApproximatePrefixIndex index_;
  std::vector<ReplicaView> view_;
  std::vector<LlmDEndpoint> endpoints_;
  std::vector<std::int64_t> matched_;
  std::vector<std::int64_t> precise_;  // the precise scorer's longest runs (KV events)
  SimTimeNs interval_, phase_;
  std::int64_t block_size_;
  bool uses_prefix_;
  bool uses_precise_;
  SimTimeNs refreshed_ns_ = 0;
};

}  // namespace

std::unique_ptr<Router> make_llm_d_router(std::int32_t num_replicas, const LlmDParams& params,
                                          std::uint64_t seed, SimTimeNs refresh_interval_ns,
                                          SimTimeNs phase_ns, std::int64_t lru_capacity_blocks,
                                          std::int64_t block_size) {
  KVSIM_ASSERT(num_replicas >= 1 && num_replicas <= 64, "llm_d: 1 to 64 replicas");
  return std::make_unique<LlmDRouter>(num_replicas, params, seed, refresh_interval_ns, phase_ns,
                                      lru_capacity_blocks, block_size);
}

}  // namespace kvsim
