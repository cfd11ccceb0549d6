#pragma once
// BlockTable: vLLM V0's per-sequence block table (vllm/core/block/block_table.py). vLLM keeps a
// chain of Block objects; kvsim keeps what they carry: per block its absolute id, its content
// hash once full (caching only; the hash chain is the prev_block chain), which device's
// allocator made the block object (copy-on-write and promotion go through that allocator) and the
// object's pool id in that allocator's BlockObjectPool (kept across swaps, as vLLM keeps it); per
// table the number of token slots filled and the tokens of its partially filled block (caching
// only: they become the block's content hash when it fills). Blocks 0 .. full/bs - 1 are full,
// the next one holds full % bs tokens, any later ones (lookahead) are empty.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/common/types.h"
#include "core/v0/cpu_gpu_block_allocator.h"

namespace kvsim::v0 {

class BlockTable {
 public:
  BlockTable() = default;

  /// allocate(token_ids) on `d`: full chunks as immutable blocks, the tail as one mutable block.
  /// AssertionError if already allocated or `tokens` is empty. O(blocks).
  void allocate(CpuGpuBlockAllocator& a, std::span<const Token> tokens, Device d);
  /// append_token_ids(unseen, lookahead): ensure_num_empty_slots (mutable GPU blocks at the end),
  /// then the tokens chunk by chunk into the blocks from the partial one on (copy-on-write pairs
  /// into `cows`, promotion when a block fills). O(tokens).
  void append_token_ids(CpuGpuBlockAllocator& a, std::span<const Token> tokens,
                        std::int64_t num_lookahead_slots, std::vector<BlockIdPair>& cows);
  /// fork(): `child` (empty) shares every block (refcount + 1 each). AssertionError if empty.
  void fork(CpuGpuBlockAllocator& a, BlockTable& child) const;
  /// free(): frees every block in table order (its id, then its object into the pool of the
  /// device that owns the id) and empties the table.
  void free(CpuGpuBlockAllocator& a);
  /// Drops the table without freeing its blocks (vLLM overwriting a table object: the blocks stay
  /// referenced). Releases its hash references.
  void forget(CpuGpuBlockAllocator& a);
  /// One side of CpuGpuBlockAllocator.swap: frees every block on `src`, then re-allocates each on
  /// `dst` (full blocks as immutable), appending the (old, new) absolute ids to `mapping`. The
  /// block objects stay (with their pool ids); `dst`'s pool lends each re-allocation a temporary
  /// object (IndexError when its head id is beyond its list: vLLM v0.7.2's object-pool defect).
  void swap(CpuGpuBlockAllocator& a, Device src, Device dst, std::vector<BlockIdPair>& mapping);

  /// get_num_blocks_touched_by_append_slots for `num_tokens` unseen tokens + lookahead:
  /// 1 + ceil((n - first_chunk) / bs) with first_chunk = bs - full % bs.
  std::int64_t num_blocks_touched_by_append(std::int64_t num_tokens, std::int64_t lookahead,
                                            std::int32_t block_size) const;
  /// Full blocks counted by get_num_full_blocks_touched when swapping this table onto `d`.
  std::int64_t num_full_blocks_touched(const CpuGpuBlockAllocator& a, Device d) const;

  bool allocated() const { return !ids_.empty(); }
  std::int64_t num_full_slots() const { return num_full_slots_; }
  std::span<const BlockId> ids() const { return ids_; }
  std::size_t size() const { return ids_.size(); }
  /// Pool id of block i's object (in the pool of the allocator that made it).
  std::int64_t pool_id(std::size_t i) const { return pool_ids_[i]; }
  /// Content hash of block i (kNoHash unless full and caching is on).
  HashId hash(std::size_t i) const { return hashes_.empty() ? kNoHash : hashes_[i]; }
  /// Number of full blocks (num_full_slots / block_size).
  std::int64_t num_full_blocks(std::int32_t block_size) const {
    return num_full_slots_ / block_size;
  }

  /// Adds one to `refs[hash]` for every content hash this table holds.
  void count_hash_refs(std::vector<std::int32_t>& refs) const;

  /// Shape checks against the allocator: ids owned, hashes exactly on full blocks (caching),
  /// tail length. O(blocks).
  std::string find_violation(const CpuGpuBlockAllocator& a) const;

 private:
  void push_mutable(CpuGpuBlockAllocator& a, BlockId id, Device creator);
  void append_to_block(CpuGpuBlockAllocator& a, std::size_t i, std::span<const Token> chunk,
                       std::vector<BlockIdPair>& cows);

  std::vector<BlockId> ids_;               // absolute ids, table order
  std::vector<HashId> hashes_;             // caching: one per block (references held), else empty
  std::vector<std::uint8_t> made_on_cpu_;  // the allocator that made each block object
  std::vector<std::int64_t> pool_ids_;     // each block object's pool id in that allocator's pool
  std::vector<Token> tail_;                // caching: tokens of the partially filled block
  std::int64_t num_full_slots_ = 0;
};

}  // namespace kvsim::v0
