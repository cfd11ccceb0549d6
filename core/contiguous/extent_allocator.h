#pragma once
// ExtentAllocator: a linear space of token slots [0, capacity) handed out as contiguous extents,
// the way a system without paging reserves one region per request. The free space is a list of
// holes (free extents) kept sorted by offset and coalesced: no two holes touch, so a freed extent
// merges with the holes on either side. Allocation picks a hole by a FitPolicy (first fit or best
// fit) and carves the extent from its front; an extent is exactly as long as asked. One of the
// placements behind SlotAllocator (core/contiguous/slot_allocator.h).
//
// Representation: a sorted std::vector of holes. The number of holes is at most the number of
// live extents + 1 (each live extent ends at most one hole), a few hundred for a serving batch, so
// a contiguous array beats a node-based tree: a lookup is a binary search (free) or one linear
// scan (allocate), and an insert or erase moves a few cache lines. Nothing allocates once the
// vector has reached its high-water size (reserve it for the expected live extents).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/contiguous/slot_allocator.h"

namespace kvsim {

class ExtentAllocator : public SlotAllocator {
 public:
  /// All `capacity_slots` slots free (one hole, or none when 0). Room for `expected_holes` holes
  /// is reserved up front. Precondition: capacity_slots >= 0, policy first or best fit.
  explicit ExtentAllocator(std::int64_t capacity_slots, FitPolicy policy = FitPolicy::kFirstFit,
                           std::size_t expected_holes = 64);

  /// `length`: an extent is exactly as long as asked.
  std::int64_t granted_length(std::int64_t length) const override { return length; }
  /// Reserves `length` contiguous slots and returns their offset, or nullopt when no hole is
  /// long enough (nothing changes then). O(holes). Precondition: length >= 1.
  [[nodiscard]] std::optional<std::int64_t> allocate(std::int64_t length) override;
  /// Returns [offset, offset + length) to the free space, merging it with adjacent holes.
  /// O(log holes) to find its place, O(holes) to insert. Precondition: the range is reserved
  /// (it overlaps no hole; checked) and lies in [0, capacity).
  void free(std::int64_t offset, std::int64_t length) override;

  /// The holes, sorted by offset, none touching another.
  std::span<const Extent> holes() const { return holes_; }
  /// The length of the longest hole (0 when full). O(holes).
  std::int64_t largest_hole() const;
  /// largest_hole(). O(holes).
  std::int64_t largest_allocatable() const override { return largest_hole(); }
  /// capacity(): one hole spans the empty pool.
  std::int64_t max_allocatable() const override { return capacity_; }
  /// Appends holes().
  void append_free_regions(std::vector<Extent>& out) const override;

  /// The first broken invariant ("" if none): holes non-empty, inside the space, sorted, disjoint
  /// and coalesced (a gap between consecutive holes); their total equals num_free_slots().
  /// O(holes).
  std::string find_violation() const override;

 private:
  friend struct ExtentAllocatorTestPeer;  // tests plant faults through it
  std::vector<Extent> holes_;
};

}  // namespace kvsim
