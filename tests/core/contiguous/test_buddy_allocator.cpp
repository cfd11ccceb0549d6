// BuddyAllocator: hand-checked splits, coalescing, alignment and the decomposition of a pool
// that is not a power of two; an allocation refused with enough free slots (external
// fragmentation); a randomized differential test against a naive slot map (the invariant walk
// and every free block compared after each operation); planted faults the walk must catch.

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/contiguous/buddy_allocator.h"

namespace kvsim {
/// Reaches into an allocator to plant faults.
struct BuddyAllocatorTestPeer {
  static void set_free(BuddyAllocator& a, int k, std::int64_t index) { a.set_free(k, index); }
  static std::vector<std::uint64_t>& bits(BuddyAllocator& a) { return a.bits_; }
  static std::vector<std::int64_t>& free_count(BuddyAllocator& a) { return a.free_count_; }
  static std::int64_t& free_slots(BuddyAllocator& a) { return a.free_slots_; }
};
}  // namespace kvsim

using namespace kvsim;

namespace {

std::vector<Extent> free_blocks(const SlotAllocator& a) {
  std::vector<Extent> out;
  a.append_free_regions(out);
  return out;
}

/// The naive model: one flag per slot. With coalescing on every free, the buddy system's free
/// blocks are exactly the aligned power-of-two blocks inside the pool that are wholly free while
/// their parent is not (or lies past the pool); allocation takes the smallest such block that
/// holds the rounded-up length, the lowest first, and reserves its first bit_ceil(length) slots.
class SlotMap {
 public:
  explicit SlotMap(std::int64_t capacity) : used_(static_cast<std::size_t>(capacity), 0) {}
  std::int64_t size() const { return static_cast<std::int64_t>(used_.size()); }
  bool all_free(std::int64_t off, std::int64_t len) const {
    if (off < 0 || off + len > size()) return false;
    for (std::int64_t i = off; i < off + len; ++i)
      if (used_[static_cast<std::size_t>(i)]) return false;
    return true;
  }
  std::vector<Extent> blocks() const {
    std::vector<Extent> out;
    for (std::int64_t s = 1; s <= size(); s *= 2)
      for (std::int64_t off = 0; off + s <= size(); off += s)
        if (all_free(off, s) && !all_free(off - off % (2 * s), 2 * s)) out.push_back({off, s});
    std::sort(out.begin(), out.end(),
              [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
    return out;
  }
  std::optional<std::int64_t> allocate(std::int64_t len) {
    const auto want = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(len)));
    std::optional<Extent> pick;
    for (const Extent& b : blocks())
      if (b.length >= want && (!pick || b.length < pick->length)) pick = b;
    if (!pick) return std::nullopt;
    for (std::int64_t i = pick->offset; i < pick->offset + want; ++i)
      used_[static_cast<std::size_t>(i)] = 1;
    return pick->offset;
  }
  void free(const Extent& e) {
    for (std::int64_t i = e.offset; i < e.end(); ++i) used_[static_cast<std::size_t>(i)] = 0;
  }
  std::int64_t num_free() const {
    return static_cast<std::int64_t>(std::count(used_.begin(), used_.end(), 0));
  }

 private:
  std::vector<std::uint8_t> used_;
};

}  // namespace

TEST_CASE("a buddy allocation splits the smallest free block, keeping the lower half", "[core]") {
  BuddyAllocator a(64);
  REQUIRE(a.find_violation().empty());
  CHECK(free_blocks(a) == std::vector<Extent>{{0, 64}});
  CHECK(a.granted_length(5) == 8);
  REQUIRE(a.allocate(5) == 0);  // 64 -> 32 + 32 -> 16 + 16 -> 8 + 8: [0, 8) granted
  CHECK(free_blocks(a) == std::vector<Extent>{{8, 8}, {16, 16}, {32, 32}});
  CHECK(a.num_free_slots() == 56);
  CHECK(a.num_free_blocks(3) == 1);
  CHECK(a.num_free_blocks(4) == 1);
  CHECK(a.num_free_blocks(5) == 1);
  CHECK(a.allocate(8) == 8);   // an exact free block: no split
  CHECK(a.allocate(3) == 16);  // a block of 4: the smallest order with a free block is 16's
  CHECK(free_blocks(a) == std::vector<Extent>{{20, 4}, {24, 8}, {32, 32}});
  CHECK(a.allocate(1) == 20);  // splits [20, 24) into 1 + 1 + 2
  CHECK(free_blocks(a) == std::vector<Extent>{{21, 1}, {22, 2}, {24, 8}, {32, 32}});
  CHECK(a.largest_allocatable() == 32);
  CHECK(a.find_violation().empty());
}

TEST_CASE("a freed buddy block coalesces with its free buddy, up to the whole pool", "[core]") {
  BuddyAllocator a(64);
  REQUIRE(a.allocate(16) == 0);
  REQUIRE(a.allocate(16) == 16);
  REQUIRE(a.allocate(16) == 32);
  REQUIRE(a.allocate(16) == 48);
  a.free(16, 16);  // its buddy [0, 16) is held: no merge
  CHECK(free_blocks(a) == std::vector<Extent>{{16, 16}});
  a.free(32, 16);  // adjacent to [16, 32) but not its buddy ([48, 64) is): no merge
  CHECK(free_blocks(a) == std::vector<Extent>{{16, 16}, {32, 16}});
  a.free(0, 16);  // merges with [16, 32) into [0, 32); [32, 64) is not wholly free
  CHECK(free_blocks(a) == std::vector<Extent>{{0, 32}, {32, 16}});
  REQUIRE(a.find_violation().empty());
  a.free(48, 16);  // [32, 64), then with [0, 32): the whole pool again
  CHECK(free_blocks(a) == std::vector<Extent>{{0, 64}});
  CHECK(a.num_free_slots() == 64);
  CHECK(a.num_free_blocks(6) == 1);
  for (int k = 0; k < 6; ++k) CHECK(a.num_free_blocks(k) == 0);
  CHECK(a.find_violation().empty());
}

TEST_CASE("buddy blocks are aligned to their size and lengths round up to a power of two",
          "[core]") {
  BuddyAllocator a(1024);
  CHECK(a.granted_length(1) == 1);
  CHECK(a.granted_length(3) == 4);
  CHECK(a.granted_length(64) == 64);
  CHECK(a.granted_length(65) == 128);
  CHECK(a.granted_length(1025) == 2048);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    const auto len = 1 + static_cast<std::int64_t>(rng() % 100);
    const std::optional<std::int64_t> off = a.allocate(len);
    if (!off) break;
    CHECK(*off % a.granted_length(len) == 0);
  }
  for (const Extent& b : free_blocks(a)) {
    CHECK(std::has_single_bit(static_cast<std::uint64_t>(b.length)));
    CHECK(b.offset % b.length == 0);
  }
}

TEST_CASE("a pool that is not a power of two is its maximal aligned power-of-two blocks",
          "[core]") {
  // The fragmentation study's pool: 983 blocks of 16 = 15,728 slots.
  BuddyAllocator a(15'728);
  CHECK(free_blocks(a) == std::vector<Extent>{{0, 8192},
                                              {8192, 4096},
                                              {12'288, 2048},
                                              {14'336, 1024},
                                              {15'360, 256},
                                              {15'616, 64},
                                              {15'680, 32},
                                              {15'712, 16}});
  CHECK(a.max_order() == 13);
  CHECK(a.max_allocatable() == 8192);
  CHECK(a.largest_allocatable() == 8192);
  CHECK(a.allocate(8193) == std::nullopt);  // no block of 16,384, though 15,728 slots are free
  CHECK(a.num_free_slots() == 15'728);
  // A block at the tail never coalesces past the pool: [15,712, 15,728)'s buddy would be
  // [15,728, 15,744).
  REQUIRE(a.allocate(16) == 15'712);
  a.free(15'712, 16);
  CHECK(free_blocks(a).back() == Extent{15'712, 16});
  // Seven blocks of 2,048 fit, the smallest free block first: [12,288, 14,336) whole, then
  // [8192, 12,288) split in two, then [0, 8192) in four. The 1,392 slots left
  // ([14,336, 15,728)) serve no eighth: orca-max's external fragmentation in the paper.
  for (const std::int64_t off : {12'288, 8192, 10'240, 0, 2048, 4096, 6144})
    REQUIRE(a.allocate(2048) == off);
  CHECK(a.allocate(2048) == std::nullopt);
  CHECK(a.num_free_slots() == 1392);
  CHECK(a.largest_allocatable() == 1024);
  CHECK(a.find_violation().empty());
  BuddyAllocator none(0);
  CHECK(none.allocate(1) == std::nullopt);
  CHECK(none.max_allocatable() == 0);
  CHECK(none.find_violation().empty());
}

TEST_CASE("a buddy allocation fails with enough free slots when no aligned block holds it",
          "[core]") {
  BuddyAllocator a(64);
  for (int i = 0; i < 8; ++i) REQUIRE(a.allocate(8) == 8 * i);
  a.free(8, 8);
  a.free(16, 8);  // [8, 24): 16 contiguous free slots, but [8, 16)'s buddy is [0, 8)
  a.free(40, 8);
  CHECK(a.num_free_slots() == 24);
  CHECK(free_blocks(a) == std::vector<Extent>{{8, 8}, {16, 8}, {40, 8}});
  CHECK(a.largest_allocatable() == 8);
  CHECK(a.allocate(16) == std::nullopt);  // 24 free, 16 of them contiguous, no free block of 16
  CHECK(a.allocate(9) == std::nullopt);   // 9 rounds up to 16
  CHECK(a.num_free_slots() == 24);        // a refused allocation changes nothing
  CHECK(a.allocate(8) == 8);              // lowest address first among equal blocks
  CHECK(a.find_violation().empty());
}

TEST_CASE("random buddy allocations match the naive slot map, invariants after every one",
          "[core]") {
  std::int64_t total_ops = 0, failed = 0, external = 0, coalesced = 0;
  for (std::uint64_t seed = 1; total_ops < 100'000; ++seed) {
    std::mt19937_64 rng(seed);
    const auto capacity = static_cast<std::int64_t>(1 + rng() % 300);
    INFO("seed " << seed << ", capacity " << capacity);
    BuddyAllocator a(capacity);
    SlotMap m(capacity);
    std::vector<Extent> live;
    const std::int64_t max_len =
        1 + static_cast<std::int64_t>(rng() % 3 == 0 ? capacity / 16 : capacity / 3);
    for (int op = 0; op < 5'000; ++op, ++total_ops) {
      INFO("op " << op);
      if (live.empty() || rng() % 100 < 55) {
        const auto len = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_len));
        const std::optional<std::int64_t> got = a.allocate(len);
        REQUIRE(got == m.allocate(len));
        if (got) {
          live.push_back({*got, a.granted_length(len)});
        } else {
          ++failed;
          external += a.num_free_slots() >= len;
        }
      } else {
        const std::size_t i = rng() % live.size();
        const Extent e = live[i];
        const std::size_t before = free_blocks(a).size();
        a.free(e.offset, e.length);
        m.free(e);
        coalesced += free_blocks(a).size() <= before;
        live[i] = live.back();
        live.pop_back();
      }
      REQUIRE(a.find_violation().empty());
      REQUIRE(free_blocks(a) == m.blocks());
      REQUIRE(a.num_free_slots() == m.num_free());
    }
  }
  CHECK(failed > 1000);
  CHECK(external > 1000);   // refused with enough free slots: fragmentation
  CHECK(coalesced > 1000);  // frees that merged with a buddy
}

TEST_CASE("the buddy invariant walk catches planted faults in the free blocks", "[core]") {
  BuddyAllocator a(64);
  REQUIRE(a.allocate(16) == 0);  // free: [16, 32) (order 4) and [32, 64) (order 5)
  REQUIRE(a.find_violation().empty());
  auto& free_slots = BuddyAllocatorTestPeer::free_slots(a);

  SECTION("two buddies both free") {
    BuddyAllocatorTestPeer::set_free(a, 4, 0);  // [0, 16) beside its free buddy [16, 32)
    free_slots += 16;
    CHECK(a.find_violation() == "two buddies are both free (not coalesced)");
  }
  SECTION("two free blocks overlap") {
    BuddyAllocatorTestPeer::set_free(a, 3, 3);  // [24, 32) inside the free [16, 32)
    free_slots += 8;
    CHECK(a.find_violation() == "two free blocks overlap");
  }
  SECTION("an order's count disagrees with its free blocks") {
    BuddyAllocatorTestPeer::free_count(a)[4] += 1;
    CHECK(a.find_violation() == "an order's free count differs from its free blocks");
  }
  SECTION("a lost free: the count says free, no block holds it") {
    free_slots += 16;
    CHECK(a.find_violation() == "the free blocks' total differs from the free-slot count");
  }
  SECTION("a free-slot count out of range") {
    free_slots = 65;
    CHECK(a.find_violation() == "free-slot count out of range");
  }
}

TEST_CASE("the buddy invariant walk catches a free block past the end of the pool", "[core]") {
  BuddyAllocator a(12);  // blocks [0, 8) and [8, 12); order 2 has three blocks in the pool
  REQUIRE(free_blocks(a) == std::vector<Extent>{{0, 8}, {8, 4}});
  REQUIRE(a.find_violation().empty());
  // Order 2's bitmap word: bit 3 would be [12, 16), outside the pool.
  const auto word = static_cast<std::size_t>(1 + 1);  // order 0: 12 bits, order 1: 6, order 2: 3
  BuddyAllocatorTestPeer::bits(a)[word] |= std::uint64_t{1} << 3;
  BuddyAllocatorTestPeer::free_count(a)[2] += 1;
  CHECK(a.find_violation() == "a free block past the end of the pool");
}
