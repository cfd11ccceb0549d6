// sglang_cache_aware as a router (shared/spec/cluster-routing.md §6.1): its approximate tree over
// token blocks, the cache / smallest-tenant / balance branches by hand, and a cache-only cluster
// of the Mooncake synthetic trace where it keeps more of the prefix cache than round-robin.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/cluster/router.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;

TEST_CASE("sglang_cache_aware matches its own tree, then balances", "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kSglangCacheAware;
  RouterEnv env;
  env.block_size = 16;
  auto r = make_router(c, 3, env);
  std::vector<ReplicaLoad> loads(3);
  const auto route = [&](std::vector<std::uint64_t> ids, std::int64_t tokens) {
    RouteInput in;
    in.prompt_tokens = tokens;
    in.block_ids = ids;
    return r->route(in, loads);
  };
  RouteDecision d = route({1, 2, 3}, 48);  // an empty tree: the smallest tenant, first minimum
  CHECK(d.replica == 0);
  CHECK(d.branch == "smallest_tenant");
  d = route({1, 2, 9}, 48);  // 32 of 48 tokens matched on tenant 0: 0.667 > 0.3
  CHECK(d.replica == 0);
  CHECK(d.branch == "cache");
  CHECK(d.score == Approx(2.0 / 3.0));
  CHECK(d.matched_blocks == 2);
  d = route({5, 6}, 20);  // no match; tenants hold 64, 0, 0 tokens
  CHECK(d.replica == 1);
  CHECK(d.branch == "smallest_tenant");
  d = route({1, 7, 8, 9, 10}, 80);  // 16 of 80 = 0.2, not above 0.3; tenants 64, 20, 0
  CHECK(d.replica == 2);
  CHECK(d.branch == "smallest_tenant");
  CHECK(d.score == Approx(0.2));
  // Imbalanced: 100 - 0 > 64 and 100 > 1.5 x 0: the least loaded, whatever the match.
  loads[0].in_flight = 100;
  loads[1].in_flight = 10;
  d = route({1, 2, 3}, 48);
  CHECK(d.replica == 2);
  CHECK(d.branch == "balance");
  // 100 - 40 = 60 is not above 64: the cache decides again.
  loads[1].in_flight = 40;
  loads[2].in_flight = 40;
  d = route({1, 2, 3}, 48);
  CHECK(d.branch == "cache");
  CHECK(d.replica == 0);  // the deepest node's tenants are 0 and 2: the lowest
}

TEST_CASE("sglang_cache_aware keeps more of the Mooncake trace's prefix cache than round-robin",
          "[sim]") {
  kvsim::test::TempDir tmp("cluster-sglang");
  std::ifstream f(kvsim::test::vendored_trace("mooncake_synthetic.jsonl"));
  std::string rows, line;
  for (int i = 0; i < 1200 && std::getline(f, line); ++i) rows += line + "\n";
  kvsim::test::write_file(tmp.path / "t.jsonl", rows);
  const auto run = [&](const std::string& policy) {
    const std::string text =
        "name: mc\nengine: {profile: vllm-0.7.2, mode: cache_only}\n"
        "cache: {block_size: 512, capacity_tokens: 3000000, enable_prefix_caching: true, "
        "num_preallocate_tokens: 0}\nscheduler: {max_model_len: 4000000}\n"
        "workload: {trace: {format: mooncake, path: " +
        (tmp.path / "t.jsonl").string() + "}}\ncluster: {replicas: 8, router: {policy: " +
        policy + "}}\n";
    const fs::path p = run_scenario(kvsim::test::parse_text(text), tmp.path / policy).folder;
    return kvsim::test::read_json(p / "summary.json");
  };
  const nlohmann::json rr = run("round_robin");
  const nlohmann::json sg = run("sglang_cache_aware");
  CHECK(sg["first_lookup_hit_rate"].get<double>() >
        rr["first_lookup_hit_rate"].get<double>() + 0.1);
  CHECK(sg["router_decisions_by_branch"]["cache"].get<std::int64_t>() > 0);
  CHECK(sg["completed"] == rr["completed"]);
}
