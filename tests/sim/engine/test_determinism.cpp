// Determinism: the same scenario and seed give byte-identical run folders; another seed does not.

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::slurp;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kScenario =
    "name: det\n"
    "seed: 11\n"
    "model: {config: " +
    std::string(KVSIM_SOURCE_DIR) +
    "/scenarios/models/qwen2-1.5b.json}\n"
    "cache: {block_size: 16, num_gpu_blocks_override: 400}\n"
    "scheduler: {max_num_seqs: 32, max_num_batched_tokens: 1024, max_model_len: 4096}\n"
    "workload:\n"
    "  num_requests: 150\n"
    "  arrival: {process: gamma, rate_per_s: 40, cv: 2}\n"
    "  system_prompts: {count: 3, tokens: 200, popularity: {zipf: 1.2}}\n"
    "  prompt_tokens: {lognormal: {mean: 200, sigma: 0.8}, max: 2000}\n"
    "  output_tokens: {lognormal: {mean: 120, sigma: 0.9}, max: 1000}\n"
    "  sessions: {turns: {uniform: {min: 1, max: 3}}, think_time_s: {exponential: {mean: 2}}, "
    "user_tokens: 50}\n"
    "latency: {model: roofline}\n"
    "outputs: {trace_json: true, metrics_prom: true, steps_every: 1}\n";

fs::path run_into(const fs::path& dir, const std::vector<std::string>& sets) {
  YAML::Node root = load_yaml_string(kScenario, "det.yaml");
  for (const auto& a : sets) apply_set(root, a);
  const Scenario s = parse_scenario(root, "det.yaml");
  return run_scenario(s, dir).folder;
}

}  // namespace

TEST_CASE("two runs of the same scenario and seed write byte-identical files", "[sim]") {
  const TempDir tmp("det");
  const fs::path& base = tmp.path;
  const fs::path a = run_into(base / "a", {});
  const fs::path b = run_into(base / "b", {});
  const char* files[] = {"summary.json",         "requests.csv", "steps.csv",
                         "config.resolved.yaml", "trace.json",   "metrics.prom"};
  for (const char* f : files) {
    INFO(f);
    REQUIRE(fs::exists(a / f));
    CHECK(slurp(a / f) == slurp(b / f));
  }
  // The run had preemptions and multi-turn follow-ups (the paths most prone to order effects).
  CHECK(slurp(a / "summary.json").find("\"num_preemptions\": 0,") == std::string::npos);
  const std::string rows = slurp(a / "requests.csv");
  CHECK(std::count(rows.begin(), rows.end(), '\n') > 1 + 150);  // header + open-loop + follow-ups
  const fs::path c = run_into(base / "c", {"seed=12"});
  CHECK(slurp(a / "requests.csv") != slurp(c / "requests.csv"));
}

TEST_CASE("two cache_only runs write byte-identical files", "[sim]") {
  const TempDir tmp("det-co");
  const fs::path& base = tmp.path;
  const std::vector<std::string> sets = {"engine.mode=cache_only", "cache.block_size=32"};
  const fs::path a = run_into(base / "a", sets);
  const fs::path b = run_into(base / "b", sets);
  for (const char* f : {"summary.json", "requests.csv", "steps.csv"}) {
    INFO(f);
    REQUIRE(fs::exists(a / f));
    CHECK(slurp(a / f) == slurp(b / f));
  }
}
