#pragma once
// The scenario's `latency:` section as a typed struct: parsed and validated once, when the
// scenario loads (parse_latency_config; a fit file is read then), written back whole for
// config.resolved.yaml (latency_config_yaml). The models themselves: sim/engine/latency_model.h.
//
// latency:
//   model: roofline             (default)
//     mfu: 0.5                  achieved fraction of peak FLOP/s
//     mbu: 0.8                  achieved fraction of peak HBM bandwidth
//     step_overhead_us: 1000    fixed per-step cost (scheduling, sampling, launch)
//     interconnect_bytes_per_s: 450e9   tensor-parallel all-reduce bandwidth (per direction)
//     allreduce_latency_us: 10  per all-reduce (2 per layer) when tensor_parallel_size > 1
//   model: fitted
//     file: fits/h100-qwen.yaml  written by `kvsim calibrate`, and/or
//     coefficients: {intercept: 900, decode_tokens: 2.5, ...}   inline (absent terms are 0);
//                               with both, they must agree exactly (config.resolved.yaml has both)
//   model: constant
//     step_time_us: 10000

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sim/common/yaml_util.h"

namespace kvsim {

/// Names of the fitted model's terms, in coefficient order (also the CSV column names).
inline constexpr std::array<const char*, 6> kFitTermNames = {"intercept",      "prefill_tokens",
                                                             "decode_tokens",  "sum_context_tokens",
                                                             "sum_context_sq", "num_seqs"};

/// The fitted model's coefficients: step_time_us = sum of coefficient * term (kFitTermNames).
struct FitCoefficients {
  std::array<double, 6> coefficients_us{};  // kFitTermNames order
};

/// The roofline's efficiency factors and fixed costs (the keys of `model: roofline`).
struct RooflineParams {
  double mfu = 0.5;                         // achieved fraction of peak FLOP/s
  double mbu = 0.8;                         // achieved fraction of peak HBM bandwidth
  double step_overhead_us = 1000;           // fixed cost of every step
  double interconnect_bytes_per_s = 450e9;  // all-reduce bandwidth, per direction
  double allreduce_latency_us = 10;         // per all-reduce (2 per layer) when tp > 1
};

/// The scenario's `latency:` section with its defaults filled in.
struct LatencyConfig {
  enum class Kind : std::uint8_t { kRoofline, kFitted, kConstant };
  Kind kind = Kind::kRoofline;
  RooflineParams roofline;              // kRoofline
  std::optional<std::string> fit_file;  // kFitted: the fit file as resolved, when one was named
  FitCoefficients fit;                  // kFitted: the coefficients the model uses
  double step_time_us = 0;              // kConstant
};

/// The keys `latency:` accepts for a model of `kind` (`model` itself first).
[[nodiscard]] std::span<const std::string_view> latency_keys(LatencyConfig::Kind kind);

/// Reads and validates `latency:` (an absent section is the roofline with its defaults); a fit
/// file is read here, once.
[[nodiscard]] LatencyConfig parse_latency_config(const YAML::Node& latency, const YamlContext& ctx);
/// The resolved `latency:` section: the model and every key it reads with the value used (fitted:
/// the file, null when none was named, and always the six coefficients, written to round-trip
/// exactly). Parsing it gives `c` back.
[[nodiscard]] YAML::Node latency_config_yaml(const LatencyConfig& c);

/// The coefficients of a fit file written by `kvsim calibrate` (fit_to_yaml in
/// sim/engine/latency_model.h); ConfigError at the file's bad key.
[[nodiscard]] FitCoefficients read_fit_file(const std::string& path);

}  // namespace kvsim
