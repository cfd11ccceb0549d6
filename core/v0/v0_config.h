#pragma once
// The configuration of the vLLM V0 engine (vllm/config.py CacheConfig + SchedulerConfig as the
// V0 scheduler reads them). The fields every family shares come from core/common's
// SchedulerConfig and KVCacheConfig; the V0-only ones are V0Options, which EngineParams carries
// as `v0` (the simulator fills it from a scenario, the replayer from a sched_init op).

#include <cstdint>
#include <optional>
#include <string>

#include "core/common/engine_config.h"
#include "core/v0/v0_types.h"

namespace kvsim::v0 {

enum class SchedulingPolicy : std::uint8_t { kFcfs, kPriority };

/// What a preemption by swap does when the CPU swap space cannot take the victim.
enum class SwapSpaceExhausted : std::uint8_t {
  kAbort,      // vLLM: RuntimeError "Aborted due to the lack of CPU swap space"; the engine dies
  kRecompute,  // not vLLM: a one-sequence victim is preempted by recompute instead
};

/// vLLM's default for enable_chunked_prefill when it is not given (vllm/engine/arg_utils.py
/// create_engine_config at v0.7.2, V0 on a CUDA GPU, no LoRA, no speculative decoding, not a
/// multimodal or pooling model): on for max_model_len > 32768 unless the model has a sliding
/// window.
bool default_enable_chunked_prefill(std::int64_t max_model_len, std::int64_t sliding_window);

/// The V0-only settings.
struct V0Options {
  std::int32_t num_cpu_blocks = 0;  // swap space in blocks (vLLM's num_cpu_blocks)
  /// nullopt: vLLM's default (default_enable_chunked_prefill).
  std::optional<bool> enable_chunked_prefill;
  std::optional<PreemptionMode> preemption_mode;  // nullopt: vLLM's choice (see §5 _preempt)
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  double delay_factor = 0;  // accepted; driven by the engine clock
  SwapSpaceExhausted on_swap_space_exhausted = SwapSpaceExhausted::kAbort;
  /// vLLM's swap_space (GiB per GPU; its default 4) that num_cpu_blocks was sized from: only
  /// messages and the checks that other families are not given one read it.
  double swap_space_gib = 4;
};

/// Everything the V0 scheduler and its block manager read.
struct V0Config {
  std::int32_t block_size = 16;
  std::int32_t num_gpu_blocks = 0;
  std::int32_t num_cpu_blocks = 0;
  bool enable_prefix_caching = false;
  std::int64_t max_num_seqs = 256;
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t max_model_len = 8192;
  bool enable_chunked_prefill = false;
  std::optional<PreemptionMode> preemption_mode;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  double delay_factor = 0;
  SwapSpaceExhausted on_swap_space_exhausted = SwapSpaceExhausted::kAbort;
  /// The block manager's watermark. The scheduler never passes one, so it is always vLLM's
  /// default 0.01 (spec §0.3); only block-manager-level tests set another.
  double watermark = 0.01;
};

/// The V0 configuration from the shared configs and the V0 options (max_model_len is the
/// scheduler's; enable_caching becomes enable_prefix_caching; an unset enable_chunked_prefill
/// takes vLLM's default).
V0Config make_v0_config(const SchedulerConfig& scheduler, const KVCacheConfig& cache,
                        const V0Options& options);

/// SchedulerConfig._verify_args (vllm/config.py): the ValueError's message, or "" when valid.
/// Also rejects what vLLM would fail on later (non-positive sizes).
std::string v0_config_error(const V0Config& c);

}  // namespace kvsim::v0
