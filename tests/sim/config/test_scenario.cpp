// Scenario loading: defaults, --set overrides, did-you-mean errors with positions, sizing errors,
// the resolved YAML, sweep expansion, and a fuzz over YAML mutations (ConfigError or success only).

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "sim/common/rng.h"
#include "sim/config/scenario.h"
#include "sim/engine/simulator.h"
#include "sim/workload/workload.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;

namespace {

const std::string kModelPath = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";

const std::string kBase =
    "name: base\n"
    "seed: 3\n"
    "model: {config: " +
    kModelPath +
    "}\n"
    "hardware: {gpu: H100-80GB}\n"
    "cache: {block_size: 16, enable_prefix_caching: true}\n"
    "scheduler: {max_num_seqs: 64}\n"
    "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";

/// The error of parsing `text` with `sets` applied as load_scenario applies them: a value a --set
/// wrote is reported at the argument.
std::string set_error_of(const std::string& text, const std::vector<std::string>& sets) {
  return kvsim::test::error_of([&] {
    YAML::Node root = load_yaml_string(text, "s.yaml");
    auto origins = std::make_shared<ArgumentOrigins>();
    for (const auto& a : sets) apply_set(root, a, origins.get());
    (void)parse_scenario(root, "s.yaml", origins);
  });
}

}  // namespace

TEST_CASE("a minimal scenario gets vLLM's defaults", "[sim]") {
  const Scenario s = parse_text(kBase);
  CHECK(s.name == "base");
  CHECK(s.seed == 3);
  CHECK(s.engine.profile == Profile::kVllm020);  // the default release, vLLM v0.20.1
  CHECK(s.engine.mode == EngineConfig::Mode::kTimed);
  CHECK(s.cache.sizing.block_size == 16);
  CHECK(s.cache.num_preallocate_tokens == 64);
  CHECK(s.scheduler.max_num_seqs == 64);
  CHECK(s.scheduler.max_num_batched_tokens == 8192);
  CHECK(s.scheduler.max_model_len == s.model->max_position_embeddings);
  CHECK(s.outputs.steps_every == 10);
  CHECK(s.num_gpu_blocks > 100000);
}

TEST_CASE("set overrides replace values, create sections and parse YAML scalars", "[sim]") {
  const Scenario s = parse_text(
      kBase, {"cache.block_size=32", "cache.enable_prefix_caching=false", "outputs.steps_every=1",
              "cache.num_gpu_blocks_override=500", "seed=9", "engine.mode=cache_only",
              "scheduler.max_model_len=16000"});  // 500 blocks of 32 hold one such request
  CHECK(s.cache.sizing.block_size == 32);
  CHECK_FALSE(s.cache.enable_prefix_caching);
  CHECK(s.outputs.steps_every == 1);
  CHECK(s.num_gpu_blocks == 500);
  CHECK(s.seed == 9);
  CHECK(s.engine.mode == EngineConfig::Mode::kCacheOnly);
  CHECK(s.cache.num_preallocate_tokens == 0);  // the cache_only default
  const Scenario f = parse_text(kBase, {"workload.arrival={process: constant, rate_per_s: 5}"});
  REQUIRE(f.workload.synthetic());
  CHECK(f.workload.synthetic()->arrival.process == ArrivalConfig::Process::kConstant);
  CHECK(f.workload.synthetic()->arrival.rate_per_s == 5.0);
}

TEST_CASE("malformed --set assignments are config errors", "[sim]") {
  CHECK_THAT(scenario_error(kBase, {"cache.block_size"}),
             Catch::Contains("expected section.key=value"));
  CHECK_THAT(scenario_error(kBase, {"cache..x=1"}), Catch::Contains("empty component"));
  CHECK_THAT(scenario_error(kBase, {"seed.x=1"}), Catch::Contains("is not a mapping"));
  CHECK_THAT(scenario_error(kBase, {"cache.blok_size=8"}),
             Catch::Contains("did you mean 'block_size'"));
}

TEST_CASE("an unknown key is an error with a suggestion and a position", "[sim]") {
  const std::string text = kBase + "sheduler: {max_num_seqs: 3}\n";
  const std::string e = scenario_error(text);
  CHECK_THAT(e, Catch::Contains("s.yaml:8:1"));
  CHECK_THAT(e, Catch::Contains("did you mean 'scheduler'"));
  CHECK_THAT(scenario_error(kBase + "outputs: {steps_evry: 3}\n"),
             Catch::Contains("did you mean 'steps_every'"));
  CHECK_THAT(scenario_error(kBase + "engine: {mode: cached}\n"), Catch::Contains("cache_only"));
}

TEST_CASE("wrong types and out-of-range values are reported with the key", "[sim]") {
  CHECK_THAT(scenario_error(kBase, {"cache.block_size=abc"}), Catch::Contains("cache.block_size"));
  CHECK_THAT(scenario_error(kBase, {"cache.block_size=0"}), Catch::Contains("cache.block_size"));
  CHECK_THAT(scenario_error(kBase, {"scheduler.max_num_seqs=-1"}),
             Catch::Contains("scheduler.max_num_seqs"));
  CHECK_THAT(scenario_error(kBase, {"cache.gpu_memory_utilization=1.5"}),
             Catch::Contains("gpu_memory_utilization"));
  CHECK_THAT(scenario_error(kBase, {"outputs.trace_json=maybe"}),
             Catch::Contains("outputs.trace_json"));
  CHECK_THAT(scenario_error(kBase, {"scheduler.max_model_len=1000000"}),
             Catch::Contains("max_position_embeddings"));
  CHECK_THAT(scenario_error(kBase, {"engine.profile=vllm-0.9"}), Catch::Contains("vllm-0.7.2"));
}

TEST_CASE("a bad value given by --set names the --set argument", "[sim]") {
  CHECK(set_error_of(kBase, {"scheduler.max_num_seqs=-1"}) ==
        "--set scheduler.max_num_seqs=-1: scheduler.max_num_seqs: -1 is out of range (must be in "
        "[1, 1048576])");
  CHECK(set_error_of(kBase, {"cache.blok_size=8"}) ==
        "--set cache.blok_size=8: unknown key 'blok_size' in cache (did you mean 'block_size'?)");
  CHECK(set_error_of(kBase, {"engine.mode=cached"}) ==
        "--set engine.mode=cached: engine.mode: unknown value 'cached' (allowed: timed, "
        "cache_only)");
  CHECK(set_error_of(kBase, {"cache.block_size=[1"})
            .starts_with("--set cache.block_size=[1: YAML syntax error"));
  // Deep in the workload and latency sections, and in a section the --set created.
  CHECK(set_error_of(kBase, {"workload.prompt_tokens={lognormal: {mean: 300, sigma: 20}}"}) ==
        "--set workload.prompt_tokens={lognormal: {mean: 300, sigma: 20}}: "
        "workload.prompt_tokens.lognormal.sigma: 20 is out of range (must be in [0, 10])");
  CHECK(set_error_of(kBase, {"workload.sessions.user_tokens=5"}) ==
        "--set workload.sessions.user_tokens=5: missing required key 'turns' in "
        "workload.sessions");
  CHECK(set_error_of(kBase, {"latency.mbu=2"}) ==
        "--set latency.mbu=2: latency.mbu: 2 is out of range (must be in [1e-06, 1])");
  // The last --set of a key is the one named; the file's own values keep their position.
  CHECK(set_error_of(kBase, {"outputs.steps_every=0", "outputs={steps_every: -2}"}) ==
        "--set outputs={steps_every: -2}: outputs.steps_every: -2 is out of range (must be in "
        "[1, 1099511627776])");
  CHECK(set_error_of(kBase + "outputs: {steps_every: 0}\n", {"seed=4"}) ==
        "s.yaml:8:24: outputs.steps_every: 0 is out of range (must be in [1, 1099511627776])");
  // Without the origins (a tree --set by hand), the value has no position in the file.
  CHECK(scenario_error(kBase, {"scheduler.max_num_seqs=-1"}).starts_with("s.yaml:"));
}

TEST_CASE("a --set or --seed given to load_scenario names the argument", "[sim]") {
  const test::TempDir tmp("scenario-sets");
  const std::string file = (tmp.path / "s.yaml").string();
  test::write_file(file, kBase);
  CHECK(test::error_of([&] { (void)load_scenario(file, {"cache.block_size=0"}); }) ==
        "--set cache.block_size=0: cache.block_size: 0 is out of range (must be in [1, 65536])");
  CHECK(test::error_of([&] { (void)load_scenario(file, {}, 18446744073709551615ULL); }) ==
        "--seed 18446744073709551615: seed: expected an integer, got '18446744073709551615'");
  CHECK(load_scenario(file, {}, 42).seed == 42);
}

TEST_CASE("a model config file that does not exist is named with its key's position", "[sim]") {
  const std::string text =
      "name: m\nmodel:\n  config: models/nope.json\n"
      "workload: {prompt_tokens: 1, output_tokens: 1}\n";
  CHECK(scenario_error(text) ==
        "s.yaml:3:3: model.config: no such model config file 'models/nope.json' (looked beside "
        "the scenario and in the working directory)");
  CHECK(set_error_of(kBase, {"model.config=/no/such/config.json"}) ==
        "--set model.config=/no/such/config.json: model.config: no such model config file "
        "'/no/such/config.json'");
  // kvsim run prints that one line and exits 2, before any run folder exists.
  const test::TempDir tmp("scenario-no-model");
  test::write_file(tmp.path / "s.yaml", text);
  const std::string log = (tmp.path / "log.txt").string();
  const int rc = std::system((test::kvsim_exe() + " run " + (tmp.path / "s.yaml").string() +
                              " -o " + (tmp.path / "out").string() + " --quiet 2> " + log)
                                 .c_str());
  CHECK(WEXITSTATUS(rc) == 2);
  const std::string err = test::slurp(log);
  CHECK(err == "kvsim run: error: " + (tmp.path / "s.yaml").string() +
                   ":3:3: model.config: no such model config file 'models/nope.json' (looked "
                   "beside the scenario and in the working directory)\n");
  CHECK_FALSE(std::filesystem::exists(tmp.path / "out" / "m"));
}

TEST_CASE("bad workload and latency sections are refused when the scenario loads", "[sim]") {
  CHECK_THAT(scenario_error(kBase + "latency: {model: fited}\n"),
             Catch::Contains("did you mean 'fitted'"));
  CHECK_THAT(scenario_error(kBase, {"workload.arrival={process: poison, rate_per_s: 1}"}),
             Catch::Contains("did you mean 'poisson'"));
  CHECK_THAT(scenario_error(kBase, {"workload={trace: {format: csv, path: /no/such.csv}}"}),
             Catch::Contains("no such trace file '/no/such.csv'"));
  // cache_only mode reads no latency model, but a bad one is still an error.
  CHECK_THAT(scenario_error(kBase + "latency: {mfu: 3}\n", {"engine.mode=cache_only"}),
             Catch::Contains("latency.mfu: 3 is out of range"));
}

TEST_CASE("a model that does not fit in memory says by how much", "[sim]") {
  const std::string big = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/llama-3.1-70b.json";
  const std::string e = scenario_error(kBase, {"model.config=" + big, "hardware.gpu=L4"});
  CHECK_THAT(e, Catch::Contains("does not fit"));
  CHECK_THAT(e, Catch::Contains("GiB"));
}

TEST_CASE("the pool size needs a model or an explicit block count", "[sim]") {
  const std::string cache_only =
      "engine: {mode: cache_only}\ncache: {block_size: 512}\nworkload: {num_requests: 1, "
      "prompt_tokens: 5, output_tokens: 1}\n";
  CHECK_THAT(scenario_error(cache_only), Catch::Contains("num_gpu_blocks_override"));
  const Scenario s = parse_text(cache_only, {"cache.capacity_tokens=1000000"});
  CHECK(s.num_gpu_blocks == 1953);
  CHECK_THAT(scenario_error(cache_only, {"cache.capacity_tokens=100"}),
             Catch::Contains("less than one block"));
  CHECK_THAT(
      scenario_error(cache_only, {"cache.capacity_tokens=5000", "cache.num_gpu_blocks_override=3"}),
      Catch::Contains("not both"));
  CHECK_THAT(scenario_error(cache_only, {"engine.mode=timed", "cache.capacity_tokens=5000"}),
             Catch::Contains("model: required"));
}

TEST_CASE("the resolved YAML has every default and parses back to itself", "[sim]") {
  const Scenario s = parse_text(kBase, {"cache.block_size=32"});
  const std::string text = resolved_yaml(s);
  for (const char* key : {"max_num_batched_tokens", "num_preallocate_tokens", "steps_every",
                          "gpu_memory_utilization", "profile", "sample_every_steps"})
    CHECK_THAT(text, Catch::Contains(key));
  const Scenario again = parse_scenario(load_yaml_string(text, "r.yaml"), "r.yaml");
  CHECK(resolved_yaml(again) == text);
  CHECK(again.num_gpu_blocks == s.num_gpu_blocks);
}

TEST_CASE("a sweep expands to the cartesian product with named points", "[sim]") {
  const Scenario s = parse_text(kBase +
                                "sweep: {cache.block_size: [8, 16, 32], "
                                "cache.enable_prefix_caching: [true, false]}\n");
  const auto points = sweep_points(s);
  REQUIRE(points.size() == 6);
  CHECK(sweep_point_name(points[0]) == "cache.block_size=8,cache.enable_prefix_caching=true");
  CHECK(sweep_point_name(points[5]) == "cache.block_size=32,cache.enable_prefix_caching=false");
  CHECK_THAT(scenario_error(kBase + "sweep: {cahce.block_size: [8]}\n"),
             Catch::Contains("did you mean 'cache'"));
  CHECK_THAT(scenario_error(kBase + "sweep: {cache.block_size: 8}\n"),
             Catch::Contains("non-empty list"));
}

TEST_CASE("a sweep may list its points, each setting its own keys", "[sim]") {
  const Scenario s = parse_text(kBase +
                                "sweep:\n"
                                "  - {cache.block_size: 8}\n"
                                "  - {cache.block_size: 32, cache.enable_prefix_caching: false}\n"
                                "  - {scheduler.max_num_seqs: 4}\n");
  CHECK(s.sweep.empty());
  const auto points = sweep_points(s);
  REQUIRE(points.size() == 3);
  CHECK(sweep_point_name(points[0]) == "cache.block_size=8");
  CHECK(sweep_point_name(points[1]) == "cache.block_size=32,cache.enable_prefix_caching=false");
  CHECK(sweep_point_name(points[2]) == "scheduler.max_num_seqs=4");
  CHECK_THAT(scenario_error(kBase + "sweep:\n  - {cahce.block_size: 8}\n"),
             Catch::Contains("did you mean 'cache'"));
  CHECK_THAT(scenario_error(kBase + "sweep:\n  - {cache.block_size: 8}\n  - 16\n"),
             Catch::Contains("sweep[1]: expected a mapping of dotted keys to values"));
  CHECK_THAT(scenario_error(kBase + "sweep: []\n"), Catch::Contains("non-empty list of points"));
  CHECK_THAT(scenario_error(kBase + "sweep:\n  - {}\n"),
             Catch::Contains("sweep[0]: expected a mapping"));
}

TEST_CASE("random mutations of a scenario either load or raise ConfigError", "[sim]") {
  const std::string text = kBase +
                           "outputs: {trace_json: false, metrics_prom: true, steps_every: 5}\n"
                           "validate: {backend: cpu, sample_prob: 0.5}\n";
  const std::vector<std::string> values = {"0",
                                           "-1",
                                           "1e30",
                                           "abc",
                                           "true",
                                           "[1, 2]",
                                           "{a: 1}",
                                           "~",
                                           "''",
                                           "0.5",
                                           "99999999999999999999",
                                           "16",
                                           ".nan"};
  const std::vector<std::string> keys = {"name",
                                         "seed",
                                         "engine.mode",
                                         "engine.profile",
                                         "cache.block_size",
                                         "cache.gpu_memory_utilization",
                                         "cache.num_gpu_blocks_override",
                                         "cache.capacity_tokens",
                                         "cache.kv_cache_memory_bytes",
                                         "cache.enable_prefix_caching",
                                         "cache.num_preallocate_tokens",
                                         "scheduler.max_num_seqs",
                                         "scheduler.max_model_len",
                                         "scheduler.max_num_batched_tokens",
                                         "outputs.steps_every",
                                         "outputs.trace_json",
                                         "validate.sample_prob",
                                         "hardware.gpu",
                                         "hardware.tensor_parallel_size",
                                         "model.num_hidden_layers",
                                         "sweep.cache.block_size",
                                         "engine",
                                         "cache",
                                         "model",
                                         "bogus.key",
                                         "workload.num_requests",
                                         "workload.prompt_tokens",
                                         "workload.output_tokens",
                                         "workload.arrival.process",
                                         "workload.arrival.rate_per_s",
                                         "workload.system_prompts.count",
                                         "workload.sessions.turns",
                                         "workload.eos_token_id",
                                         "latency.model",
                                         "latency.mfu",
                                         "latency.step_time_us",
                                         "workload"};
  RngStream rng = make_stream(12345, "fuzz");
  int ok = 0, rejected = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    std::vector<std::string> sets;
    const int n = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < n; ++k)
      sets.push_back(keys[rng() % keys.size()] + "=" + values[rng() % values.size()]);
    INFO("seed 12345 iteration " << iter << ": " << sets[0]);
    try {
      const Scenario s = parse_text(text, sets);
      // Build what a run builds before it writes anything, and draw a few requests.
      auto src = make_request_source(s.workload, s.seed, 32000);
      if (s.engine.mode == EngineConfig::Mode::kTimed) (void)make_step_time(s);
      for (int k = 0; k < 5 && src->next(); ++k) {
      }
      ++ok;
    } catch (const ConfigError&) {
      ++rejected;
    }
  }
  CHECK(ok > 0);
  CHECK(rejected > 0);
}

TEST_CASE("random byte edits of scenario text either load or raise ConfigError", "[sim]") {
  RngStream rng = make_stream(777, "fuzz.bytes");
  const std::string alphabet = "{}[]:,#-'\"\n 0123456789abcxyz.~&*!|>";
  for (int iter = 0; iter < 300; ++iter) {
    std::string t = kBase;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < edits; ++k) {
      const std::size_t pos = rng() % t.size();
      switch (rng() % 3) {
        case 0:
          t[pos] = alphabet[rng() % alphabet.size()];
          break;
        case 1:
          t.erase(pos, 1);
          break;
        default:
          t.insert(pos, 1, alphabet[rng() % alphabet.size()]);
          break;
      }
    }
    INFO("seed 777 iteration " << iter);
    try {
      (void)parse_text(t);
    } catch (const ConfigError&) {
    }
  }
  SUCCEED();
}
