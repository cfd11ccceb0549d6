// The V0 engine's forks through EngineCore (add_forking_request, what the simulator's
// workload.parallel_sampling: fork drives): children join the parent's group at its first sampled
// token sharing its blocks, copy-on-write happens at the first append of the shared partial block
// (the first sharers to append get the copies, the last keeps the block), sharing is visible in
// pool_stats, swapping a forked group moves every sequence, and the recompute fallback policy.

#include <catch2/catch.hpp>
#include <memory>
#include <numeric>
#include <vector>

#include "core/engine_factory.h"
#include "core/v0/scheduler.h"

using namespace kvsim;

namespace {

EngineParams params(std::int32_t bs, std::int32_t gpu, std::int32_t cpu) {
  EngineParams p;
  p.profile = Profile::kVllm072V0;
  p.cache.block_size = bs;
  p.cache.num_gpu_blocks = gpu;
  p.cache.enable_caching = false;
  p.scheduler.max_num_seqs = 16;
  p.scheduler.max_num_batched_tokens = 256;
  p.scheduler.max_model_len = 256;
  p.v0.num_cpu_blocks = cpu;
  return p;
}

std::vector<Token> iota(int n, Token start = 0) {
  std::vector<Token> t(static_cast<std::size_t>(n));
  std::iota(t.begin(), t.end(), start);
  return t;
}

/// A parent and n - 1 children with the same prompt, each to generate `max_tokens` tokens.
std::vector<std::unique_ptr<Request>> samples(int n, int prompt, std::int64_t max_tokens,
                                              std::int64_t first_index = 0) {
  std::vector<std::unique_ptr<Request>> out;
  for (int i = 0; i < n; ++i) {
    SamplingLimits lim;
    lim.max_tokens = max_tokens;
    out.push_back(std::make_unique<Request>(first_index + i, iota(prompt), lim));
  }
  return out;
}

void add_forking(EngineCore& e, std::vector<std::unique_ptr<Request>>& reqs) {
  std::vector<Request*> children;
  for (std::size_t i = 1; i < reqs.size(); ++i) {
    reqs[i]->sampled_token = static_cast<Token>(1000 + i);
    children.push_back(reqs[i].get());
  }
  e.add_forking_request(*reqs[0], children);
}

/// One step; every scheduled request samples 7.
void step(EngineCore& e, SchedulerOutput& out, std::vector<RequestOutput>& outs) {
  e.schedule(out);
  for (const ScheduledRequest& s : out.scheduled) s.request->sampled_token = 7;
  e.update_from_output(outs);
  REQUIRE(e.find_violation() == "");
}

}  // namespace

TEST_CASE("V0 forks share the prompt's blocks and copy the partial block on first append",
          "[core]") {
  auto e = make_engine(params(4, 32, 0));
  REQUIRE(e->supports_forking());
  auto reqs = samples(3, 6, 3);  // 6 prompt tokens: a full block and a partial one of 2
  add_forking(*e, reqs);
  CHECK(e->num_waiting() == 1);  // one group
  SchedulerOutput out;
  std::vector<RequestOutput> outs;

  // Step 1: the parent's prompt; at its end the children fork with their own first tokens.
  step(*e, out, outs);
  REQUIRE(out.scheduled.size() == 1);
  CHECK(out.scheduled[0].request == reqs[0].get());
  CHECK(out.scheduled[0].num_tokens == 6);
  REQUIRE(outs.size() == 3);  // each child (in order), then the parent
  CHECK(outs[0].request == reqs[1].get());
  CHECK(outs[0].token == 1001);
  CHECK(outs[1].request == reqs[2].get());
  CHECK(outs[1].token == 1002);
  CHECK(outs[2].request == reqs[0].get());
  CHECK(outs[2].token == 7);
  for (const auto& r : reqs) {
    CHECK(r->num_tokens() == 7);
    CHECK(r->status == RequestStatus::kRunning);
  }
  // Three tables of the same two blocks: 6 table entries, 2 blocks in use.
  CHECK(e->block_table(*reqs[1]).size() == 2);
  CHECK(std::vector<BlockId>(e->block_table(*reqs[1]).begin(), e->block_table(*reqs[1]).end()) ==
        std::vector<BlockId>(e->block_table(*reqs[0]).begin(), e->block_table(*reqs[0]).end()));
  KVPoolStats st = e->pool_stats();
  CHECK(st.num_table_blocks == 6);
  CHECK(st.num_blocks - st.num_free_blocks == 2);
  CHECK(e->running().size() == 3);

  // Step 2: three decodes; the parent and the first child append into the shared partial block
  // and get copies of it (refcount 3, then 2); the second child keeps the original.
  const BlockId shared = e->block_table(*reqs[0])[1];
  step(*e, out, outs);
  REQUIRE(out.scheduled.size() == 3);
  REQUIRE(out.blocks_to_copy.size() == 2);
  CHECK(out.blocks_to_copy[0].first == to_int(shared));
  CHECK(out.blocks_to_copy[1].first == to_int(shared));
  CHECK(to_int(e->block_table(*reqs[0])[1]) == out.blocks_to_copy[0].second);
  CHECK(to_int(e->block_table(*reqs[1])[1]) == out.blocks_to_copy[1].second);
  CHECK(e->block_table(*reqs[2])[1] == shared);
  st = e->pool_stats();
  CHECK(st.num_table_blocks == 6);
  CHECK(st.num_blocks - st.num_free_blocks == 4);  // the full block shared, three partial ones

  // Step 3: the last tokens; every sample finishes with its own row.
  step(*e, out, outs);
  CHECK(out.blocks_to_copy.empty());
  for (const auto& r : reqs) {
    CHECK(r->status == RequestStatus::kFinishedLengthCapped);
    CHECK(r->num_output_tokens() == 3);
  }
  CHECK(e->num_unfinished_requests() == 0);
  CHECK(e->pool_stats().num_free_blocks == 32);
}

TEST_CASE("V0 forks of a block-aligned prompt copy nothing", "[core]") {
  auto e = make_engine(params(4, 32, 0));
  auto reqs = samples(3, 8, 3);  // two full blocks
  add_forking(*e, reqs);
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  step(*e, out, outs);
  step(*e, out, outs);
  CHECK(out.blocks_to_copy.empty());
  // Each sample's third block is its own: 3 x 3 table entries, 2 shared + 3 own blocks.
  const KVPoolStats st = e->pool_stats();
  CHECK(st.num_table_blocks == 9);
  CHECK(st.num_blocks - st.num_free_blocks == 5);
  step(*e, out, outs);
  for (const auto& r : reqs) CHECK(r->num_output_tokens() == 3);
  CHECK(e->num_unfinished_requests() == 0);
}

TEST_CASE("a forked group holds n seats from admission and swaps as one", "[core]") {
  // 12 GPU blocks of 2 tokens, two groups of 3 samples with 4-token prompts: at the 7th token
  // the older group needs 3 blocks and 2 are free, so the newer one (5 blocks: 2 shared, 3 own)
  // is swapped out; its copy on the CPU has lost the sharing (9 blocks), and it comes back when
  // the older group finishes.
  EngineParams p = params(2, 12, 64);
  p.v0.preemption_mode = v0::PreemptionMode::kSwap;
  auto e = make_engine(p);
  auto a = samples(3, 4, 4, 0);
  auto b = samples(3, 4, 4, 3);
  add_forking(*e, a);
  add_forking(*e, b);
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  bool swapped_out = false, swapped_in = false;
  for (int i = 0; i < 100 && e->num_unfinished_requests() > 0; ++i) {
    e->schedule(out);
    if (out.num_swapped_out > 0) {
      swapped_out = true;
      // The victim is the newest group, listed once by its first request; all three of its
      // sequences went to the CPU.
      REQUIRE(out.preempted.size() == 1);
      CHECK(out.preempted[0] == b[0].get());
      CHECK(e->num_swapped() == 1);
      for (const auto& r : b) CHECK(r->status == RequestStatus::kPreempted);
      CHECK(e->pool_stats().num_free_cpu_blocks < 64);
    }
    swapped_in |= !out.blocks_to_swap_in.empty();
    for (const ScheduledRequest& s : out.scheduled) s.request->sampled_token = 7;
    e->update_from_output(outs);
    REQUIRE(e->find_violation() == "");
  }
  CHECK(swapped_out);
  CHECK(swapped_in);
  for (const auto* group : {&a, &b})
    for (const auto& r : *group) CHECK(r->num_output_tokens() == 4);
  CHECK(e->pool_stats().num_free_cpu_blocks == 64);
  CHECK(e->pool_stats().num_free_blocks == 12);
}

TEST_CASE("on_swap_space_exhausted: recompute preempts a one-sequence victim by recompute",
          "[core]") {
  // As the test of the engine-killing RuntimeError, with the non-vLLM policy: no error, the
  // victim is recomputed and every request completes.
  EngineParams p = params(2, 6, 1);
  p.scheduler.max_num_seqs = 8;
  p.v0.preemption_mode = v0::PreemptionMode::kSwap;
  p.v0.on_swap_space_exhausted = v0::SwapSpaceExhausted::kRecompute;
  auto e = make_engine(p);
  std::vector<std::unique_ptr<Request>> reqs;
  for (int i = 0; i < 2; ++i) {
    SamplingLimits lim;
    lim.max_tokens = 6;
    reqs.push_back(std::make_unique<Request>(i, iota(4, 100 * i), lim));
    e->add_request(*reqs.back());
  }
  SchedulerOutput out;
  std::vector<RequestOutput> outs;
  int recomputed = 0;
  for (int i = 0; i < 100 && e->num_unfinished_requests() > 0; ++i) {
    e->schedule(out);
    recomputed += static_cast<int>(out.preempted.size()) - out.num_swapped_out;
    for (const ScheduledRequest& s : out.scheduled) s.request->sampled_token = 7;
    e->update_from_output(outs);
    REQUIRE(e->find_violation() == "");
  }
  CHECK(recomputed > 0);
  for (const auto& r : reqs) CHECK(r->num_output_tokens() == 6);
}

TEST_CASE("check_engine_params refuses V0 settings under other profiles", "[core]") {
  EngineParams p;
  p.profile = Profile::kVllm072;
  CHECK_FALSE(check_engine_params(p).has_value());
  p.v0.preemption_mode = v0::PreemptionMode::kSwap;
  auto bad = check_engine_params(p);
  REQUIRE(bad);
  CHECK(bad->key == "scheduler.preemption_mode");
  p.v0 = {};
  p.v0.swap_space_gib = 8;
  CHECK(check_engine_params(p)->key == "cache.swap_space");
  p.v0 = {};
  p.v0.enable_chunked_prefill = true;  // what V1 does
  CHECK_FALSE(check_engine_params(p).has_value());
  p.v0.enable_chunked_prefill = false;
  CHECK(check_engine_params(p)->key == "scheduler.enable_chunked_prefill");
  p.profile = Profile::kOrcaMax;  // never chunks
  CHECK_FALSE(check_engine_params(p).has_value());
  p.v0 = {};
  p.v0.policy = v0::SchedulingPolicy::kPriority;
  CHECK(check_engine_params(p)->key == "scheduler.scheduling_policy");
  p.v0 = {};
  p.v0.on_swap_space_exhausted = v0::SwapSpaceExhausted::kRecompute;
  CHECK(check_engine_params(p)->key == "scheduler.on_swap_space_exhausted");

  // Under V0: vLLM's own configuration errors, at the batch size.
  p = EngineParams{};
  p.profile = Profile::kVllm072V0;
  p.scheduler.max_num_batched_tokens = 4096;
  p.scheduler.max_model_len = 8192;
  bad = check_engine_params(p);
  REQUIRE(bad);
  CHECK(bad->key == "scheduler.max_num_batched_tokens");
  CHECK_THAT(bad->message, Catch::StartsWith("vLLM raises ValueError: max_num_batched_tokens "
                                             "(4096) is smaller than max_model_len (8192)"));
  p.v0.enable_chunked_prefill = true;
  CHECK_FALSE(check_engine_params(p).has_value());
  p.scheduler.max_num_batched_tokens = 4100;  // not a multiple of the block size, with caching
  CHECK_THAT(check_engine_params(p)->message, Catch::Contains("must be dividable by block size"));
  // vLLM's default turns chunking on above 32K tokens of context only.
  p.v0.enable_chunked_prefill.reset();
  p.scheduler.max_num_batched_tokens = 4096;
  p.scheduler.max_model_len = 32768;
  CHECK(check_engine_params(p).has_value());
  p.scheduler.max_model_len = 32769;
  CHECK_FALSE(check_engine_params(p).has_value());
}
