#include "sim/config/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "sim/common/text_file.h"
#include "sim/config/mamba_cache.h"

namespace kvsim {

namespace {

using detail::ErrorAt;
using detail::field;
using detail::opt_bool;
using detail::opt_int;
using detail::opt_nonneg;
using detail::opt_number;
using detail::opt_string;
using detail::req_positive;
using nlohmann::json;

constexpr std::string_view kModelKeys[] = {"config",
                                           "name",
                                           "gated_mlp",
                                           "quantization",
                                           "num_hidden_layers",
                                           "num_attention_heads",
                                           "num_key_value_heads",
                                           "head_dim",
                                           "hidden_size",
                                           "intermediate_size",
                                           "ffn_dim",
                                           "vocab_size",
                                           "max_position_embeddings",
                                           "torch_dtype",
                                           "dtype",
                                           "tie_word_embeddings",
                                           "sliding_window",
                                           "use_sliding_window",
                                           "model_type",
                                           "architectures",
                                           "mamba_chunk_size",
                                           "chunk_size",
                                           "kv_lora_rank",
                                           "qk_rope_head_dim",
                                           "qk_nope_head_dim",
                                           "v_head_dim",
                                           "q_lora_rank",
                                           "n_routed_experts",
                                           "num_local_experts",
                                           "num_experts",
                                           "num_experts_per_tok",
                                           "moe_intermediate_size",
                                           "n_shared_experts",
                                           "first_k_dense_replace",
                                           "num_parameters",
                                           "text_config",
                                           "quantization_config",
                                           "weight_format",
                                           "shared_expert_intermediate_size",
                                           "rope_scaling",
                                           "layers",
                                           "layer_types",
                                           "sliding_window_pattern",
                                           "attention_chunk_size",
                                           "no_rope_layers",
                                           "no_rope_layer_interval",
                                           "full_attention_interval",
                                           "max_window_layers",
                                           "linear_conv_kernel_dim",
                                           "linear_key_head_dim",
                                           "linear_value_head_dim",
                                           "linear_num_key_heads",
                                           "linear_num_value_heads"};

ErrorAt json_error_at(const std::string& text, const std::string& file) {
  return [&text, file](std::string_view key, const std::string& message) {
    const std::size_t at = text.find("\"" + std::string(key) + "\"");
    if (at == std::string::npos) return ConfigError(file + ": " + message);
    const auto [line, col] = line_col_of(text, at);
    return ConfigError(file, line, col, message);
  };
}

// The object the text model's fields are read from: the top level overlaid with text_config.
json effective_object(const json& root, const ErrorAt& err) {
  if (!root.is_object()) throw err("", "a model config must be a JSON object");
  json e = root;
  if (const json* tc = field(root, "text_config")) {
    if (!tc->is_object()) throw err("text_config", "field 'text_config' must be an object");
    for (auto it = tc->begin(); it != tc->end(); ++it) e[it.key()] = it.value();
  }
  return e;
}

// transformers' Gemma3TextConfig defaults for what a text_config leaves out.
json with_gemma3_defaults(json e) {
  static const std::pair<const char*, std::int64_t> kDefaults[] = {
      {"vocab_size", 262208},      {"hidden_size", 2304},
      {"intermediate_size", 9216}, {"num_hidden_layers", 26},
      {"num_attention_heads", 8},  {"num_key_value_heads", 4},
      {"head_dim", 256},           {"max_position_embeddings", 131072},
      {"sliding_window", 4096},    {"sliding_window_pattern", 6}};
  for (const auto& [key, value] : kDefaults)
    if (!field(e, key)) e[key] = value;
  return e;
}

// vLLM's derived max_model_len (config/model.py _get_and_verify_max_len): max_position_embeddings
// (2048 without it), times the rope scaling factor except for su/longrope/llama3 types; yarn
// scales original_max_position_embeddings; Gemma 3's length is already scaled.
std::int64_t derived_max_model_len(const json& e, const ModelConfig& m, const ErrorAt& err) {
  double len =
      m.max_position_embeddings > 0 ? static_cast<double>(m.max_position_embeddings) : 2048.0;
  const json* rope = field(e, "rope_scaling");
  if (rope && !m.model_type.starts_with("gemma3")) {
    if (!rope->is_object()) throw err("rope_scaling", "field 'rope_scaling' must be an object");
    std::string type = opt_string(*rope, "rope_type", err)
                           .value_or(opt_string(*rope, "type", err).value_or("default"));
    if (type != "su" && type != "longrope" && type != "llama3") {
      const double factor = opt_number(*rope, "factor", err).value_or(1.0);
      if (factor <= 0 || factor > 1e6)
        throw err("factor",
                  fmt::format("field 'rope_scaling.factor' must be in (0, 1e6], got {}", factor));
      if (type == "yarn") {
        if (!field(*rope, "original_max_position_embeddings"))
          throw err("rope_scaling", "a yarn rope_scaling needs original_max_position_embeddings");
        len = static_cast<double>(
            detail::req_positive(*rope, "original_max_position_embeddings", err));
      }
      len *= factor;
    }
  }
  return static_cast<std::int64_t>(std::min(len, static_cast<double>(std::int64_t{1} << 34)));
}

ModelConfig build(const json& e_in, const ErrorAt& err, std::string name) {
  const std::string type = opt_string(e_in, "model_type", err).value_or("");
  const json e = type.starts_with("gemma3") ? with_gemma3_defaults(e_in) : e_in;
  ModelConfig m;
  m.name = std::move(name);
  m.model_type = opt_string(e, "model_type", err).value_or("");
  m.architectures =
      detail::opt_string_list(e, "architectures", err).value_or(std::vector<std::string>{});
  m.num_hidden_layers = req_positive(e, "num_hidden_layers", err);
  m.num_attention_heads = req_positive(e, "num_attention_heads", err);
  m.hidden_size = req_positive(e, "hidden_size", err);
  m.vocab_size = req_positive(e, "vocab_size", err);
  m.num_key_value_heads = field(e, "num_key_value_heads")
                              ? req_positive(e, "num_key_value_heads", err)
                              : m.num_attention_heads;
  if (field(e, "head_dim")) {
    m.head_dim = req_positive(e, "head_dim", err);
  } else {
    if (m.hidden_size % m.num_attention_heads != 0)
      throw err("hidden_size",
                fmt::format("hidden_size {} is not a multiple of num_attention_heads {}; "
                            "give head_dim",
                            m.hidden_size, m.num_attention_heads));
    m.head_dim = m.hidden_size / m.num_attention_heads;
  }
  if (field(e, "intermediate_size"))
    m.intermediate_size = req_positive(e, "intermediate_size", err);
  else if (field(e, "ffn_dim"))
    m.intermediate_size = req_positive(e, "ffn_dim", err);
  else
    m.intermediate_size = 4 * m.hidden_size;
  m.max_position_embeddings = opt_nonneg(e, "max_position_embeddings", 0, err);

  std::string dtype_key = field(e, "dtype") ? "dtype" : "torch_dtype";
  m.dtype = opt_string(e, dtype_key, err).value_or("bfloat16");
  const auto bytes = dtype_bytes_of(m.dtype);
  if (!bytes)
    throw err(dtype_key, fmt::format("field '{}': unknown dtype '{}' (allowed: bfloat16, float16, "
                                     "float32, fp8)",
                                     dtype_key, m.dtype));
  m.dtype_bytes = *bytes;
  m.weights = parse_weight_format(e, m.dtype_bytes, err);
  m.weight_bytes_per_param = m.weights.expert_bytes_per_param;
  // NOTE: transformers defaults tie_word_embeddings to true when a config leaves it out (OPT does).
  m.tie_word_embeddings = opt_bool(e, "tie_word_embeddings", err).value_or(true);

  static constexpr std::string_view kUngated[] = {"opt",   "gpt2",   "gpt_neox", "gptj",
                                                  "bloom", "falcon", "phi"};
  m.gated_mlp =
      std::find(std::begin(kUngated), std::end(kUngated), m.model_type) == std::end(kUngated);
  if (auto g = opt_bool(e, "gated_mlp", err)) m.gated_mlp = *g;

  // transformers' Qwen configs drop sliding_window unless use_sliding_window (default false).
  const bool qwen = m.model_type.starts_with("qwen");
  if (field(e, "sliding_window") && opt_bool(e, "use_sliding_window", err).value_or(!qwen)) {
    if (auto sw = opt_nonneg(e, "sliding_window", 0, err); sw > 0) m.sliding_window = sw;
  }
  m.derived_max_model_len = derived_max_model_len(e, m, err);
  for (std::string_view k : {"mamba_chunk_size", "chunk_size"}) {
    if (auto v = opt_int(e, k, err)) {
      if (*v < 1 || *v > (1 << 20))
        throw err(k, fmt::format("field '{}' must be in [1, 1048576], got {}", k, *v));
      m.mamba_chunk_size = *v;
      break;
    }
  }

  m.kv_lora_rank = opt_nonneg(e, "kv_lora_rank", 0, err);
  m.mla = m.kv_lora_rank > 0;
  if (m.mla) {
    m.qk_rope_head_dim = req_positive(e, "qk_rope_head_dim", err);
    m.qk_nope_head_dim = opt_nonneg(e, "qk_nope_head_dim", 0, err);
    m.v_head_dim = opt_nonneg(e, "v_head_dim", m.head_dim, err);
    m.q_lora_rank = opt_nonneg(e, "q_lora_rank", 0, err);
    if (m.qk_nope_head_dim > 0) m.head_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
  }

  for (std::string_view k : {"n_routed_experts", "num_local_experts", "num_experts"}) {
    if (field(e, k)) {
      m.num_experts = opt_nonneg(e, k, 0, err);
      break;
    }
  }
  if (m.num_experts > 0) {
    m.num_experts_per_tok = req_positive(e, "num_experts_per_tok", err);
    m.moe_intermediate_size = opt_nonneg(e, "moe_intermediate_size", m.intermediate_size, err);
    // Llama 4 has one shared expert per MoE layer; Qwen-MoE's has its own width.
    m.num_shared_experts =
        opt_nonneg(e, "n_shared_experts", m.model_type.starts_with("llama4") ? 1 : 0, err);
    m.shared_expert_intermediate_size = opt_nonneg(e, "shared_expert_intermediate_size", 0, err);
    m.first_k_dense_replace = opt_nonneg(e, "first_k_dense_replace", 0, err);
  }
  parse_attention_layout(e, field(e, "text_config") != nullptr, err, m);

  const auto [total, active] = estimate_num_parameters(m);
  constexpr std::int64_t kMaxParams = 1'000'000'000'000'000;  // 1e15
  if (auto n = opt_int(e, "num_parameters", err)) {
    if (*n < 1 || *n > kMaxParams)
      throw err("num_parameters",
                fmt::format("field 'num_parameters' must be in [1, 1e15], got {}", *n));
    m.num_parameters = *n;
    m.num_active_parameters = static_cast<std::int64_t>(
        static_cast<double>(*n) * (static_cast<double>(active) / static_cast<double>(total)));
    m.num_parameters_estimated = false;
  } else {
    if (total > kMaxParams)
      throw err("hidden_size",
                fmt::format("the config describes {:.3g} parameters, more than the 1e15 "
                            "supported",
                            static_cast<double>(total)));
    m.num_parameters = total;
    m.num_active_parameters = active;
  }
  return m;
}

json parse_json_text(const std::string& text, const std::string& file) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..."
    const std::size_t col = what.find("column ");
    std::size_t colon = col == std::string::npos ? what.find("] ") : what.find(": ", col);
    const std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    const std::size_t byte = e.byte == 0 ? 0 : e.byte - 1;
    const auto [line, column] = line_col_of(text, byte);
    throw ConfigError(file, line, column, "JSON " + detail);
  }
}

// YAML scalar -> JSON value: a quoted scalar stays a string; else int, float, bool, null, string.
json yaml_to_json(const YAML::Node& n) {
  if (n.IsSequence()) {
    json a = json::array();
    for (const auto& x : n) a.push_back(yaml_to_json(x));
    return a;
  }
  if (n.IsMap()) {
    json o = json::object();
    for (auto it = n.begin(); it != n.end(); ++it) o[it->first.Scalar()] = yaml_to_json(it->second);
    return o;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string& s = n.Scalar();
  if (n.Tag() == "!") return s;
  try {
    std::size_t used = 0;
    const long long v = std::stoll(s, &used);
    if (used == s.size()) return static_cast<std::int64_t>(v);
  } catch (...) {
  }
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size() && std::isfinite(v)) return v;
  } catch (...) {
  }
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  if (s == "~" || s == "null") return nullptr;
  return s;
}

}  // namespace

std::string ModelConfig::architecture() const {
  return architectures.empty() ? std::string() : architectures.front();
}

bool ModelConfig::supports_mamba_prefix_caching() const {
  return kvsim::supports_mamba_prefix_caching(architecture());
}

std::int64_t ModelConfig::kv_head_size() const {
  return mla ? kv_lora_rank + qk_rope_head_dim : head_dim;
}

KVCacheSpec ModelConfig::kv_cache_spec(std::int64_t block_size, std::int64_t tp,
                                       std::int64_t kv_dtype_bytes) const {
  KVCacheSpec s;
  s.block_size = block_size;
  s.num_layers = num_hidden_layers;
  s.mla = mla;
  s.num_kv_heads = kv_heads_per_rank(num_key_value_heads, tp, mla);
  s.head_size = kv_head_size();
  s.dtype_bytes = kv_dtype_bytes > 0 ? kv_dtype_bytes : dtype_bytes;
  return s;
}

std::optional<std::int64_t> dtype_bytes_of(std::string_view d) {
  if (d.starts_with("torch.")) d.remove_prefix(6);
  if (d == "bfloat16" || d == "bf16" || d == "float16" || d == "fp16" || d == "half") return 2;
  if (d == "float32" || d == "fp32" || d == "float") return 4;
  if (d == "fp8" || d == "fp8_e4m3" || d == "fp8_e5m2" || d == "float8_e4m3fn" ||
      d == "float8_e5m2" || d == "fp8_inc")
    return 1;
  return std::nullopt;
}

std::pair<std::int64_t, std::int64_t> estimate_num_parameters(const ModelConfig& m) {
  const ParameterBreakdown p = parameter_breakdown(m);
  auto to_int = [](double x) { return static_cast<std::int64_t>(std::min(x, 9.0e18)); };
  return {to_int(p.total()), to_int(p.active())};
}

ModelConfig parse_model_config_json(const std::string& text, const std::string& file) {
  const json root = parse_json_text(text, file);
  const ErrorAt err = json_error_at(text, file);
  return build(effective_object(root, err), err, std::filesystem::path(file).stem().string());
}

ModelConfig load_model_config_file(const std::string& path) {
  return parse_model_config_json(read_text_file(path), path);
}

ModelConfig load_model_config(const YAML::Node& model, const YamlContext& ctx) {
  if (!model.IsDefined() || model.IsNull())
    throw ConfigError(ctx.file +
                      ": missing section 'model' (give model: {config: PATH} or inline "
                      "config.json fields)");
  check_keys(model, std::span<const std::string_view>(kModelKeys), ctx);
  std::string text, file;
  json e = json::object();
  ErrorAt file_err;
  std::string name;
  if (has_key(model, "config")) {
    const YamlContext cc = ctx.child("config");
    const std::string given = get_string(model, "config", ctx, std::nullopt);
    file = resolve_input_path(cc, given);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec)) {
      const bool relative = std::filesystem::path(given).is_relative();
      throw yaml_error(key_node(model, "config"), cc,
                       fmt::format("{}: no such model config file '{}'{}", cc.path, given,
                                   relative ? " (looked beside the scenario and in the working "
                                              "directory)"
                                            : ""));
    }
    try {
      text = read_text_file(file);
    } catch (const ConfigError&) {
      throw yaml_error(key_node(model, "config"), cc,
                       fmt::format("{}: cannot read model config file '{}'", cc.path, file));
    }
    file_err = json_error_at(text, file);
    e = effective_object(parse_json_text(text, file), file_err);
    name = std::filesystem::path(file).stem().string();
  }
  // Inline fields (and text_config's) override the file's; their errors point into the YAML.
  const YAML::Node text_config = model["text_config"];
  if (text_config.IsDefined() && !text_config.IsNull()) {
    check_keys(text_config, std::span<const std::string_view>(kModelKeys),
               ctx.child("text_config"));
  }
  for (const YAML::Node* src : {&model, &text_config}) {
    if (!src->IsDefined() || !src->IsMap()) continue;
    for (auto it = src->begin(); it != src->end(); ++it) {
      const std::string key = it->first.Scalar();
      if (key == "config" || key == "name" || key == "text_config") continue;
      e[key] = yaml_to_json(it->second);
    }
  }
  const ErrorAt err = [&](std::string_view key, const std::string& message) {
    const std::string k(key);
    if (text_config.IsDefined() && text_config.IsMap() && has_key(text_config, k))
      return yaml_error(text_config[k], ctx.child("text_config").child(k), message);
    if (has_key(model, k)) return yaml_error(model[k], ctx.child(k), message);
    if (file_err) return file_err(key, message);
    return yaml_error(model, ctx, fmt::format("{}: {}", ctx.where(), message));
  };
  if (has_key(model, "name")) name = get_string(model, "name", ctx, std::nullopt);
  ModelConfig m = build(e, err, name.empty() ? "inline" : name);
  m.config_file = file;
  return m;
}

YAML::Node model_config_yaml(const ModelConfig& m) {
  // Written as inline fields that override the file's (and name the first of each alias that
  // build() looks at), so the file adds nothing the simulator reads.
  YAML::Node n(YAML::NodeType::Map);
  n["config"] = m.config_file.empty() ? null_node() : YAML::Node(m.config_file);
  n["name"] = m.name;
  n["model_type"] = m.model_type;
  if (has_mamba_layers(m)) {  // what picks the mamba cache mode; other models need no record
    YAML::Node a(YAML::NodeType::Sequence);
    for (const std::string& name : m.architectures) a.push_back(name);
    n["architectures"] = a;
  }
  n["num_hidden_layers"] = m.num_hidden_layers;
  n["num_attention_heads"] = m.num_attention_heads;
  n["num_key_value_heads"] = m.num_key_value_heads;
  n["head_dim"] = m.head_dim;
  n["hidden_size"] = m.hidden_size;
  n["intermediate_size"] = m.intermediate_size;
  n["vocab_size"] = m.vocab_size;
  n["max_position_embeddings"] = m.max_position_embeddings;
  n["dtype"] = m.dtype;
  {
    YAML::Node w(YAML::NodeType::Map);  // the format itself: the file's quantization_config aside
    w["method"] = m.weights.method;
    w["linear_bytes_per_param"] = m.weights.linear_bytes_per_param;
    w["expert_bytes_per_param"] = m.weights.expert_bytes_per_param;
    w["other_bytes_per_param"] = m.weights.other_bytes_per_param;
    n["weight_format"] = w;
  }
  n["tie_word_embeddings"] = m.tie_word_embeddings;
  n["gated_mlp"] = m.gated_mlp;
  n["sliding_window"] = optional_node(m.sliding_window);
  n["use_sliding_window"] = m.sliding_window.has_value();
  n["kv_lora_rank"] = m.kv_lora_rank;
  if (m.mla) {
    n["qk_rope_head_dim"] = m.qk_rope_head_dim;
    n["qk_nope_head_dim"] = m.qk_nope_head_dim;
    n["v_head_dim"] = m.v_head_dim;
    n["q_lora_rank"] = m.q_lora_rank;
  }
  n["n_routed_experts"] = m.num_experts;
  if (m.num_experts > 0) {
    n["num_experts_per_tok"] = m.num_experts_per_tok;
    n["moe_intermediate_size"] = m.moe_intermediate_size;
    n["n_shared_experts"] = m.num_shared_experts;
    n["first_k_dense_replace"] = m.first_k_dense_replace;
  }
  n["num_parameters"] = m.num_parameters_estimated ? null_node() : YAML::Node(m.num_parameters);
  if (has_mamba_layers(m)) n["mamba_chunk_size"] = m.mamba_chunk_size;
  return n;
}

}  // namespace kvsim
