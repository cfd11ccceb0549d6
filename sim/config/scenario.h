#pragma once
// Scenario: the top-level YAML a user runs (`kvsim run SCENARIO.yaml`). Sections follow vLLM's
// config classes and keys its engine arguments. Parsing validates every key (an unknown key is a
// did-you-mean ConfigError at file:line:col), after `--set section.key=value` overrides have been
// applied to the YAML tree, and sizes the KV cache, so a Scenario that loads is ready to run.
//
// Schema (defaults in brackets):
//   name [file stem]  seed [0]
//   engine:    profile [vllm-0.7.2] (only one so far), mode [timed] | cache_only
//   model:     config: HF config.json path, and/or inline HF fields (sim/config/model_config.h);
//              required in timed mode
//   hardware:  gpu [H100-80GB], tensor_parallel_size [1], gpu_memory_bytes, peak_flops_per_s,
//              hbm_bytes_per_s (sim/config/hardware.h)
//   cache:     block_size [16], gpu_memory_utilization [0.9], kv_cache_memory_bytes,
//              num_gpu_blocks_override, capacity_tokens (num_gpu_blocks = capacity / block_size;
//              not with the override), activation_reserve_bytes [2 GiB], cache_dtype [auto],
//              enable_prefix_caching [true], num_preallocate_tokens [64; 0 in cache_only]
//   scheduler: max_num_seqs [256], max_num_batched_tokens [8192],
//              max_model_len [model's max_position_embeddings, else 8192; never above it]
//   workload:  synthetic generator or trace (sim/workload/workload.h); required
//   latency:   [roofline] (sim/engine/latency_model.h); timed mode only
//   validate:  backend [cpu] | cuda, sample_every_steps [0], sample_prob [0], dtype [auto]
//              (read by the validation harness, unused by `run`)
//   outputs:   trace_json [false], metrics_prom [false], steps_every [10]
//   sweep:     {dotted.key: [values...], ...}: the grid `kvsim sweep` expands (first key slowest)
// Without a model, the pool size must come from num_gpu_blocks_override or capacity_tokens.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine_factory.h"
#include "sim/config/hardware.h"
#include "sim/config/model_config.h"
#include "sim/common/yaml_util.h"

namespace kvsim {

/// `engine:` -- which vLLM behaviour to reproduce and how time is simulated.
struct EngineConfig {
  enum class Mode : std::uint8_t { kTimed, kCacheOnly };
  Profile profile = Profile::kVllm072;
  Mode mode = Mode::kTimed;
};
const char* mode_name(EngineConfig::Mode m);

/// `cache:` -- the KV cache (vLLM's CacheConfig plus the sizing keys of sim/config/hardware.h).
struct CacheConfig {
  CacheSizingConfig sizing;  // block_size, gpu_memory_utilization, ...
  bool enable_prefix_caching = true;
  std::int64_t num_preallocate_tokens = 64;     // vLLM 0.7.2; default 0 in cache_only mode
  std::optional<std::int64_t> capacity_tokens;  // num_gpu_blocks = capacity_tokens / block_size
};

/// `outputs:` -- optional files and the steps.csv sampling period.
struct OutputsConfig {
  bool trace_json = false;
  bool metrics_prom = false;
  std::int64_t steps_every = 10;  // steps.csv row (and KV breakdown) every N steps
};

/// `validate:` -- parsed for the kernel validation harness (kvsim validate); unused by `run`.
struct ValidateConfig {
  std::string backend = "cpu";          // cpu | cuda
  std::int64_t sample_every_steps = 0;  // 0: off
  double sample_prob = 0.0;
  std::string dtype = "auto";  // auto | float32 | float16 | bfloat16
};

/// One axis of `sweep:`: a dotted key path and the values it takes, in file order.
struct SweepAxis {
  std::string key;
  std::vector<YAML::Node> values;
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
  YAML::Node workload;  // validated by make_request_source (sim/workload/workload.h)
  YAML::Node latency;   // validated by make_latency_model (sim/engine/latency_model.h)
  ValidateConfig validate;
  OutputsConfig outputs;
  std::vector<SweepAxis> sweep;
  std::int64_t num_gpu_blocks = 0;  // the pool actually used
  std::optional<KVCachePlan> plan;  // when sized from a model: plan_kv_pool by the profile's rules
  YAML::Node root;                  // the tree after --set (sections kept as written)

  YamlContext ctx() const { return YamlContext{file, ""}; }
  /// The core's cache configuration.
  [[nodiscard]] KVCacheConfig kv_cache_config() const;
  /// What make_engine builds the scenario's engine from.
  [[nodiscard]] EngineParams engine_params() const;
};

/// Applies one `--set a.b.c=value` to `root` (value parsed as a YAML scalar or flow collection;
/// missing maps are created). Throws ConfigError on a malformed assignment.
void apply_set(YAML::Node& root, std::string_view assignment);

/// Parses and validates a scenario tree. `file` names it in messages and anchors relative paths.
[[nodiscard]] Scenario parse_scenario(const YAML::Node& root, const std::string& file);

/// Loads `path`, applies `sets` in order, then `seed` (when given), and parses.
[[nodiscard]] Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets,
                                     std::optional<std::uint64_t> seed = std::nullopt);

/// config.resolved.yaml: every section with its defaults filled in and every file path resolved;
/// workload and latency as their readers resolve them (synthetic_workload_yaml or
/// trace_workload_yaml, latency_config_yaml; latency only in timed mode, the only mode that reads
/// it); model kept as written, with --set applied. Running it gives the same outputs, and
/// resolving it again gives the same text. Throws ConfigError on a bad workload or latency.
[[nodiscard]] std::string resolved_yaml(const Scenario& s);

/// The cartesian product of the sweep axes, first axis slowest: each point is the list of
/// (key, value text) to pass as --set.
[[nodiscard]] std::vector<std::vector<std::pair<std::string, std::string>>> sweep_points(
    const Scenario& s);
/// A point's folder name: "cache.block_size=16,cache.enable_prefix_caching=true".
[[nodiscard]] std::string sweep_point_name(
    const std::vector<std::pair<std::string, std::string>>& p);

}  // namespace kvsim
