#pragma once
// Engine-wide configuration shared by the engine families: vLLM's SchedulerConfig and CacheConfig
// as the core needs them (the simulator fills them from a scenario, the replayer from an init op).
// A family reads the fields it implements; fields that only one family or release has carry a
// comment saying which.

#include <cstdint>

namespace kvsim {

/// vLLM's CacheConfig subset: the paged KV pool.
struct KVCacheConfig {
  std::int32_t block_size = 16;
  std::int32_t num_gpu_blocks = 0;
  std::int64_t max_model_len = 8192;
  bool enable_caching = true;
  std::int64_t num_preallocate_tokens = 64;  // vLLM v0.7.x; the scheduler always uses 64
  /// The model's attention window in tokens (its config's sliding_window), 0 for full attention.
  /// vLLM v0.8.5 manages such a model's blocks with the sliding-window rules; v0.7.2 ignores it.
  std::int64_t sliding_window = 0;
  /// vLLM v0.8.5's use_eagle (an eagle speculative config): the lookup drops its last hit block.
  bool use_eagle = false;
};

/// vLLM's SchedulerConfig subset: batch limits.
struct SchedulerConfig {
  std::int64_t max_num_seqs = 256;
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t max_model_len = 8192;
  /// vLLM v0.8.5: a request's chunk is at most this many tokens when > 0 (vLLM's default 0).
  std::int64_t long_prefill_token_threshold = 0;
  /// vLLM v0.8.5: slots reserved beyond the scheduled tokens (eagle's num_speculative_tokens;
  /// vLLM's default 0, without a speculative config).
  std::int64_t num_lookahead_tokens = 0;
};
}  // namespace kvsim
