#include "sim/config/model_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "sim/common/text_file.h"

namespace kvsim {

namespace {

using nlohmann::json;
using ErrorAt = std::function<ConfigError(std::string_view key, const std::string& message)>;

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
                                           "text_config"};

ErrorAt json_error_at(const std::string& text, const std::string& file) {
  return [&text, file](std::string_view key, const std::string& message) {
    const std::size_t at = text.find("\"" + std::string(key) + "\"");
    if (at == std::string::npos) return ConfigError(file + ": " + message);
    const auto [line, col] = line_col_of(text, at);
    return ConfigError(file, line, col, message);
  };
}

const json* field(const json& obj, std::string_view key) {
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::int64_t> opt_int(const json& obj, std::string_view key, const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<std::uint64_t>() > 9'000'000'000'000'000'000ULL)
      throw err(key, fmt::format("field '{}' is too large: {}", key, v->dump()));
    return v->get<std::int64_t>();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18)
      return static_cast<std::int64_t>(d);
  }
  throw err(key, fmt::format("field '{}' must be an integer, got {}", key, v->dump()));
}

// Upper bounds that keep every size product inside int64 (far above any real model).
std::int64_t limit_of(std::string_view key) {
  static constexpr std::pair<std::string_view, std::int64_t> kLimits[] = {
      {"num_hidden_layers", 4096},    {"num_attention_heads", 16384},
      {"num_key_value_heads", 16384}, {"head_dim", 8192},
      {"hidden_size", 1 << 20},       {"intermediate_size", 1 << 24},
      {"ffn_dim", 1 << 24},           {"moe_intermediate_size", 1 << 24},
      {"vocab_size", 1 << 30},        {"max_position_embeddings", std::int64_t{1} << 34},
      {"kv_lora_rank", 8192},         {"qk_rope_head_dim", 8192},
      {"qk_nope_head_dim", 8192},     {"v_head_dim", 8192},
      {"q_lora_rank", 1 << 16},       {"n_routed_experts", 65536},
      {"num_local_experts", 65536},   {"num_experts", 65536},
      {"num_experts_per_tok", 65536}, {"n_shared_experts", 65536},
      {"first_k_dense_replace", 4096}};
  for (const auto& [k, v] : kLimits)
    if (k == key) return v;
  return std::int64_t{1} << 50;
}

std::int64_t req_positive(const json& obj, std::string_view key, const ErrorAt& err) {
  auto v = opt_int(obj, key, err);
  if (!v) throw err(key, fmt::format("missing field '{}' (needed to size the model)", key));
  if (*v < 1 || *v > limit_of(key))
    throw err(key, fmt::format("field '{}' must be in [1, {}], got {}", key, limit_of(key), *v));
  return *v;
}

std::int64_t opt_nonneg(const json& obj, std::string_view key, std::int64_t def,
                        const ErrorAt& err) {
  auto v = opt_int(obj, key, err);
  if (!v) return def;
  if (*v < 0 || *v > limit_of(key))
    throw err(key, fmt::format("field '{}' must be in [0, {}], got {}", key, limit_of(key), *v));
  return *v;
}

std::optional<std::string> opt_string(const json& obj, std::string_view key, const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string())
    throw err(key, fmt::format("field '{}' must be a string, got {}", key, v->dump()));
  return v->get<std::string>();
}

std::optional<bool> opt_bool(const json& obj, std::string_view key, const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean())
    throw err(key, fmt::format("field '{}' must be true or false, got {}", key, v->dump()));
  return v->get<bool>();
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

ModelConfig build(const json& e, const ErrorAt& err, std::string name) {
  ModelConfig m;
  m.name = std::move(name);
  m.model_type = opt_string(e, "model_type", err).value_or("");
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
  m.weight_bytes_per_param = m.dtype_bytes;
  if (const json* q = field(e, "quantization_config"); q && q->is_object()) {
    auto method = q->find("quant_method");
    if (method != q->end() && method->is_string() && method->get<std::string>() == "fp8")
      m.weight_bytes_per_param = 1;
  }
  if (auto q = opt_string(e, "quantization", err)) {
    if (*q == "fp8")
      m.weight_bytes_per_param = 1;
    else if (*q == "none")
      m.weight_bytes_per_param = m.dtype_bytes;
    else
      throw err("quantization",
                fmt::format("field 'quantization': unknown value '{}' (allowed: fp8, none)", *q));
  }
  // NOTE: transformers defaults tie_word_embeddings to true when a config leaves it out (OPT does).
  m.tie_word_embeddings = opt_bool(e, "tie_word_embeddings", err).value_or(true);

  static constexpr std::string_view kUngated[] = {"opt",   "gpt2",   "gpt_neox", "gptj",
                                                  "bloom", "falcon", "phi"};
  m.gated_mlp =
      std::find(std::begin(kUngated), std::end(kUngated), m.model_type) == std::end(kUngated);
  if (auto g = opt_bool(e, "gated_mlp", err)) m.gated_mlp = *g;

  if (field(e, "sliding_window") && opt_bool(e, "use_sliding_window", err).value_or(true)) {
    if (auto sw = opt_int(e, "sliding_window", err); sw && *sw > 0) m.sliding_window = *sw;
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
    m.num_shared_experts = opt_nonneg(e, "n_shared_experts", 0, err);
    m.first_k_dense_replace = opt_nonneg(e, "first_k_dense_replace", 0, err);
  }

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
  // In double: exact for every real model (< 2^53), and no int64 overflow for absurd configs.
  const auto h = static_cast<double>(m.hidden_size),
             heads = static_cast<double>(m.num_attention_heads);
  const auto d = static_cast<double>(m.head_dim), kv = static_cast<double>(m.num_key_value_heads);
  double embed = static_cast<double>(m.vocab_size) * h * (m.tie_word_embeddings ? 1 : 2);
  if (m.model_type == "opt" || m.model_type == "gpt2")
    embed += static_cast<double>(m.max_position_embeddings) * h;
  double attn = 0;
  if (m.mla) {
    const auto nope = static_cast<double>(m.qk_nope_head_dim),
               rope = static_cast<double>(m.qk_rope_head_dim);
    const auto q_lora = static_cast<double>(m.q_lora_rank),
               kv_lora = static_cast<double>(m.kv_lora_rank);
    const auto v = static_cast<double>(m.v_head_dim);
    attn = q_lora > 0 ? h * q_lora + q_lora * heads * (nope + rope) : h * heads * (nope + rope);
    attn += h * (kv_lora + rope) + kv_lora * heads * (nope + v) + heads * v * h;
  } else {
    attn = h * (heads + 2 * kv) * d + heads * d * h;
  }
  const double dense_mlp = (m.gated_mlp ? 3 : 2) * h * static_cast<double>(m.intermediate_size);
  const double layers = static_cast<double>(m.num_hidden_layers);
  const double moe_layers =
      m.num_experts > 0 ? std::max(0.0, layers - static_cast<double>(m.first_k_dense_replace))
                        : 0.0;
  const double expert = 3 * h * static_cast<double>(m.moe_intermediate_size);
  const auto experts = static_cast<double>(m.num_experts),
             shared = static_cast<double>(m.num_shared_experts);
  const double base = embed + layers * attn + (layers - moe_layers) * dense_mlp;
  const double total = base + moe_layers * ((experts + shared) * expert + h * experts);
  const double active =
      base +
      moe_layers * ((static_cast<double>(m.num_experts_per_tok) + shared) * expert + h * experts);
  auto to_int = [](double x) { return static_cast<std::int64_t>(std::min(x, 9.0e18)); };
  return {to_int(total), to_int(active)};
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
  n["num_hidden_layers"] = m.num_hidden_layers;
  n["num_attention_heads"] = m.num_attention_heads;
  n["num_key_value_heads"] = m.num_key_value_heads;
  n["head_dim"] = m.head_dim;
  n["hidden_size"] = m.hidden_size;
  n["intermediate_size"] = m.intermediate_size;
  n["vocab_size"] = m.vocab_size;
  n["max_position_embeddings"] = m.max_position_embeddings;
  n["dtype"] = m.dtype;
  n["quantization"] = m.weight_bytes_per_param != m.dtype_bytes ? "fp8" : "none";
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
  return n;
}

}  // namespace kvsim
