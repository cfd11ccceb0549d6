#pragma once
// ExtentAllocator: a linear space of token slots [0, capacity) handed out as contiguous extents,
// the way a system without paging reserves one region per request. The free space is a list of
// holes (free extents) kept sorted by offset and coalesced: no two holes touch, so a freed extent
// merges with the holes on either side. Allocation picks a hole by a FitPolicy and carves the
// extent from its front.
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

namespace kvsim {

/// A run of token slots [offset, offset + length).
struct Extent {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::int64_t end() const { return offset + length; }
  bool operator==(const Extent&) const = default;
};

/// Which hole an allocation takes.
enum class FitPolicy : std::uint8_t {
  kFirstFit,  // the lowest-offset hole that is long enough
  kBestFit,   // the shortest hole that is long enough (the lowest offset among equals)
};

class ExtentAllocator {
 public:
  /// All `capacity_slots` slots free (one hole, or none when 0). Room for `expected_holes` holes
  /// is reserved up front. Precondition: capacity_slots >= 0.
  explicit ExtentAllocator(std::int64_t capacity_slots, FitPolicy policy = FitPolicy::kFirstFit,
                           std::size_t expected_holes = 64);

  /// Reserves `length` contiguous slots and returns their offset, or nullopt when no hole is
  /// long enough (nothing changes then). O(holes). Precondition: length >= 1.
  [[nodiscard]] std::optional<std::int64_t> allocate(std::int64_t length);
  /// Returns [offset, offset + length) to the free space, merging it with adjacent holes.
  /// O(log holes) to find its place, O(holes) to insert. Precondition: the range is reserved
  /// (it overlaps no hole; checked) and lies in [0, capacity).
  void free(std::int64_t offset, std::int64_t length);

  std::int64_t capacity() const { return capacity_; }
  FitPolicy policy() const { return policy_; }
  std::int64_t num_free_slots() const { return free_slots_; }
  std::int64_t num_reserved_slots() const { return capacity_ - free_slots_; }
  /// The holes, sorted by offset, none touching another.
  std::span<const Extent> holes() const { return holes_; }
  /// The length of the longest hole (0 when full). O(holes).
  std::int64_t largest_hole() const;

  /// The first broken invariant ("" if none): holes non-empty, inside the space, sorted, disjoint
  /// and coalesced (a gap between consecutive holes); their total equals num_free_slots().
  /// O(holes).
  std::string find_violation() const;

 private:
  friend struct ExtentAllocatorTestPeer;  // tests plant faults through it
  std::int64_t capacity_;
  FitPolicy policy_;
  std::int64_t free_slots_;
  std::vector<Extent> holes_;
};

}  // namespace kvsim
