// `cluster:`: defaults, the policy's own parameters, --set, one-line errors at file:line:col, and
// config.resolved.yaml (the section only for a cluster).

#include <catch2/catch.hpp>
#include <string>

#include "sim/config/scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;

namespace {

const std::string kCacheOnly =
    "name: c\n"
    "engine: {profile: vllm-0.7.2, mode: cache_only}\n"
    "cache: {block_size: 16, num_gpu_blocks_override: 100}\n"
    "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";

}  // namespace

TEST_CASE("no cluster section, or one replica, is the single engine", "[sim]") {
  const Scenario a = parse_text(kCacheOnly);
  CHECK(a.cluster.replicas == 1);
  CHECK_FALSE(a.cluster.enabled());
  CHECK(a.cluster.router.policy == RouterPolicy::kRoundRobin);
  const Scenario b = parse_text(kCacheOnly + "cluster: {replicas: 1, router: {policy: random}}\n");
  CHECK_FALSE(b.cluster.enabled());
  // config.resolved.yaml shows no cluster section for either: existing outputs stay as they were.
  CHECK(resolved_yaml(b) == resolved_yaml(a));
  CHECK(resolved_yaml(a).find("cluster") == std::string::npos);
}

TEST_CASE("a cluster's replicas, policy and the policy's parameters are read and written back",
          "[sim]") {
  const Scenario s = parse_text(
      kCacheOnly + "cluster:\n  replicas: 8\n  router: {policy: prefix_hash, seed: 5, k: 3}\n");
  CHECK(s.cluster.enabled());
  CHECK(s.cluster.replicas == 8);
  CHECK(s.cluster.router.policy == RouterPolicy::kPrefixHash);
  CHECK(s.cluster.router.seed == 5);
  CHECK(s.cluster.router.k == 3);
  const std::string y = resolved_yaml(s);
  CHECK_THAT(y, Catch::Contains("cluster:\n  replicas: 8\n  router:\n    policy: prefix_hash\n"
                                "    seed: 5\n    k: 3\n"));
  // What it writes parses back to the same text.
  const Scenario again = parse_text(y);
  CHECK(resolved_yaml(again) == y);
  // Defaults of the policies' parameters.
  const Scenario rr = parse_text(kCacheOnly + "cluster: {replicas: 4}\n");
  CHECK(rr.cluster.router.start == 0);
  CHECK(rr.cluster.router.k == 2);
  CHECK_THAT(resolved_yaml(rr), Catch::Contains("policy: round_robin\n    seed: 0\n    start: 0\n"));
}

TEST_CASE("every cluster key is settable with --set", "[sim]") {
  const Scenario s =
      parse_text(kCacheOnly, {"cluster.replicas=16", "cluster.router.policy=round_robin",
                              "cluster.router.start=3", "cluster.router.seed=9"});
  CHECK(s.cluster.replicas == 16);
  CHECK(s.cluster.router.start == 3);
  CHECK(s.cluster.router.seed == 9);
  const Scenario p = parse_text(kCacheOnly, {"cluster.replicas=2", "cluster.router.policy=prefix_hash",
                                             "cluster.router.k=1"});
  CHECK(p.cluster.router.k == 1);
}

TEST_CASE("bad cluster settings are one-line errors at file:line:col", "[sim]") {
  const auto err = [](const std::string& section) { return scenario_error(kCacheOnly + section); };
  // 0 replicas.
  std::string e = err("cluster: {replicas: 0}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:5:21"));
  CHECK_THAT(e, Catch::Contains("cluster.replicas"));
  // An unknown router, with a suggestion.
  e = err("cluster:\n  replicas: 2\n  router: {policy: round_robbin}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:7:20"));
  CHECK_THAT(e, Catch::Contains("did you mean 'round_robin'"));
  // A router that reads KV events over an engine that publishes none (vLLM V0).
  e = scenario_error(
      "name: c\nengine: {profile: vllm-0.7.2-v0, mode: cache_only}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 100}\n"
      "workload: {num_requests: 1, prompt_tokens: 8, output_tokens: 2}\n"
      "cluster:\n  replicas: 2\n  router: {policy: dynamo_kv}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:7:20"));
  CHECK_THAT(e, Catch::Contains("reads the replicas' KV events, which the vllm-0.7.2-v0 profile"));
  // A parameter of dynamo_kv given to llm_d, and an unknown scorer set.
  e = err("cluster:\n  replicas: 2\n  router: {policy: prefix_ideal, router_temperature: 1}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:7:34"));
  CHECK_THAT(e, Catch::Contains("a parameter of the dynamo_kv router, not of prefix_ideal"));
  e = err("cluster:\n  replicas: 2\n  router: {policy: dynamo_kv, kv_events: {delay: 1}}\n");
  CHECK_THAT(e, Catch::Contains("unknown key 'delay'"));
  // A router that reads the replicas' queues needs a timed run.
  e = err("cluster:\n  replicas: 2\n  router: {policy: least_waiting}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:7:20"));
  CHECK_THAT(e, Catch::Contains("needs engine.mode: timed"));
  // A key of the polled view that is not one.
  e = err("cluster:\n  replicas: 2\n  router: {policy: round_robin, view: {phase_s: 1}}\n");
  CHECK_THAT(e, Catch::Contains("a parameter of the least_waiting router, not of round_robin"));
  // A parameter of another router says whose it is.
  e = err("cluster:\n  replicas: 2\n  router: {policy: round_robin, eps: 0.2}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:7:33"));
  CHECK_THAT(e, Catch::Contains("a parameter of the prefix_bounded router, not of round_robin"));
  // An unknown parameter, with a suggestion.
  e = err("cluster:\n  replicas: 2\n  router: {policy: round_robin, strat: 1}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:7:33"));
  CHECK_THAT(e, Catch::Contains("did you mean 'start'"));
  // An unknown key of the section.
  e = err("cluster: {replica: 2}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:5:11"));
  CHECK_THAT(e, Catch::Contains("did you mean 'replicas'"));
  // Bad values.
  CHECK_THAT(err("cluster: {replicas: 2, router: {policy: prefix_hash, k: 0}}\n"),
             Catch::Contains("cluster.router.k"));
  CHECK_THAT(err("cluster: {replicas: two}\n"), Catch::Contains("cluster.replicas"));
  CHECK_THAT(err("cluster: {replicas: 4, router: {start: 4}}\n"),
             Catch::Contains("4 is not a replica of 4"));
  // A value --set wrote is reported at the argument.
  const std::string s = kvsim::test::error_of([&] {
    YAML::Node root = load_yaml_string(kCacheOnly, "s.yaml");
    auto origins = std::make_shared<ArgumentOrigins>();
    apply_set(root, "cluster.replicas=2", origins.get());
    apply_set(root, "cluster.router.policy=randon", origins.get());
    (void)parse_scenario(root, "s.yaml", origins);
  });
  CHECK_THAT(s, Catch::Contains("--set cluster.router.policy=randon"));
  CHECK_THAT(s, Catch::Contains("did you mean 'random'"));
  // Every message is one line.
  CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("a timed cluster reads the timed routers' parameters and writes them back", "[sim]") {
  const std::string timed =
      "engine: {profile: vllm-0.7.2, mode: timed}\n"
      "model: {config: " +
      std::string(KVSIM_SOURCE_DIR) +
      "/scenarios/models/qwen2-1.5b.json}\n"
      "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";
  const Scenario s = parse_text(
      timed + "cluster: {replicas: 2, router: {policy: vllm_dp, api_servers: 2, moe: true, "
              "view: {refresh_interval_ms: 250, phase_s: 0.5}}}\n");
  CHECK(s.cluster.router.policy == RouterPolicy::kVllmDp);
  CHECK(s.cluster.router.api_servers == 2);
  CHECK(s.cluster.router.moe == 1);
  CHECK(s.cluster.router.refresh_interval_ns == 250'000'000);
  CHECK(s.cluster.router.phase_ns == 500'000'000);
  const std::string y = resolved_yaml(s);
  CHECK(resolved_yaml(parse_text(y)) == y);
  const Scenario lw =
      parse_text(timed + "cluster: {replicas: 3, router: {policy: least_waiting}}\n");
  CHECK(lw.cluster.router.refresh_interval_ns == -1);  // the router's own 50 ms
  CHECK_THAT(scenario_error(timed + "cluster: {replicas: 2, router: {policy: least_waiting, "
                                    "view: {refresh_interval_ms: 0}}}\n"),
             Catch::Contains("refresh_interval_ms"));
  CHECK_THAT(scenario_error(timed + "cluster: {replicas: 2, router: {policy: least_waiting, "
                                    "view: {refresh_ms: 5}}}\n"),
             Catch::Contains("unknown key 'refresh_ms'"));
}
