#pragma once
// PrefixCachingBlockAllocator: vLLM V0's prefix-caching allocator for one device
// (vllm/core/block/prefix_caching_block.py): a hashless NaiveBlockAllocator (same ids, LIFO free
// list, the shared refcounts) + _cached_blocks {content hash -> block id} (the first block
// registered under a hash wins) + an LruEvictor of free cached blocks + a BlockTracker per block
// (active, last_accessed, computed) + the ids promoted since the last mark_blocks_as_computed +
// the hit-rate metric. Content hashes are interned BlockHashTable nodes (equal ids <=> equal
// chains), computed by the block table; only their equality is observable.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/block_hash.h"
#include "core/v0/lru_evictor.h"
#include "core/v0/naive_block_allocator.h"

namespace kvsim::v0 {

/// vLLM's CacheMetricData: a hit rate kept per block of 1000 queries (same float arithmetic).
struct CacheMetricData {
  std::int64_t num_completed_blocks = 0;
  double completed_block_cache_hit_rate = 0.0;
  std::int64_t num_incompleted_block_queries = 0;
  std::int64_t num_incompleted_block_hit = 0;
  static constexpr std::int64_t kBlockSize = 1000;
  void query(bool hit);
  double hit_rate() const;
};

class PrefixCachingBlockAllocator {
 public:
  /// Ids first_id .. first_id + num_blocks - 1. `hashes` outlives the allocator.
  PrefixCachingBlockAllocator(BlockId first_id, std::int32_t num_blocks, BlockHashTable& hashes);
  ~PrefixCachingBlockAllocator();
  PrefixCachingBlockAllocator(const PrefixCachingBlockAllocator&) = delete;
  PrefixCachingBlockAllocator& operator=(const PrefixCachingBlockAllocator&) = delete;

  /// _allocate_block_id: the hashless free list first, then eviction; the id is tracked as not
  /// computed. NoFreeBlocksError when neither has a block. O(1) / O(log queue).
  BlockId allocate_block_id();
  /// allocate_immutable_block for a full block of content `hash`: the cached id (refcount + 1,
  /// restored from the evictor at 0) or a fresh id promoted under `hash`. One metric query.
  BlockId allocate_immutable(HashId hash);
  /// promote_to_immutable_block: registers `id` under `hash` (and marks it touched), or, if the
  /// hash is registered, releases `id` and shares the cached block. Returns the block's id.
  BlockId promote(BlockId id, HashId hash);
  /// cow_block_if_not_appendable for a mutable block (see NaiveBlockAllocator).
  BlockId cow_if_not_appendable(BlockId id, std::vector<BlockIdPair>& cows);
  /// _free_block_id: a block with a content hash (`hash` != kNoHash) loses a reference and at 0
  /// joins the evictor with `num_hashed_tokens` and its tracker's last_accessed; a hashless one
  /// goes back to the hashless allocator.
  void free(BlockId id, HashId hash, std::int64_t num_hashed_tokens);
  /// fork's per-block step: refcount + 1; AssertionError if the block was free.
  void fork_block(BlockId id);

  /// mark_blocks_as_accessed. KeyError for an id of another device, ValueError for a free id
  /// outside the evictor.
  void mark_accessed(std::span<const BlockId> ids, double now);
  /// mark_blocks_as_computed: every touched id becomes computed; the touched set is emptied.
  void mark_computed();
  /// block_is_computed: the tracker's flag for an active block, else "is in the evictor".
  bool block_is_computed(BlockId id) const;
  /// find_cached_blocks_prefix: vLLM's bisect_left over `hashes` for the first one that is not
  /// (registered and computed); returns how many precede it. O(log n).
  std::int64_t find_cached_prefix(std::span<const HashId> hashes) const;
  /// The block registered under `hash`, or kNoBlock.
  BlockId cached_block(HashId hash) const {
    const auto i = static_cast<std::size_t>(to_int(hash));
    return i < cached_.size() ? cached_[i] : kNoBlock;
  }
  bool in_evictor(BlockId id) const { return evictor_.contains(hashless_.physical_id(id)); }

  /// get_num_free_blocks: hashless free + evictor.
  std::int32_t num_free_blocks() const {
    return hashless_.num_free_blocks() + evictor_.num_blocks();
  }
  std::int32_t num_total_blocks() const { return hashless_.num_total_blocks(); }
  std::int32_t ref_count(BlockId id) const { return hashless_.ref_count(id); }
  bool owns(BlockId id) const { return hashless_.owns(id); }
  std::int32_t physical_id(BlockId id) const { return hashless_.physical_id(id); }
  double hit_rate() const { return metric_.hit_rate(); }
  /// reset_prefix_cache: false if a block is in use; else evicts everything (each evicted id is
  /// hashless-freed), resets trackers, evictor and metric.
  bool reset_prefix_cache();

  const NaiveBlockAllocator& hashless() const { return hashless_; }
  const LruEvictor& evictor() const { return evictor_; }
  std::int64_t num_cached_hashes() const { return num_cached_; }
  /// Sorted ids registered under a hash; sorted active computed ids; sorted touched ids.
  void cached_block_ids(std::vector<BlockId>& out) const;
  void computed_block_ids(std::vector<BlockId>& out) const;
  void touched_block_ids(std::vector<BlockId>& out) const;
  /// Blocks taken from the evictor for new content since construction.
  std::int64_t num_evictions() const { return evictions_; }

  /// Adds one to `refs[hash]` per hash reference held (registrations and the evictor).
  void count_hash_refs(std::vector<std::int32_t>& refs) const;

  /// Refcounts, free list, evictor and trackers agree; every registered block holds its hash.
  std::string find_violation() const;

 private:
  struct Tracker {
    bool active = false;
    bool computed = false;
    double last_accessed = -1;
  };
  Tracker& tracker(BlockId id) { return trackers_[static_cast<std::size_t>(physical_id(id))]; }
  const Tracker& tracker(BlockId id) const {
    return trackers_[static_cast<std::size_t>(physical_id(id))];
  }
  void track(BlockId id, bool computed);
  void untrack(BlockId id);
  void incr_refcount_cached_block(BlockId id);
  void decr_refcount_cached_block(BlockId id, HashId hash, std::int64_t num_hashed_tokens);
  void decr_refcount_hashless_block(BlockId id);
  BlockId allocate_evicted_block_id();  // kNoBlock if the evictor is empty
  void set_cached(HashId hash, BlockId id);
  void erase_cached(HashId hash);

  BlockHashTable& hashes_;
  NaiveBlockAllocator hashless_;
  LruEvictor evictor_;
  std::vector<Tracker> trackers_;   // by physical id
  std::vector<BlockId> cached_;     // by HashId: _cached_blocks (kNoBlock = absent)
  std::int64_t num_cached_ = 0;     // len(_cached_blocks)
  std::vector<BlockId> touched_;    // _touched_blocks (a set: see touched_flag_)
  std::vector<char> touched_flag_;  // by physical id
  CacheMetricData metric_;
  std::int64_t evictions_ = 0;
};

}  // namespace kvsim::v0
