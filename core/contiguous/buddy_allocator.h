#pragma once
// BuddyAllocator: a binary buddy system over token slots [0, capacity), the placement the
// PagedAttention paper gives its Orca baselines ("We assume Orca uses the buddy allocation
// algorithm to determine the memory address to store KV cache", SOSP'23 §6.1).
//
// Blocks. A block of order k holds 2^k slots and starts at a multiple of 2^k. Its buddy is the
// block of the same order at offset ^ 2^k; the two make up their parent of order k + 1.
//
// A pool that is not a power of two (the study's 15,728 slots) is managed as the maximal
// power-of-two-aligned blocks it decomposes into, one per set bit of the capacity, largest first:
// 15,728 = 8,192 + 4,096 + 2,048 + 1,024 + 256 + 64 + 32 + 16 at offsets 0, 8,192, 12,288, ...
// (each offset is a sum of larger powers of two, so each block is aligned). Two buddies coalesce
// only when their parent lies inside the pool. This is how the Linux page allocator takes memory
// that is not a power of two (it frees a range into the buddy lists as the largest aligned
// blocks that fit), and it behaves exactly as one power-of-two arena whose tail past the pool is
// allocated for good: every slot the engine's KV budget has is usable and none it lacks is
// counted.
//
// Allocation of `length` slots: the order k = ceil(log2 length); the smallest order j >= k with
// a free block, its lowest-address block; split it down to order k, keeping the lower half each
// time and freeing the upper one (so the result is deterministic and packs towards address 0).
// Free: the block coalesces with its buddy while the buddy is free and their parent lies in the
// pool. A region of `length` slots therefore holds bit_ceil(length) slots; the rest is its
// rounding (internal fragmentation in the KV breakdown).
//
// Representation: per order, a bitmap with one bit per aligned block of that order inside the
// pool (bit i: block [i * 2^k, (i + 1) * 2^k) is free at order k, i.e. on that order's free
// list), and a count of its set bits. Free and the buddy test are O(1) per order walked,
// allocation scans the bitmap words of the order it takes from; nothing allocates after
// construction.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/contiguous/slot_allocator.h"

namespace kvsim {

class BuddyAllocator final : public SlotAllocator {
 public:
  /// All `capacity_slots` slots free, as the maximal aligned power-of-two blocks of the pool.
  /// O(capacity / 64) memory. Precondition: capacity_slots >= 0.
  explicit BuddyAllocator(std::int64_t capacity_slots);

  /// bit_ceil(length). O(1).
  std::int64_t granted_length(std::int64_t length) const override;
  /// A block of order ceil(log2 length): the smallest free order that has one, lowest address
  /// first, split down. O(orders + words of the order taken from).
  [[nodiscard]] std::optional<std::int64_t> allocate(std::int64_t length) override;
  /// Frees the block [offset, offset + length) and coalesces it with its free buddies.
  /// O(orders). Precondition: length is a power of two, offset a multiple of it, the block
  /// reserved (neither it nor a block containing it is free: checked).
  void free(std::int64_t offset, std::int64_t length) override;
  /// The size of the largest free block (0 when none). O(orders).
  std::int64_t largest_allocatable() const override;
  /// The size of the pool's largest block, 2^floor(log2 capacity) (0 for an empty pool).
  std::int64_t max_allocatable() const override;
  void append_free_regions(std::vector<Extent>& out) const override;
  /// The first broken invariant ("" if none): no free bit past the pool; each order's count
  /// equals its set bits; the free blocks add up to num_free_slots() and do not overlap; no two
  /// buddies whose parent lies in the pool are both free (they would have coalesced).
  /// O(capacity / 64 + free blocks * log).
  std::string find_violation() const override;

  /// The largest order a block can have: floor(log2 capacity) (-1 for an empty pool).
  int max_order() const { return max_order_; }
  /// The number of free blocks of order k (0 outside [0, max_order()]).
  std::int64_t num_free_blocks(int k) const;

 private:
  friend struct BuddyAllocatorTestPeer;  // tests plant faults through it
  static constexpr int kMaxOrders = 63;

  bool test_free(int k, std::int64_t index) const;
  void set_free(int k, std::int64_t index);
  void clear_free(int k, std::int64_t index);
  /// Whether the parent of order k + 1 of block `index` of order k lies inside the pool.
  bool parent_in_pool(int k, std::int64_t index) const;

  int max_order_ = -1;
  std::vector<std::uint64_t> bits_;       // all orders' bitmaps, one after another
  std::vector<std::size_t> word_begin_;   // [max_order + 2]: order k's words are
                                          // bits_[word_begin_[k], word_begin_[k + 1])
  std::vector<std::int64_t> free_count_;  // [max_order + 1]: set bits of each order
};

}  // namespace kvsim
