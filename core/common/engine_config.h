#pragma once
// Engine-wide configuration shared by the engine families: vLLM's SchedulerConfig and CacheConfig
// as the core needs them (the simulator fills them from a scenario, the replayer from an init op).
// A family reads the fields it implements; fields that only one family or release has carry a
// comment saying which.

#include <cstdint>
#include <vector>

namespace kvsim {

/// The attention type of a KV cache group (vLLM v0.9+: which single-type manager it gets).
enum class KVGroupKind : std::uint8_t { kFullAttention, kSlidingWindow, kChunkedLocal, kMamba };

/// vLLM v0.20's --mamba-cache-mode of a mamba group.
enum class MambaGroupMode : std::uint8_t { kNone, kAll, kAlign };

/// One KV cache group as vLLM v0.9+'s KV cache coordinator manages it: the layers sharing one
/// block table per request. Two groups with equal specs (eagle aside) are looked up together.
struct KVGroupSpec {
  KVGroupKind kind = KVGroupKind::kFullAttention;
  std::int32_t block_size = 16;                             // tokens per block of this group
  std::int64_t sliding_window = 0;                          // kSlidingWindow: the window in tokens
  std::int64_t attention_chunk_size = 0;                    // kChunkedLocal: the chunk in tokens
  MambaGroupMode mamba_cache_mode = MambaGroupMode::kNone;  // kMamba
  std::int64_t num_speculative_blocks = 0;                  // kMamba
  bool eagle = false;  // the group holds EAGLE draft layers (vLLM's is_eagle_group)

  /// A mamba group in 'align' mode (state blocks at block boundaries; MambaManager's align paths
  /// and the scheduler's block-aligned split).
  bool mamba_align() const {
    return kind == KVGroupKind::kMamba && mamba_cache_mode == MambaGroupMode::kAlign;
  }
  /// vLLM's KVCacheSpec equality (what the hybrid coordinator groups by): eagle is not part of it.
  bool same_spec(const KVGroupSpec& o) const {
    return kind == o.kind && block_size == o.block_size && sliding_window == o.sliding_window &&
           attention_chunk_size == o.attention_chunk_size &&
           mamba_cache_mode == o.mamba_cache_mode &&
           num_speculative_blocks == o.num_speculative_blocks;
  }
};

/// vLLM's CacheConfig subset: the paged KV pool.
struct KVCacheConfig {
  std::int32_t block_size = 16;
  std::int32_t num_gpu_blocks = 0;
  std::int64_t max_model_len = 8192;
  bool enable_caching = true;
  std::int64_t num_preallocate_tokens = 64;  // vLLM v0.7.x; the scheduler always uses 64
  /// The model's attention window in tokens (its config's sliding_window), 0 for full attention.
  /// vLLM v0.8.5 manages such a model's blocks with the sliding-window rules; v0.7.2 ignores it.
  /// vLLM v0.20 without kv_cache_groups: one sliding-window group of this window.
  std::int64_t sliding_window = 0;
  /// vLLM v0.8.5's use_eagle (an eagle speculative config): the lookup drops its last hit block.
  bool use_eagle = false;
  /// vLLM v0.9+ (policy kv_cache_coordinator): the KV cache groups, in vLLM's group order. Empty:
  /// one group of block_size tokens, full attention or a sliding window of `sliding_window`.
  std::vector<KVGroupSpec> kv_cache_groups{};
  /// vLLM v0.20's hash_block_size: the granularity of the request's block hashes; 0 = the one
  /// group's block size, or the gcd of the groups' block sizes.
  std::int32_t hash_block_size = 0;
  /// vLLM v0.20's max_num_batched_tokens as the manager sees it (the per-request admission cap
  /// of sliding-window and chunked-local groups); 0 = max_model_len (no effective cap). The
  /// scheduler passes its own.
  std::int64_t max_num_batched_tokens = 0;
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
  /// vLLM v0.20: the token budget of a step (max_num_scheduled_tokens); 0 = max_num_batched_tokens.
  std::int64_t max_num_scheduled_tokens = 0;
  /// vLLM v0.20: without chunked prefill a waiting request longer than the remaining budget
  /// stops admission (earlier V1 releases always chunk).
  bool enable_chunked_prefill = true;
  /// vLLM v0.20 (default on): a waiting request is admitted only if its whole sequence fits.
  bool scheduler_reserve_full_isl = false;
  /// vLLM v0.20: the priority policy (waiting ordered by (priority, arrival time); the victim of
  /// a preemption is the running request of the largest (priority, arrival time)); else FCFS.
  bool priority_policy = false;
  /// vLLM v0.20's AsyncScheduler: every request that is not a partial prefill gets an output
  /// placeholder when scheduled; blocks completed by an output are cached when it arrives.
  bool async_scheduling = false;
};
}  // namespace kvsim
