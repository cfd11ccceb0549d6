// router.view.delay_ms (shared/spec/cluster-routing.md §1.3): a refresh at t gives the router each
// replica's figures at its last step end by t - delay. Checked against the replicas' own
// steps.csv: every least_waiting decision's score is the chosen replica's waiting queue at that
// step end.

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::TempDir;

namespace {

std::int64_t ns(double seconds) { return std::llround(seconds * 1e9); }

std::string scenario(const std::string& view) {
  return "name: v\nseed: 5\nengine: {profile: vllm-0.20, mode: timed}\n"
         "model: {config: " KVSIM_SOURCE_DIR
         "/scenarios/models/opt-125m.json}\n"
         "hardware: {gpu: A100-80GB}\nlatency: {model: roofline}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 200}\n"
         "scheduler: {max_num_seqs: 4, max_num_batched_tokens: 512, max_model_len: 2048,\n"
         "  async_scheduling: false}\n"  // (a step's end is its time_s + duration_ms)
         "outputs: {steps_every: 1}\n"
         "workload: {num_requests: 300, arrival: {process: poisson, rate_per_s: 400},\n"
         "  prompt_tokens: {uniform: {min: 50, max: 400}}, output_tokens: {uniform: {min: 5, "
         "max: 60}}}\n"
         "cluster: {replicas: 3, router: {policy: least_waiting, view: " +
         view + "}}\n";
}

}  // namespace

TEST_CASE("a delayed view shows each replica as of its last step end by refresh - delay", "[sim]") {
  TempDir tmp("view-delay");
  for (const std::int64_t delay_ms : {0, 35, 120}) {
    const fs::path out = run_scenario(parse_text(scenario("{refresh_interval_ms: 20, delay_ms: " +
                                                          std::to_string(delay_ms) + "}")),
                                      tmp.path / std::to_string(delay_ms))
                             .folder;
    // Each replica's step ends (time_s + duration) and waiting queues, in order.
    std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> ends(3);
    for (int r = 0; r < 3; ++r) {
      const auto steps = read_csv(out / "replicas" / std::to_string(r) / "steps.csv");
      REQUIRE(steps[0][1] == "time_s");
      REQUIRE(steps[0][4] == "num_waiting");
      for (std::size_t i = 1; i < steps.size(); ++i)
        ends[static_cast<std::size_t>(r)].emplace_back(
            ns(std::stod(steps[i][1])) + std::llround(std::stod(steps[i][2]) * 1e6),
            std::stoll(steps[i][4]));
    }
    const auto routing = read_csv(out / "routing.csv");
    REQUIRE(routing.size() == 301);
    std::int64_t nonzero = 0;
    for (std::size_t i = 1; i < routing.size(); ++i) {
      const std::int64_t t = ns(std::stod(routing[i][1]));
      const std::int64_t refresh = t - std::llround(std::stod(routing[i][10]) * 1e6);
      const std::int64_t seen = refresh - delay_ms * 1'000'000;
      const auto& e = ends[static_cast<std::size_t>(std::stoi(routing[i][3]))];
      std::int64_t waiting = 0;  // before its first step end: zeros
      // (A refresh at t = 0 changes nothing; the first is at 20 ms.)
      if (refresh > 0)
        for (const auto& [end, w] : e)
          if (end <= seen) waiting = w;
      CHECK(std::llround(std::stod(routing[i][5])) == waiting);
      nonzero += waiting > 0;
    }
    CHECK(nonzero > 20);  // the queues were not empty: the check had something to compare
  }
}
