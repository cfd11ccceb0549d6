// Randomized differential tests, for every V1 profile: scheduler-like use of the manager (shared
// prefixes, chunked prefill, decode, preemption, finishes, memory pressure; at v0.8.5 also
// lookahead slots and sliding windows), checked after every op against the naive model and the
// invariant walk; and random scheduler runs with the invariant walk after every
// schedule/update/abort.

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

/// Every live request's block table equals the naive model's (null entries included).
bool r_tables_agree(const std::vector<Live>& live) {
  for (const Live& l : live)
    if (as_ints(l.req->blocks) !=
        std::vector<std::int32_t>(l.naive.table.begin(), l.naive.table.end()))
      return false;
  return true;
}

struct Coverage {
  std::int64_t hit_blocks = 0, failed_allocs = 0, evictions = 0, resets = 0;
};

void run_manager_seed(Profile profile, std::uint64_t seed, int num_ops, Coverage& cov) {
  INFO(profile_name(profile) << " seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {  // inclusive
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const V1Policy& policy = v1_policy(profile);
  const bool v085 = profile == Profile::kVllm085;
  const int bs = std::array<int, 3>{2, 4, 8}[rng() % 3];
  const int num_blocks = static_cast<int>(uniform(12, 48));
  const bool caching = rng() % 8 != 0;
  const std::int64_t prealloc = std::array<std::int64_t, 3>{0, bs, 64}[rng() % 3];
  const std::int64_t max_len = 4096;
  // v0.8.5: half the seeds model a sliding window (v0.7.2 stores it and ignores it). Windows are
  // longer than a block: vLLM asserts otherwise (see test_v085_policy.cpp).
  const std::int64_t window =
      rng() % 2 ? std::array<std::int64_t, 4>{bs + 1, 2 * bs, 3 * bs, 5 * bs + 3}[rng() % 4] : 0;
  INFO("block size " << bs << ", " << num_blocks << " blocks, caching " << caching
                     << ", sliding window " << window);
  KVCacheConfig config{bs, num_blocks, max_len, caching, prealloc};
  config.sliding_window = window;
  KVCacheManager kv(config, policy);
  NaivePool naive(bs, num_blocks, max_len, caching, prealloc,
                  NaiveRelease{v085, v085 ? window : 0});
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
        if (hit_tokens == r.num_tokens()) {  // v0.7.2: the scheduler's full-hit rule
          REQUIRE_FALSE(v085);
          hits.pop_back();
          nh.pop_back();
          hit_tokens -= bs;
        }
        const std::int64_t n = std::min(r.num_tokens() - hit_tokens, uniform(1, 6 * bs));
        const std::int64_t lookahead = v085 && rng() % 4 == 0 ? uniform(1, 2 * bs) : 0;
        const AllocResult res = kv.allocate_slots(r, n, hits, lookahead);
        const auto nres = naive.allocate(l.naive, n, nh, lookahead);
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
        const std::int64_t lookahead = v085 && rng() % 4 == 0 ? uniform(1, 2 * bs) : 0;
        const AllocResult res = kv.allocate_slots(r, n, {}, lookahead);
        const auto nres = naive.allocate(l.naive, n, {}, lookahead);
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
    REQUIRE(r_tables_agree(live));
    for (int b = 0; b < num_blocks; ++b) {  // the null block's raw count included
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
  // Everything released: all blocks free (but the null block), and only cached blocks (and their
  // ancestors) hold hashes.
  CHECK(kv.pool().num_free_blocks() == num_blocks - (v085 ? 1 : 0));
  CHECK(kv.find_violation({}).empty());
  CHECK(kv.hashes().size() >= kv.pool().num_cached_hashes());
}

void run_scheduler_seed(Profile profile, std::uint64_t seed, int num_ops, std::int64_t& preemptions,
                        std::int64_t& hit_tokens) {
  INFO(profile_name(profile) << " seed " << seed);
  std::mt19937_64 rng(seed);
  auto uniform = [&](std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(hi - lo + 1));
  };
  const bool v085 = profile == Profile::kVllm085;
  const std::int32_t bs = std::array<std::int32_t, 3>{2, 4, 16}[rng() % 3];
  const std::int64_t max_len = 64 * bs;
  SchedulerConfig sc{uniform(1, 8), uniform(bs, 12 * bs), max_len};
  KVCacheConfig kc{bs, static_cast<std::int32_t>(uniform(12, 30)), max_len, rng() % 6 != 0,
                   rng() % 2 ? 64 : 0};
  if (v085) {  // v0.8.5's knobs, each on for some seeds
    sc.long_prefill_token_threshold = rng() % 2 ? uniform(1, 3 * bs) : 0;
    sc.num_lookahead_tokens = rng() % 3 == 0 ? uniform(1, bs) : 0;
    kc.sliding_window = rng() % 3 == 0 ? uniform(bs + 1, 6 * bs) : 0;  // longer than a block
  }
  INFO("threshold " << sc.long_prefill_token_threshold << ", lookahead " << sc.num_lookahead_tokens
                    << ", window " << kc.sliding_window);
  Scheduler sched(sc, kc, profile);
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
      for (const ScheduledRequest& s : out.scheduled)
        if (sc.long_prefill_token_threshold > 0)
          REQUIRE(s.num_tokens <= sc.long_prefill_token_threshold);
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
  for (const Profile p : {Profile::kVllm072, Profile::kVllm085}) {
    Coverage cov;
    for (std::uint64_t seed = 1; seed <= 10; ++seed) run_manager_seed(p, seed, 100000, cov);
    INFO(profile_name(p));
    // The generator must actually reach the interesting paths.
    CHECK(cov.hit_blocks > 10000);
    CHECK(cov.failed_allocs > 100);
    CHECK(cov.evictions > 1000);
    CHECK(cov.resets > 0);
  }
}

TEST_CASE("random scheduler runs keep every invariant, 10 seeds x 100k ops", "[core][slow]") {
  for (const Profile p : {Profile::kVllm072, Profile::kVllm085}) {
    std::int64_t preemptions = 0, hit_tokens = 0;
    for (std::uint64_t seed = 1; seed <= 10; ++seed)
      run_scheduler_seed(p, seed, 100000, preemptions, hit_tokens);
    INFO(profile_name(p));
    CHECK(preemptions > 100);
    CHECK(hit_tokens > 10000);
  }
}
