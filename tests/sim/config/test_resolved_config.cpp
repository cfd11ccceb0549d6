// config.resolved.yaml: it spells out the workload and latency defaults, running it reproduces the
// run byte for byte, and resolving it again gives the same text. Checked on every shipped scenario
// and on workload/latency forms the shipped scenarios do not use.

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>

#include "sim/config/scenario.h"
#include "sim/engine/latency_model.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::slurp;
using kvsim::test::TempDir;
using kvsim::test::write_file;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kMaxTestRequests = 1000;  // cap on a shipped scenario's requests

/// Runs from `dir` until destroyed (relative paths in scenarios resolve as from a shell there).
struct ScopedCwd {
  fs::path old = fs::current_path();
  explicit ScopedCwd(const fs::path& dir) { fs::current_path(dir); }
  ~ScopedCwd() { fs::current_path(old); }
};

std::vector<std::string> file_names(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

/// Runs `scenario` with `sets` into work/a, then its config.resolved.yaml into work/b, and checks
/// that both runs wrote the same files with the same bytes (config.resolved.yaml included, so
/// resolving the resolved file is a fixed point). Returns the resolved YAML.
YAML::Node check_round_trip(const fs::path& scenario, const std::vector<std::string>& sets,
                            const fs::path& work) {
  const fs::path a = run_scenario(load_scenario(scenario.string(), sets), work / "a").folder;
  const fs::path resolved = a / "config.resolved.yaml";
  const Scenario again = load_scenario(resolved.string(), {});
  CHECK(resolved_yaml(again) == slurp(resolved));
  const fs::path b = run_scenario(again, work / "b").folder;
  const std::vector<std::string> names = file_names(a);
  CHECK(names == file_names(b));
  for (const char* required : {"summary.json", "requests.csv", "steps.csv"})
    CHECK(std::count(names.begin(), names.end(), required) == 1);
  for (const std::string& name : names) {
    INFO(name);
    CHECK(slurp(a / name) == slurp(b / name));
  }
  return load_yaml_file(resolved.string());
}

/// --set caps that keep a shipped scenario under kMaxTestRequests requests.
std::vector<std::string> request_cap(const fs::path& scenario) {
  const YAML::Node w = load_yaml_file(scenario.string())["workload"];
  const bool trace = has_key(w, "trace");
  const YAML::Node n = trace ? w["trace"]["max_requests"] : w["num_requests"];
  if (n.IsDefined() && n.as<std::int64_t>() <= kMaxTestRequests) return {};
  const std::string key = trace ? "workload.trace.max_requests" : "workload.num_requests";
  return {key + "=" + std::to_string(kMaxTestRequests)};
}

std::string text(const YAML::Node& n) { return n.IsScalar() ? n.Scalar() : "(not a scalar)"; }

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";

std::string timed_scenario(const std::string& workload, const std::string& latency) {
  return "name: variant\nseed: 5\nmodel: {config: " + kModel +
         "}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 300}\n"
         "scheduler: {max_num_seqs: 16, max_num_batched_tokens: 512, max_model_len: 4096}\n"
         "workload:\n" +
         workload + "latency: " + latency + "\noutputs: {steps_every: 1}\n";
}

}  // namespace

TEST_CASE("every shipped scenario's resolved file spells out its defaults and reruns identically",
          "[sim]") {
  const fs::path src(KVSIM_SOURCE_DIR);
  std::vector<fs::path> scenarios;
  for (const char* dir : {"scenarios", "scenarios/regression"})
    for (const auto& e : fs::directory_iterator(src / dir))
      if (e.path().extension() == ".yaml") scenarios.push_back(fs::relative(e.path(), src));
  std::sort(scenarios.begin(), scenarios.end());
  REQUIRE(scenarios.size() >= 11);

  const TempDir tmp("resolved-shipped");
  const ScopedCwd cwd(src);  // as users run them, from the repository root
  std::map<std::string, YAML::Node> resolved;
  for (const fs::path& scenario : scenarios) {
    INFO(scenario.string());
    const YAML::Node r = check_round_trip(scenario, request_cap(scenario),
                                          tmp.path / scenario.parent_path() / scenario.stem());
    const YAML::Node w = r["workload"];
    CHECK(text(w["ignore_eos"]) == "true");
    if (has_key(w, "trace")) {
      for (const char* key : {"format", "path", "time_scale", "max_requests"})
        CHECK(has_key(w["trace"], key));
      CHECK(text(w["trace"]["time_scale"]) == "1");
      CHECK(w["trace"]["max_requests"].as<std::int64_t>() <= kMaxTestRequests);
    } else if (has_key(w, "lengths")) {  // joint (prompt, output) rows instead of two distributions
      for (const char* key : {"num_requests", "arrival"}) CHECK(has_key(w, key));
      CHECK_FALSE(has_key(w, "prompt_tokens"));
      CHECK(fs::is_regular_file(text(w["lengths"])));
    } else {
      for (const char* key : {"num_requests", "arrival", "prompt_tokens", "output_tokens"})
        CHECK(has_key(w, key));
      CHECK(has_key(w["arrival"], "process"));
      for (const char* dist : {"prompt_tokens", "output_tokens"}) {
        CHECK(has_key(w[dist], "min"));
        CHECK(has_key(w[dist], "max"));
      }
    }
    const bool timed = text(r["engine"]["mode"]) == "timed";
    CHECK(has_key(r, "latency") == timed);
    if (timed) {
      CHECK(text(r["latency"]["model"]) == "roofline");
      for (const char* key :
           {"mfu", "mbu", "step_overhead_us", "interconnect_bytes_per_s", "allreduce_latency_us"})
        CHECK(has_key(r["latency"], key));
    }
    resolved[scenario.generic_string()] = r;
  }

  const YAML::Node def = resolved.at("scenarios/default.yaml");
  CHECK(text(def["workload"]["num_requests"]) == "1000");  // the test's cap of 3,000
  CHECK(text(def["workload"]["arrival"]["rate_per_s"]) == "10");
  CHECK(text(def["workload"]["prompt_tokens"]["lognormal"]["sigma"]) == "0.8");
  CHECK(text(def["workload"]["prompt_tokens"]["min"]) == "1");
  CHECK(text(def["workload"]["prompt_tokens"]["max"]) == "8000");
  // The default profile, with vllm serve's defaults on an H100.
  CHECK(text(def["engine"]["profile"]) == "vllm-0.20");
  CHECK(text(def["hardware"]["gpu"]) == "H100-80GB");
  CHECK(text(def["scheduler"]["max_num_seqs"]) == "1024");
  CHECK(text(def["scheduler"]["max_num_batched_tokens"]) == "8192");
  CHECK(text(def["scheduler"]["async_scheduling"]) == "true");
  const YAML::Node sp = def["workload"]["system_prompts"];
  CHECK(text(sp["tokens"]["fixed"]) == "1500");
  CHECK(text(sp["tokens"]["min"]) == "0");
  CHECK(text(sp["tokens"]["max"]) == "10000000");
  CHECK(text(sp["popularity"]["zipf"]) == "1.1");
  CHECK(text(sp["share"]) == "1");
  const YAML::Node lat = def["latency"];
  CHECK(text(lat["mfu"]) == "0.5");
  CHECK(text(lat["mbu"]) == "0.8");
  CHECK(text(lat["step_overhead_us"]) == "1000");
  CHECK(text(lat["interconnect_bytes_per_s"]) == "450000000000");
  CHECK(text(lat["allreduce_latency_us"]) == "10");

  const YAML::Node sessions = resolved.at("scenarios/multi-turn.yaml")["workload"]["sessions"];
  CHECK(text(sessions["think_time_s"]["exponential"]["mean"]) == "15");
  CHECK(text(sessions["think_time_s"]["max"]) == "1000000000");
  CHECK(text(sessions["turns"]["uniform"]["max"]) == "8");
  CHECK(text(resolved.at(
            "scenarios/multi-turn.yaml")["workload"]["system_prompts"]["popularity"]) == "uniform");

  const YAML::Node mooncake =
      resolved.at("scenarios/mooncake-cache-only.yaml")["workload"]["trace"];
  CHECK(text(mooncake["format"]) == "mooncake");
  CHECK_THAT(text(mooncake["path"]), Catch::EndsWith("scenarios/traces/mooncake_synthetic.jsonl"));
  CHECK(text(mooncake["hash_block_tokens"]) == "512");
  CHECK(text(mooncake["max_requests"]) == "1000");
  CHECK(!has_key(mooncake, "prefix_tokens"));
  const YAML::Node azure = resolved.at("scenarios/azure-conv.yaml")["workload"]["trace"];
  CHECK(text(azure["format"]) == "azure");
  CHECK(!has_key(azure, "hash_block_tokens"));
  CHECK(text(resolved.at(
            "scenarios/regression/cache-only.yaml")["workload"]["trace"]["max_requests"]) == "600");
  const YAML::Node gamma = resolved.at("scenarios/regression/preemption.yaml")["workload"];
  CHECK(text(gamma["arrival"]["process"]) == "gamma");
  CHECK(text(gamma["arrival"]["cv"]) == "3");
  CHECK(text(gamma["sessions"]["user_tokens"]["fixed"]) == "60");
}

TEST_CASE("synthetic workload forms resolve to every key and rerun identically", "[sim]") {
  const TempDir tmp("resolved-synthetic");
  write_file(tmp.path / "lengths.csv", "len\n100\n250\n40\n700\n");
  LatencyFit fit;
  fit.coefficients_us = {900.0, 0.05, 2.5, 0.001, 1e-7, 10.0};
  write_file(tmp.path / "fit.yaml", fit_to_yaml(fit, "measurements.csv"));
  struct Variant {
    std::string name, workload, latency;
  };
  const std::vector<Variant> variants = {
      {"gamma-few-shot-empirical",
       "  num_requests: 40\n  duration_s: 30\n  arrival: {process: gamma, rate_per_s: 8, cv: 2}\n"
       "  few_shot: {count: 3, example_tokens: {uniform: {min: 20, max: 60}}, popularity: "
       "{zipf: 0.9}, share: 0.7}\n"
       "  prompt_tokens: {empirical: {file: lengths.csv, column: len}}\n"
       "  output_tokens: {normal: {mean: 30, std: 10}, min: 2}\n"
       "  ignore_eos: false\n  eos_token_id: 7\n",
       "{model: constant, step_time_us: 2500}"},
      {"bursts-fit-file",
       "  num_requests: 30\n  arrival: {process: bursts, burst_size: 4, interval_s: 0.5}\n"
       "  system_prompts: {count: 2, tokens: 100}\n"
       "  few_shot: {count: 2, examples: 3, example_tokens: 30}\n"
       "  prompt_tokens: {gamma: {mean: 80, cv: 1.5}}\n  output_tokens: {zipf: {n: 50, s: 1.2}}\n",
       "{model: fitted, file: fit.yaml}"},
      {"timestamps-inline-fit",
       "  arrival: {process: timestamps, times_s: [0, 0.1, 0.1, 0.25, 1.5]}\n"
       "  prompt_tokens: {exponential: {mean: 60}}\n  output_tokens: 12\n"
       "  sessions: {turns: 2, user_tokens: 20}\n",
       "{model: fitted, coefficients: {intercept: 700, decode_tokens: 3.25}}"},
      {"constant-arrival-default-latency",
       "  num_requests: 25\n  arrival: {process: constant, rate_per_s: 50}\n"
       "  prompt_tokens: 64\n  output_tokens: 8\n",
       "{}"},
  };
  std::map<std::string, YAML::Node> resolved;
  for (const Variant& v : variants) {
    INFO(v.name);
    const fs::path file = tmp.path / (v.name + ".yaml");
    write_file(file, timed_scenario(v.workload, v.latency));
    resolved[v.name] = check_round_trip(file, {}, tmp.path / v.name);
  }

  const YAML::Node g = resolved.at("gamma-few-shot-empirical");
  CHECK(text(g["workload"]["duration_s"]) == "30");
  CHECK(text(g["workload"]["few_shot"]["examples"]) == "1");
  CHECK(text(g["workload"]["few_shot"]["share"]) == "0.7");
  CHECK(text(g["workload"]["prompt_tokens"]["empirical"]["file"]) ==
        (tmp.path / "lengths.csv").string());
  CHECK(text(g["workload"]["output_tokens"]["min"]) == "2");
  CHECK(text(g["workload"]["ignore_eos"]) == "false");
  CHECK(text(g["workload"]["eos_token_id"]) == "7");
  CHECK(text(g["latency"]["step_time_us"]) == "2500");

  const YAML::Node b = resolved.at("bursts-fit-file");
  CHECK(text(b["workload"]["arrival"]["spacing_s"]) == "0");
  CHECK(text(b["workload"]["system_prompts"]["popularity"]) == "uniform");
  CHECK(!has_key(b["workload"]["system_prompts"], "examples"));
  CHECK(text(b["workload"]["output_tokens"]["zipf"]["n"]) == "50");
  CHECK(!has_key(b["workload"], "duration_s"));
  CHECK(!has_key(b["workload"], "eos_token_id"));
  CHECK(text(b["latency"]["file"]) == (tmp.path / "fit.yaml").string());
  CHECK(text(b["latency"]["coefficients"]["sum_context_sq"]) == "1e-07");

  const YAML::Node t = resolved.at("timestamps-inline-fit");
  CHECK(text(t["workload"]["num_requests"]) == "5");
  CHECK(t["workload"]["arrival"]["times_s"].size() == 5);
  CHECK(text(t["workload"]["sessions"]["think_time_s"]["fixed"]) == "0");
  CHECK(!has_key(t["latency"], "file"));
  CHECK(text(t["latency"]["coefficients"]["decode_tokens"]) == "3.25");
  CHECK(text(t["latency"]["coefficients"]["num_seqs"]) == "0");

  CHECK(text(resolved.at("constant-arrival-default-latency")["latency"]["model"]) == "roofline");
}

TEST_CASE("trace workloads resolve to every key the reader uses and rerun identically", "[sim]") {
  const TempDir tmp("resolved-trace");
  write_file(tmp.path / "t.csv",
             "arrival_s,prompt_tokens,output_tokens,prefix_group\n"
             "0,100,20,0\n0.5,120,10,0\n0.75,90,30,1\n1,300,5,-1\n2,80,15,1\n3,60,40,0\n");
  write_file(tmp.path / "t.jsonl",
             "{\"arrival_s\": 0, \"prompt_tokens\": 50, \"output_tokens\": 5}\n"
             "{\"arrival_s\": 0.2, \"prompt_tokens\": 70, \"output_tokens\": 9, "
             "\"prefix_group\": 2, \"prefix_tokens\": 32}\n"
             "{\"arrival_s\": 0.4, \"prompt_tokens\": 40, \"output_tokens\": 3}\n"
             "{\"arrival_s\": 0.6, \"prompt_tokens\": 90, \"output_tokens\": 0}\n");
  write_file(tmp.path / "csv.yaml",
             timed_scenario("  num_requests: 5\n  trace: {format: csv, path: t.csv, time_scale: "
                            "0.5, prefix_tokens: 48}\n",
                            "{model: roofline, mfu: 0.4}"));
  write_file(tmp.path / "jsonl.yaml",
             "name: jsonl\nengine: {mode: cache_only}\ncache: {num_gpu_blocks_override: 64}\n"
             "workload:\n  num_requests: 3\n  trace: {format: jsonl, path: t.jsonl, "
             "max_requests: 10}\n"
             "latency: {model: constant, step_time_us: 5}\n");

  const YAML::Node csv = check_round_trip(tmp.path / "csv.yaml", {}, tmp.path / "csv");
  const YAML::Node ct = csv["workload"]["trace"];
  CHECK(text(ct["path"]) == (tmp.path / "t.csv").string());
  CHECK(text(ct["time_scale"]) == "0.5");
  CHECK(text(ct["max_requests"]) == "5");
  CHECK(text(ct["prefix_tokens"]) == "48");
  CHECK(!has_key(ct, "hash_block_tokens"));
  CHECK(!has_key(csv["workload"], "num_requests"));
  CHECK(text(csv["latency"]["mfu"]) == "0.4");
  CHECK(text(csv["latency"]["mbu"]) == "0.8");

  // cache_only never reads latency:, so the resolved file has none.
  const YAML::Node jsonl = check_round_trip(tmp.path / "jsonl.yaml", {}, tmp.path / "jsonl");
  CHECK(text(jsonl["workload"]["trace"]["max_requests"]) == "3");
  CHECK(text(jsonl["workload"]["trace"]["prefix_tokens"]) == "0");
  CHECK(!has_key(jsonl, "latency"));
}

TEST_CASE("a fitted latency with both file and coefficients must agree with its file", "[sim]") {
  const TempDir tmp("resolved-fit");
  LatencyFit fit;
  fit.coefficients_us = {900.0, 0.0, 2.5, 0.0, 0.0, 0.0};
  const std::string file = (tmp.path / "fit.yaml").string();
  write_file(file, fit_to_yaml(fit, "m.csv"));
  const YamlContext ctx{"s.yaml", "latency"};
  const LatencyConfig both =
      parse_latency_config(YAML::Load("{model: fitted, file: '" + file +
                                      "', coefficients: {intercept: 900, decode_tokens: 2.5}}"),
                           ctx);
  CHECK(both.fit_file == file);
  CHECK(both.fit.coefficients_us == fit.coefficients_us);
  CHECK_THAT(test::error_of([&] {
               (void)parse_latency_config(
                   YAML::Load("{model: fitted, file: '" + file +
                              "', coefficients: {intercept: 900, decode_tokens: 2.4}}"),
                   ctx);
             }),
             Catch::Contains("latency.coefficients.decode_tokens: 2.4 differs from 2.5"));
  CHECK_THAT(
      test::error_of([&] { (void)parse_latency_config(YAML::Load("{model: fitted}"), ctx); }),
      Catch::Contains("needs 'file' or 'coefficients'"));
}

namespace {

/// The node at dotted `path` below `n` (undefined when a step is missing).
YAML::Node at_path(const YAML::Node& n, const std::string& path) {
  const std::size_t dot = path.find('.');
  const YAML::Node child = n[path.substr(0, dot)];
  if (dot == std::string::npos || !child.IsDefined()) return child;
  return at_path(child, path.substr(dot + 1));
}

/// A node's text: a scalar as written, a sequence or mapping in flow style.
std::string flow(const YAML::Node& n) {
  if (!n.IsDefined()) return "(absent)";
  if (n.IsScalar()) return n.Scalar();
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << n;
  return e.c_str();
}

/// The keys of a mapping, sorted (null or absent: none).
std::vector<std::string> keys_of(const YAML::Node& map) {
  std::vector<std::string> keys;
  if (map.IsMap())
    for (auto it = map.begin(); it != map.end(); ++it) keys.push_back(it->first.Scalar());
  std::sort(keys.begin(), keys.end());
  return keys;
}

/// A key table, sorted, without `except`.
std::vector<std::string> keys_of(std::span<const std::string_view> table,
                                 std::initializer_list<std::string_view> except = {}) {
  std::vector<std::string> keys;
  for (std::string_view k : table)
    if (std::find(except.begin(), except.end(), k) == except.end()) keys.emplace_back(k);
  std::sort(keys.begin(), keys.end());
  return keys;
}

/// One `--set key=value` and what config.resolved.yaml must then hold: `text` at `at` (by default
/// the value at the key itself).
struct Setting {
  std::string key, value, at, text;
  Setting(std::string k, std::string v, std::string a = "", std::string t = "")
      : key(std::move(k)),
        value(std::move(v)),
        at(a.empty() ? key : a),
        text(t.empty() ? value : t) {}
};

/// A scenario file's text and the settings applied to it.
struct Group {
  std::string name, base;
  std::vector<Setting> settings;
};

}  // namespace

TEST_CASE("a scenario that sets no key resolves to every key of every section", "[sim]") {
  const TempDir tmp("resolved-minimal");
  const fs::path file = tmp.path / "minimal.yaml";
  write_file(file, "model: {config: " + kModel +
                       "}\nworkload: {num_requests: 20, prompt_tokens: 8, output_tokens: 2}\n");
  const YAML::Node r = check_round_trip(file, {}, tmp.path / "run");
  // A run is one point of a sweep; cluster is written only for a cluster of several replicas.
  CHECK(keys_of(r) == keys_of(kScenarioKeys, {"sweep", "cluster"}));
  // engine.fast_forward changes no output (a speed setting): not written.
  CHECK(keys_of(r["engine"]) == keys_of(kEngineKeys, {"fast_forward"}));
  CHECK_FALSE(r["engine"]["fast_forward"]);
  // A link latency of 0, no hybrid-manager choice and no CPU tier are not written.
  CHECK(keys_of(r["hardware"]) == keys_of(kHardwareKeys, {"host_link_latency_us"}));
  CHECK(keys_of(r["cache"]) ==
        keys_of(kCacheKeys, {"mamba_cache_mode", "disable_hybrid_kv_cache_manager",
                             "kv_offloading_size", "kv_offloading_capacity_tokens",
                             "kv_offloading_backend", "kv_offloading_block_size",
                             "kv_offloading_eviction_policy", "kv_offloading_store_threshold"}));
  // The default profile, vllm-0.20, has every scheduler key.
  CHECK(keys_of(r["scheduler"]) == keys_of(kSchedulerKeys));
  CHECK(keys_of(r["validate"]) == keys_of(kValidateKeys));
  CHECK(keys_of(r["outputs"]) == keys_of(kOutputsKeys));
  CHECK(keys_of(r["workload"]) == keys_of(kWorkloadKeys, {"trace"}));
  CHECK(keys_of(r["workload"]["arrival"]) ==
        keys_of(arrival_keys(ArrivalConfig::Process::kPoisson)));
  CHECK(keys_of(r["latency"]) == keys_of(latency_keys(LatencyConfig::Kind::kRoofline)));
  // The model: every field the simulator reads, under the first of its HF aliases.
  // (architectures and cache.mamba_cache_mode are written for a model with mamba layers only.)
  CHECK(keys_of(r["model"]) == std::vector<std::string>{"config",
                                                        "dtype",
                                                        "gated_mlp",
                                                        "head_dim",
                                                        "hidden_size",
                                                        "intermediate_size",
                                                        "kv_lora_rank",
                                                        "max_position_embeddings",
                                                        "model_type",
                                                        "n_routed_experts",
                                                        "name",
                                                        "num_attention_heads",
                                                        "num_hidden_layers",
                                                        "num_key_value_heads",
                                                        "num_parameters",
                                                        "sliding_window",
                                                        "tie_word_embeddings",
                                                        "use_sliding_window",
                                                        "vocab_size",
                                                        "weight_format"});
  // The defaults, spelled out; an absent optional is null.
  CHECK(text(r["name"]) == "minimal");
  CHECK(text(r["seed"]) == "0");
  CHECK(text(r["engine"]["profile"]) == "vllm-0.20");
  CHECK(text(r["hardware"]["gpu"]) == "H100-80GB");
  CHECK(text(r["cache"]["gpu_memory_utilization"]) == "0.92");
  CHECK(text(r["scheduler"]["max_num_seqs"]) == "1024");
  CHECK(text(r["scheduler"]["async_scheduling"]) == "true");
  CHECK(text(r["scheduler"]["scheduler_reserve_full_isl"]) == "true");
  CHECK(text(r["cache"]["activation_reserve_bytes"]) == "2147483648");
  CHECK(text(r["scheduler"]["max_model_len"]) == "131072");
  CHECK(text(r["workload"]["arrival"]["rate_per_s"]) == "10");
  CHECK(text(r["model"]["weight_format"]["method"]) == "none");
  CHECK(text(r["model"]["weight_format"]["expert_bytes_per_param"]) == "2");
  for (const char* key :
       {"model.sliding_window", "model.num_parameters", "cache.kv_cache_memory_bytes",
        "cache.num_gpu_blocks_override", "cache.capacity_tokens", "workload.duration_s",
        "workload.system_prompts", "workload.few_shot", "workload.sessions",
        "workload.eos_token_id", "workload.stop_at_eos_fraction", "workload.client_timeout_s",
        "scheduler.enable_chunked_prefill", "scheduler.preemption_mode"}) {
    INFO(key);
    CHECK(at_path(r, key).IsNull());
  }
}

TEST_CASE("a non-default value of every key round-trips through config.resolved.yaml", "[sim]") {
  const TempDir tmp("resolved-all-keys");
  write_file(tmp.path / "t.csv",
             "arrival_s,prompt_tokens,output_tokens,prefix_group\n"
             "0,100,20,0\n0.5,120,10,0\n0.75,90,30,1\n1,300,5,-1\n2,80,15,1\n3,60,40,0\n");
  write_file(
      tmp.path / "m.jsonl",
      "{\"timestamp\": 0, \"input_length\": 300, \"output_length\": 6, \"hash_ids\": [0, 1]}\n"
      "{\"timestamp\": 10, \"input_length\": 256, \"output_length\": 4, \"hash_ids\": [0]}\n");
  LatencyFit fit;
  fit.coefficients_us = {900.0, 0.05, 2.5, 0.001, 1e-7, 10.0};
  write_file(tmp.path / "fit.yaml", fit_to_yaml(fit, "measurements.csv"));
  write_file(tmp.path / "lens.csv", "prompt_tokens,output_tokens\n10,3\n20,5\n7,1\n");
  const std::string dir = tmp.path.string() + "/";
  const std::string timed_base =
      "model: {config: " + kModel +
      "}\nworkload: {prompt_tokens: {uniform: {min: 1, max: 2}}, output_tokens: {fixed: 1}}\n";
  const std::string cache_only_base = "workload: {trace: {format: csv, path: t.csv}}\n";
  const std::vector<Group> groups = {
      {"timed-roofline",
       timed_base,
       {{"name", "all-keys"},
        {"seed", "7"},
        {"engine.profile", profiles().back().name},  // not the default
        {"engine.contiguous_fit", "best_fit"},
        {"model.name", "renamed"},
        {"model.num_key_value_heads", "4"},
        {"model.max_position_embeddings", "4096"},
        {"model.gated_mlp", "false"},
        {"model.quantization", "fp8", "model.weight_format.method"},  // resolved as the format
        {"model.sliding_window", "1024"},
        {"model.use_sliding_window", "true"},  // the file says false
        {"model.num_parameters", "1500000000"},
        {"hardware.gpu", "A100-80GB"},
        {"hardware.tensor_parallel_size", "2"},
        {"hardware.gpu_memory_bytes", "80000000000"},
        {"hardware.peak_flops_per_s", "3e14", "", "300000000000000"},
        {"hardware.hbm_bytes_per_s", "2e12", "", "2000000000000"},
        {"hardware.host_link_bytes_per_s", "3.2e10", "", "32000000000"},
        {"cache.block_size", "32"},
        {"cache.gpu_memory_utilization", "0.85"},
        {"cache.kv_cache_memory_bytes", "2000000000"},
        {"cache.activation_reserve_bytes", "1000000000"},
        {"cache.cache_dtype", "fp8"},
        {"cache.enable_prefix_caching", "false"},
        {"cache.num_preallocate_tokens", "16"},
        {"scheduler.max_num_seqs", "8"},
        {"scheduler.max_num_batched_tokens", "1024"},
        {"scheduler.max_model_len", "2048"},
        {"validate.backend", "cuda"},
        {"validate.sample_every_steps", "5"},
        {"validate.sample_prob", "0.25"},
        {"validate.dtype", "float16"},
        {"outputs.trace_json", "true"},
        {"outputs.metrics_prom", "true"},
        {"outputs.steps_every", "3"},
        {"workload.num_requests", "20"},
        {"workload.duration_s", "50"},
        {"workload.arrival.process", "gamma"},
        {"workload.arrival.rate_per_s", "30"},
        {"workload.arrival.cv", "2"},
        {"workload.prompt_tokens.uniform.min", "10"},
        {"workload.prompt_tokens.uniform.max", "50"},
        {"workload.prompt_tokens.max", "40"},
        {"workload.output_tokens.fixed", "4"},
        {"workload.system_prompts.count", "2"},
        {"workload.system_prompts.tokens", "16", "workload.system_prompts.tokens.fixed"},
        {"workload.system_prompts.popularity.zipf", "1.2"},
        {"workload.system_prompts.share", "0.5"},
        {"workload.few_shot.count", "2"},
        {"workload.few_shot.examples", "2"},
        {"workload.few_shot.example_tokens", "8", "workload.few_shot.example_tokens.fixed"},
        {"workload.few_shot.popularity.zipf", "0.5"},
        {"workload.few_shot.share", "0.75"},
        {"workload.sessions.turns", "2", "workload.sessions.turns.fixed"},
        {"workload.sessions.think_time_s", "0.5", "workload.sessions.think_time_s.fixed"},
        {"workload.sessions.user_tokens", "6", "workload.sessions.user_tokens.fixed"},
        {"workload.ignore_eos", "false"},
        {"workload.eos_token_id", "3"},
        {"workload.client_timeout_s", "2.5"},
        {"latency.model", "roofline"},
        {"latency.mfu", "0.4"},
        {"latency.mbu", "0.7"},
        {"latency.step_overhead_us", "500"},
        {"latency.interconnect_bytes_per_s", "1e11", "", "100000000000"},
        {"latency.allreduce_latency_us", "5"}}},
      {"v0-fanout",
       timed_base,
       {{"engine.profile", "vllm-0.7.2-v0"},
        {"cache.swap_space", "2.5"},
        {"scheduler.enable_chunked_prefill", "true"},
        {"scheduler.preemption_mode", "recompute"},
        {"scheduler.scheduling_policy", "priority"},
        {"scheduler.on_swap_space_exhausted", "recompute"},
        {"workload.num_requests", "4"},
        {"workload.n", "3"}}},
      {"v0-fork",
       timed_base,
       {{"engine.profile", "vllm-0.7.2-v0"},
        {"scheduler.preemption_mode", "swap"},
        {"workload.num_requests", "3"},
        {"workload.n", "2"},
        {"workload.parallel_sampling", "fork"}}},
      {"cache-only-csv",
       cache_only_base,
       {{"engine.mode", "cache_only"},
        {"engine.profile", "vllm-0.8.5"},
        {"scheduler.long_prefill_token_threshold", "64"},
        {"cache.num_gpu_blocks_override", "400"},
        {"workload.trace.format", "csv"},
        {"workload.trace.path", "t.csv", "", dir + "t.csv"},
        {"workload.trace.time_scale", "0.5"},
        {"workload.trace.max_requests", "4"},
        {"workload.trace.prefix_tokens", "8"},
        {"workload.num_requests", "5", "workload.trace.max_requests", "4"},
        {"workload.client_timeout_s", "0.5"}}},
      {"cache-only-mooncake",
       cache_only_base,
       {{"engine.mode", "cache_only"},
        {"cache.capacity_tokens", "5000"},
        {"workload.trace.format", "mooncake"},
        {"workload.trace.path", "m.jsonl", "", dir + "m.jsonl"},
        {"workload.trace.hash_block_tokens", "256"}}},
      {"cache-only-cluster",
       cache_only_base,
       {{"engine.mode", "cache_only"},
        {"cache.num_gpu_blocks_override", "400"},
        {"workload.trace.format", "csv"},
        {"workload.trace.path", "t.csv", "", dir + "t.csv"},
        {"cluster.replicas", "3"},
        {"cluster.router.policy", "prefix_hash"},
        {"cluster.router.seed", "7"},
        {"cluster.router.k", "3"}}},
      {"fitted-bursts",
       timed_base,
       {{"latency.model", "fitted"},
        {"latency.file", "fit.yaml", "", dir + "fit.yaml"},
        {"latency.coefficients.intercept", "900"},
        {"latency.coefficients.prefill_tokens", "0.05"},
        {"latency.coefficients.decode_tokens", "2.5"},
        {"latency.coefficients.sum_context_tokens", "0.001"},
        {"latency.coefficients.sum_context_sq", "1e-07"},
        {"latency.coefficients.num_seqs", "10"},
        {"workload.num_requests", "12"},
        {"workload.arrival.process", "bursts"},
        {"workload.arrival.burst_size", "4"},
        {"workload.arrival.interval_s", "0.5"},
        {"workload.arrival.spacing_s", "0.01"},
        {"workload.eos_token_id", "5"},
        {"workload.stop_at_eos_fraction", "0.25"}}},
      {"vllm-0.20-scheduler",
       timed_base,
       {{"engine.profile", "vllm-0.20"},
        {"scheduler.async_scheduling", "false"},  // vLLM v0.20's defaults are true
        {"scheduler.scheduler_reserve_full_isl", "false"},
        {"cache.mamba_cache_mode", "align"}}},  // kept as given: the model has no mamba layers
      {"vllm-0.20-cpu-tier",
       timed_base,
       {{"engine.profile", "vllm-0.20"},
        {"scheduler.async_scheduling", "false"},  // the tier's loop
        {"hardware.host_link_latency_us", "5"},
        {"cache.disable_hybrid_kv_cache_manager", "true"},
        {"cache.kv_offloading_size", "0.5"},
        {"cache.kv_offloading_backend", "native"},
        {"cache.kv_offloading_block_size", "32"},
        {"cache.kv_offloading_eviction_policy", "arc"},
        {"cache.kv_offloading_store_threshold", "2"}}},
      {"cache-only-cpu-tier",
       cache_only_base,
       {{"engine.mode", "cache_only"},
        {"engine.profile", "vllm-0.20"},
        {"cache.num_gpu_blocks_override", "400"},
        {"cache.kv_offloading_capacity_tokens", "4096"},
        {"workload.trace.format", "csv"},
        {"workload.trace.path", "t.csv", "", dir + "t.csv"}}},
      {"joint-lengths",
       "model: {config: " + kModel + "}\nworkload: {num_requests: 4}\n",
       {{"workload.lengths", "lens.csv", "", dir + "lens.csv"}}},
      {"constant-timestamps",
       timed_base,
       {{"latency.model", "constant"},
        {"latency.step_time_us", "2000"},
        {"workload.arrival.process", "timestamps"},
        {"workload.arrival.times_s", "[0, 0.1, 0.2]"}}},
  };

  // Every key of every table is set somewhere above (a key added to a parser's table without a
  // setting here fails this).
  const auto covered = [&](const std::string& prefix, std::string_view key) {
    const std::string path = prefix + std::string(key);
    for (const Group& g : groups)
      for (const Setting& s : g.settings)
        if (s.key == path || s.key.starts_with(path + ".")) return true;
    return false;
  };
  const auto check_table = [&](const std::string& prefix, std::span<const std::string_view> keys) {
    for (std::string_view k : keys) {
      INFO(prefix << k);
      CHECK(covered(prefix, k));
    }
  };
  for (std::string_view k : kScenarioKeys) {
    INFO(k);
    CHECK((k == "sweep" || covered("", k)));  // a run is one point of a sweep
  }
  // (engine.fast_forward is not written: a speed setting that changes no output.)
  std::vector<std::string_view> engine_keys;
  for (std::string_view k : kEngineKeys)
    if (k != "fast_forward") engine_keys.push_back(k);
  check_table("engine.", engine_keys);
  check_table("hardware.", kHardwareKeys);
  check_table("cache.", kCacheKeys);
  check_table("scheduler.", kSchedulerKeys);
  check_table("validate.", kValidateKeys);
  check_table("outputs.", kOutputsKeys);
  check_table("workload.", kWorkloadKeys);
  for (auto p : {ArrivalConfig::Process::kPoisson, ArrivalConfig::Process::kGamma,
                 ArrivalConfig::Process::kConstant, ArrivalConfig::Process::kBursts,
                 ArrivalConfig::Process::kTimestamps, ArrivalConfig::Process::kAllAtOnce})
    check_table("workload.arrival.", arrival_keys(p));
  check_table("workload.system_prompts.", kSystemPromptsKeys);
  check_table("workload.few_shot.", kFewShotKeys);
  check_table("workload.sessions.", kSessionKeys);
  check_table("workload.trace.", kTraceKeys);
  for (auto k : {LatencyConfig::Kind::kRoofline, LatencyConfig::Kind::kFitted,
                 LatencyConfig::Kind::kConstant})
    check_table("latency.", latency_keys(k));

  std::map<std::string, YAML::Node> resolved;
  for (const Group& g : groups) {
    INFO(g.name);
    const fs::path file = tmp.path / (g.name + ".yaml");
    write_file(file, g.base);
    std::vector<std::string> sets;
    for (const Setting& s : g.settings) sets.push_back(s.key + "=" + s.value);
    const YAML::Node r = check_round_trip(file, sets, tmp.path / g.name);
    for (const Setting& s : g.settings) {
      INFO(s.key << "=" << s.value);
      CHECK(flow(at_path(r, s.at)) == s.text);
    }
    resolved[g.name] = r;
  }
  // The keys of the forms the groups use: those of the form, no others.
  const YAML::Node all = resolved.at("timed-roofline")["workload"];
  CHECK(keys_of(all["arrival"]) == keys_of(arrival_keys(ArrivalConfig::Process::kGamma)));
  CHECK(keys_of(all["system_prompts"]) == keys_of(kSystemPromptsKeys));
  CHECK(keys_of(all["few_shot"]) == keys_of(kFewShotKeys));
  CHECK(keys_of(all["sessions"]) == keys_of(kSessionKeys));
  const YAML::Node csv = resolved.at("cache-only-csv");
  CHECK(keys_of(csv["workload"]) ==
        std::vector<std::string>{"client_timeout_s", "eos_token_id", "ignore_eos", "n",
                                 "parallel_sampling", "trace"});
  CHECK(keys_of(csv["workload"]["trace"]) == keys_of(kTraceKeys, {"hash_block_tokens"}));
  CHECK(csv["latency"].IsNull());  // cache_only reads no latency model
  CHECK(keys_of(resolved.at("cache-only-mooncake")["workload"]["trace"]) ==
        keys_of(kTraceKeys, {"prefix_tokens"}));
  const YAML::Node fitted = resolved.at("fitted-bursts");
  CHECK(fitted["workload"]["ignore_eos"].IsNull());  // stop_at_eos_fraction replaces it
  CHECK(keys_of(fitted["latency"]) == keys_of(latency_keys(LatencyConfig::Kind::kFitted)));
  CHECK(keys_of(fitted["workload"]["arrival"]) ==
        keys_of(arrival_keys(ArrivalConfig::Process::kBursts)));
  const YAML::Node constant = resolved.at("constant-timestamps");
  CHECK(keys_of(constant["latency"]) == keys_of(latency_keys(LatencyConfig::Kind::kConstant)));
  CHECK(keys_of(constant["workload"]["arrival"]) ==
        keys_of(arrival_keys(ArrivalConfig::Process::kTimestamps)));
}

TEST_CASE("fit files and empirical-length CSVs are read once, when the scenario loads", "[sim]") {
  const TempDir tmp("resolved-read-once");
  write_file(tmp.path / "lengths.csv", "len\n100\n250\n40\n700\n");
  LatencyFit fit;
  fit.coefficients_us = {900.0, 0.05, 2.5, 0.001, 1e-7, 10.0};
  write_file(tmp.path / "fit.yaml", fit_to_yaml(fit, "measurements.csv"));
  const fs::path file = tmp.path / "s.yaml";
  write_file(file, timed_scenario("  num_requests: 20\n  prompt_tokens: {empirical: {file: "
                                  "lengths.csv, column: len}}\n  output_tokens: 5\n",
                                  "{model: fitted, file: fit.yaml}"));
  const Scenario s = load_scenario(file.string(), {});
  fs::rename(tmp.path / "lengths.csv", tmp.path / "lengths.away");
  fs::rename(tmp.path / "fit.yaml", tmp.path / "fit.away");
  // Neither the run nor its config.resolved.yaml reads them again.
  const fs::path a = run_scenario(s, tmp.path / "a").folder;
  CHECK_THAT(slurp(a / "config.resolved.yaml"), Catch::Contains((tmp.path / "fit.yaml").string()));
  fs::rename(tmp.path / "lengths.away", tmp.path / "lengths.csv");
  fs::rename(tmp.path / "fit.away", tmp.path / "fit.yaml");
  const fs::path b = run_scenario(load_scenario(file.string(), {}), tmp.path / "b").folder;
  for (const char* name : {"summary.json", "requests.csv", "steps.csv", "config.resolved.yaml"})
    CHECK(slurp(a / name) == slurp(b / name));
}
