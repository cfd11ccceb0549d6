// vllm_dp over an MoE model: the replicas' forward passes in lockstep (shared/spec/
// cluster-routing.md §3.2; sim/cluster/dp_lockstep.h). Pass k ends on every rank at
// max(E_{k-1}, launches) + the slowest rank's own duration; idle ranks run dummy batches while the
// wave runs; every 32 passes the ranks all-reduce whether any has unfinished requests and the wave
// ends when none has.

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
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

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";

/// 2 replicas; step time 1000 us + 10 us per prefill token + 100 us per decode token, so a dummy
/// batch (one decode token) takes 1100 us.
std::string hand_scenario(const fs::path& trace, const std::string& router, bool async) {
  return "name: h\nseed: 1\nengine: {profile: vllm-0.20, mode: timed}\nmodel: {config: " + kModel +
         "}\nlatency: {model: fitted, coefficients: {intercept: 1000, prefill_tokens: 10, "
         "decode_tokens: 100}}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 200}\n"
         "scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512, max_model_len: 1024, "
         "async_scheduling: " +
         std::string(async ? "true" : "false") +
         "}\noutputs: {steps_every: 1}\n"
         "workload: {trace: {format: mooncake, path: " +
         trace.string() + ", hash_block_tokens: 64}}\ncluster: {replicas: 2, router: " + router +
         "}\n";
}

// A (100 prompt tokens, 3 outputs) and B (300, 2) at 0 ms, C (50, 2) at 20 ms, D (20, 1) at
// 50 ms. vllm_dp (no snapshot before 100 ms, ties to the earliest): A -> 0, B -> 1, C -> 0
// (scores 4, 4), D -> 1 (8 against 4).
const char* kHandTrace =
    "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 3, \"hash_ids\": [1, 2]}\n"
    "{\"timestamp\": 0, \"input_length\": 300, \"output_length\": 2, \"hash_ids\": [3, 4, 5, 6, "
    "7]}\n"
    "{\"timestamp\": 20, \"input_length\": 50, \"output_length\": 2, \"hash_ids\": [8]}\n"
    "{\"timestamp\": 50, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [9]}\n";

/// requests.csv rows by request id.
std::map<std::string, std::vector<std::string>> by_id(const fs::path& dir) {
  std::map<std::string, std::vector<std::string>> m;
  const auto rows = read_csv(dir / "requests.csv");
  for (std::size_t i = 1; i < rows.size(); ++i) m[rows[i][0]] = rows[i];
  return m;
}

double ms(const std::string& s) { return std::stod(s) * 1e3; }

/// Steps of all replicas grouped by start instant (ns): the distinct end instants of each group.
/// In a synchronous lockstep run every group has one end; independent replicas do not.
std::int64_t starts_with_unequal_ends(const fs::path& dir, std::int32_t replicas,
                                      std::int64_t* steps = nullptr,
                                      std::set<std::int64_t>* ends = nullptr) {
  std::map<std::int64_t, std::set<std::int64_t>> by_start;
  std::int64_t n = 0;
  for (std::int32_t r = 0; r < replicas; ++r) {
    const auto rows = read_csv(dir / "replicas" / std::to_string(r) / "steps.csv");
    for (std::size_t i = 1; i < rows.size(); ++i) {
      const auto start = std::llround(std::stod(rows[i][1]) * 1e9);
      const auto end = start + std::llround(std::stod(rows[i][2]) * 1e6);
      by_start[start].insert(end);
      if (ends) ends->insert(end);
      ++n;
    }
  }
  if (steps) *steps = n;
  std::int64_t bad = 0;
  for (const auto& [s, e] : by_start) bad += e.size() > 1;
  return bad;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("DP-MoE lockstep by hand: the slowest rank and dummy batches in waves of 32 passes",
          "[sim][cluster]") {
  TempDir tmp("dp-lockstep-hand");
  kvsim::test::write_file(tmp.path / "t.jsonl", kHandTrace);
  const fs::path out =
      run_scenario(parse_text(hand_scenario(tmp.path / "t.jsonl",
                                            "{policy: vllm_dp, moe: true}", false)),
                   tmp.path / "o")
          .folder;
  const auto req = by_id(out);
  REQUIRE(req.size() == 4);
  // Pass 1 (0 ms): A's prefill 2.0 ms on replica 0, B's 4.0 ms on replica 1: both end at 4.0.
  CHECK(req.at("0")[14] == "0");
  CHECK(req.at("1")[14] == "1");
  CHECK(ms(req.at("0")[5]) == Approx(4.0));
  CHECK(ms(req.at("1")[5]) == Approx(4.0));
  // Pass 2: both decode (1.1 ms): B ends at 5.1. Pass 3: A decodes beside replica 1's dummy
  // batch: A ends at 6.2.
  CHECK(ms(req.at("1")[6]) == Approx(5.1));
  CHECK(ms(req.at("0")[6]) == Approx(6.2));
  // Passes 4.. are dummy batches of 1.1 ms: C arrives at 20 ms during pass 16 [19.4, 20.5] and
  // joins replica 0's next iteration at 20.5; its prefill (1.5 ms) is the slowest of pass 17.
  CHECK(req.at("2")[14] == "0");
  CHECK(ms(req.at("2")[4]) == Approx(20.5));
  CHECK(ms(req.at("2")[5]) == Approx(22.0));
  CHECK(ms(req.at("2")[6]) == Approx(23.1));
  // The wave ends after pass 32 (38.5 ms): D at 50 ms starts a new one at once, beside a dummy
  // batch of replica 0 (1.1 ms): its prefill (1.2 ms) ends at 51.2.
  CHECK(req.at("3")[14] == "1");
  CHECK(ms(req.at("3")[4]) == Approx(50.0));
  CHECK(ms(req.at("3")[5]) == Approx(51.2));
  const nlohmann::json s = read_json(out / "summary.json");
  REQUIRE(s.contains("dp_lockstep"));
  const nlohmann::json& ls = s["dp_lockstep"];
  CHECK(ls["waves"] == 2);
  CHECK(ls["forward_passes"] == 64);
  CHECK(ls["dummy_batch_s"].get<double>() == Approx(0.0011));
  // Replica 0 ran 5 real passes (A x3, C x2), replica 1 three (B x2, D): the rest are dummies.
  CHECK(ls["dummy_batches"] == nlohmann::json::array({59, 61}));
  // Waits: replica 0 2.0 ms in pass 1 (its 2.0 against 4.0) and 0.1 ms in wave 2's first pass
  // (1.1 against 1.2); replica 1 0.4 ms in pass 17 (1.1 against 1.5).
  CHECK(ls["barrier_wait_s"][0].get<double>() == Approx(0.0021).margin(1e-12));
  CHECK(ls["barrier_wait_s"][1].get<double>() == Approx(0.0004).margin(1e-12));
  // Replica 0's steps as steps.csv writes them: each as long as its pass.
  const auto steps = read_csv(out / "replicas" / "0" / "steps.csv");
  REQUIRE(steps.size() == 6);
  const std::vector<std::pair<double, double>> want = {
      {0.0, 4.0}, {4.0, 1.1}, {5.1, 1.1}, {20.5, 1.5}, {22.0, 1.1}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(ms(steps[i + 1][1]) == Approx(want[i].first));
    CHECK(std::stod(steps[i + 1][2]) == Approx(want[i].second));
  }
}

TEST_CASE("vllm_dp over a dense model does not lock the replicas", "[sim][cluster]") {
  TempDir tmp("dp-dense-hand");
  kvsim::test::write_file(tmp.path / "t.jsonl", kHandTrace);
  const fs::path out =
      run_scenario(parse_text(hand_scenario(tmp.path / "t.jsonl",
                                            "{policy: vllm_dp, moe: false}", false)),
                   tmp.path / "o")
          .folder;
  const auto req = by_id(out);
  CHECK(ms(req.at("0")[5]) == Approx(2.0));  // A's own prefill
  CHECK(ms(req.at("1")[5]) == Approx(4.0));
  CHECK(ms(req.at("2")[4]) == Approx(20.0));  // C starts at its arrival on an idle replica
  CHECK_FALSE(read_json(out / "summary.json").contains("dp_lockstep"));
}

TEST_CASE("DP-MoE lockstep over a busy trace: passes add up and steps end together (sync and async)",
          "[sim][cluster]") {
  TempDir tmp("dp-lockstep-busy");
  std::string trace;
  std::int64_t ts = 0;
  for (int i = 0; i < 160; ++i) {
    ts += (i * 7919) % 23;
    const int own = 1 + (i * 13) % 5;
    std::string ids = std::to_string(i % 5 * 1000);
    for (int k = 0; k < own; ++k) ids += ", " + std::to_string(100000 + i * 10 + k);
    trace += "{\"timestamp\": " + std::to_string(ts) + ", \"input_length\": " +
             std::to_string(64 * (1 + own) - (i * 31) % 50) + ", \"output_length\": " +
             std::to_string(1 + (i * 37) % 60) + ", \"hash_ids\": [" + ids + "]}\n";
  }
  kvsim::test::write_file(tmp.path / "t.jsonl", trace);
  const auto text = [&](const std::string& moe, bool async) {
    std::string t = hand_scenario(tmp.path / "t.jsonl", "{policy: vllm_dp, moe: " + moe + "}",
                                  async);
    const std::size_t at = t.find("replicas: 2");
    return t.replace(at, 11, "replicas: 4");
  };
  for (const bool async : {false, true}) {
    INFO("async " << async);
    const fs::path out =
        run_scenario(parse_text(text("true", async)), tmp.path / ("m" + std::to_string(async)))
            .folder;
    const nlohmann::json s = read_json(out / "summary.json");
    CHECK(s["completed"] == 160);
    const nlohmann::json& ls = s.at("dp_lockstep");
    const std::int64_t passes = ls["forward_passes"];
    CHECK(passes % 32 == 0);  // every wave ends at an all-reduce
    std::int64_t steps = 0;
    std::set<std::int64_t> ends;
    const std::int64_t unequal = starts_with_unequal_ends(out, 4, &steps, &ends);
    // Every rank takes part in every pass: its own batches plus its dummy batches.
    std::int64_t dummies = 0;
    for (const auto& d : ls["dummy_batches"]) dummies += d.get<std::int64_t>();
    CHECK(steps + dummies == 4 * passes);
    // Every step ends at a pass's end: at most one end instant per pass.
    CHECK(static_cast<std::int64_t>(ends.size()) <= passes);
    if (!async) CHECK(unequal == 0);  // (async: a rank's queued step starts with the one before)
    // Same scenario, same bytes.
    const fs::path again =
        run_scenario(parse_text(text("true", async)), tmp.path / ("n" + std::to_string(async)))
            .folder;
    for (const char* f : {"summary.json", "requests.csv", "routing.csv"})
      CHECK(slurp(out / f) == slurp(again / f));
  }
  // The checker finds independent replicas' steps (the dense run): it can fail.
  const fs::path dense = run_scenario(parse_text(text("false", false)), tmp.path / "d").folder;
  CHECK(starts_with_unequal_ends(dense, 4) > 0);
}

TEST_CASE("DP-MoE lockstep is refused over the CPU tier, at its line", "[sim][cluster]") {
  TempDir tmp("dp-lockstep-tier");
  kvsim::test::write_file(tmp.path / "t.jsonl", kHandTrace);
  std::string tier = hand_scenario(tmp.path / "t.jsonl", "{policy: vllm_dp, moe: true}", false);
  tier.replace(tier.find("num_gpu_blocks_override: 200"), 28,
               "num_gpu_blocks_override: 200, kv_offloading_capacity_tokens: 20000");
  const std::string e = kvsim::test::scenario_error(tier);
  CHECK(e.find("cluster.router.policy") != std::string::npos);
  CHECK(e.find("lockstep") != std::string::npos);
  CHECK(e.find(":10:") != std::string::npos);  // the cluster's line
  // The same tier under a dense vllm_dp runs.
  std::string dense = tier;
  dense.replace(dense.find("moe: true"), 9, "moe: false");
  CHECK_NOTHROW(parse_text(dense));
}
