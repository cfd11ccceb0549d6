#include "validate/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <vector>

namespace kvsim::validate {

ValidationSummary summarize(const ValidationHarness& harness) {
  ValidationSummary s;
  const auto& recs = harness.records();
  s.steps_total = harness.steps_seen();
  s.steps_sampled = static_cast<std::int64_t>(recs.size());
  s.tokens_written = harness.tokens_written();
  double worst = -1;
  std::vector<double> lat;
  for (const ValidationRecord& r : recs) {
    if (!r.pass) {
      ++s.steps_failed;
      if (s.first_failed_step < 0) s.first_failed_step = r.step;
    }
    s.max_abs_err = std::max(s.max_abs_err, r.err.max_abs);
    if (std::isfinite(r.err.rel_fro)) s.max_rel_err = std::max(s.max_rel_err, r.err.rel_fro);
    if (std::isfinite(r.err.nmse)) s.max_nmse = std::max(s.max_nmse, r.err.nmse);
    s.nonfinite += r.err.num_nonfinite;
    s.mismatched_slots += r.mismatched_slots;
    s.timer_output_mismatch_steps += r.timer_output_mismatch;
    if (r.error_score() > worst) {
      worst = r.error_score();
      s.worst_step = r.step;
      s.worst_request_id = r.worst_request_id;
    }
    lat.push_back(r.latency_us);
  }
  if (!lat.empty()) {
    std::sort(lat.begin(), lat.end());
    const std::size_t n = lat.size();
    s.median_latency_us = n % 2 ? lat[n / 2] : 0.5 * (lat[n / 2 - 1] + lat[n / 2]);
  }
  s.pass = s.steps_failed == 0;
  return s;
}

std::string validation_csv(const std::vector<ValidationRecord>& records) {
  std::string out = kValidationCsvHeader;
  out += '\n';
  for (const ValidationRecord& r : records) {
    out += fmt::format(
        "{},{:.6f},{},{},{},{},{},{},{:.6e},{:.6e},{:.6e},{:.6e},{},{},{},{},{},{:.3f},{:.3f},{:."
        "3f},{},"
        "{},{:.4f},{}\n",
        r.step, r.time_s, r.num_seqs, r.num_prefill_seqs, r.prefill_tokens, r.decode_tokens,
        r.max_context, r.sum_context_tokens, r.err.max_abs, r.err.mean_abs, r.err.rel_fro,
        r.err.nmse, r.err.num_nonfinite, r.err.num_violations, r.mismatched_slots,
        r.worst_request_id, r.pass ? 1 : 0, r.latency_us, r.latency_p10_us, r.latency_p90_us,
        r.repeats, r.bytes, r.achieved_gb_per_s, sample_reason_names(r.reasons));
  }
  return out;
}

namespace {
/// JSON has no inf/NaN: such a value is written as null.
nlohmann::json num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
}
nlohmann::json step_or_null(std::int64_t s) {
  return s >= 0 ? nlohmann::json(s) : nlohmann::json(nullptr);
}
}  // namespace

std::string validation_json(const Scenario& scenario, const ValidationHarness& harness,
                            const ValidationOptions& options, const ValidationSummary& s) {
  const ValidationSetup& u = harness.setup();
  nlohmann::ordered_json j;
  j["name"] = scenario.name;
  j["scenario"] = scenario.file;
  j["seed"] = scenario.seed;
  j["backend"] = kernels::backend_name(u.backend);
  j["device"] = u.device;
  j["dtype"] = kernels::dtype_name(u.dtype);
  j["num_q_heads"] = u.num_q_heads;
  j["num_kv_heads"] = u.pool.num_kv_heads;
  j["head_size"] = u.pool.head_size;
  j["block_size"] = u.pool.block_size;
  j["num_gpu_blocks"] = u.pool.num_blocks;
  j["pool_bytes"] = u.pool_bytes;
  const PoolUsage pool = harness.pool_usage();
  j["memory"] = {
      {"limit_bytes", options.max_pool_bytes},        {"peak_bytes", pool.peak_bytes},
      {"bookkeeping_bytes", u.bookkeeping_bytes},     {"clears", pool.clears},
      {"kv_rows_written_to_pool", pool.rows_written}, {"blocks_refreshed", pool.blocks_refreshed},
      {"blocks_released", pool.blocks_released}};
  if (u.block_moves) {
    const BlockMoveCounts mv = harness.block_moves();
    j["block_moves"] = {{"num_cpu_blocks", u.num_cpu_blocks},
                        {"swap_pool_bytes", u.swap_pool_bytes},
                        {"swapped_in_blocks", mv.swapped_in},
                        {"swapped_out_blocks", mv.swapped_out},
                        {"copied_blocks", mv.copied},
                        {"steps_with_moves", mv.steps},
                        {"checked_steps_with_moves", mv.checked_steps},
                        {"moved_slots_read", pool.moved_slots_read}};
  }
  j["tolerance"] = {{"atol", u.tol.atol}, {"rtol", u.tol.rtol}, {"max_rel_err", u.tol.max_rel_fro}};
  const SamplePlan& plan = harness.plan();
  nlohmann::ordered_json sampling{{"mode", sample_mode_name(plan.mode)}};
  switch (plan.mode) {
    case SamplePlan::Mode::kEvery:
      sampling["every_steps"] = options.sample_every_steps;
      break;
    case SamplePlan::Mode::kProb:
      sampling["prob"] = options.sample_prob;
      break;
    case SamplePlan::Mode::kBounded:
      sampling["steps"] = options.sample_steps;
      sampling["budget_s"] = options.sample_budget_s;
      sampling["spread"] = plan.spread;
      sampling["preemption"] = plan.preemption;
      sampling["prefix_hit"] = plan.prefix_hit;
      sampling["moved_to_lighter_step"] = plan.swapped;
      break;
  }
  sampling["planned"] = plan.num_sampled;
  sampling["estimated_check_s"] = std::round(plan.check_s * 10) / 10;  // the cost model's
  sampling["description"] = plan.description;
  j["sampling"] = sampling;
  j["timing"] = {{"method", u.backend == kernels::BackendKind::kCuda
                                ? "cuda events around the launch on a device mirror of the pool"
                                : "wall clock around AttentionBackend::attention"},
                 {"warmup", u.warmup},
                 {"repeats", u.repeats},
                 {"statistic", "median"}};
  j["steps_total"] = s.steps_total;
  j["steps_sampled"] = s.steps_sampled;
  j["steps_failed"] = s.steps_failed;
  j["tokens_written"] = s.tokens_written;
  j["max_abs_err"] = num(s.max_abs_err);
  j["max_rel_err"] = num(s.max_rel_err);
  j["max_nmse"] = num(s.max_nmse);
  j["nonfinite"] = s.nonfinite;
  j["mismatched_slots"] = s.mismatched_slots;
  j["first_failed_step"] = step_or_null(s.first_failed_step);
  j["worst_step"] = step_or_null(s.worst_step);
  j["worst_request_id"] =
      s.worst_step >= 0 ? nlohmann::json(s.worst_request_id) : nlohmann::json(nullptr);
  j["median_latency_us"] = num(s.median_latency_us);
  if (u.backend == kernels::BackendKind::kCuda)
    j["timer_output_mismatch_steps"] = s.timer_output_mismatch_steps;
  if (options.fault.kind != FaultInjection::Kind::kNone)
    j["fault"] = {{"kind", fault_kind_name(options.fault.kind)},
                  {"planted_step", step_or_null(harness.fault_step())}};
  j["pass"] = s.pass;
  return j.dump(2) + "\n";
}

std::string calibration_csv(const ValidationHarness& harness) {
  const std::int64_t layers = std::max<std::int64_t>(harness.setup().num_layers, 1);
  std::string out =
      "num_seqs,prefill_tokens,decode_tokens,sum_context_tokens,sum_context_sq,num_prefill_seqs,"
      "step_time_us,attention_us_per_layer,num_layers\n";
  for (const ValidationRecord& r : harness.records())
    out += fmt::format("{},{},{},{},{:.1f},{},{:.3f},{:.3f},{}\n", r.num_seqs, r.prefill_tokens,
                       r.decode_tokens, r.sum_context_tokens, r.sum_context_sq, r.num_prefill_seqs,
                       r.latency_us * static_cast<double>(layers), r.latency_us, layers);
  return out;
}

void write_file_atomically(const std::filesystem::path& path, const std::string& text) {
  const std::filesystem::path tmp = path.string() + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << text;
    f.close();
    if (!f) throw std::runtime_error(tmp.string() + ": cannot write file");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw std::runtime_error(path.string() + ": cannot write file (" + ec.message() + ")");
}

}  // namespace kvsim::validate
