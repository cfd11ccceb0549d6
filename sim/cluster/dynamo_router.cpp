// dynamo_kv as a router (spec §5): DynamoKvSelector's cost and pick (dynamo_kv.h) over
//   - overlap_w and tree_size_w from the router's index of the workers' KV events (KvBlockIndex,
//     a BlockRemoved dropping the worker from the block, as Dynamo's radix indexer does): the
//     leading full blocks of the request worker w holds, and the blocks indexed for w;
//   - the router's active sequences (ActiveSequences, lib/llm/src/kv_router/sequence.rs):
//     add_request at dispatch books the request's full-block hashes on w (active_blocks_w = the
//     distinct hashes over w's in-flight requests) and isl - overlap_w * block_size prefill
//     tokens (active_tokens_w); mark_prefill_completed at the request's first token releases the
//     tokens; free at its end releases the rest. new_blocks_w = the request's blocks not among
//     w's active hashes.
// A decision is O(request blocks x workers holding each block) + O(N), not O(N x blocks): the
// active hashes are indexed by block, a bit per worker. With router_track_active_blocks false the
// workers are untracked (new_blocks_w = floor(prefill_blocks_w), no active blocks).
// What the router books is a named policy (DynamoTracking), Dynamo's three switches:
//   - router_track_active_blocks (above);
//   - router_assume_kv_reuse false: the router books random hashes, one per full prompt block
//     (KvRouterConfig::compute_seq_hashes_for_tracking), so no two requests share one: new_blocks_w
//     = the request's full blocks on every worker, active_blocks_w = the sum of the full blocks of
//     w's in-flight requests (kvsim keeps the counts, not the hashes);
//   - router_track_prefill_tokens false: add_request books 0 prefill tokens (active_tokens_w = 0).
// The P/D decode stage (spec §5.5; Dynamo's build_decode_router_override) is overlap weight 0
// with the last two off: cost_w = decode_blocks_w. Its overlap is still read from the decode
// workers' KV events (find_best_match always asks the indexer), and only the tree sizes matter:
// the tie-break among equal costs.
// Not modelled: the 300 s force-expiry of stale sequences (kvsim reports every end), the router
// queue (router_queue_threshold), approximate mode (--no-router-kv-events).
#include <bit>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/common/assert.h"
#include "sim/cluster/dynamo_kv.h"

namespace kvsim {
namespace {

class DynamoRouter final : public Router {
 public:
  DynamoRouter(std::int32_t n, const DynamoParams& params, const DynamoTracking& tracking,
               std::uint64_t seed, std::int64_t block_size, std::int64_t samples_per_request)
      : selector_(params, seed, tracking.stream),
        workers_(static_cast<std::size_t>(n)),
        overlap_(static_cast<std::size_t>(n)),
        active_in_request_(static_cast<std::size_t>(n)),
        active_tokens_(static_cast<std::size_t>(n)),
        active_sum_(static_cast<std::size_t>(n)),
        refs_(static_cast<std::size_t>(n)),
        track_(tracking.active_blocks),
        dedup_(tracking.active_blocks && tracking.assume_kv_reuse),
        book_prefill_(tracking.prefill_tokens),
        block_size_(block_size),
        samples_(samples_per_request) {}

  RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) override {
    KVSIM_ASSERT(in.kv_index != nullptr);
    const auto n = static_cast<std::int32_t>(loads.size());
    const std::span<const std::uint64_t> blocks = in.content_hashes;
    in.kv_index->longest_prefix(blocks, overlap_);
    std::fill(active_in_request_.begin(), active_in_request_.end(), 0);
    if (dedup_)
      for (std::uint64_t h : blocks)
        if (const auto it = active_.find(h); it != active_.end())
          for (std::uint64_t m = it->second; m != 0; m &= m - 1)
            ++active_in_request_[static_cast<std::size_t>(std::countr_zero(m))];
    const auto num_blocks = static_cast<std::int64_t>(blocks.size());
    for (std::int32_t w = 0; w < n; ++w) {
      const auto i = static_cast<std::size_t>(w);
      DynamoWorker& x = workers_[i];
      x.overlap_blocks = overlap_[i];
      x.tree_size = in.kv_index->num_blocks(w);
      x.tracked = track_;
      x.active_tokens = active_tokens_[i];
      if (dedup_) {
        x.active_blocks = static_cast<std::int64_t>(refs_[i].size());
        x.new_blocks = num_blocks - active_in_request_[i];
      } else {  // fresh hashes: nothing shared (untracked: active_sum_ stays 0)
        x.active_blocks = active_sum_[i];
        x.new_blocks = num_blocks;
      }
    }
    RouteDecision d = selector_.select(workers_, in.prompt_tokens, block_size_);
    d.matched_blocks = overlap_[static_cast<std::size_t>(d.replica)];
    book(in, d.replica, blocks);
    return d;
  }
  std::optional<KvBlockIndex::Removal> kv_index_removal() const override {
    return KvBlockIndex::Removal::kDrop;
  }
  bool books_requests() const override { return true; }
  void on_first_token(std::int32_t replica, std::uint64_t request_id) override {
    const auto it = booked_.find(request_id);
    if (it == booked_.end() || it->second.prefilled) return;
    KVSIM_ASSERT(it->second.worker == replica);
    it->second.prefilled = true;
    active_tokens_[static_cast<std::size_t>(replica)] -= it->second.prefill_tokens;
  }
  void on_finished(std::int32_t replica, std::uint64_t request_id) override {
    const auto it = booked_.find(request_id);
    if (it == booked_.end()) return;
    Booking& b = it->second;
    if (--b.samples_left > 0) return;
    KVSIM_ASSERT(b.worker == replica);
    const auto w = static_cast<std::size_t>(replica);
    if (!b.prefilled) active_tokens_[w] -= b.prefill_tokens;
    active_sum_[w] -= b.num_blocks;
    for (std::uint64_t h : b.blocks) {
      const auto r = refs_[w].find(h);
      if (--r->second > 0) continue;
      refs_[w].erase(r);
      const auto a = active_.find(h);
      a->second &= ~(std::uint64_t{1} << replica);
      if (a->second == 0) active_.erase(a);
    }
    booked_.erase(it);
  }

 private:
  struct Booking {
    std::int32_t worker = 0;
    std::int64_t prefill_tokens = 0;
    bool prefilled = false;
    std::int64_t samples_left = 1;
    std::vector<std::uint64_t> blocks;  // tracked, dedup: the hashes booked on the worker
    std::int64_t num_blocks = 0;        // tracked, no dedup: the full blocks booked
  };
  /// add_request: the request on worker w.
  void book(const RouteInput& in, std::int32_t w, std::span<const std::uint64_t> blocks) {
    Booking b;
    b.worker = w;
    if (book_prefill_)
      b.prefill_tokens = in.prompt_tokens - overlap_[static_cast<std::size_t>(w)] * block_size_;
    b.samples_left = samples_;
    active_tokens_[static_cast<std::size_t>(w)] += b.prefill_tokens;
    if (dedup_) {
      b.blocks.assign(blocks.begin(), blocks.end());
      for (std::uint64_t h : blocks)
        if (++refs_[static_cast<std::size_t>(w)][h] == 1) active_[h] |= std::uint64_t{1} << w;
    } else if (track_) {
      b.num_blocks = static_cast<std::int64_t>(blocks.size());
      active_sum_[static_cast<std::size_t>(w)] += b.num_blocks;
    }
    booked_.insert_or_assign(in.request_id, std::move(b));
  }

  DynamoKvSelector selector_;
  std::vector<DynamoWorker> workers_;
  std::vector<std::int64_t> overlap_;
  std::vector<std::int64_t> active_in_request_;  // scratch: request blocks active on w
  std::vector<std::int64_t> active_tokens_;
  std::vector<std::int64_t> active_sum_;  // no dedup: the full blocks of w's in-flight requests
  std::vector<std::unordered_map<std::uint64_t, std::int32_t>> refs_;  // w: hash -> requests
  std::unordered_map<std::uint64_t, std::uint64_t> active_;  // hash -> workers with it active
  std::unordered_map<std::uint64_t, Booking> booked_;        // by request id

  bool track_;         // router_track_active_blocks
  bool dedup_;         // ... and router_assume_kv_reuse: the active blocks are distinct hashes
  bool book_prefill_;  // router_track_prefill_tokens
  std::int64_t block_size_;
  std::int64_t samples_;
};

}  // namespace

std::unique_ptr<Router> make_dynamo_policy_router(std::int32_t num_replicas,
                                                  const DynamoParams& params,
                                                  const DynamoTracking& tracking,
                                                  std::uint64_t seed, std::int64_t block_size,
                                                  std::int64_t samples_per_request) {
  KVSIM_ASSERT(num_replicas >= 1 && num_replicas <= 64, "dynamo_kv: 1 to 64 replicas");
  return std::make_unique<DynamoRouter>(num_replicas, params, tracking, seed, block_size,
                                        samples_per_request);
}

std::unique_ptr<Router> make_dynamo_router(std::int32_t num_replicas, const DynamoParams& params,
                                           bool track_active_blocks, std::uint64_t seed,
                                           std::int64_t block_size,
                                           std::int64_t samples_per_request) {
  DynamoTracking tracking;
  tracking.active_blocks = track_active_blocks;
  return make_dynamo_policy_router(num_replicas, params, tracking, seed, block_size,
                                   samples_per_request);
}

std::unique_ptr<Router> make_dynamo_decode_router(std::int32_t num_replicas, std::uint64_t seed,
                                                  std::int64_t block_size,
                                                  std::int64_t samples_per_request) {
  return make_dynamo_policy_router(num_replicas, kDynamoDecodeParams, kDynamoDecodeTracking, seed,
                                   block_size, samples_per_request);
}

}  // namespace kvsim
