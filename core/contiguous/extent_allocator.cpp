#include "core/contiguous/extent_allocator.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

ExtentAllocator::ExtentAllocator(std::int64_t capacity_slots, FitPolicy policy,
                                 std::size_t expected_holes)
    : SlotAllocator(capacity_slots, policy) {
  KVSIM_ASSERT(policy == FitPolicy::kFirstFit || policy == FitPolicy::kBestFit,
               "an extent allocator places first fit or best fit");
  holes_.reserve(std::max<std::size_t>(expected_holes, 1));
  if (capacity_slots > 0) holes_.push_back({0, capacity_slots});
}

std::optional<std::int64_t> ExtentAllocator::allocate(std::int64_t length) {
  KVSIM_ASSERT(length >= 1, "an extent holds at least one slot");
  const std::size_t n = holes_.size();
  std::size_t pick = n;
  if (policy_ == FitPolicy::kFirstFit) {
    for (std::size_t i = 0; i < n; ++i)
      if (holes_[i].length >= length) {
        pick = i;
        break;
      }
  } else {
    for (std::size_t i = 0; i < n; ++i)
      if (holes_[i].length >= length && (pick == n || holes_[i].length < holes_[pick].length)) {
        pick = i;
        if (holes_[i].length == length) break;  // exact: no shorter hole can follow
      }
  }
  if (pick == n) return std::nullopt;
  Extent& h = holes_[pick];
  const std::int64_t offset = h.offset;
  if (h.length == length)
    holes_.erase(holes_.begin() + static_cast<std::ptrdiff_t>(pick));
  else {
    h.offset += length;
    h.length -= length;
  }
  free_slots_ -= length;
  return offset;
}

void ExtentAllocator::free(std::int64_t offset, std::int64_t length) {
  KVSIM_ASSERT(length >= 1 && offset >= 0 && offset + length <= capacity_,
               "freeing a range outside the slot space");
  // The first hole that starts after the freed range; the one before it (if any) ends before it.
  const auto next = std::upper_bound(holes_.begin(), holes_.end(), offset,
                                     [](std::int64_t o, const Extent& h) { return o < h.offset; });
  const bool has_prev = next != holes_.begin();
  const bool has_next = next != holes_.end();
  KVSIM_ASSERT(!has_prev || std::prev(next)->end() <= offset,
               "freeing a range that overlaps a hole (a double free?)");
  KVSIM_ASSERT(!has_next || offset + length <= next->offset,
               "freeing a range that overlaps a hole (a double free?)");
  const bool join_prev = has_prev && std::prev(next)->end() == offset;
  const bool join_next = has_next && offset + length == next->offset;
  if (join_prev && join_next) {
    std::prev(next)->length += length + next->length;
    holes_.erase(next);
  } else if (join_prev) {
    std::prev(next)->length += length;
  } else if (join_next) {
    next->offset = offset;
    next->length += length;
  } else {
    holes_.insert(next, Extent{offset, length});
  }
  free_slots_ += length;
}

std::int64_t ExtentAllocator::largest_hole() const {
  std::int64_t best = 0;
  for (const Extent& h : holes_) best = std::max(best, h.length);
  return best;
}

void ExtentAllocator::append_free_regions(std::vector<Extent>& out) const {
  out.insert(out.end(), holes_.begin(), holes_.end());
}

std::string ExtentAllocator::find_violation() const {
  std::int64_t total = 0;
  for (std::size_t i = 0; i < holes_.size(); ++i) {
    const Extent& h = holes_[i];
    KVSIM_CHECK(h.length >= 1, "an empty hole in the free list");
    KVSIM_CHECK(h.offset >= 0 && h.end() <= capacity_, "a hole outside the slot space");
    if (i > 0) {
      KVSIM_CHECK(holes_[i - 1].offset < h.offset, "holes not sorted by offset");
      KVSIM_CHECK(holes_[i - 1].end() <= h.offset, "two holes overlap");
      KVSIM_CHECK(holes_[i - 1].end() < h.offset, "two holes touch (not coalesced)");
    }
    total += h.length;
  }
  KVSIM_CHECK(total == free_slots_, "the holes' total differs from the free-slot count");
  KVSIM_CHECK(free_slots_ >= 0 && free_slots_ <= capacity_, "free-slot count out of range");
  return {};
}

}  // namespace kvsim
