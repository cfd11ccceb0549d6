// The V0 allocators and evictor: LIFO free list, refcounts and copy-on-write, prefix-caching
// promotion and de-duplication, and the LRU evictor's lazy-deletion queue.

#include <catch2/catch.hpp>
#include <vector>

#include "core/v0/cpu_gpu_block_allocator.h"
#include "core/v0/lru_evictor.h"
#include "core/v0/naive_block_allocator.h"
#include "core/v0/prefix_caching_block_allocator.h"

using namespace kvsim;
using namespace kvsim::v0;

namespace {
std::vector<int> free_ids(const NaiveBlockAllocator& a) {
  std::vector<BlockId> ids;
  a.free_list(ids);
  std::vector<int> out;
  for (BlockId b : ids) out.push_back(to_int(b));
  return out;
}
}  // namespace

TEST_CASE("the naive free list is a LIFO stack over ascending ids", "[core]") {
  NaiveBlockAllocator a(BlockId{10}, 4);
  CHECK(free_ids(a) == std::vector<int>{10, 11, 12, 13});
  const BlockId x = a.allocate_block_id(), y = a.allocate_block_id();
  CHECK(to_int(x) == 10);
  CHECK(to_int(y) == 11);
  a.free_block_id(x);
  a.free_block_id(y);
  CHECK(free_ids(a) == std::vector<int>{11, 10, 12, 13});  // the last freed is reused first
  CHECK(to_int(a.allocate_block_id()) == 11);
  CHECK(a.physical_id(BlockId{12}) == 2);
  CHECK(a.find_violation().empty());
  a.allocate_block_id();
  a.allocate_block_id();
  a.allocate_block_id();
  CHECK(a.allocate_block_id() == kNoBlock);
}

TEST_CASE("copy-on-write: the first sharer to append gets a copy, the last keeps the id",
          "[core]") {
  NaiveBlockAllocator a(BlockId{0}, 4);
  const BlockId b = a.allocate_block_id();
  a.incr_ref(b);  // forked
  std::vector<BlockIdPair> cows;
  const BlockId first = a.cow_if_not_appendable(b, cows);
  CHECK(first != b);
  REQUIRE(cows.size() == 1);
  CHECK(cows[0] == BlockIdPair{to_int(b), to_int(first)});
  CHECK(a.cow_if_not_appendable(b, cows) == b);  // now alone: appends in place
  CHECK(cows.size() == 1);
  CHECK(a.ref_count(b) == 1);
  a.free_block_id(b);
  CHECK_THROWS_AS(a.free_block_id(b), VllmError);  // RefCounter.decr asserts refcount > 0
}

TEST_CASE("the LRU evictor orders by time, then depth (deepest first), then id", "[core]") {
  BlockHashTable hashes(2);
  const Token t[2] = {1, 2};
  const HashId h = hashes.intern(kNoHash, t, kExtraNone);
  LruEvictor e(8, hashes);
  e.add(5, h, 4, 2.0);
  e.add(3, h, 2, 1.0);
  e.add(7, h, 6, 1.0);
  e.add(1, h, 6, 1.0);
  std::vector<std::int32_t> order, unreachable;
  e.eviction_order(order, unreachable);
  CHECK(order == std::vector<std::int32_t>{1, 7, 3, 5});
  CHECK(unreachable.empty());
  // update() pushes no entry: the block becomes unreachable, and remove() leaves a stale entry.
  e.update(7, 9.0);
  e.remove(3);
  e.eviction_order(order, unreachable);
  CHECK(order == std::vector<std::int32_t>{1, 5});
  CHECK(unreachable == std::vector<std::int32_t>{7});
  CHECK(e.queue_size() == 4);
  auto ev = e.evict();
  CHECK(ev.block == 1);
  hashes.release(ev.hash);
  ev = e.evict();  // pops the stale entries of 7 and 3 on the way
  CHECK(ev.block == 5);
  hashes.release(ev.hash);
  CHECK(e.num_blocks() == 1);
  CHECK_THROWS_AS(e.evict(), VllmError);  // only the unreachable block is left
  CHECK(e.find_violation().empty());
  e.clear();
  hashes.release(h);
  CHECK(hashes.size() == 0);
}

TEST_CASE("the evictor's cleanup rebuilds its queue and makes updated blocks reachable", "[core]") {
  BlockHashTable hashes(1);
  const Token t[1] = {3};
  const HashId h = hashes.intern(kNoHash, t, kExtraNone);
  LruEvictor e(4, hashes);
  e.add(0, h, 1, 0.0);
  e.update(0, 5.0);
  std::vector<std::int32_t> order, unreachable;
  e.eviction_order(order, unreachable);
  CHECK(unreachable == std::vector<std::int32_t>{0});
  // Re-adding the same block pushes entries until the queue exceeds 50 per block.
  for (int i = 0; i < 50; ++i) e.add(0, h, 1, 5.0);
  CHECK(e.queue_size() == 1);  // 51 > 50 * 1: rebuilt from the free table
  e.eviction_order(order, unreachable);
  CHECK(order == std::vector<std::int32_t>{0});
  CHECK(e.find_violation().empty());
  e.clear();
  hashes.release(h);
}

TEST_CASE("prefix caching: the first registered block wins, a duplicate promotes onto it",
          "[core]") {
  BlockHashTable hashes(2);
  PrefixCachingBlockAllocator a(BlockId{0}, 4, hashes);
  const Token t[2] = {7, 8};
  const HashId h = hashes.intern(kNoHash, t, kExtraNone);
  const BlockId x = a.allocate_immutable(h);  // miss: registered, touched
  CHECK(a.cached_block(h) == x);
  const BlockId y = a.allocate_block_id();  // a mutable block that fills with the same tokens
  CHECK(a.promote(y, h) == x);              // de-duplicated onto the cached block
  CHECK(a.ref_count(x) == 2);
  CHECK(a.ref_count(y) == 0);
  CHECK(a.num_free_blocks() == 3);
  CHECK(a.find_cached_prefix(std::vector<HashId>{h}) == 0);  // not computed yet
  a.mark_computed();
  CHECK(a.find_cached_prefix(std::vector<HashId>{h}) == 1);
  a.free(x, h, 2);
  a.free(x, h, 2);
  CHECK(a.in_evictor(x));  // free but still cached (and computed: it is in the evictor)
  CHECK(a.find_cached_prefix(std::vector<HashId>{h}) == 1);
  CHECK(a.allocate_immutable(h) == x);  // a hit restores it from the evictor
  CHECK(!a.in_evictor(x));
  CHECK(a.hit_rate() == Approx(1.0 / 2.0));
  a.free(x, h, 2);
  CHECK(a.find_violation().empty());
  CHECK_FALSE(a.reset_prefix_cache() == false);
  CHECK(a.num_cached_hashes() == 0);
  hashes.release(h);
}

TEST_CASE("eviction takes hashless blocks first, then the least recently used", "[core]") {
  CpuGpuBlockAllocator a(true, 1, 2, 1);
  const Token t1[1] = {1}, t2[1] = {2};
  const HashId h1 = a.hashes().intern(kNoHash, t1, kExtraNone);
  const HashId h2 = a.hashes().intern(kNoHash, t2, kExtraNone);
  const BlockId b1 = a.allocate_immutable(Device::kGpu, h1);
  const BlockId b2 = a.allocate_immutable(Device::kGpu, h2);
  a.free(b1, h1, 1);
  a.free(b2, h2, 1);
  CHECK(a.num_free_blocks(Device::kGpu) == 2);
  CHECK(a.physical_id(Device::kCpu, BlockId{2}) == 0);
  CHECK_THROWS_AS(a.physical_id(Device::kCpu, BlockId{1}), VllmError);
  const BlockId c = a.allocate_mutable(Device::kGpu);  // both cached, same time: higher id? no:
  CHECK(to_int(c) == to_int(b1));                      // equal time and depth -> lowest id
  CHECK(a.prefix(Device::kGpu)->cached_block(h1) == kNoBlock);
  CHECK(a.prefix(Device::kGpu)->num_evictions() == 1);
  a.free(c, kNoHash, 0);
  CHECK(a.find_violation().empty());
  a.hashes().release(h1);
  a.hashes().release(h2);
}
