// Randomized robustness: mutated scenario sections, model configs and trace rows must either parse
// or throw ConfigError; any other exception (or a crash) is a bug. Fixed seeds; the failing input
// is printed.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/engine_factory.h"
#include "sim/common/rng.h"
#include "sim/common/yaml_util.h"
#include "sim/config/hardware.h"
#include "sim/config/kv_sizing_io.h"
#include "sim/config/model_config.h"
#include "sim/config/scenario.h"
#include "sim/engine/latency_model.h"
#include "sim/workload/distribution.h"
#include "sim/workload/samplers.h"
#include "sim/workload/workload.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {

constexpr std::string_view kAlphabet = "{}[]:,-\"' \n\t#&*!|>%@`0123456789.eE+~abcxyz_";

std::string mutate(const std::string& text, RngStream& r) {
  std::string s = text;
  const std::int64_t edits = uniform_int(r, 1, 4);
  for (std::int64_t e = 0; e < edits; ++e) {
    const std::int64_t n = static_cast<std::int64_t>(s.size());
    const auto pos = static_cast<std::size_t>(uniform_int(r, 0, std::max<std::int64_t>(0, n - 1)));
    const char c = kAlphabet[static_cast<std::size_t>(
        uniform_int(r, 0, static_cast<std::int64_t>(kAlphabet.size()) - 1))];
    switch (uniform_int(r, 0, 4)) {
      case 0:
        if (!s.empty()) s[pos] = c;
        break;  // replace
      case 1:
        s.insert(pos, 1, c);
        break;  // insert
      case 2:
        if (!s.empty()) s.erase(pos, 1);
        break;  // delete
      case 3:
        s.resize(static_cast<std::size_t>(uniform_int(r, 0, n)));
        break;  // truncate
      case 4:
        if (n > 2) s.insert(pos, s.substr(pos / 2, static_cast<std::size_t>(uniform_int(r, 1, 8))));
        break;
    }
  }
  return s;
}

// Runs fn; only ConfigError may escape. Returns false (and reports) on any other exception.
template <class F>
bool only_config_errors(const std::string& input, F&& fn) {
  try {
    fn();
  } catch (const ConfigError&) {
  } catch (const std::exception& e) {
    FAIL_CHECK("non-ConfigError exception '" << e.what() << "' for input:\n" << input);
    return false;
  }
  return true;
}

/// Parses `input`, writes its resolved configuration, parses that again and requires the same
/// resolution (a fixed point). Returns the two scenarios (the input's, the resolved one's).
std::pair<Scenario, Scenario> round_trip(const std::string& input) {
  Scenario s = parse_scenario(load_yaml_string(input, "fuzz.yaml"), "fuzz.yaml");
  const std::string resolved = resolved_yaml(s);
  INFO("resolved:\n" << resolved);
  Scenario again = parse_scenario(load_yaml_string(resolved, "r.yaml"), "r.yaml");
  REQUIRE(resolved_yaml(again) == resolved);
  return {std::move(s), std::move(again)};
}

/// `iters` mutations of `text`: each throws ConfigError, or round-trips (round_trip) and passes
/// `check(input's scenario, resolved one's)`. Returns how many round-tripped; stops at the first
/// other exception (reported).
template <class F>
int mutated_round_trips(RngStream& r, int iters, const std::string& text, F&& check) {
  int ok = 0;
  for (int iter = 0; iter < iters; ++iter) {
    const std::string input = mutate(text, r);
    if (!only_config_errors(input, [&] {
          const auto [s, again] = round_trip(input);
          check(s, again);
          ++ok;
        }))
      break;
  }
  return ok;
}

const char* const kWorkloads[] = {
    R"(num_requests: 20
arrival: {process: poisson, rate_per_s: 20}
system_prompts: {count: 4, tokens: 100, popularity: {zipf: 1.1}, share: 0.5}
few_shot: {count: 2, examples: 3, example_tokens: {uniform: {min: 5, max: 9}}}
prompt_tokens: {lognormal: {mean: 300, sigma: 0.8}, max: 2000}
output_tokens: {gamma: {mean: 50, cv: 2}}
sessions: {turns: {zipf: {n: 5, s: 1}}, think_time_s: {exponential: {mean: 3}}, user_tokens: {normal: {mean: 40, std: 5}}}
eos_token_id: 2
stop_at_eos_fraction: 0.4
client_timeout_s: 30
)",
    R"(num_requests: 10
duration_s: 100
arrival: {process: bursts, burst_size: 3, interval_s: 2, spacing_s: 0.1}
prompt_tokens: {fixed: 64}
output_tokens: 8
ignore_eos: false
eos_token_id: 2
client_timeout_s: 0.5
)",
    R"(arrival: {process: timestamps, times_s: [0, 0.1, 0.2, 5]}
prompt_tokens: [1, 2]
output_tokens: {uniform: {min: 1, max: 4}}
)",
};

}  // namespace

TEST_CASE("mutated workload YAML parses or throws ConfigError, never anything else", "[sim]") {
  RngStream r = make_stream(2024, "fuzz.workload");
  int ok = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const std::string input = mutate(kWorkloads[iter % 3], r);
    bool parsed = false;
    if (!only_config_errors(input, [&] {
          YAML::Node root = load_yaml_string(input, "fuzz.yaml");
          auto src = make_request_source(
              parse_workload_config(root, YamlContext{"fuzz.yaml", "workload"}), 1, 1000);
          int n = 0;
          while (n < 30) {
            auto req = kvsim::test::next_made(*src);
            if (!req) break;
            ++n;
            REQUIRE(!req->prompt.empty());
            REQUIRE(req->output_tokens >= 1);
            REQUIRE((!req->max_tokens || *req->max_tokens >= 1));
            std::vector<std::int32_t> out(static_cast<std::size_t>(std::min(req->output_tokens, 4)),
                                          7);
            (void)src->on_finished(*req, req->arrival_ns + 1000, out);
          }
          parsed = true;
        }))
      break;
    ok += parsed;
  }
  CHECK(ok > 0);
}

TEST_CASE("mutated model, hardware, cache and latency sections parse or throw ConfigError",
          "[sim]") {
  RngStream r = make_stream(2025, "fuzz.sections");
  const std::string json = R"({"model_type": "llama", "hidden_size": 256, "num_hidden_layers": 4,
 "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000, "intermediate_size": 512,
 "torch_dtype": "bfloat16", "text_config": {"max_position_embeddings": 4096},
 "kv_lora_rank": 0, "n_routed_experts": 0})";
  const std::string sections =
      R"(model: {num_hidden_layers: 4, num_attention_heads: 8, hidden_size: 256, vocab_size: 1000, torch_dtype: float16}
hardware: {gpu: A100-40GB, tensor_parallel_size: 2}
cache: {block_size: 16, gpu_memory_utilization: 0.8, kv_cache_memory_bytes: 1e9}
latency: {model: roofline, mfu: 0.4, mbu: 0.7}
)";
  for (int iter = 0; iter < 1500; ++iter) {
    const std::string j = mutate(json, r);
    if (!only_config_errors(j, [&] { (void)parse_model_config_json(j, "fuzz.json"); })) break;
    const std::string y = mutate(sections, r);
    if (!only_config_errors(y, [&] {
          YAML::Node root = load_yaml_string(y, "fuzz.yaml");
          require_map(root, YamlContext{"fuzz.yaml", ""});
          const YamlContext top{"fuzz.yaml", ""};
          const ModelConfig m = load_model_config(root["model"], top.child("model"));
          const HardwareConfig hw = load_hardware(root["hardware"], top.child("hardware"));
          const CacheSizingConfig c = load_cache_sizing(root["cache"], top.child("cache"));
          const KVCachePlan plan = plan_kv_cache(m, hw, c, "fuzz.yaml");
          REQUIRE(plan.sizing.num_gpu_blocks >= 1);
          auto lat = make_latency_model(parse_latency_config(root["latency"], top.child("latency")),
                                        m, hw.gpu, static_cast<int>(hw.tensor_parallel_size));
          BatchFeatures b{.num_seqs = 2,
                          .prefill_tokens = 100,
                          .decode_tokens = 1,
                          .sum_context_tokens = 300,
                          .sum_context_sq = 50000,
                          .num_prefill_seqs = 1};
          REQUIRE(lat->step_time_ns(b) >= 1);
        }))
      break;
  }
}

TEST_CASE("mutated trace rows parse or throw ConfigError with the file name", "[sim]") {
  RngStream r = make_stream(2026, "fuzz.traces");
  const auto dir = std::filesystem::temp_directory_path() / "kvsim_test_fuzz";
  std::filesystem::create_directories(dir);
  struct Corpus {
    const char* format;
    const char* name;
    std::string text;
  };
  const std::vector<Corpus> corpora = {
      {"azure", "a.csv",
       "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
       "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:15:51.0000000,12,0\n"},
      {"mooncake", "m.jsonl",
       "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 6, \"hash_ids\": [0, 1]}\n"
       "{\"timestamp\": 10, \"input_length\": 512, \"output_length\": 4, \"hash_ids\": [0], "
       "\"max_tokens\": 3, \"ignore_eos\": false, \"eos_token_id\": 7}\n"},
      {"csv", "g.csv",
       "arrival_s,prompt_tokens,output_tokens,prefix_group,prefix_tokens,max_tokens,ignore_eos,"
       "eos_token_id\n0,10,2,1,4,,,\n0.5,20,3,1,,5,false,9\n1,5,1,-1,0,2,true,\n"},
      {"jsonl", "g.jsonl",
       "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 2, \"prefix_group\": 0}\n"
       "{\"arrival_s\": 1.5, \"prompt_tokens\": 3, \"output_tokens\": 1, \"max_tokens\": 4, "
       "\"ignore_eos\": false, \"eos_token_id\": 11}\n"},
  };
  int parsed = 0;  // mutated traces read to the end
  for (int iter = 0; iter < 1200; ++iter) {
    const Corpus& c = corpora[static_cast<std::size_t>(iter) % corpora.size()];
    const std::string text = mutate(c.text, r);
    const std::string path = (dir / c.name).string();
    std::ofstream(path, std::ios::binary) << text;
    const std::string yaml =
        std::string("trace: {format: ") + c.format + ", path: '" + path + "', prefix_tokens: 3}";
    bool bad_message = false;
    if (!only_config_errors(text, [&] {
          try {
            auto src = make_request_source(
                parse_workload_config(YAML::Load(yaml), YamlContext{"s.yaml", "workload"}), 3, 500);
            while (auto req = kvsim::test::next_made(*src)) {
              REQUIRE(!req->prompt.empty());
              REQUIRE(req->output_tokens >= 1);
              REQUIRE((!req->max_tokens || *req->max_tokens >= 1));
              REQUIRE(
                  (!req->eos_token_id || (*req->eos_token_id >= 0 && *req->eos_token_id < 500)));
              // A request that stops at EOS sends max_tokens only when its row gives one.
              REQUIRE((req->stops_at_eos() || req->max_tokens.has_value()));
            }
            ++parsed;
          } catch (const ConfigError& e) {
            bad_message = std::string(e.what()).rfind(path, 0) != 0;
            throw;
          }
        }))
      break;
    if (bad_message) {
      FAIL_CHECK("trace error without the file name for input:\n" << text);
      break;
    }
  }
  CHECK(parsed > 0);
}

TEST_CASE("mutated measurement and empirical-length CSVs parse or throw ConfigError", "[sim]") {
  RngStream r = make_stream(2027, "fuzz.csv");
  const kvsim::test::TempDir dir("fuzz-csv");
  const std::string path = (dir.path / "meas.csv").string();
  int fits = 0, dists = 0;  // mutated inputs that parsed all the way
  const std::string text =
      "num_seqs,prefill_tokens,decode_tokens,sum_context_tokens,sum_context_sq,num_prefill_seqs,"
      "step_time_us\n"
      "4,512,3,900,300000,1,2100.5\n8,0,8,4000,2100000,0,1500\n2,2048,1,3000,4200000,1,5200\n";
  for (int iter = 0; iter < 800; ++iter) {
    const std::string t = mutate(text, r);
    std::ofstream(path, std::ios::binary) << t;
    if (!only_config_errors(t, [&] {
          std::vector<BatchFeatures> b;
          std::vector<double> y;
          read_measurements_csv(path, b, y);
          REQUIRE(!b.empty());
          REQUIRE(y.size() == b.size());
          for (double v : y) REQUIRE(v >= 0);
          const LatencyFit fit = fit_latency(b, y);
          REQUIRE(fit.rows == static_cast<std::int64_t>(b.size()));
          ++fits;
        }))
      break;
    YAML::Node d = YAML::Load("{empirical: {file: '" + path + "', column: step_time_us}}");
    if (!only_config_errors(t, [&] {
          const Distribution dist =
              Distribution::parse(d, YamlContext{"s.yaml", "x"}, 1, 1e9, true);
          RngStream s = make_stream(1, "e");
          REQUIRE(dist.sample_int(s) >= 1);
          ++dists;
        }))
      break;
  }
  // Some mutations must survive, or the loops above checked only the error path.
  CHECK(fits > 0);
  CHECK(dists > 0);
}

TEST_CASE("a mutated scenario that loads resolves to a fixed point", "[sim]") {
  RngStream r = make_stream(2028, "fuzz.scenario");
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";
  int ok = 0;
  for (int iter = 0; iter < 600; ++iter) {
    std::string workload;
    std::istringstream lines(kWorkloads[iter % 3]);
    for (std::string line; std::getline(lines, line);) workload += "  " + line + "\n";
    const std::string text =
        "name: f\nseed: 3\nmodel: {config: '" + model + "', num_hidden_layers: 4}\n" +
        "hardware: {gpu: A100-40GB, tensor_parallel_size: 2}\n"
        "cache: {block_size: 16, kv_cache_memory_bytes: 1e9, enable_prefix_caching: false}\n"
        "scheduler: {max_num_seqs: 32, max_model_len: 4096}\n"
        "workload:\n" +
        workload +
        "latency: {model: roofline, mfu: 0.4}\nvalidate: {sample_prob: 0.5}\n"
        "outputs: {steps_every: 3}\n";
    const std::string input = mutate(text, r);
    if (!only_config_errors(input, [&] {
          const auto [s, again] = round_trip(input);
          REQUIRE(again.num_gpu_blocks == s.num_gpu_blocks);
          ++ok;
        }))
      break;
  }
  CHECK(ok > 0);
}

TEST_CASE("a mutated vLLM V0 scenario that loads resolves to a fixed point and builds its engine",
          "[sim]") {
  // The V0 keys (swap space, preemption mode, chunked prefill, policy, the swap-exhausted policy,
  // the host link) and parallel sampling, mutated: ConfigError or a scenario whose resolved text
  // is a fixed point and whose engine builds.
  RngStream r = make_stream(2031, "fuzz.v0");
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";
  const std::string text =
      "name: f\nengine:\n  profile: vllm-0.7.2-v0\nmodel: {config: '" + model +
      "'}\nhardware:\n  gpu: H100-80GB\n  host_link_bytes_per_s: 3.2e10\n"
      "cache:\n  block_size: 16\n  num_gpu_blocks_override: 300\n  swap_space: 0.5\n"
      "  enable_prefix_caching: true\n"
      "scheduler:\n  max_num_seqs: 32\n  max_num_batched_tokens: 2048\n  max_model_len: 2048\n"
      "  preemption_mode: swap\n  enable_chunked_prefill: false\n  scheduling_policy: fcfs\n"
      "  on_swap_space_exhausted: abort\n"
      "workload:\n  num_requests: 4\n  prompt_tokens: 40\n  output_tokens: 4\n  n: 3\n"
      "  parallel_sampling: fork\n"
      "latency: {model: constant, step_time_us: 100}\n";
  int ok = 0;
  for (int iter = 0; iter < 1500; ++iter) {
    const std::string input = mutate(text, r);
    if (!only_config_errors(input, [&] {
          const auto [s, again] = round_trip(input);
          REQUIRE(again.num_cpu_blocks == s.num_cpu_blocks);
          REQUIRE(make_engine(s.engine_params())->profile() == s.engine.profile);
          ++ok;
        }))
      break;
  }
  CHECK(ok > 0);
}

TEST_CASE("mutated hybrid, MoE and quantized model configs parse and size, or throw ConfigError",
          "[sim]") {
  RngStream r = make_stream(2026, "fuzz.model_configs");
  const char* const kModels[] = {"gpt-oss-20b",           "gemma-3-27b-it", "qwen3-next-80b-a3b",
                                 "llama-4-scout-17b-16e", "deepseek-v3",    "mistral-7b",
                                 "qwen3-30b-a3b"};
  int sized = 0;
  for (int iter = 0; iter < 700; ++iter) {
    const char* name = kModels[iter % 7];
    const std::string text = mutate(
        kvsim::test::slurp(std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" + name + ".json"),
        r);
    const KVSizingRules rules = static_cast<KVSizingRules>(iter % 3);
    if (!only_config_errors(text, [&] {
          const ModelConfig m = parse_model_config_json(text, "fuzz.json");
          CacheSizingConfig cache;
          cache.kv_cache_memory_bytes = std::int64_t{40} << 30;
          PoolRequest req;
          req.max_model_len = std::min<std::int64_t>(m.derived_max_model_len, 32768);
          const KVCachePlan plan =
              plan_kv_pool(m, HardwareConfig{gpu_preset("H100-80GB"), 8}, cache, req, rules);
          REQUIRE(plan.layout);
          REQUIRE(plan.layout->num_blocks >= 1);
          ++sized;
        }))
      break;
  }
  CHECK(sized > 50);  // most mutations still describe a model
}

TEST_CASE("mutated sizing questions parse and answer, or throw ConfigError", "[sim]") {
  RngStream r = make_stream(2027, "fuzz.kv_cases");
  const std::string dir = std::string(KVSIM_CASES_DIR) + "/kv-sizing-vllm-0.20.1/";
  const char* const kCases[] = {"synth_unify_page_sizes", "synth_sw_chunked_full_disable_hma",
                                "hybrid_gpt_oss_20b_override20000", "mamba_qwen3_next_80b_tp4"};
  int answered = 0;
  for (int iter = 0; iter < 400; ++iter) {
    nlohmann::json case_json =
        nlohmann::json::parse(kvsim::test::slurp(dir + kCases[iter % 4] + ".input.json"));
    case_json.erase("meta");
    std::string text;
    if (iter % 2 == 0) {
      text = mutate(case_json.dump(), r);  // bytes
    } else {                               // values: odd sizes, windows, memory and parallelism
      static const std::int64_t kValues[] = {0, 1, 3, 16, 17, 1000, 1 << 20, std::int64_t{1} << 40,
                                             -1};
      static const char* const kTop[] = {"block_size",
                                         "max_model_len",
                                         "max_num_batched_tokens",
                                         "available_memory_bytes",
                                         "num_gpu_blocks_override",
                                         "pipeline_parallel_size",
                                         "tensor_parallel_size"};
      static const char* const kLayer[] = {"num_kv_heads",     "head_size",
                                           "sliding_window",   "block_size",
                                           "page_size_padded", "attention_chunk_size"};
      for (int k = 0; k < 2; ++k) {
        const std::int64_t v = kValues[uniform_int(r, 0, 8)];
        if (uniform_int(r, 0, 1) == 0) {
          case_json[kTop[uniform_int(r, 0, 6)]] = v;
        } else {
          auto& layers = case_json["layers"];
          auto& l = layers[static_cast<std::size_t>(
              uniform_int(r, 0, static_cast<std::int64_t>(layers.size()) - 1))];
          l[kLayer[uniform_int(r, 0, 5)]] = v;
        }
      }
      text = case_json.dump();
    }
    if (!only_config_errors(text, [&] {
          const KVSizingCase c = parse_kv_sizing_case(text, "fuzz", 1);
          const KVSizingResult res = size_kv_pool(c.input, KVSizingRules::kV020Hybrid);
          REQUIRE(res.layout.has_value() != res.error.has_value());
          (void)kv_sizing_result_json(res, c.id).dump();
          ++answered;
        }))
      break;
  }
  CHECK(answered > 60);
}

TEST_CASE("a mutated CPU tier scenario that loads resolves to a fixed point with the same tier",
          "[sim][offload]") {
  // The tier's keys (size in GiB or tokens, backend, offloaded block size, policy, threshold, the
  // hybrid-manager flag, the link's latency), mutated: ConfigError, or a scenario whose resolved
  // text is a fixed point with the same tier, and whose engine and tier build.
  RngStream r = make_stream(2041, "fuzz.offload");
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";
  const std::string text =
      "name: f\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {config: '" +
      model +
      "', num_hidden_layers: 4}\n"
      "hardware: {gpu: H100, host_link_bytes_per_s: 2.5e10, host_link_latency_us: 8}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 300, kv_offloading_size: 0.25, "
      "kv_offloading_block_size: 32, kv_offloading_eviction_policy: arc, "
      "kv_offloading_store_threshold: 2, disable_hybrid_kv_cache_manager: true}\n"
      "scheduler: {max_num_seqs: 8, max_model_len: 4096, async_scheduling: false}\n"
      "workload: {num_requests: 4, prompt_tokens: 64, output_tokens: 4}\n"
      "latency: {model: constant, step_time_us: 1000}\n";
  const int ok = mutated_round_trips(r, 400, text, [](const Scenario& s, const Scenario& again) {
    REQUIRE(again.offload.has_value() == s.offload.has_value());
    if (s.offload) {
      REQUIRE(again.offload->num_cpu_blocks == s.offload->num_cpu_blocks);
      REQUIRE(again.offload->block_size_factor == s.offload->block_size_factor);
    }
    const auto source = make_request_source(s.workload, s.seed, 32000);
    Simulator sim(s, *source, nullptr);
    REQUIRE((sim.offload_tier() != nullptr) == s.offload.has_value());
  });
  CHECK(ok > 0);
}

TEST_CASE("a mutated cluster with overrides resolves to a fixed point with the same replicas",
          "[sim]") {
  // Replica groups with their own hardware, cache, scheduler and latency, mutated: ConfigError, or
  // a scenario whose resolved text is a fixed point giving every replica the same pool.
  RngStream r = make_stream(2043, "fuzz.overrides");
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";
  const std::string text =
      "name: f\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {config: '" +
      model +
      "', num_hidden_layers: 4}\n"
      "hardware: {gpu: H100}\n"
      "cache: {block_size: 16, kv_cache_memory_bytes: 1e9}\n"
      "scheduler: {max_num_seqs: 8, max_model_len: 4096}\n"
      "workload: {num_requests: 4, prompt_tokens: 64, output_tokens: 4}\n"
      "latency: {model: roofline}\n"
      "cluster:\n  replicas: 4\n  router: {policy: least_requests}\n  overrides:\n"
      "    - {replicas: [1, 3], hardware: {gpu: A100-40GB}, cache: {kv_cache_memory_bytes: "
      "5e8}}\n"
      "    - {replicas: [2], scheduler: {max_num_seqs: 4}, latency: {model: constant, "
      "step_time_us: 900}}\n";
  const int ok = mutated_round_trips(r, 400, text, [](const Scenario& s, const Scenario& again) {
    REQUIRE(again.cluster.replicas == s.cluster.replicas);
    REQUIRE(again.cluster.overrides.size() == s.cluster.overrides.size());
    for (std::int32_t i = 0; i < static_cast<std::int32_t>(s.cluster.replicas); ++i) {
      const ReplicaOverride* a = s.cluster.override_of(i);
      const ReplicaOverride* b = again.cluster.override_of(i);
      REQUIRE((a == nullptr) == (b == nullptr));
      if (a) REQUIRE(a->scenario->num_gpu_blocks == b->scenario->num_gpu_blocks);
    }
  });
  CHECK(ok > 0);
}

TEST_CASE("a mutated P/D cluster resolves to a fixed point with the same roles and transfer model",
          "[sim]") {
  // The P/D counts, the proxy and the transfer model's keys, with an override of the prefill
  // pool, mutated: ConfigError, or a scenario whose resolved text is a fixed point with the same
  // roles, proxy and transfer settings.
  RngStream r = make_stream(2047, "fuzz.pd");
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";
  const std::string text =
      "name: f\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {config: '" +
      model +
      "', num_hidden_layers: 4}\n"
      "hardware: {gpu: H100}\n"
      "cache: {block_size: 16, kv_cache_memory_bytes: 1e9}\n"
      "scheduler: {max_num_seqs: 8, max_model_len: 4096}\n"
      "workload: {num_requests: 4, prompt_tokens: 64, output_tokens: 4}\n"
      "cluster:\n  replicas: 3\n  prefill_replicas: 1\n  decode_replicas: 2\n"
      "  router: {policy: llm_d, pd: {proxy: llm_d, non_cached_tokens: 32, "
      "link_bandwidth_gb_per_s: 25, efficiency: 0.7, setup_ms: 0.2, handshake_ms: 40, "
      "proxy_hop_ms: 2, shared_nic: true}}\n"
      "  overrides:\n    - {replicas: [0], hardware: {gpu: A100-80GB}}\n";
  const int ok = mutated_round_trips(r, 400, text, [](const Scenario& s, const Scenario& again) {
    const ClusterConfig& a = s.cluster;
    const ClusterConfig& b = again.cluster;
    REQUIRE(b.replicas == a.replicas);
    REQUIRE(b.prefill_replicas == a.prefill_replicas);
    REQUIRE(b.decode_replicas == a.decode_replicas);
    for (std::int64_t i = 0; i < a.replicas; ++i) REQUIRE(b.role_of(i) == a.role_of(i));
    REQUIRE(b.router.policy == a.router.policy);
    const PdConfig& p = a.router.pd;
    const PdConfig& q = b.router.pd;
    REQUIRE(q.proxy == p.proxy);
    REQUIRE(q.non_cached_tokens == p.non_cached_tokens);
    REQUIRE(q.gpu_bytes_per_s() == p.gpu_bytes_per_s());
    REQUIRE(q.setup_ns == p.setup_ns);
    REQUIRE(q.handshake_ns == p.handshake_ns);
    REQUIRE(q.proxy_hop_ns == p.proxy_hop_ns);
    REQUIRE(q.shared_nic == p.shared_nic);
  });
  CHECK(ok > 0);
}
