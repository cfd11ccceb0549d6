// The timed routers' decision functions (shared/spec/cluster-routing.md §2-§6) on hand-made
// views, with hand-computed answers: vLLM DP's score, scan order and bump (and the dense-model
// round-robin), Dynamo's cost and tie-breaks, the llm-d weighted sum and random tie-break,
// SGLang's balance test.

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "sim/cluster/dynamo_kv.h"
#include "sim/cluster/llm_d.h"
#include "sim/cluster/replica_view.h"
#include "sim/cluster/sglang_cache_aware.h"
#include "sim/cluster/vllm_dp.h"

using namespace kvsim;

TEST_CASE("least_waiting takes the shortest polled waiting queue, ties to the lowest index",
          "[sim]") {
  const std::vector<ReplicaView> v = {{3, 0, 0}, {1, 9, 0}, {1, 0, 0}};
  const RouteDecision d = least_waiting_pick(v);
  CHECK(d.replica == 1);
  CHECK(d.score == 1);
  CHECK(d.runner_up == 2);
}

TEST_CASE("vllm_dp scores 4 waiting + running, keeps the first strict minimum, bumps waiting",
          "[sim]") {
  VllmDpBalancer b(3);
  // waiting {1, 0, 0}, running {0, 3, 5}: scores 4, 3, 5.
  const std::vector<ReplicaView> v = {{1, 0, 0}, {0, 3, 0}, {0, 5, 0}};
  b.on_snapshot(v);
  RouteDecision d = b.pick();
  CHECK(d.replica == 1);
  CHECK(d.score == 3);
  CHECK(d.runner_up == 0);
  CHECK(d.runner_up_score == 4);
  CHECK(b.waiting(1) == 1);  // the local bump: scores now 4, 7, 5
  CHECK(b.pick().replica == 0);
  // A snapshot replaces the view, bumps included.
  b.on_snapshot(v);
  CHECK(b.waiting(0) == 1);
  CHECK(b.waiting(1) == 0);
  CHECK(b.pick().replica == 1);
}

TEST_CASE("vllm_dp on a dense model is round-robin from start, restarted at each zero snapshot",
          "[sim]") {
  VllmDpBalancer b(3);
  b.on_zero_snapshot();
  const int expect[] = {0, 1, 2, 0, 1};
  for (int e : expect) CHECK(b.pick().replica == e);
  b.on_zero_snapshot();  // the 5 s tick: back to start
  CHECK(b.pick().replica == 0);
  CHECK(b.pick().replica == 1);
  // Two API servers: client 1 of 2 starts at (4 * 1) // 2 = 2 and bumps by 2; ties go to the
  // earliest in its scan order 2, 3, 0, 1.
  VllmDpBalancer c(4, 2, 1);
  CHECK(c.start() == 2);
  CHECK(c.pick().replica == 2);
  CHECK(c.waiting(2) == 2);
  CHECK(c.pick().replica == 3);
  CHECK(c.pick().replica == 0);
  CHECK(c.pick().replica == 1);
  CHECK(c.pick().replica == 2);
}

TEST_CASE("dynamo_kv's cost is weight x prefill blocks + decode blocks, lowest wins", "[sim]") {
  // isl 100, block 16.
  // A: overlap 4 -> prefill (100 - 64 + 0) / 16 = 2.25, decode 3 + 10 = 13, cost 15.25.
  // B: overlap 0, 32 active tokens -> prefill 132 / 16 = 8.25, decode 7 + 2 = 9, cost 17.25.
  // C: untracked, overlap 2 -> prefill 68 / 16 = 4.25, new blocks floor(4.25) = 4, cost 8.25.
  const std::vector<DynamoWorker> w = {
      {4, 50, 0, 10, 3, true}, {0, 10, 32, 2, 7, true}, {2, 20, 0, 0, 0, false}};
  CHECK(DynamoKvSelector::cost(w[0], 100, 16, 1.0) == 15.25);
  CHECK(DynamoKvSelector::cost(w[1], 100, 16, 1.0) == 17.25);
  CHECK(DynamoKvSelector::cost(w[2], 100, 16, 1.0) == 8.25);
  DynamoKvSelector s({1.0, 0.0}, 1);
  RouteDecision d = s.select(w, 100, 16);
  CHECK(d.replica == 2);
  CHECK(d.branch == "cost");
  CHECK(d.score == 8.25);
  CHECK(d.runner_up == 0);
  CHECK(d.runner_up_score == 15.25);
  // overlap_score_weight 2: 17.5, 25.5, 12.5.
  CHECK(DynamoKvSelector::cost(w[0], 100, 16, 2.0) == 17.5);
  DynamoKvSelector s2({2.0, 0.0}, 1);
  CHECK(s2.select(w, 100, 16).score == 12.5);
}

TEST_CASE("dynamo_kv breaks cost ties by the smaller tree, else uniformly at random", "[sim]") {
  // Equal costs (identical load, no overlap): 100 / 16 = 6.25 + 6 = 12.25 each.
  std::vector<DynamoWorker> w = {{0, 30, 0, 0, 6, true}, {0, 10, 0, 0, 6, true},
                                 {0, 10, 0, 0, 6, true}, {0, 5, 32, 0, 6, true}};
  DynamoKvSelector s({1.0, 0.0}, 7);
  RouteDecision d = s.select(w, 100, 16);
  CHECK(d.replica == 1);  // smallest tree among the cheapest (1, 2 tie: lowest index)
  CHECK(d.branch == "tie_tree_size");
  w[0].tree_size = 10;  // now 0, 1, 2 tie in cost and tree size: uniform among them
  int count[4] = {0, 0, 0, 0};
  RngStream rng = make_stream(7, "router.dynamo_kv");
  for (int i = 0; i < 3000; ++i) {
    d = s.select(w, 100, 16);
    REQUIRE(d.branch == "tie_random");
    REQUIRE(d.replica == static_cast<std::int32_t>(uniform_below(rng, 3)));
    ++count[d.replica];
  }
  CHECK(count[3] == 0);
  for (int i = 0; i < 3; ++i) CHECK((count[i] > 900 && count[i] < 1100));
}

TEST_CASE("dynamo_kv with a temperature samples the softmax of the normalised costs", "[sim]") {
  // Costs 10 and 12 (isl 80, block 16, untracked: new = prefill; 0 and 16 active tokens): x = -5,
  // -6, p0 =
  // 1 / (1 + e^-1) = 0.7311.
  const std::vector<DynamoWorker> w = {{0, 0, 0, 0, 0, false}, {0, 0, 16, 0, 0, false}};
  CHECK(DynamoKvSelector::cost(w[0], 80, 16, 1.0) == 10);
  CHECK(DynamoKvSelector::cost(w[1], 80, 16, 1.0) == 12);
  DynamoKvSelector s({1.0, 1.0}, 3);
  RngStream rng = make_stream(3, "router.dynamo_kv");
  const double p0 = 1.0 / (1.0 + std::exp(-1.0));
  int zeros = 0;
  for (int i = 0; i < 4000; ++i) {
    const RouteDecision d = s.select(w, 80, 16);
    REQUIRE(d.branch == "softmax");
    REQUIRE(d.replica == (uniform_01(rng) <= p0 ? 0 : 1));
    zeros += d.replica == 0;
  }
  CHECK(zeros / 4000.0 == Approx(p0).margin(0.03));
}

TEST_CASE("sglang cache_aware balances when imbalanced, else follows the match rate", "[sim]") {
  const SglangParams p;  // 0.3 / 64 / 1.5
  // Loads 70, 2, 5: 70 - 2 > 64 and 70 > 1.5 x 2: the least loaded.
  std::vector<SglangWorker> w = {{70, 500}, {2, 100}, {5, 100}};
  RouteDecision d = sglang_cache_aware_pick(w, {90, 0, 100}, p);
  CHECK(d.replica == 1);
  CHECK(d.branch == "balance");
  // Loads 60, 2, 5: 58 <= 64, balanced. Match 50 / 100 = 0.5 > 0.3: the matched tenant.
  w[0].load = 60;
  d = sglang_cache_aware_pick(w, {50, 2, 100}, p);
  CHECK(d.replica == 2);
  CHECK(d.branch == "cache");
  CHECK(d.score == 0.5);
  // Match 30 / 100 = 0.3 is not above the threshold: the smallest tenant, first minimum.
  d = sglang_cache_aware_pick(w, {30, 2, 100}, p);
  CHECK(d.replica == 1);
  CHECK(d.branch == "smallest_tenant");
  // Both tests must hold: loads 300 and 210 differ by more than 64 but 300 < 1.5 x 210.
  const std::vector<SglangWorker> big = {{300, 10}, {210, 20}};
  CHECK(sglang_cache_aware_pick(big, {0, -1, 100}, p).branch == "smallest_tenant");
}

TEST_CASE("llm_d sums weighted clamped scores and picks the highest total", "[sim]") {
  // GIE default weights (queue 2, kv-usage 2, prefix 3), 8 prompt blocks.
  //   A: q 0, kv 0.5, 4 matched: 2 x 1 + 2 x 0.5 + 3 x 0.5 = 4.5
  //   B: q 4, kv 0.2, 0 matched: 2 x 0 + 2 x 0.8 + 0 = 1.6
  //   C: q 2, kv 0.9, 8 matched: 2 x 0.5 + 2 x 0.1 + 3 x 1 = 4.2
  const std::vector<LlmDEndpoint> e = {{0, 0.5, 4, -1, 0}, {4, 0.2, 0, -1, 0}, {2, 0.9, 8, -1, 0}};
  LlmDPicker p(LlmDParams{}, 1);
  const RouteDecision d = p.pick(e, 8);
  CHECK(d.replica == 0);
  CHECK(d.branch == "score");
  CHECK(d.score == Approx(4.5));
  CHECK(d.runner_up == 2);
  CHECK(d.runner_up_score == Approx(4.2));
  CHECK(d.matched_blocks == 4);
  CHECK(p.totals()[1] == Approx(1.6));
  // The precise config (queue 1, kv 1, precise 2): raw 5, none, 3 -> 1, 0, 0.
  LlmDParams precise;
  precise.weights = kLlmDPreciseWeights;
  LlmDPicker q(precise, 1);
  const std::vector<LlmDEndpoint> f = {{1, 0.5, 0, 5, 0}, {1, 0.5, 0, -1, 0}, {1, 0.5, 0, 3, 0}};
  CHECK(q.pick(f, 8).replica == 0);
  CHECK(q.totals()[0] == Approx(1 + 0.5 + 2));
  CHECK(q.totals()[1] == Approx(1 + 0.5));
  CHECK(q.totals()[2] == Approx(1 + 0.5));
  // load-aware: 0.5 at q 0, 0.5 (1 - 64 / 128) = 0.25 at q 64, 0 from 128 on.
  LlmDParams est;
  est.weights = kLlmDEstimateWeights;
  LlmDPicker r(est, 1);
  const std::vector<LlmDEndpoint> g = {{0, 0, 0, -1, 0}, {64, 0, 0, -1, 0}, {200, 0, 8, -1, 0}};
  (void)r.pick(g, 8);
  CHECK(r.totals()[0] == Approx(0.5));
  CHECK(r.totals()[1] == Approx(0.25));
  CHECK(r.totals()[2] == Approx(1.0));
}

TEST_CASE("llm_d breaks ties uniformly at random among the top totals only", "[sim]") {
  // B and D tie at the top; A and C score less.
  const std::vector<LlmDEndpoint> e = {
      {3, 0.5, 0, -1, 0}, {0, 0.5, 8, -1, 0}, {3, 0.9, 0, -1, 0}, {0, 0.5, 8, -1, 0}};
  LlmDPicker p(LlmDParams{}, 5);
  int count[4] = {0, 0, 0, 0};
  for (int i = 0; i < 2000; ++i) {
    const RouteDecision d = p.pick(e, 8);
    REQUIRE(d.branch == "tie_random");
    REQUIRE(d.runner_up == (d.replica == 1 ? 3 : 1));
    ++count[d.replica];
  }
  CHECK(count[0] == 0);
  CHECK(count[2] == 0);
  CHECK((count[1] > 900 && count[1] < 1100));
}
