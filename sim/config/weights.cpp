#include "sim/config/weights.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sim/config/model_config.h"

namespace kvsim {

namespace {

using detail::field;
using nlohmann::json;

constexpr std::string_view kMethods[] = {"none", "fp8",  "mxfp4",
                                         "awq",  "gptq", "compressed-tensors"};

// bits/8 + (scale bytes + zero-point bytes) per group of group_size.
double grouped_bytes(double bits, double group_size, double scale_bytes, bool zero_points) {
  const double per_group = scale_bytes + (zero_points ? bits / 8 : 0.0);
  return bits / 8 + (group_size > 0 ? per_group / group_size : 0.0);
}

WeightFormat format_of(const json& q, const std::string& method, std::int64_t dtype_bytes,
                       const detail::ErrorAt& err) {
  WeightFormat f;
  const auto dtype = static_cast<double>(dtype_bytes);
  f.method = method;
  f.linear_bytes_per_param = f.expert_bytes_per_param = f.other_bytes_per_param = dtype;
  if (method == "none") return f;
  if (method == "fp8") {
    double scale = 0;  // per-tensor scales: one float per matrix, not counted
    if (auto block = detail::opt_int_list(q, "weight_block_size", 1, 1 << 20, err)) {
      if (block->size() != 2)
        throw err("weight_block_size", "field 'weight_block_size' must hold 2 integers");
      scale = 4.0 / static_cast<double>((*block)[0] * (*block)[1]);
    }
    f.linear_bytes_per_param = f.expert_bytes_per_param = 1.0 + scale;
  } else if (method == "mxfp4") {
    f.expert_bytes_per_param = 4.25 / 8;  // 4-bit values + one 8-bit scale per 32
  } else if (method == "awq" || method == "gptq") {
    const std::int64_t bits = detail::opt_nonneg(q, "bits", 4, err);
    if (bits != 2 && bits != 3 && bits != 4 && bits != 8)
      throw err("bits",
                fmt::format("field 'bits' of {} must be 2, 3, 4 or 8, got {}", method, bits));
    auto group = detail::opt_int(q, "group_size", err).value_or(128);
    if (group < -1 || group == 0 || group > (1 << 20))
      throw err("group_size",
                fmt::format("field 'group_size' must be -1 or in [1, 2^20], got {}", group));
    f.linear_bytes_per_param = f.expert_bytes_per_param =
        grouped_bytes(static_cast<double>(bits),
                      static_cast<double>(std::max<std::int64_t>(group, 0)), 2.0, true);
  } else {  // compressed-tensors: the first config group's weight scheme
    const json* groups = field(q, "config_groups");
    if (!groups || !groups->is_object() || groups->empty())
      throw err("config_groups", "compressed-tensors needs a non-empty 'config_groups' object");
    const json& w = groups->begin().value();
    const json* weights = field(w, "weights");
    if (!weights || !weights->is_object())
      throw err("weights", "a compressed-tensors config group needs a 'weights' object");
    const std::int64_t bits = detail::opt_nonneg(*weights, "num_bits", 8, err);
    if (bits < 1 || bits > 16)
      throw err("num_bits", fmt::format("field 'num_bits' must be in [1, 16], got {}", bits));
    const std::string strategy = detail::opt_string(*weights, "strategy", err).value_or("tensor");
    const std::int64_t group =
        strategy == "group" ? detail::opt_nonneg(*weights, "group_size", 128, err) : 0;
    const bool symmetric = detail::opt_bool(*weights, "symmetric", err).value_or(true);
    f.linear_bytes_per_param = f.expert_bytes_per_param =
        grouped_bytes(static_cast<double>(bits), static_cast<double>(group), 2.0, !symmetric);
  }
  return f;
}

}  // namespace

const char* supported_quant_methods() { return "fp8, mxfp4, awq, gptq, compressed-tensors"; }

WeightFormat parse_weight_format(const json& e, std::int64_t dtype_bytes,
                                 const detail::ErrorAt& err) {
  std::string method = "none";
  json q = json::object();
  if (const json* qc = field(e, "quantization_config")) {
    if (!qc->is_object())
      throw err("quantization_config", "field 'quantization_config' must be an object");
    q = *qc;
    method = detail::opt_string(q, "quant_method", err).value_or("none");
    if (std::find(std::begin(kMethods), std::end(kMethods), method) == std::end(kMethods))
      throw err("quant_method",
                fmt::format("field 'quantization_config.quant_method': unsupported method '{}' "
                            "(supported: {})",
                            method, supported_quant_methods()));
  }
  // The resolved form (config.resolved.yaml): the format itself, whatever the file says.
  if (const json* wf = field(e, "weight_format")) {
    if (!wf->is_object())
      throw err("weight_format", "field 'weight_format' must be an object");
    WeightFormat f;
    f.method = detail::opt_string(*wf, "method", err).value_or("none");
    if (std::find(std::begin(kMethods), std::end(kMethods), f.method) == std::end(kMethods))
      throw err("method", fmt::format("field 'weight_format.method': unsupported method '{}' "
                                      "(supported: none, {})",
                                      f.method, supported_quant_methods()));
    const auto bytes = [&](const char* key) {
      const std::optional<double> v = detail::opt_number(*wf, key, err);
      if (!v || *v <= 0 || *v > 8)
        throw err(key, fmt::format("field 'weight_format.{}' must be a number of bytes in (0, 8]",
                                   key));
      return *v;
    };
    f.linear_bytes_per_param = bytes("linear_bytes_per_param");
    f.expert_bytes_per_param = bytes("expert_bytes_per_param");
    f.other_bytes_per_param = bytes("other_bytes_per_param");
    return f;
  }
  if (auto inline_q = detail::opt_string(e, "quantization", err)) {
    if (*inline_q != "fp8" && *inline_q != "none")
      throw err(
          "quantization",
          fmt::format("field 'quantization': unknown value '{}' (allowed: fp8, none)", *inline_q));
    method = *inline_q;
    q = json::object();
  }
  return format_of(q, method, dtype_bytes, err);
}

ParameterBreakdown parameter_breakdown(const ModelConfig& m) {
  // In double: exact for every real model (< 2^53), and no int64 overflow for absurd configs.
  const auto h = static_cast<double>(m.hidden_size),
             heads = static_cast<double>(m.num_attention_heads);
  const auto d = static_cast<double>(m.head_dim), kv = static_cast<double>(m.num_key_value_heads);
  ParameterBreakdown p;
  p.embeddings = static_cast<double>(m.vocab_size) * h * (m.tie_word_embeddings ? 1 : 2);
  if (m.model_type == "opt" || m.model_type == "gpt2")
    p.embeddings += static_cast<double>(m.max_position_embeddings) * h;
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
  const double shared = m.shared_expert_intermediate_size > 0
                            ? 3 * h * static_cast<double>(m.shared_expert_intermediate_size)
                            : static_cast<double>(m.num_shared_experts) * expert;
  p.linear = layers * attn + (layers - moe_layers) * dense_mlp;
  p.experts = moe_layers * (static_cast<double>(m.num_experts) * expert + shared);
  p.active_experts = moe_layers * (static_cast<double>(m.num_experts_per_tok) * expert + shared);
  p.routers = moe_layers * h * static_cast<double>(m.num_experts);
  return p;
}

std::int64_t weight_bytes(const ModelConfig& m) {
  const WeightFormat& f = m.weights;
  if (f.method == "none") return m.num_parameters * m.dtype_bytes;
  const ParameterBreakdown p = parameter_breakdown(m);
  const double scale = p.total() > 0 ? static_cast<double>(m.num_parameters) / p.total() : 0.0;
  const double bytes =
      scale * (p.embeddings * f.other_bytes_per_param + p.linear * f.linear_bytes_per_param +
               p.experts * f.expert_bytes_per_param + p.routers * f.other_bytes_per_param);
  return static_cast<std::int64_t>(std::min(std::ceil(bytes), 9.0e18));
}

std::int64_t ModelConfig::weight_bytes() const { return kvsim::weight_bytes(*this); }

}  // namespace kvsim
