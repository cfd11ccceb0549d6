#include "sim/config/scenario_sections.h"

#include <fmt/format.h>

#include <cctype>
#include <vector>

#include "sim/config/mamba_cache.h"

namespace kvsim {

namespace {

/// engine.profile: one of the profiles of core/engine_api.h (did-you-mean and the valid names on
/// a typo).
Profile get_profile(const YAML::Node& engine, const YamlContext& ctx) {
  std::vector<std::string_view> names;
  for (const ProfileInfo& p : profiles()) names.emplace_back(p.name);
  const std::size_t i =
      get_choice_index(engine, "profile", ctx, profile_name(kDefaultProfile), names);
  return profiles()[i].profile;
}

}  // namespace

ServeDefaults serve_defaults(Profile profile, const GpuPreset& gpu) {
  if (profile != Profile::kVllm020) return {};
  std::string name = gpu.name;
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool large =
      gpu.memory_bytes >= (std::int64_t{70} << 30) && name.find("a100") == std::string::npos;
  return {0.92, large ? 1024 : 256, large ? 8192 : 2048};
}

const char* mode_name(EngineConfig::Mode m) {
  return m == EngineConfig::Mode::kTimed ? "timed" : "cache_only";
}

EngineConfig parse_engine(const YAML::Node& engine, const YamlContext& ctx) {
  check_keys(engine, std::span<const std::string_view>(kEngineKeys), ctx);
  EngineConfig c;
  c.profile = get_profile(engine, ctx);
  c.mode = get_choice(engine, "mode", ctx, "timed", {"timed", "cache_only"}) == "timed"
               ? EngineConfig::Mode::kTimed
               : EngineConfig::Mode::kCacheOnly;
  c.contiguous_fit = static_cast<FitPolicy>(
      get_choice_index(engine, "contiguous_fit", ctx, "first_fit", kFitPolicyNames));
  c.fast_forward = get_bool(engine, "fast_forward", ctx, true);
  return c;
}

YAML::Node engine_yaml(const EngineConfig& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["profile"] = profile_name(c.profile);
  n["mode"] = mode_name(c.mode);
  n["contiguous_fit"] = std::string(fit_policy_name(c.contiguous_fit));
  return n;
}

namespace {

constexpr std::string_view kEvictionPolicies[] = {"lru", "arc"};

/// The kv_offloading keys of `cache:` (null when the tier is off).
std::optional<KvOffloadingConfig> parse_kv_offloading(const YAML::Node& cache,
                                                      const YamlContext& ctx,
                                                      std::int64_t block_size) {
  const bool gib = has_key(cache, "kv_offloading_size");
  const bool tokens = has_key(cache, "kv_offloading_capacity_tokens");
  if (!gib && !tokens) {
    for (const char* key : {"kv_offloading_backend", "kv_offloading_block_size",
                            "kv_offloading_eviction_policy", "kv_offloading_store_threshold"})
      if (has_key(cache, key))
        throw yaml_error(cache[key], ctx.child(key),
                         fmt::format("cache.{}: the CPU tier is off -- give its size with "
                                     "cache.kv_offloading_size (GiB, as vLLM's "
                                     "--kv-offloading-size) or cache.kv_offloading_capacity_tokens",
                                     key));
    return std::nullopt;
  }
  if (gib && tokens)
    throw yaml_error(cache["kv_offloading_capacity_tokens"],
                     ctx.child("kv_offloading_capacity_tokens"),
                     "cache.kv_offloading_capacity_tokens: give either kv_offloading_size (GiB) or "
                     "kv_offloading_capacity_tokens, not both");
  KvOffloadingConfig o;
  if (gib) {
    o.size_gib = get_double(cache, "kv_offloading_size", ctx, 0.0, 0.0, 1 << 24);
    if (!(*o.size_gib > 0))
      throw yaml_error(cache["kv_offloading_size"], ctx.child("kv_offloading_size"),
                       "cache.kv_offloading_size: must be > 0 GiB (vLLM v0.20.1 refuses 0: "
                       "cpu_bytes_to_use must be specified in kv_connector_extra_config)");
  } else {
    o.capacity_tokens =
        get_int(cache, "kv_offloading_capacity_tokens", ctx, 0, 1, std::int64_t{1} << 40);
  }
  const std::string backend =
      get_choice(cache, "kv_offloading_backend", ctx, "native", {"native", "lmcache"});
  if (backend != "native")
    throw yaml_error(cache["kv_offloading_backend"], ctx.child("kv_offloading_backend"),
                     "cache.kv_offloading_backend: lmcache (LMCacheConnectorV1) is not modelled; "
                     "native is vLLM's own OffloadingConnector");
  o.block_size = get_int(cache, "kv_offloading_block_size", ctx, block_size, 1, 1 << 24);
  if (o.block_size % block_size != 0)
    throw yaml_error(cache["kv_offloading_block_size"], ctx.child("kv_offloading_block_size"),
                     fmt::format("cache.kv_offloading_block_size: {} is not a multiple of "
                                 "cache.block_size {} (vLLM: the offloaded block size must be a "
                                 "multiple of the GPU block size)",
                                 o.block_size, block_size));
  o.eviction_policy = static_cast<EvictionPolicy>(
      get_choice_index(cache, "kv_offloading_eviction_policy", ctx, "lru", kEvictionPolicies));
  o.store_threshold = get_int(cache, "kv_offloading_store_threshold", ctx, 0, 0, 1 << 30);
  return o;
}

}  // namespace

CacheConfig parse_cache(const YAML::Node& cache, const YamlContext& ctx, bool timed,
                        const ServeDefaults& defaults) {
  check_keys(cache, std::span<const std::string_view>(kCacheKeys), ctx);
  CacheConfig c;
  c.sizing = load_cache_sizing(cache, ctx, defaults.gpu_memory_utilization);
  c.enable_prefix_caching = get_bool(cache, "enable_prefix_caching", ctx, true);
  c.mamba_cache_mode = *parse_mamba_cache_mode(
      get_choice(cache, "mamba_cache_mode", ctx, "none", {"none", "align", "all"}));
  c.num_preallocate_tokens =
      get_int(cache, "num_preallocate_tokens", ctx, timed ? 64 : 0, 0, 1 << 24);
  c.capacity_tokens = get_optional_int(cache, "capacity_tokens", ctx, 1);
  c.swap_space = get_double(cache, "swap_space", ctx, 4.0, 0.0, 1 << 20);
  if (has_key(cache, "disable_hybrid_kv_cache_manager"))
    c.disable_hybrid_kv_cache_manager =
        get_bool(cache, "disable_hybrid_kv_cache_manager", ctx, false);
  c.kv_offloading = parse_kv_offloading(cache, ctx, c.sizing.block_size);
  if (c.capacity_tokens) {
    const YamlContext at = ctx.child("capacity_tokens");
    if (c.sizing.num_gpu_blocks_override)
      throw yaml_error(cache["capacity_tokens"], at,
                       "cache.capacity_tokens: give either capacity_tokens or "
                       "num_gpu_blocks_override, not both");
    if (*c.capacity_tokens < c.sizing.block_size)
      throw yaml_error(cache["capacity_tokens"], at,
                       fmt::format("cache.capacity_tokens: {} is less than one block ({} tokens)",
                                   *c.capacity_tokens, c.sizing.block_size));
  }
  return c;
}

YAML::Node cache_yaml(const CacheConfig& c, bool mamba) {
  YAML::Node n = cache_sizing_yaml(c.sizing);
  n["enable_prefix_caching"] = c.enable_prefix_caching;
  if (mamba || c.mamba_cache_mode != MambaCacheMode::kNone)
    n["mamba_cache_mode"] = mamba_cache_mode_name(c.mamba_cache_mode);
  n["num_preallocate_tokens"] = c.num_preallocate_tokens;
  n["capacity_tokens"] = optional_node(c.capacity_tokens);
  n["swap_space"] = number_node(c.swap_space);
  if (c.disable_hybrid_kv_cache_manager)
    n["disable_hybrid_kv_cache_manager"] = *c.disable_hybrid_kv_cache_manager;
  if (const auto& o = c.kv_offloading) {
    if (o->size_gib) n["kv_offloading_size"] = number_node(*o->size_gib);
    if (o->capacity_tokens) n["kv_offloading_capacity_tokens"] = *o->capacity_tokens;
    n["kv_offloading_backend"] = "native";
    n["kv_offloading_block_size"] = o->block_size;
    n["kv_offloading_eviction_policy"] =
        std::string(kEvictionPolicies[static_cast<std::size_t>(o->eviction_policy)]);
    n["kv_offloading_store_threshold"] = o->store_threshold;
  }
  return n;
}

SchedulerConfig parse_scheduler(const YAML::Node& sched, const YamlContext& ctx,
                                const ModelConfig* model, Profile profile,
                                const ServeDefaults& defaults) {
  check_keys(sched, std::span<const std::string_view>(kSchedulerKeys), ctx);
  SchedulerConfig c = with_release_defaults(SchedulerConfig{}, profile);
  if (release_features(profile).v020_scheduler_settings) {
    c.async_scheduling = get_bool(sched, "async_scheduling", ctx, c.async_scheduling);
    c.scheduler_reserve_full_isl =
        get_bool(sched, "scheduler_reserve_full_isl", ctx, c.scheduler_reserve_full_isl);
  } else {
    for (const char* key : {"async_scheduling", "scheduler_reserve_full_isl"})
      if (has_key(sched, key))
        throw yaml_error(sched[key], ctx.child(key),
                         fmt::format("scheduler.{}: {} (vLLM's release) has no such setting", key,
                                     profile_name(profile)));
  }
  c.max_num_seqs = get_int(sched, "max_num_seqs", ctx, defaults.max_num_seqs, 1, 1 << 20);
  c.max_num_batched_tokens = get_int(sched, "max_num_batched_tokens", ctx,
                                     defaults.max_num_batched_tokens, 1, std::int64_t{1} << 30);
  const std::int64_t model_len = model ? model->max_position_embeddings : 0;
  c.max_model_len = get_int(sched, "max_model_len", ctx, model_len > 0 ? model_len : 8192, 1,
                            std::int64_t{1} << 30);
  if (model_len > 0 && c.max_model_len > model_len)
    throw yaml_error(sched["max_model_len"], ctx.child("max_model_len"),
                     fmt::format("scheduler.max_model_len: {} is greater than the model's "
                                 "max_position_embeddings ({}), as vLLM refuses",
                                 c.max_model_len, model_len));
  c.long_prefill_token_threshold =
      get_int(sched, "long_prefill_token_threshold", ctx, 0, 0, std::int64_t{1} << 30);
  return c;
}

YAML::Node scheduler_yaml(const SchedulerConfig& c, Profile profile) {
  YAML::Node n(YAML::NodeType::Map);
  n["max_num_seqs"] = c.max_num_seqs;
  n["max_num_batched_tokens"] = c.max_num_batched_tokens;
  n["max_model_len"] = c.max_model_len;
  n["long_prefill_token_threshold"] = c.long_prefill_token_threshold;
  if (release_features(profile).v020_scheduler_settings) {
    n["async_scheduling"] = c.async_scheduling;
    n["scheduler_reserve_full_isl"] = c.scheduler_reserve_full_isl;
  }
  return n;
}

V0SchedulerConfig parse_scheduler_v0(const YAML::Node& sched, const YamlContext& ctx) {
  V0SchedulerConfig c;
  if (has_key(sched, "enable_chunked_prefill"))
    c.enable_chunked_prefill = get_bool(sched, "enable_chunked_prefill", ctx, std::nullopt);
  if (has_key(sched, "preemption_mode"))
    c.preemption_mode =
        get_choice(sched, "preemption_mode", ctx, std::nullopt, {"swap", "recompute"}) == "swap"
            ? v0::PreemptionMode::kSwap
            : v0::PreemptionMode::kRecompute;
  c.scheduling_policy =
      get_choice(sched, "scheduling_policy", ctx, "fcfs", {"fcfs", "priority"}) == "fcfs"
          ? v0::SchedulingPolicy::kFcfs
          : v0::SchedulingPolicy::kPriority;
  c.on_swap_space_exhausted =
      get_choice(sched, "on_swap_space_exhausted", ctx, "abort", {"abort", "recompute"}) == "abort"
          ? v0::SwapSpaceExhausted::kAbort
          : v0::SwapSpaceExhausted::kRecompute;
  return c;
}

void add_scheduler_v0_yaml(const V0SchedulerConfig& c, YAML::Node& n) {
  n["enable_chunked_prefill"] = optional_node(c.enable_chunked_prefill);
  n["preemption_mode"] =
      c.preemption_mode
          ? YAML::Node(*c.preemption_mode == v0::PreemptionMode::kSwap ? "swap" : "recompute")
          : null_node();
  n["scheduling_policy"] = c.scheduling_policy == v0::SchedulingPolicy::kFcfs ? "fcfs" : "priority";
  n["on_swap_space_exhausted"] =
      c.on_swap_space_exhausted == v0::SwapSpaceExhausted::kAbort ? "abort" : "recompute";
}

ValidateConfig parse_validate(const YAML::Node& val, const YamlContext& ctx) {
  check_keys(val, std::span<const std::string_view>(kValidateKeys), ctx);
  ValidateConfig c;
  c.backend = get_choice(val, "backend", ctx, "cpu", {"cpu", "cuda"});
  c.sample_every_steps = get_int(val, "sample_every_steps", ctx, 0, 0);
  c.sample_prob = get_double(val, "sample_prob", ctx, 0.0, 0.0, 1.0);
  c.dtype = get_choice(val, "dtype", ctx, "auto", {"auto", "float32", "float16", "bfloat16"});
  return c;
}

YAML::Node validate_yaml(const ValidateConfig& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["backend"] = c.backend;
  n["sample_every_steps"] = c.sample_every_steps;
  n["sample_prob"] = number_node(c.sample_prob);
  n["dtype"] = c.dtype;
  return n;
}

OutputsConfig parse_outputs(const YAML::Node& out, const YamlContext& ctx) {
  check_keys(out, std::span<const std::string_view>(kOutputsKeys), ctx);
  OutputsConfig c;
  c.trace_json = get_bool(out, "trace_json", ctx, false);
  c.metrics_prom = get_bool(out, "metrics_prom", ctx, false);
  c.steps_every = get_int(out, "steps_every", ctx, 10, 1, std::int64_t{1} << 40);
  return c;
}

YAML::Node outputs_yaml(const OutputsConfig& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["trace_json"] = c.trace_json;
  n["metrics_prom"] = c.metrics_prom;
  n["steps_every"] = c.steps_every;
  return n;
}

}  // namespace kvsim
