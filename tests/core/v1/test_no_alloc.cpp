// The hot paths allocate nothing: once warm, Scheduler::schedule() and update_from_output()
// (and through them allocate_slots, get_computed_blocks, free) make no heap allocation. Global
// operator new is replaced in this test executable to count allocations (alloc_counter.h).

#include <catch2/catch.hpp>
#include <memory>
#include <random>

#include "alloc_counter.h"
#include "core/v1/scheduler.h"

using namespace kvsim;
using kvsim::test::g_allocations;
using kvsim::test::g_counting;

namespace {

/// Steps a shared-prefix workload through `profile`'s scheduler (with a sliding window of
/// `window_tokens` when > 0) and counts the heap allocations of the steps after the warm-up.
/// vllm-0.20 variants: the async scheduler (two steps in flight), a hybrid layout (a
/// sliding-window group and a full one, as gpt-oss).
struct V020Setup {
  bool async = false;
  bool hybrid = false;
};

/// `explicit_reserve`: the owner sizes each request's tables first (as the simulator does);
/// without it add_request alone must (as the replayer and bench drive the core).
void check_steps_allocate_nothing(Profile profile, std::int64_t window_tokens,
                                  V020Setup v020 = {}, bool explicit_reserve = true) {
  INFO(profile_name(profile) << ", window " << window_tokens << ", async " << v020.async
                             << ", hybrid " << v020.hybrid << ", explicit reserve "
                             << explicit_reserve);
  constexpr std::int32_t kBlockSize = 16;
  KVCacheConfig kc{kBlockSize, 256, 4096, true, 64};
  kc.sliding_window = window_tokens;
  SchedulerConfig sc{32, 512, 4096};
  if (profile != Profile::kVllm072) sc.long_prefill_token_threshold = 300;
  if (profile == Profile::kVllm020) {
    sc.scheduler_reserve_full_isl = true;
    sc.async_scheduling = v020.async;
    if (v020.hybrid) {
      KVGroupSpec sw, full;
      sw.kind = KVGroupKind::kSlidingWindow;
      sw.sliding_window = 128;
      sw.block_size = full.block_size = kBlockSize;
      kc.kv_cache_groups = {sw, full};
      kc.num_gpu_blocks = 512;
    }
  }
  Scheduler sched(sc, kc, profile);
  std::mt19937_64 rng(7);
  std::vector<Token> system_prompt(200);
  for (Token& t : system_prompt) t = static_cast<Token>(rng() % 1000);
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;
  std::vector<std::unique_ptr<Request>> round;
  std::int64_t next_index = 0;
  std::int64_t counted = 0;
  std::int64_t steps_counted = 0;

  for (int r = 0; r < 6; ++r) {
    const bool measure = r >= 3;  // rounds 0-2 warm the pools, queues and hash table
    round.clear();
    for (int i = 0; i < 48; ++i) {
      std::vector<Token> prompt = system_prompt;
      for (int k = 0; k < 100 + static_cast<int>(rng() % 100); ++k)
        prompt.push_back(static_cast<Token>(rng() % 1000));
      SamplingLimits lim;
      lim.max_tokens = 50 + static_cast<std::int64_t>(rng() % 50);
      auto req = std::make_unique<Request>(next_index++, std::move(prompt), lim);
      // Owners size a request's tables once (the simulator does this at arrival).
      if (explicit_reserve) sched.reserve_request(*req, req->num_tokens() + lim.max_tokens);
      sched.add_request(*req);
      round.push_back(std::move(req));
    }
    while (sched.num_unfinished_requests() > 0 || sched.num_steps_in_flight() > 0) {
      g_allocations = 0;
      g_counting = measure;
      if (sched.num_unfinished_requests() > 0) sched.schedule(out);
      // Async: a batch queue of two (update the oldest once two are in flight).
      if (!v020.async || sched.num_steps_in_flight() == 2 || sched.num_unfinished_requests() == 0) {
        for (Request* q : sched.running())
          q->sampled_token = static_cast<Token>(q->num_tokens() % 1000);
        for (const InFlightRequest& e : sched.oldest_in_flight())
          if (e.request)
            e.request->sampled_token = static_cast<Token>(e.request->num_tokens() % 1000);
        sched.update_from_output(outputs);
      }
      g_counting = false;
      counted += g_allocations;
      steps_counted += measure;
    }
  }
  CHECK(steps_counted > 100);
  CHECK(sched.stats().prefix_hits_tokens > 0);  // the system prompt is shared
  CHECK(counted == 0);
}

}  // namespace

TEST_CASE("once warm the scheduler step allocates nothing on the heap", "[core]") {
  check_steps_allocate_nothing(Profile::kVllm072, 0);
  check_steps_allocate_nothing(Profile::kVllm085, 0);
  check_steps_allocate_nothing(Profile::kVllm085, 64);  // the sliding-window manager
  check_steps_allocate_nothing(Profile::kVllm020, 0);
  check_steps_allocate_nothing(Profile::kVllm020, 0, {.async = true});
  check_steps_allocate_nothing(Profile::kVllm020, 0, {.hybrid = true});
  check_steps_allocate_nothing(Profile::kVllm020, 0, {.async = true, .hybrid = true});
}

TEST_CASE("add_request alone sizes a request's tables for its token capacity", "[core]") {
  // The replayer and bench_replay add requests without reserve_request: decoding up to
  // max_tokens must not grow the tables or the hash list either.
  check_steps_allocate_nothing(Profile::kVllm072, 0, {}, /*explicit_reserve=*/false);
  check_steps_allocate_nothing(Profile::kVllm085, 64, {}, /*explicit_reserve=*/false);
  check_steps_allocate_nothing(Profile::kVllm020, 0, {.async = true}, false);
  check_steps_allocate_nothing(Profile::kVllm020, 0, {.async = true, .hybrid = true}, false);
  for (const Profile p : {Profile::kVllm072, Profile::kVllm020}) {
    Scheduler sched(SchedulerConfig{4, 512, 4096}, KVCacheConfig{16, 64, 4096, true, 0}, p);
    SamplingLimits lim;
    lim.max_tokens = 60;
    Request r(0, std::vector<Token>(100, 1), lim);
    sched.add_request(r);
    const std::vector<BlockId>& table =
        p == Profile::kVllm020 ? r.kv_groups[0].blocks : r.blocks;
    CHECK(table.capacity() >= 10);             // cdiv(100 + 60, 16) blocks
    CHECK(r.block_hashes.capacity() >= 10);    // 160 / 16 full blocks
  }
}

TEST_CASE("the allocation counter sees a cold scheduler step allocate", "[core]") {
  Scheduler sched(SchedulerConfig{4, 512, 4096}, KVCacheConfig{16, 64, 4096, true, 0});
  SamplingLimits lim;
  lim.max_tokens = 4;
  Request r(0, std::vector<Token>(100, 1), lim);  // the step's output vectors start empty
  sched.add_request(r);
  SchedulerOutput out;
  g_allocations = 0;
  g_counting = true;
  sched.schedule(out);
  g_counting = false;
  CHECK(g_allocations > 0);
}
