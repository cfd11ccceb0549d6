// Fast-forward (engine.fast_forward, sim/engine/fast_forward.cpp): runs of pure decode steps
// advanced at once must leave every output file byte-identical to the step-by-step loop. Random
// scenarios per profile (load, block size, prefix sharing, preemptions, chunked prefill, aborts,
// stops at EOS, multi-turn sessions, async scheduling, hybrid KV cache groups, V0 swapping, the
// contiguous baselines), each run both ways; the comparison is shown to catch a planted
// divergence.

#include <catch2/catch.hpp>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/engine/simulator.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::slurp;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

constexpr const char* kFiles[] = {"summary.json", "requests.csv", "steps.csv", "metrics.prom",
                                  "config.resolved.yaml"};

/// A random small scenario for `profile` (the seed picks every knob).
std::string random_scenario(const std::string& profile, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 7919 + profile.size());
  const auto pick = [&](std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  };
  const auto chance = [&](int percent) { return pick(1, 100) <= percent; };
  const bool v020 = profile == "vllm-0.20";
  const bool v0 = profile == "vllm-0.7.2-v0";
  const bool v1 = profile.rfind("vllm-", 0) == 0 && !v0;
  const std::int64_t block_sizes[] = {8, 16, 32};
  const std::int64_t bs = block_sizes[pick(0, 2)];
  const std::int64_t max_model_len = 1024;
  const std::int64_t min_blocks = max_model_len / bs + 8;
  const bool hybrid = v020 && chance(25);
  std::string s = "name: ff\nseed: " + std::to_string(seed) + "\n";
  s += "engine: {profile: " + profile + "}\n";
  s += "model: {config: " + std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" +
       (hybrid ? "gpt-oss-20b.json" : "qwen2-1.5b.json") + "}\n";
  s += "cache: {block_size: " + std::to_string(bs) +
       ", num_gpu_blocks_override: " + std::to_string(pick(min_blocks, min_blocks * 5));
  if (v1 || v0) s += std::string(", enable_prefix_caching: ") + (chance(80) ? "true" : "false");
  if (v0 && chance(50)) s += ", swap_space: " + std::to_string(pick(1, 4));
  s += "}\n";
  s += "scheduler: {max_num_seqs: " + std::to_string(pick(2, 48)) +
       ", max_num_batched_tokens: " + std::to_string(std::int64_t{1024} << pick(0, 2)) +
       ", max_model_len: " + std::to_string(max_model_len);
  if (v020) s += std::string(", async_scheduling: ") + (chance(50) ? "true" : "false");
  if (v0 && chance(40)) s += ", preemption_mode: swap";
  if (v0 && chance(40)) s += ", enable_chunked_prefill: true";
  s += "}\n";
  s += "workload:\n";
  s += "  num_requests: " + std::to_string(pick(30, 120)) + "\n";
  s += "  arrival: {process: poisson, rate_per_s: " + std::to_string(pick(2, 60)) + "}\n";
  // Now and then prompts past max_model_len: rejected at arrival (during a run's last step).
  s += "  prompt_tokens: {lognormal: {mean: " + std::to_string(pick(40, 400)) +
       ", sigma: 0.8}, max: " + (chance(15) ? "1100" : "600") + "}\n";
  s += "  output_tokens: {lognormal: {mean: " + std::to_string(pick(10, 250)) +
       ", sigma: 0.9}, max: 400}\n";
  if (chance(50))
    s += "  system_prompts: {count: " + std::to_string(pick(1, 4)) +
         ", tokens: " + std::to_string(pick(16, 256)) + "}\n";
  if (chance(20))
    s += "  sessions: {turns: {uniform: {min: 1, max: 3}}, think_time_s: {exponential: {mean: "
         "1}}, user_tokens: 40}\n";
  if (chance(30)) s += "  stop_at_eos_fraction: 0.5\n  eos_token_id: 2\n";
  if (chance(20)) s += "  client_timeout_s: " + std::to_string(pick(1, 15)) + "\n";
  s += "latency: {model: roofline}\n";
  const std::int64_t every[] = {1, 2, 5, 10, 37};
  s += "outputs: {metrics_prom: true, steps_every: " + std::to_string(every[pick(0, 4)]) + "}\n";
  return s;
}

struct Outcome {
  fs::path folder;
  std::string error;  // a run that fails must fail the same way both ways
  std::int64_t fast_forward_steps = 0;
};

Outcome run_text(const std::string& text, const fs::path& dir, bool fast_forward,
                 StepTimeFn step_time = {}) {
  Outcome o;
  try {
    YAML::Node root = load_yaml_string(text, "ff.yaml");
    if (!fast_forward) apply_set(root, "engine.fast_forward=false");
    const Scenario s = parse_scenario(root, "ff.yaml");
    RunOptions opts;
    opts.step_time = std::move(step_time);
    const RunResult r = run_scenario(s, dir, opts);
    o.folder = r.folder;
    o.fast_forward_steps = r.fast_forward_steps;
  } catch (const std::exception& e) {
    o.error = e.what();
  }
  return o;
}

/// The names of the output files that differ between the two runs ("" when none does).
std::string differing_files(const Outcome& a, const Outcome& b) {
  if (a.error != b.error) return "error: [" + a.error + "] vs [" + b.error + "]";
  if (!a.error.empty()) return "";
  std::string diff;
  for (const char* f : kFiles) {
    const bool ea = fs::exists(a.folder / f), eb = fs::exists(b.folder / f);
    if (ea != eb || (ea && slurp(a.folder / f) != slurp(b.folder / f))) diff += std::string(f) + " ";
  }
  return diff;
}

/// Runs `seeds` random scenarios of `profile` both ways; returns the steps fast-forwarded.
std::int64_t check_profile(const std::string& profile, int seeds) {
  const TempDir tmp("ff-" + profile);
  std::int64_t ff_steps = 0, failures = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    const std::string text = random_scenario(profile, static_cast<std::uint64_t>(seed));
    const fs::path dir = tmp.path / std::to_string(seed);
    const Outcome on = run_text(text, dir / "on", true);
    const Outcome off = run_text(text, dir / "off", false);
    CHECK(off.fast_forward_steps == 0);
    const std::string diff = differing_files(on, off);
    if (!diff.empty()) {
      ++failures;
      INFO("seed " << seed << " differs in: " << diff << "\n" << text);
      CHECK(diff.empty());
    }
    ff_steps += on.fast_forward_steps;
    fs::remove_all(dir);
  }
  CHECK(failures == 0);
  return ff_steps;
}

}  // namespace

TEST_CASE("fast-forward is byte-identical on random vllm-0.7.2 scenarios", "[sim][ff]") {
  CHECK(check_profile("vllm-0.7.2", 150) > 0);
}

TEST_CASE("fast-forward is byte-identical on random vllm-0.8.5 scenarios", "[sim][ff]") {
  CHECK(check_profile("vllm-0.8.5", 150) > 0);
}

TEST_CASE("fast-forward is byte-identical on random vllm-0.20 scenarios", "[sim][ff]") {
  CHECK(check_profile("vllm-0.20", 150) > 0);  // the synchronous loop's runs
}

TEST_CASE("fast-forward is byte-identical on random vllm-0.7.2-v0 scenarios", "[sim][ff]") {
  CHECK(check_profile("vllm-0.7.2-v0", 100) > 0);
}

TEST_CASE("fast-forward is byte-identical on random contiguous scenarios", "[sim][ff]") {
  for (const char* p : {"orca-max", "orca-pow2", "orca-oracle"}) {
    INFO(p);
    CHECK(check_profile(p, 50) > 0);  // runs of decodes on reservations
  }
}

TEST_CASE("the fast-forward comparison catches a run that diverges", "[sim][ff]") {
  // A step-time function that is not a pure function of the batch (it counts its calls) breaks
  // fast-forward's contract: the run asks it ahead for steps it then does not take (here: the
  // step in flight when a client gives up on a running request, which ends the run before it).
  // The comparison must see the divergence.
  const std::string text =
      "name: ff\nseed: 5\nengine: {profile: vllm-0.7.2}\n"
      "model: {config: " + std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 2000}\n"
      "scheduler: {max_num_seqs: 16, max_num_batched_tokens: 2048, max_model_len: 2048}\n"
      "workload:\n  num_requests: 40\n  arrival: {process: poisson, rate_per_s: 2}\n"
      "  prompt_tokens: {uniform: {min: 50, max: 200}}\n"
      "  output_tokens: {uniform: {min: 100, max: 300}}\n"
      "  client_timeout_s: 1\n"
      "outputs: {steps_every: 100}\n";
  const TempDir tmp("ff-planted");
  const auto counting = [] {
    auto calls = std::make_shared<std::int64_t>(0);
    return StepTimeFn([calls](const StepView& v) {
      return 5'000'000 + 1000 * v.decode_tokens + (++*calls % 7) * 100'000;
    });
  };
  const Outcome on = run_text(text, tmp.path / "on", true, counting());
  const Outcome off = run_text(text, tmp.path / "off", false, counting());
  REQUIRE(on.error.empty());
  REQUIRE(on.fast_forward_steps > 0);
  CHECK(differing_files(on, off).find("requests.csv") != std::string::npos);
  // The same function without the counter: identical.
  const auto pure = StepTimeFn(
      [](const StepView& v) { return 5'000'000 + 1000 * v.decode_tokens + v.sum_context_tokens; });
  const Outcome a = run_text(text, tmp.path / "a", true, pure);
  const Outcome b = run_text(text, tmp.path / "b", false, pure);
  CHECK(a.fast_forward_steps > 0);
  CHECK(differing_files(a, b).empty());
}
