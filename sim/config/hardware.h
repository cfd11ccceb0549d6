#pragma once
// GPU presets and the KV cache memory budget, computed as vLLM does:
//   available KV bytes per GPU = total_memory * gpu_memory_utilization
//                                - weight bytes per GPU (num_parameters * weight bytes / tp)
//                                - activation_reserve_bytes
// vLLM measures the last term by profiling a dummy forward pass (peak activations, CUDA graphs,
// non-torch allocations); kvsim takes it as `cache.activation_reserve_bytes`, default
// kDefaultActivationReserveBytes (2 GiB), which is the size vLLM's profile reports for 1-10B
// models at max_num_batched_tokens 8192. `cache.kv_cache_memory_bytes` replaces the whole formula
// and `cache.num_gpu_blocks_override` replaces the block count. plan_kv_cache sizes one pool of
// identical layers (the scenario's block count); plan_kv_pool sizes it from the model's per-layer
// specs by a release's rules (core/common/kv_pool_sizing.h), with vLLM's start-up check that one
// max_model_len request fits.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/kv_pool_sizing.h"
#include "core/common/kv_sizing.h"
#include "sim/common/yaml_util.h"
#include "sim/config/model_config.h"

namespace kvsim {

/// One GPU model. Memory is what nvidia-smi reports as total (MiB * 2^20).
struct GpuPreset {
  std::string name;
  std::int64_t memory_bytes = 0;
  double peak_flops_per_s = 0;  // dense bf16/fp16 tensor-core peak, no sparsity
  double hbm_bytes_per_s = 0;   // peak memory bandwidth
  /// Host link (PCIe) bandwidth in one direction: what a swap between GPU and CPU memory moves
  /// per second (vLLM V0's swap_blocks).
  double host_link_bytes_per_s = 0;
};

/// All presets, in a fixed order: H100-80GB, H100-PCIe, H200-141GB, A100-80GB, A100-40GB, L40S,
/// L4, A10G.
[[nodiscard]] std::span<const GpuPreset> gpu_presets();
/// The preset named `name`, or nullptr. Case, '-', '_' and spaces do not matter, and the common
/// spellings name their part: H100 / H100-SXM = H100-80GB (the SXM5 part), H200 = H200-141GB,
/// A100 = A100-40GB (the clouds' and SkyPilot's A100; A100-80GB names the larger one).
[[nodiscard]] const GpuPreset* find_gpu_preset(std::string_view name);
/// The preset named `name`; throws ConfigError "unknown GPU 'H10' (did you mean 'H100-80GB'?)".
[[nodiscard]] GpuPreset gpu_preset(std::string_view name);

/// A GPU named with a count, as people write it: "H100x8", "8xH100", "H100:8" (SkyPilot), or
/// just "H100" (no count). The count is the number of GPUs one engine spans (its
/// tensor_parallel_size).
struct GpuWithCount {
  GpuPreset gpu;
  std::optional<std::int64_t> count;
};
/// Parses "NAME", "NAMExN", "NxNAME" or "NAME:N" (N in [1, 1024]); throws ConfigError naming the
/// problem (an unknown GPU with did-you-mean, or a bad count).
[[nodiscard]] GpuWithCount parse_gpu_with_count(std::string_view text);

/// The scenario's `hardware:` section.
///   gpu: NAME or NAMExN (default H100-80GB; xN sets tensor_parallel_size, which may then be given
///   only with the same value), tensor_parallel_size: 1,
///   gpu_memory_bytes / peak_flops_per_s / hbm_bytes_per_s / host_link_bytes_per_s: override
///   the preset's figures; host_link_latency_us: 0.
struct HardwareConfig {
  GpuPreset gpu;
  std::int64_t tensor_parallel_size = 1;
  /// The fixed cost of every transfer job between GPU and CPU memory, in microseconds (the CPU
  /// tier's transfer clock: sim/engine/offload_tier.h). Written back only when not 0.
  double host_link_latency_us = 0;
};
inline constexpr std::string_view kDefaultGpu = "H100-80GB";
inline constexpr std::string_view kHardwareKeys[] = {"gpu",
                                                     "tensor_parallel_size",
                                                     "gpu_memory_bytes",
                                                     "peak_flops_per_s",
                                                     "hbm_bytes_per_s",
                                                     "host_link_bytes_per_s",
                                                     "host_link_latency_us"};
/// Reads and validates (all keys) the `hardware:` section; an absent section gives the defaults.
[[nodiscard]] HardwareConfig load_hardware(const YAML::Node& hardware, const YamlContext& ctx);
/// The resolved `hardware:` section: the preset's name and every figure used (load_hardware of
/// it gives `hw` back).
[[nodiscard]] YAML::Node hardware_yaml(const HardwareConfig& hw);

inline constexpr std::int64_t kDefaultActivationReserveBytes = std::int64_t{2} << 30;

/// The sizing keys of the scenario's `cache:` section (the section has other keys, read elsewhere).
struct CacheSizingConfig {
  std::int64_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  std::optional<std::int64_t> kv_cache_memory_bytes;    // per GPU; replaces the budget formula
  std::optional<std::int64_t> num_gpu_blocks_override;  // replaces the block count
  std::int64_t activation_reserve_bytes = kDefaultActivationReserveBytes;
  std::string cache_dtype = "auto";  // auto = the model's dtype
};
/// The keys load_cache_sizing reads, for the cache section's check_keys.
inline constexpr std::string_view kCacheSizingKeys[] = {"block_size",
                                                        "gpu_memory_utilization",
                                                        "kv_cache_memory_bytes",
                                                        "num_gpu_blocks_override",
                                                        "activation_reserve_bytes",
                                                        "cache_dtype"};
/// Reads the sizing keys of `cache:` (does not reject other keys); gpu_memory_utilization
/// defaults to `default_gpu_memory_utilization` (the release's, scenario_sections.h
/// serve_defaults).
[[nodiscard]] CacheSizingConfig load_cache_sizing(const YAML::Node& cache, const YamlContext& ctx,
                                                  double default_gpu_memory_utilization = 0.9);
/// The sizing keys of a resolved `cache:` section, in kCacheSizingKeys order (null for an absent
/// override); load_cache_sizing of it gives `c` back.
[[nodiscard]] YAML::Node cache_sizing_yaml(const CacheSizingConfig& c);

/// Where the KV bytes of one GPU come from.
struct MemoryBudget {
  std::int64_t total_bytes = 0;   // the GPU's memory
  std::int64_t usable_bytes = 0;  // total * gpu_memory_utilization
  std::int64_t weight_bytes = 0;  // this GPU's share of the weights
  std::int64_t activation_reserve_bytes = 0;
  std::int64_t available_kv_bytes = 0;  // usable - weights - reserve (or the override)
};

/// The KV cache of one GPU: shape, budget and resulting pool.
struct KVCachePlan {
  KVCacheSpec spec;  // the uniform shape (every layer full attention)
  MemoryBudget budget;
  KVCacheSizing sizing;  // num_gpu_blocks: the pool's blocks
  // Set by plan_kv_pool:
  std::vector<NamedLayerSpec> layers;  // one worker's per-layer specs, as sized
  std::optional<KVPoolLayout> layout;  // groups, page size, per-request caps, concurrency
  std::vector<std::string> log;        // vLLM's log lines of the sizing
};

/// The memory budget of one GPU (the formula at the top). Throws ConfigError "model does not
/// fit: ..." when the weights and reserve exceed the usable memory (unless an override sizes the
/// pool without it).
[[nodiscard]] MemoryBudget memory_budget(const ModelConfig& model, const HardwareConfig& hardware,
                                         const CacheSizingConfig& cache,
                                         const std::string& file = "");

/// The request shape a pool is checked against (vLLM's max_model_len and scheduler limits).
struct PoolRequest {
  std::int64_t max_model_len = 8192;    // with auto_fit: the upper bound (the derived length)
  bool auto_fit_max_model_len = false;  // --max-model-len auto (vllm-0.20 rules only)
  std::int64_t max_num_batched_tokens = 8192;
  std::optional<bool> disable_hybrid_kv_cache_manager;  // unset: vLLM's default for the model
  std::optional<bool> enable_prefix_caching;  // unset: on, off for models with mamba layers
  MambaCacheMode mamba_cache_mode = MambaCacheMode::kNone;  // as asked (sim/config/mamba_cache.h)
  /// A pool given by num_gpu_blocks_override is taken as given: where one max_model_len request
  /// does not fit it, vLLM's start-up refusal becomes a warning of the plan's log (kvsim runs;
  /// such a request can never be scheduled). Scenarios set it; `kvsim kv-size` does not.
  bool override_check_warns = false;
};

/// The sizing question plan_kv_pool asks: `model`'s layers on one worker, the budget's memory
/// (or num_gpu_blocks_override) and the request shape. Throws ConfigError on a model the rules
/// cannot describe.
[[nodiscard]] KVSizingInput kv_sizing_input(const ModelConfig& model, const HardwareConfig& hw,
                                            const CacheSizingConfig& cache,
                                            const PoolRequest& request, KVSizingRules rules,
                                            std::int64_t available_kv_bytes);

/// Sizes the pool of `model` by `rules`, as the engine does at start-up. Throws ConfigError with
/// vLLM's own message (prefixed with `file`) where vLLM refuses to start.
[[nodiscard]] KVCachePlan plan_kv_pool(const ModelConfig& model, const HardwareConfig& hardware,
                                       const CacheSizingConfig& cache, const PoolRequest& request,
                                       KVSizingRules rules, const std::string& file = "");

/// Sizes the KV cache. Throws ConfigError "model does not fit: needs X GiB more ..." when the
/// weights and reserve exceed the usable memory, and when no block fits. `file` prefixes messages.
[[nodiscard]] KVCachePlan plan_kv_cache(const ModelConfig& model, const HardwareConfig& hardware,
                                        const CacheSizingConfig& cache,
                                        const std::string& file = "");

}  // namespace kvsim
