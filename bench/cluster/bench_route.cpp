// bench_route [--decisions D] [--reps R]: nanoseconds per routing decision (Router::route) for
// the routers of a cluster, at N = 8 and 64 replicas (bench/README.md, "Clusters").
//
// Cache-blind routers (round_robin, random, least_requests, power_of_two) see the loads only (D
// decisions). The prefix routers (prefix_hash, sglang_cache_aware, llm_d) see prompts of 512,
// 2,048 and 8,192 tokens (32 to 512 blocks of 16): a pool of 1,024 prompts, each one of 32 shared
// contexts (the prompt's first half) followed by its own second half, cycled, so that after the
// first pass the routers' indexes hold every block ("warm", D/10 decisions); "fresh" gives every
// decision new ids for the second half of the blocks the router reads (blocks the index has not
// seen: llm_d's and sglang's bookkeeping grows; D/50 decisions). llm_d reads at most 256 blocks.
// The block ids are computed beforehand (ClusterSimulator::block_ids, timed on its own: "ids").
// Best of R repetitions, each after a warm-up pass. The loads move as in a steady state: each
// decision adds one request in flight, and one request somewhere ends.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sim/cluster/cluster_simulator.h"
#include "sim/cluster/router.h"

namespace {

using namespace kvsim;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kBlock = 16;
constexpr int kPool = 1024;
constexpr int kContexts = 32;

volatile std::int64_t g_sink = 0;

struct Pool {
  std::int64_t prompt_tokens = 0;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::vector<std::uint64_t>> ids;  // all 128 block ids of each prompt
};

Pool make_pool(std::int64_t prompt_tokens) {
  std::mt19937_64 rng(1);
  std::vector<std::vector<std::int32_t>> contexts(kContexts);
  for (auto& c : contexts) {
    c.resize(static_cast<std::size_t>(prompt_tokens / 2));
    for (auto& t : c) t = static_cast<std::int32_t>(rng() % 150000);
  }
  Pool p;
  p.prompt_tokens = prompt_tokens;
  for (int i = 0; i < kPool; ++i) {
    std::vector<std::int32_t> prompt = contexts[static_cast<std::size_t>(rng() % kContexts)];
    for (std::int64_t j = prompt_tokens / 2; j < prompt_tokens; ++j)
      prompt.push_back(static_cast<std::int32_t>(rng() % 150000));
    std::vector<std::uint64_t> ids;
    ClusterSimulator::block_ids(prompt, kBlock, prompt_tokens / kBlock, ids);
    p.prompts.push_back(std::move(prompt));
    p.ids.push_back(std::move(ids));
  }
  return p;
}

// ns per decision of `policy` at n replicas; fresh: the prompt's second half is new each time.
double time_router(RouterPolicy policy, std::int32_t n, const Pool& pool, std::int64_t decisions,
                   int reps, bool fresh) {
  RouterConfig c;
  c.policy = policy;
  c.seed = 1;
  RouterEnv env;
  env.block_size = kBlock;
  // llm_d's LRU capacity per pod: every block of the pool fits (warm: nothing evicted).
  env.num_gpu_blocks = std::int64_t{1} << 20;
  auto router = make_router(c, n, env);
  const std::int64_t blocks = pool.prompt_tokens / kBlock;
  const auto need = std::min<std::int64_t>(router->block_ids_needed(), blocks);
  std::vector<ReplicaLoad> loads(static_cast<std::size_t>(n));
  std::vector<ReplicaView> views(static_cast<std::size_t>(n));
  std::vector<std::uint64_t> ids(static_cast<std::size_t>(blocks));
  std::uint64_t salt = 0;
  RouteInput in;
  in.prompt_tokens = pool.prompt_tokens;
  in.prompt_blocks = blocks;
  const bool tracks = router->tracks_in_flight();
  const auto one = [&](std::int64_t i) {
    const auto& src = pool.ids[static_cast<std::size_t>(i % kPool)];
    if (fresh) {
      ++salt;
      for (std::int64_t j = 0; j < need; ++j)
        ids[static_cast<std::size_t>(j)] =
            j < need / 2 ? src[static_cast<std::size_t>(j)]
                         : src[static_cast<std::size_t>(j)] ^ (salt * 0x9E3779B97F4A7C15ULL);
      in.block_ids = std::span<const std::uint64_t>(ids.data(), static_cast<std::size_t>(need));
    } else {
      in.block_ids = std::span<const std::uint64_t>(src.data(), static_cast<std::size_t>(need));
    }
    in.index = i;
    in.now_ns = i * 10'000'000;  // 100 decisions per simulated second
    const RouteDecision d = router->route(in, loads);
    // A steady state: each decision adds one in flight, and one request somewhere finishes.
    // (Both changes reported to a router that indexes the counts, as the cluster does.)
    const std::int64_t up = ++loads[static_cast<std::size_t>(d.replica)].in_flight;
    ++loads[static_cast<std::size_t>(d.replica)].routed;
    if (tracks) router->on_in_flight(d.replica, up);
    const auto fin = static_cast<std::int32_t>((i * 7) % n);
    auto& done = loads[static_cast<std::size_t>(fin)];
    if (done.in_flight > 0) {
      --done.in_flight;
      if (tracks) router->on_in_flight(fin, done.in_flight);
    }
    g_sink = g_sink + d.replica;
  };
  std::int64_t i = 0;
  const std::int64_t warm = std::max<std::int64_t>(kPool, decisions);
  for (; i < warm; ++i) one(i);
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    if (router->refresh_interval_ns() > 0) router->on_refresh(i * 10'000'000, views);
    const auto t0 = Clock::now();
    for (std::int64_t k = 0; k < decisions; ++k, ++i) one(i);
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(decisions));
  }
  return best;
}

double time_ids(const Pool& pool, std::int64_t blocks, std::int64_t decisions, int reps) {
  std::vector<std::uint64_t> out;
  out.reserve(static_cast<std::size_t>(pool.prompt_tokens / kBlock));
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < decisions; ++i) {
      ClusterSimulator::block_ids(pool.prompts[static_cast<std::size_t>(i % kPool)], kBlock, blocks,
                                  out);
      g_sink = g_sink + static_cast<std::int64_t>(out.back() & 1);
    }
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(decisions));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t decisions = 200000;
  int reps = 5;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    if (arg == "--decisions" && a + 1 < argc) {
      decisions = std::atoll(argv[++a]);
    } else if (arg == "--reps" && a + 1 < argc) {
      reps = std::atoi(argv[++a]);
    } else {
      std::fprintf(stderr, "bench_route: unknown argument '%s' (--decisions N, --reps R)\n",
                   arg.c_str());
      return 2;
    }
  }
  if (decisions < 1 || reps < 1) {
    std::fprintf(stderr, "bench_route: --decisions and --reps need positive counts\n");
    return 2;
  }
  std::printf("%-20s %6s %-6s %9s %9s\n", "router", "blocks", "prompt", "N=8 ns", "N=64 ns");
  const auto row = [&](RouterPolicy policy, const Pool& pool, std::int64_t d, bool fresh) {
    const double a = time_router(policy, 8, pool, d, reps, fresh);
    const double b = time_router(policy, 64, pool, d, reps, fresh);
    std::printf("%-20s %6lld %-6s %9.1f %9.1f\n", std::string(router_policy_name(policy)).c_str(),
                static_cast<long long>(pool.prompt_tokens / kBlock), fresh ? "fresh" : "warm", a,
                b);
    std::fflush(stdout);
  };
  {
    const Pool pool = make_pool(2048);
    for (RouterPolicy p : {RouterPolicy::kRoundRobin, RouterPolicy::kRandom,
                           RouterPolicy::kLeastRequests, RouterPolicy::kPowerOfTwo})
      row(p, pool, decisions, false);
  }
  for (const std::int64_t tokens : {512, 2048, 8192}) {
    const Pool pool = make_pool(tokens);
    row(RouterPolicy::kPrefixHash, pool, decisions, false);
    for (RouterPolicy p : {RouterPolicy::kSglangCacheAware, RouterPolicy::kLlmD}) {
      row(p, pool, std::max<std::int64_t>(1, decisions / 10), false);
      row(p, pool, std::max<std::int64_t>(1, decisions / 50), true);
    }
    std::printf("%-20s %6lld %-6s %9.1f (xxh3 of each block, chained)\n", "block ids",
                static_cast<long long>(tokens / kBlock), "",
                time_ids(pool, tokens / kBlock, std::max<std::int64_t>(1, decisions / 10), reps));
  }
  return 0;
}
