#pragma once
// What a model's weights occupy, by checkpoint format (`quantization_config` of config.json).
// Parameters are grouped as the formats treat them: embeddings (input and, untied, output),
// the linear layers of attention and dense MLPs, the routed and shared experts of MoE layers,
// and the routers. Bytes per parameter:
// clang-format off
//   none (bf16/fp16/fp32)  everything at the model dtype (2 or 4 B)
//   fp8                    linear layers and experts at 1 B, plus one float32 scale per
//                          weight_block_size block (DeepSeek-V3: 128 x 128 -> 4/16384 B);
//                          per-tensor scales without weight_block_size (negligible, not counted);
//                          embeddings, output head and routers at the model dtype
//   mxfp4 (gpt-oss)        routed experts at 4.25 bits (4-bit values + one 8-bit scale per 32);
//                          attention, routers, embeddings and output head at the model dtype
//                          (its modules_to_not_convert)
//   awq, gptq              linear layers and experts at bits/8 + (2 + bits/8) / group_size
//                          (packed values, one fp16 scale and one packed zero point per group;
//                          default 4 bits, group 128; gptq's act-order g_idx not counted);
//                          embeddings and output head at the model dtype
//   compressed-tensors     the first config group's weights: num_bits/8, plus 2 B per group of
//                          group_size (strategy "group"), plus num_bits/8 per group for an
//                          asymmetric scheme; channel or tensor scales not counted
//                          (w4a16: ~0.52 B, w8a8: 1 B); embeddings and output head at the dtype
// clang-format on
// The inline `quantization: fp8 | none` of a model section overrides the method.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/config/model_json.h"

namespace kvsim {

struct ModelConfig;

/// The checkpoint format (ModelConfig::weights).
struct WeightFormat {
  std::string method = "none";        // none, fp8, mxfp4, awq, gptq, compressed-tensors
  double linear_bytes_per_param = 2;  // attention and dense MLP projections
  double expert_bytes_per_param = 2;  // routed and shared experts
  double other_bytes_per_param = 2;   // embeddings, output head, routers
};

/// The supported quant_method values, comma-separated.
[[nodiscard]] const char* supported_quant_methods();

/// Reads `quantization_config` (and the inline `quantization`) of the effective config object, or
/// the resolved form `weight_format: {method, linear_bytes_per_param, expert_bytes_per_param,
/// other_bytes_per_param}` (config.resolved.yaml writes it; it replaces both),
/// for a model whose dtype takes `dtype_bytes`. Throws ConfigError with file:line:col on an
/// unsupported method or a malformed field.
[[nodiscard]] WeightFormat parse_weight_format(const nlohmann::json& e, std::int64_t dtype_bytes,
                                               const detail::ErrorAt& err);

/// Parameter counts by kind (estimate_num_parameters' terms); `total()` is their sum.
struct ParameterBreakdown {
  double embeddings = 0;      // input embeddings (+ untied output head, + OPT positions)
  double linear = 0;          // attention projections and dense MLPs
  double experts = 0;         // routed and shared experts of the MoE layers
  double routers = 0;         // MoE router weights
  double active_experts = 0;  // the experts one token uses (top-k routed + shared)
  [[nodiscard]] double total() const { return embeddings + linear + experts + routers; }
  [[nodiscard]] double active() const { return embeddings + linear + active_experts + routers; }
};
/// The breakdown of `m` by the parameter formula of model_config.h.
[[nodiscard]] ParameterBreakdown parameter_breakdown(const ModelConfig& m);

/// Bytes of all weights of `m` in its format (all ranks together). When the config gave
/// num_parameters, the breakdown's proportions are scaled to it.
[[nodiscard]] std::int64_t weight_bytes(const ModelConfig& m);

}  // namespace kvsim
