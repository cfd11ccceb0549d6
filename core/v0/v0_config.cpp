#include "core/v0/v0_config.h"

namespace kvsim::v0 {

bool default_enable_chunked_prefill(std::int64_t max_model_len, std::int64_t sliding_window) {
  return max_model_len > 32768 && sliding_window <= 0;
}

V0Config make_v0_config(const SchedulerConfig& scheduler, const KVCacheConfig& cache,
                        const V0Options& options) {
  V0Config c;
  c.block_size = cache.block_size;
  c.num_gpu_blocks = cache.num_gpu_blocks;
  c.num_cpu_blocks = options.num_cpu_blocks;
  c.enable_prefix_caching = cache.enable_caching;
  c.max_num_seqs = scheduler.max_num_seqs;
  c.max_num_batched_tokens = scheduler.max_num_batched_tokens;
  c.max_model_len = scheduler.max_model_len;
  c.enable_chunked_prefill = options.enable_chunked_prefill.value_or(
      default_enable_chunked_prefill(scheduler.max_model_len, cache.sliding_window));
  c.preemption_mode = options.preemption_mode;
  c.policy = options.policy;
  c.delay_factor = options.delay_factor;
  c.on_swap_space_exhausted = options.on_swap_space_exhausted;
  return c;
}

std::string v0_config_error(const V0Config& c) {
  if (c.block_size <= 0) return "block_size must be positive";
  if (c.num_gpu_blocks < 0 || c.num_cpu_blocks < 0) return "block counts must be >= 0";
  if (c.max_num_seqs <= 0) return "max_num_seqs must be positive";
  if (c.max_model_len <= 0) return "max_model_len must be positive";
  if (c.max_num_batched_tokens < c.max_model_len && !c.enable_chunked_prefill)
    return "max_num_batched_tokens (" + std::to_string(c.max_num_batched_tokens) +
           ") is smaller than max_model_len (" + std::to_string(c.max_model_len) +
           "). This effectively limits the maximum sequence length to max_num_batched_tokens "
           "and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or "
           "decrease max_model_len.";
  if (c.max_num_batched_tokens < c.max_num_seqs)
    return "max_num_batched_tokens (" + std::to_string(c.max_num_batched_tokens) +
           ") must be greater than or equal to max_num_seqs (" + std::to_string(c.max_num_seqs) +
           ").";
  if (c.watermark < 0) return "watermark must be >= 0";
  return {};
}

}  // namespace kvsim::v0
