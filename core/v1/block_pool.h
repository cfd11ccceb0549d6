#pragma once
// BlockPool: the KV cache blocks, their reference counts, the free-block queue (eviction order) and
// the prefix-cache index (hash -> blocks in insertion order). The vLLM v0.7.2 manager keeps these
// in KVCacheManager; kvsim splits them out the way vLLM v0.8 does (vllm/v1/core/block_pool.py).

#include <boost/intrusive/list.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/assert.h"
#include "core/common/block_hash.h"
#include "core/common/kv_event.h"
#include "core/common/types.h"

namespace kvsim {

#ifdef NDEBUG
using FreeListLinkMode = boost::intrusive::link_mode<boost::intrusive::normal_link>;
#else
using FreeListLinkMode = boost::intrusive::link_mode<boost::intrusive::safe_link>;
#endif

/// One KV cache block (vLLM's KVCacheBlock). Lives in BlockPool for the pool's lifetime.
struct alignas(32) KVCacheBlock {
  boost::intrusive::list_member_hook<FreeListLinkMode>
      free_hook;  // in the free queue iff ref_cnt == 0
  std::int32_t ref_cnt = 0;
  // Set once the block is full and cached; holds a table reference. The pool's cache key: the
  // block hash, and in a pool shared by several KV cache groups also the group (see key_of).
  HashId block_hash = kNoHash;
  // Neighbours among the cached blocks that share block_hash, in insertion order.
  BlockId hash_prev = kNoBlock;
  BlockId hash_next = kNoBlock;
};
// Two blocks per cache line, none straddling one: popping the free queue is a walk over blocks
// freed long ago, one miss per block. A block's id is its index (BlockPool::id_of).
static_assert(sizeof(KVCacheBlock) == 32);

class BlockPool {
 public:
  /// The free queue: head = next block to reuse (evict), tail = most recently freed. O(1) unlink.
  using FreeQueue =
      boost::intrusive::list<KVCacheBlock,
                             boost::intrusive::member_hook<
                                 KVCacheBlock, boost::intrusive::list_member_hook<FreeListLinkMode>,
                                 &KVCacheBlock::free_hook>,
                             boost::intrusive::constant_time_size<true>>;

  /// Statistics since construction. Every field is a running total.
  struct Stats {
    std::int64_t blocks_allocated = 0;  // blocks popped from the free queue by get_new_blocks
    std::int64_t evictions = 0;         // popped blocks that carried a cached hash (evicted)
  };

  /// All `num_blocks` blocks start free, queued in id order; with `null_block` (vLLM v0.8.3+)
  /// block 0 is then taken out as the null block (never handed out, never queued again). `hashes`
  /// must outlive the pool. With `num_groups` > 1 (vLLM v0.9+'s KV cache groups sharing the pool)
  /// a cached block is keyed by (hash, group), as vLLM's BlockHashWithGroupId.
  BlockPool(std::int32_t num_blocks, bool enable_caching, bool null_block, BlockHashTable& hashes,
            std::int32_t num_groups = 1);
  ~BlockPool();
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  std::int32_t num_blocks() const { return static_cast<std::int32_t>(blocks_.size()); }
  std::int32_t num_free_blocks() const { return static_cast<std::int32_t>(free_queue_.size()); }
  bool enable_caching() const { return enable_caching_; }
  /// Block 0 when the pool reserves a null block, else kNoBlock.
  BlockId null_block() const { return null_block_; }
  KVCacheBlock& block(BlockId b) { return blocks_[static_cast<std::size_t>(to_int(b))]; }
  const KVCacheBlock& block(BlockId b) const {
    return blocks_[static_cast<std::size_t>(to_int(b))];
  }
  const FreeQueue& free_queue() const { return free_queue_; }
  /// The id of a block of this pool (its index).
  BlockId id_of(const KVCacheBlock& blk) const {
    return BlockId{static_cast<std::int32_t>(&blk - blocks_.data())};
  }
  /// Starts loading block `b` (for walks over a block table).
  void prefetch_block(BlockId b) const { __builtin_prefetch(&block(b)); }
  const Stats& stats() const { return stats_; }

  /// key_of for one group, as a value (a loop over blocks keeps it in registers).
  struct GroupKeys {
    int shift = 0;
    std::int32_t group = 0;
    HashId operator()(HashId h) const {
      if (shift == 0) return h;  // one group: the key is the hash
      KVSIM_ASSERT(std::int64_t{to_int(h)} < (std::int64_t{1} << (31 - shift)),
                   "too many block hashes for the KV cache groups' cache keys");
      return HashId{(to_int(h) << shift) | group};
    }
  };
  GroupKeys group_keys(std::int32_t group) const { return {group_shift_, group}; }
  /// The cache key of hash `h` in KV cache group `group` (h itself for a one-group pool).
  HashId key_of(HashId h, std::int32_t group) const { return group_keys(group)(h); }
  /// The block hash inside a cache key.
  HashId hash_of_key(HashId key) const { return HashId{to_int(key) >> group_shift_}; }
  /// The KV cache group inside a cache key.
  std::int32_t group_of_key(HashId key) const {
    return to_int(key) & ((std::int32_t{1} << group_shift_) - 1);
  }

  /// vLLM's _get_cached_block: the first-inserted live block carrying cache key `key`, or
  /// kNoBlock. O(1).
  BlockId get_cached_block(HashId key) const;

  /// Pops `n` blocks from the head of the free queue, evicting any cached hash, ref_cnt = 1 each,
  /// and appends their ids to `out` in pop order. Precondition: n <= num_free_blocks(). O(n).
  /// (One block, a decode step's growth without preallocation, is inline.)
  void get_new_blocks(std::int32_t n, std::vector<BlockId>& out) {
    if (n != 1) return get_new_blocks_batch(n, out);
    KVSIM_ASSERT(n <= num_free_blocks(), "not enough free blocks");
    KVCacheBlock& blk = free_queue_.front();
    free_queue_.pop_front();
    KVSIM_ASSERT(blk.ref_cnt == 0);
    blk.ref_cnt = 1;
    out.push_back(id_of(blk));
    if (enable_caching_ && blk.block_hash != kNoHash) evict(blk);
    ++stats_.blocks_allocated;
  }

  /// vLLM's touch: takes each block out of the free queue if its ref_cnt is 0 (the null block
  /// never is in it), then ref_cnt += 1.
  void touch(std::span<const BlockId> blocks);

  /// Drops one reference; a block reaching 0 is appended to the free-queue tail (kept cached). The
  /// null block's count just drops (vLLM does not maintain it; it may go negative). O(1).
  void free_block(BlockId b);

  /// Marks a full block as cached under cache key `key` (takes a new reference on its hash) and
  /// appends it to the index behind any block already cached with the same key. Precondition:
  /// the block has no hash.
  void cache_block(BlockId b, HashId key);

  /// vLLM's reset_prefix_cache: false (and no change) if any block but the null block is in use;
  /// else every hash is dropped and the free-queue order is kept.
  bool reset_prefix_cache();

  /// KV events (vLLM's enable_kv_cache_events): from now on every block cached (cache_block) is
  /// appended to `*log` as kStored, every cached block evicted as kRemoved, and a successful
  /// reset_prefix_cache as kAllCleared; nullptr stops. The caller drains the log; it keeps its
  /// capacity, so a warm log allocates nothing.
  void set_event_log(std::vector<KvEvent>* log) { events_ = log; }

  /// Number of distinct hashes in the index, and of blocks in it (>= hashes when duplicated).
  std::int64_t num_cached_hashes() const { return num_cached_hashes_; }
  std::int64_t num_cached_blocks() const { return num_cached_blocks_; }
  /// The cached blocks (free or in use) keyed to KV cache group `group`.
  std::int64_t num_cached_blocks(std::int32_t group) const {
    return cached_by_group_[static_cast<std::size_t>(group)];
  }
  /// Blocks of one cache key in insertion order (for snapshots and tests).
  void cached_blocks_of(HashId key, std::vector<BlockId>& out) const;

  /// Verifies: every block either free (ref 0, queued once) or used (ref > 0, not queued), the null
  /// block never queued (its count is not maintained); queue length agrees; the index holds exactly
  /// the blocks with a hash, each under its own hash, with consistent chains and counts. Returns
  /// the first violation ("" if none). O(num_blocks).
  std::string find_violation() const;
  /// Aborts with the violation's message if find_violation() finds one.
  void check_invariants() const;

 private:
  void get_new_blocks_batch(std::int32_t n, std::vector<BlockId>& out);
  void evict(KVCacheBlock& blk);
  std::size_t head_slot(HashId h) const { return static_cast<std::size_t>(to_int(h)); }

  bool enable_caching_;
  int group_shift_ = 0;  // bits of the group in a cache key
  BlockId null_block_ = kNoBlock;
  BlockHashTable& hashes_;
  std::vector<KVCacheBlock> blocks_;
  FreeQueue free_queue_;
  std::vector<BlockId> hash_head_;  // by HashId: first cached block with that hash
  std::vector<BlockId> hash_tail_;  // by HashId: last cached block with that hash
  std::int64_t num_cached_hashes_ = 0;
  std::int64_t num_cached_blocks_ = 0;
  std::vector<std::int64_t> cached_by_group_;  // num_cached_blocks_ by the keys' group
  std::vector<KvEvent>* events_ = nullptr;      // set_event_log
  Stats stats_;
};

}  // namespace kvsim
