#pragma once
// What `kvsim validate` writes next to the run's normal outputs (sim/OUTPUTS.md):
//   validation.csv   one row per sampled step (columns in kValidationCsvHeader), with why it was
//                    sampled (sampled_as: sample_reason_names, e.g. "spread+prefix_hit")
//   validation.json  the summary: what was validated (backend, device, dtype, shapes, tolerance),
//                    how steps were sampled, the pool's memory, steps sampled and failed, the
//                    largest errors, pass/fail
// and, on request, a measurements CSV for `kvsim calibrate` (sim/engine/latency_model.h).
// Latencies are measured, so these files are not byte-identical across runs; the errors are
// (for one backend and build).

#include <cstdint>
#include <filesystem>
#include <string>

#include "sim/config/scenario.h"
#include "validate/harness.h"

namespace kvsim::validate {

/// The header row of validation.csv.
inline constexpr const char* kValidationCsvHeader =
    "step,time_s,num_seqs,num_prefill_seqs,prefill_tokens,decode_tokens,max_context,"
    "sum_context_tokens,max_abs_err,mean_abs_err,rel_err,nmse,nonfinite,violations,"
    "mismatched_slots,worst_request_id,pass,latency_us,latency_p10_us,latency_p90_us,repeats,"
    "bytes,achieved_gb_per_s,sampled_as";

/// The whole run's verdict. Errors are maxima over sampled steps (max_abs over finite outputs;
/// non-finite outputs are counted in `nonfinite` and fail the run).
struct ValidationSummary {
  std::int64_t steps_total = 0;
  std::int64_t steps_sampled = 0;
  std::int64_t steps_failed = 0;
  std::int64_t tokens_written = 0;  // K/V rows written into the pool over the run
  double max_abs_err = 0;
  double max_rel_err = 0;  // relative Frobenius error of the worst step
  double max_nmse = 0;
  std::int64_t nonfinite = 0;
  std::int64_t mismatched_slots = 0;  // summed over sampled steps
  std::int64_t first_failed_step = -1;
  std::int64_t worst_step = -1;  // largest error_score()
  std::uint64_t worst_request_id = 0;
  double median_latency_us = 0;  // median over sampled steps of the per-step median
  std::int64_t timer_output_mismatch_steps = 0;
  bool pass = true;  // no sampled step failed
};

[[nodiscard]] ValidationSummary summarize(const ValidationHarness& harness);

/// validation.csv text.
[[nodiscard]] std::string validation_csv(const std::vector<ValidationRecord>& records);

/// validation.json text.
[[nodiscard]] std::string validation_json(const Scenario& scenario,
                                          const ValidationHarness& harness,
                                          const ValidationOptions& options,
                                          const ValidationSummary& summary);

/// Calibration rows for `kvsim calibrate`: the batch features of each sampled step and
/// step_time_us = the measured kernel latency of one layer x the model's num_hidden_layers (the
/// attention part of a forward pass), plus attention_us_per_layer and num_layers.
[[nodiscard]] std::string calibration_csv(const ValidationHarness& harness);

/// Writes `text` to `path` through `path.tmp` and a rename. Throws std::runtime_error.
void write_file_atomically(const std::filesystem::path& path, const std::string& text);

}  // namespace kvsim::validate
