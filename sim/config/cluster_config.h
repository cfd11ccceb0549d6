#pragma once
// `cluster:` -- N replicas of the scenario's engine behind a router (shared/spec/
// cluster-routing.md; the room that runs them is sim/cluster/). Absent, or `replicas: 1`, the run
// is today's single engine, byte for byte (config.resolved.yaml shows the section only when
// replicas > 1).
//
//   cluster:
//     replicas: N                 [1]  aggregated serving: every replica `mixed`
//     prefill_replicas: P         [none]  P/D disaggregation (spec §7): replicas [0, P) are
//     decode_replicas: D          [none]  `prefill`, [P, P + D) `decode`; both >= 1, given
//                                 together; `replicas`, when given too, must be P + D
//     router:
//       policy: NAME              [round_robin]  (kRouterPolicyNames)
//       seed: S                   [0]  the router's own random stream (random, power_of_two)
//       <the policy's parameters, spec names>:
//         round_robin: start [0]           the replica of the first routed request
//         prefix_bounded: eps [0.1]        load bound ceil((1 + eps) (i + 1) / N)
//         prefix_hash: k [2]               leading block ids hashed
//         least_waiting, vllm_dp: view: {refresh_interval_ms, phase_s, delay_ms [0]}   the polled
//           view (§1.3; delay_ms: a refresh sees each replica's last step end by then - delay):
//           least_waiting refreshes every 50 ms (llm-d's scrape); vllm_dp's snapshots are the
//           coordinator's (dense: zeros every 5 s; MoE: every 100 ms while counts change, else
//           every 5 s), refresh_interval_ms overriding the 5 s (dense) or the 100 ms (MoE)
//         vllm_dp: api_servers [1] (client_count), moe [from the model: num_experts > 0]
//         llm_d: scorers: {queue [2], kv_usage [2], prefix [3], precise_prefix [0],
//           load_aware [0], active_request [0]} (weights; GIE's default set; a weight of 0 leaves
//           the scorer out) or a named set: gie_default | llm_d_epp | llm_d_precise |
//           llm_d_estimate; view (50 ms); lru_capacity_per_server [the replica's GPU blocks:
//           autoTune]; kv_events: {delay_ms [0]} (the precise scorer's index)
//         dynamo_kv: overlap_score_weight [1.0], router_temperature [0.0],
//           router_track_active_blocks [true], kv_events: {delay_ms [0]}
//         prefix_ideal: none (the engines' own lookups, from their KV events)
//         sglang_cache_aware: cache_threshold [0.3], balance_abs_threshold [64],
//           balance_rel_threshold [1.5] (the command line's defaults)
//       pd:                       P/D only (an error without prefill_replicas/decode_replicas):
//         proxy: toy_proxy | llm_d | dynamo   [from policy: round_robin -> toy_proxy (vLLM's toy
//           proxy: one round-robin cycle per pool, §7.1), llm_d -> llm_d (decode profile, the
//           prefix-based decider, prefill profile, §4.4), dynamo_kv -> dynamo (a prefill and a
//           decode router, §5.5); without a policy: toy_proxy]. The policy follows the proxy
//           when absent; given both, they must pair so. round_robin's `start` is both cycles'
//           first index within their pool (< min(P, D)).
//         non_cached_tokens [16]  llm_d only: disaggregate when the decode pod's uncached suffix
//           is >= this (llm-d's decider; its code default 0 disables P/D, 16 is the sample
//           pd-epp-config.yaml's)
//         the KV transfer model (§7.5; defaults to be calibrated):
//         link_bandwidth_gb_per_s [50]  one GPU's link, GB/s = 1e9 bytes/s (a 400 Gb/s NIC)
//         efficiency [0.8]        the fraction of it a read gets, in (0, 1]
//         setup_ms [0.5]          per read, before its bytes move
//         handshake_ms [50]       the first read of a decode replica from a prefill replica
//         proxy_hop_ms [1]        each proxy hop (proxy->P, P->proxy, proxy->D)
//         shared_nic [false]      reads also share each replica's NIC, not only their P->D link
//       P/D needs engine.profile vllm-0.20, engine.mode timed and no CPU tier.
//     overrides:                  [none]  replicas that differ from the scenario (a mixed fleet):
//       - replicas: [i, j, ...]   indices in [0, N), each in at most one group
//         hardware: {...}         these sections' keys over the scenario's own (one level deep: a
//         cache: {...}            key given replaces the scenario's; `latency` replaces the
//         scheduler: {...}        scenario's section whole); not cache.block_size,
//         latency: {...}          cache.kv_offloading*, scheduler.max_model_len (the router and
//                                 the server's admission are the cluster's)
// Timed routers (least_waiting, vllm_dp, llm_d) need engine.mode: timed; the others run in both.
// Every key is settable with --set cluster.router.KEY=VALUE. A parameter of another policy, an
// unknown key or policy, or a bad value is a one-line ConfigError at file:line:col.

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "sim/common/yaml_util.h"

namespace kvsim {

/// The routers of the spec, in its order.
enum class RouterPolicy : std::uint8_t {
  kRoundRobin,
  kRandom,
  kLeastRequests,
  kLeastWaiting,
  kPowerOfTwo,
  kVllmDp,
  kLlmD,
  kDynamoKv,
  kSglangCacheAware,
  kPrefixHash,
  kPrefixIdeal,
  kPrefixBounded,
};
inline constexpr std::array<std::string_view, 12> kRouterPolicyNames = {
    "round_robin",        "random",      "least_requests", "least_waiting",
    "power_of_two",       "vllm_dp",     "llm_d",          "dynamo_kv",
    "sglang_cache_aware", "prefix_hash", "prefix_ideal",   "prefix_bounded"};
[[nodiscard]] std::string_view router_policy_name(RouterPolicy p);

/// P/D's proxy (`cluster.router.pd.proxy`).
enum class PdProxy : std::uint8_t { kToyProxy, kLlmD, kDynamo };
inline constexpr std::array<std::string_view, 3> kPdProxyNames = {"toy_proxy", "llm_d", "dynamo"};
[[nodiscard]] std::string_view pd_proxy_name(PdProxy p);
/// The router policy a proxy routes with (toy_proxy: round_robin, llm_d: llm_d, dynamo:
/// dynamo_kv).
[[nodiscard]] RouterPolicy pd_proxy_policy(PdProxy p);

/// `cluster.router.pd:` -- P/D's proxy and the KV transfer model (spec §7.5).
struct PdConfig {
  PdProxy proxy = PdProxy::kToyProxy;
  std::int64_t non_cached_tokens = 16;  // llm_d's prefix-based decider threshold, tokens
  double link_bandwidth_gb_per_s = 50;  // one GPU's link, 1e9 bytes/s
  double efficiency = 0.8;              // in (0, 1]
  std::int64_t setup_ns = 500'000;       // per read, before its bytes move
  std::int64_t handshake_ns = 50'000'000;  // first read of a (P, D) pair, before its setup
  std::int64_t proxy_hop_ns = 1'000'000;   // each proxy hop
  bool shared_nic = false;                 // reads share each replica's NIC too
  /// One GPU's rate on a link: link_bandwidth * 1e9 * efficiency bytes/s, rounded to the
  /// nearest integer once (>= 1); what the transfer model's integer arithmetic starts from.
  [[nodiscard]] std::int64_t gpu_bytes_per_s() const;
};

/// `cluster.router:` -- the policy and its parameters (only the policy's own are read).
struct RouterConfig {
  RouterPolicy policy = RouterPolicy::kRoundRobin;
  std::uint64_t seed = 0;  // the router's random stream
  std::int64_t start = 0;  // round_robin: replica of the first routed request, in [0, N)
  double eps = 0.1;        // prefix_bounded: load bound slack, >= 0
  std::int64_t k = 2;      // prefix_hash: leading block ids hashed, >= 1
  // least_waiting, vllm_dp: the polled view (`view:`); -1 = the policy's real interval.
  std::int64_t refresh_interval_ns = -1;
  std::int64_t phase_ns = 0;       // refresh instants phase + k T, k >= 1
  std::int64_t view_delay_ns = 0;  // a refresh sees the replicas as of this long before it
  std::int32_t api_servers = 1;    // vllm_dp: client_count
  std::int8_t moe = -1;            // vllm_dp: 1 MoE, 0 dense, -1 from the model
  // llm_d: the scorers' weights (GIE's default: queue 2, kv-cache-utilization 2, prefix 3) and
  // the approximate prefix index's LRU capacity per pod in blocks (-1: the pod's GPU blocks).
  double w_queue = 2, w_kv_usage = 2, w_prefix = 3, w_precise_prefix = 0, w_load_aware = 0,
         w_active_request = 0;
  std::int64_t lru_capacity_per_server = -1;
  // dynamo_kv (KvRouterConfig's defaults)
  double overlap_score_weight = 1.0;
  double router_temperature = 0.0;
  bool track_active_blocks = true;
  // llm_d (precise prefix), dynamo_kv: KV events reach the router's index this late (§1.3)
  std::int64_t kv_event_delay_ns = 0;
  // sglang_cache_aware
  double cache_threshold = 0.3;
  std::int64_t balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  PdConfig pd{};  // P/D only
};
/// Whether the router reads the replicas' KV events (an index of their cached blocks: a vLLM V1
/// engine's, core/common/kv_event.h).
[[nodiscard]] bool router_reads_kv_events(const RouterConfig& c);
/// Whether `p` reads replica state that only a timed run has (steps, queues).
[[nodiscard]] bool router_policy_timed_only(RouterPolicy p);

struct Scenario;

/// One group of `cluster.overrides`: its replicas and, once the scenario is parsed, the scenario
/// they run (the base with the group's sections over it).
struct ReplicaOverride {
  std::vector<std::int64_t> replicas;
  YAML::Node sections;  // the group's map as written (replicas, hardware, cache, ...)
  std::shared_ptr<const Scenario> scenario;
};
inline constexpr std::string_view kOverrideSections[] = {"hardware", "cache", "scheduler",
                                                         "latency"};
/// Whether `section.key` is the same on every replica of a cluster, so that an override may not
/// set it: cache.block_size and the CPU tier (cache.kv_offloading*), scheduler.max_model_len.
[[nodiscard]] bool cluster_shared_key(std::string_view section, std::string_view key);

/// A replica's part in serving (spec §1.1).
enum class ReplicaRole : std::uint8_t { kMixed, kPrefill, kDecode };
[[nodiscard]] std::string_view replica_role_name(ReplicaRole r);  // mixed | prefill | decode

/// `cluster:`.
struct ClusterConfig {
  std::int64_t replicas = 1;  // P/D: prefill_replicas + decode_replicas
  std::int64_t prefill_replicas = 0;  // P/D: replicas [0, P); 0 = aggregated serving
  std::int64_t decode_replicas = 0;   // P/D: replicas [P, P + D)
  RouterConfig router;
  std::vector<ReplicaOverride> overrides;
  /// The override of replica r, or nullptr (the scenario's own settings).
  [[nodiscard]] const ReplicaOverride* override_of(std::int64_t r) const {
    for (const ReplicaOverride& o : overrides)
      for (std::int64_t i : o.replicas)
        if (i == r) return &o;
    return nullptr;
  }
  /// A cluster run (else the single engine).
  [[nodiscard]] bool enabled() const { return replicas > 1; }
  /// Prefill/decode disaggregation (prefill_replicas and decode_replicas given).
  [[nodiscard]] bool disaggregated() const { return prefill_replicas > 0; }
  /// Replica r's role: mixed when aggregated, else prefill below prefill_replicas, else decode.
  [[nodiscard]] ReplicaRole role_of(std::int64_t r) const {
    if (!disaggregated()) return ReplicaRole::kMixed;
    return r < prefill_replicas ? ReplicaRole::kPrefill : ReplicaRole::kDecode;
  }
};
inline constexpr std::string_view kClusterKeys[] = {"replicas", "prefill_replicas",
                                                    "decode_replicas", "router", "overrides"};
/// Whether a timed cluster's replicas run in lockstep: vllm_dp over an MoE model (`moe`, else the
/// model's `moe_model`) with more than one replica (spec §3.2; sim/cluster/dp_lockstep.h).
[[nodiscard]] bool dp_lockstep(const ClusterConfig& c, bool moe_model);

/// Reads `cluster:` (absent: one replica). `cache_only` is the scenario's engine.mode: a router
/// that reads engine queues (router_policy_timed_only) needs a timed run.
[[nodiscard]] ClusterConfig parse_cluster(const YAML::Node& cluster, const YamlContext& ctx,
                                          bool cache_only);
/// P/D's checks against the engine (after parse_cluster): the profile must be vllm-0.20 and the
/// scenario must have no CPU tier (`cpu_tier`) and no parallel sampling (`samples` > 1); a
/// ConfigError at the cluster's prefill_replicas.
void check_pd_engine(const ClusterConfig& c, const YAML::Node& cluster, const YamlContext& ctx,
                     std::string_view profile, bool cpu_tier, std::int64_t samples);
/// Every key the run uses: replicas, and router with the policy's own parameters; P/D adds
/// prefill_replicas, decode_replicas and router.pd (an aggregated run's text is unchanged).
[[nodiscard]] YAML::Node cluster_yaml(const ClusterConfig& c);

}  // namespace kvsim
