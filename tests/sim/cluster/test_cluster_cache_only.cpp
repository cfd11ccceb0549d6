// Cache-only cluster runs (shared/spec/cluster-routing.md §8, §10): the reference figures of
// the Mooncake synthetic trace, round-robin replicas equal to single runs over the split trace,
// the cluster outputs, requests refused before routing, determinism.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;

namespace {

/// The Mooncake synthetic trace, cache_only, 512-token blocks, no preallocation, vLLM v0.7.2's
/// manager per replica, `capacity` tokens per replica.
std::string mooncake(const std::string& trace, std::int64_t capacity, const std::string& extra) {
  return "name: mc\n"
         "engine: {profile: vllm-0.7.2, mode: cache_only}\n"
         "cache: {block_size: 512, capacity_tokens: " +
         std::to_string(capacity) +
         ", enable_prefix_caching: true, num_preallocate_tokens: 0}\n"
         "scheduler: {max_model_len: 4000000}\n"
         "workload: {trace: {format: mooncake, path: " +
         trace + "}}\n" + extra;
}

fs::path run(const std::string& text, const fs::path& out) {
  return run_scenario(parse_text(text), out).folder;
}

double hit_rate(const fs::path& folder) {
  return read_json(folder / "summary.json")["first_lookup_hit_rate"].get<double>();
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

/// "12.345000000" (seconds, 9 decimals) as integer ns.
std::int64_t ns_of(const std::string& s) {
  const std::size_t dot = s.find('.');
  return std::stoll(s.substr(0, dot)) * 1'000'000'000 + std::stoll(s.substr(dot + 1));
}

/// The first `n` rows of the vendored trace, those with index % m == r when m > 0.
std::string rows_of(std::size_t n, std::size_t m = 0, std::size_t r = 0) {
  std::ifstream f(kvsim::test::vendored_trace("mooncake_synthetic.jsonl"));
  std::string out, line;
  for (std::size_t i = 0; i < n && std::getline(f, line); ++i)
    if (m == 0 || i % m == r) out += line + "\n";
  return out;
}

}  // namespace

TEST_CASE("the Mooncake synthetic trace's round-robin cluster figures are reproduced",
          "[sim][slow]") {
  const std::string trace = kvsim::test::vendored_trace("mooncake_synthetic.jsonl");
  TempDir tmp("cluster-figures");
  const std::string rr8 = "cluster: {replicas: 8, router: {policy: round_robin}}\n";
  const std::int64_t unbounded = 200'000'000;
  // N = 8: unbounded caches, 3M/N tokens per replica, 3M tokens per replica.
  CHECK(hit_rate(run(mooncake(trace, unbounded, rr8), tmp.path / "a")) ==
        Approx(0.2305).margin(0.002));
  CHECK(hit_rate(run(mooncake(trace, 3'000'000 / 8, rr8), tmp.path / "b")) ==
        Approx(0.0519).margin(0.002));
  CHECK(hit_rate(run(mooncake(trace, 3'000'000, rr8), tmp.path / "c")) ==
        Approx(0.1978).margin(0.002));
  // One replica (a cluster of one is the single engine).
  const std::string one = "cluster: {replicas: 1}\n";
  CHECK(hit_rate(run(mooncake(trace, unbounded, one), tmp.path / "d")) ==
        Approx(0.6504).margin(0.002));
  CHECK(hit_rate(run(mooncake(trace, 3'000'000, one), tmp.path / "e")) ==
        Approx(0.3148).margin(0.002));
}

TEST_CASE("a round-robin cluster's replicas are single runs over the split trace", "[sim]") {
  TempDir tmp("cluster-split");
  const std::size_t kRows = 900, kN = 3;
  kvsim::test::write_file(tmp.path / "all.jsonl", rows_of(kRows));
  // Small pools, so evictions decide hits.
  const std::int64_t capacity = 150'000;
  const fs::path cluster =
      run(mooncake((tmp.path / "all.jsonl").string(), capacity,
                   "cluster: {replicas: 3, router: {policy: round_robin}}\n"),
          tmp.path / "cluster");
  const auto rows = read_csv(cluster / "requests.csv");
  const nlohmann::json summary = read_json(cluster / "summary.json");
  REQUIRE(rows.size() == kRows + 1);
  REQUIRE(rows[0].back() == "replica");
  for (std::size_t r = 0; r < kN; ++r) {
    const fs::path split = tmp.path / ("split" + std::to_string(r) + ".jsonl");
    kvsim::test::write_file(split, rows_of(kRows, kN, r));
    const fs::path single =
        run(mooncake(split.string(), capacity, ""), tmp.path / ("single" + std::to_string(r)));
    const auto srows = read_csv(single / "requests.csv");
    // The replica's rows, in order, are the single run's (but the request ids, dense per run, and
    // the arrival times, which the trace reader counts from its first row).
    std::size_t k = 1;
    std::int64_t offset_ns = -1;
    for (std::size_t i = 1; i < rows.size(); ++i) {
      if (rows[i].back() != std::to_string(r)) continue;
      REQUIRE(k < srows.size());
      if (offset_ns < 0) offset_ns = ns_of(rows[i][1]) - ns_of(srows[k][1]);
      CHECK(ns_of(rows[i][1]) - offset_ns == ns_of(srows[k][1]));
      std::vector<std::string> a(rows[i].begin() + 2, rows[i].end() - 1);
      std::vector<std::string> b(srows[k].begin() + 2, srows[k].end());
      REQUIRE(a == b);
      ++k;
    }
    CHECK(k == srows.size());
    const nlohmann::json s = read_json(single / "summary.json");
    const nlohmann::json& rep = summary["replicas"][r];
    CHECK(rep["prefix_cache_queries"] == s["prefix_cache_queries"]);
    CHECK(rep["prefix_cache_hits"] == s["prefix_cache_hits"]);
    CHECK(rep["num_evictions"] == s["num_evictions"]);
    CHECK(rep["first_lookup_hit_rate"] == s["first_lookup_hit_rate"]);
    CHECK(rep["requests_routed"] == kRows / kN);
    CHECK(s["num_evictions"].get<std::int64_t>() > 0);  // the pools were under pressure
  }
}

TEST_CASE("a cluster run writes routing.csv, the replica column and the cluster keys", "[sim]") {
  TempDir tmp("cluster-outputs");
  kvsim::test::write_file(tmp.path / "t.jsonl", rows_of(300));
  const std::string text =
      mooncake((tmp.path / "t.jsonl").string(), 400'000,
               "cluster: {replicas: 4, router: {policy: least_requests}}\n");
  const fs::path a = run(text, tmp.path / "a");
  const nlohmann::json s = read_json(a / "summary.json");
  CHECK(s["num_replicas"] == 4);
  CHECK(s["router_policy"] == "least_requests");
  REQUIRE(s["replicas"].size() == 4);
  std::int64_t routed = 0, hits = 0, prompt = 0;
  for (const auto& r : s["replicas"]) {
    CHECK(r["role"] == "mixed");
    CHECK(r["requests_routed"] == 75);  // fewest routed so far, ties to the lowest: even
    routed += r["requests_routed"].get<std::int64_t>();
    hits += r["prefix_cache_hits"].get<std::int64_t>();
    prompt += r["prompt_tokens_routed"].get<std::int64_t>();
  }
  CHECK(routed == 300);
  CHECK(hits == s["prefix_cache_hits"].get<std::int64_t>());  // cluster-wide = sums
  CHECK(prompt == s["total_input_tokens"].get<std::int64_t>());
  CHECK(s["load_imbalance_requests"].get<double>() == 1.0);
  CHECK(s["load_imbalance_prompt_tokens"].get<double>() >= 1.0);
  CHECK(s["replica_hit_rate_min"].get<double>() <= s["replica_hit_rate_max"].get<double>());
  CHECK(s["router_decisions_by_branch"]["least_requests"] == 300);
  // routing.csv: one row per decision, in decision order.
  const auto routing = read_csv(a / "routing.csv");
  REQUIRE(routing.size() == 301);
  CHECK(routing[0] == std::vector<std::string>{"request_id", "time_s", "stage", "replica", "branch",
                                               "score", "runner_up", "runner_up_score",
                                               "matched_blocks", "prompt_blocks", "view_age_ms"});
  CHECK(routing[1] == std::vector<std::string>{"0", "0.000000000", "route", "0", "least_requests",
                                               "0.000000", "1", "0.000000", "", "79", ""});
  CHECK(routing[5][3] == "0");  // the fifth request: every replica has one
  CHECK(routing[5][5] == "1.000000");
  const auto requests = read_csv(a / "requests.csv");
  for (std::size_t i = 1; i < requests.size(); ++i) CHECK(requests[i].back() == routing[i][3]);
  // Per-replica steps (cache_only: the header only) and a byte-identical rerun.
  for (int r = 0; r < 4; ++r) {
    const auto steps = read_csv(a / "replicas" / std::to_string(r) / "steps.csv");
    CHECK(steps.size() == 1);
  }
  const fs::path b = run(text, tmp.path / "b");
  for (const char* f : {"summary.json", "requests.csv", "routing.csv", "steps.csv",
                        "config.resolved.yaml"})
    CHECK(slurp(a / f) == slurp(b / f));
}

TEST_CASE("a request the server refuses is refused before routing", "[sim]") {
  TempDir tmp("cluster-refused");
  kvsim::test::write_file(tmp.path / "t.jsonl", rows_of(200));
  // max_model_len 20000: the longer prompts are refused at arrival.
  std::string text = mooncake((tmp.path / "t.jsonl").string(), 400'000,
                              "cluster: {replicas: 3, router: {policy: round_robin}}\n");
  text.replace(text.find("4000000"), 7, "20000");
  const fs::path a = run(text, tmp.path / "a");
  const auto requests = read_csv(a / "requests.csv");
  const auto routing = read_csv(a / "routing.csv");
  std::size_t refused = 0, k = 0;
  for (std::size_t i = 1; i < requests.size(); ++i) {
    if (requests[i][13] == "rejected") {
      ++refused;
      CHECK(requests[i].back().empty());  // no replica
      continue;
    }
    // The k-th routed request goes to k mod 3: a refused one takes no turn.
    CHECK(requests[i].back() == std::to_string(k % 3));
    ++k;
    REQUIRE(k < routing.size());
    CHECK(routing[k][0] == requests[i][0]);
  }
  CHECK(refused > 0);
  CHECK(routing.size() == k + 1);
  CHECK(read_json(a / "summary.json")["rejected"] == refused);
}
