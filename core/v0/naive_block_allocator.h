#pragma once
// NaiveBlockAllocator: vLLM V0's allocator without prefix caching (vllm/core/block/naive_block.py,
// common.py RefCounter): one device's block ids, their reference counts, and the free list.
// The free list is vLLM's deque used through popleft/appendleft only: a LIFO stack whose initial
// contents are the ids in ascending order, so the last id freed is the next one allocated.
// The prefix-caching allocator composes one of these as its hashless allocator (shared refcounts).

#include <boost/intrusive/slist.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/types.h"
#include "core/v0/v0_types.h"

namespace kvsim::v0 {

#ifdef NDEBUG
using V0LinkMode = boost::intrusive::link_mode<boost::intrusive::normal_link>;
#else
using V0LinkMode = boost::intrusive::link_mode<boost::intrusive::safe_link>;
#endif

class NaiveBlockAllocator {
 public:
  /// Ids first_id .. first_id + num_blocks - 1 (absolute ids), all free, refcount 0.
  NaiveBlockAllocator(BlockId first_id, std::int32_t num_blocks);
  NaiveBlockAllocator(const NaiveBlockAllocator&) = delete;
  NaiveBlockAllocator& operator=(const NaiveBlockAllocator&) = delete;
  ~NaiveBlockAllocator();

  /// vLLM's _allocate_block_id: pops the head of the free list and sets its refcount to 1.
  /// kNoBlock when the list is empty (vLLM raises NoFreeBlocksError; callers decide). O(1).
  BlockId allocate_block_id();
  /// vLLM's _free_block_id: refcount - 1; at 0 the id is pushed at the head of the free list.
  /// AssertionError if the refcount is already 0. O(1).
  void free_block_id(BlockId id);
  /// RefCounter.incr; returns the new count. O(1).
  std::int32_t incr_ref(BlockId id) { return ++node(id).refcount; }
  /// RefCounter.decr without touching the free list (a cached block at 0 goes to the evictor).
  /// AssertionError if the refcount is already 0.
  std::int32_t decr_ref(BlockId id) {
    Node& n = node(id);
    vllm_assert(n.refcount > 0, "assert refcount > 0");
    return --n.refcount;
  }
  std::int32_t ref_count(BlockId id) const { return node(id).refcount; }

  /// cow_block_if_not_appendable: `id` itself if its refcount <= 1; else the shared id is released
  /// (its count stays >= 1), a fresh id is allocated (NoFreeBlocksError if none) and the pair
  /// (id, new) is appended to `cows`. O(1).
  BlockId cow_if_not_appendable(BlockId id, std::vector<BlockIdPair>& cows);

  std::int32_t num_free_blocks() const { return static_cast<std::int32_t>(free_.size()); }
  /// Ids handed out by allocate_block_id since construction.
  std::int64_t num_allocations() const { return num_allocations_; }
  std::int32_t num_total_blocks() const { return static_cast<std::int32_t>(nodes_.size()); }
  BlockId first_id() const { return first_id_; }
  bool owns(BlockId id) const {
    return to_int(id) >= to_int(first_id_) && to_int(id) < to_int(first_id_) + num_total_blocks();
  }
  /// get_physical_block_id: the zero-based index of `id` on this device.
  std::int32_t physical_id(BlockId id) const { return to_int(id) - to_int(first_id_); }

  /// The free ids, the next one allocated first (for snapshots and tests). O(free).
  void free_list(std::vector<BlockId>& out) const;

  /// Free list and refcounts agree: every id is on the list iff its refcount is 0, once, and the
  /// list length matches. `extra_free[i]` (optional, per physical id) marks ids that are free
  /// elsewhere (the prefix-caching evictor): refcount 0 but not on this list. O(num_blocks).
  std::string find_violation(const std::vector<bool>* extra_free = nullptr) const;

 private:
  struct Node {
    boost::intrusive::slist_member_hook<V0LinkMode> hook;
    std::int32_t refcount = 0;
  };
  using FreeList = boost::intrusive::slist<
      Node,
      boost::intrusive::member_hook<Node, boost::intrusive::slist_member_hook<V0LinkMode>,
                                    &Node::hook>,
      boost::intrusive::constant_time_size<true>>;

  Node& node(BlockId id) { return nodes_[static_cast<std::size_t>(physical_id(id))]; }
  const Node& node(BlockId id) const { return nodes_[static_cast<std::size_t>(physical_id(id))]; }
  BlockId id_of(const Node& n) const {
    return BlockId{to_int(first_id_) + static_cast<std::int32_t>(&n - nodes_.data())};
  }

  BlockId first_id_;
  std::vector<Node> nodes_;  // by physical id; never resized after construction
  FreeList free_;
  std::int64_t num_allocations_ = 0;
};

}  // namespace kvsim::v0
