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

void check_steps_allocate_nothing(Profile profile, std::int64_t window_tokens,
                                  V020Setup v020 = {}) {
  INFO(profile_name(profile) << ", window " << window_tokens << ", async " << v020.async
                             << ", hybrid " << v020.hybrid);
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
      sched.reserve_request(*req, req->num_tokens() + lim.max_tokens);
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

TEST_CASE("the allocation counter sees a request table growing without a reserve", "[core]") {
  Scheduler sched(SchedulerConfig{4, 512, 4096}, KVCacheConfig{16, 64, 4096, true, 0});
  SamplingLimits lim;
  lim.max_tokens = 4;
  Request r(0, std::vector<Token>(100, 1), lim);  // no reserve: the first allocation grows tables
  sched.add_request(r);
  SchedulerOutput out;
  g_allocations = 0;
  g_counting = true;
  sched.schedule(out);
  g_counting = false;
  CHECK(g_allocations > 0);
}
