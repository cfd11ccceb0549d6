#include "sim/config/model_json.h"

#include <fmt/format.h>

#include <cmath>

namespace kvsim::detail {

using nlohmann::json;

const json* field(const json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(std::string(key));
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

namespace {

std::optional<std::int64_t> as_int(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > 9'000'000'000'000'000'000ULL)
      return std::nullopt;
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18)
      return static_cast<std::int64_t>(d);
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::int64_t> opt_int(const json& obj, std::string_view key, const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (auto i = as_int(*v)) return i;
  if (v->is_number_unsigned())
    throw err(key, fmt::format("field '{}' is too large: {}", key, v->dump()));
  throw err(key, fmt::format("field '{}' must be an integer, got {}", key, v->dump()));
}

std::int64_t limit_of(std::string_view key) {
  static constexpr std::pair<std::string_view, std::int64_t> kLimits[] = {
      {"num_hidden_layers", 4096},
      {"num_attention_heads", 16384},
      {"num_key_value_heads", 16384},
      {"head_dim", 8192},
      {"hidden_size", 1 << 20},
      {"intermediate_size", 1 << 24},
      {"ffn_dim", 1 << 24},
      {"moe_intermediate_size", 1 << 24},
      {"vocab_size", 1 << 30},
      {"max_position_embeddings", std::int64_t{1} << 34},
      {"kv_lora_rank", 8192},
      {"qk_rope_head_dim", 8192},
      {"qk_nope_head_dim", 8192},
      {"v_head_dim", 8192},
      {"q_lora_rank", 1 << 16},
      {"n_routed_experts", 65536},
      {"num_local_experts", 65536},
      {"num_experts", 65536},
      {"num_experts_per_tok", 65536},
      {"n_shared_experts", 65536},
      {"first_k_dense_replace", 4096},
      {"sliding_window", std::int64_t{1} << 34},
      {"attention_chunk_size", std::int64_t{1} << 34},
      {"sliding_window_pattern", 4096},
      {"no_rope_layer_interval", 4096},
      {"full_attention_interval", 4096},
      {"max_window_layers", 1 << 20},
      {"linear_conv_kernel_dim", 1024},
      {"linear_key_head_dim", 8192},
      {"linear_value_head_dim", 8192},
      {"linear_num_key_heads", 16384},
      {"linear_num_value_heads", 16384},
      {"shared_expert_intermediate_size", 1 << 24},
      {"original_max_position_embeddings", std::int64_t{1} << 34}};
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

std::optional<double> opt_number(const json& obj, std::string_view key, const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number() || !std::isfinite(v->get<double>()))
    throw err(key, fmt::format("field '{}' must be a number, got {}", key, v->dump()));
  return v->get<double>();
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

std::optional<std::vector<std::int64_t>> opt_int_list(const json& obj, std::string_view key,
                                                      std::int64_t min, std::int64_t max,
                                                      const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    throw err(key, fmt::format("field '{}' must be a list of integers, got {}", key, v->dump()));
  std::vector<std::int64_t> out;
  for (const json& x : *v) {
    const auto i = as_int(x);
    if (!i || *i < min || *i > max)
      throw err(key, fmt::format("field '{}': every entry must be an integer in [{}, {}], got {}",
                                 key, min, max, x.dump()));
    out.push_back(*i);
  }
  return out;
}

std::optional<std::vector<std::string>> opt_string_list(const json& obj, std::string_view key,
                                                        const ErrorAt& err) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_array())
    throw err(key, fmt::format("field '{}' must be a list of strings, got {}", key, v->dump()));
  std::vector<std::string> out;
  for (const json& x : *v) {
    if (!x.is_string())
      throw err(key,
                fmt::format("field '{}': every entry must be a string, got {}", key, x.dump()));
    out.push_back(x.get<std::string>());
  }
  return out;
}

}  // namespace kvsim::detail
