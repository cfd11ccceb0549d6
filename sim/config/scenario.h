#pragma once
// Scenario: the top-level YAML a user runs (`kvsim run SCENARIO.yaml`), parsed once, when it
// loads, into typed structs with every default filled in and every value validated: what runs is
// the Scenario, never YAML. Sections follow vLLM's config classes and keys its engine arguments.
// Parsing validates every key (an unknown key is a did-you-mean ConfigError at file:line:col; a
// value a `--set section.key=value` gave is reported at that argument), reads every file a section
// names (model config, empirical-length CSVs, latency fit file; a trace is checked and read when
// the run starts) and sizes the KV cache, so a Scenario that loads is ready to run.
// config.resolved.yaml (resolved_yaml) is written back from the typed structs: each section's
// writer sits next to its parser, and parsing what it writes gives the same Scenario.
//
// Schema (defaults in brackets; typed struct, parser and writer in parentheses):
//   name [file stem]  seed [0]
//   engine:    profile [vllm-0.20] | vllm-0.8.5 | vllm-0.7.2 | vllm-0.7.2-v0 | orca-max |
//              orca-pow2 | orca-oracle (core/engine_api.h's table), mode [timed] | cache_only, contiguous_fit [first_fit]
//              | best_fit | buddy (where a contiguous profile places its reservation: a hole,
//              or a power-of-two buddy block; read by those profiles only) (scenario_sections.h)
//   model:     config: HF config.json path, and/or inline HF fields; required in timed mode
//              (ModelConfig, sim/config/model_config.h). Its sliding_window reaches the engine
//              (vllm-0.8.5 manages it; vllm-0.7.2 ignores it); vllm-0.20 gets one KV cache
//              group per attention type of the pool sizing's layout (gpt-oss: window + full).
//   hardware:  gpu [H100-80GB; H100, H200, A100 and a count as H100x8 are understood],
//              tensor_parallel_size [1, or gpu's count], gpu_memory_bytes, peak_flops_per_s,
//              hbm_bytes_per_s, host_link_bytes_per_s (PCIe, one direction: vllm-0.7.2-v0's
//              swaps, the CPU tier's transfers), host_link_latency_us [0: the fixed cost of a
//              CPU tier transfer job] (HardwareConfig, sim/config/hardware.h)
//   cache:     block_size [16], gpu_memory_utilization [vllm-0.20 0.92, else 0.9: the
//              release's, serve_defaults of scenario_sections.h], kv_cache_memory_bytes,
//              num_gpu_blocks_override, capacity_tokens (num_gpu_blocks = capacity / block_size;
//              not with the override), activation_reserve_bytes [2 GiB], cache_dtype [auto],
//              enable_prefix_caching [true; false for a model with mamba layers],
//              mamba_cache_mode [none; vllm-0.20 picks all or align with prefix caching on:
//              sim/config/mamba_cache.h], num_preallocate_tokens [64; 0 in cache_only],
//              swap_space [4: GiB per GPU, vllm-0.7.2-v0's CPU pool; other profiles refuse
//              another value], disable_hybrid_kv_cache_manager [null: vLLM's choice; true with
//              the CPU tier], the CPU tier (vllm-0.20; timed runs with async_scheduling false):
//              kv_offloading_size (GiB, vLLM's --kv-offloading-size) or
//              kv_offloading_capacity_tokens, kv_offloading_backend [native],
//              kv_offloading_block_size [block_size; a multiple of it],
//              kv_offloading_eviction_policy [lru] | arc, kv_offloading_store_threshold [0]
//              (CacheConfig, scenario_sections.h; sizing keys in sim/config/hardware.h)
//   scheduler: max_num_seqs [256; vllm-0.20 on a >= 70 GiB GPU but an A100: 1024],
//              max_num_batched_tokens [8192; vllm-0.20 on the other GPUs: 2048],
//              max_model_len [model's max_position_embeddings, else 8192; never above it],
//              long_prefill_token_threshold [0: off; vllm-0.8.5, vllm-0.20],
//              async_scheduling [true; vllm-0.20 only: EngineCore's batch queue of two steps,
//              false = the synchronous loop], scheduler_reserve_full_isl [true; vllm-0.20 only:
//              admit a request only when its whole sequence fits]; vllm-0.7.2-v0 only
//              (other profiles refuse values unlike their own behaviour):
//              enable_chunked_prefill [null: vLLM V0's default, on for max_model_len > 32768
//              without a sliding window], preemption_mode [null: vLLM's choice, recompute for
//              one-sequence groups and swap for others] | swap | recompute,
//              scheduling_policy [fcfs] | priority (every request has priority 0),
//              on_swap_space_exhausted [abort: as vLLM, the run ends with an error naming the
//              step, the request and the CPU pool; exit 1] | recompute (not vLLM: a
//              one-sequence victim is recomputed instead)
//              (SchedulerConfig of core/common/engine_config.h; the V0 keys: V0SchedulerConfig,
//              scenario_sections.h)
//   workload:  synthetic generator or trace; required; n [1] and parallel_sampling [fanout] |
//              fork (vllm-0.7.2-v0 only; timed mode) (WorkloadConfig,
//              sim/workload/workload_config.h)
//   latency:   [roofline]; read in timed mode only, validated in both (LatencyConfig,
//              sim/config/latency_config.h)
//   validate:  backend [cpu] | cuda, sample_every_steps [0], sample_prob [0], dtype [auto]
//              (read by the validation harness, unused by `run`; scenario_sections.h)
//   outputs:   trace_json [false], metrics_prom [false], steps_every [10] (scenario_sections.h)
//   cluster:   replicas [1], router: {policy [round_robin], seed [0], the policy's parameters},
//              or prefill_replicas and decode_replicas with router.pd (P/D)
//              (ClusterConfig, sim/config/cluster_config.h); written back only when replicas > 1
//   sweep:     {dotted.key: [values...], ...}: the grid `kvsim sweep` expands (first key slowest),
//              or [{dotted.key: value, ...}, ...]: exactly these points, in order (configurations
//              that differ in several keys at once, e.g. engine.profile with the keys only one
//              profile reads)
// Without a model, the pool size must come from num_gpu_blocks_override or capacity_tokens.
//
// Adding a key: its member in the section's struct, its entry in the section's key table, one line
// in the section's parser and one in its writer (tests/sim/config/test_resolved_config.cpp then
// asks for a non-default value of it that round-trips).

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine_factory.h"
#include "sim/common/yaml_util.h"
#include "sim/config/cluster_config.h"
#include "sim/config/hardware.h"
#include "sim/config/latency_config.h"
#include "sim/config/model_config.h"
#include "sim/config/scenario_sections.h"
#include "sim/workload/workload_config.h"

namespace kvsim {

inline constexpr std::string_view kScenarioKeys[] = {
    "name",      "seed",     "engine",  "model",    "hardware", "cache",
    "scheduler", "workload", "latency", "validate", "outputs",  "cluster", "sweep"};

/// One axis of `sweep:`: a dotted key path and the values it takes, in file order.
struct SweepAxis {
  std::string key;
  std::vector<YAML::Node> values;
};

/// The CPU tier as a run uses it (cache.kv_offloading, sized).
struct OffloadTierPlan {
  /// vLLM's num_blocks of the tier: int(kv_offloading_size * 2**30) // (kv_bytes_per_block *
  /// factor), kv_bytes_per_block the KV bytes of one GPU block on every worker (cpu/spec.py);
  /// kv_offloading_capacity_tokens: capacity / (factor * block_size).
  std::int64_t num_cpu_blocks = 0;
  /// One GPU block over all layers on one GPU (0 without a model): what a transfer moves per
  /// GPU block on each GPU's link.
  std::int64_t page_bytes = 0;
  std::int32_t block_size_factor = 1;  // offloaded block = factor GPU blocks
};

struct Scenario {
  std::string file;  // the YAML file (for messages and relative paths)
  std::string name;
  std::uint64_t seed = 0;
  EngineConfig engine;
  std::optional<ModelConfig> model;  // required in timed mode
  HardwareConfig hardware;
  CacheConfig cache;
  SchedulerConfig scheduler;
  V0SchedulerConfig scheduler_v0;  // the V0 keys of `scheduler:`
  WorkloadConfig workload;
  LatencyConfig latency;  // used in timed mode only
  ValidateConfig validate;
  OutputsConfig outputs;
  ClusterConfig cluster;  // replicas > 1: a cluster run (sim/config/cluster_config.h)
  std::vector<SweepAxis> sweep;
  /// The list form of `sweep:`: each point's (dotted key, value) in file order (then `sweep` is
  /// empty).
  std::vector<std::vector<std::pair<std::string, YAML::Node>>> sweep_list;
  std::int64_t num_gpu_blocks = 0;  // the pool actually used
  /// vLLM V0's CPU pool: cache.swap_space over the bytes of a block (all layers, one GPU); 0 for
  /// the other profiles and without a model (cache_only).
  std::int64_t num_cpu_blocks = 0;
  std::optional<KVCachePlan> plan;  // when sized from a model: plan_kv_pool by the profile's rules
  std::optional<OffloadTierPlan> offload;  // the CPU tier (cache.kv_offloading); null: none

  /// The core's cache configuration.
  [[nodiscard]] KVCacheConfig kv_cache_config() const;
  /// What make_engine builds the scenario's engine from.
  [[nodiscard]] EngineParams engine_params() const;
};

/// Applies one `--set a.b.c=value` to `root` (value parsed as a YAML scalar or flow collection;
/// missing maps are created) and, when `origins` is given, records the paths it wrote (the key and
/// any map it created) as written by "--set a.b.c=value". Throws ConfigError on a malformed
/// assignment.
void apply_set(YAML::Node& root, std::string_view assignment, ArgumentOrigins* origins = nullptr);

/// Parses and validates a scenario tree. `file` names it in messages and anchors relative paths;
/// `origins` tells which values command-line arguments wrote (their errors name the argument).
[[nodiscard]] Scenario parse_scenario(const YAML::Node& root, const std::string& file,
                                      std::shared_ptr<const ArgumentOrigins> origins = nullptr);

/// Loads `path`, applies `sets` in order, then `seed` (when given), and parses.
[[nodiscard]] Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets,
                                     std::optional<std::uint64_t> seed = std::nullopt);

/// config.resolved.yaml, written from the typed structs: every section (but sweep) with every key
/// and the value the run uses, defaults filled in, file paths resolved, null for an absent
/// optional (and for latency in cache_only mode, which reads none). Running it gives the same
/// outputs, and resolving it again gives the same text. Reads no file.
[[nodiscard]] std::string resolved_yaml(const Scenario& s);

/// The cartesian product of the sweep axes, first axis slowest: each point is the list of
/// (key, value text) to pass as --set.
[[nodiscard]] std::vector<std::vector<std::pair<std::string, std::string>>> sweep_points(
    const Scenario& s);
/// A point's folder name: "cache.block_size=16,cache.enable_prefix_caching=true".
[[nodiscard]] std::string sweep_point_name(
    const std::vector<std::pair<std::string, std::string>>& p);

}  // namespace kvsim
