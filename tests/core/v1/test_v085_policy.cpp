// vLLM v0.8.5.post1's differences from v0.7.2 (spec §11), each tested on its own: the null
// block, no preallocation, lookahead slots, the last-block rule in the lookup, prompt logprobs,
// caching from the count of cached blocks, None extra keys, the sliding-window manager, and the
// scheduler's chunk caps and num_computed_tokens advanced in schedule().

#include <catch2/catch.hpp>
#include <memory>

#include "core/v1/scheduler.h"
#include "test_util.h"

using namespace kvsim;
using namespace kvsim::test;

namespace {

KVCacheConfig config(std::int32_t bs, std::int32_t blocks, std::int64_t window = 0) {
  KVCacheConfig c;
  c.block_size = bs;
  c.num_gpu_blocks = blocks;
  c.num_preallocate_tokens = 64;  // accepted, and ignored by v0.8.5
  c.sliding_window = window;
  return c;
}

/// Plays the v0.8.5 scheduler in kvm mode: lookup, allocate, mark computed.
AllocResult admit(KVCacheManager& kv, Request& r, std::vector<BlockId>& hits) {
  const std::int64_t hit_tokens = kv.get_computed_blocks(r, hits);
  const std::int64_t n = r.num_tokens() - hit_tokens;
  AllocResult res = kv.allocate_slots(r, n, hits);
  if (res.ok()) r.num_computed_tokens = hit_tokens + n;
  return res;
}

}  // namespace

TEST_CASE("v0.8.5: block 0 is the null block, counted as used, never handed out", "[core]") {
  KVCacheManager kv(config(4, 5), kVllm085Policy);
  CHECK(kv.pool().null_block() == BlockId{0});
  CHECK(kv.pool().num_free_blocks() == 4);
  CHECK(kv.usage() == Approx(0.2));  // 1 - 4/5: the null block is used
  CHECK(free_queue_ids(kv) == std::vector<std::int32_t>{1, 2, 3, 4});
  std::vector<BlockId> hits;
  Request r = make_request(0, iota_tokens(10));
  const AllocResult a = admit(kv, r, hits);
  REQUIRE(a.ok());
  CHECK(new_ids(r, a) == std::vector<std::int32_t>{1, 2, 3});  // no preallocation either
  CHECK_FALSE(kv.reset_prefix_cache());                        // blocks in use
  kv.free(r);
  CHECK(free_queue_ids(kv) == std::vector<std::int32_t>{4, 3, 2, 1});
  CHECK(kv.pool().num_cached_blocks() == 2);
  CHECK(kv.reset_prefix_cache());  // only the null block in use
  CHECK(kv.pool().num_cached_blocks() == 0);
  const Request* live[] = {&r};
  CHECK(kv.find_violation(live).empty());
  kv.release_request(r);

  // The same request under v0.7.2: block 0 first, plus ceil(64/4) = 16 preallocated (capped by
  // the 5 blocks there are).
  KVCacheManager old(config(4, 5));
  Request r2 = make_request(0, iota_tokens(10));
  const AllocResult b = admit(old, r2, hits);
  CHECK(new_ids(r2, b) == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  old.free(r2);
  old.release_request(r2);
}

TEST_CASE("v0.8.5: a fully cached prompt never hits its last block", "[core]") {
  KVCacheManager kv(config(4, 16), kVllm085Policy);
  std::vector<BlockId> hits;
  Request a = make_request(0, iota_tokens(12));
  REQUIRE(admit(kv, a, hits).ok());
  Request b = make_request(1, iota_tokens(12));  // same 3 full blocks
  CHECK(kv.get_computed_blocks(b, hits) == 8);   // the last hash is left out of the lookup
  CHECK(ids(hits) == std::vector<std::int32_t>{1, 2});
  CHECK(b.block_hashes.size() == 3);             // the list keeps it
  Request c = make_request(2, iota_tokens(13));  // a partial last block: every full block hits
  CHECK(kv.get_computed_blocks(c, hits) == 12);
  c.wants_prompt_logprobs = true;  // prompt logprobs: no hit, hashes still computed
  CHECK(kv.get_computed_blocks(c, hits) == 0);
  CHECK(c.block_hashes.size() == 3);
  for (Request* r : {&a, &b, &c}) {
    kv.free(*r);
    kv.release_request(*r);
  }
}

TEST_CASE("v0.8.5: lookahead slots are allocated but not cached", "[core]") {
  KVCacheManager kv(config(4, 16), kVllm085Policy);
  std::vector<BlockId> hits;
  Request r = make_request(0, iota_tokens(6));
  const AllocResult a = kv.allocate_slots(r, 6, {}, /*num_lookahead_tokens=*/5);
  REQUIRE(a.ok());
  CHECK(a.num_new_blocks == 3);               // ceil((6 + 5) / 4)
  CHECK(kv.pool().num_cached_blocks() == 1);  // only the one full block of computed tokens
  CHECK(r.num_cached_block == 1);
  r.num_computed_tokens = 6;
  r.append_output_token(100);
  r.append_output_token(101);
  const AllocResult b = kv.allocate_slots(r, 2, {}, 5);  // 8 tokens: block 1 completes
  CHECK(b.num_new_blocks == 1);                          // ceil(13 / 4) = 4
  CHECK(kv.pool().num_cached_blocks() == 2);
  CHECK(r.num_cached_block == 2);
  kv.free(r);
  CHECK(r.num_cached_block == -1);  // free forgets the count
  kv.release_request(r);
}

TEST_CASE("v0.8.5 caches from the count of cached blocks, v0.7.2 from floor(computed/bs)",
          "[core]") {
  // A caller whose num_computed_tokens jumps past an uncached block: v0.7.2 starts at
  // floor(10 / 4) = 2, whose parent (block 1) has no hash (an assertion in vLLM); v0.8.5 starts
  // at the one block it cached and caches blocks 1 and 2.
  for (const bool v085 : {false, true}) {
    INFO("v0.8.5 " << v085);
    KVCacheManager kv(config(4, 16), v085 ? kVllm085Policy : kVllm072Policy);
    Request r = make_request(0, iota_tokens(12));
    REQUIRE(kv.allocate_slots(r, 6).ok());  // caches block 0
    CHECK(kv.pool().num_cached_blocks() == 1);
    CHECK(r.num_cached_block == (v085 ? 1 : -1));
    r.num_computed_tokens = 10;
    const AllocResult res = kv.allocate_slots(r, 2);
    CHECK(res.status == (v085 ? AllocStatus::kOk : AllocStatus::kBadPrevBlock));
    CHECK(kv.pool().num_cached_blocks() == (v085 ? 3 : 1));
    CHECK(r.num_cached_block == (v085 ? 3 : -1));
    kv.free(r);
    kv.release_request(r);
  }
}

TEST_CASE("v0.8.5: a multimodal block before every placeholder hashes like text", "[core]") {
  // v0.7.2 gives it the extra keys () and v0.8.5 None: only v0.8.5 shares it with a text prompt.
  for (const bool v085 : {false, true}) {
    INFO("v0.8.5 " << v085);
    KVCacheManager kv(config(4, 16), v085 ? kVllm085Policy : kVllm072Policy);
    std::vector<BlockId> hits;
    Request text = make_request(0, iota_tokens(9));
    REQUIRE(kv.allocate_slots(text, 9).ok());
    SamplingLimits lim;
    Request mm(1, iota_tokens(9), lim, {MMPlaceholder{8, 1, "img"}});
    CHECK(kv.get_computed_blocks(mm, hits) == (v085 ? 8 : 0));
    CHECK(kv.hashes().extra(mm.block_hashes[0]) == (v085 ? kExtraNone : kExtraEmpty));
    for (Request* r : {&text, &mm}) {
      kv.free(*r);
      kv.release_request(*r);
    }
  }
}

TEST_CASE("v0.8.5 sliding window: the rightmost run of hits, null blocks before it", "[core]") {
  // Window 8, block 4: cdiv(7, 4) = 2 consecutive hits are needed.
  KVCacheManager kv(config(4, 32, 8), kVllm085Policy);
  REQUIRE(kv.specialized_manager().kind() == SpecializedManager::Kind::kSlidingWindow);
  std::vector<BlockId> hits;
  Request a = make_request(0, iota_tokens(24));  // 6 full blocks
  REQUIRE(kv.allocate_slots(a, 24).ok());
  CHECK(ids(a.blocks) == std::vector<std::int32_t>{1, 2, 3, 4, 5, 6});
  Request b = make_request(1, iota_tokens(24));
  // The last hash is left out (the prompt is block-aligned): 5 looked up, the run is blocks 3, 4.
  CHECK(kv.get_computed_blocks(b, hits) == 20);
  CHECK(ids(hits) == std::vector<std::int32_t>{0, 0, 0, 4, 5});
  REQUIRE(kv.allocate_slots(b, 4, hits).ok());
  CHECK(ids(b.blocks) == std::vector<std::int32_t>{0, 0, 0, 4, 5, 7});
  CHECK(kv.pool().block(BlockId{0}).ref_cnt == 3);  // touch raised the null block's count
  b.num_computed_tokens = 24;

  // A prompt whose only hits are its first two blocks: that run, from block 0 on.
  Request c = make_request(2, [] {
    auto t = iota_tokens(8);
    for (Token x : iota_tokens(12, 500)) t.push_back(x);
    return t;
  }());
  CHECK(kv.get_computed_blocks(c, hits) == 8);
  CHECK(ids(hits) == std::vector<std::int32_t>{1, 2});

  // Decoding past the window frees what left it, latest first, before allocating.
  b.append_output_token(7);
  REQUIRE(kv.allocate_slots(b, 1).ok());  // computed 24: tokens < 17 are outside: blocks 0-3
  CHECK(ids(b.blocks) == std::vector<std::int32_t>{0, 0, 0, 0, 5, 7, 8});
  CHECK(kv.pool().block(BlockId{4}).ref_cnt == 1);  // a still holds block 4
  const Request* live[] = {&a, &b, &c};
  CHECK(kv.find_violation(live).empty());
  kv.free(a);
  CHECK(free_queue_ids(kv).back() == 1);  // a's blocks, tail first
  kv.free(b);
  CHECK(kv.pool().block(BlockId{0}).ref_cnt == -1);  // 3 touches, 4 frees: not maintained
  for (Request* r : {&a, &b, &c}) kv.release_request(*r);
  CHECK(kv.pool().num_free_blocks() == 31);
}

TEST_CASE("v0.8.5 sliding window no longer than a block fails vLLM's assertion", "[core]") {
  // Window 4, block 4: with tokens 0-6 computed, block 0 is outside the window (token 7 sees
  // 4-7); the next allocation nulls it, and caching block 1 then needs block 0's hash as its
  // parent. (A window longer than a block never nulls the block before the first to cache.)
  KVCacheManager kv(config(4, 16, 4), kVllm085Policy);
  Request r = make_request(0, iota_tokens(12));
  REQUIRE(kv.allocate_slots(r, 7).ok());
  r.num_computed_tokens = 7;
  CHECK(kv.allocate_slots(r, 1).status == AllocStatus::kBadPrevBlock);
  CHECK(to_int(r.blocks[0]) == 0);  // nulled before the failure, as in vLLM
  kv.free(r);
  kv.release_request(r);
}

TEST_CASE("v0.8.5 sliding window: a table too short for the window is an error", "[core]") {
  KVCacheManager kv(config(4, 16, 4), kVllm085Policy);
  Request r = make_request(0, iota_tokens(20));
  r.num_computed_tokens = 16;  // claims tokens no block holds (vLLM: IndexError)
  CHECK(kv.allocate_slots(r, 4).status == AllocStatus::kSkippedBeyondTable);
  CHECK(r.blocks.empty());
  kv.release_request(r);
}

TEST_CASE("v0.8.5 scheduler: threshold chunks, computed tokens advanced in schedule()", "[core]") {
  SchedulerConfig sc{8, 64, 1024};
  sc.long_prefill_token_threshold = 6;
  Scheduler sched(sc, config(4, 64), Profile::kVllm085);
  CHECK(sched.profile() == Profile::kVllm085);
  Request r = make_request(0, iota_tokens(14));
  sched.add_request(r);
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;
  sched.schedule(out);
  REQUIRE(out.scheduled.size() == 1);
  CHECK(out.scheduled[0].num_tokens == 6);
  CHECK(out.scheduled[0].num_computed_tokens == 0);
  CHECK(r.num_computed_tokens == 6);  // advanced at the end of schedule()
  // A second schedule() before the update schedules the next chunk.
  sched.schedule(out);
  CHECK(out.scheduled[0].num_computed_tokens == 6);
  CHECK(r.num_computed_tokens == 12);
  sched.update_from_output(outputs);
  CHECK(outputs.empty());  // a partial prefill samples nothing
  sched.schedule(out);
  CHECK(out.scheduled[0].num_tokens == 2);
  r.sampled_token = 9;
  sched.update_from_output(outputs);
  REQUIRE(outputs.size() == 1);
  CHECK(r.num_output_tokens() == 1);
  // All its tokens scheduled and not yet updated: skipped, not asserted on.
  sched.schedule(out);
  CHECK(out.scheduled.size() == 1);
  sched.schedule(out);
  CHECK(out.scheduled.empty());
  CHECK(sched.find_violation().empty());

  // The same prompt at v0.7.2: no threshold, one 14-token chunk, computed only after update.
  Scheduler old(SchedulerConfig{8, 64, 1024}, config(4, 64));
  Request q = make_request(0, iota_tokens(14));
  old.add_request(q);
  old.schedule(out);
  CHECK(out.scheduled[0].num_tokens == 14);
  CHECK(q.num_computed_tokens == 0);
  sched.abort_request(r);
  old.abort_request(q);
}

TEST_CASE("v0.8.5 KV breakdown counts the null block and sums to the pool", "[core]") {
  for (const std::int64_t window : {std::int64_t{0}, std::int64_t{6}}) {
    INFO("window " << window);
    Scheduler sched(SchedulerConfig{8, 16, 1024}, config(4, 40, window), Profile::kVllm085);
    std::vector<std::unique_ptr<Request>> reqs;
    for (int i = 0; i < 3; ++i) {
      reqs.push_back(std::make_unique<Request>(make_request(i, iota_tokens(20), 30)));
      sched.add_request(*reqs.back());
    }
    SchedulerOutput out;
    std::vector<RequestOutput> outputs;
    const std::vector<std::int64_t> final_tokens(3, 49);
    for (int step = 0; step < 12; ++step) {
      sched.schedule(out);
      for (Request* r : sched.running()) r->sampled_token = 1;
      sched.update_from_output(outputs);
      const KVBreakdown b = sched.kv_breakdown(final_tokens);
      CHECK(b.total() == 40 * 4);
      CHECK(b.internal_fragmentation >= 4);  // the null block
      REQUIRE(sched.find_violation().empty());
    }
    if (window > 0) CHECK(to_int(reqs[0]->blocks.front()) == 0);  // nulls in the table
  }
}
