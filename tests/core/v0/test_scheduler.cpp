// The V0 scheduler through EngineCore (what the simulator drives): requests to completion,
// recompute preemption, swap preemption and the engine-killing RuntimeError, the KV breakdown.

#include <catch2/catch.hpp>
#include <memory>
#include <numeric>
#include <vector>

#include "core/engine_factory.h"
#include "core/v0/scheduler.h"

using namespace kvsim;

namespace {

std::unique_ptr<EngineCore> make_v0(std::int32_t bs, std::int32_t gpu, std::int32_t cpu,
                                    bool caching = false,
                                    std::optional<v0::PreemptionMode> mode = std::nullopt) {
  EngineParams p;
  p.profile = Profile::kVllm072V0;
  p.cache.block_size = bs;
  p.cache.num_gpu_blocks = gpu;
  p.cache.enable_caching = caching;
  p.scheduler.max_num_seqs = 8;
  p.scheduler.max_num_batched_tokens = 256;
  p.scheduler.max_model_len = 256;
  p.v0.num_cpu_blocks = cpu;
  p.v0.preemption_mode = mode;
  return make_engine(p);
}

std::vector<Token> iota(int n, Token start = 0) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

Request req(std::int64_t i, std::vector<Token> prompt, std::int64_t max_tokens) {
  SamplingLimits lim;
  lim.max_tokens = max_tokens;
  return Request(i, std::move(prompt), lim);
}

/// Runs steps until nothing is unfinished; returns the number of steps.
int run(EngineCore& e, std::vector<Request>& reqs, std::vector<std::int64_t>* preempted = nullptr) {
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  int steps = 0;
  while (e.num_unfinished_requests() > 0 && steps < 1000) {
    e.schedule(out);
    if (preempted)
      for (const Request* r : out.preempted) preempted->push_back(r->index());
    for (const ScheduledRequest& s : out.scheduled) s.request->sampled_token = 5;
    e.update_from_output(outs);
    REQUIRE(e.find_violation() == "");
    const KVPoolStats st = e.pool_stats();
    std::vector<std::int64_t> fin;
    for (const Request& r : reqs) fin.push_back(r.num_prompt_tokens() + r.limits.max_tokens - 1);
    REQUIRE(e.kv_breakdown(fin).total() == st.num_blocks * st.block_size);
    ++steps;
  }
  return steps;
}

}  // namespace

TEST_CASE("V0 engine runs requests to completion and frees every block", "[core]") {
  auto e = make_v0(4, 32, 8);
  REQUIRE(e->profile() == Profile::kVllm072V0);
  std::vector<Request> reqs;
  for (int i = 0; i < 4; ++i) reqs.push_back(req(i, iota(6 + i, 10 * i), 3 + i));
  for (Request& r : reqs) e->add_request(r);
  CHECK(e->num_waiting() == 4);
  CHECK(e->first_waiting() == &reqs[0]);
  // Step 1: the default policy prefills all four (no decode in a prefill step).
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  e->schedule(out);
  REQUIRE(out.scheduled.size() == 4);
  CHECK(out.scheduled[0].kind == ScheduledRequest::Kind::kNew);
  CHECK(out.scheduled[1].num_tokens == 7);
  CHECK(e->block_table(reqs[0]).size() == 2);
  e->update_from_output(outs);
  CHECK(outs.size() == 4);
  CHECK(reqs[0].num_output_tokens() == 1);
  run(*e, reqs);
  for (const Request& r : reqs) {
    CHECK(r.status == RequestStatus::kFinishedLengthCapped);
    CHECK(r.num_output_tokens() == r.limits.max_tokens);
  }
  CHECK(e->pool_stats().num_free_blocks == 32);
  CHECK(e->num_unfinished_requests() == 0);
}

TEST_CASE("V0 engine preempts the newest running request by recompute when blocks run out",
          "[core]") {
  auto e = make_v0(2, 6, 0);  // 6 blocks of 2 tokens
  std::vector<Request> reqs;
  reqs.push_back(req(0, iota(4), 6));
  reqs.push_back(req(1, iota(4, 100), 6));
  for (Request& r : reqs) e->add_request(r);
  std::vector<std::int64_t> preempted;
  run(*e, reqs, &preempted);
  REQUIRE(!preempted.empty());
  CHECK(preempted.front() == 1);  // the tail of running is the victim
  CHECK(reqs[1].num_preemptions > 0);
  for (const Request& r : reqs) CHECK(r.num_output_tokens() == 6);
}

TEST_CASE("V0 engine swaps a victim out and back in, no CPU space is a RuntimeError", "[core]") {
  {
    auto e = make_v0(2, 6, 8, false, v0::PreemptionMode::kSwap);
    std::vector<Request> reqs;
    reqs.push_back(req(0, iota(4), 6));
    reqs.push_back(req(1, iota(4, 100), 6));
    for (Request& r : reqs) e->add_request(r);
    SchedulerOutput out;
    std::vector<RequestOutput> outs;
    bool swapped = false, swapped_in = false;
    for (int step = 0; step < 100 && e->num_unfinished_requests() > 0; ++step) {
      e->schedule(out);
      swapped |= out.num_swapped_out > 0 && !out.blocks_to_swap_out.empty();
      swapped_in |= !out.blocks_to_swap_in.empty();
      if (out.num_swapped_out > 0) CHECK(e->num_swapped() == 1);
      e->update_from_output(outs);
      REQUIRE(e->find_violation() == "");
    }
    CHECK(swapped);
    CHECK(swapped_in);
    CHECK(e->pool_stats().num_free_cpu_blocks == 8);
  }
  {
    auto e = make_v0(2, 6, 1, false, v0::PreemptionMode::kSwap);
    std::vector<Request> reqs;
    reqs.push_back(req(0, iota(4), 6));
    reqs.push_back(req(1, iota(4, 100), 6));
    for (Request& r : reqs) e->add_request(r);
    SchedulerOutput out;
    std::vector<RequestOutput> outs;
    bool died = false;
    for (int step = 0; step < 100 && !died; ++step) {
      try {
        e->schedule(out);
        e->update_from_output(outs);
      } catch (const EngineAborted& err) {
        died =
            std::string(err.what()).rfind("RuntimeError: Aborted due to the lack of CPU swap", 0) ==
            0;
        CHECK_THAT(err.what(), Catch::EndsWith("(the CPU swap space has 1 blocks, 1 free)"));
        REQUIRE(err.request() != nullptr);
        CHECK(err.request()->index() == 1);  // the victim: the tail of running
        break;
      }
    }
    CHECK(died);
  }
}

TEST_CASE("V0 engine aborts, ignores too-long prompts and answers prefix-cache lookups", "[core]") {
  auto e = make_v0(4, 16, 0, true);
  std::vector<Request> reqs;
  reqs.push_back(req(0, iota(12), 4));
  reqs.push_back(req(1, iota(300), 4));  // over max_model_len: FINISHED_IGNORED
  reqs.push_back(req(2, iota(8), 4));
  for (Request& r : reqs) e->add_request(r);
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  e->schedule(out);
  REQUIRE(out.ignored.size() == 1);
  CHECK(out.ignored[0] == &reqs[1]);
  CHECK(reqs[1].status == RequestStatus::kFinishedLengthCapped);
  CHECK(out.scheduled.size() == 2);  // 0 and 2 both fit (3 + 2 of 16 blocks)
  e->update_from_output(outs);
  CHECK(e->abort_request(reqs[0]));
  CHECK_FALSE(e->abort_request(reqs[0]));
  CHECK(reqs[0].status == RequestStatus::kFinishedAborted);
  // The aborted request's full prompt blocks stay cached (marked computed at the end of the
  // schedule() that allocated them): a lookup of the same prompt hits all 12 tokens.
  Request probe = req(7, iota(12), 1);
  CHECK(e->cache_only_request(probe) == 12);
  Request other = req(8, iota(12, 50), 1);
  CHECK(e->cache_only_request(other) == 0);
  std::vector<BlockId> cached;
  e->cached_blocks(cached);
  CHECK(cached.size() >= 2);
  REQUIRE(e->find_violation() == "");
}
