#include <catch2/catch.hpp>
#include <string>

#include "sim/config/model_config.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {
std::string model_path(const std::string& name) {
  return std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" + name + ".json";
}
using kvsim::test::error_of;
}  // namespace

TEST_CASE("every shipped model config loads with plausible parameter counts", "[sim]") {
  struct Expect {
    const char* name;
    double params_b;
  };
  for (const Expect e :
       {Expect{"qwen2-1.5b", 1.54}, Expect{"opt-125m", 0.125}, Expect{"llama-3.1-8b", 8.03},
        Expect{"llama-3.1-70b", 70.55}, Expect{"deepseek-v3", 671.0}, Expect{"qwen2.5-7b", 7.6},
        Expect{"opt-13b", 12.85}, Expect{"mistral-7b", 7.24}}) {
    INFO(e.name);
    const ModelConfig m = load_model_config_file(model_path(e.name));
    CHECK(static_cast<double>(m.num_parameters) / 1e9 == Approx(e.params_b).epsilon(0.02));
    CHECK(m.num_parameters_estimated);
  }
}

TEST_CASE("model fields follow the Hugging Face defaults", "[sim]") {
  const ModelConfig opt = load_model_config_file(model_path("opt-125m"));
  CHECK(opt.num_key_value_heads == 12);  // defaults to attention heads
  CHECK(opt.head_dim == 64);             // hidden_size / heads
  CHECK(opt.intermediate_size == 3072);  // ffn_dim
  CHECK_FALSE(opt.gated_mlp);
  CHECK(opt.dtype_bytes == 2);
  const ModelConfig mistral = load_model_config_file(model_path("mistral-7b"));
  REQUIRE(mistral.sliding_window.has_value());
  CHECK(*mistral.sliding_window == 4096);
  CHECK_FALSE(load_model_config_file(model_path("qwen2-1.5b")).sliding_window.has_value());
  const ModelConfig ds = load_model_config_file(model_path("deepseek-v3"));
  CHECK(ds.weights.method == "fp8");  // fp8 checkpoint: 1 B + a scale per 128 x 128 block
  CHECK(ds.weight_bytes_per_param == 1.0 + 4.0 / 16384);
  CHECK(ds.num_active_parameters < ds.num_parameters / 10);
}

TEST_CASE("a multimodal config reads the text model from text_config", "[sim]") {
  const std::string text = R"({
    "model_type": "llava",
    "torch_dtype": "float16",
    "vision_config": {"hidden_size": 1024, "num_hidden_layers": 24},
    "text_config": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32064,
                    "intermediate_size": 11008}
  })";
  const ModelConfig m = parse_model_config_json(text, "llava.json");
  CHECK(m.num_hidden_layers == 32);
  CHECK(m.num_key_value_heads == 8);
  CHECK(m.dtype_bytes == 2);
  CHECK(m.kv_cache_spec(16, 1).bytes_per_token() == 32 * 2 * 8 * 128 * 2);
}

TEST_CASE("an MLA config has one latent head of kv_lora_rank + qk_rope_head_dim", "[sim]") {
  const std::string text =
      R"({"model_type": "deepseek_v2", "hidden_size": 2048, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_key_value_heads": 16, "vocab_size": 102400, "kv_lora_rank": 512,
    "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "torch_dtype": "bfloat16",
    "intermediate_size": 10944})";
  const ModelConfig m = parse_model_config_json(text, "dsv2-lite.json");
  const KVCacheSpec s = m.kv_cache_spec(16, 2);
  CHECK(s.mla);
  CHECK(s.num_kv_heads == 1);
  CHECK(s.head_size == 576);
  CHECK(s.page_bytes_per_layer() == 16 * 576 * 2);
}

TEST_CASE("a malformed JSON config reports file:line:col", "[sim]") {
  const std::string msg = error_of([] {
    (void)parse_model_config_json("{\n  \"hidden_size\": 10,\n  \"vocab_size\" 5\n}\n", "bad.json");
  });
  CHECK(msg.rfind("bad.json:3:16: JSON", 0) == 0);
}

TEST_CASE("a missing or mistyped field is named with its position", "[sim]") {
  CHECK(error_of([] {
          (void)parse_model_config_json(
              R"({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 10})", "m.json");
        }) == "m.json: missing field 'num_hidden_layers' (needed to size the model)");
  CHECK(error_of([] {
          (void)parse_model_config_json(
              "{\"hidden_size\": 64,\n \"num_hidden_layers\": \"two\", \"num_attention_heads\": 4, "
              "\"vocab_size\": 10}",
              "m.json");
        }) == "m.json:2:2: field 'num_hidden_layers' must be an integer, got \"two\"");
  CHECK(
      error_of([] {
        (void)parse_model_config_json(
            R"({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10, "torch_dtype": "int3"})",
            "m.json");
      }).find("unknown dtype 'int3'") != std::string::npos);
}

TEST_CASE("an inline YAML model block is read and overrides a config file", "[sim]") {
  YamlContext ctx{"s.yaml", "model"};
  YAML::Node inline_model = YAML::Load(
      "{num_hidden_layers: 4, num_attention_heads: 8, num_key_value_heads: 2, hidden_size: 1024,\n"
      " vocab_size: 32000, torch_dtype: float16, num_parameters: 100000000}");
  const ModelConfig m = load_model_config(inline_model, ctx);
  CHECK(m.num_parameters == 100'000'000);
  CHECK_FALSE(m.num_parameters_estimated);
  CHECK(m.kv_cache_spec(16, 1).page_bytes_per_layer() == 2 * 16 * 2 * 128 * 2);

  YAML::Node over =
      YAML::Load("{config: " + model_path("llama-3.1-8b") + ", num_hidden_layers: 2}");
  CHECK(load_model_config(over, ctx).num_hidden_layers == 2);

  YAML::Node bad = YAML::Load("num_hiden_layers: 4\n");
  CHECK(error_of([&] {
          (void)load_model_config(bad, ctx);
        }).find("unknown key 'num_hiden_layers' in model (did you mean 'num_hidden_layers'?)") !=
        std::string::npos);
  YAML::Node typo =
      YAML::Load("num_hidden_layers: x\nnum_attention_heads: 8\nhidden_size: 64\nvocab_size: 5\n");
  CHECK(error_of([&] { (void)load_model_config(typo, ctx); }) ==
        "s.yaml:1:20: field 'num_hidden_layers' must be an integer, got \"x\"");
}

TEST_CASE("an absurd model size is refused instead of overflowing", "[sim]") {
  CHECK(
      error_of([] {
        (void)parse_model_config_json(
            R"({"hidden_size": 1000000000, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 10})",
            "m.json");
      }) == "m.json:1:2: field 'hidden_size' must be in [1, 1048576], got 1000000000");
  CHECK(error_of([] {
          (void)parse_model_config_json(
              R"({"hidden_size": 1048576, "num_hidden_layers": 4096, "num_attention_heads": 16384,
                  "head_dim": 8192, "vocab_size": 1073741824, "intermediate_size": 16777216})",
              "m.json");
        }).find("more than the 1e15 supported") != std::string::npos);
}
