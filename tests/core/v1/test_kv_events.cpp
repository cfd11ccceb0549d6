// KV events of the V1 pool (core/common/kv_event.h): one kStored per block cached, one kRemoved
// per cached block evicted, kAllCleared per successful reset, each block named by its content
// hash (equal across engines for equal content).
#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <memory>
#include <random>

#include "core/v1/block_pool.h"
#include "core/v1/scheduler.h"
#include "test_util.h"

using namespace kvsim;
using namespace kvsim::test;

namespace {

/// The content hashes of a sequence's full blocks: the chain the events carry.
std::vector<std::uint64_t> chain(std::span<const Token> tokens, std::int32_t bs) {
  std::vector<std::uint64_t> out;
  std::uint64_t h = kRootContentHash;
  for (std::size_t b = 0; b + static_cast<std::size_t>(bs) <= tokens.size();
       b += static_cast<std::size_t>(bs)) {
    h = block_content_hash(h, tokens.subspan(b, static_cast<std::size_t>(bs)), 0);
    out.push_back(h);
  }
  return out;
}

KvEvent stored(std::uint64_t h) { return {KvEvent::Kind::kStored, 0, h}; }
KvEvent removed(std::uint64_t h) { return {KvEvent::Kind::kRemoved, 0, h}; }

}  // namespace

TEST_CASE("the pool logs each cached block, each eviction and a reset", "[core]") {
  BlockHashTable h(4);
  BlockPool p(3, true, /*null_block=*/false, h);
  std::vector<KvEvent> log;
  const std::vector<Token> t = iota_tokens(8);
  const HashId a = h.intern(kNoHash, std::span<const Token>(t).first(4), kExtraNone);
  const HashId b = h.intern(a, std::span<const Token>(t).subspan(4, 4), kExtraNone);
  std::vector<BlockId> blocks;
  p.get_new_blocks(3, blocks);
  p.cache_block(BlockId{0}, a);  // before the log is set: not logged
  p.set_event_log(&log);
  p.cache_block(BlockId{1}, b);
  p.cache_block(BlockId{2}, a);  // a duplicate of a's content: logged again, as vLLM does
  const std::vector<std::uint64_t> c = chain(t, 4);
  CHECK(h.content_hash(a) == c[0]);
  CHECK(log == std::vector<KvEvent>{stored(c[1]), stored(c[0])});
  // Free 0 then 1; popping two blocks evicts 0 (a) then 1 (b).
  p.free_block(BlockId{0});
  p.free_block(BlockId{1});
  log.clear();
  blocks.clear();
  p.get_new_blocks(2, blocks);
  CHECK(log == std::vector<KvEvent>{removed(c[0]), removed(c[1])});
  for (BlockId x : blocks) p.free_block(x);
  p.free_block(BlockId{2});
  log.clear();
  REQUIRE(p.reset_prefix_cache());
  CHECK(log == std::vector<KvEvent>{KvEvent{KvEvent::Kind::kAllCleared, 0, 0}});
  p.set_event_log(nullptr);
  blocks.clear();
  p.get_new_blocks(1, blocks);
  p.cache_block(blocks[0], a);
  CHECK(log.size() == 1);  // stopped
  h.release(a);
  h.release(b);
}

TEST_CASE("two engines name equal content with equal hashes", "[core]") {
  BlockHashTable h1(4), h2(4);
  const std::vector<Token> t = iota_tokens(8, 100);
  // Different interning histories: h2 has other nodes first.
  const HashId junk = h2.intern(kNoHash, iota_tokens(4, 7), kExtraNone);
  const HashId a1 = h1.intern(kNoHash, std::span<const Token>(t).first(4), kExtraNone);
  const HashId a2 = h2.intern(kNoHash, std::span<const Token>(t).first(4), kExtraNone);
  const HashId b1 = h1.intern(a1, std::span<const Token>(t).subspan(4, 4), kExtraNone);
  const HashId b2 = h2.intern(a2, std::span<const Token>(t).subspan(4, 4), kExtraNone);
  CHECK(a1 != a2);
  CHECK(h1.content_hash(b1) == h2.content_hash(b2));
  CHECK(h1.content_hash(a1) != h1.content_hash(b1));
  for (auto [tab, x] : {std::pair{&h1, a1}, {&h1, b1}, {&h2, a2}, {&h2, b2}, {&h2, junk}})
    tab->release(x);
}

TEST_CASE("a scheduler's events replayed give exactly its cached blocks", "[core]") {
  // Random prompts over a small token alphabet (shared prefixes, hits, evictions), a small pool.
  // After every step, the multiset of content hashes the events leave must equal that of the
  // pool's cached blocks: a log that missed one kind of change would fail here.
  for (const bool caching_v020 : {false, true}) {
    KVCacheConfig kv{4, 40, 256, true, 0};
    Scheduler sched(SchedulerConfig{8, 64, 256}, kv,
                    caching_v020 ? Profile::kVllm020 : Profile::kVllm072);
    std::vector<KvEvent> log;
    REQUIRE(sched.set_kv_event_log(&log));
    std::map<std::uint64_t, std::int64_t> replayed;
    std::mt19937_64 rng(caching_v020 ? 7 : 3);
    std::vector<std::unique_ptr<Request>> reqs;
    SchedulerOutput out;
    std::vector<RequestOutput> outputs;
    std::vector<BlockId> cached;
    std::int64_t stored_seen = 0, removed_seen = 0;
    for (int step = 0; step < 300; ++step) {
      if (step % 3 == 0 && reqs.size() < 60) {
        std::vector<Token> prompt(static_cast<std::size_t>(4 + rng() % 40));
        for (std::size_t i = 0; i < prompt.size(); ++i)
          prompt[i] = i < 12 ? static_cast<Token>(rng() % 2) : static_cast<Token>(rng() % 5);
        reqs.push_back(std::make_unique<Request>(make_request(
            static_cast<std::int64_t>(reqs.size()), std::move(prompt), 1 + rng() % 8)));
        sched.add_request(*reqs.back());
      }
      sched.schedule(out);
      for (Request* r : sched.running()) r->sampled_token = static_cast<Token>(rng() % 5);
      sched.update_from_output(outputs);
      for (const KvEvent& e : log) {
        REQUIRE(e.kind != KvEvent::Kind::kAllCleared);
        if (e.kind == KvEvent::Kind::kStored) {
          ++replayed[e.block_hash];
          ++stored_seen;
        } else {
          REQUIRE(replayed[e.block_hash] > 0);
          if (--replayed[e.block_hash] == 0) replayed.erase(e.block_hash);
          ++removed_seen;
        }
      }
      log.clear();
      std::map<std::uint64_t, std::int64_t> actual;
      sched.cached_blocks(cached);
      const BlockPool& pool = sched.kv_cache_manager().pool();
      for (BlockId b : cached)
        ++actual[sched.kv_cache_manager().hashes().content_hash(
            pool.hash_of_key(pool.block(b).block_hash))];
      REQUIRE(replayed == actual);
    }
    CHECK(stored_seen > 100);
    CHECK(removed_seen > 20);  // the pool was under pressure
  }
}
