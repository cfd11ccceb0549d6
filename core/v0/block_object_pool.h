#pragma once
// BlockObjectPool: vLLM V0's pool of Block objects (vllm/core/block/common.py BlockPool), one per
// device allocator (the prefix-caching allocator shares its pool with its hashless allocator).
// vLLM pre-allocates 4 x num_blocks Block objects; init_block pops a pool id from the head of a
// deque of free ids and re-initializes the object at that index of its object list, free_block
// pushes the block's pool_id back at the head, and increase_pool doubles the list (the new ids
// appended at the tail) when the deque is empty.
//
// kvsim keeps no objects, only the ids: a block in a table carries the pool id of its object
// (BlockTable), and this pool the deque of free ids. That is enough to reproduce a defect of
// v0.7.2: a Block object keeps its pool_id when a swap moves it to the other device, and it is
// freed into the pool of the allocator that owns its block id then (naive_block.py /
// prefix_caching_block.py swap_in, cpu_gpu_block_allocator.py free), so a pool can receive ids of
// the other device's list; popping one beyond its own list is `self._pool[pool_id]` raising
// IndexError. (An id within the list re-initializes that pool's object; the scheduler never
// creates a table block on the CPU, so no live object is aliased that way -- only a block-manager
// fork of a swapped sequence can, and kvsim does not model that aliasing.)
//
// The deque is used through popleft/appendleft only, plus a range appended when it is empty, so
// it is a stack (the ids given back, most recent first) followed by the untouched range
// [next_fresh, size). Pool ids are never stored here per object. Allocation-free once the stack
// has grown to its working size.

#include <cstdint>
#include <vector>

namespace kvsim::v0 {

class BlockObjectPool {
 public:
  /// A pool of `pool_size` objects, every id free in ascending order (BlockPool.__init__).
  explicit BlockObjectPool(std::int64_t pool_size);

  /// BlockPool.init_block: increase_pool if no id is free (AssertionError if the pool is still
  /// empty, i.e. its size is 0), then pops the head id; IndexError if that id is beyond this
  /// pool's object list. Returns the object's pool id. O(1) amortized.
  std::int64_t init_block();
  /// BlockPool.free_block: `pool_id` (any pool's) goes to the head. O(1) amortized.
  void free_block(std::int64_t pool_id) { given_back_.push_back(pool_id); }
  /// A temporary block object taken and given straight back (a swap_in's tmp_block, the
  /// prefix-caching allocator's probe and hashless blocks): init_block's checks and growth only.
  void init_and_free() { free_block(init_block()); }

  /// The size of the object list (4 x num_blocks, doubled by each increase_pool).
  std::int64_t size() const { return size_; }
  /// The free ids in deque order (the next one popped first). O(free).
  void free_ids(std::vector<std::int64_t>& out) const;

 private:
  std::vector<std::int64_t> given_back_;  // ids pushed by free_block; back() = the deque's head
  std::int64_t next_fresh_ = 0;           // the deque's tail: next_fresh_ .. size_ - 1
  std::int64_t size_ = 0;
};

}  // namespace kvsim::v0
