// Timed cluster runs (shared/spec/cluster-routing.md §1.2, §1.3, §10): one replica is the single
// engine request for request and step for step (arrivals, follow-up turns and step ends at the
// same instants included); a round-robin cluster's replicas are single runs over the split
// trace; requests done report to the router; the polled views of least_waiting and vllm_dp.

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "sim/cluster/cluster_simulator.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;

namespace {

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";

/// A synthetic timed workload with shared system prompts and multi-turn sessions whose follow-up
/// turns arrive the instant their previous turn ends (think time 0).
std::string sessions(const std::string& profile, const std::string& extra) {
  return "name: t\nseed: 7\nengine: {profile: " + profile + ", mode: timed}\nmodel: {config: " +
         kModel +
         "}\ncache: {block_size: 16, num_gpu_blocks_override: 160}\n"
         "scheduler: {max_num_seqs: 6, max_num_batched_tokens: 256, max_model_len: 2048}\n"
         "workload: {num_requests: 60, arrival: {process: poisson, rate_per_s: 30},\n"
         "  system_prompts: {count: 3, tokens: 48},\n"
         "  prompt_tokens: {uniform: {min: 20, max: 200}}, output_tokens: {uniform: {min: 1, "
         "max: 40}},\n"
         "  sessions: {turns: {uniform: {min: 1, max: 4}}, user_tokens: {uniform: {min: 5, max: "
         "40}}}}\n" +
         extra;
}

/// A Mooncake-format trace of `n` rows (64-token hash blocks): timestamps in whole ms with ties
/// (the first `lead` rows at 0), five shared two-block prefixes, short outputs.
std::string trace_rows(std::size_t n, std::size_t lead, std::size_t m = 0, std::size_t r = 0) {
  std::string out;
  std::int64_t ts = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i >= lead) ts += static_cast<std::int64_t>((i * 7919) % 23);
    const std::size_t g = i % 5;
    std::string ids = std::to_string(g * 1000) + ", " + std::to_string(g * 1000 + 1);
    const std::size_t own = 1 + (i * 13) % 5;
    for (std::size_t k = 0; k < own; ++k) ids += ", " + std::to_string(100000 + i * 10 + k);
    const std::size_t input = 64 * (2 + own) - (i * 31) % 50;
    const std::size_t output = 1 + (i * 37) % 60;
    if (m == 0 || i % m == r)
      out += "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " +
             std::to_string(input) + ", \"output_length\": " + std::to_string(output) +
             ", \"hash_ids\": [" + ids + "]}\n";
  }
  return out;
}

std::string trace_scenario(const std::string& path, const std::string& extra) {
  return "name: tr\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\nmodel: {config: " +
         kModel +
         "}\nhardware: {gpu: A100-80GB}\nlatency: {model: roofline}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 60, enable_prefix_caching: true}\n"
         "scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, max_model_len: 2048}\n"
         "workload: {trace: {format: mooncake, path: " +
         path + ", hash_block_tokens: 64}}\n" + extra;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// The rows of a requests.csv without its last column (the cluster's `replica`).
std::vector<std::vector<std::string>> without_replica(std::vector<std::vector<std::string>> rows) {
  for (auto& r : rows) r.pop_back();
  return rows;
}

/// A cluster's requests.csv rows of replica r (last column `replica`), in order, are a single
/// run's `single` rows (but the request ids, dense per run).
void check_replica_rows(const std::vector<std::vector<std::string>>& rows,
                        const std::vector<std::vector<std::string>>& single, std::size_t r) {
  std::size_t k = 1;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (rows[i].back() != std::to_string(r)) continue;
    REQUIRE(k < single.size());
    const std::vector<std::string> a(rows[i].begin() + 1, rows[i].end() - 1);
    const std::vector<std::string> b(single[k].begin() + 1, single[k].end());
    REQUIRE(a == b);
    ++k;
  }
  CHECK(k == single.size());
}

}  // namespace

TEST_CASE("a timed cluster of one replica is the single engine, row for row and step for step",
          "[sim]") {
  for (const char* profile : {"vllm-0.7.2", "vllm-0.20"}) {
    TempDir tmp("cluster-one");
    const Scenario s = parse_text(sessions(profile, ""));
    RunOptions o;
    o.step_time = kvsim::test::constant_ms(3);  // whole ms: arrivals meet step ends
    const fs::path single = run_scenario(s, tmp.path / "single", o).folder;
    const fs::path one = run_cluster(s, tmp.path / "one", o).folder;
    const auto a = read_csv(single / "requests.csv");
    const auto b = read_csv(one / "requests.csv");
    REQUIRE(a.size() > 100);  // the sessions' turns
    CHECK(without_replica(b) == a);
    for (std::size_t i = 1; i < b.size(); ++i) CHECK(b[i].back() == "0");
    CHECK(slurp(one / "replicas" / "0" / "steps.csv") == slurp(single / "steps.csv"));
    const nlohmann::json sa = read_json(single / "summary.json");
    const nlohmann::json sb = read_json(one / "summary.json");
    for (const char* k : {"completed", "rejected", "total_output_tokens", "duration",
                          "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p90_e2el_ms",
                          "prefix_cache_queries", "prefix_cache_hits", "first_lookup_hit_rate",
                          "num_preemptions", "num_evictions"})
      CHECK(sa[k] == sb[k]);
    CHECK(sb["replicas"][0]["num_preemptions"] == sa["num_preemptions"]);
    CHECK(sb["replicas"][0]["mean_num_running"] == Approx(sa["mean_num_running"].get<double>()));
    CHECK(sb["replicas"][0]["busy_fraction"].get<double>() > 0);
  }
}

TEST_CASE("replicas with overrides run their own GPU and pool and settings", "[sim]") {
  TempDir tmp("cluster-overrides");
  const std::size_t kRows = 180, kN = 3;
  kvsim::test::write_file(tmp.path / "all.jsonl", trace_rows(kRows, kN));
  // Replica 1: another GPU (roofline) and a smaller pool; replica 2: fewer sequences and a
  // constant step time. Replica 0 is the scenario's.
  const std::string overrides =
      "cluster:\n  replicas: 3\n  router: {policy: round_robin}\n  overrides:\n"
      "    - {replicas: [1], hardware: {gpu: H100}, cache: {num_gpu_blocks_override: 40}}\n"
      "    - {replicas: [2], scheduler: {max_num_seqs: 4}, "
      "latency: {model: constant, step_time_us: 3000}}\n";
  const Scenario sc = parse_text(trace_scenario((tmp.path / "all.jsonl").string(), overrides));
  const fs::path cluster = run_scenario(sc, tmp.path / "cluster").folder;
  const auto rows = read_csv(cluster / "requests.csv");
  REQUIRE(rows.size() == kRows + 1);
  const nlohmann::json summary = read_json(cluster / "summary.json");
  const auto single_text = [&](std::size_t r, const std::string& path) {
    std::string t = trace_scenario(path, "");
    const auto sub = [&](const std::string& a, const std::string& b) {
      const std::size_t at = t.find(a);
      REQUIRE(at != std::string::npos);
      t.replace(at, a.size(), b);
    };
    if (r == 1) {
      sub("gpu: A100-80GB", "gpu: H100");
      sub("num_gpu_blocks_override: 60", "num_gpu_blocks_override: 40");
    }
    if (r == 2) {
      sub("max_num_seqs: 8", "max_num_seqs: 4");
      sub("latency: {model: roofline}", "latency: {model: constant, step_time_us: 3000}");
    }
    return t;
  };
  std::set<std::string> step_files;
  for (std::size_t r = 0; r < kN; ++r) {
    const fs::path split = tmp.path / ("split" + std::to_string(r) + ".jsonl");
    kvsim::test::write_file(split, trace_rows(kRows, kN, kN, r));
    const fs::path single = run_scenario(parse_text(single_text(r, split.string())),
                                         tmp.path / ("single" + std::to_string(r)))
                                .folder;
    check_replica_rows(rows, read_csv(single / "requests.csv"), r);
    const std::string steps = slurp(cluster / "replicas" / std::to_string(r) / "steps.csv");
    CHECK(steps == slurp(single / "steps.csv"));
    step_files.insert(steps);
    const nlohmann::json& rep = summary["replicas"][r];
    CHECK(rep["num_gpu_blocks"] == read_json(single / "summary.json")["num_gpu_blocks"]);
  }
  CHECK(step_files.size() == kN);  // the three replicas did run differently
  CHECK(summary["replicas"][0]["gpu"] == "A100-80GB");
  CHECK(summary["replicas"][1]["gpu"] == "H100-80GB");
  CHECK(summary["replicas"][1]["num_gpu_blocks"] == 40);
  CHECK(summary["replicas"][2]["num_gpu_blocks"] == 60);
  // The resolved file names each group in full and reruns identically.
  const fs::path again =
      run_scenario(parse_text(slurp(cluster / "config.resolved.yaml")), tmp.path / "again").folder;
  for (const char* f : {"summary.json", "requests.csv", "routing.csv", "config.resolved.yaml"})
    CHECK(slurp(cluster / f) == slurp(again / f));
}

TEST_CASE("bad cluster overrides are refused at their line", "[sim]") {
  TempDir tmp("cluster-overrides-bad");
  kvsim::test::write_file(tmp.path / "t.jsonl", trace_rows(6, 1));
  const std::string base =
      trace_scenario((tmp.path / "t.jsonl").string(), "cluster:\n  replicas: 3\n  overrides: ");
  const auto err = [&](const std::string& tail) {
    return kvsim::test::scenario_error(base + tail + "\n");
  };
  CHECK_THAT(err("3"), Catch::Contains(":12:14:") && Catch::Contains("expected a list"));
  CHECK_THAT(err("[{replicas: [3]}]"), Catch::Contains("replicas[0]: 3 is out of range"));
  CHECK_THAT(err("[{replicas: [1]}, {replicas: [1]}]"),
             Catch::Contains("replica 1 is already in an override group"));
  CHECK_THAT(err("[{replicas: []}]"), Catch::Contains("non-empty list"));
  CHECK_THAT(err("[{replicas: [1], model: {}}]"), Catch::Contains("unknown key 'model'"));
  CHECK_THAT(err("[{replicas: [1], cache: {block_size: 32}}]"),
             Catch::Contains("cluster.overrides[0].cache.block_size: every replica"));
  CHECK_THAT(err("[{replicas: [1], scheduler: {max_model_len: 512}}]"),
             Catch::Contains("scheduler.max_model_len: every replica"));
  CHECK_THAT(err("[{replicas: [1], cache: {kv_offloading_size: 4}}]"),
             Catch::Contains("kv_offloading_size: every replica"));
  // An error inside a group's section points at the group's own key.
  const std::string e = err("[{replicas: [1], hardware: {gpux: A100}}]");
  CHECK_THAT(e, Catch::Contains(":12:42:") && Catch::Contains("unknown key 'gpux'"));
}

TEST_CASE("a round-robin timed cluster's replicas are single timed runs over the split trace",
          "[sim]") {
  TempDir tmp("cluster-timed-split");
  const std::size_t kRows = 240, kN = 3;
  kvsim::test::write_file(tmp.path / "all.jsonl", trace_rows(kRows, kN));
  const fs::path cluster =
      run_scenario(parse_text(trace_scenario((tmp.path / "all.jsonl").string(),
                                             "cluster: {replicas: 3, router: {policy: "
                                             "round_robin}}\n")),
                   tmp.path / "cluster")
          .folder;
  const auto rows = read_csv(cluster / "requests.csv");
  REQUIRE(rows.size() == kRows + 1);
  const nlohmann::json summary = read_json(cluster / "summary.json");
  std::int64_t preemptions = 0;
  for (std::size_t r = 0; r < kN; ++r) {
    const fs::path split = tmp.path / ("split" + std::to_string(r) + ".jsonl");
    kvsim::test::write_file(split, trace_rows(kRows, kN, kN, r));
    const fs::path single = run_scenario(parse_text(trace_scenario(split.string(), "")),
                                         tmp.path / ("single" + std::to_string(r)))
                                .folder;
    check_replica_rows(rows, read_csv(single / "requests.csv"), r);
    CHECK(slurp(cluster / "replicas" / std::to_string(r) / "steps.csv") ==
          slurp(single / "steps.csv"));
    const nlohmann::json s = read_json(single / "summary.json");
    const nlohmann::json& rep = summary["replicas"][r];
    CHECK(rep["prefix_cache_hits"] == s["prefix_cache_hits"]);
    CHECK(rep["num_preemptions"] == s["num_preemptions"]);
    CHECK(rep["num_evictions"] == s["num_evictions"]);
    CHECK(rep["requests_routed"] == kRows / kN);
    preemptions += s["num_preemptions"].get<std::int64_t>();
  }
  CHECK(preemptions > 0);  // the pools were under pressure
  // The cluster's KV breakdown is the mean over every replica's recorded rows.
  const char* parts[] = {"token_states",           "reservation", "internal_fragmentation",
                         "external_fragmentation", "cached_free", "free"};
  double sums[6] = {};
  std::int64_t num_rows = 0;
  for (std::size_t r = 0; r < kN; ++r) {
    const auto steps = read_csv(cluster / "replicas" / std::to_string(r) / "steps.csv");
    std::size_t col[6];
    for (int k = 0; k < 6; ++k) {
      const auto at = std::find(steps[0].begin(), steps[0].end(), std::string("slots_") + parts[k]);
      REQUIRE(at != steps[0].end());
      col[k] = static_cast<std::size_t>(at - steps[0].begin());
    }
    for (std::size_t i = 1; i < steps.size(); ++i, ++num_rows) {
      double total = 0;
      for (int k = 0; k < 6; ++k) total += std::stod(steps[i][col[k]]);
      for (int k = 0; k < 6; ++k) sums[k] += std::stod(steps[i][col[k]]) / total;
    }
  }
  REQUIRE(num_rows > 3);
  for (int k = 0; k < 6; ++k) {
    INFO(parts[k]);
    CHECK(summary["kv_breakdown"][parts[k]].get<double>() ==
          Approx(sums[k] / static_cast<double>(num_rows)).margin(2e-9));
  }
  CHECK(summary["kv_breakdown"]["token_states"].get<double>() > 0.01);
  // Rows are in time order across replicas (finish_s, then replica order at a tie).
  for (std::size_t i = 2; i < rows.size(); ++i)
    CHECK(std::stod(rows[i - 1][6]) <= std::stod(rows[i][6]));
}

TEST_CASE("a timed cluster's requests report to the router when they finish", "[sim]") {
  const Scenario s = parse_text(sessions(
      "vllm-0.7.2", "cluster: {replicas: 3, router: {policy: least_requests}}\n"));
  auto src = make_request_source(s.workload, s.seed, 32000);
  ClusterSimulator c(s, *src, kvsim::test::constant_ms(3));
  struct Count : StepObserver {
    std::int64_t done = 0;
    void on_request_done(const RequestRecord&) override { ++done; }
  } count;
  c.attach_cluster(&count);
  c.run();
  std::int64_t routed = 0;
  for (const ReplicaLoad& l : c.loads()) {
    CHECK(l.in_flight == 0);  // every routed request finished and was reported
    CHECK(l.routed > 0);
    routed += l.routed;
  }
  CHECK(routed == count.done);
  CHECK(routed > 60);  // follow-up turns were routed too
  CHECK(c.now() > 0);
}

TEST_CASE("vllm_dp on a dense model is round-robin restarted at each zero snapshot", "[sim]") {
  TempDir tmp("cluster-dp");
  kvsim::test::write_file(tmp.path / "t.jsonl", trace_rows(200, 1));
  const std::string text = trace_scenario(
      (tmp.path / "t.jsonl").string(),
      "cluster: {replicas: 4, router: {policy: vllm_dp, view: {refresh_interval_ms: 300}}}\n");
  const fs::path a = run_scenario(parse_text(text), tmp.path / "a").folder;
  const auto routing = read_csv(a / "routing.csv");
  REQUIRE(routing.size() == 201);
  const auto ns_of = [](const std::string& s) {
    const std::size_t dot = s.find('.');
    return std::stoll(s.substr(0, dot)) * 1'000'000'000 + std::stoll(s.substr(dot + 1));
  };
  std::int64_t tick = 0, k = 0, restarts = 0;
  for (std::size_t i = 1; i < routing.size(); ++i) {
    const std::int64_t t = ns_of(routing[i][1]);
    const std::int64_t now_tick = t / 300'000'000;  // a snapshot at the instant comes first
    if (now_tick != tick) {
      tick = now_tick;
      k = 0;
      ++restarts;
    }
    CHECK(routing[i][3] == std::to_string(k % 4));
    CHECK(routing[i][4] == "dp_lb");
    CHECK(std::stod(routing[i][10]) ==  // view_age_ms: since the last snapshot
          Approx(static_cast<double>(t - tick * 300'000'000) / 1e6).margin(1e-6));
    ++k;
  }
  CHECK(restarts > 3);
  // The same run twice: byte-identical.
  const fs::path b = run_scenario(parse_text(text), tmp.path / "b").folder;
  for (const char* f : {"summary.json", "requests.csv", "routing.csv"})
    CHECK(slurp(a / f) == slurp(b / f));
}

TEST_CASE("least_waiting reads the waiting queues as of the last refresh", "[sim]") {
  TempDir tmp("cluster-lw");
  kvsim::test::write_file(tmp.path / "t.jsonl", trace_rows(200, 1));
  const fs::path a =
      run_scenario(parse_text(trace_scenario((tmp.path / "t.jsonl").string(),
                                             "cluster: {replicas: 3, router: {policy: "
                                             "least_waiting}}\n")),
                   tmp.path / "a")
          .folder;
  const auto routing = read_csv(a / "routing.csv");
  REQUIRE(routing.size() == 201);
  std::set<std::string> used;
  for (std::size_t i = 1; i < routing.size(); ++i) {
    CHECK(routing[i][4] == "least_waiting");
    const double age_ms = std::stod(routing[i][10]);
    CHECK(age_ms >= 0.0);
    CHECK(age_ms < 50.0);  // llm-d's 50 ms scrape
    CHECK(std::stod(routing[i][5]) <= std::stod(routing[i][7]));  // the least waiting
    used.insert(routing[i][3]);
  }
  CHECK(used.size() >= 2);
  const nlohmann::json s = read_json(a / "summary.json");
  CHECK(s["router_decisions_by_branch"]["least_waiting"] == 200);
  CHECK(s["completed"] == 200);
}

TEST_CASE("vllm_dp's MoE snapshots replace the view while counts change, else every 5 s",
          "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kVllmDp;
  c.moe = 1;
  auto r = make_router(c, 3);
  CHECK(r->refresh_interval_ns() == 100'000'000);
  std::vector<ReplicaLoad> loads(3);
  RouteInput in;
  const std::vector<ReplicaView> v1 = {{2, 1, 0.0}, {0, 3, 0.0}, {1, 0, 0.0}};  // s = 9, 3, 4
  r->on_refresh(100'000'000, v1);
  in.now_ns = 130'000'000;
  RouteDecision d = r->route(in, loads);
  CHECK(d.replica == 1);  // s = 3
  CHECK(d.score == 3.0);
  CHECK(d.view_age_ns == 30'000'000);
  d = r->route(in, loads);  // the bump: waiting_1 + 1 -> s = 7; replica 2 has 4
  CHECK(d.replica == 2);
  // The same counts at the next tick: no snapshot, the bumps stay.
  r->on_refresh(200'000'000, v1);
  d = r->route(in, loads);  // s = 9, 7, 8
  CHECK(d.replica == 1);
  // Changed counts: the view is replaced, the bumps discarded.
  const std::vector<ReplicaView> v2 = {{0, 0, 0.0}, {0, 3, 0.0}, {1, 0, 0.0}};  // s = 0, 3, 4
  r->on_refresh(300'000'000, v2);
  in.now_ns = 300'000'000;
  d = r->route(in, loads);
  CHECK(d.replica == 0);
  CHECK(d.view_age_ns == 0);
  // Unchanged for 5 s: the coordinator publishes again, replacing the bumped view.
  r->on_refresh(5'200'000'000, v2);
  in.now_ns = 5'200'000'000;
  CHECK(r->route(in, loads).view_age_ns == 4'900'000'000);
  r->on_refresh(5'300'000'000, v2);
  d = r->route(in, loads);
  CHECK(d.replica == 0);  // the bumps since 0.3 s were discarded: s = 0 again
  CHECK(d.score == 0.0);
}

TEST_CASE("least_waiting before any refresh sees zeros, then the step-end queues", "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kLeastWaiting;
  auto r = make_router(c, 3);
  CHECK(r->refresh_interval_ns() == 50'000'000);
  std::vector<ReplicaLoad> loads(3);
  RouteInput in;
  in.now_ns = 10'000'000;
  RouteDecision d = r->route(in, loads);
  CHECK(d.replica == 0);
  CHECK(d.view_age_ns == 10'000'000);
  const std::vector<ReplicaView> v = {{4, 1, 0.5}, {2, 9, 0.9}, {2, 0, 0.1}};
  r->on_refresh(50'000'000, v);
  in.now_ns = 60'000'000;
  d = r->route(in, loads);
  CHECK(d.replica == 1);  // 2 waiting, the lowest index of the two
  CHECK(d.runner_up == 2);
  CHECK(d.view_age_ns == 10'000'000);
  d = r->route(in, loads);  // no local bump: the same view, the same pick
  CHECK(d.replica == 1);
}

TEST_CASE("llm_d's approximate prefix index counts the pods holding each block until none does",
          "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kLlmD;
  c.w_queue = 10;
  c.w_kv_usage = 0;
  c.w_prefix = 1;
  c.lru_capacity_per_server = 4;
  RouterEnv env;
  env.block_size = 16;
  auto r = make_router(c, 3, env);
  CHECK(r->refresh_interval_ns() == 50'000'000);
  std::vector<ReplicaLoad> loads(3);
  const auto route = [&](std::vector<std::uint64_t> ids) {
    RouteInput in;
    in.now_ns = 60'000'000;
    in.prompt_tokens = 16 * static_cast<std::int64_t>(ids.size());
    in.block_ids = ids;
    return r->route(in, loads);
  };
  const std::vector<ReplicaView> p0_idle = {{0, 0, 0.0}, {5, 0, 0.0}, {5, 0, 0.0}};
  const std::vector<ReplicaView> p1_idle = {{5, 0, 0.0}, {0, 0, 0.0}, {5, 0, 0.0}};
  const std::vector<ReplicaView> all_idle(3);
  r->on_refresh(50'000'000, p0_idle);
  RouteDecision d = route({1, 2, 3});  // the queue scorer decides: 10 + 0
  CHECK(d.replica == 0);
  CHECK(d.score == 10.0);
  CHECK(d.matched_blocks == 0);
  CHECK(d.view_age_ns == 10'000'000);
  r->on_refresh(50'000'000, p1_idle);
  d = route({7, 2, 3});  // block 7 is nowhere: the match stops at once
  CHECK(d.replica == 1);
  CHECK(d.matched_blocks == 0);
  r->on_refresh(50'000'000, all_idle);
  // Block 1: {0}; block 2: {0, 1}; block 3: {0, 1}: pod 0 counts 3, pod 1 counts 2 (GIE's count
  // of the blocks held among the first k, not pod 1's own leading run of 0).
  d = route({1, 2, 3});
  CHECK(d.replica == 0);
  CHECK(d.branch == "score");
  CHECK(d.matched_blocks == 3);
  CHECK(d.score == Approx(11.0));
  CHECK(d.runner_up == 1);
  CHECK(d.runner_up_score == Approx(10.0 + 2.0 / 3.0));
  // Pod 1's LRU (capacity 4) holds 3, 2, 7; two new blocks evict 7, its least recently used.
  r->on_refresh(50'000'000, p1_idle);
  CHECK(route({20, 21}).replica == 1);
  r->on_refresh(50'000'000, all_idle);
  d = route({7, 2});
  CHECK(d.matched_blocks == 0);
  CHECK(d.branch == "tie_random");
}

TEST_CASE("a timed llm_d cluster routes by queue, KV usage and the approximate prefix", "[sim]") {
  TempDir tmp("cluster-llmd");
  kvsim::test::write_file(tmp.path / "t.jsonl", trace_rows(200, 1));
  const std::string text = trace_scenario((tmp.path / "t.jsonl").string(),
                                          "cluster: {replicas: 4, router: {policy: llm_d, seed: "
                                          "2}}\n");
  const fs::path a = run_scenario(parse_text(text), tmp.path / "a").folder;
  const auto routing = read_csv(a / "routing.csv");
  REQUIRE(routing.size() == 201);
  std::int64_t matched = 0;
  for (std::size_t i = 1; i < routing.size(); ++i) {
    CHECK((routing[i][4] == "score" || routing[i][4] == "tie_random"));
    CHECK(std::stod(routing[i][5]) >= std::stod(routing[i][7]));  // the highest total
    CHECK(std::stod(routing[i][5]) <= 7.0 + 1e-9);                // weights 2 + 2 + 3
    matched += std::stoll(routing[i][8]);
  }
  CHECK(matched > 0);  // the shared prefixes were found
  const nlohmann::json s = read_json(a / "summary.json");
  CHECK(s["completed"] == 200);
  const fs::path b = run_scenario(parse_text(text), tmp.path / "b").folder;
  CHECK(slurp(a / "routing.csv") == slurp(b / "routing.csv"));
}
