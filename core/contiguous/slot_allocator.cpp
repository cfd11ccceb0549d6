#include "core/contiguous/slot_allocator.h"

#include "core/common/assert.h"
#include "core/contiguous/buddy_allocator.h"
#include "core/contiguous/extent_allocator.h"

namespace kvsim {

SlotAllocator::SlotAllocator(std::int64_t capacity_slots, FitPolicy policy)
    : capacity_(capacity_slots), policy_(policy), free_slots_(capacity_slots) {
  KVSIM_ASSERT(capacity_slots >= 0);
}

std::unique_ptr<SlotAllocator> make_slot_allocator(std::int64_t capacity_slots, FitPolicy policy,
                                                   std::size_t expected_regions) {
  if (policy == FitPolicy::kBuddy) return std::make_unique<BuddyAllocator>(capacity_slots);
  return std::make_unique<ExtentAllocator>(capacity_slots, policy, expected_regions);
}

}  // namespace kvsim
