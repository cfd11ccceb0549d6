// vllm-0.20 in the simulator: async scheduling as EngineCore's batch queue of two steps on the
// simulated clock (hand-checked times: an arrival during a busy step waits one step more than
// with the synchronous loop; a lone request is as fast), and a hybrid model (gpt-oss: a
// sliding-window group and a full one) running with the invariant walk after every step.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::constant_ms;
using kvsim::test::read_csv;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kModels = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/";

Scenario scenario(const std::string& model, const std::string& scheduler,
                  const std::string& workload) {
  const std::string yaml =
      "name: a\nseed: 3\nengine: {profile: vllm-0.20}\nmodel: {config: " + kModels + model +
      ".json}\ncache: {block_size: 16, " +
      "num_gpu_blocks_override: 512}\nscheduler: " + scheduler + "\nworkload: " + workload +
      "\noutputs: {steps_every: 1}\n";
  return parse_scenario(load_yaml_string(yaml, "a.yaml"), "a.yaml");
}

/// requests.csv's ttft_ms and e2el_ms of each request, by row.
std::vector<std::pair<std::string, std::string>> times(const fs::path& folder) {
  const auto rows = read_csv(folder / "requests.csv");
  std::vector<std::pair<std::string, std::string>> out;
  for (std::size_t i = 1; i < rows.size(); ++i) out.emplace_back(rows[i][7], rows[i][9]);
  return out;
}

}  // namespace

TEST_CASE("vllm-0.20 async scheduling: a batch queue of two steps on the simulated clock",
          "[sim]") {
  TempDir tmp("async");
  RunOptions opt;
  opt.step_time = constant_ms(10);
  opt.check_invariants = true;
  // A lone request: the decode step is scheduled before the prefill's token is known, and runs
  // right after it: the same times as the synchronous loop (TTFT 10 ms, done after 4 steps).
  const std::string lone =
      "{arrival: {process: timestamps, times_s: [0]}, prompt_tokens: 32, "
      "output_tokens: 4}";
  for (const char* async : {"true", "false"}) {
    INFO("async " << async);
    const Scenario s = scenario(
        "opt-125m", std::string("{max_model_len: 2048, async_scheduling: ") + async + "}", lone);
    const auto t = times(run_scenario(s, tmp.path / (std::string("lone-") + async), opt).folder);
    REQUIRE(t.size() == 1);
    CHECK(t[0].first == "10.000000");
    CHECK(t[0].second == "40.000000");
  }
  // B arrives at 5 ms, during A's prefill. Synchronous: B joins the step at 10 ms (first token
  // at 20 ms, 15 ms after arrival). Async: at 0 ms A's prefill and A's first decode were
  // scheduled; the engine waits for the prefill, then schedules B at 10 ms behind that decode:
  // B's prefill runs 20-30 ms (TTFT 25 ms, one step more).
  const std::string two =
      "{arrival: {process: timestamps, times_s: [0, 0.005]}, "
      "prompt_tokens: 32, output_tokens: 3}";
  const auto sync = times(
      run_scenario(scenario("opt-125m", "{max_model_len: 2048, async_scheduling: false}", two),
                   tmp.path / "sync2", opt)
          .folder);
  const auto async =
      times(run_scenario(scenario("opt-125m", "{max_model_len: 2048, async_scheduling: true}", two),
                         tmp.path / "async2", opt)
                .folder);
  REQUIRE(sync.size() == 2);
  REQUIRE(async.size() == 2);
  CHECK(sync[0] == std::make_pair(std::string("10.000000"), std::string("30.000000")));
  CHECK(sync[1].first == "15.000000");
  CHECK(async[0] == std::make_pair(std::string("10.000000"), std::string("30.000000")));
  CHECK(async[1].first == "25.000000");
}

TEST_CASE("vllm-0.20 runs gpt-oss with a sliding-window group and a full one", "[sim]") {
  TempDir tmp("hybrid");
  RunOptions opt;
  opt.step_time = constant_ms(5);
  opt.check_invariants = true;
  const std::string workload =
      "{arrival: {process: poisson, rate_per_s: 50}, num_requests: 40, prompt_tokens: "
      "{uniform: {min: 100, max: 600}}, output_tokens: {uniform: {min: 20, max: 200}}, "
      "system_prompts: {count: 2, tokens: 256, share: 0.8}}";
  for (const char* async : {"false", "true"}) {
    INFO("async " << async);
    const Scenario s =
        scenario("gpt-oss-20b",
                 std::string("{max_model_len: 2048, async_scheduling: ") + async + "}", workload);
    REQUIRE(s.kv_cache_config().kv_cache_groups.size() == 2);
    const RunResult r = run_scenario(s, tmp.path / async, opt);
    std::ifstream f(r.folder / "summary.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    CHECK(j["completed"] == 40);
    CHECK(j["prefix_cache_hits"].get<std::int64_t>() > 0);  // the shared system prompts
  }
}

TEST_CASE("vllm-0.20 async scheduling: a client abort waits for the oldest step in flight",
          "[sim]") {
  TempDir tmp("async-abort");
  RunOptions opt;
  opt.step_time = constant_ms(10);
  opt.check_invariants = true;
  // A arrives at 0 and C at 50 ms, each wanting 100 tokens; their clients give up 25 ms after
  // arriving. Each has two tokens by then (steps end at 10 and 20 ms after its arrival). The
  // synchronous loop frees it when the step in flight ends (3 steps each); under async
  // scheduling that step's successor was scheduled before the abort and still runs (4 each).
  const std::string workload =
      "{arrival: {process: timestamps, times_s: [0, 0.05]}, prompt_tokens: 32, "
      "output_tokens: 100, client_timeout_s: 0.025}";
  for (const auto& [async, steps] : {std::pair{"false", 6}, std::pair{"true", 8}}) {
    INFO("async " << async);
    const Scenario s = scenario(
        "opt-125m", std::string("{max_model_len: 2048, async_scheduling: ") + async + "}", workload);
    const fs::path folder = run_scenario(s, tmp.path / async, opt).folder;
    const auto rows = read_csv(folder / "requests.csv");
    REQUIRE(rows.size() == 3);
    for (std::size_t i = 1; i < rows.size(); ++i) {
      CHECK(rows[i][3] == "2");             // output_tokens delivered before the abort
      CHECK(rows[i][9] == "25.000000");     // e2el_ms: the abort instant
      CHECK(rows[i].back() == "abort");
    }
    std::ifstream f(folder / "summary.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    CHECK(j["aborted"] == 2);
    CHECK(j["num_steps"] == steps);
  }
}

TEST_CASE("vllm-0.20's admission-cap defect ends the run as vLLM's engine ends", "[sim]") {
  // gpt-oss-120b at vLLM's max_num_batched_tokens of 8,192: once the pool runs full, the sliding
  // group's capped count lets an allocation pass the free-space check and get_new_blocks raises
  // (shared/spec/vllm-0.20-semantics.md §6, §12). The shipped scenario's token budget of
  // max_model_len avoids it.
  TempDir tmp("swa-defect");
  const std::string file = std::string(KVSIM_SOURCE_DIR) + "/scenarios/gpt-oss-120b-long-chat.yaml";
  const Scenario bad = load_scenario(file, {"scheduler.max_num_batched_tokens=8192"});
  std::string msg;
  try {
    (void)run_scenario(bad, tmp.path / "bad");
  } catch (const RunError& e) {
    msg = e.what();
  }
  CHECK_THAT(msg, Catch::StartsWith("step 8768: the engine raised out of schedule(), as the "
                                    "vllm-0.20 engine does, ending the run: ValueError: Cannot get"));
  CHECK(msg.find('\n') == std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path / "bad" / bad.name));  // no half-written run folder
  // The same workload in one pool of full-attention layers (vLLM v0.7.2) has no such cap.
  const Scenario full = load_scenario(
      file, {"scheduler.max_num_batched_tokens=8192", "engine.profile=vllm-0.7.2"});
  CHECK(full.kv_cache_config().kv_cache_groups.empty());
  CHECK(fs::exists(run_scenario(full, tmp.path / "full").folder / "summary.json"));
}
