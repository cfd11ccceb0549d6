// Simulator: hand-checkable metrics, the KV breakdown, rejection, the drain failure, multi-turn,
// nothing half-written on error, and the Mooncake cache_only hit-rate table.

#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "core/v1/scheduler.h"
#include "sim/config/scenario.h"
#include "sim/metrics/metrics.h"
#include "sim/metrics/writers.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::constant_ms;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";
const std::string kMooncake = std::string(KVSIM_TRACES_DIR) + "/mooncake_synthetic.jsonl";

Scenario scenario_from(const std::string& yaml) {
  return parse_scenario(load_yaml_string(yaml, "test.yaml"), "test.yaml");
}

/// A timed scenario of `profile` (these tests' figures are vLLM v0.7.2's unless they name another).
std::string timed_yaml(const std::string& cache, const std::string& scheduler,
                       const std::string& workload, const std::string& profile = "vllm-0.7.2") {
  return "name: t\nseed: 7\nengine: {profile: " + profile + "}\nmodel: {config: " + kModel +
         "}\ncache: " + cache +
         "\nscheduler: " + scheduler + "\nworkload: " + workload + "\noutputs: {steps_every: 1}\n";
}

double cache_only_hit_rate(double capacity_tokens, std::int64_t block_size = 512) {
  const std::string yaml =
      "name: mc\nengine: {profile: vllm-0.7.2, mode: cache_only}\ncache: {block_size: " +
      std::to_string(block_size) +
      ", capacity_tokens: " + std::to_string(static_cast<std::int64_t>(capacity_tokens)) +
      "}\nscheduler: {max_model_len: 4000000}\nworkload: {trace: {format: mooncake, path: " +
      kMooncake + "}}\n";
  const Scenario s = scenario_from(yaml);
  auto src = make_request_source(s.workload, s.seed, 32000);
  Simulator sim(s, *src, {});
  MetricsCollector m(&sim.final_kv_tokens(), 1, s.scheduler.max_model_len, nullptr);
  sim.attach(&m);
  sim.run();
  const nlohmann::json j = nlohmann::json::parse(m.summary_json("  \"name\": \"mc\",\n"));
  CHECK(j["completed"].get<std::int64_t>() == 3993);
  return j["prefix_cache_hit_rate"].get<double>();
}

/// The KV breakdown by walking every block (the slow reference for Scheduler::kv_breakdown).
KVBreakdown walk_breakdown(const Scheduler& s, const std::vector<std::int64_t>& final_kv) {
  const BlockPool& pool = s.kv_cache_manager().pool();
  const std::int64_t bs = s.kv_cache_manager().block_size();
  std::vector<char> seen(static_cast<std::size_t>(pool.num_blocks()), 0);
  KVBreakdown b;
  for (const Request* r : s.running()) {
    const std::int64_t c = r->num_computed_tokens;
    const std::int64_t f = final_kv[static_cast<std::size_t>(r->index())];
    for (std::size_t j = 0; j < r->blocks.size(); ++j) {
      const auto id = static_cast<std::size_t>(to_int(r->blocks[j]));
      if (seen[id]) continue;
      seen[id] = 1;
      for (std::int64_t p = static_cast<std::int64_t>(j) * bs;
           p < static_cast<std::int64_t>(j + 1) * bs; ++p) {
        if (p < c)
          ++b.token_states;
        else if (p < f)
          ++b.reservation;
        else
          ++b.internal_fragmentation;
      }
    }
  }
  for (const KVCacheBlock& blk : pool.free_queue()) {
    if (blk.block_hash != kNoHash)
      b.cached_free += bs;
    else
      b.free += bs;
  }
  return b;
}

struct BreakdownChecker : StepObserver {
  const Simulator* sim = nullptr;
  std::int64_t steps = 0, shared_steps = 0;
  void on_step(const StepView& v) override {
    const auto& sched = dynamic_cast<const Scheduler&>(*v.engine);
    const KVBreakdown fast = sched.kv_breakdown(sim->final_kv_tokens());
    const KVBreakdown slow = walk_breakdown(sched, sim->final_kv_tokens());
    const BlockPool& pool = sched.kv_cache_manager().pool();
    REQUIRE(fast.total() ==
            std::int64_t{pool.num_blocks()} * sched.kv_cache_manager().block_size());
    REQUIRE(fast.token_states == slow.token_states);
    REQUIRE(fast.reservation == slow.reservation);
    REQUIRE(fast.internal_fragmentation == slow.internal_fragmentation);
    REQUIRE(fast.cached_free == slow.cached_free);
    REQUIRE(fast.free == slow.free);
    ++steps;
    for (const Request* r : sched.running())
      if (!r->blocks.empty() && pool.block(r->blocks[0]).ref_cnt > 1) {
        ++shared_steps;
        break;
      }
  }
};

}  // namespace

TEST_CASE("adding n equal samples at once equals n single adds, across the exact limit", "[sim]") {
  kvsim::QuantileSketch one, bulk;
  kvsim::PromHistogram h_one, h_bulk;
  h_one.init({0.5, 1, 2});
  h_bulk.init({0.5, 1, 2});
  // Runs of equal values whose total passes the exact-sample limit (the switch to buckets).
  const std::int64_t limit = static_cast<std::int64_t>(kvsim::QuantileSketch::kExactLimit);
  const std::pair<std::int64_t, std::int64_t> runs[] = {
      {1'000'000, 3}, {7, limit - 10}, {123'456'789, 50}, {2'000'000'000, 1}, {7, 4}};
  for (const auto& [value, n] : runs) {
    bulk.add(value, n);
    h_bulk.observe(static_cast<double>(value) / 1e9, n);
    for (std::int64_t k = 0; k < n; ++k) {
      one.add(value);
      h_one.observe(static_cast<double>(value) / 1e9);
    }
  }
  CHECK(bulk.count() == one.count());
  CHECK(bulk.mean() == one.mean());
  CHECK(bulk.stddev() == one.stddev());
  for (double p : {0.0, 1.0, 50.0, 99.0, 99.99, 100.0})
    CHECK(bulk.percentile(p) == one.percentile(p));
  CHECK(one.percentile(100) > 1e9);  // the largest run is seen
  CHECK(h_bulk.counts == h_one.counts);
  CHECK(h_bulk.sum == h_one.sum);  // bit for bit: the same additions in the same order
  CHECK(h_bulk.count == h_one.count);
}

TEST_CASE("metrics of a tiny run with a constant step time are exact", "[sim]") {
  TempDir tmp("tiny");
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 2048}",
      "{arrival: {process: timestamps, times_s: [0, 1.0]}, prompt_tokens: 32, output_tokens: 4}"));
  RunOptions opt;
  opt.step_time = constant_ms(10);
  const RunResult r = run_scenario(s, tmp.path, opt);
  const nlohmann::json j = read_json(r.folder / "summary.json");
  // Each request: prefill step (first token at +10 ms), then 3 decode steps: done at +40 ms.
  CHECK(j["completed"] == 2);
  CHECK(j["rejected"] == 0);
  CHECK(j["num_steps"] == 8);
  CHECK(j["mean_ttft_ms"].get<double>() == Approx(10.0).margin(1e-9));
  CHECK(j["p99_ttft_ms"].get<double>() == Approx(10.0).margin(1e-9));
  CHECK(j["mean_e2el_ms"].get<double>() == Approx(40.0).margin(1e-9));
  CHECK(j["mean_tpot_ms"].get<double>() == Approx(10.0).margin(1e-9));
  CHECK(j["mean_itl_ms"].get<double>() == Approx(10.0).margin(1e-9));
  CHECK(j["mean_queue_ms"].get<double>() == Approx(0.0).margin(1e-9));
  CHECK(j["duration"].get<double>() == Approx(1.04).margin(1e-9));
  CHECK(j["total_input_tokens"] == 64);
  CHECK(j["total_output_tokens"] == 8);
  CHECK(j["request_throughput"].get<double>() == Approx(2 / 1.04).epsilon(1e-6));
  CHECK(j["prefix_cache_queries"] == 64);
  const auto rows = read_csv(r.folder / "requests.csv");
  REQUIRE(rows.size() == 3);
  CHECK(rows[1][0] == "0");
  CHECK(rows[1][7] == "10.000000");    // ttft_ms
  CHECK(rows[1][9] == "40.000000");    // e2el_ms
  CHECK(rows[2][1] == "1.000000000");  // arrival_s
  CHECK(rows[2][6] == "1.040000000");  // finish_s
  CHECK(rows[2][13] == "length");
  CHECK(read_csv(r.folder / "steps.csv").size() == 9);
}

TEST_CASE("a workload that stops at EOS finishes with reason stop at its sampled length", "[sim]") {
  TempDir tmp("eos");
  const std::string workload =
      "{arrival: {process: all_at_once}, num_requests: 6, prompt_tokens: 32, output_tokens: "
      "{uniform: {min: 3, max: 9}}, ";
  RunOptions opt;
  opt.step_time = constant_ms(10);
  const Scenario eos = scenario_from(timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}",
                                                "{max_model_len: 2048}",
                                                workload + "ignore_eos: false, eos_token_id: 2}"));
  const auto eos_rows = read_csv(run_scenario(eos, tmp.path / "eos", opt).folder / "requests.csv");
  const Scenario len = scenario_from(timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}",
                                                "{max_model_len: 2048}",
                                                workload + "ignore_eos: true, eos_token_id: 2}"));
  const auto len_rows = read_csv(run_scenario(len, tmp.path / "len", opt).folder / "requests.csv");
  REQUIRE(eos_rows.size() == 7);
  REQUIRE(len_rows.size() == 7);
  std::set<std::string> lengths;
  for (std::size_t i = 1; i < eos_rows.size(); ++i) {
    CHECK(eos_rows[i][13] == "stop");
    CHECK(len_rows[i][13] == "length");
    CHECK(eos_rows[i][3] == len_rows[i][3]);  // the same output lengths either way
    lengths.insert(eos_rows[i][3]);
  }
  CHECK(lengths.size() > 1);

  // An EOS that lands exactly on max_model_len is a length stop, as in vLLM's check_stop.
  const Scenario capped = scenario_from(
      timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 40}",
                 "{arrival: {process: all_at_once}, num_requests: 1, prompt_tokens: 32, "
                 "output_tokens: 8, ignore_eos: false, eos_token_id: 2}"));
  const auto capped_rows =
      read_csv(run_scenario(capped, tmp.path / "capped", opt).folder / "requests.csv");
  REQUIRE(capped_rows.size() == 2);
  CHECK(capped_rows[1][3] == "8");
  CHECK(capped_rows[1][13] == "length");
}

TEST_CASE("every engine family appends the simulator's planned outputs: EOS stops them all",
          "[sim]") {
  // The simulator plans every output up front (Request::planned_outputs); an engine that appended
  // anything else would miss the planned EOS and finish on length instead.
  TempDir tmp("eos-families");
  RunOptions opt;
  opt.step_time = constant_ms(10);
  for (const char* profile : {"vllm-0.7.2", "vllm-0.8.5", "vllm-0.20", "vllm-0.7.2-v0", "orca-max",
                              "orca-pow2", "orca-oracle"}) {
    INFO(profile);
    const Scenario s = scenario_from(
        timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 512}",
                   "{arrival: {process: all_at_once}, num_requests: 4, prompt_tokens: 32, "
                   "output_tokens: {uniform: {min: 3, max: 9}}, ignore_eos: false, "
                   "eos_token_id: 2}",
                   profile));
    const auto rows = read_csv(run_scenario(s, tmp.path / profile, opt).folder / "requests.csv");
    REQUIRE(rows.size() == 5);
    for (std::size_t i = 1; i < rows.size(); ++i) CHECK(rows[i][13] == "stop");
  }
}

TEST_CASE("queueing delay is counted when the batch is full", "[sim]") {
  TempDir tmp("queue");
  // max_num_seqs 1: the second request waits for the first to finish (4 steps of 10 ms).
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 2048, max_num_seqs: 1}",
      "{arrival: {process: all_at_once}, num_requests: 2, prompt_tokens: 32, output_tokens: 4}"));
  RunOptions opt;
  opt.step_time = constant_ms(10);
  const nlohmann::json j = read_json(run_scenario(s, tmp.path, opt).folder / "summary.json");
  CHECK(j["mean_queue_ms"].get<double>() == Approx(20.0).margin(1e-9));  // (0 + 40) / 2
  CHECK(j["mean_ttft_ms"].get<double>() == Approx(30.0).margin(1e-9));   // (10 + 50) / 2
  CHECK(j["mean_e2el_ms"].get<double>() == Approx(60.0).margin(1e-9));   // (40 + 80) / 2
}

TEST_CASE("the fast KV breakdown equals a block walk and sums to the pool under preemption",
          "[sim]") {
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 16, num_gpu_blocks_override: 96}", "{max_model_len: 2048, max_num_seqs: 16}",
      "{num_requests: 60, arrival: {process: poisson, rate_per_s: 200}, "
      "system_prompts: {count: 2, tokens: 100}, prompt_tokens: {uniform: {min: 10, max: 120}}, "
      "output_tokens: {uniform: {min: 5, max: 150}}}"));
  auto src = make_request_source(s.workload, s.seed, 50272);
  Simulator sim(s, *src, constant_ms(5));
  sim.set_check_invariants(true);
  BreakdownChecker check;
  check.sim = &sim;
  sim.attach(&check);
  sim.run();
  CHECK(check.steps > 50);
  CHECK(check.shared_steps > 0);
  CHECK(dynamic_cast<const Scheduler&>(sim.engine()).stats().num_preemptions > 0);
}

TEST_CASE("a burst of trace arrivals: the scheduler sees the queue's head, steps.csv all of it",
          "[sim]") {
  // 30 requests at t = 0; the simulator hands the scheduler only the waiting requests one
  // schedule() can look at (max_num_seqs - running), making their prompts then.
  TempDir tmp("burst");
  const fs::path trace = tmp.path / "burst.csv";
  {
    std::ofstream f(trace);
    f << "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens\n";
    for (int i = 0; i < 30; ++i) f << "0,40,3,0,32\n";
  }
  for (const int blocks : {64, 12}) {
    const Scenario s = scenario_from(
        timed_yaml("{block_size: 16, num_gpu_blocks_override: " + std::to_string(blocks) + "}",
                   "{max_model_len: 2048, max_num_seqs: 4}",
                   "{trace: {format: csv, path: " + trace.string() + "}}"));
    RunOptions opt;
    opt.step_time = constant_ms(1);
    const RunResult r = run_scenario(s, tmp.path / std::to_string(blocks), opt);
    const auto rows = read_csv(r.folder / "steps.csv");
    REQUIRE(rows.size() > 2);
    const auto col = [&](const std::string& name) {
      const auto it = std::find(rows[0].begin(), rows[0].end(), name);
      REQUIRE(it != rows[0].end());
      return std::stoll(rows[1][static_cast<std::size_t>(it - rows[0].begin())]);
    };
    const std::int64_t scheduled = col("num_scheduled");
    CHECK(col("num_running") == scheduled);
    CHECK(col("num_waiting") == 30 - scheduled);  // the whole queue, unadmitted arrivals included
    // vLLM looks up every request it schedules, plus the one that did not fit while running had
    // room: each lookup queries the whole 40-token prompt.
    const bool one_did_not_fit = scheduled < 4;
    CHECK(col("prefix_queries") == 40 * (scheduled + (one_did_not_fit ? 1 : 0)));
    if (blocks == 64) CHECK(scheduled == 4);
    if (blocks == 12) CHECK(one_did_not_fit);
    CHECK(read_json(r.folder / "summary.json")["completed"].get<std::int64_t>() == 30);
  }
}

TEST_CASE("steps.csv slot columns add up to the pool on every row", "[sim]") {
  TempDir tmp("slots");
  const Scenario s = scenario_from(
      timed_yaml("{block_size: 16, num_gpu_blocks_override: 80}", "{max_model_len: 2048}",
                 "{num_requests: 40, arrival: {process: poisson, rate_per_s: 100}, "
                 "system_prompts: {count: 1, tokens: 64}, prompt_tokens: 50, output_tokens: 60}"));
  RunOptions opt;
  opt.step_time = constant_ms(4);
  const RunResult r = run_scenario(s, tmp.path, opt);
  const auto rows = read_csv(r.folder / "steps.csv");
  REQUIRE(rows.size() > 10);
  for (std::size_t i = 1; i < rows.size(); ++i) {
    std::int64_t sum = 0;
    for (int c = 11; c <= 16; ++c) sum += std::stoll(rows[i][static_cast<std::size_t>(c)]);
    REQUIRE(sum == 80 * 16);
  }
  const nlohmann::json j = read_json(r.folder / "summary.json");
  double total = 0;
  for (auto& [k, v] : j["kv_breakdown"].items()) total += v.get<double>();
  CHECK(total == Approx(1.0).margin(1e-6));
  CHECK(j["kv_breakdown"]["token_states"].get<double>() > 0);
}

TEST_CASE("requests longer than max_model_len are rejected and counted", "[sim]") {
  TempDir tmp("reject");
  const Scenario s = scenario_from(
      timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 100}",
                 "{num_requests: 20, arrival: {process: constant, rate_per_s: 10}, "
                 "prompt_tokens: {uniform: {min: 40, max: 70}}, output_tokens: 40}"));
  RunOptions opt;
  opt.step_time = constant_ms(1);
  const RunResult r = run_scenario(s, tmp.path, opt);
  const nlohmann::json j = read_json(r.folder / "summary.json");
  const auto rows = read_csv(r.folder / "requests.csv");
  std::int64_t rejected = 0, ok = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    const std::int64_t prompt = std::stoll(rows[i][2]);
    if (rows[i][13] == "rejected") {
      ++rejected;
      CHECK(prompt + 40 > 100);
      CHECK(rows[i][7].empty());
    } else {
      ++ok;
      CHECK(prompt + 40 <= 100);
    }
  }
  CHECK(rejected > 0);
  CHECK(ok > 0);
  CHECK(j["rejected"] == rejected);
  CHECK(j["completed"] == ok);
}

TEST_CASE("a request that can never fit fails the run naming it and leaves nothing", "[sim]") {
  TempDir tmp("drain");
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 16, num_gpu_blocks_override: 4}", "{max_model_len: 2048}",
      "{arrival: {process: timestamps, times_s: [0, 0.5]}, prompt_tokens: 100, output_tokens: 4}"));
  RunOptions opt;
  opt.step_time = constant_ms(1);
  try {
    (void)run_scenario(s, tmp.path, opt);
    FAIL("the run should fail");
  } catch (const RunError& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains("request 0 can never be scheduled"));
    CHECK_THAT(msg, Catch::Contains("needs 7 blocks"));
    CHECK_THAT(msg, Catch::Contains("pool has 4 blocks"));
  }
  CHECK(fs::is_empty(tmp.path));
}

TEST_CASE("a request that outgrows the whole pool while decoding fails the run", "[sim]") {
  // The prompt fits (3 blocks of 4) but 40 + 40 tokens need 5: it preempts itself until the
  // scheduler can no longer admit it, and the run fails instead of spinning.
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 16, num_gpu_blocks_override: 4}", "{max_model_len: 2048}",
      "{arrival: {process: timestamps, times_s: [0]}, prompt_tokens: 40, output_tokens: 40}"));
  auto src = make_request_source(s.workload, s.seed, 50272);
  Simulator sim(s, *src, constant_ms(1));
  CHECK_THROWS_WITH(sim.run(), Catch::Contains("request 0 can never be scheduled") &&
                                   Catch::Contains("needs 5 blocks"));
}

TEST_CASE("a trace row that does not parse mid-run leaves no run folder behind", "[sim]") {
  TempDir tmp("badrow");
  const fs::path trace = tmp.path / "bad.csv";
  {
    std::ofstream f(trace);
    f << "arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.1,12,5\n0.2,abc,5\n";
  }
  const fs::path out = tmp.path / "out";
  const Scenario s = scenario_from(
      timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 2048}",
                 "{trace: {format: csv, path: " + trace.string() + "}}"));
  RunOptions opt;
  opt.step_time = constant_ms(1);
  try {
    (void)run_scenario(s, out, opt);
    FAIL("the run should fail");
  } catch (const ConfigError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("bad.csv:4"));
  }
  CHECK((!fs::exists(out) || fs::is_empty(out)));
}

TEST_CASE("follow-up turns of a multi-turn session hit the prefix cache", "[sim]") {
  TempDir tmp("multiturn");
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 16, num_gpu_blocks_override: 2000}", "{max_model_len: 2048}",
      "{num_requests: 10, arrival: {process: poisson, rate_per_s: 5}, prompt_tokens: 200, "
      "output_tokens: 50, sessions: {turns: 3, think_time_s: 1.0, user_tokens: 40}}"));
  RunOptions opt;
  opt.step_time = constant_ms(5);
  const RunResult r = run_scenario(s, tmp.path, opt);
  const nlohmann::json j = read_json(r.folder / "summary.json");
  CHECK(j["completed"] == 30);
  const auto rows = read_csv(r.folder / "requests.csv");
  std::int64_t hit_rows = 0, big_prompts = 0;
  for (std::size_t i = 1; i < rows.size(); ++i) {
    if (std::stoll(rows[i][2]) > 200) {
      ++big_prompts;
      // A later turn re-sends the whole conversation: all of it but the tail is cached.
      if (std::stoll(rows[i][11]) >= 200) ++hit_rows;
    }
  }
  CHECK(big_prompts == 20);
  CHECK(hit_rows == 20);
  CHECK(j["first_lookup_hit_rate"].get<double>() > 0.4);
}

TEST_CASE("invariants hold after every step of a shared-prefix run", "[sim]") {
  const Scenario s = scenario_from(timed_yaml(
      "{block_size: 8, num_gpu_blocks_override: 120, enable_prefix_caching: true}",
      "{max_model_len: 1024, max_num_seqs: 8, max_num_batched_tokens: 64}",
      "{num_requests: 50, arrival: {process: all_at_once}, system_prompts: {count: 3, tokens: 40},"
      " prompt_tokens: {uniform: {min: 1, max: 60}}, output_tokens: {uniform: {min: 1, max: "
      "80}}}"));
  auto src = make_request_source(s.workload, s.seed, 50272);
  Simulator sim(s, *src, constant_ms(1));
  sim.set_check_invariants(true);
  sim.run();
  CHECK(sim.requests_done() == 50);
  CHECK(sim.engine().num_unfinished_requests() == 0);
}

TEST_CASE("cache_only replay of the Mooncake trace reproduces the hit-rate table", "[sim]") {
  const double capacity[] = {1e4, 1e5, 1e6, 2e6, 3e6, 5e6, 1e7, 5e7};
  const double expected[] = {0.002, 0.017, 0.145, 0.233, 0.315, 0.428, 0.577, 0.651};
  for (int i = 0; i < 8; ++i) {
    const double got = cache_only_hit_rate(capacity[i]);
    INFO("capacity " << capacity[i] << " tokens: hit rate " << got << ", table " << expected[i]);
    CHECK(std::abs(got - expected[i]) <= 0.02);
  }
}

TEST_CASE("a planted wrong configuration misses the Mooncake table", "[sim]") {
  // 2048-token blocks share only whole groups of four hash ids: the table check must catch it.
  const double got = cache_only_hit_rate(1e7, 2048);
  INFO("block_size 2048 at 1e7 tokens: " << got);
  CHECK(std::abs(got - 0.577) > 0.02);
}

namespace {

/// Runs the kvsim binary with `args` (its output into `log`) and returns its exit status.
int kvsim_cli(const std::string& args, const fs::path& log) {
  const std::string cmd = kvsim::test::kvsim_exe() + " " + args + " > " + log.string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_CASE("kvsim run and sweep exit 0 on success, 1 on a run failure, 2 on bad input", "[sim]") {
  TempDir tmp("cli");
  const fs::path log = tmp.path / "log.txt";
  const fs::path yaml = tmp.path / "s.yaml";
  {
    std::ofstream f(yaml);
    f << timed_yaml("{block_size: 16, num_gpu_blocks_override: 64}", "{max_model_len: 2048}",
                    "{num_requests: 5, arrival: {process: all_at_once}, prompt_tokens: 40, "
                    "output_tokens: 5}")
      << "latency: {model: constant, step_time_us: 1000}\n"
         "sweep: {cache.block_size: [8, 16], cache.enable_prefix_caching: [true]}\n";
  }
  const fs::path out = tmp.path / "out";
  const std::string base = yaml.string() + " -o " + out.string() + " --quiet";

  CHECK(kvsim_cli("run " + base, log) == 0);
  CHECK(fs::exists(out / "t" / "summary.json"));
  CHECK(kvsim_cli("run " + base + " --set cache.blok_size=8", log) == 2);
  CHECK_THAT(kvsim::test::slurp(log), Catch::Contains("did you mean 'block_size'"));
  CHECK(kvsim_cli("run " + base + " --set name=bad --set cache.num_gpu_blocks_override=2", log) ==
        1);
  CHECK_THAT(kvsim::test::slurp(log), Catch::Contains("can never be scheduled"));
  CHECK_FALSE(fs::exists(out / "bad"));
  CHECK(kvsim_cli("run " + base + " --seed abc", log) == 2);
  CHECK(kvsim_cli("run " + base + " --set name=ti --check-invariants", log) == 0);

  CHECK(kvsim_cli("sweep " + base + " --jobs 2", log) == 0);
  const std::string csv = kvsim::test::slurp(out / "t" / "sweep.csv");
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 3);
  CHECK(csv.rfind("cache.block_size,cache.enable_prefix_caching,name,", 0) == 0);
  CHECK(
      fs::exists(out / "t" / "cache.block_size=8,cache.enable_prefix_caching=true" / "steps.csv"));
  const fs::path jobs = tmp.path / "jobs.txt";
  CHECK(kvsim_cli("sweep " + base + " --emit-jobs " + jobs.string(), log) == 0);
  const std::string lines = kvsim::test::slurp(jobs);
  CHECK(std::count(lines.begin(), lines.end(), '\n') == 2);
  CHECK(kvsim_cli("merge " + (out / "t").string(), log) == 0);
  CHECK(kvsim_cli("merge " + tmp.path.string() + "/nope", log) == 2);

  // check and replay: a misspelt flag gets a suggestion, a second positional is refused.
  const std::string run_dir = (out / "t").string();
  CHECK(kvsim_cli("check " + run_dir + " --baseline " + run_dir, log) == 0);
  CHECK(kvsim_cli("check " + run_dir + " --basline " + run_dir, log) == 2);
  CHECK_THAT(kvsim::test::slurp(log), Catch::Contains("did you mean '--baseline'"));
  CHECK(kvsim_cli("check " + run_dir + " " + run_dir + " --baseline=" + run_dir, log) == 2);
  CHECK_THAT(kvsim::test::slurp(log), Catch::Contains("unexpected argument"));
  CHECK(kvsim_cli("replay --check-invariant x", log) == 2);
  CHECK_THAT(kvsim::test::slurp(log), Catch::Contains("did you mean '--check-invariants'"));
  CHECK(kvsim_cli("replay a b", log) == 2);
}

TEST_CASE("steps.csv per-row counters add up to the summary totals", "[sim]") {
  TempDir tmp("counters");
  YAML::Node root = load_yaml_string(
      timed_yaml(
          "{block_size: 16, num_gpu_blocks_override: 150}",
          "{max_model_len: 2048, max_num_seqs: 24}",
          "{num_requests: 80, arrival: {process: poisson, rate_per_s: 60}, "
          "system_prompts: {count: 2, tokens: 96}, prompt_tokens: {uniform: {min: 20, max: 300}}, "
          "output_tokens: {uniform: {min: 10, max: 200}}}"),
      "test.yaml");
  root["outputs"]["steps_every"] = 7;
  root["outputs"]["metrics_prom"] = true;
  const Scenario s = parse_scenario(root, "test.yaml");
  RunOptions opt;
  opt.step_time = constant_ms(3);
  const RunResult r = run_scenario(s, tmp.path, opt);
  const nlohmann::json j = read_json(r.folder / "summary.json");
  const auto rows = read_csv(r.folder / "steps.csv");
  std::int64_t sums[5] = {0, 0, 0, 0, 0};
  for (std::size_t i = 1; i < rows.size(); ++i)
    for (int c = 0; c < 5; ++c) sums[c] += std::stoll(rows[i][static_cast<std::size_t>(17 + c)]);
  const std::int64_t steps = j["num_steps"].get<std::int64_t>();
  // Every 7th step plus the last one.
  CHECK(static_cast<std::int64_t>(rows.size()) - 1 == (steps + 6) / 7 + ((steps - 1) % 7 != 0));
  CHECK(rows.back()[0] == std::to_string(steps - 1));
  CHECK(sums[0] == j["prefix_cache_queries"].get<std::int64_t>());
  CHECK(sums[1] == j["prefix_cache_hits"].get<std::int64_t>());
  CHECK(sums[2] == j["num_preemptions"].get<std::int64_t>());
  CHECK(sums[3] == j["num_evictions"].get<std::int64_t>());
  CHECK(sums[4] == j["num_blocks_allocated"].get<std::int64_t>());
  CHECK(sums[0] > 0);
  CHECK(sums[4] > 0);
  const std::string prom = [&] {
    std::ifstream f(r.folder / "metrics.prom");
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }();
  CHECK_THAT(prom, Catch::Contains("vllm:prefix_cache_queries_total{model_name=\"opt-125m\"} " +
                                   std::to_string(j["prefix_cache_queries"].get<std::int64_t>())));
  CHECK_THAT(
      prom, Catch::Contains(
                "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"opt-125m\"} 80"));
  CHECK_THAT(prom,
             Catch::Contains("vllm:e2e_request_latency_seconds_count{model_name=\"opt-125m\"} 80"));
}
