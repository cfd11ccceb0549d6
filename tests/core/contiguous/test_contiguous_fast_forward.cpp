// ContiguousScheduler's fast-forward (decode_horizon / advance_decode): k decode steps at once must
// leave exactly the state of k schedule() / update_from_output() pairs -- every request's tokens,
// computed count and status, the running order and extents, the allocator's free regions and the
// pool's counters after each step -- on random workloads under every reservation and placement
// (arrivals between runs, a full pool that keeps requests waiting, EOS and stop tokens, length
// caps). The horizon must also be exact: the step after a run of the full horizon is not a pure
// decode of every running request.

#include <catch2/catch.hpp>
#include <deque>
#include <random>

#include "core/contiguous/contiguous_scheduler.h"
#include "decode_side.h"
#include "test_util.h"

using namespace kvsim;

namespace {

using Side = kvsim::test::DecodeSide<ContiguousScheduler>;
using kvsim::test::request_difference;
using kvsim::test::same_pool;

/// Compares everything the two schedulers hold; "" when equal.
std::string difference(const Side& a, const Side& b) {
  if (a.requests.size() != b.requests.size()) return "request count";
  for (std::size_t i = 0; i < a.requests.size(); ++i)
    if (std::string d = request_difference(i, a.requests[i], b.requests[i]); !d.empty()) return d;
  const auto ra = a.sched.running(), rb = b.sched.running();
  if (ra.size() != rb.size()) return "running count";
  for (std::size_t i = 0; i < ra.size(); ++i) {
    if (ra[i]->index() != rb[i]->index()) return "running order";
    const Extent ea = a.sched.extent(i), eb = b.sched.extent(i);
    if (ea.offset != eb.offset || ea.length != eb.length) return "extent";
  }
  if (a.sched.num_waiting() != b.sched.num_waiting()) return "waiting count";
  std::vector<Extent> fa, fb;
  a.sched.allocator().append_free_regions(fa);
  b.sched.allocator().append_free_regions(fb);
  if (fa.size() != fb.size()) return "free regions";
  for (std::size_t i = 0; i < fa.size(); ++i)
    if (fa[i].offset != fb[i].offset || fa[i].length != fb[i].length) return "free regions";
  if (!same_pool(a.sched.pool_stats(), b.sched.pool_stats())) return "pool stats";
  return "";
}

void add_random(Side& a, Side& b, std::mt19937_64& rng, std::int64_t index,
                std::int64_t max_model_len) {
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  std::vector<Token> prompt;
  for (std::int64_t t = pick(1, 60); t > 0; --t) prompt.push_back(static_cast<Token>(pick(10, 99)));
  const auto num_prompt = static_cast<std::int64_t>(prompt.size());
  SamplingLimits lim;
  lim.max_tokens = pick(1, max_model_len - num_prompt);
  lim.ignore_eos = pick(0, 1) == 0;
  lim.eos_token_id = 7;
  if (pick(0, 3) == 0) lim.stop_token_ids = {8};
  std::vector<Token> plan(static_cast<std::size_t>(lim.max_tokens));
  for (Token& t : plan) t = static_cast<Token>(pick(0, 60) == 0 ? pick(7, 8) : pick(10, 99));
  // The oracle's final length: where the plan first stops it (or its max_tokens).
  std::int64_t outputs = lim.max_tokens;
  for (std::int64_t j = 0; j < lim.max_tokens; ++j) {
    const Token t = plan[static_cast<std::size_t>(j)];
    if ((!lim.ignore_eos && t == 7) || (!lim.stop_token_ids.empty() && t == 8)) {
      outputs = j + 1;
      break;
    }
  }
  for (Side* s : {&a, &b}) {
    s->plans.push_back(plan);
    s->requests.emplace_back(index, prompt, lim);
    Request& r = s->requests.back();
    r.planned_outputs = s->plans.back();
    r.oracle_final_num_tokens = num_prompt + outputs;
    s->sched.add_request(r);
  }
}

/// Whether the last step scheduled every running request for one token and finished none.
bool pure_decode(const Side& s, std::size_t running_before) {
  if (s.out.scheduled.size() != running_before) return false;
  for (const ScheduledRequest& r : s.out.scheduled)
    if (r.num_tokens != 1 || r.num_computed_tokens == 0) return false;
  for (const RequestOutput& o : s.outputs)
    if (o.finished) return false;
  return true;
}

}  // namespace

TEST_CASE("contiguous advance_decode leaves the state of as many decode steps", "[core][ff]") {
  std::int64_t runs = 0, run_steps = 0, horizon_ends = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    const auto pick = [&](std::int64_t lo, std::int64_t hi) {
      return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const ContiguousPolicy::Reservation reservations[] = {
        ContiguousPolicy::Reservation::kMaxModelLen, ContiguousPolicy::Reservation::kPow2,
        ContiguousPolicy::Reservation::kOracle};
    const FitPolicy fits[] = {FitPolicy::kFirstFit, FitPolicy::kBestFit, FitPolicy::kBuddy};
    const ContiguousPolicy policy{reservations[seed % 3], fits[(seed / 3) % 3]};
    SchedulerConfig sc;
    sc.max_num_seqs = pick(1, 12);
    sc.max_num_batched_tokens = pick(64, 256);
    sc.max_model_len = 256;
    KVCacheConfig kc;
    kc.block_size = 1;
    kc.num_gpu_blocks = static_cast<std::int32_t>(pick(256, 1500));
    kc.max_model_len = sc.max_model_len;
    INFO("seed " << seed);
    Side a(Profile::kOrcaOracle, policy, sc, kc), b(Profile::kOrcaOracle, policy, sc, kc);
    std::int64_t next_index = 0;
    std::vector<KVPoolStats> pools;
    for (int round = 0; round < 60; ++round) {
      if (pick(0, 2) == 0) add_random(a, b, rng, next_index++, sc.max_model_len);
      for (std::int64_t s = pick(0, 2); s > 0; --s) {  // ordinary steps, both sides
        a.step();
        b.step();
      }
      const std::int64_t max_steps = pick(1, 60);
      const std::int64_t k = a.sched.decode_horizon(max_steps);
      REQUIRE(k == b.sched.decode_horizon(max_steps));
      if (k == 0) continue;
      pools.resize(static_cast<std::size_t>(k));
      a.sched.advance_decode(k, pools);
      for (std::int64_t j = 0; j < k; ++j) {
        const std::size_t before = b.sched.running().size();
        b.step();
        REQUIRE(pure_decode(b, before));
        REQUIRE(same_pool(pools[static_cast<std::size_t>(j)], b.sched.pool_stats()));
      }
      ++runs;
      run_steps += k;
      const std::string d = difference(a, b);
      INFO("after a run of " << k << " steps in round " << round);
      REQUIRE(d.empty());
      REQUIRE(a.sched.find_violation().empty());
      if (k < max_steps) {  // the horizon ended early: the next step is no pure decode
        const std::size_t before = a.sched.running().size();
        a.step();
        b.step();
        CHECK_FALSE(pure_decode(a, before));
        ++horizon_ends;
      }
    }
  }
  CHECK(runs > 1000);
  CHECK(run_steps > 5 * runs);
  CHECK(horizon_ends > 100);
}

TEST_CASE("the contiguous fast-forward comparison catches a planted difference", "[core][ff]") {
  // One decode step on one side only: the comparison must see it.
  SchedulerConfig sc{16, 512, 256};
  KVCacheConfig kc{1, 2048, 256, false, 0};
  Side a(Profile::kOrcaOracle, ContiguousPolicy{}, sc, kc),
      b(Profile::kOrcaOracle, ContiguousPolicy{}, sc, kc);
  std::mt19937_64 rng(3);
  for (int i = 0; i < 3; ++i) add_random(a, b, rng, i, 256);
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
