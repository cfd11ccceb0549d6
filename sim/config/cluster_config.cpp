#include "sim/config/cluster_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

namespace kvsim {
namespace {

constexpr std::int64_t kMaxReplicas = 1 << 16;

/// The keys every policy takes, then each policy's own parameters (spec names).
constexpr std::string_view kCommonRouterKeys[] = {"policy", "seed", "pd"};
constexpr std::string_view kPdKeys[] = {"proxy",        "non_cached_tokens", "link_bandwidth_gb_per_s",
                                        "efficiency",   "setup_ms",          "handshake_ms",
                                        "proxy_hop_ms", "shared_nic"};
struct PolicyParams {
  RouterPolicy policy;
  std::initializer_list<std::string_view> keys;
};
const PolicyParams kPolicyParams[] = {
    {RouterPolicy::kRoundRobin, {"start"}},
    {RouterPolicy::kPrefixBounded, {"eps"}},
    {RouterPolicy::kPrefixHash, {"k"}},
    {RouterPolicy::kLeastWaiting, {"view"}},
    {RouterPolicy::kVllmDp, {"view", "api_servers", "moe"}},
    {RouterPolicy::kLlmD, {"scorers", "lru_capacity_per_server", "kv_events"}},
    {RouterPolicy::kDynamoKv,
     {"overlap_score_weight", "router_temperature", "router_track_active_blocks", "kv_events"}},
    {RouterPolicy::kSglangCacheAware,
     {"cache_threshold", "balance_abs_threshold", "balance_rel_threshold"}},
};
constexpr std::string_view kScorerKeys[] = {"queue",          "kv_usage",   "prefix",
                                            "precise_prefix", "load_aware", "active_request"};
constexpr std::string_view kViewKeys[] = {"refresh_interval_ms", "phase_s", "delay_ms"};
constexpr std::string_view kKvEventKeys[] = {"delay_ms"};
/// llm_d's named scorer sets (`scorers: NAME`), in LlmDWeights' order: queue, kv_usage, prefix,
/// precise_prefix, load_aware, active_request (sim/cluster/llm_d.h has their sources).
constexpr std::string_view kScorerPresetNames[] = {
    "gie_default",     // GIE without a config file
    "llm_d_epp",       // llm-d v0.8.0 deploy/config/epp-config.yaml
    "llm_d_precise",   // epp-precise-prefix-cache-config.yaml
    "llm_d_estimate",  // epp-estimate-prefix-cache-config.yaml
};
constexpr double kScorerPresetWeights[][6] = {
    {2, 2, 3, 0, 0, 0}, {0, 0, 2, 0, 0, 0}, {1, 1, 0, 2, 0, 0}, {0, 0, 1, 0, 1, 0}};

std::span<const std::string_view> own_keys(RouterPolicy p) {
  for (const PolicyParams& pp : kPolicyParams)
    if (pp.policy == p) return {pp.keys.begin(), pp.keys.size()};
  return {};
}

/// The policy whose parameter `key` is, or nullopt.
std::optional<RouterPolicy> owner_of(std::string_view key) {
  for (const PolicyParams& pp : kPolicyParams)
    for (std::string_view k : pp.keys)
      if (k == key) return pp.policy;
  return std::nullopt;
}

std::string join_keys(std::span<const std::string_view> keys) {
  std::string s;
  for (std::string_view k : keys) {
    if (!s.empty()) s += ", ";
    s += k;
  }
  return s;
}

RouterConfig parse_router(const YAML::Node& router, const YamlContext& ctx,
                          std::string_view default_policy) {
  require_map(router, ctx);
  RouterConfig c;
  const std::size_t i = get_choice_index(router, "policy", ctx, std::string(default_policy),
                                         std::span<const std::string_view>(kRouterPolicyNames));
  c.policy = static_cast<RouterPolicy>(i);
  // Keys: the common ones and the policy's own; another policy's parameter says whose it is.
  std::vector<std::string_view> allowed(std::begin(kCommonRouterKeys), std::end(kCommonRouterKeys));
  for (std::string_view k : own_keys(c.policy)) allowed.push_back(k);
  if (router.IsDefined() && router.IsMap()) {
    for (auto it = router.begin(); it != router.end(); ++it) {
      const std::string key = it->first.Scalar();
      if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
      const YamlContext kctx = ctx.child(key);
      if (const std::optional<RouterPolicy> owner = owner_of(key))
        throw yaml_error(
            it->first, kctx,
            fmt::format("{}: a parameter of the {} router, not of {} ({} takes: {})", kctx.path,
                        router_policy_name(*owner), router_policy_name(c.policy),
                        router_policy_name(c.policy), join_keys(allowed)));
      std::vector<std::string_view> every(allowed);
      for (const PolicyParams& pp : kPolicyParams)
        for (std::string_view k : pp.keys)
          if (std::find(every.begin(), every.end(), k) == every.end()) every.push_back(k);
      throw yaml_error(
          it->first, kctx,
          fmt::format("unknown key '{}' in {}{}", key, ctx.path, suggestion_suffix(key, every)));
    }
  }
  c.seed = static_cast<std::uint64_t>(get_int(router, "seed", ctx, 0, 0));
  c.start = get_int(router, "start", ctx, 0, 0, kMaxReplicas - 1);
  c.eps = get_double(router, "eps", ctx, 0.1, 0.0, 1e9);
  c.k = get_int(router, "k", ctx, 2, 1, 1 << 20);
  c.api_servers = static_cast<std::int32_t>(get_int(router, "api_servers", ctx, 1, 1, 1024));
  if (router.IsDefined() && router.IsMap() && router["moe"].IsDefined())
    c.moe = get_bool(router, "moe", ctx, false) ? 1 : 0;
  c.cache_threshold = get_double(router, "cache_threshold", ctx, 0.3, 0.0, 1.0);
  c.balance_abs_threshold = get_int(router, "balance_abs_threshold", ctx, 64, 0, 1LL << 40);
  c.balance_rel_threshold = get_double(router, "balance_rel_threshold", ctx, 1.5, 0.0, 1e9);
  c.lru_capacity_per_server = get_int(router, "lru_capacity_per_server", ctx, -1, 1, 1LL << 40);
  c.overlap_score_weight = get_double(router, "overlap_score_weight", ctx, 1.0, 0.0, 1e6);
  c.router_temperature = get_double(router, "router_temperature", ctx, 0.0, 0.0, 1e6);
  c.track_active_blocks = get_bool(router, "router_track_active_blocks", ctx, true);
  if (router.IsDefined() && router.IsMap() && router["scorers"].IsDefined()) {
    const YAML::Node sc = router["scorers"];
    const YamlContext sctx = ctx.child("scorers");
    if (sc.IsScalar()) {  // a named set
      const std::size_t k = get_choice_index(router, "scorers", ctx, "gie_default",
                                             std::span<const std::string_view>(kScorerPresetNames));
      const double* w = kScorerPresetWeights[k];
      c.w_queue = w[0];
      c.w_kv_usage = w[1];
      c.w_prefix = w[2];
      c.w_precise_prefix = w[3];
      c.w_load_aware = w[4];
      c.w_active_request = w[5];
    } else {
      check_keys(sc, std::span<const std::string_view>(kScorerKeys), sctx);
      c.w_queue = get_double(sc, "queue", sctx, 0, 0, 1e6);
      c.w_kv_usage = get_double(sc, "kv_usage", sctx, 0, 0, 1e6);
      c.w_prefix = get_double(sc, "prefix", sctx, 0, 0, 1e6);
      c.w_precise_prefix = get_double(sc, "precise_prefix", sctx, 0, 0, 1e6);
      c.w_load_aware = get_double(sc, "load_aware", sctx, 0, 0, 1e6);
      c.w_active_request = get_double(sc, "active_request", sctx, 0, 0, 1e6);
    }
  }
  if (router.IsDefined() && router.IsMap() && router["kv_events"].IsDefined()) {
    const YAML::Node ev = router["kv_events"];
    const YamlContext ectx = ctx.child("kv_events");
    check_keys(ev, std::span<const std::string_view>(kKvEventKeys), ectx);
    c.kv_event_delay_ns =
        static_cast<std::int64_t>(get_double(ev, "delay_ms", ectx, 0.0, 0.0, 1e9) * 1e6 + 0.5);
  }
  if (router.IsDefined() && router.IsMap() && router["view"].IsDefined()) {
    const YAML::Node view = router["view"];
    const YamlContext vctx = ctx.child("view");
    check_keys(view, std::span<const std::string_view>(kViewKeys), vctx);
    if (view["refresh_interval_ms"].IsDefined())
      c.refresh_interval_ns = static_cast<std::int64_t>(
          get_double(view, "refresh_interval_ms", vctx, 50.0, 0.001, 1e9) * 1e6 + 0.5);
    c.phase_ns =
        static_cast<std::int64_t>(get_double(view, "phase_s", vctx, 0.0, 0.0, 1e6) * 1e9 + 0.5);
    c.view_delay_ns =
        static_cast<std::int64_t>(get_double(view, "delay_ms", vctx, 0.0, 0.0, 1e9) * 1e6 + 0.5);
  }
  return c;
}

/// ms as integer ns, rounded to the nearest (the view's and kv_events' convention).
std::int64_t ms_to_ns(double ms) { return static_cast<std::int64_t>(ms * 1e6 + 0.5); }

/// The proxy a policy pairs with in P/D, or nullopt (the policy cannot route P/D).
std::optional<PdProxy> proxy_of_policy(RouterPolicy p) {
  for (std::size_t i = 0; i < kPdProxyNames.size(); ++i)
    if (pd_proxy_policy(static_cast<PdProxy>(i)) == p) return static_cast<PdProxy>(i);
  return std::nullopt;
}

/// `cluster.router.pd:` of a P/D cluster (`pd` may be undefined: every default), once the
/// router's policy is known; the proxy and the policy must pair (pd_proxy_policy).
PdConfig parse_pd(const YAML::Node& router, const YamlContext& rctx, RouterPolicy policy) {
  const YAML::Node pd = router.IsDefined() && router.IsMap() && router["pd"].IsDefined()
                            ? router["pd"]
                            : YAML::Node();
  const YamlContext ctx = rctx.child("pd");
  PdConfig c;
  if (pd.IsDefined()) {
    require_map(pd, ctx);
    check_keys(pd, std::span<const std::string_view>(kPdKeys), ctx);
  }
  const bool policy_given = router.IsDefined() && router.IsMap() && router["policy"].IsDefined();
  if (pd.IsDefined() && pd["proxy"].IsDefined()) {
    c.proxy = static_cast<PdProxy>(get_choice_index(
        pd, "proxy", ctx, "toy_proxy", std::span<const std::string_view>(kPdProxyNames)));
    if (policy_given && pd_proxy_policy(c.proxy) != policy) {
      const YamlContext pctx = rctx.child("policy");
      throw yaml_error(router["policy"], pctx,
                       fmt::format("{}: the {} proxy routes with the {} policy, not {} (leave "
                                   "policy out, or set the proxy that pairs with it)",
                                   pctx.path, pd_proxy_name(c.proxy),
                                   router_policy_name(pd_proxy_policy(c.proxy)),
                                   router_policy_name(policy)));
    }
  } else if (const std::optional<PdProxy> p = proxy_of_policy(policy)) {
    c.proxy = *p;
  } else {
    const YamlContext pctx = rctx.child("policy");
    throw yaml_error(router["policy"], pctx,
                     fmt::format("{}: the {} router has no P/D proxy in kvsim (P/D routes with "
                                 "round_robin: toy_proxy, llm_d: llm_d, or dynamo_kv: dynamo)",
                                 pctx.path, router_policy_name(policy)));
  }
  if (c.proxy != PdProxy::kLlmD && pd.IsDefined() && pd["non_cached_tokens"].IsDefined()) {
    const YamlContext kctx = ctx.child("non_cached_tokens");
    throw yaml_error(key_node(pd, "non_cached_tokens"), kctx,
                     fmt::format("{}: a parameter of the llm_d proxy (its P/D decider), not of {}",
                                 kctx.path, pd_proxy_name(c.proxy)));
  }
  c.non_cached_tokens = get_int(pd, "non_cached_tokens", ctx, 16, 0, std::int64_t{1} << 40);
  c.link_bandwidth_gb_per_s = get_double(pd, "link_bandwidth_gb_per_s", ctx, 50.0, 1e-3, 1e6);
  c.efficiency = get_double(pd, "efficiency", ctx, 0.8, 1e-3, 1.0);
  c.setup_ns = ms_to_ns(get_double(pd, "setup_ms", ctx, 0.5, 0.0, 1e6));
  c.handshake_ns = ms_to_ns(get_double(pd, "handshake_ms", ctx, 50.0, 0.0, 1e6));
  c.proxy_hop_ns = ms_to_ns(get_double(pd, "proxy_hop_ms", ctx, 1.0, 0.0, 1e6));
  c.shared_nic = get_bool(pd, "shared_nic", ctx, false);
  return c;
}

}  // namespace

std::string_view pd_proxy_name(PdProxy p) { return kPdProxyNames[static_cast<std::size_t>(p)]; }

RouterPolicy pd_proxy_policy(PdProxy p) {
  switch (p) {
    case PdProxy::kToyProxy: return RouterPolicy::kRoundRobin;
    case PdProxy::kLlmD: return RouterPolicy::kLlmD;
    case PdProxy::kDynamo: return RouterPolicy::kDynamoKv;
  }
  return RouterPolicy::kRoundRobin;
}

std::int64_t PdConfig::gpu_bytes_per_s() const {
  const double r = std::round(link_bandwidth_gb_per_s * 1e9 * efficiency);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(r));
}

std::string_view replica_role_name(ReplicaRole r) {
  switch (r) {
    case ReplicaRole::kMixed: return "mixed";
    case ReplicaRole::kPrefill: return "prefill";
    case ReplicaRole::kDecode: return "decode";
  }
  return "mixed";
}

std::string_view router_policy_name(RouterPolicy p) {
  return kRouterPolicyNames[static_cast<std::size_t>(p)];
}

bool router_reads_kv_events(const RouterConfig& c) {
  return c.policy == RouterPolicy::kDynamoKv || c.policy == RouterPolicy::kPrefixIdeal ||
         c.policy == RouterPolicy::kPrefixBounded ||
         (c.policy == RouterPolicy::kLlmD && c.w_precise_prefix != 0);
}

bool dp_lockstep(const ClusterConfig& c, bool moe_model) {
  return c.replicas > 1 && c.router.policy == RouterPolicy::kVllmDp &&
         (c.router.moe >= 0 ? c.router.moe == 1 : moe_model);
}

namespace {

/// `cluster.overrides`: the groups' replicas (checked) and their sections as written; the
/// scenarios are made by parse_scenario, which has the whole tree.
std::vector<ReplicaOverride> parse_overrides(const YAML::Node& list, const YamlContext& ctx,
                                             std::int64_t replicas) {
  if (!list.IsSequence())
    throw yaml_error(list, ctx,
                     fmt::format("{}: expected a list of {{replicas: [...], hardware: ..., cache: "
                                 "..., scheduler: ..., latency: ...}}",
                                 ctx.path));
  std::vector<ReplicaOverride> out;
  std::vector<char> seen(static_cast<std::size_t>(replicas), 0);
  for (std::size_t g = 0; g < list.size(); ++g) {
    const YAML::Node item = list[g];
    const YamlContext ictx = ctx.element(g);
    require_map(item, ictx);
    std::vector<std::string_view> keys = {"replicas"};
    for (std::string_view k : kOverrideSections) keys.push_back(k);
    check_keys(item, std::span<const std::string_view>(keys), ictx);
    const YAML::Node rs = item["replicas"];
    const YamlContext rctx = ictx.child("replicas");
    if (!rs.IsDefined() || !rs.IsSequence() || rs.size() == 0)
      throw yaml_error(rs.IsDefined() ? rs : item, rctx,
                       fmt::format("{}: expected a non-empty list of replica indices", rctx.path));
    ReplicaOverride o;
    for (std::size_t i = 0; i < rs.size(); ++i) {
      const std::int64_t r = as_int(rs[i], rctx.element(i), 0, replicas - 1);
      if (seen[static_cast<std::size_t>(r)])
        throw yaml_error(rs[i], rctx.element(i),
                         fmt::format("{}: replica {} is already in an override group",
                                     rctx.element(i).path, r));
      seen[static_cast<std::size_t>(r)] = 1;
      o.replicas.push_back(r);
    }
    for (std::string_view k : kOverrideSections)
      if (item[std::string(k)].IsDefined()) require_map(item[std::string(k)], ictx.child(k));
    o.sections = item;
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace

bool cluster_shared_key(std::string_view section, std::string_view key) {
  return (section == "cache" && (key == "block_size" || key.starts_with("kv_offloading"))) ||
         (section == "scheduler" && key == "max_model_len");
}

bool router_policy_timed_only(RouterPolicy p) {
  return p == RouterPolicy::kLeastWaiting || p == RouterPolicy::kVllmDp || p == RouterPolicy::kLlmD;
}

ClusterConfig parse_cluster(const YAML::Node& cluster, const YamlContext& ctx, bool cache_only) {
  check_keys(cluster, std::span<const std::string_view>(kClusterKeys), ctx);
  ClusterConfig c;
  c.replicas = get_int(cluster, "replicas", ctx, 1, 1, kMaxReplicas);
  const bool is_map = cluster.IsDefined() && cluster.IsMap();
  const bool has_p = is_map && cluster["prefill_replicas"].IsDefined();
  const bool has_d = is_map && cluster["decode_replicas"].IsDefined();
  if (has_p != has_d) {
    const std::string_view given = has_p ? "prefill_replicas" : "decode_replicas";
    const std::string_view other = has_p ? "decode_replicas" : "prefill_replicas";
    throw yaml_error(key_node(cluster, given), ctx.child(given),
                     fmt::format("{}: P/D disaggregation needs {} too", ctx.child(given).path,
                                 other));
  }
  if (has_p) {
    c.prefill_replicas = get_int(cluster, "prefill_replicas", ctx, 1, 1, kMaxReplicas);
    c.decode_replicas = get_int(cluster, "decode_replicas", ctx, 1, 1, kMaxReplicas);
    const std::int64_t n = c.prefill_replicas + c.decode_replicas;
    if (cluster["replicas"].IsDefined() && c.replicas != n)
      throw yaml_error(cluster["replicas"], ctx.child("replicas"),
                       fmt::format("{}: {} against prefill_replicas + decode_replicas = {} (in "
                                   "P/D, replicas is their sum; leave it out)",
                                   ctx.child("replicas").path, c.replicas, n));
    if (n > kMaxReplicas)
      throw yaml_error(cluster["decode_replicas"], ctx.child("decode_replicas"),
                       fmt::format("{}: {} replicas in all is more than {}",
                                   ctx.child("decode_replicas").path, n, kMaxReplicas));
    c.replicas = n;
  }
  const YAML::Node router = is_map ? cluster["router"] : YAML::Node();
  const YamlContext rctx = ctx.child("router");
  // The policy a P/D proxy routes with is the default policy.
  std::string_view default_policy = "round_robin";
  if (c.disaggregated() && router.IsDefined() && router.IsMap() && router["pd"].IsDefined() &&
      router["pd"].IsMap() &&
      router["pd"]["proxy"].IsDefined()) {
    const std::size_t k =
        get_choice_index(router["pd"], "proxy", rctx.child("pd"), "toy_proxy",
                         std::span<const std::string_view>(kPdProxyNames));
    default_policy = router_policy_name(pd_proxy_policy(static_cast<PdProxy>(k)));
  }
  c.router = parse_router(router, rctx, default_policy);
  if (c.disaggregated()) {
    c.router.pd = parse_pd(router, rctx, c.router.policy);
  } else if (router.IsDefined() && router.IsMap() && router["pd"].IsDefined()) {
    throw yaml_error(key_node(router, "pd"), rctx.child("pd"),
                     fmt::format("{}: P/D settings in a cluster without prefill_replicas and "
                                 "decode_replicas",
                                 rctx.child("pd").path));
  }
  // P/D: the toy proxy's two cycles each start at index `start` of their pool.
  const std::int64_t rr_bound =
      c.disaggregated() ? std::min(c.prefill_replicas, c.decode_replicas) : c.replicas;
  if (c.router.policy == RouterPolicy::kRoundRobin && c.router.start >= rr_bound)
    throw yaml_error(router["start"], rctx.child("start"),
                     c.disaggregated()
                         ? fmt::format("{}: {} is not an index of both pools ({} prefill and {} "
                                       "decode replicas; expected 0 .. {})",
                                       rctx.child("start").path, c.router.start,
                                       c.prefill_replicas, c.decode_replicas, rr_bound - 1)
                         : fmt::format("{}: {} is not a replica of {} (expected 0 .. {})",
                                       rctx.child("start").path, c.router.start, c.replicas,
                                       c.replicas - 1));
  if ((c.router.policy == RouterPolicy::kLlmD ||
       c.router.policy == RouterPolicy::kSglangCacheAware ||
       c.router.policy == RouterPolicy::kDynamoKv ||
       c.router.policy == RouterPolicy::kPrefixIdeal ||
       c.router.policy == RouterPolicy::kPrefixBounded) &&
      c.replicas > 64)
    throw yaml_error(cluster["replicas"], ctx.child("replicas"),
                     fmt::format("{}: the {} router takes at most 64 replicas in kvsim",
                                 ctx.child("replicas").path, router_policy_name(c.router.policy)));
  if (cluster.IsDefined() && cluster.IsMap() && cluster["overrides"].IsDefined())
    c.overrides = parse_overrides(cluster["overrides"], ctx.child("overrides"), c.replicas);
  if (c.disaggregated() && cache_only) {
    const std::string_view key = "prefill_replicas";
    throw yaml_error(key_node(cluster, key), ctx.child(key),
                     fmt::format("{}: P/D disaggregation needs engine.mode: timed (a cache_only "
                                 "run has no time for the KV transfer)",
                                 ctx.child(key).path));
  }
  if (c.enabled() && cache_only && router_policy_timed_only(c.router.policy))
    throw yaml_error(
        router["policy"], ctx.child("router").child("policy"),
        fmt::format("{}: the {} router reads the replicas' queues, which a "
                    "cache_only run does not have (it needs engine.mode: timed)",
                    ctx.child("router").child("policy").path, router_policy_name(c.router.policy)));
  return c;
}

void check_pd_engine(const ClusterConfig& c, const YAML::Node& cluster, const YamlContext& ctx,
                     std::string_view profile, bool cpu_tier, std::int64_t samples) {
  if (!c.disaggregated()) return;
  const std::string_view key = "prefill_replicas";
  if (profile != "vllm-0.20")
    throw yaml_error(key_node(cluster, key), ctx.child(key),
                     fmt::format("{}: P/D disaggregation is modelled for engine.profile "
                                 "vllm-0.20 (vLLM v0.20.1's NixlConnector), not {}",
                                 ctx.child(key).path, profile));
  if (cpu_tier)
    throw yaml_error(key_node(cluster, key), ctx.child(key),
                     fmt::format("{}: P/D disaggregation together with the CPU tier "
                                 "(cache.kv_offloading) is not modelled in kvsim",
                                 ctx.child(key).path));
  if (samples > 1)
    throw yaml_error(key_node(cluster, key), ctx.child(key),
                     fmt::format("{}: P/D disaggregation with parallel sampling (workload n = {}) "
                                 "is not modelled in kvsim",
                                 ctx.child(key).path, samples));
}

YAML::Node cluster_yaml(const ClusterConfig& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["replicas"] = c.replicas;
  if (c.disaggregated()) {
    n["prefill_replicas"] = c.prefill_replicas;
    n["decode_replicas"] = c.decode_replicas;
  }
  YAML::Node r(YAML::NodeType::Map);
  r["policy"] = std::string(router_policy_name(c.router.policy));
  r["seed"] = c.router.seed;
  for (std::string_view k : own_keys(c.router.policy)) {
    if (k == "start") r["start"] = c.router.start;
    if (k == "eps") r["eps"] = number_node(c.router.eps);
    if (k == "k") r["k"] = c.router.k;
    if (k == "api_servers") r["api_servers"] = c.router.api_servers;
    if (k == "moe" && c.router.moe >= 0) r["moe"] = c.router.moe == 1;
    if (k == "lru_capacity_per_server" && c.router.lru_capacity_per_server > 0)
      r["lru_capacity_per_server"] = c.router.lru_capacity_per_server;
    if (k == "cache_threshold") r["cache_threshold"] = number_node(c.router.cache_threshold);
    if (k == "balance_abs_threshold") r["balance_abs_threshold"] = c.router.balance_abs_threshold;
    if (k == "balance_rel_threshold")
      r["balance_rel_threshold"] = number_node(c.router.balance_rel_threshold);
    if (k == "scorers") {
      YAML::Node w(YAML::NodeType::Map);
      w["queue"] = number_node(c.router.w_queue);
      w["kv_usage"] = number_node(c.router.w_kv_usage);
      w["prefix"] = number_node(c.router.w_prefix);
      if (c.router.w_precise_prefix != 0)
        w["precise_prefix"] = number_node(c.router.w_precise_prefix);
      w["load_aware"] = number_node(c.router.w_load_aware);
      w["active_request"] = number_node(c.router.w_active_request);
      r["scorers"] = w;
    }
    if (k == "overlap_score_weight")
      r["overlap_score_weight"] = number_node(c.router.overlap_score_weight);
    if (k == "router_temperature")
      r["router_temperature"] = number_node(c.router.router_temperature);
    if (k == "router_track_active_blocks")
      r["router_track_active_blocks"] = c.router.track_active_blocks;
    if (k == "kv_events" && router_reads_kv_events(c.router)) {
      YAML::Node v(YAML::NodeType::Map);
      v["delay_ms"] = number_node(static_cast<double>(c.router.kv_event_delay_ns) / 1e6);
      r["kv_events"] = v;
    }
    if (k == "view") {
      YAML::Node v(YAML::NodeType::Map);
      if (c.router.refresh_interval_ns >= 0)
        v["refresh_interval_ms"] =
            number_node(static_cast<double>(c.router.refresh_interval_ns) / 1e6);
      v["phase_s"] = number_node(static_cast<double>(c.router.phase_ns) / 1e9);
      if (c.router.view_delay_ns > 0)
        v["delay_ms"] = number_node(static_cast<double>(c.router.view_delay_ns) / 1e6);
      r["view"] = v;
    }
  }
  if (c.disaggregated()) {
    const PdConfig& p = c.router.pd;
    YAML::Node pd(YAML::NodeType::Map);
    pd["proxy"] = std::string(pd_proxy_name(p.proxy));
    if (p.proxy == PdProxy::kLlmD) pd["non_cached_tokens"] = p.non_cached_tokens;
    pd["link_bandwidth_gb_per_s"] = number_node(p.link_bandwidth_gb_per_s);
    pd["efficiency"] = number_node(p.efficiency);
    pd["setup_ms"] = number_node(static_cast<double>(p.setup_ns) / 1e6);
    pd["handshake_ms"] = number_node(static_cast<double>(p.handshake_ns) / 1e6);
    pd["proxy_hop_ms"] = number_node(static_cast<double>(p.proxy_hop_ns) / 1e6);
    pd["shared_nic"] = p.shared_nic;
    r["pd"] = pd;
  }
  n["router"] = r;
  return n;
}

}  // namespace kvsim
