// ExtentAllocator: hand-checked cases, a randomized differential test against a naive byte map
// (more than a million allocate/free operations, the invariant walk and the whole hole list
// compared after every one), and planted faults the invariant walk must catch.

#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "core/contiguous/extent_allocator.h"

namespace kvsim {
/// Reaches into an allocator to plant faults.
struct ExtentAllocatorTestPeer {
  static std::vector<Extent>& holes(ExtentAllocator& a) { return a.holes_; }
  static std::int64_t& free_slots(ExtentAllocator& a) { return a.free_slots_; }
};
}  // namespace kvsim

using namespace kvsim;

namespace {

std::vector<Extent> holes_of(const ExtentAllocator& a) {
  return {a.holes().begin(), a.holes().end()};
}

/// The naive model: one flag per slot; holes are the maximal runs of free slots.
class ByteMap {
 public:
  ByteMap(std::int64_t capacity, FitPolicy policy)
      : used_(static_cast<std::size_t>(capacity), 0), policy_(policy) {}

  std::vector<Extent> holes() const {
    std::vector<Extent> out;
    const auto n = static_cast<std::int64_t>(used_.size());
    for (std::int64_t i = 0; i < n;) {
      if (used_[static_cast<std::size_t>(i)]) {
        ++i;
        continue;
      }
      std::int64_t j = i;
      while (j < n && !used_[static_cast<std::size_t>(j)]) ++j;
      out.push_back({i, j - i});
      i = j;
    }
    return out;
  }
  std::optional<std::int64_t> allocate(std::int64_t length) {
    std::optional<Extent> pick;
    for (const Extent& h : holes()) {
      if (h.length < length) continue;
      if (policy_ == FitPolicy::kFirstFit) {
        pick = h;
        break;
      }
      if (!pick || h.length < pick->length) pick = h;
    }
    if (!pick) return std::nullopt;
    for (std::int64_t s = pick->offset; s < pick->offset + length; ++s) {
      REQUIRE(!used_[static_cast<std::size_t>(s)]);
      used_[static_cast<std::size_t>(s)] = 1;
    }
    return pick->offset;
  }
  void free(const Extent& e) {
    for (std::int64_t s = e.offset; s < e.end(); ++s) {
      REQUIRE(used_[static_cast<std::size_t>(s)]);
      used_[static_cast<std::size_t>(s)] = 0;
    }
  }
  std::int64_t num_free() const {
    std::int64_t n = 0;
    for (auto u : used_) n += u == 0;
    return n;
  }

 private:
  std::vector<std::uint8_t> used_;
  FitPolicy policy_;
};

}  // namespace

TEST_CASE("first fit carves extents from the lowest hole and coalesces freed ones", "[core]") {
  ExtentAllocator a(100);
  REQUIRE(a.allocate(30) == 0);
  REQUIRE(a.allocate(20) == 30);
  REQUIRE(a.allocate(10) == 50);
  CHECK(holes_of(a) == std::vector<Extent>{{60, 40}});
  a.free(30, 20);  // a hole between two extents
  CHECK(holes_of(a) == std::vector<Extent>{{30, 20}, {60, 40}});
  CHECK(a.allocate(15) == 30);  // first fit: the lower hole, though the upper one is longer
  CHECK(holes_of(a) == std::vector<Extent>{{45, 5}, {60, 40}});
  CHECK(a.allocate(41) == std::nullopt);  // 45 free slots, no 41 of them contiguous
  CHECK(a.num_free_slots() == 45);
  CHECK(a.largest_hole() == 40);
  a.free(50, 10);  // joins both neighbours: [45, 100)
  CHECK(holes_of(a) == std::vector<Extent>{{45, 55}});
  a.free(0, 30);  // [30, 45) is still reserved: no merge
  CHECK(holes_of(a) == std::vector<Extent>{{0, 30}, {45, 55}});
  a.free(30, 15);
  CHECK(holes_of(a) == std::vector<Extent>{{0, 100}});
  CHECK(a.num_free_slots() == 100);
  CHECK(a.find_violation().empty());
}

TEST_CASE("best fit takes the shortest hole that fits, the lowest among equals", "[core]") {
  ExtentAllocator a(100, FitPolicy::kBestFit);
  for (int i = 0; i < 10; ++i) REQUIRE(a.allocate(10) == 10 * i);
  a.free(0, 10);                // hole of 10 at 0
  a.free(30, 20);               // hole of 20 at 30
  a.free(70, 10);               // hole of 10 at 70
  a.free(90, 10);               // hole of 10 at 90
  CHECK(a.allocate(15) == 30);  // the only hole of 15+; first fit would agree
  CHECK(a.allocate(8) == 0);    // three holes of 10 and one of 5: the lowest 10
  CHECK(a.allocate(5) == 45);   // exactly the 5 left at 45
  CHECK(a.allocate(10) == 70);
  CHECK(holes_of(a) == std::vector<Extent>{{8, 2}, {90, 10}});
  CHECK(a.find_violation().empty());

  ExtentAllocator f(100, FitPolicy::kFirstFit);
  REQUIRE(f.allocate(50) == 0);
  REQUIRE(f.allocate(10) == 50);
  f.free(0, 50);
  CHECK(f.allocate(5) == 0);  // first fit: the long hole at 0; best fit would take [60, 100)
  ExtentAllocator b(100, FitPolicy::kBestFit);
  REQUIRE(b.allocate(50) == 0);
  REQUIRE(b.allocate(10) == 50);
  b.free(0, 50);
  CHECK(b.allocate(5) == 60);
}

TEST_CASE("an empty space and a full one behave", "[core]") {
  ExtentAllocator none(0);
  CHECK(none.allocate(1) == std::nullopt);
  CHECK(none.holes().empty());
  CHECK(none.find_violation().empty());
  ExtentAllocator one(7);
  REQUIRE(one.allocate(7) == 0);
  CHECK(one.holes().empty());
  CHECK(one.largest_hole() == 0);
  CHECK(one.allocate(1) == std::nullopt);
  one.free(0, 7);
  CHECK(holes_of(one) == std::vector<Extent>{{0, 7}});
}

TEST_CASE("random allocations and frees match a naive byte map, invariants after every op",
          "[core]") {
  std::int64_t total_ops = 0, failed = 0, merged_both = 0;
  for (std::uint64_t seed = 1; total_ops < 1'050'000; ++seed) {
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    const auto capacity = static_cast<std::int64_t>(1 + rng() % 400);
    const FitPolicy policy = seed % 2 ? FitPolicy::kFirstFit : FitPolicy::kBestFit;
    ExtentAllocator a(capacity, policy, 4);  // a small reserve: growth is exercised too
    ByteMap m(capacity, policy);
    std::vector<Extent> live;
    // Bias towards short extents in some seeds so that many holes form.
    const std::int64_t max_len =
        1 + static_cast<std::int64_t>(rng() % 3 == 0 ? capacity / 16 : capacity / 3);
    for (int op = 0; op < 20'000; ++op, ++total_ops) {
      INFO("op " << op);
      if (live.empty() || rng() % 100 < 55) {
        const auto len = 1 + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(max_len));
        const std::optional<std::int64_t> got = a.allocate(len);
        const std::optional<std::int64_t> want = m.allocate(len);
        REQUIRE(got == want);
        if (got)
          live.push_back({*got, len});
        else
          ++failed;
      } else {
        const std::size_t i = rng() % live.size();
        const Extent e = live[i];
        const std::size_t before = a.holes().size();
        a.free(e.offset, e.length);
        m.free(e);
        if (a.holes().size() + 1 == before) ++merged_both;
        live[i] = live.back();
        live.pop_back();
      }
      REQUIRE(a.find_violation().empty());
      REQUIRE(holes_of(a) == m.holes());
      REQUIRE(a.num_free_slots() == m.num_free());
    }
  }
  CHECK(total_ops >= 1'000'000);
  CHECK(failed > 1000);       // the pool was often too fragmented or too full
  CHECK(merged_both > 1000);  // frees that joined a hole on each side
}

TEST_CASE("the invariant walk catches planted faults in the hole list", "[core]") {
  ExtentAllocator a(100);
  REQUIRE(a.allocate(10) == 0);
  REQUIRE(a.allocate(10) == 10);
  REQUIRE(a.allocate(10) == 20);
  a.free(10, 10);  // holes [10, 20) and [30, 100)
  REQUIRE(a.find_violation().empty());
  auto& holes = ExtentAllocatorTestPeer::holes(a);
  auto& free_slots = ExtentAllocatorTestPeer::free_slots(a);

  SECTION("two holes overlap") {
    holes[0].length = 25;  // [10, 35) overlaps [30, 100)
    free_slots += 15;
    CHECK(a.find_violation() == "two holes overlap");
  }
  SECTION("two holes touch") {
    holes[0].length = 20;  // [10, 30) touches [30, 100): should have been one hole
    free_slots += 10;
    CHECK(a.find_violation() == "two holes touch (not coalesced)");
  }
  SECTION("holes out of order") {
    std::swap(holes[0], holes[1]);
    CHECK(a.find_violation() == "holes not sorted by offset");
  }
  SECTION("a lost free: the count says free, no hole holds it") {
    free_slots += 10;
    CHECK(a.find_violation() == "the holes' total differs from the free-slot count");
  }
  SECTION("a hole past the end") {
    holes[1].length = 71;
    free_slots += 1;
    CHECK(a.find_violation() == "a hole outside the slot space");
  }
}
