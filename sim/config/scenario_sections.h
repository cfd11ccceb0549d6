#pragma once
// The small sections of a scenario (engine, cache, scheduler, validate, outputs) as typed
// structs, each with its key table, its parser and its writer side by side: a new key is its
// struct member, its entry in the key table, one line in parse_X and one in X_yaml. The writers
// give every key with the value used (null for an absent optional), so that parsing what they
// write gives the same struct back. The larger sections have the same pair where their structs
// live: hardware (sim/config/hardware.h), model (sim/config/model_config.h), workload
// (sim/workload/workload_config.h), latency (sim/config/latency_config.h).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/common/engine_config.h"
#include "core/engine_api.h"
#include "core/engine_factory.h"
#include "core/offload/cpu_offload_manager.h"
#include "sim/common/yaml_util.h"
#include "sim/config/hardware.h"
#include "sim/config/model_config.h"

namespace kvsim {

/// `engine:` -- which vLLM behaviour to reproduce and how time is simulated.
struct EngineConfig {
  enum class Mode : std::uint8_t { kTimed, kCacheOnly };
  Profile profile = kDefaultProfile;
  Mode mode = Mode::kTimed;
  FitPolicy contiguous_fit = FitPolicy::kFirstFit;  // read by the contiguous profiles only
  /// Advance runs of pure decode steps at once (Simulator::set_fast_forward). A speed setting:
  /// every output is byte-identical either way, so config.resolved.yaml does not record it.
  bool fast_forward = true;
};
const char* mode_name(EngineConfig::Mode m);
/// What `vllm serve` picks for the keys a scenario leaves out, by release and GPU. vLLM v0.20.1:
/// gpu_memory_utilization 0.92 (config/cache.py:66); for the OpenAI server max_num_batched_tokens
/// 8192 and max_num_seqs 1024 on a GPU of >= 70 GiB that is not an A100, else 2048 and 256
/// (engine/arg_utils.py:2205-2227). Earlier releases: kvsim's long-standing defaults (0.9, 256,
/// 8192), which its scenarios and cases were written against.
struct ServeDefaults {
  double gpu_memory_utilization = 0.9;
  std::int64_t max_num_seqs = 256;
  std::int64_t max_num_batched_tokens = 8192;
};
[[nodiscard]] ServeDefaults serve_defaults(Profile profile, const GpuPreset& gpu);
inline constexpr std::string_view kEngineKeys[] = {"profile", "mode", "contiguous_fit",
                                                   "fast_forward"};
/// Reads `engine:` (absent: the defaults).
[[nodiscard]] EngineConfig parse_engine(const YAML::Node& engine, const YamlContext& ctx);
[[nodiscard]] YAML::Node engine_yaml(const EngineConfig& c);

/// The CPU tier of the KV cache (cache.kv_offloading_*): vLLM v0.20.1's `--kv-offloading-size N`
/// with the native backend, the OffloadingConnector (shared/spec/vllm-0.20-offload-semantics.md
/// §0). The tier's size is given in GiB as vLLM takes it (its blocks then depend on the model's
/// page size) or, for hit-rate studies without a model, in tokens.
struct KvOffloadingConfig {
  std::optional<double> size_gib;               // kv_offloading_size: CacheConfig.kv_offloading_size
  std::optional<std::int64_t> capacity_tokens;  // kv_offloading_capacity_tokens (kvsim's)
  std::int64_t block_size = 16;  // kv_offloading_block_size: extra_config block_size [block_size]
  EvictionPolicy eviction_policy = EvictionPolicy::kLru;  // extra_config eviction_policy
  std::int64_t store_threshold = 0;  // extra_config store_threshold (>= 2: the reuse filter)
};

/// `cache:` -- the KV cache (vLLM's CacheConfig plus the sizing keys of sim/config/hardware.h).
struct CacheConfig {
  CacheSizingConfig sizing;  // block_size, gpu_memory_utilization, ...
  /// Absent: vLLM v0.20.1's default, on except for a model with mamba layers (the scenario
  /// resolves it with the model: sim/config/mamba_cache.h).
  bool enable_prefix_caching = true;
  /// vLLM's --mamba-cache-mode (none | align | all, default none); resolved as vLLM v0.20.1
  /// chooses it for a model with mamba layers (all or align when prefix caching is on).
  MambaCacheMode mamba_cache_mode = MambaCacheMode::kNone;
  std::int64_t num_preallocate_tokens = 64;     // vLLM 0.7.2; default 0 in cache_only mode
  std::optional<std::int64_t> capacity_tokens;  // num_gpu_blocks = capacity_tokens / block_size
  /// vLLM V0's CPU swap space, GiB per GPU (vLLM's default 4): num_cpu_blocks = swap bytes /
  /// the bytes of one block over all layers. Other profiles refuse another value.
  double swap_space = 4;
  /// vLLM's --disable-hybrid-kv-cache-manager; null: vLLM's choice (off, unless a KV connector is
  /// configured: then on -- the CPU tier turns it on).
  std::optional<bool> disable_hybrid_kv_cache_manager;
  std::optional<KvOffloadingConfig> kv_offloading;  // the CPU tier; null: none
};
inline constexpr std::string_view kCacheKeys[] = {"block_size",
                                                  "gpu_memory_utilization",
                                                  "kv_cache_memory_bytes",
                                                  "num_gpu_blocks_override",
                                                  "activation_reserve_bytes",
                                                  "cache_dtype",
                                                  "enable_prefix_caching",
                                                  "mamba_cache_mode",
                                                  "num_preallocate_tokens",
                                                  "capacity_tokens",
                                                  "swap_space",
                                                  "disable_hybrid_kv_cache_manager",
                                                  "kv_offloading_size",
                                                  "kv_offloading_capacity_tokens",
                                                  "kv_offloading_backend",
                                                  "kv_offloading_block_size",
                                                  "kv_offloading_eviction_policy",
                                                  "kv_offloading_store_threshold"};
/// Reads `cache:`; `timed` picks num_preallocate_tokens' default (64 timed, 0 cache_only),
/// `defaults` gpu_memory_utilization's. The kv_offloading keys are checked against each other
/// here and against the engine in parse_scenario (check_kv_offloading).
[[nodiscard]] CacheConfig parse_cache(const YAML::Node& cache, const YamlContext& ctx, bool timed,
                                      const ServeDefaults& defaults);
/// `mamba`: the model has mamba layers; mamba_cache_mode is written for such a model or when not
/// 'none' (vLLM's align checks apply to any model), so other resolved files keep their keys.
/// disable_hybrid_kv_cache_manager and the kv_offloading keys likewise only when set.
[[nodiscard]] YAML::Node cache_yaml(const CacheConfig& c, bool mamba);

inline constexpr std::string_view kSchedulerKeys[] = {
    "max_num_seqs",           "max_num_batched_tokens",
    "max_model_len",          "long_prefill_token_threshold",
    "async_scheduling",       "scheduler_reserve_full_isl",
    "enable_chunked_prefill", "preemption_mode",
    "scheduling_policy",      "on_swap_space_exhausted"};
/// Reads `scheduler:`. max_model_len defaults to the model's max_position_embeddings (8192 without
/// a model or without that field) and may not exceed it. async_scheduling and
/// scheduler_reserve_full_isl exist only for a release that has them (vllm-0.20; both default to
/// true as there); another profile refuses them at their line and column. max_num_seqs and
/// max_num_batched_tokens default to `defaults`.
[[nodiscard]] SchedulerConfig parse_scheduler(const YAML::Node& scheduler, const YamlContext& ctx,
                                              const ModelConfig* model, Profile profile,
                                              const ServeDefaults& defaults);
/// Every key (the release's own keys only for a profile that has them).
[[nodiscard]] YAML::Node scheduler_yaml(const SchedulerConfig& c, Profile profile);

/// The vLLM V0 keys of `scheduler:` (read by vllm-0.7.2-v0; other profiles refuse values other
/// than their own behaviour, core/engine_factory.h check_engine_params).
struct V0SchedulerConfig {
  std::optional<bool> enable_chunked_prefill;         // null: vLLM's default (v0::V0Options)
  std::optional<v0::PreemptionMode> preemption_mode;  // null: vLLM's choice; swap | recompute
  v0::SchedulingPolicy scheduling_policy = v0::SchedulingPolicy::kFcfs;  // fcfs | priority
  /// abort (vLLM: the run ends with an error) | recompute (not vLLM: recompute the victim)
  v0::SwapSpaceExhausted on_swap_space_exhausted = v0::SwapSpaceExhausted::kAbort;
};
/// Reads the V0 keys of `scheduler:` (parse_scheduler checks the section's keys).
[[nodiscard]] V0SchedulerConfig parse_scheduler_v0(const YAML::Node& scheduler,
                                                   const YamlContext& ctx);
/// Adds the V0 keys to a resolved `scheduler:` section.
void add_scheduler_v0_yaml(const V0SchedulerConfig& c, YAML::Node& scheduler);

/// `validate:` -- parsed for the kernel validation harness (kvsim validate); unused by `run`.
struct ValidateConfig {
  std::string backend = "cpu";          // cpu | cuda
  std::int64_t sample_every_steps = 0;  // 0: off
  double sample_prob = 0.0;
  std::string dtype = "auto";  // auto | float32 | float16 | bfloat16
};
inline constexpr std::string_view kValidateKeys[] = {"backend", "sample_every_steps", "sample_prob",
                                                     "dtype"};
[[nodiscard]] ValidateConfig parse_validate(const YAML::Node& validate, const YamlContext& ctx);
[[nodiscard]] YAML::Node validate_yaml(const ValidateConfig& c);

/// `outputs:` -- optional files and the steps.csv sampling period.
struct OutputsConfig {
  bool trace_json = false;
  bool metrics_prom = false;
  std::int64_t steps_every = 10;  // steps.csv row (and KV breakdown) every N steps
};
inline constexpr std::string_view kOutputsKeys[] = {"trace_json", "metrics_prom", "steps_every"};
[[nodiscard]] OutputsConfig parse_outputs(const YAML::Node& outputs, const YamlContext& ctx);
[[nodiscard]] YAML::Node outputs_yaml(const OutputsConfig& c);

}  // namespace kvsim
