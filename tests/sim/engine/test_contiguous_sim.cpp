// The contiguous profiles in the simulator: the shipped fragmentation study's KV breakdown sums
// to the pool at every recorded step for every profile and both length presets; a request whose
// reservation can never be admitted is rejected and counted, never a hang; a misspelt profile is
// one line naming the valid ones; same seed, same bytes.

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kStudy = std::string(KVSIM_SOURCE_DIR) + "/scenarios/fragmentation-study.yaml";
const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";

struct CsvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::size_t col(const std::string& name) const {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    FAIL("no column " << name);
    return 0;
  }
};

CsvTable read_csv(const fs::path& p) {
  std::ifstream f(p);
  CsvTable t;
  std::string line;
  bool first = true;
  while (std::getline(f, line)) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) row.push_back(cell);
    if (!line.empty() && line.back() == ',') row.push_back("");
    if (first)
      t.header = row;
    else
      t.rows.push_back(row);
    first = false;
  }
  return t;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

constexpr const char* kSlots[] = {
    "slots_token_states",           "slots_reservation", "slots_internal_fragmentation",
    "slots_external_fragmentation", "slots_cached_free", "slots_free"};

}  // namespace

TEST_CASE(
    "the fragmentation study's KV breakdown sums to the pool at every recorded step for "
    "every profile",
    "[sim]") {
  TempDir dir("contig-study");
  std::int64_t external_rows = 0;
  for (const char* lengths : {"lengths/sharegpt-like.csv", "lengths/alpaca-like.csv"}) {
    for (const char* profile : {"orca-max", "orca-pow2", "orca-oracle", "vllm-0.7.2"}) {
      INFO(lengths << " " << profile);
      const Scenario s = load_scenario(
          kStudy,
          {std::string("engine.profile=") + profile, std::string("workload.lengths=") + lengths,
           "workload.num_requests=120", "workload.arrival.rate_per_s=64", "outputs.steps_every=1",
           std::string("name=") + profile + "-" + std::string(lengths).substr(8, 6)});
      REQUIRE(s.num_gpu_blocks * s.cache.sizing.block_size == 15728);  // the paper's ~15.7K
      const RunResult r = run_scenario(s, dir.path);
      const CsvTable steps = read_csv(fs::path(r.folder) / "steps.csv");
      REQUIRE(steps.rows.size() == static_cast<std::size_t>(r.num_steps));  // every step
      std::int64_t internal = 0, external = 0;
      for (const auto& row : steps.rows) {
        std::int64_t total = 0;
        for (const char* c : kSlots) total += std::stoll(row[steps.col(c)]);
        REQUIRE(total == 15728);
        internal += std::stoll(row[steps.col("slots_internal_fragmentation")]);
        const std::int64_t ext = std::stoll(row[steps.col("slots_external_fragmentation")]);
        external += ext;
        external_rows += ext > 0;
      }
      const nlohmann::json j = read_json(fs::path(r.folder) / "summary.json");
      double sum = 0;
      for (const auto& [k, v] : j["kv_breakdown"].items()) sum += v.get<double>();
      CHECK(std::abs(sum - 1.0) < 1e-8);
      CHECK(j["profile"] == profile);
      CHECK(j["completed"] == 120);
      CHECK(j["rejected"] == 0);
      const std::string p = profile;
      if (p == "orca-oracle") CHECK(internal == 0);  // the reservation is the true length
      if (p == "orca-max" || p == "orca-pow2") CHECK(internal > 0);
      if (p == "vllm-0.7.2") CHECK(external == 0);              // paged: no external fragmentation
      if (p == "orca-max") CHECK(external > 0);                 // 1,392 slots beside 7 x 2,048
      if (p != "vllm-0.7.2") CHECK(j["num_preemptions"] == 0);  // reservations cover requests
    }
  }
  CHECK(external_rows > 100);
}

TEST_CASE("a reservation that can never be admitted is rejected per request, not a hang", "[sim]") {
  TempDir dir("contig-reject");
  // A pool of 512 slots, max_model_len 1024: orca-max's reservations never fit; orca-oracle's
  // fit unless the request is longer than the pool; prompts over the 300-token budget never run.
  const auto run = [&](const std::string& profile) {
    const std::string yaml =
        "name: " + profile + "\nseed: 3\nengine: {profile: " + profile +
        "}\nmodel: {config: " + kModel +
        "}\ncache: {block_size: 16, num_gpu_blocks_override: 32}\n"
        "scheduler: {max_model_len: 1024, max_num_batched_tokens: 300}\n"
        "workload: {num_requests: 200, arrival: {process: poisson, rate_per_s: 50},\n"
        "  prompt_tokens: {uniform: {min: 1, max: 400}}, output_tokens: {uniform: {min: 1, "
        "max: 600}}}\noutputs: {steps_every: 1}\n";
    const Scenario s = parse_scenario(load_yaml_string(yaml, "t.yaml"), "t.yaml");
    const RunResult r = run_scenario(s, dir.path);
    return std::pair{read_json(fs::path(r.folder) / "summary.json"),
                     read_csv(fs::path(r.folder) / "requests.csv")};
  };
  const auto [max_summary, max_requests] = run("orca-max");
  CHECK(max_summary["completed"] == 0);
  CHECK(max_summary["rejected"] == 200);
  const auto [oracle, requests] = run("orca-oracle");
  const std::int64_t completed = oracle["completed"], rejected = oracle["rejected"];
  CHECK(completed + rejected == 200);
  CHECK(completed > 50);
  CHECK(rejected > 50);
  // Exactly the requests with a prompt over the budget or K/V beyond the pool were refused.
  std::int64_t expect_rejected = 0;
  for (const auto& row : requests.rows) {
    const std::int64_t prompt = std::stoll(row[requests.col("prompt_tokens")]);
    const bool was_rejected = row[requests.col("finish_reason")] == "rejected";
    if (!was_rejected) {
      const std::int64_t out = std::stoll(row[requests.col("output_tokens")]);
      CHECK(prompt <= 300);
      CHECK(prompt + out - 1 <= 512);
    } else {
      ++expect_rejected;
      CHECK(row[requests.col("ttft_ms")].empty());
    }
  }
  CHECK(expect_rejected == rejected);
}

TEST_CASE("a misspelt profile is one line naming the valid ones", "[sim]") {
  const std::string msg =
      kvsim::test::error_of([] { (void)load_scenario(kStudy, {"engine.profile=orca-maxx"}); });
  CHECK(msg.find("engine.profile: unknown value 'orca-maxx' (did you mean 'orca-max'?)") !=
        std::string::npos);
  CHECK(msg.find("vllm-0.7.2, vllm-0.8.5, vllm-0.20, vllm-0.7.2-v0, orca-max, orca-pow2, "
                 "orca-oracle") != std::string::npos);
  CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("a contiguous run is byte-identical across runs with the same seed", "[sim]") {
  TempDir a("contig-det-a"), b("contig-det-b");
  const std::vector<std::string> sets = {"engine.profile=orca-pow2", "workload.num_requests=80",
                                         "workload.arrival.rate_per_s=16"};
  const RunResult ra = run_scenario(load_scenario(kStudy, sets), a.path);
  const RunResult rb = run_scenario(load_scenario(kStudy, sets), b.path);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv", "config.resolved.yaml"}) {
    INFO(f);
    CHECK(kvsim::test::slurp(fs::path(ra.folder) / f) ==
          kvsim::test::slurp(fs::path(rb.folder) / f));
  }
  std::vector<std::string> seed2 = sets;
  seed2.push_back("seed=2");
  const RunResult rc = run_scenario(load_scenario(kStudy, seed2), b.path / "seed2");
  const std::string other = kvsim::test::slurp(fs::path(rc.folder) / "requests.csv");
  CHECK(other != kvsim::test::slurp(fs::path(ra.folder) / "requests.csv"));
}

TEST_CASE("engine.contiguous_fit picks first or best fit for the contiguous profiles only",
          "[sim]") {
  TempDir dir("contig-fit");
  const std::vector<std::string> base = {"engine.profile=orca-oracle", "workload.num_requests=300",
                                         "workload.arrival.rate_per_s=64"};
  const Scenario first = load_scenario(kStudy, base);
  CHECK(first.engine.contiguous_fit == FitPolicy::kFirstFit);
  CHECK(resolved_yaml(first).find("contiguous_fit: first_fit") != std::string::npos);
  std::vector<std::string> best_sets = base;
  best_sets.push_back("engine.contiguous_fit=best_fit");
  const Scenario best = load_scenario(kStudy, best_sets);
  CHECK(best.engine.contiguous_fit == FitPolicy::kBestFit);
  CHECK(best.engine_params().contiguous_fit == FitPolicy::kBestFit);
  CHECK(resolved_yaml(best).find("contiguous_fit: best_fit") != std::string::npos);
  // Resolving is a fixed point (the lengths file and the fit included).
  const std::string text = resolved_yaml(best);
  CHECK(resolved_yaml(parse_scenario(load_yaml_string(text, "r.yaml"), "r.yaml")) == text);
  const RunResult a = run_scenario(first, dir.path / "first");
  const RunResult b = run_scenario(best, dir.path / "best");
  CHECK(kvsim::test::slurp(fs::path(a.folder) / "steps.csv") !=
        kvsim::test::slurp(fs::path(b.folder) / "steps.csv"));
  // The paged profiles do not read it; like every key, it is written with its (default) value.
  CHECK(resolved_yaml(load_scenario(kStudy, {})).find("contiguous_fit: first_fit") !=
        std::string::npos);
  CHECK(kvsim::test::error_of([&] {
          (void)load_scenario(kStudy, {"engine.contiguous_fit=worst_fit"});
        }).find("engine.contiguous_fit: unknown value 'worst_fit'") != std::string::npos);
}
