#pragma once
// Step latency models: how long one engine step (one batch) takes.
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
//
// Roofline, per GPU: time = max(FLOPs / (peak * mfu), bytes / (hbm * mbu)) + all-reduce + overhead
//   FLOPs = 2 * active_params * (prefill + decode tokens) / tp
//         + 4 * num_layers * num_heads * head_dim * attention_pairs / tp
//   bytes = weights read once per step (MoE: routed experts in proportion to those the batch's
//           tokens can reach, min(1, tokens * top_k / experts)) / tp
//         + KV read: sum_context_tokens * bytes_per_token (per rank)
//         + KV written: (prefill + decode tokens) * bytes_per_token
//   all-reduce = 2 * num_layers * (allreduce_latency + tokens * hidden * dtype_bytes
//                * 2 (tp - 1) / tp / interconnect)                       only when tp > 1
// attention_pairs = sum over new tokens of the context each attends to; when the engine leaves it
// at -1 it is estimated from the sums: sum_context_tokens for a decode-only batch,
// (sum_context_sq + sum_context_tokens) / 2 for a batch of whole prefills, and the mix of the two
// weighted by the fraction of prefill sequences otherwise.
//
// Fitted: step_time_us = c0 + c1 prefill_tokens + c2 decode_tokens + c3 sum_context_tokens
//                        + c4 sum_context_sq + c5 num_seqs       (clamped to >= 1 us)

#include <yaml-cpp/yaml.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/hardware.h"
#include "sim/config/model_config.h"
#include "sim/common/sim_types.h"
#include "sim/common/yaml_util.h"

namespace kvsim {

/// What the latency model sees of one step's batch.
struct BatchFeatures {
  std::int64_t num_seqs = 0;            // sequences scheduled this step
  std::int64_t prefill_tokens = 0;      // prompt tokens computed this step (chunks included)
  std::int64_t decode_tokens = 0;       // generated-token positions computed this step
  std::int64_t sum_context_tokens = 0;  // sum over scheduled seqs of their context after the step
  double sum_context_sq = 0;            // sum over scheduled seqs of context^2
  std::int64_t num_prefill_seqs = 0;    // scheduled seqs still in prefill
  double attention_pairs = -1;          // exact attention (query, key) pairs if known, else -1
};

class LatencyModel {
 public:
  virtual ~LatencyModel() = default;
  /// Duration of a step running this batch, in ns (>= 1).
  virtual SimTimeNs step_time_ns(const BatchFeatures& batch) const = 0;
};

/// Builds the model of the scenario's `latency:` section (parse_latency_config, then the model).
[[nodiscard]] std::unique_ptr<LatencyModel> make_latency_model(const YAML::Node& latency,
                                                               const YamlContext& ctx,
                                                               const ModelConfig& model,
                                                               const GpuPreset& gpu, int tp);

/// Names of the fitted model's terms, in coefficient order (also the CSV column names).
inline constexpr std::array<const char*, 6> kFitTermNames = {"intercept",      "prefill_tokens",
                                                             "decode_tokens",  "sum_context_tokens",
                                                             "sum_context_sq", "num_seqs"};

/// A fitted linear latency model and how well it fits.
struct LatencyFit {
  std::array<double, 6> coefficients_us{};  // kFitTermNames order
  std::int64_t rows = 0;
  double rmse_us = 0;
  double r2 = 0;
  double max_rel_error = 0;  // max |predicted - measured| / measured over rows with measured > 0

  /// The fitted step time in microseconds (not clamped).
  [[nodiscard]] double predict_us(const BatchFeatures& b) const;
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
  LatencyFit fit;                       // kFitted: the coefficients the model uses
  double step_time_us = 0;              // kConstant
};

/// Reads and validates `latency:` (an absent section is the roofline with its defaults); a fit
/// file is read here.
[[nodiscard]] LatencyConfig parse_latency_config(const YAML::Node& latency, const YamlContext& ctx);
/// The resolved `latency:` section: the model and every key it reads with the value used (fitted:
/// the file when one was named and always the six coefficients, written to round-trip exactly).
/// Parsing it gives `c` back.
[[nodiscard]] YAML::Node latency_config_yaml(const LatencyConfig& c);

/// Least-squares fit (Eigen column-pivoting Householder QR on unit-scaled columns). A term whose
/// column is all zeros gets coefficient 0. Precondition: batches.size() == step_time_us.size()
/// >= 1.
[[nodiscard]] LatencyFit fit_latency(const std::vector<BatchFeatures>& batches,
                                     const std::vector<double>& step_time_us);

/// Reads a measurements CSV: header with num_seqs, prefill_tokens, decode_tokens,
/// sum_context_tokens, sum_context_sq, step_time_us (num_prefill_seqs optional); ConfigError with
/// file:line on a bad row.
void read_measurements_csv(const std::string& path, std::vector<BatchFeatures>& batches,
                           std::vector<double>& step_time_us);

/// The YAML text `latency: {model: fitted, file: ...}` reads.
[[nodiscard]] std::string fit_to_yaml(const LatencyFit& fit, const std::string& source);

/// Reads a fit file written by fit_to_yaml.
[[nodiscard]] LatencyFit load_fit_file(const std::string& path);

}  // namespace kvsim
