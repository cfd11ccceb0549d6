#include "core/v1/specialized_manager.h"

#include "core/common/assert.h"
#include "core/common/hot.h"

namespace kvsim {

SpecializedManager::SpecializedManager(std::int32_t block_size, std::int64_t sliding_window_tokens,
                                       BlockPool& pool)
    : kind_(sliding_window_tokens > 0 ? Kind::kSlidingWindow : Kind::kFullAttention),
      block_size_(block_size),
      sliding_window_tokens_(sliding_window_tokens),
      // -1: the input token itself is in the window.
      contiguous_blocks_(sliding_window_tokens > 0 ? cdiv(sliding_window_tokens - 1, block_size)
                                                   : 0),
      pool_(pool) {
  KVSIM_ASSERT(block_size > 0 && sliding_window_tokens >= 0);
  KVSIM_ASSERT(kind_ == Kind::kFullAttention || pool.null_block() != kNoBlock,
               "a sliding-window manager needs a pool with a null block");
}

KVSIM_HOT void SpecializedManager::find_longest_cache_hit(std::span<const HashId> hashes,
                                                          std::vector<BlockId>& hits) const {
  hits.clear();
  if (kind_ == Kind::kFullAttention) {
    for (HashId h : hashes) {  // a chain: after the first miss nothing can hit
      const BlockId b = pool_.get_cached_block(h);
      if (b == kNoBlock) break;
      hits.push_back(b);
    }
    return;
  }
  // Sliding window: from the right, stop at the first run of contiguous_blocks_ hits.
  hits.assign(hashes.size(), pool_.null_block());
  std::size_t run = 0;
  for (std::size_t i = hashes.size(); i-- > 0;) {
    const BlockId b = pool_.get_cached_block(hashes[i]);
    if (b == kNoBlock) {
      run = 0;
      continue;
    }
    hits[i] = b;
    if (static_cast<std::int64_t>(++run) >= contiguous_blocks_) {
      hits.resize(i + run);  // drop what follows the run
      return;
    }
  }
  hits.resize(run);  // no run long enough: the hits from block 0 on count anyway
}

bool SpecializedManager::free_skipped_blocks(std::vector<BlockId>& table,
                                             std::int64_t num_computed_tokens) {
  if (kind_ == Kind::kFullAttention) return true;
  const std::int64_t last_useful_token = num_computed_tokens - sliding_window_tokens_ + 1;
  if (last_useful_token < block_size_) return true;  // no block wholly before the window
  const std::int64_t last_useful_block = last_useful_token / block_size_;
  if (last_useful_block > static_cast<std::int64_t>(table.size())) return false;
  const BlockId null = pool_.null_block();
  for (std::int64_t i = last_useful_block - 1; i >= 0; --i) {
    BlockId& b = table[static_cast<std::size_t>(i)];
    if (b == null) break;  // earlier calls nulled everything before it
    pool_.free_block(b);
    b = null;
  }
  return true;
}

}  // namespace kvsim
