#pragma once
// CpuGpuBlockAllocator: vLLM V0's device-aware allocator (vllm/core/block/
// cpu_gpu_block_allocator.py): a GPU and a CPU allocator of one kind (naive, or prefix caching
// when caching is on) over disjoint absolute ids, GPU 0..G-1 then CPU G..G+C-1 (no HPU reserved
// block). Operations on a block go to the allocator that owns its id, except those that vLLM
// routes through the allocator that created the block object (copy-on-write, promotion, fork)
// or through a named device (swap, the prefix-cache queries, which are GPU-only).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/common/block_hash.h"
#include "core/v0/block_object_pool.h"
#include "core/v0/naive_block_allocator.h"
#include "core/v0/prefix_caching_block_allocator.h"

namespace kvsim::v0 {

class CpuGpuBlockAllocator {
 public:
  CpuGpuBlockAllocator(bool enable_caching, std::int32_t block_size, std::int32_t num_gpu_blocks,
                       std::int32_t num_cpu_blocks);
  ~CpuGpuBlockAllocator();
  CpuGpuBlockAllocator(const CpuGpuBlockAllocator&) = delete;
  CpuGpuBlockAllocator& operator=(const CpuGpuBlockAllocator&) = delete;

  bool caching() const { return caching_; }
  std::int32_t block_size() const { return block_size_; }
  /// The content-hash interning shared by both devices and the block manager.
  BlockHashTable& hashes() { return hashes_; }
  const BlockHashTable& hashes() const { return hashes_; }
  Device device_of(BlockId id) const { return to_int(id) < num_gpu_ ? Device::kGpu : Device::kCpu; }

  /// allocate_mutable_block on `d`. NoFreeBlocksError when the device is full.
  BlockId allocate_mutable(Device d);
  /// allocate_immutable_block on `d` for a full block (`hash` is its content hash; ignored
  /// without caching). NoFreeBlocksError when the device is full.
  BlockId allocate_immutable(Device d, HashId hash);
  /// The naive allocate_immutable_blocks: `n` fresh ids on `d` appended to `out`, all allocated
  /// before any block is built (a NoFreeBlocksError leaves the earlier ones allocated).
  void allocate_naive_ids(Device d, std::int64_t n, std::vector<BlockId>& out);

  /// Copy-on-write check of a block appended to, by the allocator `creator` that made the block
  /// object (AssertionError if it does not own the id, as vLLM's refcounter lookup fails).
  BlockId cow_if_not_appendable(Device creator, BlockId id, std::vector<BlockIdPair>& cows);
  /// promote_to_immutable_block by the creator allocator (caching only).
  BlockId promote(Device creator, BlockId id, HashId hash);
  /// free of one block, by the allocator owning its id. `hash` != kNoHash for a full block with
  /// caching; `num_hashed_tokens` is the block's num_tokens_total.
  void free(BlockId id, HashId hash, std::int64_t num_hashed_tokens);
  /// The same on a named device (swap_out's source): AssertionError for another device's id.
  void free_on(Device d, BlockId id, HashId hash, std::int64_t num_hashed_tokens);
  /// One block's step of fork() on the allocator `d` of the table's last block.
  void fork_block(Device d, BlockId id);

  /// `d`'s pool of Block objects (BlockObjectPool: init_block, free_block). A table block's
  /// object is freed into the pool of the device that owns its block id at the time.
  BlockObjectPool& object_pool(Device d) { return pools_[idx(d)]; }
  const BlockObjectPool& object_pool(Device d) const { return pools_[idx(d)]; }

  std::int32_t num_free_blocks(Device d) const;
  std::int32_t num_total_blocks(Device d) const { return d == Device::kGpu ? num_gpu_ : num_cpu_; }
  /// get_physical_block_id: the zero-based id on `d` (ValueError for another device's id).
  std::int32_t physical_id(Device d, BlockId id) const;
  std::int32_t ref_count(BlockId id) const;

  /// get_num_full_blocks_touched's per-block test for a full block swapped onto `d` (caching
  /// only): its hash is not cached on `d`, or its cached block there is in the evictor.
  bool full_block_touched(Device d, HashId hash) const;

  /// GPU-only prefix-caching entry points (no-ops / neutral answers without caching).
  void mark_accessed(std::span<const BlockId> ids, double now);
  void mark_computed();
  std::int64_t find_cached_prefix(std::span<const HashId> hashes) const;
  /// get_prefix_cache_hit_rate(device): -1 without caching.
  double hit_rate(Device d) const;
  /// reset_prefix_cache: the CPU allocator first, the GPU one only if the CPU one succeeded.
  bool reset_prefix_cache();

  /// The device allocators (exactly one kind is non-null).
  const NaiveBlockAllocator* naive(Device d) const { return naive_[idx(d)].get(); }
  const PrefixCachingBlockAllocator* prefix(Device d) const { return prefix_[idx(d)].get(); }
  /// The hashless (naive) allocator of `d` in either mode: free list and refcounts.
  const NaiveBlockAllocator& free_lists(Device d) const;

  /// Adds one to `refs[hash]` per hash reference the allocators hold.
  void count_hash_refs(std::vector<std::int32_t>& refs) const {
    for (const auto& p : prefix_)
      if (p) p->count_hash_refs(refs);
  }

  /// Both devices' invariants. O(blocks + hashes).
  std::string find_violation() const;

 private:
  static std::size_t idx(Device d) { return static_cast<std::size_t>(d); }
  void require_owner(Device d, BlockId id) const;

  bool caching_;
  std::int32_t block_size_;
  std::int32_t num_gpu_;
  std::int32_t num_cpu_;
  BlockHashTable hashes_;
  std::unique_ptr<NaiveBlockAllocator> naive_[2];
  std::unique_ptr<PrefixCachingBlockAllocator> prefix_[2];
  BlockObjectPool pools_[2];  // by device: 4 x that device's num_blocks objects to start with
  std::vector<BlockIdPair> cpu_cows_;  // the CPU allocator's copy-on-writes (never reported)
};

}  // namespace kvsim::v0
