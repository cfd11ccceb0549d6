// A routing decision allocates nothing once warm: every router's route() and every timed
// router's decision function, counted by the core tests' replacement of global operator new
// (compiled into this executable here: it counts only inside an AllocationWindow).

#include <catch2/catch.hpp>
#include <vector>

#include "sim/cluster/dynamo_kv.h"
#include "sim/cluster/llm_d.h"
#include "sim/cluster/replica_view.h"
#include "sim/cluster/router.h"
#include "sim/cluster/sglang_cache_aware.h"
#include "sim/cluster/vllm_dp.h"
#include "tests/core/alloc_counter.cpp"  // NOLINT: the counter's definitions, once per executable

using namespace kvsim;
using kvsim::test::AllocationWindow;

TEST_CASE("no routing decision allocates once warm", "[sim]") {
  const int n = 16;
  std::vector<ReplicaLoad> loads(n);
  std::vector<std::uint64_t> ids = {11, 22, 33};
  for (RouterPolicy p : {RouterPolicy::kRoundRobin, RouterPolicy::kRandom,
                         RouterPolicy::kLeastRequests, RouterPolicy::kPowerOfTwo,
                         RouterPolicy::kPrefixHash, RouterPolicy::kLeastWaiting,
                         RouterPolicy::kVllmDp, RouterPolicy::kLlmD}) {
    RouterConfig c;
    c.policy = p;
    c.w_prefix = 0;  // llm_d's approximate index learns new blocks (bookkeeping, below)
    auto r = make_router(c, n);
    RouteInput in;
    in.block_ids = ids;
    (void)r->route(in, loads);  // warm-up
    AllocationWindow w;
    for (int i = 0; i < 1000; ++i) {
      in.index = i;
      ids[0] = static_cast<std::uint64_t>(i);
      const RouteDecision d = r->route(in, loads);
      const std::int64_t up = ++loads[static_cast<std::size_t>(d.replica)].in_flight;
      if (r->tracks_in_flight()) r->on_in_flight(d.replica, up);
    }
    CHECK(w.count() == 0);
  }
  {
    // llm_d with its prefix index: a prompt whose blocks the index holds allocates nothing.
    RouterConfig c;
    c.policy = RouterPolicy::kLlmD;
    auto r = make_router(c, n);
    const std::vector<std::uint64_t> prompt = {5, 6, 7, 8};
    RouteInput in;
    in.prompt_tokens = 64;
    in.block_ids = prompt;
    for (int i = 0; i < 2 * n; ++i) (void)r->route(in, loads);  // every pod has seen it
    AllocationWindow w;
    for (int i = 0; i < 1000; ++i) (void)r->route(in, loads);
    CHECK(w.count() == 0);
  }
  std::vector<ReplicaView> views(n);
  std::vector<DynamoWorker> workers(n);
  std::vector<LlmDEndpoint> eps(n);
  std::vector<SglangWorker> sg(n);
  VllmDpBalancer dp(n);
  DynamoKvSelector dyn({1.0, 0.0}, 1), soft({1.0, 0.5}, 1);
  LlmDPicker llmd(LlmDParams{}, 1);
  (void)dyn.select(workers, 100, 16);
  (void)soft.select(workers, 100, 16);
  (void)llmd.pick(eps, 8);
  AllocationWindow w;
  for (int i = 0; i < 1000; ++i) {
    views[static_cast<std::size_t>(i % n)].num_waiting = i % 7;
    workers[static_cast<std::size_t>(i % n)].overlap_blocks = i % 5;
    eps[static_cast<std::size_t>(i % n)].matched_blocks = i % 8;
    (void)least_waiting_pick(views);
    if (i % 50 == 0) dp.on_snapshot(views);
    (void)dp.pick();
    (void)dyn.select(workers, 100, 16);
    (void)soft.select(workers, 100, 16);
    (void)llmd.pick(eps, 8);
    (void)sglang_cache_aware_pick(sg, {i % 100, i % n, 100}, SglangParams{});
  }
  CHECK(w.count() == 0);
}
