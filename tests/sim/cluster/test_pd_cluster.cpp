// A P/D cluster (shared/spec/cluster-routing.md §7, §10; sim/cluster/cluster_pd.h): the proxy's
// routing (the toy proxy's two round-robin cycles, llm-d's decider), one hand-checked request
// through P, the transfer and D, token streams equal to aggregated serving's when transfers take
// (almost) no time, transfers.csv's bytes, the TTFT parts adding up, and the outputs' P/D keys.

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "sim/cluster/cluster_simulator.h"
#include "sim/cluster/pd_transfer.h"
#include "sim/run/run_scenario.h"
#include "sim/workload/workload.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;

namespace {

constexpr SimTimeNs kMs = 1'000'000;

/// Qwen2-1.5B (458,752 bytes per 16-token block), vllm-0.20, a P/D cluster of `p` prefill and
/// `d` decode replicas; `extra` adds keys (a `pd:` map goes under cluster.router).
std::string scenario(bool async, std::int64_t p, std::int64_t d, const std::string& workload,
                     const std::string& pd = "", const std::string& policy = "round_robin") {
  return "name: pd\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\nmodel: {config: " +
         std::string(KVSIM_SOURCE_DIR) +
         "/scenarios/models/qwen2-1.5b.json}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 400}\n"
         "scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, max_model_len: 4096, "
         "async_scheduling: " +
         (async ? "true" : "false") + "}\nworkload: " + workload +
         "\nlatency: {model: constant, step_time_us: 10000}\n"
         "cluster:\n  prefill_replicas: " +
         std::to_string(p) + "\n  decode_replicas: " + std::to_string(d) +
         "\n  router:\n    policy: " + policy + "\n    pd: {" + pd + "}\n";
}

const std::string kPoisson =
    "{num_requests: 40, arrival: {process: poisson, rate_per_s: 20}, prompt_tokens: {uniform: "
    "{min: 20, max: 300}}, output_tokens: {uniform: {min: 2, max: 30}}, ignore_eos: true}";

/// Integer ns of a ms column with 6 decimals ("12.345678" -> 12345678).
std::int64_t ns_of(const std::string& ms) {
  std::string digits;
  for (char c : ms)
    if (c != '.') digits += c;
  return std::stoll(digits);
}

std::size_t column(const std::vector<std::string>& header, const std::string& name) {
  for (std::size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return i;
  FAIL("no column " << name);
  return 0;
}

/// The tokens each request got, by RequestSpec id, from the replicas it is attached to.
struct Tokens : StepObserver {
  std::map<std::uint64_t, std::vector<std::int32_t>> by_id;
  void on_step(const StepView& v) override {
    for (const RequestOutput& o : v.outputs)
      by_id[v.request_id_of_index[static_cast<std::size_t>(o.request->index())]].push_back(o.token);
  }
};

}  // namespace

TEST_CASE("one request through the toy proxy, P, the read and D, at hand-checked instants",
          "[sim][pd]") {
  // One request of 100 prompt tokens (7 blocks) at t = 0, 10 ms steps, synchronous loops.
  // Proxy hops 1 ms; handshake 50 ms; setup 0.5 ms; one GPU's link 0.8 * 10 GB/s = 8e9 B/s.
  //   P: arrives at 1 ms, its one step 1 -> 11 ms (the prompt and P's token): finished at 11.
  //   Proxy: P's response at 12 ms; D gets the request at 13 ms. D's schedule() at 13 allocates
  //   7 blocks (no local hit) and runs a step of no tokens (0 ns): the read starts at 13.
  //   The read: handshake 13 -> 63, setup -> 63.5, 7 * 458,752 B / 8e9 B/s = 401,408 ns:
  //   ends at 63.901408 ms. D polls every 1 ms (steps of 0 ns after EngineCore's sleep): its
  //   step ending at 64 ms sees it; the next schedule() (after the 1 ms sleep, at 65) promotes
  //   the request and recomputes the last prompt token: its first output at 75 ms.
  TempDir tmp("pd-one");
  const Scenario s =
      parse_text(scenario(false, 1, 1,
                          "{num_requests: 1, arrival: {process: poisson, rate_per_s: 1000000}, "
                          "prompt_tokens: 100, output_tokens: 5, ignore_eos: true}",
                          "link_bandwidth_gb_per_s: 10") +
                 "outputs: {metrics_prom: true}\n");
  const fs::path out = run_scenario(s, tmp.path / "run").folder;
  const auto rows = read_csv(out / "requests.csv");
  REQUIRE(rows.size() == 2);
  const auto& h = rows[0];
  const auto& r = rows[1];
  const std::int64_t a0 = ns_of(r[column(h, "arrival_s")]);  // s with 9 decimals: ns
  CHECK(r[column(h, "prefill_replica")] == "0");
  CHECK(r[column(h, "decode_replica")] == "1");
  CHECK(r[column(h, "kv_transfer_bytes")] == std::to_string(7 * 458'752));
  CHECK(ns_of(r[column(h, "kv_transfer_ms")]) == 50 * kMs + kMs / 2 + 401'408);
  CHECK(ns_of(r[column(h, "ttft_ms")]) == 75 * kMs);
  CHECK(ns_of(r[column(h, "ttft_proxy_ms")]) == 3 * kMs);
  CHECK(ns_of(r[column(h, "ttft_p_queue_ms")]) == 0);
  CHECK(ns_of(r[column(h, "ttft_prefill_ms")]) == 10 * kMs);
  CHECK(ns_of(r[column(h, "ttft_d_queue_ms")]) == 0);
  CHECK(ns_of(r[column(h, "ttft_d_wait_ms")]) == 65 * kMs - (63 * kMs + kMs / 2 + 401'408));
  CHECK(ns_of(r[column(h, "ttft_first_token_ms")]) == 10 * kMs);
  CHECK(ns_of(r[column(h, "first_scheduled_s")]) - a0 == 1 * kMs);  // P's schedule
  const auto t = read_csv(out / "transfers.csv");
  REQUIRE(t.size() == 2);
  CHECK(t[0] == std::vector<std::string>{"request_id", "prefill_replica", "decode_replica",
                                         "blocks", "bytes", "start_s", "end_s", "seen_s",
                                         "concurrent"});
  CHECK(t[1][3] == "7");
  CHECK(ns_of(t[1][5]) - a0 == 13 * kMs);
  CHECK(ns_of(t[1][6]) - a0 == 63 * kMs + kMs / 2 + 401'408);
  CHECK(ns_of(t[1][7]) - a0 == 64 * kMs);
  const nlohmann::json j = read_json(out / "summary.json");
  CHECK(j["num_prefill_replicas"] == 1);
  CHECK(j["num_decode_replicas"] == 1);
  CHECK(j["kv_transfers"] == 1);
  CHECK(j["kv_transfer_blocks"] == 7);
  CHECK(j["kv_transfer_bytes"] == 7 * 458'752);
  CHECK(j["external_prefix_cache_hits"] == 100);  // D read the whole prompt
  CHECK(j["replicas"][0]["role"] == "prefill");
  CHECK(j["replicas"][1]["role"] == "decode");
  CHECK(j["replicas"][1]["first_lookup_hit_rate"] == 0.0);  // D's own cache: nothing
  CHECK(j["kv_transfer_model"]["modelled"] == true);
  // P was idle after its step: it learns of D's read at its next step only (never here), so the
  // blocks stay held to the end of the run and no hold ended.
  CHECK(j["mean_prefill_hold_ms"] == 0.0);
  // metrics.prom: vLLM's connector families per engine (D read 3,211,264 bytes in 0.901408 ms of
  // posted transfer: setup and bytes, not the handshake).
  const std::string prom = kvsim::test::slurp(out / "metrics.prom");
  const std::string l1 = "{model_name=\"qwen2-1.5b\",engine=\"1\"}";
  const std::string l0 = "{model_name=\"qwen2-1.5b\",engine=\"0\"}";
  CHECK_THAT(prom, Catch::Contains("vllm:nixl_bytes_transferred_count" + l1 + " 1\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:nixl_bytes_transferred_sum" + l1 + " 3211264\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:nixl_bytes_transferred_count" + l0 + " 0\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:nixl_xfer_time_seconds_sum" + l1 + " 0.000901408\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:external_prefix_cache_hits_total" + l1 + " 100\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:external_prefix_cache_queries_total" + l0 + " 100\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:nixl_num_kv_expired_reqs_total" + l0 + " 0\n"));
}

TEST_CASE("P/D with transfers of almost no time gives every request the aggregated tokens",
          "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = parse_text(scenario(
        async, 2, 3, kPoisson,
        "link_bandwidth_gb_per_s: 1000000, setup_ms: 0, handshake_ms: 0, proxy_hop_ms: 0"));
    Tokens pd;
    {
      std::unique_ptr<RequestSource> src =
          make_request_source(s.workload, s.seed, scenario_vocab_size(s));
      ClusterSimulator c(s, *src, kvsim::test::constant_ms(10));
      for (std::int32_t r = 2; r < 5; ++r) c.attach_replica(r, &pd);
      c.set_check_invariants(true);
      c.run();
      CHECK(c.requests_done() == 40);
    }
    // The same requests on one aggregated engine.
    Scenario single = s;
    single.cluster = ClusterConfig{};
    Tokens agg;
    {
      std::unique_ptr<RequestSource> src =
          make_request_source(single.workload, single.seed, scenario_vocab_size(single));
      Simulator sim(single, *src, kvsim::test::constant_ms(10));
      sim.attach(&agg);
      sim.run();
    }
    REQUIRE(agg.by_id.size() == 40);
    CHECK(pd.by_id == agg.by_id);
  }
}

TEST_CASE("the toy proxy's two cycles, transfers of whole blocks, TTFT parts that add up",
          "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    TempDir tmp("pd-rr");
    const Scenario s = parse_text(scenario(async, 2, 3, kPoisson));
    const fs::path out = run_scenario(s, tmp.path / "run").folder;
    // routing.csv: prefill decisions 0, 1, 0, ... in arrival order; decode decisions 2, 3, 4, ...
    // in the order P's responses come back.
    const auto routing = read_csv(out / "routing.csv");
    std::int64_t np = 0, nd = 0;
    for (std::size_t i = 1; i < routing.size(); ++i) {
      if (routing[i][2] == "prefill") CHECK(routing[i][3] == std::to_string(np++ % 2));
      if (routing[i][2] == "decode") CHECK(routing[i][3] == std::to_string(2 + nd++ % 3));
    }
    CHECK(np == 40);
    CHECK(nd == 40);
    const auto rows = read_csv(out / "requests.csv");
    REQUIRE(rows.size() == 41);
    const auto& h = rows[0];
    std::map<std::string, std::int64_t> prompt;
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const auto& r = rows[i];
      prompt[r[0]] = std::stoll(r[column(h, "prompt_tokens")]);
      std::int64_t sum = 0;
      for (const char* part :
           {"ttft_proxy_ms", "ttft_p_queue_ms", "ttft_prefill_ms", "ttft_d_queue_ms",
            "ttft_transfer_ms", "ttft_d_wait_ms", "ttft_first_token_ms"}) {
        const std::int64_t v = ns_of(r[column(h, part)]);
        CHECK(v >= 0);
        sum += v;
      }
      CHECK(sum == ns_of(r[column(h, "ttft_ms")]));
      CHECK(ns_of(r[column(h, "ttft_transfer_ms")]) == ns_of(r[column(h, "kv_transfer_ms")]));
      CHECK(ns_of(r[column(h, "ttft_proxy_ms")]) == 3 * kMs);
    }
    // Prompts share nothing: D reads every block of the prompt, the last partial one included.
    const auto t = read_csv(out / "transfers.csv");
    REQUIRE(t.size() == 41);
    std::int64_t bytes = 0;
    for (std::size_t i = 1; i < t.size(); ++i) {
      const std::int64_t blocks = std::stoll(t[i][3]);
      CHECK(blocks == (prompt.at(t[i][0]) + 15) / 16);
      CHECK(std::stoll(t[i][4]) == blocks * pd_block_bytes(s));
      CHECK(ns_of(t[i][7]) >= ns_of(t[i][6]));  // seen at or after its end
      bytes += std::stoll(t[i][4]);
    }
    const nlohmann::json j = read_json(out / "summary.json");
    CHECK(j["kv_transfer_bytes"] == bytes);
    CHECK(j["completed"] == 40);
    // Determinism: the same run twice, byte for byte.
    const fs::path again = run_scenario(s, tmp.path / "again").folder;
    for (const char* f : {"requests.csv", "transfers.csv", "routing.csv", "summary.json"})
      CHECK(kvsim::test::slurp(out / f) == kvsim::test::slurp(again / f));
  }
}

TEST_CASE("llm-d's decider keeps short uncached prompts on the decode pod", "[sim][pd]") {
  const auto run = [](std::int64_t threshold, const std::string& dir) {
    TempDir tmp(dir);
    const Scenario s = parse_text(scenario(
        false, 1, 2, kPoisson, "non_cached_tokens: " + std::to_string(threshold), "llm_d"));
    const fs::path out = run_scenario(s, tmp.path / "run").folder;
    return std::pair{read_json(out / "summary.json"), read_csv(out / "requests.csv")};
  };
  // Every prompt (20-300 tokens, nothing cached) is >= 16 uncached tokens: all disaggregated.
  auto [j16, rows16] = run(16, "pd-llmd-16");
  CHECK(j16["pd_requests_kept_on_decode"] == 0);
  CHECK(j16["kv_transfers"] == 40);
  // 0 disables P/D (the decider's code default); a threshold over every prompt does too.
  for (const std::int64_t threshold : {0, 100000}) {
    auto [j, rows] = run(threshold, "pd-llmd-off");
    CHECK(j["pd_requests_kept_on_decode"] == 40);
    CHECK(j["kv_transfers"] == 0);
    const auto& h = rows[0];
    for (std::size_t i = 1; i < rows.size(); ++i) {
      CHECK(rows[i][column(h, "prefill_replica")].empty());
      CHECK(ns_of(rows[i][column(h, "ttft_proxy_ms")]) == 0);
    }
  }
  // A threshold between prompt lengths: the short ones stay.
  auto [j150, rows150] = run(150, "pd-llmd-150");
  const auto& h = rows150[0];
  std::int64_t kept = 0;
  for (std::size_t i = 1; i < rows150.size(); ++i) {
    const bool on_d = rows150[i][column(h, "prefill_replica")].empty();
    CHECK(on_d == (std::stoll(rows150[i][column(h, "prompt_tokens")]) < 150));
    kept += on_d ? 1 : 0;
  }
  CHECK(kept > 0);
  CHECK(kept < 40);
  CHECK(j150["pd_requests_kept_on_decode"] == kept);
}

TEST_CASE("Dynamo's P/D: a prefill router and a load-only decode router, both from KV events",
          "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    TempDir tmp("pd-dynamo");
    const Scenario s = parse_text(scenario(async, 2, 2, kPoisson, "", "dynamo_kv"));
    const fs::path out = run_scenario(s, tmp.path / "run").folder;
    const nlohmann::json j = read_json(out / "summary.json");
    CHECK(j["pd_proxy"] == "dynamo");
    CHECK(j["completed"] == 40);
    CHECK(j["kv_transfers"] == 40);
    // Each request: a prefill decision on replica 0 or 1, later a decode decision on 2 or 3.
    const auto routing = read_csv(out / "routing.csv");
    std::map<std::string, std::string> stage_of;
    std::int64_t prefill = 0, decode = 0;
    for (std::size_t i = 1; i < routing.size(); ++i) {
      const std::int64_t r = std::stoll(routing[i][3]);
      if (routing[i][2] == "prefill") {
        CHECK(r < 2);
        CHECK(stage_of.count(routing[i][0]) == 0);
        ++prefill;
      } else {
        REQUIRE(routing[i][2] == "decode");
        CHECK(r >= 2);
        CHECK(stage_of[routing[i][0]] == "prefill");  // after its prefill decision
        ++decode;
      }
      stage_of[routing[i][0]] = routing[i][2];
    }
    CHECK(prefill == 40);
    CHECK(decode == 40);
  }
}

TEST_CASE("random P/D clusters run to the end with every invariant checked after every step",
          "[sim][pd]") {
  // Small pools (P holds blocks for D's reads while later requests wait for them; D's reads
  // wait for blocks), every proxy, sync and async, sessions, shared prefixes, client timeouts,
  // EOS. Every request fits a pool alone, so every run must end: no false "can never be
  // scheduled" (a step that freed held blocks, or a batch that finished requests, is progress).
  std::mt19937_64 rng(2026);
  const auto pick = [&](std::initializer_list<const char*> v) {
    return std::string(*(v.begin() + static_cast<std::ptrdiff_t>(rng() % v.size())));
  };
  for (int seed = 0; seed < 80; ++seed) {
    const std::int64_t p = 1 + static_cast<std::int64_t>(rng() % 3);
    const std::int64_t d = 1 + static_cast<std::int64_t>(rng() % 3);
    const std::string policy = pick({"round_robin", "llm_d", "dynamo_kv"});
    // (At most 600 + 100 + 150 tokens, or three turns of 300 + 100 + 150 + 20: 59 blocks.)
    const std::string prompt = pick({"40", "300", "600"});
    std::string wl = "{num_requests: " + pick({"20", "60"}) +
                     ", arrival: {process: poisson, rate_per_s: " + pick({"5", "40", "300"}) +
                     "}, prompt_tokens: {uniform: {min: 5, max: " + prompt +
                     "}}, output_tokens: {uniform: {min: 1, max: " + pick({"5", "150"}) + "}}";
    if (rng() % 2) wl += ", system_prompts: {count: 3, tokens: " + pick({"16", "100"}) + "}";
    if (prompt != "600" && rng() % 3 == 0)
      wl += ", sessions: {turns: {uniform: {min: 1, max: 3}}, user_tokens: 20}";
    if (rng() % 3 == 0) wl += ", client_timeout_s: " + pick({"0.05", "0.3"});
    wl += std::string(", ignore_eos: ") + (rng() % 3 == 0 ? "false" : "true") + "}";
    std::string pd = "handshake_ms: " + pick({"0", "50"}) +
                     ", link_bandwidth_gb_per_s: " + pick({"1", "50"}) +
                     ", shared_nic: " + pick({"true", "false"});
    if (policy == "llm_d") pd += ", non_cached_tokens: " + pick({"0", "16", "100"});
    std::string text = scenario(rng() % 2 == 0, p, d, wl, pd, policy);
    const std::string pool = "num_gpu_blocks_override: 400";
    text.replace(text.find(pool), pool.size(),
                 "num_gpu_blocks_override: " + pick({"60", "120", "400"}));
    CAPTURE(seed, text);
    TempDir tmp("pd-random");
    RunOptions o;
    o.check_invariants = true;
    const RunResult r = run_scenario(parse_text(text), tmp.path / "run", o);
    CHECK(r.requests_done > 0);
  }
}

TEST_CASE("decode replicas that cache two read blocks of one hash keep an exact KV breakdown",
          "[sim][pd]") {
  // Many requests with one of three 200-token system prompts at 200 requests/s: D reads the same
  // prompt blocks for requests in flight together and caches each read at its promotion, so a
  // later request's local hits may run through one request's blocks and on into another's (the
  // shared blocks are not a prefix of every table). The KV breakdown and every invariant hold.
  TempDir tmp("pd-dup-hash");
  std::string text =
      scenario(false, 3, 2,
               "{num_requests: 56, arrival: {process: poisson, rate_per_s: 200}, prompt_tokens: "
               "{uniform: {min: 5, max: 300}}, output_tokens: {uniform: {min: 1, max: 200}}, "
               "system_prompts: {count: 3, tokens: 200}}",
               "handshake_ms: 50, setup_ms: 0, proxy_hop_ms: 0, link_bandwidth_gb_per_s: 1");
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"num_gpu_blocks_override: 400", "num_gpu_blocks_override: 120"},
           {"max_num_batched_tokens: 512", "max_num_batched_tokens: 2048"},
           {"latency: {model: constant, step_time_us: 10000}",
            "latency: {model: roofline}\n"
            "hardware: {gpu: H100}"},
           {"seed: 3", "seed: 35"}})
    text.replace(text.find(from), from.size(), to);
  RunOptions o;
  o.check_invariants = true;
  const fs::path out = run_scenario(parse_text(text), tmp.path / "run", o).folder;
  const nlohmann::json j = read_json(out / "summary.json");
  CHECK(j["completed"] == 56);
  double sum = 0;
  for (const auto& [k, v] : j["kv_breakdown"].items()) sum += v.get<double>();
  CHECK(sum == Approx(1.0));
}
