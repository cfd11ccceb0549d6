#pragma once
// Step latency models: how long one engine step (one batch) takes.
//
// The `latency:` keys and their typed form: sim/config/latency_config.h.
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

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/common/sim_types.h"
#include "sim/config/hardware.h"
#include "sim/config/latency_config.h"
#include "sim/config/model_config.h"

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

/// Builds the model a parsed `latency:` section names, for this model, GPU and tensor
/// parallelism (tp >= 1).
[[nodiscard]] std::unique_ptr<LatencyModel> make_latency_model(const LatencyConfig& latency,
                                                               const ModelConfig& model,
                                                               const GpuPreset& gpu, int tp);

/// A fitted linear latency model and how well it fits.
struct LatencyFit : FitCoefficients {
  std::int64_t rows = 0;
  double rmse_us = 0;
  double r2 = 0;
  double max_rel_error = 0;  // max |predicted - measured| / measured over rows with measured > 0

  /// The fitted step time in microseconds (not clamped).
  [[nodiscard]] double predict_us(const BatchFeatures& b) const;
};

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

/// Reads a fit file written by fit_to_yaml (its coefficients: read_fit_file).
[[nodiscard]] LatencyFit load_fit_file(const std::string& path);

}  // namespace kvsim
