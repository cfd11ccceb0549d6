#include "core/contiguous/buddy_allocator.h"

#include <algorithm>
#include <bit>

#include "core/common/assert.h"

namespace kvsim {

namespace {

std::uint64_t ucast(std::int64_t v) { return static_cast<std::uint64_t>(v); }

}  // namespace

BuddyAllocator::BuddyAllocator(std::int64_t capacity_slots)
    : SlotAllocator(capacity_slots, FitPolicy::kBuddy) {
  if (capacity_slots == 0) return;
  max_order_ = static_cast<int>(std::bit_width(ucast(capacity_slots))) - 1;
  KVSIM_ASSERT(max_order_ < kMaxOrders);
  const auto orders = static_cast<std::size_t>(max_order_) + 1;
  word_begin_.assign(orders + 1, 0);
  for (std::size_t k = 0; k < orders; ++k) {
    const std::int64_t blocks = capacity_slots >> k;  // aligned blocks of order k in the pool
    word_begin_[k + 1] = word_begin_[k] + static_cast<std::size_t>((blocks + 63) / 64);
  }
  bits_.assign(word_begin_[orders], 0);
  free_count_.assign(orders, 0);
  // The maximal aligned blocks of the pool, largest first: one per set bit of the capacity.
  std::int64_t at = 0;
  for (int k = max_order_; k >= 0; --k) {
    if ((capacity_slots >> k & 1) == 0) continue;
    set_free(k, at >> k);
    at += std::int64_t{1} << k;
  }
}

bool BuddyAllocator::test_free(int k, std::int64_t index) const {
  const std::uint64_t word =
      bits_[word_begin_[static_cast<std::size_t>(k)] + static_cast<std::size_t>(index >> 6)];
  return (word >> (index & 63) & 1) != 0;
}

void BuddyAllocator::set_free(int k, std::int64_t index) {
  bits_[word_begin_[static_cast<std::size_t>(k)] + static_cast<std::size_t>(index >> 6)] |=
      std::uint64_t{1} << (index & 63);
  ++free_count_[static_cast<std::size_t>(k)];
}

void BuddyAllocator::clear_free(int k, std::int64_t index) {
  bits_[word_begin_[static_cast<std::size_t>(k)] + static_cast<std::size_t>(index >> 6)] &=
      ~(std::uint64_t{1} << (index & 63));
  --free_count_[static_cast<std::size_t>(k)];
}

bool BuddyAllocator::parent_in_pool(int k, std::int64_t index) const {
  return k < max_order_ && ((index >> 1) + 1) << (k + 1) <= capacity_;
}

std::int64_t BuddyAllocator::granted_length(std::int64_t length) const {
  KVSIM_ASSERT(length >= 1, "a region holds at least one slot");
  return static_cast<std::int64_t>(std::bit_ceil(ucast(length)));
}

std::optional<std::int64_t> BuddyAllocator::allocate(std::int64_t length) {
  KVSIM_ASSERT(length >= 1, "a region holds at least one slot");
  if (length > max_allocatable()) return std::nullopt;
  const int k = static_cast<int>(std::bit_width(ucast(length - 1)));  // ceil(log2 length)
  int j = k;
  while (j <= max_order_ && free_count_[static_cast<std::size_t>(j)] == 0) ++j;
  if (j > max_order_) return std::nullopt;
  // The lowest-address free block of order j.
  const std::size_t first = word_begin_[static_cast<std::size_t>(j)];
  std::size_t w = first;
  while (bits_[w] == 0) ++w;  // free_count_[j] > 0: a set bit exists
  const std::int64_t index =
      static_cast<std::int64_t>((w - first) * 64) + std::countr_zero(bits_[w]);
  clear_free(j, index);
  const std::int64_t offset = index << j;
  // Split down to order k: keep the lower half, free the upper one.
  while (j > k) {
    --j;
    set_free(j, (offset >> j) + 1);
  }
  free_slots_ -= std::int64_t{1} << k;
  return offset;
}

void BuddyAllocator::free(std::int64_t offset, std::int64_t length) {
  KVSIM_ASSERT(length >= 1 && offset >= 0 && offset + length <= capacity_,
               "freeing a range outside the slot space");
  KVSIM_ASSERT(std::has_single_bit(ucast(length)) && offset % length == 0,
               "freeing a range that is not a buddy block (a power of two, aligned to its size)");
  int k = std::countr_zero(ucast(length));
  KVSIM_ASSERT(k <= max_order_, "freeing a block larger than the pool's largest");
  // Neither the block nor a free block containing it may be free already.
  for (int a = k; a <= max_order_; ++a) {
    const std::int64_t up = offset >> a;
    if (((up + 1) << a) > capacity_) break;  // no block of order a covers it in the pool
    KVSIM_ASSERT(!test_free(a, up),
                 "freeing a block that is (inside) a free block (a double free?)");
  }
  std::int64_t index = offset >> k;
  while (parent_in_pool(k, index) && test_free(k, index ^ 1)) {
    clear_free(k, index ^ 1);
    index >>= 1;
    ++k;
  }
  set_free(k, index);
  free_slots_ += length;
}

std::int64_t BuddyAllocator::largest_allocatable() const {
  for (int k = max_order_; k >= 0; --k)
    if (free_count_[static_cast<std::size_t>(k)] > 0) return std::int64_t{1} << k;
  return 0;
}

std::int64_t BuddyAllocator::max_allocatable() const {
  return max_order_ >= 0 ? std::int64_t{1} << max_order_ : 0;
}

std::int64_t BuddyAllocator::num_free_blocks(int k) const {
  return k >= 0 && k <= max_order_ ? free_count_[static_cast<std::size_t>(k)] : 0;
}

void BuddyAllocator::append_free_regions(std::vector<Extent>& out) const {
  const std::size_t from = out.size();
  for (int k = 0; k <= max_order_; ++k) {
    const std::size_t first = word_begin_[static_cast<std::size_t>(k)];
    for (std::size_t w = first; w < word_begin_[static_cast<std::size_t>(k) + 1]; ++w)
      for (std::uint64_t bits = bits_[w]; bits != 0; bits &= bits - 1) {
        const std::int64_t index =
            static_cast<std::int64_t>((w - first) * 64) + std::countr_zero(bits);
        out.push_back({index << k, std::int64_t{1} << k});
      }
  }
  std::sort(out.begin() + static_cast<std::ptrdiff_t>(from), out.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
}

std::string BuddyAllocator::find_violation() const {
  KVSIM_CHECK(free_slots_ >= 0 && free_slots_ <= capacity_, "free-slot count out of range");
  std::int64_t total = 0;
  for (int k = 0; k <= max_order_; ++k) {
    const auto uk = static_cast<std::size_t>(k);
    const std::int64_t blocks = capacity_ >> k;
    std::int64_t set = 0;
    for (std::size_t w = word_begin_[uk]; w < word_begin_[uk + 1]; ++w)
      set += std::popcount(bits_[w]);
    if (blocks % 64 != 0) {
      const std::uint64_t last = bits_[word_begin_[uk + 1] - 1];
      KVSIM_CHECK(last >> (blocks % 64) == 0, "a free block past the end of the pool");
    }
    KVSIM_CHECK(set == free_count_[uk], "an order's free count differs from its free blocks");
    total += set << k;
  }
  KVSIM_CHECK(total == free_slots_, "the free blocks' total differs from the free-slot count");
  std::vector<Extent> regions;
  append_free_regions(regions);
  for (std::size_t i = 1; i < regions.size(); ++i)
    KVSIM_CHECK(regions[i - 1].end() <= regions[i].offset, "two free blocks overlap");
  for (const Extent& r : regions) {
    const int k = std::countr_zero(ucast(r.length));
    const std::int64_t index = r.offset >> k;
    KVSIM_CHECK(!(parent_in_pool(k, index) && test_free(k, index ^ 1)),
                "two buddies are both free (not coalesced)");
  }
  return {};
}

}  // namespace kvsim
