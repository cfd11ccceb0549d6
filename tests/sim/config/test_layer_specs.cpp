// Per-layer KV specs and weights from config.json (sim/config/layer_specs.h, weights.h): the
// layers derived from each case's model config equal the layers vLLM's model classes gave, the
// weight formats, the derived max_model_len, explicit `layers:` lists, and one-line errors for bad
// configs.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/config/hardware.h"
#include "sim/config/kv_sizing_io.h"
#include "sim/config/layer_specs.h"
#include "sim/config/model_config.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;
using namespace kvsim;
using kvsim::test::error_of;
using nlohmann::json;

namespace {

const fs::path kCases = fs::path(KVSIM_CASES_DIR) / "kv-sizing-vllm-0.20.1";

std::string shipped(const std::string& name) {
  return std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" + name + ".json";
}

constexpr double kGiB = 1073741824.0;

}  // namespace

TEST_CASE("every model-config case's layers come out of its config.json as vLLM built them",
          "[sim]") {
  int checked = 0;
  for (const auto& e : fs::directory_iterator(kCases)) {
    const std::string name = e.path().filename().string();
    if (!name.ends_with(".input.json")) continue;
    const json input = json::parse(kvsim::test::slurp(e.path()));
    const json& meta = input["meta"];
    if (!meta["kvsim_args"].is_array() && !meta.contains("model_config")) continue;
    INFO(name);
    json question = input;
    question.erase("meta");
    const KVSizingCase c = parse_kv_sizing_case(question.dump(), name, 1);
    const ModelConfig m =
        load_model_config_file((kCases / meta["model_config"].get<std::string>()).string());
    KVLayerOptions o;
    o.tensor_parallel_size = input["tensor_parallel_size"].get<std::int64_t>();
    o.block_size = input["block_size"].get<std::int64_t>();
    o.kv_cache_dtype = meta.value("kv_cache_dtype", "auto");
    o.max_model_len = input["max_model_len"].get<std::int64_t>();
    if (m.model_type == "qwen3_next") o.block_size = 16;  // vLLM raises it to 272 itself
    const std::vector<NamedLayerSpec> got = model_layer_specs(m, o);
    REQUIRE(got.size() == c.input.layers.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("layer " << i);
      CHECK(got[i].name == c.input.layers[i].name);
      CHECK(got[i].spec == c.input.layers[i].spec);
    }
    ++checked;
  }
  CHECK(checked >= 25);  // every case but the four synthetic ones
}

TEST_CASE("Qwen3-Next's attention block is aligned to hold one linear-attention state", "[sim]") {
  const ModelConfig m = load_model_config_file(shipped("qwen3-next-80b-a3b"));
  KVLayerOptions o;
  o.max_model_len = 262'144;
  const std::vector<NamedLayerSpec> tp1 = model_layer_specs(m, o);
  CHECK(tp1[3].spec.block_size == 544);  // 2 KV heads of 256: 2,048 B per token
  CHECK(page_size_bytes(tp1[3].spec) == 1'114'112);
  CHECK(page_size_bytes(tp1[0].spec) == 1'114'112);  // the state, padded
  CHECK(tp1[0].spec.shapes == std::vector<std::vector<std::int64_t>>{{3, 8192}, {32, 128, 128}});
  o.rules = KVSizingRules::kV072Uniform;  // no alignment outside v0.20
  CHECK(model_layer_specs(m, o)[3].spec.block_size == 16);
  o.tensor_parallel_size = 3;  // 32 value heads do not split in 3
  CHECK(error_of([&] { (void)model_layer_specs(m, o); }).find("does not divide") !=
        std::string::npos);
}

TEST_CASE("weights by format: gpt-oss's MXFP4 experts fit gpt-oss-120b on one H100", "[sim]") {
  const ModelConfig big = load_model_config_file(shipped("gpt-oss-120b"));
  CHECK(big.weights.method == "mxfp4");
  CHECK(static_cast<double>(big.num_parameters) / 1e9 == Approx(116.8).epsilon(0.01));
  CHECK(static_cast<double>(big.weight_bytes()) / kGiB == Approx(60.7).epsilon(0.01));
  CHECK(static_cast<double>(load_model_config_file(shipped("gpt-oss-20b")).weight_bytes()) / kGiB ==
        Approx(12.8).epsilon(0.01));
  HardwareConfig hw{gpu_preset("H100-80GB"), 1};
  CacheSizingConfig cache;
  cache.gpu_memory_utilization = 0.92;
  PoolRequest req;
  req.max_model_len = 131'072;
  const KVCachePlan plan = plan_kv_pool(big, hw, cache, req, KVSizingRules::kV020Hybrid);
  CHECK(plan.budget.available_kv_bytes > 8 * std::int64_t{1} << 30);
  REQUIRE(plan.layout);
  CHECK(plan.layout->groups.size() == 2);
  CHECK(plan.layout->num_blocks ==
        plan.budget.available_kv_bytes / 32'768 / 18);  // 18 layers per block, not 36

  // DeepSeek-V3: fp8 linear layers with one float32 scale per 128 x 128 block; embeddings bf16.
  const ModelConfig ds = load_model_config_file(shipped("deepseek-v3"));
  CHECK(ds.weights.method == "fp8");
  CHECK(ds.weights.expert_bytes_per_param == 1.0 + 4.0 / 16384);
  const ParameterBreakdown p = parameter_breakdown(ds);
  CHECK(static_cast<double>(ds.weight_bytes()) ==
        Approx(p.embeddings * 2 + p.routers * 2 + (p.linear + p.experts) * (1 + 4.0 / 16384)));
}

TEST_CASE("awq, gptq and compressed-tensors weights use their group formulas", "[sim]") {
  const auto format = [](const std::string& q) {
    return parse_model_config_json(
               R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                   "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                   "intermediate_size": 14336, "torch_dtype": "float16",
                   "quantization_config": )" +
                   q + "}",
               "q.json")
        .weights;
  };
  WeightFormat f = format(R"({"quant_method": "awq", "bits": 4, "group_size": 128})");
  CHECK(f.linear_bytes_per_param == 0.5 + 2.5 / 128);  // values + fp16 scale + packed zero
  CHECK(f.other_bytes_per_param == 2);
  f = format(R"({"quant_method": "gptq", "bits": 8, "group_size": 64})");
  CHECK(f.linear_bytes_per_param == 1.0 + 3.0 / 64);
  f = format(R"({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights":
      {"num_bits": 4, "strategy": "group", "group_size": 128, "symmetric": true}}}})");
  CHECK(f.linear_bytes_per_param == 0.5 + 2.0 / 128);  // w4a16
  f = format(R"({"quant_method": "compressed-tensors", "config_groups": {"group_0": {"weights":
      {"num_bits": 8, "strategy": "channel"}}}})");
  CHECK(f.linear_bytes_per_param == 1.0);  // w8a8
  CHECK(error_of([&] { (void)format(R"({"quant_method": "bitsandbytes"})"); }) ==
        "q.json:4:44: field 'quantization_config.quant_method': unsupported method "
        "'bitsandbytes' (supported: fp8, mxfp4, awq, gptq, compressed-tensors)");
}

TEST_CASE("the resolved weight_format replaces quantization_config, and is checked", "[sim]") {
  const auto parse = [](const std::string& fields) {
    return parse_model_config_json(
        R"({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
            "intermediate_size": 14336, "torch_dtype": "bfloat16",
            "quantization_config": {"quant_method": "fp8"}, )" +
            fields + "}",
        "w.json");
  };
  const ModelConfig m = parse(R"("weight_format": {"method": "mxfp4",
      "linear_bytes_per_param": 2, "expert_bytes_per_param": 0.53125, "other_bytes_per_param": 2})");
  CHECK(m.weights.method == "mxfp4");
  CHECK(m.weights.expert_bytes_per_param == 0.53125);
  CHECK(m.weights.linear_bytes_per_param == 2);
  CHECK_THAT(error_of([&] { (void)parse(R"("weight_format": {"method": "int3",
      "linear_bytes_per_param": 1, "expert_bytes_per_param": 1, "other_bytes_per_param": 1})"); }),
             Catch::Contains("field 'weight_format.method': unsupported method 'int3'"));
  CHECK_THAT(error_of([&] { (void)parse(R"("weight_format": {"method": "fp8",
      "linear_bytes_per_param": 0, "expert_bytes_per_param": 1, "other_bytes_per_param": 1})"); }),
             Catch::Contains("field 'weight_format.linear_bytes_per_param' must be a number of "
                             "bytes in (0, 8]"));
  CHECK_THAT(error_of([&] { (void)parse(R"("weight_format": 3)"); }),
             Catch::StartsWith("w.json:"));
}

TEST_CASE("Gemma 3's multimodal config reads text_config with transformers' defaults", "[sim]") {
  const ModelConfig g = load_model_config_file(shipped("gemma-3-27b-it"));
  CHECK(g.vocab_size == 262'208);  // not in the public file
  CHECK(g.num_hidden_layers == 62);
  CHECK(g.derived_max_model_len == 131'072);  // already scaled: rope factor 8 not applied
  CHECK(g.attention.multimodal);
  const std::vector<NamedLayerSpec> layers = model_layer_specs(g, KVLayerOptions{});
  CHECK(layers[5].name == "language_model.model.layers.5.self_attn.attn");
  CHECK(layers[5].spec.kind == KVSpecKind::kFull);
  CHECK(layers[4].spec.sliding_window == 1024);
  CHECK(static_cast<double>(g.num_parameters) / 1e9 == Approx(27.0).epsilon(0.02));
}

TEST_CASE("the derived max_model_len applies rope scaling as vLLM does", "[sim]") {
  CHECK(load_model_config_file(shipped("gpt-oss-120b")).derived_max_model_len ==
        131'072);  // yarn: 4096 x 32
  CHECK(load_model_config_file(shipped("llama-3.1-8b")).derived_max_model_len ==
        131'072);  // llama3 rope: no factor
  CHECK(load_model_config_file(shipped("llama-4-scout-17b-16e")).derived_max_model_len ==
        10'485'760);
  CHECK(load_model_config_file(shipped("opt-125m")).derived_max_model_len == 2048);
}

TEST_CASE("an explicit layers list with repeat and pattern describes any model", "[sim]") {
  const YAML::Node model = YAML::Load(R"(
name: tiny-hybrid
num_hidden_layers: 4
num_attention_heads: 8
hidden_size: 512
vocab_size: 1000
model_type: some_new_arch
layers:
  - {pattern: [{type: sliding_window, num_kv_heads: 2, head_size: 64, sliding_window: 256},
               {type: full, num_kv_heads: 2, head_size: 64}], repeat: 2}
)");
  const ModelConfig m = load_model_config(model, YamlContext{"s.yaml", "model"});
  const std::vector<NamedLayerSpec> layers = model_layer_specs(m, KVLayerOptions{});
  REQUIRE(layers.size() == 4);
  CHECK(layers[2].spec.kind == KVSpecKind::kSlidingWindow);
  CHECK(layers[3].name == "model.layers.3.self_attn.attn");
  CHECK(page_size_bytes(layers[3].spec) == 2 * 16 * 2 * 64 * 2);
  KVSizingInput in;
  in.layers = layers;
  in.available_memory_bytes = {std::int64_t{1} << 24};
  in.max_model_len = 1024;
  const KVSizingResult r = size_kv_pool(in, KVSizingRules::kV020Hybrid);
  REQUIRE(r.layout);
  CHECK(r.layout->groups.size() == 2);
  CHECK(error_of([] {
          (void)load_model_config(YAML::Load("{num_hidden_layers: 2, num_attention_heads: 2, "
                                             "hidden_size: 64, vocab_size: 10, layers: [{type: "
                                             "full, num_kv_heads: 1, head_sise: 64}]}"),
                                  YamlContext{"s.yaml", "model"});
        }).find("unknown key 'head_sise' in a layer spec (did you mean 'head_size'?)") !=
        std::string::npos);
}

TEST_CASE("bad model configs give one line with file and field", "[sim]") {
  const std::string base = R"("hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
 "vocab_size": 10)";
  CHECK(error_of([&] {
          (void)parse_model_config_json("{\"model_type\": \"mamba2\",\n" + base + "}", "m.json");
        })
            .starts_with("m.json:1:2: field 'model_type': kvsim does not know the layers of "
                         "'mamba2' (supported: llama, "));
  CHECK(error_of([&] {
          (void)parse_model_config_json(
              "{\"model_type\": \"gpt_oss\",\n" + base +
                  ",\n \"layer_types\": [\"sliding_attention\"], \"sliding_window\": 128}",
              "m.json");
        }) == "m.json:4:2: field 'layer_types' has 1 entries but num_hidden_layers is 2");
  CHECK(error_of([&] {
          (void)parse_model_config_json(
              "{\"model_type\": \"gpt_oss\",\n" + base +
                  ",\n \"layer_types\": [\"full_attention\", \"window\"]}",
              "m.json");
        }).starts_with("m.json:4:2: field 'layer_types': unknown layer type 'window'"));
  // The command line: exit 2, one line naming the file.
  const kvsim::test::TempDir tmp("kv-bad-config");
  const fs::path cfg = tmp.path / "odd.json", err = tmp.path / "err";
  kvsim::test::write_file(cfg, "{\"model_type\": \"rwkv\",\n" + base + "}");
  const int rc = std::system((kvsim::test::kvsim_exe() + " kv-size --model " + cfg.string() +
                              " --kv-cache-memory-bytes 1000000 2> " + err.string())
                                 .c_str());
  CHECK(WEXITSTATUS(rc) == 2);
  const std::string text = kvsim::test::slurp(err);
  CHECK(std::count(text.begin(), text.end(), '\n') == 1);
  CHECK(text.find(cfg.string() + ":1:2: field 'model_type'") != std::string::npos);
}
