// Randomized differential tests: scheduler-like use of the manager (shared prefixes, chunked
// prefill, decode, preemption, finishes, memory pressure), checked after every op against the
// naive model and the invariant walk; and random scheduler runs with the invariant walk after
// every schedule/update/abort.

#include <catch2/catch.hpp>
#include <memory>
#include <random>

#include "core/v1/scheduler.h"
#include "naive_pool.h"
#include "test_util.h"

using namespace kvsim;
using namespace kvsim::test;

namespace {

struct Live {
  std::unique_ptr<Request> req;
  NaivePool::Req naive;
  bool running = false;
};

std::vector<std::int32_t> as_ints(std::span<const BlockId> b) {
  std::vector<std::int32_t> out;
  for (BlockId x : b) out.push_back(to_int(x));
  return out;
}

struct Coverage {
  std::int64_t hit_blocks = 0, failed_allocs = 0, evictions = 0, resets = 0;
};

void run_manager_seed(std::uint64_t seed, int num_ops, Coverage& cov) {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const int bs = std::array<int, 3>{2, 4, 8}[rng() % 3];
  const int num_blocks = static_cast<int>(uniform(12, 48));
  const bool caching = rng() % 8 != 0;
  const std::int64_t prealloc = std::array<std::int64_t, 3>{0, bs, 64}[rng() % 3];
  const std::int64_t max_len = 4096;
  KVCacheManager kv(KVCacheConfig{bs, num_blocks, max_len, caching, prealloc});
  NaivePool naive(bs, num_blocks, max_len, caching, prealloc);
  std::vector<std::vector<Token>> prefixes;
  for (int i = 0; i < 4; ++i) {
    std::vector<Token> p(static_cast<std::size_t>(uniform(1, 5 * bs)));
    for (Token& t : p) t = static_cast<Token>(rng() % 3);
    prefixes.push_back(p);
  }
  std::vector<Live> live;
  std::vector<BlockId> hits;
  std::vector<const Request*> views;
  std::int64_t next_index = 0;

  for (int op = 0; op < num_ops; ++op) {
    INFO("op " << op);
    const auto kind = uniform(0, 99);
    if (kind < 15 && live.size() < 10) {  // a new request: a shared prefix plus a random suffix
      std::vector<Token> prompt = prefixes[rng() % prefixes.size()];
      const auto extra = uniform(0, 3 * bs);
      for (std::int64_t i = 0; i < extra; ++i) prompt.push_back(static_cast<Token>(rng() % 3));
      if (prompt.empty()) prompt.push_back(1);
      Live l;
      l.req = std::make_unique<Request>(make_request(next_index++, prompt));
      l.naive.tokens = prompt;
      live.push_back(std::move(l));
    } else if (!live.empty()) {
      Live& l = live[rng() % live.size()];
      Request& r = *l.req;
      if (kind < 45 && !l.running) {  // admit: lookup, full-hit rule, chunk, allocate
        std::int64_t hit_tokens = kv.get_computed_blocks(r, hits);
        std::vector<int> nh = naive.get_computed_blocks(l.naive);
        REQUIRE(as_ints(hits) == std::vector<std::int32_t>(nh.begin(), nh.end()));
        cov.hit_blocks += static_cast<std::int64_t>(hits.size());
        if (hit_tokens == r.num_tokens()) {
          hits.pop_back();
          nh.pop_back();
          hit_tokens -= bs;
        }
        const std::int64_t n = std::min(r.num_tokens() - hit_tokens, uniform(1, 6 * bs));
        const AllocResult res = kv.allocate_slots(r, n, hits);
        const auto nres = naive.allocate(l.naive, n, nh);
        REQUIRE((res.status != AllocStatus::kOk) == !nres.has_value());
        if (res.ok()) {
          REQUIRE(new_ids(r, res) == std::vector<std::int32_t>(nres->begin(), nres->end()));
          r.num_computed_tokens = hit_tokens + n;
          l.naive.computed = r.num_computed_tokens;
          l.running = true;
        } else {
          REQUIRE(res.status == AllocStatus::kNoFreeBlocks);
          ++cov.failed_allocs;
        }
      } else if (kind < 85 && l.running) {  // continue a prefill, or decode one token
        if (r.num_computed_tokens == r.num_tokens()) {
          const Token t = static_cast<Token>(rng() % 3);
          r.append_output_token(t);
          l.naive.tokens.push_back(t);
        }
        const std::int64_t n = std::min(r.num_tokens() - r.num_computed_tokens, uniform(1, 4 * bs));
        const AllocResult res = kv.allocate_slots(r, n);
        const auto nres = naive.allocate(l.naive, n, {});
        REQUIRE((res.status != AllocStatus::kOk) == !nres.has_value());
        if (res.ok()) {
          REQUIRE(new_ids(r, res) == std::vector<std::int32_t>(nres->begin(), nres->end()));
          r.num_computed_tokens += n;
          l.naive.computed = r.num_computed_tokens;
        } else {  // memory pressure: preempt it
          kv.free(r);
          naive.free(l.naive);
          r.num_computed_tokens = l.naive.computed = 0;
          l.running = false;
        }
      } else if (kind < 93 && l.running) {  // preempt
        kv.free(r);
        naive.free(l.naive);
        r.num_computed_tokens = l.naive.computed = 0;
        l.running = false;
      } else if (kind < 99 || r.num_tokens() > 40 * bs) {  // finish
        kv.free(r);
        naive.free(l.naive);
        kv.release_request(r);
        std::swap(l, live.back());
        live.pop_back();
      } else {
        const bool ok = kv.reset_prefix_cache();
        REQUIRE(ok == naive.reset_prefix_cache());
        cov.resets += ok;
      }
    }
    // Full-state comparison and the invariant walk after every op.
    REQUIRE(free_queue_ids(kv) ==
            std::vector<std::int32_t>(naive.queue().begin(), naive.queue().end()));
    for (int b = 0; b < num_blocks; ++b) {
      REQUIRE(kv.pool().block(BlockId{b}).ref_cnt == naive.refs()[static_cast<std::size_t>(b)]);
      REQUIRE((kv.pool().block(BlockId{b}).block_hash != kNoHash) == naive.cached(b));
    }
    views.clear();
    for (const Live& x : live) views.push_back(x.req.get());
    const std::string violation = kv.find_violation(views);
    INFO(violation);
    REQUIRE(violation.empty());
  }
  cov.evictions += kv.pool().stats().evictions;
  for (Live& l : live) {
    kv.free(*l.req);
    kv.release_request(*l.req);
  }
  // Everything released: all blocks free, and only cached blocks (and their ancestors) hold hashes.
  CHECK(kv.pool().num_free_blocks() == num_blocks);
  CHECK(kv.find_violation({}).empty());
  CHECK(kv.hashes().size() >= kv.pool().num_cached_hashes());
}

void run_scheduler_seed(std::uint64_t seed, int num_ops, std::int64_t& preemptions,
                        std::int64_t& hit_tokens) {
  INFO("seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const std::int32_t bs = std::array<std::int32_t, 3>{2, 4, 16}[rng() % 3];
  const std::int64_t max_len = 64 * bs;
  Scheduler sched(SchedulerConfig{uniform(1, 8), uniform(bs, 12 * bs), max_len},
                  KVCacheConfig{bs, static_cast<std::int32_t>(uniform(12, 30)), max_len,
                                rng() % 6 != 0, rng() % 2 ? 64 : 0});
  std::vector<std::unique_ptr<Request>> owned;
  std::vector<Token> shared(static_cast<std::size_t>(3 * bs));
  for (Token& t : shared) t = static_cast<Token>(rng() % 4);
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;
  std::int64_t next_index = 0;
  for (int op = 0; op < num_ops; ++op) {
    INFO("op " << op);
    const auto kind = uniform(0, 99);
    if (kind < 20 && sched.num_unfinished_requests() < 24) {
      std::vector<Token> prompt(shared.begin(), shared.begin() + uniform(0, 3 * bs));
      for (auto n = uniform(1, 4 * bs); n > 0; --n) prompt.push_back(static_cast<Token>(rng() % 4));
      SamplingLimits lim;
      lim.max_tokens = uniform(1, 3 * bs);
      if (rng() % 4 == 0) lim.eos_token_id = 3;
      if (rng() % 4 == 0) lim.stop_token_ids = {2};
      owned.push_back(std::make_unique<Request>(next_index++, std::move(prompt), lim));
      sched.add_request(*owned.back());
    } else if (kind < 25 && sched.num_unfinished_requests() > 0) {
      Request* victim =
          rng() % 2 && !sched.running().empty()
              ? sched.running()[rng() % sched.running().size()]
              : (sched.waiting().empty() ? nullptr
                                         : sched.waiting()[rng() % sched.waiting().size()]);
      if (victim) REQUIRE(sched.abort_request(*victim));
    } else {
      sched.schedule(out);
      REQUIRE(out.total_num_scheduled_tokens <= sched.config().max_num_batched_tokens);
      const std::string v1 = sched.find_violation();
      INFO(v1);
      REQUIRE(v1.empty());
      for (Request* r : sched.running()) r->sampled_token = static_cast<Token>(rng() % 4);
      sched.update_from_output(outputs);
    }
    const std::string v = sched.find_violation();
    INFO(v);
    REQUIRE(v.empty());
  }
  preemptions += sched.stats().num_preemptions;
  hit_tokens += sched.stats().prefix_hits_tokens;
}

}  // namespace

TEST_CASE("random manager use agrees with the naive model on every op, 10 seeds x 100k ops",
          "[core][slow]") {
  Coverage cov;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) run_manager_seed(seed, 100000, cov);
  // The generator must actually reach the interesting paths.
  CHECK(cov.hit_blocks > 10000);
  CHECK(cov.failed_allocs > 100);
  CHECK(cov.evictions > 1000);
  CHECK(cov.resets > 0);
}

TEST_CASE("random scheduler runs keep every invariant, 10 seeds x 100k ops", "[core][slow]") {
  std::int64_t preemptions = 0, hit_tokens = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed)
    run_scheduler_seed(seed, 100000, preemptions, hit_tokens);
  CHECK(preemptions > 100);
  CHECK(hit_tokens > 10000);
}
