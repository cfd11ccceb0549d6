// OverloadDetector: a stable run is not flagged, an overloaded one is (with its rates), a burst
// that drains is not; and an overloaded run says so in summary.json, on stderr and on the queue
// plot.

#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/metrics/overload.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;

namespace {

constexpr SimTimeNs kMs = 1'000'000;

/// One FIFO server taking `service_ns` per request, fed `arrivals_ns` (sorted): the detector sees
/// every request's row and, at every service completion, the waiting queue (arrived, not started).
OverloadDetector::Verdict serve(const std::vector<SimTimeNs>& arrivals_ns, SimTimeNs service_ns) {
  OverloadDetector d;
  SimTimeNs free_at = 0;
  std::vector<SimTimeNs> starts;
  for (SimTimeNs a : arrivals_ns) {
    const SimTimeNs start = std::max(a, free_at);
    free_at = start + service_ns;
    starts.push_back(start);
  }
  std::size_t started = 0, arrived = 0;
  for (std::size_t i = 0; i < arrivals_ns.size(); ++i) {
    const SimTimeNs end = starts[i] + service_ns;
    while (arrived < arrivals_ns.size() && arrivals_ns[arrived] <= end) ++arrived;
    while (started < starts.size() && starts[started] <= end) ++started;
    StepView v;
    v.end_ns = end;
    v.num_waiting = static_cast<std::int64_t>(arrived - started);
    d.on_step(v);
    RequestRecord r;
    r.request_id = i;
    r.arrival_ns = arrivals_ns[i];
    r.first_token_ns = starts[i];
    r.finish_ns = end;
    d.on_request_done(r);
  }
  return d.verdict();
}

std::vector<SimTimeNs> every(SimTimeNs gap_ns, std::size_t n, SimTimeNs from_ns = 0) {
  std::vector<SimTimeNs> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(from_ns + static_cast<SimTimeNs>(i) * gap_ns);
  return t;
}

std::string scenario_yaml(int rate_per_s) {
  return "name: ov\nseed: 1\nmodel: {config: " + std::string(KVSIM_SOURCE_DIR) +
         "/scenarios/models/opt-125m.json}\ncache: {block_size: 16, num_gpu_blocks_override: "
         "2000}\nscheduler: {max_model_len: 2048, max_num_seqs: 16}\nworkload: {num_requests: "
         "3000, arrival: {process: poisson, rate_per_s: " +
         std::to_string(rate_per_s) +
         "}, prompt_tokens: 100, output_tokens: 50}\nlatency: {model: constant, step_time_us: "
         "4600}\n";
}

}  // namespace

TEST_CASE("a server faster than its arrivals is not overloaded", "[sim]") {
  // 100 requests/s for 20 s, 8 ms each (125/s).
  const auto v = serve(every(10 * kMs, 2000), 8 * kMs);
  CHECK_FALSE(v.overloaded);
  CHECK(v.arrival_rate_per_s == Approx(100).epsilon(0.01));
  CHECK(v.completion_rate_per_s == Approx(100).epsilon(0.01));
  CHECK(v.min_waiting_q3 == 0);
  CHECK(v.min_waiting_q4 == 0);
}

TEST_CASE("arrivals that outpace the server are overloaded, with both rates", "[sim]") {
  // 100 requests/s for 20 s, 12.5 ms each (80/s): the queue grows by 20 a second.
  const auto v = serve(every(10 * kMs, 2000), 12'500'000);
  CHECK(v.overloaded);
  CHECK(v.arrival_rate_per_s == Approx(100).epsilon(0.01));
  CHECK(v.completion_rate_per_s == Approx(80).epsilon(0.01));
  // The window is the second half of the arrivals, 10-20 s, at the buckets' resolution.
  CHECK(v.window_start_ns == Approx(10e9).epsilon(0.01));
  CHECK(v.window_end_ns == Approx(20e9).epsilon(0.01));
  // The waiting queue's minima are at the starts of the last two quarters, 5 s apart.
  CHECK(v.min_waiting_q4 - v.min_waiting_q3 == Approx(20 * 5).margin(2));
  // 5 % too slow is still overloaded; 1 % too fast is not.
  CHECK(serve(every(10 * kMs, 2000), 10'500'000).overloaded);
  CHECK_FALSE(serve(every(10 * kMs, 2000), 9'900'000).overloaded);
}

TEST_CASE("a burst that drains is not overloaded, however far it drops the completion rate",
          "[sim]") {
  // 100 requests/s for 10 s at 8 ms each, plus 100 more at 6 s: they drain by 10 s.
  std::vector<SimTimeNs> t = every(10 * kMs, 1000);
  for (int i = 0; i < 100; ++i) t.push_back(6000 * kMs);
  std::sort(t.begin(), t.end());
  const auto mid = serve(t, 8 * kMs);
  CHECK_FALSE(mid.overloaded);
  CHECK(mid.min_waiting_q3 == 0);
  // A burst of 300 at the very last arrival: completions lag arrivals by its size in the window.
  std::vector<SimTimeNs> end = every(10 * kMs, 1000);
  for (int i = 0; i < 300; ++i) end.push_back(end.back());
  const auto last = serve(end, 8 * kMs);
  CHECK(last.completion_rate_per_s < 0.8 * last.arrival_rate_per_s);
  CHECK_FALSE(last.overloaded);
  // Everything at once (an offline batch): no arrival window at all.
  CHECK_FALSE(serve(std::vector<SimTimeNs>(500, 0), 12 * kMs).overloaded);
  // Too few arrivals to tell.
  CHECK_FALSE(serve(every(10 * kMs, 40), 50 * kMs).overloaded);
}

TEST_CASE("the detector's buckets widen without losing a count", "[sim]") {
  // 200,000 arrivals over 20,000 s, done by 25,000 s: the 1 ms buckets double 15 times, to
  // 32.8 s, and the 10,000 s window is right to about a bucket at each end.
  const auto v = serve(every(100 * kMs, 200'000), 125 * kMs);
  CHECK(v.overloaded);
  CHECK(v.window_end_ns - v.window_start_ns == Approx(10'000e9).epsilon(0.007));
  CHECK(v.arrival_rate_per_s == Approx(10).epsilon(0.007));
  CHECK(v.completion_rate_per_s == Approx(8).epsilon(0.007));
  // Every arrival from the window's start to the last one (at 19,999.9 s) counted, 10 a second.
  CHECK(static_cast<double>(v.arrivals) ==
        Approx((19'999.9e9 - static_cast<double>(v.window_start_ns)) / 1e8 + 1).margin(1));
}

TEST_CASE("an overloaded run says so in summary.json and once on stderr, a stable one does not",
          "[sim]") {
  kvsim::test::TempDir tmp("overload");
  // 16 sequences of 51 steps of 4.6 ms: about 68 requests/s.
  auto run = [&](int rate) {
    const Scenario s = parse_scenario(load_yaml_string(scenario_yaml(rate), "ov.yaml"), "ov.yaml");
    return run_scenario(s, tmp.path / std::to_string(rate));
  };
  const RunResult stable = run(60);
  const nlohmann::json js = nlohmann::json::parse(stable.summary_json);
  CHECK_FALSE(js.contains("overloaded"));
  CHECK_FALSE(js.contains("arrival_rate_per_s"));
  CHECK(stable.warnings.empty());

  const RunResult over = run(80);
  const nlohmann::json jo = nlohmann::json::parse(over.summary_json);
  CHECK(jo["overloaded"] == true);
  CHECK(jo["arrival_rate_per_s"].get<double>() == Approx(80).epsilon(0.05));
  CHECK(jo["completion_rate_per_s"].get<double>() == Approx(16.0 / (51 * 0.0046)).epsilon(0.03));
  CHECK(jo["overload_window_end_s"].get<double>() > jo["overload_window_start_s"].get<double>());
  REQUIRE(over.warnings.size() == 1);
  CHECK_THAT(over.warnings[0], Catch::StartsWith("ov: overloaded: requests arrive at "));

  // kvsim run: exit 0, one warning line.
  const fs::path yaml = tmp.path / "ov.yaml";
  kvsim::test::write_file(yaml, scenario_yaml(80));
  const fs::path log = tmp.path / "err.txt";
  const std::string cmd = kvsim::test::kvsim_exe() + " run " + yaml.string() + " -o " +
                          (tmp.path / "cli").string() + " --quiet 2> " + log.string();
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 0);
  const std::string err = kvsim::test::slurp(log);
  CHECK(err == "kvsim: warning: " + over.warnings[0] + "\n");

  // The queue plot marks it.
  const std::string python = "MPLBACKEND=Agg /usr/bin/python3";
  // (scripts/install-deps.sh installs matplotlib: a missing one fails the test.)
  REQUIRE(std::system((python + " -c 'import matplotlib, numpy' > /dev/null 2>&1").c_str()) == 0);
  const fs::path plots = tmp.path / "plots";
  const std::string plot = python + " " + std::string(KVSIM_SOURCE_DIR) +
                           "/plots/kvsim_plot.py -q " + (tmp.path / "cli" / "ov").string() +
                           " -o " + plots.string() + " > " + log.string() + " 2>&1";
  INFO(kvsim::test::slurp(log));
  REQUIRE(std::system(plot.c_str()) == 0);
  CHECK(fs::exists(plots / "kv_usage_queue.png"));
  CHECK_THAT(kvsim::test::slurp(plots / "index.html"),
             Catch::Contains("OVERLOADED: requests arrive at"));
}
