// The V0 scheduler's fast-forward (decode_horizon / advance_decode): k decode steps at once must
// leave exactly the state of k schedule() / update_from_output() pairs -- the whole scheduler
// (clock, delay and budget bookkeeping, queues, sequences) and block manager (tables and their
// hashes, access times, tracked hashes and cached counts, free list, evictor order, registered /
// computed / touched blocks, counters), every request's tokens and status, and the pool's figures
// after each step -- on random workloads under both policies, with and without prefix caching
// (shared prefixes, identical requests whose blocks deduplicate), block sizes 1 to 16, small
// pools that keep requests waiting or preempt, swapping, aborts and a delay factor. Where the
// horizon is exact (no prefix caching; or caching with no request waiting and no duplicates) the
// step after a horizon shorter than asked must not be a pure decode.

#include <catch2/catch.hpp>
#include <random>

#include "core/v0/scheduler.h"
#include "decode_side.h"

using namespace kvsim;

namespace {

using Side = kvsim::test::DecodeSide<v0::Scheduler>;

bool same_v0_pool(const KVPoolStats& a, const KVPoolStats& b) {
  return kvsim::test::same_pool(a, b) && a.num_table_blocks == b.num_table_blocks &&
         a.num_cpu_blocks == b.num_cpu_blocks && a.num_free_cpu_blocks == b.num_free_cpu_blocks;
}

/// Compares everything the two schedulers hold; "" when equal.
std::string difference(const Side& a, const Side& b) {
  if (a.requests.size() != b.requests.size()) return "request count";
  for (std::size_t i = 0; i < a.requests.size(); ++i)
    if (std::string d = kvsim::test::request_difference(i, a.requests[i], b.requests[i]);
        !d.empty())
      return d;
  const auto ra = a.sched.running(), rb = b.sched.running();
  if (ra.size() != rb.size()) return "running count";
  for (std::size_t i = 0; i < ra.size(); ++i)
    if (ra[i]->index() != rb[i]->index()) return "running order";
  if (!same_v0_pool(a.sched.pool_stats(), b.sched.pool_stats())) return "pool stats";
  const std::string sa = a.sched.state_string(), sb = b.sched.state_string();
  if (sa != sb) return "scheduler state:\n" + sa + "\nvs\n" + sb;
  return "";
}

struct Workload {
  std::mt19937_64 rng;
  std::vector<std::vector<Token>> prefixes;
  bool duplicates = false;
  std::int64_t max_model_len = 256;
  std::int64_t next_index = 0;
  std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }
};

/// A random request on both sides (or, with duplicates, sometimes a copy of the last one: same
/// prompt, limits and outputs, so their blocks deduplicate when caching).
void add_random(Side& a, Side& b, Workload& w) {
  std::vector<Token> prompt;
  SamplingLimits lim;
  std::vector<Token> plan;
  if (w.duplicates && !a.requests.empty() && w.pick(0, 2) == 0) {
    const Request& last = a.requests.back();
    const auto all = last.all_token_ids();
    prompt.assign(all.begin(), all.begin() + last.num_prompt_tokens());
    lim = last.limits;
    plan = a.plans.back();
  } else {
    if (w.pick(0, 1) == 0) {
      const auto& pre = w.prefixes[static_cast<std::size_t>(w.pick(0, 2))];
      prompt = pre;
    }
    for (std::int64_t t = w.pick(1, 60); t > 0; --t)
      prompt.push_back(static_cast<Token>(w.pick(10, 99)));
    const auto num_prompt = static_cast<std::int64_t>(prompt.size());
    lim.max_tokens = w.pick(1, std::min<std::int64_t>(120, w.max_model_len - num_prompt));
    lim.ignore_eos = w.pick(0, 1) == 0;
    lim.eos_token_id = 7;
    if (w.pick(0, 3) == 0) lim.stop_token_ids = {8};
    plan.resize(static_cast<std::size_t>(lim.max_tokens));
    for (Token& t : plan)
      t = static_cast<Token>(w.pick(0, 80) == 0 ? w.pick(7, 8) : w.pick(10, 13));
  }
  const std::int64_t index = w.next_index++;
  for (Side* s : {&a, &b}) {
    s->plans.push_back(plan);
    s->requests.emplace_back(index, prompt, lim);
    Request& r = s->requests.back();
    r.planned_outputs = s->plans.back();
    s->sched.add_request(r);
  }
}

/// Whether the last step scheduled every running request for one token, preempted, ignored and
/// finished none.
bool pure_decode(const Side& s, std::size_t running_before) {
  if (s.out.scheduled.size() != running_before || !s.out.preempted.empty() ||
      !s.out.ignored.empty())
    return false;
  for (const ScheduledRequest& r : s.out.scheduled)
    if (r.num_tokens != 1 || r.num_computed_tokens == 0) return false;
  for (const RequestOutput& o : s.outputs)
    if (o.finished) return false;
  return true;
}

v0::V0Config random_config(Workload& w, std::uint64_t seed) {
  v0::V0Config c;
  const std::int32_t sizes[] = {1, 2, 4, 8, 16};
  c.block_size = sizes[seed % 5];
  c.enable_prefix_caching = (seed / 5) % 2 == 0;
  c.enable_chunked_prefill = w.pick(0, 2) == 0;
  c.max_model_len = w.max_model_len;
  c.max_num_seqs = w.pick(1, 12);
  c.max_num_batched_tokens =
      c.enable_chunked_prefill ? 16 * w.pick(2, 16) : w.max_model_len + 16 * w.pick(0, 16);
  c.num_gpu_blocks = static_cast<std::int32_t>(w.pick(300, 1500) / c.block_size + 2);
  if (w.pick(0, 3) == 0) {
    c.preemption_mode = v0::PreemptionMode::kSwap;
    c.num_cpu_blocks = static_cast<std::int32_t>(w.pick(0, 400) / c.block_size);
    c.on_swap_space_exhausted = v0::SwapSpaceExhausted::kRecompute;
  }
  if (w.pick(0, 5) == 0) c.delay_factor = 0.5;
  return c;
}

}  // namespace

TEST_CASE("V0 advance_decode leaves the state of as many decode steps", "[core][ff]") {
  std::int64_t runs = 0, run_steps = 0, horizon_ends = 0, waiting_runs = 0, cached_runs = 0;
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    Workload w{std::mt19937_64(seed), {}, seed % 4 == 0};
    for (int p = 0; p < 3; ++p) {
      std::vector<Token> pre;
      for (std::int64_t t = w.pick(8, 40); t > 0; --t)
        pre.push_back(static_cast<Token>(w.pick(10, 99)));
      w.prefixes.push_back(pre);
    }
    const v0::V0Config config = random_config(w, seed);
    INFO("seed " << seed << " block size " << config.block_size << " caching "
                 << config.enable_prefix_caching << " chunked " << config.enable_chunked_prefill);
    Side a(config), b(config);
    std::vector<KVPoolStats> pools;
    for (int round = 0; round < 60; ++round) {
      if (w.pick(0, 2) == 0) add_random(a, b, w);
      if (w.pick(0, 15) == 0 && !a.requests.empty()) {  // an abort, both sides
        const auto i =
            static_cast<std::size_t>(w.pick(0, static_cast<std::int64_t>(a.requests.size()) - 1));
        REQUIRE(a.sched.abort_request(a.requests[i]) == b.sched.abort_request(b.requests[i]));
      }
      for (std::int64_t s = w.pick(0, 2); s > 0; --s) {  // ordinary steps, both sides
        a.step();
        b.step();
      }
      const std::int64_t max_steps = w.pick(1, 60);
      const std::int64_t k = a.sched.decode_horizon(max_steps);
      REQUIRE(k == b.sched.decode_horizon(max_steps));
      if (k == 0) continue;
      const bool waiting = a.sched.num_waiting() > 0;
      pools.resize(static_cast<std::size_t>(k));
      a.sched.advance_decode(k, pools);
      for (std::int64_t j = 0; j < k; ++j) {
        const std::size_t before = b.sched.running().size();
        b.step();
        REQUIRE(pure_decode(b, before));
        REQUIRE(same_v0_pool(pools[static_cast<std::size_t>(j)], b.sched.pool_stats()));
      }
      ++runs;
      run_steps += k;
      waiting_runs += waiting ? 1 : 0;
      cached_runs += config.enable_prefix_caching ? 1 : 0;
      const std::string d = difference(a, b);
      INFO("after a run of " << k << " steps in round " << round);
      REQUIRE(d.empty());
      REQUIRE(a.sched.find_violation().empty());
      if (k < max_steps) {
        const std::size_t before = a.sched.running().size();
        a.step();
        b.step();
        if (!config.enable_prefix_caching || (!waiting && !w.duplicates)) {
          CHECK_FALSE(pure_decode(a, before));  // the horizon is exact here
          ++horizon_ends;
        }
      }
    }
  }
  CHECK(runs > 1000);
  CHECK(run_steps > 5 * runs);
  CHECK(horizon_ends > 100);
  CHECK(waiting_runs > 100);
  CHECK(cached_runs > 300);
}

TEST_CASE("the V0 fast-forward comparison catches a planted difference", "[core][ff]") {
  v0::V0Config c;
  c.block_size = 4;
  c.num_gpu_blocks = 200;
  c.enable_prefix_caching = true;
  c.max_model_len = 256;
  c.max_num_batched_tokens = 256;
  Side a(c), b(c);
  Workload w{std::mt19937_64(3), {{20, 21, 22, 23, 24}}, false};
  w.prefixes.resize(3, w.prefixes[0]);
  for (int i = 0; i < 3; ++i) add_random(a, b, w);
  a.step();
  b.step();
  REQUIRE(difference(a, b).empty());
  const std::int64_t k = a.sched.decode_horizon(5);
  REQUIRE(k >= 2);
  std::vector<KVPoolStats> pools(static_cast<std::size_t>(k));
  a.sched.advance_decode(k, pools);
  for (std::int64_t j = 0; j + 1 < k; ++j) b.step();  // one step short
  CHECK_FALSE(difference(a, b).empty());
  b.step();
  CHECK(difference(a, b).empty());
}

TEST_CASE("a block freed by deduplication ends the V0 horizon before the head fits", "[core][ff]") {
  // Two identical requests fill a block with the same content in the same step: the second's
  // promotion finds the first's hash and frees its own block. A head that needs exactly that
  // block is admitted at the next step, so the horizon must stop before it.
  v0::V0Config c;
  c.block_size = 4;
  c.num_gpu_blocks = 20;  // watermark_blocks = int(0.01 * 20) = 0
  c.enable_prefix_caching = true;
  c.max_model_len = 256;
  c.max_num_batched_tokens = 256;
  Side a(c), b(c);
  SamplingLimits lim;
  lim.max_tokens = 50;
  lim.ignore_eos = true;
  std::vector<Token> plan(50);
  for (std::size_t i = 0; i < plan.size(); ++i) plan[i] = static_cast<Token>(50 + i);
  std::vector<Token> head_prompt(72);  // 18 blocks
  for (std::size_t i = 0; i < head_prompt.size(); ++i) head_prompt[i] = static_cast<Token>(200 + i);
  const auto add = [&](std::int64_t index, const std::vector<Token>& prompt) {
    for (Side* s : {&a, &b}) {
      s->plans.push_back(plan);
      s->requests.emplace_back(index, prompt, lim);
      s->requests.back().planned_outputs = s->plans.back();
      s->sched.add_request(s->requests.back());
    }
  };
  add(0, {1, 2, 3, 4, 5});  // one full block (shared by the second) and one slot of the next
  add(1, {1, 2, 3, 4, 5});
  a.step();
  b.step();
  add(2, head_prompt);
  a.step();  // looks at the head (its cached count is recorded) and leaves it: 17 blocks free
  b.step();
  REQUIRE(a.sched.pool_stats().num_free_blocks == 17);
  REQUIRE(a.sched.num_waiting() == 1);
  // Step 1 appends slot 6, step 2 fills the block (the second request's copy is freed: 18 free),
  // step 3's _schedule_prefills admits the head.
  const std::int64_t k = a.sched.decode_horizon(10);
  CHECK(k == 2);
  std::vector<KVPoolStats> pools(static_cast<std::size_t>(k));
  a.sched.advance_decode(k, pools);
  for (std::int64_t j = 0; j < k; ++j) b.step();
  CHECK(pools.back().num_free_blocks == 18);
  REQUIRE(difference(a, b).empty());
  const std::size_t before = b.sched.running().size();
  b.step();
  CHECK_FALSE(pure_decode(b, before));
  CHECK(b.sched.num_waiting() == 0);
}
