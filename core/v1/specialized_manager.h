#pragma once
// SpecializedManager: vLLM v0.8.5's vllm/v1/core/specialized_manager.py, the rules of one attention
// type for a KV cache group: how the prefix-cache lookup turns a request's block hashes into hits,
// and which blocks of a request's table it no longer needs. Full attention: the longest prefix of
// hits, nothing dropped. Sliding window (vLLM v0.8.3+, policy sliding_window_manager): a run of
// cdiv(sliding_window - 1, block_size) consecutive hits, searched from the right, with the null
// block before it; blocks that left the window become the null block and are freed before every
// allocation. (vLLM v0.9+ calls this a SingleTypeKVCacheManager and keeps one per group.)

#include <cstdint>
#include <span>
#include <vector>

#include "core/common/types.h"
#include "core/v1/block_pool.h"

namespace kvsim {

class SpecializedManager {
 public:
  enum class Kind : std::uint8_t { kFullAttention, kSlidingWindow };

  /// A full-attention manager when `sliding_window_tokens` is 0, else a sliding-window one, which
  /// needs a pool with a null block. `pool` must outlive the manager.
  SpecializedManager(std::int32_t block_size, std::int64_t sliding_window_tokens, BlockPool& pool);

  Kind kind() const { return kind_; }
  /// True when remove_skipped_blocks may change a table (sliding window).
  bool skips_blocks() const { return kind_ == Kind::kSlidingWindow; }
  std::int64_t sliding_window_tokens() const { return sliding_window_tokens_; }

  /// find_longest_cache_hit: the hits for `hashes` (a request's chain) into `hits` (replaced):
  /// full attention, the cached blocks of the longest prefix; sliding window, the null block up to
  /// the rightmost run of enough consecutive hits and that run (or, with no such run, the hits
  /// from the first block on). No state changes. O(hashes).
  void find_longest_cache_hit(std::span<const HashId> hashes, std::vector<BlockId>& hits) const;

  /// remove_skipped_blocks followed by the pool's free of what it removed: every block of `table`
  /// before the one holding token num_computed_tokens - sliding_window + 1 becomes the null block,
  /// walking back from there until a null block, and is freed in that order (latest first).
  /// False, and nothing changed, when that block lies beyond the table (vLLM's IndexError).
  /// O(blocks removed).
  bool free_skipped_blocks(std::vector<BlockId>& table, std::int64_t num_computed_tokens);

 private:
  Kind kind_;
  std::int32_t block_size_;
  std::int64_t sliding_window_tokens_;
  std::int64_t contiguous_blocks_;  // sliding_window_contiguous_blocks
  BlockPool& pool_;
};

}  // namespace kvsim
