// ServerAdmission: vLLM's OpenAI-server refusal rule and the engine's max_tokens, on its own and
// through a run (a stop-at-EOS request whose EOS lies past max_model_len is served and capped).

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/engine/server_admission.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

std::vector<std::vector<std::string>> csv_rows(const fs::path& p) {
  std::istringstream in(kvsim::test::slurp(p));
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(cell);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST_CASE("v0.7.2's server refuses by whether the client sent max_tokens", "[sim]") {
  const ServerAdmission rule = server_admission(Profile::kVllm072);
  CHECK(rule.overflow == ServerAdmission::Overflow::kRefuse);
  constexpr std::int64_t kMml = 100;
  // With max_tokens: prompt + max_tokens > max_model_len is refused; equal is served as sent.
  CHECK(rule.engine_max_tokens(60, 40, kMml) == std::optional<std::int64_t>(40));
  CHECK_FALSE(rule.engine_max_tokens(60, 41, kMml).has_value());
  CHECK(rule.engine_max_tokens(99, 1, kMml) == std::optional<std::int64_t>(1));
  CHECK(rule.engine_max_tokens(10, 7, kMml) == std::optional<std::int64_t>(7));
  // Without: only prompt >= max_model_len is refused; the rest of the context is the cap.
  CHECK(rule.engine_max_tokens(60, std::nullopt, kMml) == std::optional<std::int64_t>(40));
  CHECK(rule.engine_max_tokens(99, std::nullopt, kMml) == std::optional<std::int64_t>(1));
  CHECK_FALSE(rule.engine_max_tokens(100, std::nullopt, kMml).has_value());
  CHECK_FALSE(rule.engine_max_tokens(150, std::nullopt, kMml).has_value());
  // An empty prompt is refused either way.
  CHECK_FALSE(rule.engine_max_tokens(0, std::nullopt, kMml).has_value());
  CHECK_FALSE(rule.engine_max_tokens(0, 5, kMml).has_value());
}

TEST_CASE(
    "every profile names its server's rule: v0.7.2's for every profile but vllm-0.20, which "
    "clamps",
    "[sim]") {
  for (const ProfileInfo& p : profiles()) {
    INFO(p.name);
    const bool clamps = p.profile == Profile::kVllm020;
    CHECK(server_admission(p.profile).overflow ==
          (clamps ? ServerAdmission::Overflow::kClamp : ServerAdmission::Overflow::kRefuse));
    CHECK(server_admission(p.profile).engine_max_tokens(60, 41, 100) ==
          (clamps ? std::optional<std::int64_t>(40) : std::nullopt));
    CHECK(server_admission(p.profile).engine_max_tokens(60, std::nullopt, 100) ==
          std::optional<std::int64_t>(40));
  }
  CHECK(kClampOverflowAdmission.overflow == ServerAdmission::Overflow::kClamp);
}

TEST_CASE("the clamping rule caps max_tokens at the context and refuses only a full prompt",
          "[sim]") {
  const ServerAdmission rule{ServerAdmission::Overflow::kClamp};
  CHECK(rule.engine_max_tokens(60, 41, 100) == std::optional<std::int64_t>(40));
  CHECK(rule.engine_max_tokens(60, 500, 100) == std::optional<std::int64_t>(40));
  CHECK(rule.engine_max_tokens(60, 12, 100) == std::optional<std::int64_t>(12));
  CHECK(rule.engine_max_tokens(60, std::nullopt, 100) == std::optional<std::int64_t>(40));
  CHECK_FALSE(rule.engine_max_tokens(100, 1, 100).has_value());
  CHECK_FALSE(rule.engine_max_tokens(0, std::nullopt, 100).has_value());
}

TEST_CASE("a stop-at-EOS request whose EOS lies past max_model_len is served and capped", "[sim]") {
  TempDir tmp("admission");
  // max_model_len 100. Prompts 60 (EOS at 70: past the context), 99 (one token of room), 100
  // (no room), 30 (EOS at 20: a normal stop).
  const fs::path trace = tmp.path / "t.jsonl";
  kvsim::test::write_file(trace,
                          "{\"arrival_s\": 0, \"prompt_tokens\": 60, \"output_tokens\": 70}\n"
                          "{\"arrival_s\": 1, \"prompt_tokens\": 99, \"output_tokens\": 5}\n"
                          "{\"arrival_s\": 2, \"prompt_tokens\": 100, \"output_tokens\": 5}\n"
                          "{\"arrival_s\": 3, \"prompt_tokens\": 30, \"output_tokens\": 20}\n");
  auto run = [&](const std::string& eos, const std::string& name) {
    const std::string yaml =
        "name: " + name + "\nseed: 3\nengine: {profile: vllm-0.7.2}\nmodel: {config: " +
        std::string(KVSIM_SOURCE_DIR) +
        "/scenarios/models/opt-125m.json}\ncache: {block_size: 16, num_gpu_blocks_override: "
        "64}\nscheduler: {max_model_len: 100}\nworkload: {trace: {format: jsonl, path: " +
        trace.string() + "}, " + eos + "}\n";
    const Scenario s = parse_scenario(load_yaml_string(yaml, "test.yaml"), "test.yaml");
    RunOptions opt;
    opt.step_time = [](const StepView&) { return SimTimeNs{1'000'000}; };
    return run_scenario(s, tmp.path, opt).folder;
  };
  // Stop at EOS, no client max_tokens: served unless prompt >= max_model_len.
  const auto eos = csv_rows(run("ignore_eos: false, eos_token_id: 2", "eos") / "requests.csv");
  REQUIRE(eos.size() == 5);
  // Completion order: request 2 is refused at its arrival (t = 2 s), after 0 and 1 finished.
  CHECK(eos[1][0] == "0");
  CHECK(eos[1][3] == "40");  // capped at max_model_len - prompt
  CHECK(eos[1][13] == "length");
  CHECK(eos[2][0] == "1");
  CHECK(eos[2][3] == "1");
  CHECK(eos[2][13] == "length");
  CHECK(eos[3][0] == "2");
  CHECK(eos[3][13] == "rejected");
  CHECK(eos[4][0] == "3");
  CHECK(eos[4][3] == "20");
  CHECK(eos[4][13] == "stop");
  // Ignoring EOS, the benchmarks send max_tokens = the output length: 60 + 70 and 99 + 5 are
  // refused too.
  const auto len = csv_rows(run("ignore_eos: true", "len") / "requests.csv");
  REQUIRE(len.size() == 5);
  CHECK(len[1][0] == "0");
  CHECK(len[1][13] == "rejected");
  CHECK(len[2][0] == "1");
  CHECK(len[2][13] == "rejected");
  CHECK(len[3][0] == "2");
  CHECK(len[3][13] == "rejected");
  CHECK(len[4][0] == "3");
  CHECK(len[4][3] == "20");
  CHECK(len[4][13] == "length");
}
