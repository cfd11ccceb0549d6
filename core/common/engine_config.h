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
};

/// vLLM's SchedulerConfig subset: batch limits.
struct SchedulerConfig {
  std::int64_t max_num_seqs = 256;
  std::int64_t max_num_batched_tokens = 8192;
  std::int64_t max_model_len = 8192;
};
}  // namespace kvsim
