// The V1 scheduler's fast-forward (decode_horizon / advance_decode): k decode steps at once must
// leave exactly the state of k schedule() / update_from_output() pairs -- every block table and
// cached count, every token, the free queue in its eviction order, the cached blocks, the pool's
// counters after each step -- on random workloads (shared prefixes, small pools that evict,
// preallocation, lookahead, EOS and stop tokens, arrivals between runs).

#include <catch2/catch.hpp>
#include <deque>
#include <random>

#include "core/v1/scheduler.h"
#include "decode_side.h"
#include "test_util.h"

using namespace kvsim;
using kvsim::test::free_queue_ids;
using kvsim::test::request_difference;
using kvsim::test::same_pool;

namespace {

using Side = kvsim::test::DecodeSide<Scheduler>;

/// Compares everything the two schedulers hold; "" when equal.
std::string difference(const Side& a, const Side& b) {
  if (a.requests.size() != b.requests.size()) return "request count";
  for (std::size_t i = 0; i < a.requests.size(); ++i) {
    const Request& x = a.requests[i];
    const Request& y = b.requests[i];
    if (std::string d = request_difference(i, x, y); !d.empty()) return d;
    const std::string id = "request " + std::to_string(i) + ": ";
    if (is_finished(x.status)) continue;
    const auto tx = a.sched.group_block_table(x, 0), ty = b.sched.group_block_table(y, 0);
    if (!std::equal(tx.begin(), tx.end(), ty.begin(), ty.end())) return id + "block table";
    const bool groups = !x.kv_groups.empty();
    if ((groups ? x.kv_groups[0].num_cached_block : x.num_cached_block) !=
        (groups ? y.kv_groups[0].num_cached_block : y.num_cached_block))
      return id + "cached blocks";
    if (x.block_hashes.size() != y.block_hashes.size()) return id + "hash list";
  }
  if (!same_pool(a.sched.pool_stats(), b.sched.pool_stats())) return "pool stats";
  if (free_queue_ids(a.sched.kv_cache_manager()) != free_queue_ids(b.sched.kv_cache_manager()))
    return "free queue order";
  std::vector<BlockId> ca, cb;
  a.sched.cached_blocks(ca);
  b.sched.cached_blocks(cb);
  if (ca != cb) return "cached blocks";
  if (a.sched.stats().num_steps != b.sched.stats().num_steps) return "step count";
  return "";
}

void add_random(Side& a, Side& b, std::mt19937_64& rng, std::int64_t index, std::int32_t bs) {
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::vector<Token> prompt;
  const std::int64_t prefix = pick(0, 3);  // one of three shared prefixes, or none
  if (prefix > 0)
    for (std::int64_t t = 0; t < 3 * bs; ++t)
      prompt.push_back(static_cast<Token>(1000 * prefix + t));
  for (std::int64_t t = pick(1, 5 * bs); t > 0; --t)
    prompt.push_back(static_cast<Token>(pick(10, 99)));
  SamplingLimits lim;
  lim.max_tokens = pick(1, 12 * bs);
  lim.ignore_eos = pick(0, 1) == 0;
  lim.eos_token_id = 7;
  if (pick(0, 3) == 0) lim.stop_token_ids = {8};
  std::vector<Token> plan(static_cast<std::size_t>(lim.max_tokens));
  for (Token& t : plan) t = static_cast<Token>(pick(0, 60) == 0 ? pick(7, 8) : pick(10, 99));
  for (Side* s : {&a, &b}) {
    s->plans.push_back(plan);
    s->requests.emplace_back(index, prompt, lim);
    s->requests.back().planned_outputs = s->plans.back();
    s->sched.add_request(s->requests.back());
  }
}

}  // namespace

TEST_CASE("advance_decode leaves the state of as many decode steps", "[core][ff]") {
  std::int64_t runs = 0, run_steps = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    const auto pick = [&](std::int64_t lo, std::int64_t hi) {
      return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const Profile profiles[] = {Profile::kVllm072, Profile::kVllm085, Profile::kVllm020};
    const Profile profile = profiles[seed % 3];
    const std::int32_t block_sizes[] = {2, 4, 8, 16};
    const std::int32_t bs = block_sizes[pick(0, 3)];
    SchedulerConfig sc;
    sc.max_num_seqs = pick(1, 12);
    sc.max_num_batched_tokens = 4096;
    sc.max_model_len = 40 * bs;
    if (profile != Profile::kVllm072) sc.num_lookahead_tokens = pick(0, 1) * pick(1, 3);
    KVCacheConfig kc;
    kc.block_size = bs;
    kc.num_gpu_blocks = static_cast<std::int32_t>(pick(45, 160));
    kc.max_model_len = sc.max_model_len;
    kc.enable_caching = pick(0, 4) > 0;
    kc.num_preallocate_tokens = profile == Profile::kVllm072 ? bs * pick(0, 2) : 0;
    INFO("seed " << seed << " profile " << profile_name(profile) << " block size " << bs);
    Side a(sc, kc, profile), b(sc, kc, profile);
    std::int64_t next_index = 0;
    std::vector<KVPoolStats> pools;
    for (int round = 0; round < 60; ++round) {
      if (pick(0, 2) == 0) add_random(a, b, rng, next_index++, bs);
      for (std::int64_t s = pick(0, 2); s > 0; --s) {  // ordinary steps, both sides
        a.step();
        b.step();
      }
      const std::int64_t max_steps = pick(1, 40);
      const std::int64_t k = a.sched.decode_horizon(max_steps);
      REQUIRE(k == b.sched.decode_horizon(max_steps));
      if (k == 0) continue;
      pools.resize(static_cast<std::size_t>(k));
      a.sched.advance_decode(k, pools);
      for (std::int64_t j = 0; j < k; ++j) {
        const std::size_t before = b.sched.running().size();
        b.step();
        REQUIRE(b.out.scheduled.size() == before);
        for (const ScheduledRequest& s : b.out.scheduled) REQUIRE(s.num_tokens == 1);
        for (const RequestOutput& o : b.outputs) REQUIRE_FALSE(o.finished);
        REQUIRE(same_pool(pools[static_cast<std::size_t>(j)], b.sched.pool_stats()));
      }
      ++runs;
      run_steps += k;
      const std::string d = difference(a, b);
      INFO("after a run of " << k << " steps in round " << round);
      REQUIRE(d.empty());
      REQUIRE(a.sched.find_violation().empty());
    }
  }
  CHECK(runs > 1000);
  CHECK(run_steps > 5 * runs);
}

TEST_CASE("the fast-forward state comparison catches a planted difference", "[core][ff]") {
  // One decode step on one side only: the comparison must see it.
  SchedulerConfig sc;
  KVCacheConfig kc;
  kc.block_size = 4;
  kc.num_gpu_blocks = 64;
  Side a(sc, kc, Profile::kVllm072), b(sc, kc, Profile::kVllm072);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 3; ++i) add_random(a, b, rng, i, 4);
  a.step();
  b.step();
  REQUIRE(difference(a, b).empty());
  const std::int64_t k = a.sched.decode_horizon(5);
  REQUIRE(k >= 2);
  std::vector<KVPoolStats> pools(static_cast<std::size_t>(k));
  a.sched.advance_decode(k, pools);
  for (std::int64_t j = 0; j + 1 < k; ++j) b.step();  // one step short
  CHECK_FALSE(difference(a, b).empty());
}
