#include <catch2/catch.hpp>

#include "core/v1/block_pool.h"
#include "test_util.h"

using namespace kvsim;
using kvsim::test::free_queue_ids;
using kvsim::test::iota_tokens;

TEST_CASE("a new pool queues every block in id order", "[core]") {
  BlockHashTable h(4);
  BlockPool p(5, true, /*null_block=*/false, h);
  CHECK(free_queue_ids(p) == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  CHECK(p.num_free_blocks() == 5);
  CHECK(p.find_violation().empty());
}

TEST_CASE("new blocks come from the head of the free queue", "[core]") {
  BlockHashTable h(4);
  BlockPool p(5, true, /*null_block=*/false, h);
  std::vector<BlockId> out;
  p.get_new_blocks(2, out);
  CHECK(test::ids(out) == std::vector<std::int32_t>{0, 1});
  CHECK(p.block(BlockId{0}).ref_cnt == 1);
  CHECK(free_queue_ids(p) == std::vector<std::int32_t>{2, 3, 4});
  CHECK(p.stats().blocks_allocated == 2);
}

TEST_CASE("freeing appends to the tail and touching unlinks from the middle", "[core]") {
  BlockHashTable h(4);
  BlockPool p(5, true, /*null_block=*/false, h);
  std::vector<BlockId> out;
  p.get_new_blocks(3, out);
  p.free_block(BlockId{1});
  p.free_block(BlockId{0});
  CHECK(free_queue_ids(p) == std::vector<std::int32_t>{3, 4, 1, 0});
  const BlockId touched[] = {BlockId{4}, BlockId{2}};
  p.touch(touched);  // 4 leaves the queue, 2 was in use and gains a reference
  CHECK(free_queue_ids(p) == std::vector<std::int32_t>{3, 1, 0});
  CHECK(p.block(BlockId{4}).ref_cnt == 1);
  CHECK(p.block(BlockId{2}).ref_cnt == 2);
  CHECK(p.find_violation().empty());
}

TEST_CASE("the first cached block of a hash wins until it is evicted", "[core]") {
  BlockHashTable h(4);
  BlockPool p(4, true, /*null_block=*/false, h);
  std::vector<BlockId> out;
  p.get_new_blocks(4, out);
  const HashId x = h.intern(kNoHash, iota_tokens(4), kExtraNone);
  p.cache_block(BlockId{2}, x);
  p.cache_block(BlockId{0}, x);
  p.cache_block(BlockId{3}, x);
  h.release(x);
  CHECK(p.get_cached_block(x) == BlockId{2});
  CHECK(p.num_cached_hashes() == 1);
  CHECK(p.num_cached_blocks() == 3);
  // Free 2 first so it is at the head of the queue, then pop it: evicted, 0 takes over.
  p.free_block(BlockId{2});
  p.free_block(BlockId{1});
  out.clear();
  p.get_new_blocks(1, out);
  CHECK(out == std::vector<BlockId>{BlockId{2}});
  CHECK(p.block(BlockId{2}).block_hash == kNoHash);
  CHECK(p.get_cached_block(x) == BlockId{0});
  CHECK(p.num_cached_blocks() == 2);
  CHECK(p.stats().evictions == 1);
  CHECK(p.find_violation().empty());
}

TEST_CASE("reset_prefix_cache refuses while a block is in use and keeps the queue order",
          "[core]") {
  BlockHashTable h(4);
  BlockPool p(3, true, /*null_block=*/false, h);
  std::vector<BlockId> out;
  p.get_new_blocks(2, out);
  const HashId x = h.intern(kNoHash, iota_tokens(4), kExtraNone);
  p.cache_block(BlockId{1}, x);
  h.release(x);
  CHECK_FALSE(p.reset_prefix_cache());
  CHECK(p.num_cached_blocks() == 1);
  p.free_block(BlockId{1});
  p.free_block(BlockId{0});
  CHECK(p.reset_prefix_cache());
  CHECK(p.num_cached_blocks() == 0);
  CHECK(p.num_cached_hashes() == 0);
  CHECK(h.size() == 0);
  CHECK(free_queue_ids(p) == std::vector<std::int32_t>{2, 1, 0});
}

TEST_CASE("the pool invariant walk catches planted corruption", "[core]") {
  BlockHashTable h(4);
  BlockPool p(4, true, /*null_block=*/false, h);
  std::vector<BlockId> out;
  p.get_new_blocks(2, out);
  REQUIRE(p.find_violation().empty());
  SECTION("a free block with a positive ref count") {
    p.block(BlockId{3}).ref_cnt = 1;
    CHECK_FALSE(p.find_violation().empty());
  }
  SECTION("a used block with ref count zero") {
    p.block(BlockId{0}).ref_cnt = 0;
    CHECK_FALSE(p.find_violation().empty());
  }
  SECTION("a broken hash chain") {
    const HashId x = h.intern(kNoHash, iota_tokens(4), kExtraNone);
    p.cache_block(BlockId{0}, x);
    p.cache_block(BlockId{1}, x);
    REQUIRE(p.find_violation().empty());
    p.block(BlockId{1}).hash_prev = kNoBlock;
    CHECK_FALSE(p.find_violation().empty());
    p.block(BlockId{1}).hash_prev = BlockId{0};
  }
}
