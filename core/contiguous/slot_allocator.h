#pragma once
// SlotAllocator: where a contiguous engine places each request's region in its linear space of
// token slots [0, capacity). A region is one run of slots, held whole from admission until the
// request finishes. Three placements stand behind this interface (FitPolicy):
//   first_fit, best_fit  ExtentAllocator: a sorted list of holes; a region is exactly as long as
//                        asked and is carved from the front of the hole the policy picks.
//   buddy                BuddyAllocator: a binary buddy system; a region is rounded up to a power
//                        of two, split off a larger free block and coalesced with its buddy when
//                        freed (the PagedAttention paper's Orca baselines).
// The engine asks for `length` slots, records the extent [offset, offset + granted_length(length))
// and later frees that extent whole. The slots beyond `length` that a placement grants are the
// region's rounding: held, never written.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvsim {

/// A run of token slots [offset, offset + length).
struct Extent {
  std::int64_t offset = 0;
  std::int64_t length = 0;
  std::int64_t end() const { return offset + length; }
  bool operator==(const Extent&) const = default;
};

/// How a region is placed (scenario key engine.contiguous_fit).
enum class FitPolicy : std::uint8_t {
  kFirstFit,  // the lowest-offset hole that is long enough
  kBestFit,   // the shortest hole that is long enough (the lowest offset among equals)
  kBuddy,     // a power-of-two buddy block: the smallest free order, its lowest-address block
};
/// The FitPolicy values' names, in order (the values of scenario key engine.contiguous_fit).
inline constexpr std::string_view kFitPolicyNames[] = {"first_fit", "best_fit", "buddy"};
inline std::string_view fit_policy_name(FitPolicy p) {
  return kFitPolicyNames[static_cast<std::size_t>(p)];
}

class SlotAllocator {
 public:
  virtual ~SlotAllocator() = default;
  SlotAllocator(const SlotAllocator&) = delete;
  SlotAllocator& operator=(const SlotAllocator&) = delete;

  /// The slots an allocation of `length` slots takes: `length`, or more where the placement
  /// rounds regions up. O(1). Precondition: length >= 1.
  virtual std::int64_t granted_length(std::int64_t length) const = 0;
  /// Reserves granted_length(length) contiguous slots and returns their offset, or nullopt when
  /// no free region can hold them (nothing changes then). Allocates no memory.
  /// Precondition: length >= 1.
  [[nodiscard]] virtual std::optional<std::int64_t> allocate(std::int64_t length) = 0;
  /// Returns a region allocate() granted, whole: [offset, offset + length) with length the
  /// granted length. Allocates no memory. Precondition: that region is reserved.
  virtual void free(std::int64_t offset, std::int64_t length) = 0;
  /// The largest `length` allocate() would serve now (0 when none would be).
  virtual std::int64_t largest_allocatable() const = 0;
  /// The largest `length` allocate() can serve with every slot free.
  virtual std::int64_t max_allocatable() const = 0;
  /// Appends the free regions (holes, or free buddy blocks), sorted by offset, to `out`.
  /// For invariant walks; it may allocate.
  virtual void append_free_regions(std::vector<Extent>& out) const = 0;
  /// The first broken invariant of the free-space bookkeeping ("" if none).
  virtual std::string find_violation() const = 0;

  std::int64_t capacity() const { return capacity_; }
  FitPolicy policy() const { return policy_; }
  std::int64_t num_free_slots() const { return free_slots_; }
  std::int64_t num_reserved_slots() const { return capacity_ - free_slots_; }

 protected:
  /// All `capacity_slots` slots free. Precondition: capacity_slots >= 0.
  SlotAllocator(std::int64_t capacity_slots, FitPolicy policy);

  std::int64_t capacity_;
  FitPolicy policy_;
  std::int64_t free_slots_;
};

/// The allocator of `policy` over `capacity_slots` free slots, with room reserved for about
/// `expected_regions` live regions (so that nothing grows once warm).
std::unique_ptr<SlotAllocator> make_slot_allocator(std::int64_t capacity_slots, FitPolicy policy,
                                                   std::size_t expected_regions);

}  // namespace kvsim
