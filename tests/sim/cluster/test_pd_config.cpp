// P/D's configuration (`cluster.prefill_replicas`, `decode_replicas`, `router.pd`): roles,
// proxies, the transfer model's keys and defaults, --set, config.resolved.yaml (P/D only) and
// one-line errors at file:line:col.

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;

namespace {

// Five lines; a cluster section starts at line 6.
const std::string kTimed =
    "name: c\n"
    "engine: {profile: vllm-0.20, mode: timed}\n"
    "model: {config: " +
    std::string(KVSIM_SOURCE_DIR) +
    "/scenarios/models/qwen2-1.5b.json}\n"
    "cache: {block_size: 16, num_gpu_blocks_override: 1000}\n"
    "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";

}  // namespace

TEST_CASE("prefill and decode replicas give the roles and the transfer model's defaults", "[sim]") {
  const Scenario s = parse_text(kTimed + "cluster: {prefill_replicas: 2, decode_replicas: 3}\n");
  const ClusterConfig& c = s.cluster;
  CHECK(c.enabled());
  CHECK(c.disaggregated());
  CHECK(c.replicas == 5);
  CHECK(c.prefill_replicas == 2);
  CHECK(c.decode_replicas == 3);
  CHECK(c.role_of(0) == ReplicaRole::kPrefill);
  CHECK(c.role_of(1) == ReplicaRole::kPrefill);
  CHECK(c.role_of(2) == ReplicaRole::kDecode);
  CHECK(c.role_of(4) == ReplicaRole::kDecode);
  CHECK(replica_role_name(c.role_of(2)) == "decode");
  // The toy proxy and its round-robin cycles by default.
  CHECK(c.router.policy == RouterPolicy::kRoundRobin);
  const PdConfig& pd = c.router.pd;
  CHECK(pd.proxy == PdProxy::kToyProxy);
  CHECK(pd.link_bandwidth_gb_per_s == 50);
  CHECK(pd.efficiency == 0.8);
  CHECK(pd.gpu_bytes_per_s() == 40'000'000'000);
  CHECK(pd.setup_ns == 500'000);
  CHECK(pd.handshake_ns == 50'000'000);
  CHECK(pd.proxy_hop_ns == 1'000'000);
  CHECK_FALSE(pd.shared_nic);
  // Aggregated clusters are all `mixed`.
  const Scenario a = parse_text(kTimed + "cluster: {replicas: 3}\n");
  CHECK_FALSE(a.cluster.disaggregated());
  CHECK(a.cluster.role_of(2) == ReplicaRole::kMixed);
}

TEST_CASE("a P/D cluster is written back whole and an aggregated one as before", "[sim]") {
  const Scenario s = parse_text(kTimed +
                                "cluster:\n  prefill_replicas: 1\n  decode_replicas: 2\n"
                                "  router: {pd: {setup_ms: 0.25, shared_nic: true}}\n");
  const std::string y = resolved_yaml(s);
  CHECK_THAT(y, Catch::Contains("cluster:\n  replicas: 3\n  prefill_replicas: 1\n"
                                "  decode_replicas: 2\n  router:\n    policy: round_robin\n"
                                "    seed: 0\n    start: 0\n    pd:\n      proxy: toy_proxy\n"
                                "      link_bandwidth_gb_per_s: 50\n      efficiency: 0.8\n"
                                "      setup_ms: 0.25\n      handshake_ms: 50\n"
                                "      proxy_hop_ms: 1\n      shared_nic: true\n"));
  const Scenario again = parse_text(y);
  CHECK(resolved_yaml(again) == y);
  CHECK(again.cluster.router.pd.setup_ns == 250'000);
  CHECK(again.cluster.router.pd.shared_nic);
  // An aggregated cluster's text names none of it.
  const std::string agg = resolved_yaml(parse_text(kTimed + "cluster: {replicas: 3}\n"));
  CHECK_THAT(agg, Catch::Contains("cluster:\n  replicas: 3\n  router:\n    policy: round_robin\n"
                                  "    seed: 0\n    start: 0\n"));
  CHECK(agg.find("prefill_replicas") == std::string::npos);
  CHECK(agg.find("pd:") == std::string::npos);
  // `replicas` may be given with them when it is their sum.
  CHECK(parse_text(kTimed + "cluster: {replicas: 3, prefill_replicas: 1, decode_replicas: 2}\n")
            .cluster.disaggregated());
}

TEST_CASE("every P/D key is settable with --set", "[sim]") {
  const Scenario s = parse_text(
      kTimed, {"cluster.prefill_replicas=2", "cluster.decode_replicas=2",
               "cluster.router.pd.proxy=llm_d", "cluster.router.pd.non_cached_tokens=64",
               "cluster.router.pd.link_bandwidth_gb_per_s=25", "cluster.router.pd.efficiency=0.5",
               "cluster.router.pd.setup_ms=2", "cluster.router.pd.handshake_ms=10",
               "cluster.router.pd.proxy_hop_ms=0.5", "cluster.router.pd.shared_nic=true"});
  const PdConfig& pd = s.cluster.router.pd;
  CHECK(s.cluster.replicas == 4);
  CHECK(pd.proxy == PdProxy::kLlmD);
  CHECK(s.cluster.router.policy == RouterPolicy::kLlmD);  // the proxy's policy
  CHECK(pd.non_cached_tokens == 64);
  CHECK(pd.gpu_bytes_per_s() == 12'500'000'000);
  CHECK(pd.setup_ns == 2'000'000);
  CHECK(pd.handshake_ns == 10'000'000);
  CHECK(pd.proxy_hop_ns == 500'000);
  CHECK(pd.shared_nic);
  const std::string y = resolved_yaml(s);
  CHECK_THAT(y, Catch::Contains("    pd:\n      proxy: llm_d\n      non_cached_tokens: 64\n"));
  CHECK(resolved_yaml(parse_text(y)) == y);
}

TEST_CASE("the P/D proxy and the router policy pair", "[sim]") {
  const std::string pd = "cluster:\n  prefill_replicas: 2\n  decode_replicas: 2\n";
  // The policy gives the proxy, and the proxy the policy.
  const Scenario d = parse_text(kTimed + pd + "  router: {policy: dynamo_kv}\n");
  CHECK(d.cluster.router.pd.proxy == PdProxy::kDynamo);
  const Scenario l = parse_text(kTimed + pd + "  router: {pd: {proxy: llm_d}}\n");
  CHECK(l.cluster.router.policy == RouterPolicy::kLlmD);
  CHECK(l.cluster.router.pd.non_cached_tokens == 16);
  const Scenario l2 = parse_text(kTimed + pd + "  router: {policy: llm_d, pd: {proxy: llm_d}}\n");
  CHECK(l2.cluster.router.pd.proxy == PdProxy::kLlmD);
  // The proxy's policy's own parameters are read (dynamo_kv's temperature).
  CHECK(parse_text(kTimed + pd + "  router: {pd: {proxy: dynamo}, router_temperature: 0.5}\n")
            .cluster.router.router_temperature == 0.5);
  // A pair that does not go together, at the policy.
  std::string e = scenario_error(kTimed + pd + "  router: {policy: llm_d, pd: {proxy: dynamo}}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:9:20"));
  CHECK_THAT(e, Catch::Contains("the dynamo proxy routes with the dynamo_kv policy, not llm_d"));
  // A policy with no proxy.
  e = scenario_error(kTimed + pd + "  router: {policy: random}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:9:20"));
  CHECK_THAT(e, Catch::Contains("the random router has no P/D proxy"));
  // The decider's threshold belongs to llm_d.
  e = scenario_error(kTimed + pd + "  router: {pd: {non_cached_tokens: 8}}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:9:17"));
  CHECK_THAT(e,
             Catch::Contains("a parameter of the llm_d proxy (its P/D decider), not of toy_proxy"));
  // round_robin's start indexes both pools.
  CHECK(parse_text(kTimed + pd + "  router: {start: 1}\n").cluster.router.start == 1);
  e = scenario_error(kTimed +
                     "cluster: {prefill_replicas: 1, decode_replicas: 3, router: "
                     "{start: 1}}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:6:68"));
  CHECK_THAT(e, Catch::Contains("1 is not an index of both pools (1 prefill and 3 decode"));
}

TEST_CASE("bad P/D settings are one-line errors at file:line:col", "[sim]") {
  const auto err = [](const std::string& section) { return scenario_error(kTimed + section); };
  // One of the two counts.
  std::string e = err("cluster: {prefill_replicas: 2}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:6:11"));
  CHECK_THAT(e, Catch::Contains("cluster.prefill_replicas: P/D disaggregation needs "
                                "decode_replicas too"));
  e = err("cluster: {decode_replicas: 2}\n");
  CHECK_THAT(e, Catch::Contains("needs prefill_replicas too"));
  // Zero of either, and a replicas that is not their sum.
  CHECK_THAT(err("cluster: {prefill_replicas: 0, decode_replicas: 2}\n"),
             Catch::Contains("cluster.prefill_replicas"));
  e = err("cluster: {replicas: 4, prefill_replicas: 1, decode_replicas: 2}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:6:21"));
  CHECK_THAT(e, Catch::Contains("4 against prefill_replicas + decode_replicas = 3"));
  // pd: in an aggregated cluster.
  e = err("cluster: {replicas: 2, router: {pd: {shared_nic: true}}}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:6:33"));
  CHECK_THAT(e, Catch::Contains("P/D settings in a cluster without prefill_replicas"));
  // Unknown keys and bad values of pd.
  const std::string pd = "cluster:\n  prefill_replicas: 1\n  decode_replicas: 1\n";
  e = err(pd + "  router: {pd: {handshake: 5}}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:9:17"));
  CHECK_THAT(e, Catch::Contains("did you mean 'handshake_ms'"));
  e = err(pd + "  router: {pd: {proxy: toy}}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:9:24"));
  CHECK_THAT(e, Catch::Contains("cluster.router.pd.proxy"));
  CHECK_THAT(err(pd + "  router: {pd: {efficiency: 1.5}}\n"),
             Catch::Contains("cluster.router.pd.efficiency"));
  CHECK_THAT(err(pd + "  router: {pd: {link_bandwidth_gb_per_s: 0}}\n"),
             Catch::Contains("cluster.router.pd.link_bandwidth_gb_per_s"));
  CHECK_THAT(err(pd + "  router: {pd: {setup_ms: -1}}\n"),
             Catch::Contains("cluster.router.pd.setup_ms"));
  CHECK_THAT(err(pd + "  router: {pd: {shared_nic: maybe}}\n"),
             Catch::Contains("cluster.router.pd.shared_nic"));
  CHECK_THAT(err(pd + "  router: {pd: 5}\n"), Catch::Contains("cluster.router.pd"));
  // Another profile, cache_only, the CPU tier.
  const std::string model =
      "model: {config: " + std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json}\n";
  e = scenario_error("name: c\nengine: {profile: vllm-0.8.5, mode: timed}\n" + model +
                     "cache: {block_size: 16, num_gpu_blocks_override: 1000}\n"
                     "workload: {num_requests: 1, prompt_tokens: 8, output_tokens: 2}\n" +
                     pd);
  CHECK_THAT(e, Catch::Contains("s.yaml:7:3"));
  CHECK_THAT(e, Catch::Contains("modelled for engine.profile vllm-0.20"));
  CHECK_THAT(e, Catch::Contains("not vllm-0.8.5"));
  e = scenario_error(
      "name: c\nengine: {profile: vllm-0.20, mode: cache_only}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 1000}\n"
      "workload: {num_requests: 1, prompt_tokens: 8, output_tokens: 2}\n" +
      pd);
  CHECK_THAT(e, Catch::Contains("s.yaml:6:3"));
  CHECK_THAT(e, Catch::Contains("needs engine.mode: timed"));
  e = scenario_error("name: c\nengine: {profile: vllm-0.20, mode: timed}\n" + model +
                     "hardware: {gpu: H100, host_link_bytes_per_s: 2.5e10}\n"
                     "cache: {block_size: 16, num_gpu_blocks_override: 300, kv_offloading_size: "
                     "0.25, disable_hybrid_kv_cache_manager: true}\n"
                     "scheduler: {async_scheduling: false}\n"
                     "workload: {num_requests: 1, prompt_tokens: 8, output_tokens: 2}\n" +
                     pd);
  CHECK_THAT(e, Catch::Contains("s.yaml:9:3"));
  CHECK_THAT(e, Catch::Contains("together with the CPU tier"));
  // A value --set wrote is reported at the argument; every message is one line.
  e = scenario_error(kTimed, {"cluster.prefill_replicas=1", "cluster.decode_replicas=1",
                              "cluster.router.pd.efficiency=2"});
  CHECK_THAT(e, Catch::Contains("cluster.router.pd.efficiency"));
  CHECK(e.find('\n') == std::string::npos);
}

TEST_CASE("overrides still apply per replica index in a P/D cluster", "[sim]") {
  // The prefill pool on other GPUs with a smaller pool: a mixed fleet.
  const Scenario s = parse_text(
      "name: c\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {config: " +
      std::string(KVSIM_SOURCE_DIR) +
      "/scenarios/models/qwen2-1.5b.json}\n"
      "cache: {block_size: 16, kv_cache_memory_bytes: 1e9}\n"
      "scheduler: {max_model_len: 4096}\n"
      "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n"
      "cluster:\n  prefill_replicas: 2\n  decode_replicas: 2\n"
      "  overrides:\n    - {replicas: [0, 1], hardware: {gpu: A100-80GB}, cache: "
      "{kv_cache_memory_bytes: 5e8}}\n");
  const ClusterConfig& c = s.cluster;
  REQUIRE(c.override_of(0) != nullptr);
  REQUIRE(c.override_of(1) == c.override_of(0));
  CHECK(c.override_of(2) == nullptr);
  CHECK(c.override_of(0)->scenario->hardware.gpu.name != s.hardware.gpu.name);
  CHECK(c.override_of(0)->scenario->num_gpu_blocks < s.num_gpu_blocks);
  const std::string y = resolved_yaml(s);
  CHECK(resolved_yaml(parse_text(y)) == y);
  // Indices run over P + D replicas.
  CHECK_THAT(scenario_error(kTimed + "cluster:\n  prefill_replicas: 1\n  decode_replicas: 1\n"
                                     "  overrides:\n    - {replicas: [2], cache: {cache_dtype: "
                                     "fp8}}\n"),
             Catch::Contains("cluster.overrides[0].replicas[0]"));
}

TEST_CASE("P/D with parallel sampling is a one-line error at prefill_replicas", "[sim]") {
  std::string text = kTimed;
  const std::string out = "output_tokens: 10}";
  text.replace(text.find(out), out.size(), "output_tokens: 10, n: 2}");
  const std::string e = scenario_error(text + "cluster: {prefill_replicas: 1, decode_replicas: 1}\n");
  CHECK_THAT(e, Catch::Contains("s.yaml:6:11"));
  CHECK_THAT(e, Catch::Contains("parallel sampling (workload n = 2)"));
}
