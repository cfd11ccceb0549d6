// The vllm-0.7.2-v0 profile in the simulator: parallel sampling by fork shares the prompt's
// blocks (the saved share of a tiny case, computed by hand) with copy-on-write exactly where the
// shared partial block is first appended to; fanout gives each sample a row; a swap adds exactly
// blocks x page bytes / host link bandwidth to its step; a swap the CPU pool cannot hold ends the
// run with one line and no run folder (exit 1 from the command line), unless the recompute policy
// is set; a prompt that can never fit is reported as ignored; the V0-only keys are refused under
// the other profiles at their line and column.

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/engine/block_moves.h"
#include "sim/engine/simulator.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::slurp;
using kvsim::test::TempDir;
using kvsim::test::write_file;
namespace fs = std::filesystem;

namespace {

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";

struct Csv {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::size_t col(const std::string& name) const {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    FAIL("no column " << name);
    return 0;
  }
  std::int64_t i64(std::size_t row, const std::string& name) const {
    return std::stoll(rows.at(row).at(col(name)));
  }
  const std::string& str(std::size_t row, const std::string& name) const {
    return rows.at(row).at(col(name));
  }
};

Csv read_csv(const fs::path& p) {
  std::ifstream f(p);
  Csv t;
  std::string line;
  bool first = true;
  while (std::getline(f, line)) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) row.push_back(cell);
    if (!line.empty() && line.back() == ',') row.push_back("");
    (first ? t.header : t.rows.emplace_back()) = row;
    first = false;
  }
  return t;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

/// A V0 scenario on Qwen2-1.5B (28,672 bytes of KV per token) with a constant 1 ms step.
std::string scenario(const std::string& cache, const std::string& scheduler,
                     const std::string& workload) {
  return "name: v0\nseed: 3\nengine: {profile: vllm-0.7.2-v0}\nmodel: {config: " + kModel +
         "}\nhardware: {gpu: H100-80GB}\ncache: " + cache + "\nscheduler: " + scheduler +
         "\nworkload: " + workload +
         "\nlatency: {model: constant, step_time_us: 1000}\noutputs: {steps_every: 1}\n";
}

fs::path run(const TempDir& tmp, const std::string& text,
             const std::vector<std::string>& sets = {}) {
  write_file(tmp.path / "s.yaml", text);
  return run_scenario(load_scenario((tmp.path / "s.yaml").string(), sets), tmp.path / "out").folder;
}

}  // namespace

TEST_CASE("fork mode shares the prompt's blocks: the saved share of a tiny case by hand", "[sim]") {
  // One request, 3 samples, a 6-token prompt in blocks of 4 (one full block, one partial of 2),
  // 3 tokens each.
  //   step 0: the prompt; the two children fork from it: 3 tables of the same 2 blocks.
  //   step 1: each appends its 7th token into the shared partial block: the parent and the first
  //           child get copies (2 copy-on-write copies), the last child keeps it: 6 table
  //           entries, 4 blocks (the full one still shared).
  //   step 2: the last tokens; everything finishes and is freed.
  // Saved share = (6 + 6 + 0 - (2 + 4 + 0)) / (6 + 6 + 0) = 0.5.
  const TempDir tmp("v0-fork-tiny");
  const fs::path dir = run(
      tmp, scenario("{block_size: 4, num_gpu_blocks_override: 64, enable_prefix_caching: false}",
                    "{max_num_seqs: 8, max_num_batched_tokens: 256, max_model_len: 256}",
                    "{arrival: {process: timestamps, times_s: [0]}, prompt_tokens: 6, "
                    "output_tokens: 3, n: 3, parallel_sampling: fork}"));
  const Csv steps = read_csv(dir / "steps.csv");
  REQUIRE(steps.rows.size() == 3);
  const std::vector<std::int64_t> table = {6, 6, 0}, used = {2, 4, 0}, cow = {0, 2, 0},
                                  running = {3, 3, 0};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("step " << i);
    CHECK(steps.i64(i, "blocks_without_sharing") == table[i]);
    CHECK(steps.i64(i, "blocks_used") == used[i]);
    CHECK(steps.i64(i, "cow_copies") == cow[i]);
    CHECK(steps.i64(i, "num_running") == running[i]);
  }
  CHECK(steps.i64(0, "num_scheduled") == 1);  // the prompt, once for all three
  CHECK(steps.i64(1, "decode_tokens") == 3);
  // The copies lengthen their step: each reads and writes one block of 4 tokens x 28,672 bytes
  // at the H100's 3.35 TB/s, 2 x 2 x 114,688 B / 3.35e12 B/s = 136.9 ns on the 1 ms step.
  CHECK(steps.str(0, "duration_ms") == "1.000000");
  CHECK(steps.str(1, "duration_ms") == "1.000137");  // 1,000,137 ns
  CHECK(steps.str(2, "duration_ms") == "1.000000");
  const nlohmann::json s = read_json(dir / "summary.json");
  CHECK(s["kv_sharing_saved_share"].get<double>() == 0.5);
  CHECK(s["num_cow_copies"] == 2);
  CHECK(s["completed"] == 3);
  CHECK(s["total_output_tokens"] == 9);
  CHECK(s["num_preemptions"] == 0);
  // One row per sample: request_id = id * n + sample, all timed from the one prompt pass.
  const Csv req = read_csv(dir / "requests.csv");
  REQUIRE(req.rows.size() == 3);
  std::vector<std::string> ids;
  for (std::size_t i = 0; i < 3; ++i) {
    ids.push_back(req.str(i, "request_id"));
    CHECK(req.i64(i, "output_tokens") == 3);
    CHECK(req.str(i, "first_scheduled_s") == req.str(0, "first_scheduled_s"));
    CHECK(req.str(i, "first_token_s") == req.str(0, "first_token_s"));
    CHECK(req.str(i, "finish_reason") == "length");
  }
  std::sort(ids.begin(), ids.end());
  CHECK(ids == std::vector<std::string>{"0", "1", "2"});

  // Fanout: three independent requests of the same prompt; nothing shared, nothing copied.
  const TempDir tmp2("v0-fanout-tiny");
  const fs::path fan = run(
      tmp2, scenario("{block_size: 4, num_gpu_blocks_override: 64, enable_prefix_caching: false}",
                     "{max_num_seqs: 8, max_num_batched_tokens: 256, max_model_len: 256}",
                     "{arrival: {process: timestamps, times_s: [0]}, prompt_tokens: 6, "
                     "output_tokens: 3, n: 3}"));
  const nlohmann::json f = read_json(fan / "summary.json");
  CHECK(f["kv_sharing_saved_share"].get<double>() == 0.0);
  CHECK(f["num_cow_copies"] == 0);
  CHECK(f["completed"] == 3);
  CHECK(read_csv(fan / "steps.csv").i64(0, "num_scheduled") == 3);  // three prompts
}

TEST_CASE("fanout gives every sample its own row and tokens, under V0 and V1", "[sim]") {
  for (const char* profile : {"vllm-0.7.2", "vllm-0.7.2-v0"}) {
    INFO(profile);
    const TempDir tmp("v0-fanout");
    const fs::path dir = run(
        tmp,
        scenario("{block_size: 16, num_gpu_blocks_override: 400}",
                 "{max_num_seqs: 32, max_num_batched_tokens: 2048, max_model_len: 2048}",
                 "{num_requests: 5, arrival: {process: poisson, rate_per_s: 50}, "
                 "prompt_tokens: {uniform: {min: 20, max: 200}}, output_tokens: {uniform: {min: 2, "
                 "max: 40}}, n: 4}"),
        {std::string("engine.profile=") + profile});
    const Csv req = read_csv(dir / "requests.csv");
    REQUIRE(req.rows.size() == 20);
    std::map<std::int64_t, std::vector<std::size_t>> by_request;
    for (std::size_t i = 0; i < req.rows.size(); ++i)
      by_request[req.i64(i, "request_id") / 4].push_back(i);
    REQUIRE(by_request.size() == 5);
    for (const auto& [id, rows] : by_request) {
      REQUIRE(rows.size() == 4);
      for (std::size_t r : rows) {
        CHECK(req.str(r, "arrival_s") == req.str(rows[0], "arrival_s"));
        CHECK(req.i64(r, "prompt_tokens") == req.i64(rows[0], "prompt_tokens"));
        CHECK(req.i64(r, "output_tokens") == req.i64(rows[0], "output_tokens"));
      }
    }
    // With prefix caching on, samples 1..3 share sample 0's full prompt blocks. V1 counts them
    // as hits; V0 admits the four in one schedule() and marks blocks computed only at its end
    // (spec §0.4), so it counts no hit, yet its allocator hands them the same blocks by content
    // hash: the memory is shared all the same.
    const nlohmann::json s = read_json(dir / "summary.json");
    if (std::string(profile) == "vllm-0.7.2") {
      CHECK(s["prefix_cache_hits"].get<std::int64_t>() > 0);
    } else {
      CHECK(s["prefix_cache_hits"] == 0);
      CHECK(s["kv_sharing_saved_share"].get<double>() > 0.3);
    }
  }
}

TEST_CASE("a swap adds exactly blocks x page bytes / host link bandwidth to its step", "[sim]") {
  const TempDir tmp("v0-swap-latency");
  const fs::path dir =
      run(tmp,
          scenario("{block_size: 16, num_gpu_blocks_override: 40, enable_prefix_caching: false}",
                   "{max_num_seqs: 16, max_num_batched_tokens: 2048, max_model_len: 2048, "
                   "preemption_mode: swap}",
                   "{arrival: {process: all_at_once}, num_requests: 8, prompt_tokens: 100, "
                   "output_tokens: 200}"),
          {"outputs.metrics_prom=true"});
  const double page = 28672.0 * 16;  // Qwen2-1.5B: 28 layers x 2 KV heads x 128 x 2 (K, V) x 2 B
  const BlockMoveCost cost{page, 64e9, 3.35e12};
  CHECK(cost.time_ns(1, 0) == 7168);  // 458,752 B over 64 GB/s
  CHECK(cost.time_ns(3, 0) == 21504);
  CHECK(cost.time_ns(0, 1) == 274);  // read and write 458,752 B at 3.35 TB/s: 273.9 ns
  const Csv steps = read_csv(dir / "steps.csv");
  std::int64_t swapped = 0, rows_with_swaps = 0;
  for (std::size_t i = 0; i < steps.rows.size(); ++i) {
    const std::int64_t blocks =
        steps.i64(i, "swapped_in_blocks") + steps.i64(i, "swapped_out_blocks");
    const std::int64_t copies = steps.i64(i, "cow_copies");
    const double duration_ms = std::stod(steps.str(i, "duration_ms"));
    const auto expected_ns =
        1'000'000 + std::llround(static_cast<double>(blocks) * page / 64e9 * 1e9);
    INFO("step " << steps.str(i, "step") << ": " << blocks << " blocks swapped");
    CHECK(copies == 0);
    CHECK(std::llround(duration_ms * 1e6) == expected_ns);
    swapped += blocks;
    rows_with_swaps += blocks > 0;
  }
  CHECK(rows_with_swaps >= 2);  // out, and back in
  const nlohmann::json s = read_json(dir / "summary.json");
  CHECK(s["num_swapped_in_blocks"].get<std::int64_t>() +
            s["num_swapped_out_blocks"].get<std::int64_t>() ==
        swapped);
  CHECK(s["num_swapped_in_blocks"] == s["num_swapped_out_blocks"]);
  CHECK(s["swapped_out_bytes"].get<std::int64_t>() ==
        s["num_swapped_out_blocks"].get<std::int64_t>() * 458752);
  CHECK(s["num_preemptions_swap"].get<std::int64_t>() > 0);
  CHECK(s["num_preemptions_recompute"] == 0);
  CHECK(s["num_preemptions"] == s["num_preemptions_swap"]);
  CHECK(s["max_num_swapped"].get<std::int64_t>() >= 1);
  CHECK(s["max_cpu_cache_usage_perc"].get<double>() > 0);
  // 4 GiB of swap space in blocks of 458,752 bytes.
  CHECK(s["num_cpu_blocks"] == (std::int64_t{4} << 30) / 458752);
  CHECK(s["completed"] == 8);
  // vLLM V0's Prometheus names, with the values at the end of the run (nothing swapped left).
  const std::string prom = slurp(dir / "metrics.prom");
  CHECK_THAT(prom, Catch::Contains("# TYPE vllm:num_requests_swapped gauge\n"
                                   "vllm:num_requests_swapped{model_name=\"qwen2-1.5b\"} 0\n"));
  CHECK_THAT(prom, Catch::Contains("vllm:cpu_cache_usage_perc{model_name=\"qwen2-1.5b\"} 0\n"));
  CHECK_THAT(prom,
             Catch::Contains("vllm:num_preemptions_total{model_name=\"qwen2-1.5b\"} " +
                             std::to_string(s["num_preemptions"].get<std::int64_t>()) + "\n"));
}

TEST_CASE("a swap the CPU pool cannot hold ends the run with one line and no run folder", "[sim]") {
  const std::string text = scenario(
      "{block_size: 16, num_gpu_blocks_override: 40, enable_prefix_caching: false, "
      "swap_space: 0.001}",  // 1,073,741 bytes: 2 blocks of 458,752
      "{max_num_seqs: 16, max_num_batched_tokens: 2048, max_model_len: 2048, "
      "preemption_mode: swap}",
      "{arrival: {process: all_at_once}, num_requests: 8, prompt_tokens: 100, "
      "output_tokens: 200}");
  const TempDir tmp("v0-swap-exhausted");
  write_file(tmp.path / "s.yaml", text);
  const Scenario s = load_scenario((tmp.path / "s.yaml").string(), {});
  CHECK(s.num_cpu_blocks == 2);
  std::string message;
  try {
    (void)run_scenario(s, tmp.path / "out");
  } catch (const RunError& e) {
    message = e.what();
  }
  CHECK_THAT(message, Catch::Matches("step [0-9]+: request [0-9]+: the engine aborted as vLLM's "
                                     "does: RuntimeError: Aborted due to the lack of CPU swap "
                                     "space.*"));
  CHECK_THAT(message, Catch::Contains("(the CPU swap space has 2 blocks, 2 free)"));
  CHECK_THAT(message, Catch::Contains("cache.swap_space 0.001 GiB = 2 CPU blocks of 16 tokens"));
  CHECK(message.find('\n') == std::string::npos);
  CHECK(!fs::exists(tmp.path / "out" / "v0"));
  CHECK((!fs::exists(tmp.path / "out") || fs::is_empty(tmp.path / "out")));

  // The command line: exit status 1, the same one line, nothing written.
  const std::string cmd = kvsim::test::kvsim_exe() + " run " + (tmp.path / "s.yaml").string() +
                          " -o " + (tmp.path / "cli").string() + " --quiet 2> " +
                          (tmp.path / "err.txt").string();
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  CHECK(WEXITSTATUS(rc) == 1);
  const std::string err = slurp(tmp.path / "err.txt");
  CHECK_THAT(err, Catch::Contains("Aborted due to the lack of CPU swap space"));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK((!fs::exists(tmp.path / "cli") || fs::is_empty(tmp.path / "cli")));

  // The named non-vLLM policy recomputes the victims instead, and the run completes.
  const fs::path dir = run(tmp, text, {"scheduler.on_swap_space_exhausted=recompute"});
  const nlohmann::json j = read_json(dir / "summary.json");
  CHECK(j["completed"] == 8);
  CHECK(j["num_preemptions_recompute"].get<std::int64_t>() > 0);
}

TEST_CASE("a prompt the V0 pool can never hold is ignored, as vLLM V0 does", "[sim]") {
  const TempDir tmp("v0-ignored");
  write_file(tmp.path / "t.csv", "arrival_s,prompt_tokens,output_tokens\n0,300,5\n0.001,50,5\n");
  const fs::path dir =
      run(tmp, scenario("{block_size: 16, num_gpu_blocks_override: 8}",
                        "{max_num_seqs: 8, max_num_batched_tokens: 1024, max_model_len: 1024}",
                        "{trace: {format: csv, path: t.csv}}"));
  const Csv req = read_csv(dir / "requests.csv");
  REQUIRE(req.rows.size() == 2);
  CHECK(req.str(0, "request_id") == "0");
  CHECK(req.str(0, "finish_reason") == "ignored");
  CHECK(req.i64(0, "output_tokens") == 0);
  CHECK(req.str(1, "finish_reason") == "length");
  const nlohmann::json s = read_json(dir / "summary.json");
  CHECK(s["ignored"] == 1);
  CHECK(s["completed"] == 1);
}

TEST_CASE("V0-only settings: refused elsewhere at their line and column, checked under V0",
          "[sim]") {
  const TempDir tmp("v0-config");
  const auto error_of = [&](const std::string& text, const std::vector<std::string>& sets = {}) {
    write_file(tmp.path / "c.yaml", text);
    return kvsim::test::error_of(
        [&] { (void)load_scenario((tmp.path / "c.yaml").string(), sets); });
  };
  const std::string v1 = "name: c\nengine: {profile: vllm-0.7.2}\nmodel: {config: " + kModel +
                         "}\ncache: {num_gpu_blocks_override: 100}\n"
                         "scheduler:\n  max_model_len: 2048\n  preemption_mode: swap\n"
                         "workload: {num_requests: 2, prompt_tokens: 10, output_tokens: 2}\n";
  CHECK_THAT(error_of(v1), Catch::StartsWith((tmp.path / "c.yaml").string() +
                                             ":7:20: "
                                             "scheduler.preemption_mode: vllm-0.7.2 (vLLM's V1 "
                                             "engine) has no such setting"));
  CHECK(error_of(v1, {"engine.profile=vllm-0.7.2-v0"}).empty());
  CHECK_THAT(error_of(v1, {"engine.profile=orca-max"}),
             Catch::Contains("scheduler.preemption_mode: orca-max (an Orca-style contiguous "
                             "engine)"));
  const std::string fork =
      "name: c\nengine: {profile: vllm-0.7.2}\nmodel: {config: " + kModel +
      "}\ncache: {num_gpu_blocks_override: 100}\nscheduler: {max_model_len: 2048}\n"
      "workload:\n  num_requests: 2\n  prompt_tokens: 10\n  output_tokens: 2\n  n: 2\n"
      "  parallel_sampling: fork\n";
  CHECK_THAT(error_of(fork), Catch::Contains(":11:22: workload.parallel_sampling: fork needs "
                                             "vllm-0.7.2-v0"));
  CHECK(error_of(fork, {"engine.profile=vllm-0.7.2-v0"}).empty());
  CHECK_THAT(
      error_of(fork, {"engine.profile=vllm-0.7.2-v0", "scheduler.preemption_mode=recompute"}),
      Catch::Contains("scheduler.preemption_mode: recompute cannot preempt a forked group"));
  CHECK_THAT(error_of(fork, {"engine.profile=vllm-0.7.2-v0",
                             "scheduler.on_swap_space_exhausted=recompute"}),
             Catch::Contains("scheduler.on_swap_space_exhausted: recompute cannot preempt"));
  CHECK_THAT(error_of(fork, {"engine.profile=vllm-0.7.2-v0", "workload.client_timeout_s=2"}),
             Catch::Contains("workload.client_timeout_s: client aborts of forked sequence groups "
                             "are not modelled"));
  CHECK(error_of(fork, {"engine.profile=vllm-0.7.2-v0", "workload.client_timeout_s=2",
                        "workload.parallel_sampling=fanout"})
            .empty());
  CHECK_THAT(error_of(fork, {"engine.profile=vllm-0.7.2-v0", "engine.mode=cache_only"}),
             Catch::Contains("workload.n: parallel sampling needs engine.mode: timed"));
  CHECK_THAT(error_of(fork, {"workload.parallel_sampling=forks"}),
             Catch::Contains("did you mean 'fork'"));
  CHECK_THAT(error_of(v1, {"cache.swap_space=8"}),
             Catch::Contains("cache.swap_space: vllm-0.7.2 (vLLM's V1 engine) has no CPU swap "
                             "space"));
  // Under V0: vLLM's own configuration check, at the batch size.
  CHECK_THAT(
      error_of(v1, {"engine.profile=vllm-0.7.2-v0", "scheduler.max_num_batched_tokens=1024"}),
      Catch::Contains("scheduler.max_num_batched_tokens: vLLM raises ValueError: "
                      "max_num_batched_tokens (1024) is smaller than max_model_len (2048)"));
  CHECK(error_of(v1, {"engine.profile=vllm-0.7.2-v0", "scheduler.max_num_batched_tokens=1024",
                      "scheduler.enable_chunked_prefill=true"})
            .empty());
  // The CPU pool: 4 GiB (vLLM's default) over one block of every layer.
  write_file(tmp.path / "c.yaml", v1);
  const Scenario s =
      load_scenario((tmp.path / "c.yaml").string(), {"engine.profile=vllm-0.7.2-v0"});
  CHECK(s.num_cpu_blocks == (std::int64_t{4} << 30) / (28672 * 16));
  CHECK(s.engine_params().v0.num_cpu_blocks == s.num_cpu_blocks);
  CHECK(load_scenario((tmp.path / "c.yaml").string(),
                      {"engine.profile=vllm-0.7.2-v0", "cache.swap_space=0"})
            .num_cpu_blocks == 0);
  // V1 runs get no CPU pool.
  CHECK(load_scenario((tmp.path / "c.yaml").string(), {"scheduler.preemption_mode=~"})
            .num_cpu_blocks == 0);
}

TEST_CASE("every shipped scenario runs under vllm-0.7.2-v0 with its invariants checked", "[sim]") {
  // Synthetic, trace, timed and cache_only scenarios: capped at 40 requests, the V0 engine (with
  // chunked prefill on, which most shipped batch sizes need under V0) walks its invariants after
  // every step, and every request ends in requests.csv.
  const fs::path src(KVSIM_SOURCE_DIR);
  std::vector<fs::path> scenarios;
  for (const char* d : {"scenarios", "scenarios/regression"})
    for (const auto& e : fs::directory_iterator(src / d))
      if (e.path().extension() == ".yaml") scenarios.push_back(e.path());
  std::sort(scenarios.begin(), scenarios.end());
  REQUIRE(scenarios.size() >= 12);
  const TempDir tmp("v0-shipped");
  int timed = 0, cache_only = 0, traces = 0;
  for (const fs::path& path : scenarios) {
    INFO(path.string());
    const YAML::Node root = load_yaml_file(path.string());
    // A CPU tier (cache.kv_offloading_*) is vLLM v0.20's: V0 has its own swap space.
    if (has_key(root["cache"], "kv_offloading_size") ||
        has_key(root["cache"], "kv_offloading_capacity_tokens"))
      continue;
    const YAML::Node w = root["workload"];
    const bool trace = has_key(w, "trace");
    std::vector<std::string> sets = {
        "engine.profile=vllm-0.7.2-v0", "scheduler.enable_chunked_prefill=true",
        trace ? "workload.trace.max_requests=40" : "workload.num_requests=40"};
    if (has_key(w, "sessions")) sets.push_back("workload.sessions.turns=1");
    const Scenario s = load_scenario(path.string(), sets);
    REQUIRE(s.engine.profile == Profile::kVllm072V0);
    RunOptions options;
    options.check_invariants = true;
    const fs::path dir = run_scenario(s, tmp.path / path.stem(), options).folder;
    const nlohmann::json j = read_json(dir / "summary.json");
    const std::int64_t rows = static_cast<std::int64_t>(read_csv(dir / "requests.csv").rows.size());
    CHECK(rows == j["completed"].get<std::int64_t>() + j["rejected"].get<std::int64_t>() +
                      j["ignored"].get<std::int64_t>());
    CHECK(rows >= 40);
    CHECK(j.contains("num_cpu_blocks"));
    const bool co = s.engine.mode == EngineConfig::Mode::kCacheOnly;
    (co ? cache_only : timed) += 1;
    traces += trace;
  }
  CHECK(timed >= 8);
  CHECK(cache_only >= 2);
  CHECK(traces >= 3);
}
