#pragma once
// dynamo_kv: NVIDIA Dynamo's classic KV router (spec §5.2-5.3; DefaultWorkerSelector::select_worker
// and softmax_sample, lib/llm/src/kv_router/scheduler.rs @ db19bd2a). For each worker w:
//   prefill_blocks_w = (isl - overlap_w * block_size + active_tokens_w) / block_size   (real)
//   decode_blocks_w  = new_blocks_w + active_blocks_w   (new_blocks_w = floor(prefill_blocks_w)
//                      for a worker the router does not track)
//   cost_w = overlap_score_weight * prefill_blocks_w + decode_blocks_w      (lower is better)
// temperature 0: the minimum-cost workers; one -> it ("cost"); several with equal tree sizes ->
// uniformly random among them ("tie_random"); else the smallest tree size, ties to the lowest
// index ("tie_tree_size"). temperature T > 0: p_w ∝ exp(x_w - max x), x_w = -cost_w / ((hi - lo)
// T), one uniform u in [0, 1) picks the first worker (index order) whose cumulative probability
// reaches u ("softmax"); all costs equal -> uniform ("softmax_uniform").

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "sim/cluster/replica_view.h"

namespace kvsim {

/// The router's knowledge of worker w for one request.
struct DynamoWorker {
  std::int64_t overlap_blocks = 0;  // leading request blocks w holds (radix index, KV events)
  std::int64_t tree_size = 0;       // blocks indexed for w
  std::int64_t active_tokens = 0;   // booked prefill tokens of w's requests not past prefill
  std::int64_t active_blocks = 0;   // distinct block hashes of w's in-flight requests (no reuse:
                                    // their full blocks, summed)
  std::int64_t new_blocks = 0;      // request blocks not among w's active ones
  bool tracked = true;              // the router tracks w's active sequences
};

struct DynamoParams {
  double overlap_score_weight = 1.0;
  double router_temperature = 0.0;
};

/// What the router books of the requests it routes (dynamo_router.cpp): Dynamo's three switches
/// (KvRouterConfig, per request RouterConfigOverride), and the selector's random stream.
struct DynamoTracking {
  bool active_blocks = true;    // router_track_active_blocks: book the requests' blocks
  bool assume_kv_reuse = true;  // router_assume_kv_reuse: the blocks' own hashes (else fresh ones)
  bool prefill_tokens = true;   // router_track_prefill_tokens: book isl - overlap * block_size
  std::string_view stream = "router.dynamo_kv";  // make_stream's name for the selector
};

/// The P/D decode stage (spec §5.5; Dynamo's decode-router override: overlap weight 0,
/// assume_kv_reuse false, track_prefill_tokens false; the temperature is the default 0).
inline constexpr DynamoParams kDynamoDecodeParams{0.0, 0.0};
inline constexpr DynamoTracking kDynamoDecodeTracking{true, false, false,
                                                      "router.dynamo_kv.decode"};

/// dynamo_kv under an explicit booking policy (make_dynamo_router: the defaults with
/// track_active_blocks as given; make_dynamo_decode_router: the decode stage's).
/// Precondition: 1 <= num_replicas <= 64.
[[nodiscard]] std::unique_ptr<Router> make_dynamo_policy_router(
    std::int32_t num_replicas, const DynamoParams& params, const DynamoTracking& tracking,
    std::uint64_t seed, std::int64_t block_size, std::int64_t samples_per_request);

class DynamoKvSelector {
 public:
  /// `stream`: the random stream's name (make_stream), one per router of a cluster.
  DynamoKvSelector(DynamoParams params, std::uint64_t seed,
                   std::string_view stream = "router.dynamo_kv");
  /// One decision for a request of `isl` tokens. O(N); allocates nothing once warm. score = the
  /// chosen worker's cost, runner-up the cheapest other worker.
  RouteDecision select(std::span<const DynamoWorker> workers, std::int64_t isl,
                       std::int64_t block_size);
  /// cost_w as the router computes it.
  static double cost(const DynamoWorker& w, std::int64_t isl, std::int64_t block_size,
                     double overlap_score_weight);

 private:
  DynamoParams params_;
  RngStream rng_;
  std::vector<double> costs_;
  std::vector<std::int32_t> candidates_;
};

}  // namespace kvsim
