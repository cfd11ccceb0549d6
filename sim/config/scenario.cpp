#include "sim/config/scenario.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "sim/config/mamba_cache.h"

namespace kvsim {
namespace {

constexpr std::int64_t kMaxGpuBlocks = std::int64_t{1} << 28;

std::string flow_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << node;
  return e.c_str();
}

/// The KV pool: from the model and memory budget by the profile's release rules (s.plan, with
/// that release's start-up check that one max_model_len request fits), else from the cache's
/// block count. Resolves cache.enable_prefix_caching (absent: vLLM's default for the model) and
/// cache.mamba_cache_mode (sim/config/mamba_cache.h). Needs the engine, model, hardware, cache and
/// scheduler sections parsed; `cache` is the scenario's cache section.
void size_pool(Scenario& s, const YAML::Node& cache) {
  const std::int64_t bs = s.cache.sizing.block_size;
  CacheSizingConfig sizing = s.cache.sizing;
  if (s.cache.capacity_tokens) sizing.num_gpu_blocks_override = *s.cache.capacity_tokens / bs;
  if (s.model) {
    const KVSizingRules rules = kv_sizing_rules_for_profile(profile_name(s.engine.profile))
                                    .value_or(KVSizingRules::kV072Uniform);
    PoolRequest request;
    request.max_model_len = s.scheduler.max_model_len;
    request.max_num_batched_tokens = s.scheduler.max_num_batched_tokens;
    if (has_key(cache, "enable_prefix_caching"))
      request.enable_prefix_caching = s.cache.enable_prefix_caching;
    request.mamba_cache_mode = s.cache.mamba_cache_mode;
    // An explicit pool is the pool (as the acceptance cases' engine loops take it).
    request.override_check_warns = true;
    // A KV connector (the CPU tier) turns the hybrid manager off unless the user said otherwise
    // (vllm/config/vllm.py:1288-1305; an explicit false is refused: check_kv_offloading).
    request.disable_hybrid_kv_cache_manager = s.cache.disable_hybrid_kv_cache_manager;
    if (s.cache.kv_offloading && !request.disable_hybrid_kv_cache_manager)
      request.disable_hybrid_kv_cache_manager = true;
    s.cache.enable_prefix_caching =
        choose_mamba_cache_mode(*s.model, request, rules).enable_prefix_caching;
    s.plan = plan_kv_pool(*s.model, s.hardware, sizing, request, rules, s.file);
    s.num_gpu_blocks = s.plan->sizing.num_gpu_blocks;
    s.cache.mamba_cache_mode = s.plan->layout->limits.mamba_cache_mode;
  } else if (sizing.num_gpu_blocks_override) {
    s.num_gpu_blocks = *sizing.num_gpu_blocks_override;
  } else {
    throw ConfigError(s.file +
                      ": cache: the pool size needs a model (model.config) or "
                      "cache.num_gpu_blocks_override or cache.capacity_tokens");
  }
  if (s.num_gpu_blocks < 1 || s.num_gpu_blocks > kMaxGpuBlocks)
    throw ConfigError(fmt::format("{}: cache: {} blocks is outside the supported range [1, {}]",
                                  s.file, s.num_gpu_blocks, kMaxGpuBlocks));
  // vLLM V0's CPU pool (worker.py determine_num_available_blocks): int(swap_space_bytes //
  // cache_block_size), the block's bytes over all layers on one GPU.
  if (s.plan && profile_info(s.engine.profile).family == EngineFamily::kV0) {
    const double blocks =
        std::floor(s.cache.swap_space * static_cast<double>(std::int64_t{1} << 30) /
                   static_cast<double>(s.plan->spec.page_bytes_all_layers()));
    if (blocks > static_cast<double>(kMaxGpuBlocks))
      throw ConfigError(
          fmt::format("{}: cache.swap_space: {} GiB is {} blocks, more than the "
                      "supported {}",
                      s.file, s.cache.swap_space, blocks, kMaxGpuBlocks));
    s.num_cpu_blocks = static_cast<std::int64_t>(blocks);
  }
}

/// The node of the key that turned the CPU tier on (kv_offloading_size or
/// kv_offloading_capacity_tokens), and its context.
std::pair<YAML::Node, YamlContext> tier_key(const YAML::Node& root, const YamlContext& top) {
  const YAML::Node cache = root["cache"];
  const char* key =
      has_key(cache, "kv_offloading_size") ? "kv_offloading_size" : "kv_offloading_capacity_tokens";
  return {cache[key], top.child("cache").child(key)};
}

/// The CPU tier against the engine it plugs into, before the pool is sized: vLLM v0.20.1's
/// refusal of the connector with the hybrid KV cache manager on, the release, the loop.
void check_kv_offloading(const Scenario& s, const YAML::Node& root, const YamlContext& top) {
  if (!s.cache.kv_offloading) return;
  const auto [at, ctx] = tier_key(root, top);
  const std::string key = ctx.path;
  if (s.engine.profile != Profile::kVllm020)
    throw yaml_error(at, ctx,
                     fmt::format("{}: the CPU tier (vLLM's OffloadingConnector) is modelled for "
                                 "vllm-0.20 only, not {}",
                                 key, profile_name(s.engine.profile)));
  if (s.cache.disable_hybrid_kv_cache_manager == false)
    throw yaml_error(root["cache"]["disable_hybrid_kv_cache_manager"],
                     top.child("cache").child("disable_hybrid_kv_cache_manager"),
                     "cache.disable_hybrid_kv_cache_manager: vLLM v0.20.1 refuses to start: "
                     "ValueError: Connector OffloadingConnector does not support HMA but HMA is "
                     "enabled. Please set `--disable-hybrid-kv-cache-manager`. (set "
                     "cache.disable_hybrid_kv_cache_manager: true, or leave it out: the CPU tier "
                     "then turns it on, as --kv-transfer-config does)");
  if (s.cache.kv_offloading->size_gib && !s.model)
    throw yaml_error(at, ctx,
                     fmt::format("{}: a tier in GiB needs a model (its blocks are the model's KV "
                                 "bytes per block); without one give "
                                 "cache.kv_offloading_capacity_tokens",
                                 key));
  if (s.engine.mode != EngineConfig::Mode::kTimed) return;
  if (s.scheduler.async_scheduling) {
    const YAML::Node sched = root["scheduler"];
    const bool given = has_key(sched, "async_scheduling");
    throw yaml_error(given ? sched["async_scheduling"] : at,
                     given ? top.child("scheduler").child("async_scheduling") : ctx,
                     fmt::format("{}: a timed run with the CPU tier needs "
                                 "scheduler.async_scheduling: false (the asynchronous loop with "
                                 "the OffloadingConnector is not modelled)",
                                 given ? "scheduler.async_scheduling" : key));
  }
  if (!(s.hardware.gpu.host_link_bytes_per_s > 0))
    throw yaml_error(at, ctx,
                     fmt::format("{}: the CPU tier's transfers need hardware.host_link_bytes_per_s "
                                 "> 0",
                                 key));
}

/// The CPU tier's blocks (cpu/spec.py:28-42), once the pool is sized. One KV cache group: vLLM
/// v0.20.1 asserts it for the connector (scheduler.py:2030-2036).
void size_offload_tier(Scenario& s, const YAML::Node& root, const YamlContext& top) {
  if (!s.cache.kv_offloading) return;
  const KvOffloadingConfig& o = *s.cache.kv_offloading;
  const auto [at, ctx] = tier_key(root, top);
  OffloadTierPlan t;
  t.block_size_factor = static_cast<std::int32_t>(o.block_size / s.cache.sizing.block_size);
  if (s.plan && s.plan->layout) {
    const KVPoolLayout& layout = *s.plan->layout;
    if (layout.groups.size() != 1)
      throw yaml_error(at, ctx,
                       fmt::format("{}: the OffloadingConnector needs one KV cache group, and {} "
                                   "has {} with the hybrid KV cache manager off (vLLM asserts "
                                   "it)",
                                   ctx.path, s.model->name, layout.groups.size()));
    std::int64_t bytes = 0;
    for (const KVCacheTensor& tensor : layout.tensors) bytes += tensor.size_bytes;
    t.page_bytes = layout.num_blocks > 0 ? bytes / layout.num_blocks : 0;
  } else if (s.plan) {
    t.page_bytes = s.plan->spec.page_bytes_all_layers();
  }
  if (o.size_gib) {
    const std::int64_t per_block =
        t.page_bytes * s.hardware.tensor_parallel_size * t.block_size_factor;
    // int(kv_offloading_size * (1 << 30)) as Python truncates the float.
    const double bytes = std::trunc(*o.size_gib * static_cast<double>(std::int64_t{1} << 30));
    t.num_cpu_blocks = per_block > 0 ? static_cast<std::int64_t>(bytes) / per_block : 0;
  } else {
    t.num_cpu_blocks = *o.capacity_tokens / o.block_size;
  }
  if (t.num_cpu_blocks > kMaxGpuBlocks)
    throw yaml_error(at, ctx,
                     fmt::format("{}: {} CPU blocks is more than the supported {}", ctx.path,
                                 t.num_cpu_blocks, kMaxGpuBlocks));
  s.offload = t;
}

/// vLLM v0.20.1's refusals of mamba_cache_mode 'align' (check_mamba_align), at the scheduler key
/// at fault, else at the cache key that asked for prefix caching or the mode.
void check_mamba_align_settings(const Scenario& s, const YAML::Node& root, const YamlContext& top) {
  if (!s.plan || !s.plan->layout) return;
  MambaAlignLimits limits;
  limits.block_size = s.plan->layout->engine_block_size;
  limits.max_num_batched_tokens = s.scheduler.max_num_batched_tokens;
  limits.long_prefill_token_threshold = s.scheduler.long_prefill_token_threshold;
  limits.enable_chunked_prefill = s.scheduler_v0.enable_chunked_prefill.value_or(true);
  limits.has_mamba_layers = s.model && has_mamba_layers(*s.model);
  const auto bad = check_mamba_align(s.cache.mamba_cache_mode, limits);
  if (!bad) return;
  const std::string model = !s.model                          ? "no model"
                            : s.model->architecture().empty() ? s.model->name
                                                              : s.model->architecture();
  const std::string message =
      fmt::format("scheduler.{}: vLLM v0.20.1 refuses mamba_cache_mode 'align' ({}): {}", bad->key,
                  model, bad->message);
  const YAML::Node sched = root["scheduler"], cache = root["cache"];
  if (has_key(sched, bad->key))
    throw yaml_error(sched[bad->key], top.child("scheduler").child(bad->key), message);
  for (const char* key : {"mamba_cache_mode", "enable_prefix_caching"})
    if (has_key(cache, key)) throw yaml_error(cache[key], top.child("cache").child(key), message);
  throw yaml_error(YAML::Node(), top.child("scheduler").child(bad->key), message);
}

/// workload.n and workload.parallel_sampling against the engine: forks need vLLM V0's engine,
/// and its recompute can preempt a one-sequence group only (vLLM asserts otherwise).
void check_parallel_sampling(const Scenario& s, const YAML::Node& root, const YamlContext& top) {
  const PerRequestConfig& pr = s.workload.per_request;
  const YamlContext wctx = top.child("workload");
  if (pr.n > 1 && s.engine.mode == EngineConfig::Mode::kCacheOnly)
    throw yaml_error(root["workload"]["n"], wctx.child("n"),
                     "workload.n: parallel sampling needs engine.mode: timed (a cache_only run "
                     "looks each prompt up once and generates nothing)");
  if (pr.parallel_sampling != PerRequestConfig::ParallelSampling::kFork) return;
  const YAML::Node at = root["workload"]["parallel_sampling"];
  if (profile_info(s.engine.profile).family != EngineFamily::kV0)
    throw yaml_error(at, wctx.child("parallel_sampling"),
                     fmt::format("workload.parallel_sampling: fork needs vllm-0.7.2-v0: {} has no "
                                 "forked sequences (n samples fan out into n requests: fanout)",
                                 profile_name(s.engine.profile)));
  if (pr.n < 2) return;
  if (pr.client_timeout_s)
    throw yaml_error(root["workload"]["client_timeout_s"], wctx.child("client_timeout_s"),
                     "workload.client_timeout_s: client aborts of forked sequence groups are not "
                     "modelled -- with workload.parallel_sampling: fork, leave it unset (fanout "
                     "aborts each sample)");
  const YamlContext sctx = top.child("scheduler");
  const V0SchedulerConfig& v0 = s.scheduler_v0;
  if (v0.preemption_mode == v0::PreemptionMode::kRecompute)
    throw yaml_error(root["scheduler"]["preemption_mode"], sctx.child("preemption_mode"),
                     "scheduler.preemption_mode: recompute cannot preempt a forked group of "
                     "several sequences (vLLM asserts len(seqs) == 1) -- with "
                     "workload.parallel_sampling: fork, use swap or leave it unset");
  if (v0.on_swap_space_exhausted == v0::SwapSpaceExhausted::kRecompute)
    throw yaml_error(root["scheduler"]["on_swap_space_exhausted"],
                     sctx.child("on_swap_space_exhausted"),
                     "scheduler.on_swap_space_exhausted: recompute cannot preempt a forked group "
                     "of several sequences -- with workload.parallel_sampling: fork, size "
                     "cache.swap_space instead");
}

/// A swept key must name a section of the scenario (but sweep).
void check_sweep_key(const YAML::Node& key_node, const std::string& key, const YamlContext& kctx) {
  std::vector<std::string_view> sweepable(std::begin(kScenarioKeys), std::end(kScenarioKeys));
  sweepable.pop_back();  // a sweep cannot sweep itself
  const std::string section = key.substr(0, key.find('.'));
  if (std::find(sweepable.begin(), sweepable.end(), section) == sweepable.end())
    throw yaml_error(key_node, kctx,
                     fmt::format("sweep: '{}' is not a key of the scenario{}", key,
                                 suggestion_suffix(section, sweepable)));
}

/// The list form: each item a non-empty mapping of dotted keys to values.
std::vector<std::vector<std::pair<std::string, YAML::Node>>> parse_sweep_list(
    const YAML::Node& sweep, const YamlContext& ctx) {
  std::vector<std::vector<std::pair<std::string, YAML::Node>>> points;
  if (sweep.size() == 0) throw yaml_error(sweep, ctx, "sweep: expected a non-empty list of points");
  for (std::size_t i = 0; i < sweep.size(); ++i) {
    const YAML::Node point = sweep[i];
    const YamlContext pctx = ctx.child(std::to_string(i));
    if (!point.IsMap() || point.size() == 0)
      throw yaml_error(point, pctx,
                       fmt::format("sweep[{}]: expected a mapping of dotted keys to values, got {}",
                                   i, describe_node(point)));
    auto& p = points.emplace_back();
    for (auto it = point.begin(); it != point.end(); ++it) {
      const std::string key = it->first.Scalar();
      check_sweep_key(it->first, key, pctx.child(key));
      p.emplace_back(key, YAML::Node(it->second));
    }
  }
  return points;
}

std::vector<SweepAxis> parse_sweep(const YAML::Node& sweep, const YamlContext& ctx) {
  std::vector<SweepAxis> axes;
  if (sweep.IsDefined() && sweep.IsSequence()) return axes;  // the list form
  require_map(sweep, ctx);
  if (!sweep.IsDefined() || !sweep.IsMap()) return axes;
  for (auto it = sweep.begin(); it != sweep.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YamlContext kctx = ctx.child(key);
    check_sweep_key(it->first, key, kctx);
    if (!it->second.IsSequence() || it->second.size() == 0)
      throw yaml_error(it->second, kctx,
                       fmt::format("sweep.{}: expected a non-empty list of values, got {}", key,
                                   describe_node(it->second)));
    SweepAxis axis{key, {}};
    // NOTE: yaml-cpp's it->second lives in a temporary proxy: copy the node before iterating.
    const YAML::Node values = it->second;
    for (const auto& v : values) axis.values.push_back(v);
    axes.push_back(std::move(axis));
  }
  return axes;
}

}  // namespace

KVCacheConfig Scenario::kv_cache_config() const {
  KVCacheConfig c;
  c.block_size = static_cast<std::int32_t>(cache.sizing.block_size);
  c.num_gpu_blocks = static_cast<std::int32_t>(num_gpu_blocks);
  c.max_model_len = scheduler.max_model_len;
  c.enable_caching = cache.enable_prefix_caching;
  c.num_preallocate_tokens = cache.num_preallocate_tokens;
  c.sliding_window = model && model->sliding_window ? *model->sliding_window : 0;
  // One KV cache type per pool before v0.9: sliding-window layers mixed with full ones become
  // full attention (vLLM v0.8.5.post1 kv_cache_utils.py unify_hybrid_kv_cache_specs).
  if (model && mixes_sliding_and_full(model->attention)) c.sliding_window = 0;
  if (release_features(engine.profile).kv_cache_groups && plan && plan->layout) {
    // vLLM v0.20: one KV cache group per set of layers the pool sizing grouped (gpt-oss: a
    // sliding-window group and a full one), in vLLM's group order.
    const KVPoolLayout& layout = *plan->layout;
    for (const KVCacheGroup& g : layout.groups) {
      KVGroupSpec spec;
      spec.block_size = static_cast<std::int32_t>(g.spec.block_size);
      switch (g.spec.kind) {
        case KVSpecKind::kFull:
        case KVSpecKind::kMLA:
          break;  // a window merged into a full-attention spec is managed as full attention
        case KVSpecKind::kSlidingWindow:
          spec.kind = KVGroupKind::kSlidingWindow;
          spec.sliding_window = g.spec.sliding_window;
          break;
        case KVSpecKind::kChunkedLocal:
          spec.kind = KVGroupKind::kChunkedLocal;
          spec.attention_chunk_size = g.spec.attention_chunk_size;
          break;
        case KVSpecKind::kMamba:
          spec.kind = KVGroupKind::kMamba;
          spec.num_speculative_blocks = g.spec.num_speculative_blocks;
          spec.mamba_cache_mode =
              layout.limits.mamba_cache_mode == MambaCacheMode::kAll     ? MambaGroupMode::kAll
              : layout.limits.mamba_cache_mode == MambaCacheMode::kAlign ? MambaGroupMode::kAlign
                                                                         : MambaGroupMode::kNone;
          break;
      }
      c.kv_cache_groups.push_back(spec);
    }
    c.sliding_window = 0;  // the groups say it
    if (layout.engine_block_size > 0)
      c.block_size = static_cast<std::int32_t>(layout.engine_block_size);
    c.hash_block_size = static_cast<std::int32_t>(layout.hash_block_size);
  }
  return c;
}

EngineParams Scenario::engine_params() const {
  EngineParams p;
  p.profile = engine.profile;
  p.contiguous_fit = engine.contiguous_fit;
  p.scheduler = scheduler;
  p.cache = kv_cache_config();
  p.v0.num_cpu_blocks = static_cast<std::int32_t>(num_cpu_blocks);
  p.v0.swap_space_gib = cache.swap_space;
  p.v0.enable_chunked_prefill = scheduler_v0.enable_chunked_prefill;
  p.v0.preemption_mode = scheduler_v0.preemption_mode;
  p.v0.policy = scheduler_v0.scheduling_policy;
  p.v0.on_swap_space_exhausted = scheduler_v0.on_swap_space_exhausted;
  return p;
}

void apply_set(YAML::Node& root, std::string_view assignment, ArgumentOrigins* origins) {
  const std::string argument = "--set " + std::string(assignment);
  const std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw ConfigError(fmt::format("--set '{}': expected section.key=value", assignment));
  const std::string key(assignment.substr(0, eq));
  const std::string value(assignment.substr(eq + 1));
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (parts.back().empty())
      throw ConfigError(
          fmt::format("--set '{}': empty component in key path '{}'", assignment, key));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // sweep keys are dotted paths themselves: sweep.cache.block_size is the key 'cache.block_size'.
  if (parts.size() > 2 && parts[0] == "sweep") {
    std::string rest = parts[1];
    for (std::size_t i = 2; i < parts.size(); ++i) rest += "." + parts[i];
    parts = {"sweep", rest};
  }
  YAML::Node parsed;
  try {
    parsed = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("{}: YAML syntax error: {}", argument, e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError("--set: the scenario's top level is not a mapping");
  YAML::Node cur;
  cur.reset(root);
  std::string path;
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    path += (path.empty() ? "" : ".") + parts[i];
    YAML::Node child = cur[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child = cur[parts[i]];
      if (origins) origins->add(path, argument);  // its other keys' absence is this --set's too
    } else if (!child.IsMap()) {
      throw ConfigError(fmt::format("--set '{}': '{}' is not a mapping (it is {})", assignment,
                                    parts[i], describe_node(child)));
    }
    YAML::Node next;
    next.reset(child);
    cur.reset(next);
  }
  cur[parts.back()] = parsed;
  if (origins) origins->add((path.empty() ? "" : path + ".") + parts.back(), argument);
}

namespace {

/// cluster.overrides: each group's scenario, parsed from the scenario's tree with the group's
/// sections over the scenario's own (one level deep; `latency` replaced whole) and without
/// `cluster` and `sweep`. The nodes
/// are the file's own, so an error points into the group. The group may not change what the
/// cluster shares: the engine (not overridable), the block size, the CPU tier, max_model_len.
void make_override_scenarios(Scenario& s, const YAML::Node& root, const std::string& file,
                             const YamlContext& top) {
  const YamlContext octx = top.child("cluster").child("overrides");
  for (std::size_t g = 0; g < s.cluster.overrides.size(); ++g) {
    ReplicaOverride& o = s.cluster.overrides[g];
    const YamlContext gctx = octx.element(g);
    YAML::Node tree(YAML::NodeType::Map);
    for (const auto& kv : root) {
      const std::string key = kv.first.as<std::string>();
      if (key != "cluster" && key != "sweep") tree[key] = kv.second;
    }
    for (std::string_view sec : kOverrideSections) {
      const std::string k(sec);
      const YAML::Node over = o.sections[k];
      if (!over.IsDefined()) continue;
      for (const auto& kv : over) {
        const std::string key = kv.first.as<std::string>();
        if (cluster_shared_key(sec, key))
          throw yaml_error(kv.first, gctx.child(sec).child(key),
                           fmt::format("{}: every replica of a cluster has the same {}.{} (the "
                                       "router and the server's admission are the cluster's)",
                                       gctx.child(sec).child(key).path, sec, key));
      }
      // The group's keys (their own nodes: errors point at them), then the scenario's others.
      YAML::Node merged(YAML::NodeType::Map);
      for (const auto& kv : over) merged.force_insert(kv.first, kv.second);
      // (latency: one model, whose keys are its own -- the group's section replaces it whole.)
      if (sec != "latency" && root[k].IsDefined() && root[k].IsMap())
        for (const auto& kv : root[k])
          if (!over[kv.first.as<std::string>()].IsDefined())
            merged.force_insert(kv.first, kv.second);
      tree[k] = merged;
    }
    auto replica = std::make_shared<Scenario>(parse_scenario(tree, file, top.origins));
    // (max_model_len may still differ when the scenario leaves it to the model and the pool.)
    if (replica->scheduler.max_model_len != s.scheduler.max_model_len)
      throw yaml_error(o.sections, gctx,
                       fmt::format("{}: the group's replicas get max_model_len {} against the "
                                   "cluster's {}; set scheduler.max_model_len for the scenario",
                                   gctx.path, replica->scheduler.max_model_len,
                                   s.scheduler.max_model_len));
    o.scenario = std::move(replica);
  }
}

}  // namespace

Scenario parse_scenario(const YAML::Node& root, const std::string& file,
                        std::shared_ptr<const ArgumentOrigins> origins) {
  Scenario s;
  s.file = file;
  const YamlContext top{file, "", std::move(origins)};
  if (!root.IsDefined() || root.IsNull())
    throw ConfigError(file + ": the scenario is empty (expected a mapping with a workload)");
  check_keys(root, std::span<const std::string_view>(kScenarioKeys), top);

  s.name = get_string(root, "name", top, std::filesystem::path(file).stem().string());
  if (s.name.empty() || s.name.find('/') != std::string::npos || s.name == "." || s.name == "..")
    throw yaml_error(root["name"], top.child("name"),
                     fmt::format("name: must be a non-empty folder name, got '{}'", s.name));
  s.seed = static_cast<std::uint64_t>(get_int(root, "seed", top, 0, 0));
  s.engine = parse_engine(root["engine"], top.child("engine"));
  const bool timed = s.engine.mode == EngineConfig::Mode::kTimed;
  if (has_key(root, "model")) s.model = load_model_config(root["model"], top.child("model"));
  if (timed && !s.model)
    throw ConfigError(file + ": model: required in timed mode (the latency model needs it)");
  s.hardware = load_hardware(root["hardware"], top.child("hardware"));
  const ServeDefaults defaults = serve_defaults(s.engine.profile, s.hardware.gpu);
  s.cache = parse_cache(root["cache"], top.child("cache"), timed, defaults);
  s.scheduler = parse_scheduler(root["scheduler"], top.child("scheduler"),
                                s.model ? &*s.model : nullptr, s.engine.profile, defaults);
  s.scheduler_v0 = parse_scheduler_v0(root["scheduler"], top.child("scheduler"));
  check_kv_offloading(s, root, top);
  size_pool(s, root["cache"]);
  size_offload_tier(s, root, top);
  check_mamba_align_settings(s, root, top);
  if (const auto bad = check_engine_params(s.engine_params())) {
    // A setting the profile's release does not have: at the key where the scenario gives it.
    const std::string section(bad->key.substr(0, bad->key.find('.')));
    const std::string leaf(bad->key.substr(bad->key.find('.') + 1));
    YAML::Node node;
    if (has_key(root, section) && root[section].IsMap() && has_key(root[section], leaf))
      node = root[section][leaf];
    throw yaml_error(node, top.child(section).child(leaf),
                     fmt::format("{}: {}", bad->key, bad->message));
  }
  s.workload = parse_workload_config(root["workload"], top.child("workload"));
  check_parallel_sampling(s, root, top);
  s.latency = parse_latency_config(root["latency"], top.child("latency"));
  s.validate = parse_validate(root["validate"], top.child("validate"));
  s.outputs = parse_outputs(root["outputs"], top.child("outputs"));
  s.cluster = parse_cluster(root["cluster"], top.child("cluster"), !timed);
  check_pd_engine(s.cluster, root["cluster"], top.child("cluster"), profile_name(s.engine.profile),
                  s.cache.kv_offloading.has_value(), s.workload.per_request.n);
  if (s.cluster.enabled() && router_reads_kv_events(s.cluster.router) &&
      profile_info(s.engine.profile).family != EngineFamily::kV1) {
    const YamlContext pctx = top.child("cluster").child("router").child("policy");
    YAML::Node node;
    if (root["cluster"].IsMap() && root["cluster"]["router"].IsMap())
      node = root["cluster"]["router"]["policy"];
    throw yaml_error(node, pctx,
                     fmt::format("{}: the {} router reads the replicas' KV events, which the {} "
                                 "profile does not publish (a vLLM V1 profile does)",
                                 pctx.path, router_policy_name(s.cluster.router.policy),
                                 profile_name(s.engine.profile)));
  }
  if (timed && s.offload && dp_lockstep(s.cluster, s.model && s.model->num_experts > 0)) {
    // The lockstep barrier drives the synchronous and async loops, not the CPU tier's.
    const YamlContext pctx = top.child("cluster").child("router").child("policy");
    YAML::Node node;
    if (root["cluster"].IsMap() && root["cluster"]["router"].IsMap())
      node = root["cluster"]["router"]["policy"];
    throw yaml_error(node, pctx,
                     fmt::format("{}: vllm_dp over an MoE model runs the replicas in lockstep, "
                                 "which kvsim does not model together with the CPU tier "
                                 "(cache.kv_offloading); set cluster.router.moe: false or drop "
                                 "the tier",
                                 pctx.path));
  }
  make_override_scenarios(s, root, file, top);
  s.sweep = parse_sweep(root["sweep"], top.child("sweep"));
  if (root["sweep"].IsDefined() && root["sweep"].IsSequence())
    s.sweep_list = parse_sweep_list(root["sweep"], top.child("sweep"));
  return s;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets,
                       std::optional<std::uint64_t> seed) {
  YAML::Node root = load_yaml_file(path);
  auto origins = std::make_shared<ArgumentOrigins>();
  for (const std::string& a : sets) apply_set(root, a, origins.get());
  if (seed) {
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    root["seed"] = *seed;
    origins->add("seed", fmt::format("--seed {}", *seed));
  }
  return parse_scenario(root, path, std::move(origins));
}

std::string resolved_yaml(const Scenario& s) {
  YAML::Node root(YAML::NodeType::Map);
  root["name"] = s.name;
  root["seed"] = s.seed;
  root["engine"] = engine_yaml(s.engine);
  root["model"] = s.model ? model_config_yaml(*s.model) : null_node();
  root["hardware"] = hardware_yaml(s.hardware);
  root["cache"] = cache_yaml(s.cache, s.model && has_mamba_layers(*s.model));
  root["scheduler"] = scheduler_yaml(s.scheduler, s.engine.profile);
  {
    YAML::Node sched = root["scheduler"];
    add_scheduler_v0_yaml(s.scheduler_v0, sched);
  }
  root["workload"] = workload_config_yaml(s.workload);
  root["latency"] =
      s.engine.mode == EngineConfig::Mode::kTimed ? latency_config_yaml(s.latency) : null_node();
  root["validate"] = validate_yaml(s.validate);
  root["outputs"] = outputs_yaml(s.outputs);
  if (s.cluster.enabled()) {
    root["cluster"] = cluster_yaml(s.cluster);
    // Each group with its scenario's sections in full: over the resolved sections above they give
    // the same scenario again.
    if (!s.cluster.overrides.empty()) {
      YAML::Node list(YAML::NodeType::Sequence);
      for (const ReplicaOverride& o : s.cluster.overrides) {
        const YAML::Node r = YAML::Load(resolved_yaml(*o.scenario));
        YAML::Node g(YAML::NodeType::Map);
        YAML::Node ids(YAML::NodeType::Sequence);
        ids.SetStyle(YAML::EmitterStyle::Flow);
        for (std::int64_t i : o.replicas) ids.push_back(i);
        g["replicas"] = ids;
        for (std::string_view sec : kOverrideSections) {
          if (!o.sections[std::string(sec)].IsDefined()) continue;
          YAML::Node out(YAML::NodeType::Map);
          for (const auto& kv : r[std::string(sec)]) {  // less the keys every replica shares
            const std::string key = kv.first.as<std::string>();
            if (cluster_shared_key(sec, key)) continue;
            out[key] = kv.second;
          }
          g[std::string(sec)] = out;
        }
        list.push_back(g);
      }
      root["cluster"]["overrides"] = list;
    }
  }
  YAML::Emitter e;
  e << root;
  return std::string(e.c_str()) + "\n";
}

std::vector<std::vector<std::pair<std::string, std::string>>> sweep_points(const Scenario& s) {
  if (!s.sweep_list.empty()) {
    std::vector<std::vector<std::pair<std::string, std::string>>> listed;
    for (const auto& point : s.sweep_list) {
      auto& p = listed.emplace_back();
      for (const auto& [key, value] : point) p.emplace_back(key, flow_text(value));
    }
    return listed;
  }
  std::vector<std::vector<std::pair<std::string, std::string>>> points(1);
  for (const SweepAxis& axis : s.sweep) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& p : points)
      for (const YAML::Node& v : axis.values) {
        auto q = p;
        q.emplace_back(axis.key, flow_text(v));
        next.push_back(std::move(q));
      }
    points.swap(next);
  }
  if (s.sweep.empty()) points.clear();
  return points;
}

std::string sweep_point_name(const std::vector<std::pair<std::string, std::string>>& p) {
  std::string name;
  for (const auto& [k, v] : p) {
    if (!name.empty()) name += ',';
    name += k + "=";
    for (char c : v) name += (c == '/' || c == ' ' || c == '\\') ? '_' : c;
  }
  return name;
}

}  // namespace kvsim
