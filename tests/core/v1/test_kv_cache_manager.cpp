#include <catch2/catch.hpp>

#include "core/v1/kv_cache_manager.h"
#include "test_util.h"

using namespace kvsim;
using namespace kvsim::test;

namespace {
KVCacheConfig config(std::int32_t bs, std::int32_t blocks, std::int64_t prealloc_tokens,
                     bool caching = true, std::int64_t max_model_len = 8192) {
  KVCacheConfig c;
  c.block_size = bs;
  c.num_gpu_blocks = blocks;
  c.num_preallocate_tokens = prealloc_tokens;
  c.enable_caching = caching;
  c.max_model_len = max_model_len;
  return c;
}

std::vector<Token> concat(std::vector<Token> a, const std::vector<Token>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

TEST_CASE("a shared prefix hits and freeing releases tails before prefixes", "[core]") {
  KVCacheManager kv(config(16, 10, 16));
  std::vector<BlockId> hits;
  const auto common = iota_tokens(48);
  Request r0 = make_request(0, concat(common, iota_tokens(7, 1000)));
  REQUIRE(kv.get_computed_blocks(r0, hits) == 0);
  AllocResult a0 = kv.allocate_slots(r0, 55, hits);
  REQUIRE(a0.ok());
  CHECK(new_ids(r0, a0) == std::vector<std::int32_t>{0, 1, 2, 3, 4});  // 4 needed + 1 preallocated
  r0.num_computed_tokens = 55;

  Request r1 = make_request(1, concat(common, iota_tokens(7, 2000)));
  CHECK(kv.get_computed_blocks(r1, hits) == 48);
  CHECK(ids(hits) == std::vector<std::int32_t>{0, 1, 2});
  AllocResult a1 = kv.allocate_slots(r1, 7, hits);
  REQUIRE(a1.ok());
  CHECK(new_ids(r1, a1) == std::vector<std::int32_t>{5, 6});
  CHECK(kv.pool().block(BlockId{0}).ref_cnt == 2);

  kv.free(r0);
  kv.free(r1);
  CHECK(free_queue_ids(kv) == std::vector<std::int32_t>{7, 8, 9, 4, 3, 6, 5, 2, 1, 0});
  const Request* live[] = {&r0, &r1};
  CHECK(kv.find_violation(live).empty());
  kv.release_request(r0);
  kv.release_request(r1);
}

TEST_CASE("without prefix caching blocks are freed in table order and never hit", "[core]") {
  KVCacheManager kv(config(4, 8, 0, /*caching=*/false));
  std::vector<BlockId> hits;
  Request r = make_request(0, iota_tokens(12));
  CHECK(kv.get_computed_blocks(r, hits) == 0);
  CHECK(r.block_hashes.empty());
  REQUIRE(kv.allocate_slots(r, 12).ok());
  CHECK(ids(r.blocks) == std::vector<std::int32_t>{0, 1, 2});
  kv.free(r);
  CHECK(free_queue_ids(kv) == std::vector<std::int32_t>{3, 4, 5, 6, 7, 0, 1, 2});
  CHECK(kv.pool().num_cached_blocks() == 0);
}

TEST_CASE("preallocation is capped by free blocks and by max_model_len", "[core]") {
  SECTION("capped by the free blocks") {
    KVCacheManager kv(config(4, 3, 64));  // wants 1 + 16 preallocated, only 3 exist
    Request r = make_request(0, iota_tokens(3));
    const AllocResult a = kv.allocate_slots(r, 3);
    REQUIRE(a.ok());
    CHECK(a.num_new_blocks == 3);
  }
  SECTION("capped by blocks per request") {
    KVCacheManager kv(config(4, 100, 64, true, /*max_model_len=*/10));  // 3 blocks per request
    Request r = make_request(0, iota_tokens(5));
    const AllocResult a = kv.allocate_slots(r, 5);
    REQUIRE(a.ok());
    CHECK(a.num_new_blocks == 3);
    // A later decode needs no new block while the table still has room.
    r.num_computed_tokens = 5;
    r.append_output_token(7);
    const AllocResult b = kv.allocate_slots(r, 1);
    CHECK(b.ok());
    CHECK(b.num_new_blocks == 0);
  }
  SECTION("the free-space check ignores preallocation") {
    KVCacheManager kv(config(4, 2, 64));
    Request r = make_request(0, iota_tokens(8));
    CHECK(kv.allocate_slots(r, 8).ok());  // needs exactly the 2 free blocks
    Request s = make_request(1, iota_tokens(1, 500));
    CHECK(kv.allocate_slots(s, 1).status == AllocStatus::kNoFreeBlocks);
  }
}

TEST_CASE("hits that sit in the free queue do not count as free space", "[core]") {
  KVCacheManager kv(config(4, 3, 0));
  std::vector<BlockId> hits;
  Request a = make_request(0, iota_tokens(8));
  REQUIRE(prefill(kv, a, hits).ok());  // blocks 0, 1 cached
  kv.free(a);                          // queue: 2, 1, 0 — all free, 0 and 1 cached
  Request b = make_request(1, concat(iota_tokens(8), iota_tokens(8, 100)));
  CHECK(kv.get_computed_blocks(b, hits) == 8);
  // Needs 2 new blocks; 3 are free but 2 of them are the hits themselves.
  CHECK(kv.allocate_slots(b, 8, hits).status == AllocStatus::kNoFreeBlocks);
  CHECK(kv.pool().num_free_blocks() == 3);  // nothing changed
  CHECK(b.blocks.empty());
  kv.release_request(a);
  kv.release_request(b);
}

TEST_CASE("a fully cached prompt hits every block in the manager", "[core]") {
  KVCacheManager kv(config(4, 8, 0));
  std::vector<BlockId> hits;
  Request a = make_request(0, iota_tokens(8));
  REQUIRE(prefill(kv, a, hits).ok());
  Request b = make_request(1, iota_tokens(8));
  CHECK(kv.get_computed_blocks(b, hits) == 8);  // v0.7.2: the scheduler, not the manager, drops one
  CHECK(ids(hits) == std::vector<std::int32_t>{0, 1});
  kv.release_request(a);
  kv.release_request(b);
}

TEST_CASE("the hash list is computed once and stays stale after preemption", "[core]") {
  KVCacheManager kv(config(4, 16, 0));
  std::vector<BlockId> hits;
  Request r = make_request(0, iota_tokens(8));
  REQUIRE(prefill(kv, r, hits).ok());
  CHECK(r.block_hashes.size() == 2);
  for (Token t : {50, 51, 52, 53}) r.append_output_token(t);  // fills block 2, not computed yet
  // Another request caches the identical 12 tokens.
  Request o = make_request(1, concat(iota_tokens(8), {50, 51, 52, 53}));
  REQUIRE(prefill(kv, o, hits).ok());
  CHECK(kv.pool().num_cached_blocks() == 3);
  // Preempt r and look it up again: its list still has 2 entries, so the third block misses.
  kv.free(r);
  r.num_computed_tokens = 0;
  CHECK(kv.get_computed_blocks(r, hits) == 8);
  CHECK(r.block_hashes.size() == 2);
  kv.release_request(r);
  kv.release_request(o);
}

TEST_CASE("a block is cached only once computed tokens cover it completely", "[core]") {
  KVCacheManager kv(config(4, 16, 0));
  Request r = make_request(0, iota_tokens(10));
  REQUIRE(kv.allocate_slots(r, 3).ok());
  CHECK(kv.pool().num_cached_blocks() == 0);
  r.num_computed_tokens = 3;
  REQUIRE(kv.allocate_slots(r, 3).ok());  // covers tokens 0..5: block 0 full
  CHECK(kv.pool().num_cached_blocks() == 1);
  CHECK(r.block_hashes.size() == 1);
  r.num_computed_tokens = 6;
  REQUIRE(kv.allocate_slots(r, 4).ok());  // covers 0..9: block 1 full, block 2 partial
  CHECK(kv.pool().num_cached_blocks() == 2);
  kv.free(r);
  kv.release_request(r);
}

TEST_CASE("multimodal placeholders become extra keys block by block", "[core]") {
  KVCacheManager kv(config(16, 10, 16));
  std::vector<Token> prompt = iota_tokens(10);
  prompt.insert(prompt.end(), 10, -1);
  for (Token t : iota_tokens(10, 10)) prompt.push_back(t);
  prompt.insert(prompt.end(), 25, -1);
  for (int i = 0; i < 4; ++i) prompt.push_back(100);
  REQUIRE(prompt.size() == 59);
  SamplingLimits lim;
  Request r(0, prompt, lim, {{11, 10, "aaa"}, {30, 18, "bbb"}, {48, 7, "ccc"}});
  std::vector<BlockId> hits;
  kv.get_computed_blocks(r, hits);
  auto keys = [&](std::size_t i) {
    return kv.hashes().extra_strings(kv.hashes().extra(r.block_hashes[i]));
  };
  REQUIRE(r.block_hashes.size() == 3);
  CHECK(keys(0) == std::vector<std::string>{"aaa"});
  CHECK(keys(1) == std::vector<std::string>{"aaa", "bbb"});
  CHECK(keys(2) == std::vector<std::string>{"bbb"});
  REQUIRE(kv.allocate_slots(r, 59, hits).ok());
  r.num_computed_tokens = 59;
  for (int i = 0; i < 5; ++i) r.append_output_token(8);
  REQUIRE(kv.allocate_slots(r, 5).ok());
  REQUIRE(r.block_hashes.size() == 4);
  CHECK(keys(3) == std::vector<std::string>{"ccc"});  // generated block: the last placeholder only
  kv.free(r);
  kv.release_request(r);
}

TEST_CASE("common prefix blocks count leading blocks shared by every running request", "[core]") {
  KVCacheManager kv(config(4, 16, 0));
  std::vector<BlockId> hits;
  Request a = make_request(0, concat(iota_tokens(8), iota_tokens(3, 100)));
  Request b = make_request(1, concat(iota_tokens(8), iota_tokens(3, 200)));
  REQUIRE(prefill(kv, a, hits).ok());
  REQUIRE(prefill(kv, b, hits).ok());
  CHECK(kv.get_num_common_prefix_blocks(a, 2) == 2);
  CHECK(kv.get_num_common_prefix_blocks(a, 1) == 0);
  kv.free(a);
  kv.free(b);
  kv.release_request(a);
  kv.release_request(b);
}

TEST_CASE("usage counts cached free blocks as free", "[core]") {
  KVCacheManager kv(config(4, 4, 0));
  std::vector<BlockId> hits;
  Request a = make_request(0, iota_tokens(8));
  REQUIRE(prefill(kv, a, hits).ok());
  CHECK(kv.usage() == Approx(0.5));
  kv.free(a);
  CHECK(kv.usage() == Approx(0.0));
  kv.release_request(a);
}

TEST_CASE("zero tokens and allocations past max_model_len are reported, not crashed on", "[core]") {
  KVCacheManager kv(config(4, 16, 0, true, 8));
  Request r = make_request(0, iota_tokens(12));
  CHECK(kv.allocate_slots(r, 0).status == AllocStatus::kZeroTokens);
  REQUIRE(kv.allocate_slots(r, 8).ok());
  r.num_computed_tokens = 8;
  CHECK(kv.allocate_slots(r, 4).status == AllocStatus::kBeyondMaxBlocks);
  kv.free(r);
  kv.release_request(r);
}

TEST_CASE("the manager invariant walk catches a corrupted table and a wrong prefix hit", "[core]") {
  KVCacheManager kv(config(4, 8, 0));
  std::vector<BlockId> hits;
  Request a = make_request(0, iota_tokens(8));
  Request b = make_request(1, iota_tokens(8, 100));
  REQUIRE(prefill(kv, a, hits).ok());
  REQUIRE(prefill(kv, b, hits).ok());
  const Request* live[] = {&a, &b};
  REQUIRE(kv.find_violation(live).empty());
  SECTION("a block table entry pointing at another request's block") {
    const BlockId saved = a.blocks[0];
    a.blocks[0] = b.blocks[0];
    CHECK_FALSE(kv.find_violation(live).empty());
    a.blocks[0] = saved;
  }
  SECTION("a block handed to a second request without a reference") {
    b.blocks.push_back(a.blocks[1]);
    CHECK_FALSE(kv.find_violation(live).empty());
    b.blocks.pop_back();
  }
  SECTION("a cached block relabelled with another prefix's hash (a wrong prefix hit)") {
    auto& pool = const_cast<BlockPool&>(kv.pool());
    KVCacheBlock& blk = pool.block(a.blocks[1]);
    const HashId saved = blk.block_hash;
    blk.block_hash = pool.block(b.blocks[1]).block_hash;
    CHECK_FALSE(kv.find_violation(live).empty());
    blk.block_hash = saved;
  }
  SECTION("a request missing from the live list") {
    const Request* only_a[] = {&a};
    CHECK_FALSE(kv.find_violation(only_a).empty());
  }
  CHECK(kv.find_violation(live).empty());
  kv.free(a);
  kv.free(b);
  kv.release_request(a);
  kv.release_request(b);
}
