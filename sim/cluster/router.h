#pragma once
// Router: picks a replica for each request (shared/spec/cluster-routing.md §2, §6.2, §8). A
// decision is a pure function of the router's configuration, the request, its view of the
// replicas and its own random state; a router keeps only router-local state (a cursor, its RNG).
// One policy per file (round_robin.cpp, random_router.cpp, ...); make_router builds the one a
// scenario names. route() allocates nothing.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>

#include "sim/cluster/kv_block_index.h"
#include "sim/common/rng.h"
#include "sim/common/sim_types.h"
#include "sim/config/cluster_config.h"

namespace kvsim {

/// What a router sees of replica r. Router-local counts are exact at the decision instant; in
/// cache_only mode (spec §8) nothing completes, so in_flight == routed.
struct ReplicaLoad {
  std::int64_t routed = 0;                // requests routed to it so far
  std::int64_t prompt_tokens_routed = 0;  // their prompt tokens
  std::int64_t in_flight = 0;             // routed and not finished (router-side count)
};

/// What a polled view holds of a replica's engine (spec §1.3): its figures at a step end.
struct ReplicaView {
  std::int64_t num_waiting = 0;  // vllm:num_requests_waiting (waiting + skipped waiting)
  std::int64_t num_running = 0;  // vllm:num_requests_running
  double kv_usage = 0;           // vllm:kv_cache_usage_perc, in [0, 1]
  friend bool operator==(const ReplicaView&, const ReplicaView&) = default;
};

/// The request being routed.
struct RouteInput {
  SimTimeNs now_ns = 0;    // the decision instant (timed runs; 0 in cache_only)
  std::int64_t index = 0;  // 0-based position in routing order (refused requests skipped)
  std::int64_t prompt_tokens = 0;
  std::int64_t prompt_blocks = 0;  // ceil(prompt_tokens / block_size)
  /// Stable ids of the prompt's leading blocks in order (full blocks, a partial last one
  /// included), as many as the router's block_ids_needed() (fewer for a shorter prompt): equal
  /// leading content gives equal ids (ClusterSimulator::block_ids).
  std::span<const std::uint64_t> block_ids;
  /// Routers that read the replicas' caches (Router::kv_index_removal): the content hashes of the
  /// prompt's full blocks as the engines name them (prompt_content_hashes), and the cluster's
  /// index of the replicas' KV events as the router's view has them (§1.3).
  std::span<const std::uint64_t> content_hashes;
  const KvBlockIndex* kv_index = nullptr;
  std::uint64_t request_id = 0;  // the routed request's id (router-local bookkeeping)
};

/// A decision, with what routing.csv records of it.
struct RouteDecision {
  std::int32_t replica = 0;
  std::string_view branch;      // the rule that decided (a static string)
  bool has_score = false;       // score / runner_up columns are empty without one
  double score = 0;             // the chosen replica's score under the rule
  std::int32_t runner_up = -1;  // the best other replica, -1 none
  double runner_up_score = 0;
  std::int64_t matched_blocks = -1;  // prefix routers: blocks the chosen replica matches; -1 none
  SimTimeNs view_age_ns = -1;        // how old the polled state read was; -1: none read
  /// The chosen replica's prefix match in blocks as the router's prefix scorer has it (llm_d: the
  /// approximate index, else the precise one; what llm-d's P/D decider reads); -1: none.
  std::int64_t prefix_blocks = -1;
};

class Router {
 public:
  virtual ~Router() = default;
  /// The replica for `in` given the replicas' loads (one per replica, loads.size() = N >= 1).
  virtual RouteDecision route(const RouteInput& in, std::span<const ReplicaLoad> loads) = 0;
  /// How many leading block ids route() reads (RouteInput::block_ids); 0: none.
  virtual std::int64_t block_ids_needed() const { return 0; }
  /// Whether route() reads the replicas' KV events (RouteInput::kv_index), and how the index
  /// reads a removal (kv_block_index.h); nullopt: it reads none.
  virtual std::optional<KvBlockIndex::Removal> kv_index_removal() const { return std::nullopt; }
  /// Whether the router keeps its own index of the in-flight counts: then every change of a
  /// replica's ReplicaLoad::in_flight (a request routed, one finished) is reported through
  /// on_in_flight before the next route(), which may read the index instead of the loads.
  virtual bool tracks_in_flight() const { return false; }
  virtual void on_in_flight(std::int32_t replica, std::int64_t in_flight) {
    (void)replica;
    (void)in_flight;
  }
  /// Whether the router keeps router-local books of its requests (on_first_token, on_finished).
  virtual bool books_requests() const { return false; }
  /// Router-local bookkeeping of the requests it routed: the first token of request
  /// `request_id` (RouteInput::request_id) came back from `replica`; the request finished there
  /// (completed, aborted; once per sample: workload n). In cache_only mode both come right after
  /// the request is served (one request at a time).
  virtual void on_first_token(std::int32_t replica, std::uint64_t request_id) {
    (void)replica;
    (void)request_id;
  }
  virtual void on_finished(std::int32_t replica, std::uint64_t request_id) {
    (void)replica;
    (void)request_id;
  }

  // A router with a polled view (timed runs, spec §1.3): the cluster calls on_refresh at
  // refresh_phase_ns() + k refresh_interval_ns(), k >= 1, with each replica's figures at its last
  // step end (after the step ends due at that instant, before its arrivals are routed).
  /// The refresh period; 0: the router polls nothing.
  virtual SimTimeNs refresh_interval_ns() const { return 0; }
  virtual SimTimeNs refresh_phase_ns() const { return 0; }
  /// A refresh at `now_ns`: `step_end[r]` is replica r's state at its last step end.
  virtual void on_refresh(SimTimeNs now_ns, std::span<const ReplicaView> step_end) {
    (void)now_ns;
    (void)step_end;
  }
};

/// The router `config` names, for `num_replicas` replicas. Precondition: the policy is
/// implemented (the config parser refuses the others).
/// What some routers take from the scenario.
struct RouterEnv {
  bool moe_model = false;                // the model is a mixture of experts (vllm_dp's `moe`)
  std::int64_t block_size = 16;          // the engines' block size (prefix indexes)
  std::int64_t num_gpu_blocks = 0;       // a replica's pool (llm_d's autoTune LRU capacity)
  std::int64_t samples_per_request = 1;  // workload n: on_finished comes once per sample
};
[[nodiscard]] std::unique_ptr<Router> make_router(const RouterConfig& config,
                                                  std::int32_t num_replicas,
                                                  const RouterEnv& env = {});
/// P/D (spec §7.1, §4.4, §5.5): the router of the prefill pool (`decode` false) or of the decode
/// pool of `num_replicas` replicas, for config.pd.proxy: toy_proxy -> round_robin from `start`
/// (one cycle per pool); llm_d -> llm_d in both pools (the decode pool's random stream is the
/// seed + 1's); dynamo -> dynamo_kv without active-block tracking (prefill), the decode stage's
/// load-only router (decode: make_dynamo_decode_router, its own random stream).
[[nodiscard]] std::unique_ptr<Router> make_pd_router(const RouterConfig& config,
                                                     std::int32_t num_replicas,
                                                     const RouterEnv& env, bool decode);

// The policies (one file each).
[[nodiscard]] std::unique_ptr<Router> make_round_robin_router(std::int64_t start);
[[nodiscard]] std::unique_ptr<Router> make_random_router(std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Router> make_least_requests_router(std::int32_t num_replicas);
[[nodiscard]] std::unique_ptr<Router> make_power_of_two_router(std::uint64_t seed);
[[nodiscard]] std::unique_ptr<Router> make_prefix_hash_router(std::int64_t k);
/// prefix_ideal / prefix_bounded (prefix_ideal.cpp). Precondition: 1 <= num_replicas <= 64.
[[nodiscard]] std::unique_ptr<Router> make_prefix_ideal_router(std::int32_t num_replicas,
                                                               std::int64_t block_size);
[[nodiscard]] std::unique_ptr<Router> make_prefix_bounded_router(std::int32_t num_replicas,
                                                                 std::int64_t block_size,
                                                                 double eps);
struct DynamoParams;
/// dynamo_kv (dynamo_router.cpp). Precondition: 1 <= num_replicas <= 64.
[[nodiscard]] std::unique_ptr<Router> make_dynamo_router(
    std::int32_t num_replicas, const DynamoParams& params, bool track_active_blocks,
    std::uint64_t seed, std::int64_t block_size, std::int64_t samples_per_request);
/// dynamo_kv's decode stage in P/D (spec §5.5; dynamo_router.cpp) over the decode replicas:
/// overlap weight 0, assume_kv_reuse false, track_prefill_tokens false, temperature 0. It reads
/// the decode replicas' KV events for the tree-size tie-break only.
/// Precondition: 1 <= num_replicas <= 64.
[[nodiscard]] std::unique_ptr<Router> make_dynamo_decode_router(std::int32_t num_replicas,
                                                                std::uint64_t seed,
                                                                std::int64_t block_size,
                                                                std::int64_t samples_per_request);
[[nodiscard]] std::unique_ptr<Router> make_least_waiting_router(std::int32_t num_replicas,
                                                                SimTimeNs refresh_interval_ns,
                                                                SimTimeNs phase_ns);
/// vllm_dp (vllm_dp.h): `refresh_interval_ns` is the coordinator's snapshot period (dense: the
/// 5 s zero snapshots; MoE: the 100 ms publish tick).
[[nodiscard]] std::unique_ptr<Router> make_vllm_dp_router(std::int32_t num_replicas,
                                                          std::int32_t api_servers, bool moe,
                                                          SimTimeNs refresh_interval_ns,
                                                          SimTimeNs phase_ns);
struct LlmDParams;
/// llm_d (llm_d_router.cpp): the picker over the polled view and the approximate prefix index.
/// Precondition: 1 <= num_replicas <= 64.
[[nodiscard]] std::unique_ptr<Router> make_llm_d_router(
    std::int32_t num_replicas, const LlmDParams& params, std::uint64_t seed,
    SimTimeNs refresh_interval_ns, SimTimeNs phase_ns, std::int64_t lru_capacity_blocks,
    std::int64_t block_size);

struct SglangParams;
/// sglang_cache_aware (sglang_router.cpp): the decision over the router's in-flight counts and its
/// own approximate tree. Precondition: 1 <= num_replicas <= 64.
[[nodiscard]] std::unique_ptr<Router> make_sglang_router(std::int32_t num_replicas,
                                                         const SglangParams& params,
                                                         std::int64_t block_size);

/// A uniform integer in [0, n) from `rng` (Lemire's multiply-shift with rejection: exact, and the
/// same on every platform). Precondition: n >= 1.
std::uint64_t uniform_below(RngStream& rng, std::uint64_t n);

/// The spec's prefix_hash of ids (§6.2): h = 0; for each id: h = splitmix64(h ^ id).
constexpr std::uint64_t prefix_hash_of(std::span<const std::uint64_t> ids) {
  std::uint64_t h = 0;
  for (std::uint64_t id : ids) h = splitmix64(h ^ id);
  return h;
}

}  // namespace kvsim
