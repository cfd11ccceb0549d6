#pragma once
// KV events: what a paged engine's prefix cache publishes for routers that index the replicas'
// caches (vLLM v0.20.1's BlockStored / BlockRemoved / AllBlocksCleared, vllm/distributed/
// kv_events.py, queued by vllm/v1/core/block_pool.py and taken once per step by the scheduler's
// update_from_output). kvsim emits one event per block: a BlockStored batch of k blocks is k
// kStored events in the batch's order.

#include <cstdint>

namespace kvsim {

struct KvEvent {
  enum class Kind : std::uint8_t {
    kStored,      // a full block entered the prefix cache (BlockPool.cache_full_blocks)
    kRemoved,     // a cached block was evicted (BlockPool._maybe_evict_cached_block)
    kAllCleared,  // reset_prefix_cache succeeded
  };
  Kind kind = Kind::kStored;
  std::int32_t group = 0;  // the KV cache group (vLLM's group_idx)
  /// The block's content hash (BlockHashTable::content_hash): a chain over the block's tokens and
  /// those of every block before it, equal across engines for equal content (0 for kAllCleared).
  std::uint64_t block_hash = 0;
  friend bool operator==(const KvEvent&, const KvEvent&) = default;
};

}  // namespace kvsim
