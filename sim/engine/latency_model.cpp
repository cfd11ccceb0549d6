#include "sim/engine/latency_model.h"

#include <fmt/format.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <fstream>

#include "core/common/assert.h"
#include "sim/common/csv_util.h"

namespace kvsim {

namespace {

SimTimeNs us_to_ns(double us) {
  if (!(us >= 1.0)) us = 1.0;  // also catches NaN
  if (us > 9.0e12) us = 9.0e12;
  return static_cast<SimTimeNs>(std::llround(us * 1e3));
}

std::array<double, 6> terms(const BatchFeatures& b) {
  return {1.0,
          static_cast<double>(b.prefill_tokens),
          static_cast<double>(b.decode_tokens),
          static_cast<double>(b.sum_context_tokens),
          b.sum_context_sq,
          static_cast<double>(b.num_seqs)};
}

class ConstantLatency final : public LatencyModel {
 public:
  explicit ConstantLatency(double us) : ns_(us_to_ns(us)) {}
  SimTimeNs step_time_ns(const BatchFeatures&) const override { return ns_; }

 private:
  SimTimeNs ns_;
};

class FittedLatency final : public LatencyModel {
 public:
  explicit FittedLatency(const FitCoefficients& fit) { static_cast<FitCoefficients&>(fit_) = fit; }
  SimTimeNs step_time_ns(const BatchFeatures& b) const override {
    return us_to_ns(fit_.predict_us(b));
  }

 private:
  LatencyFit fit_;
};

class RooflineLatency final : public LatencyModel {
 public:
  RooflineLatency(const ModelConfig& m, const GpuPreset& gpu, int tp, RooflineParams p)
      : p_(p), gpu_(gpu), tp_(tp), layers_(static_cast<double>(m.num_hidden_layers)) {
    kv_bytes_per_token_ = static_cast<double>(m.kv_cache_spec(16, tp).bytes_per_token());
    active_params_ = static_cast<double>(m.num_active_parameters);
    attn_width_ = static_cast<double>(m.num_attention_heads * m.head_dim);
    hidden_bytes_ = static_cast<double>(m.hidden_size * m.dtype_bytes);
    const double wb = static_cast<double>(m.weight_bytes_per_param);
    if (m.num_experts > 0) {
      const double moe_layers = static_cast<double>(
          std::max<std::int64_t>(0, m.num_hidden_layers - m.first_k_dense_replace));
      routed_bytes_ = moe_layers * static_cast<double>(m.num_experts) * 3.0 *
                      static_cast<double>(m.hidden_size * m.moe_intermediate_size) * wb;
      routed_bytes_ = std::min(routed_bytes_, static_cast<double>(m.weight_bytes()));
      experts_ = static_cast<double>(m.num_experts);
      top_k_ = static_cast<double>(m.num_experts_per_tok);
    }
    other_weight_bytes_ = static_cast<double>(m.weight_bytes()) - routed_bytes_;
    flops_per_s_ = gpu_.peak_flops_per_s * p_.mfu;
    bytes_per_s_ = gpu_.hbm_bytes_per_s * p_.mbu;
  }

  SimTimeNs step_time_ns(const BatchFeatures& b) const override {
    const double tokens = static_cast<double>(b.prefill_tokens + b.decode_tokens);
    const double tp = tp_;
    double pairs = b.attention_pairs;
    if (pairs < 0) {
      const double decode_est = static_cast<double>(b.sum_context_tokens);
      const double prefill_est =
          0.5 * (b.sum_context_sq + static_cast<double>(b.sum_context_tokens));
      const double f =
          b.num_seqs > 0 ? static_cast<double>(b.num_prefill_seqs) / static_cast<double>(b.num_seqs)
                         : 0.0;
      pairs = (1.0 - f) * decode_est + f * prefill_est;
    }
    const double flops = (2.0 * active_params_ * tokens + 4.0 * layers_ * attn_width_ * pairs) / tp;
    double weights = other_weight_bytes_;
    if (routed_bytes_ > 0) weights += routed_bytes_ * std::min(1.0, tokens * top_k_ / experts_);
    const double bytes =
        weights / tp + kv_bytes_per_token_ * (static_cast<double>(b.sum_context_tokens) + tokens);
    const double compute_s = flops / flops_per_s_;
    const double memory_s = bytes / bytes_per_s_;
    double comm_s = 0;
    if (tp_ > 1)
      comm_s = 2.0 * layers_ *
               (p_.allreduce_latency_us * 1e-6 +
                tokens * hidden_bytes_ * 2.0 * (tp - 1.0) / tp / p_.interconnect_bytes_per_s);
    return us_to_ns((std::max(compute_s, memory_s) + comm_s) * 1e6 + p_.step_overhead_us);
  }

 private:
  RooflineParams p_;
  GpuPreset gpu_;
  int tp_;
  double layers_;
  double kv_bytes_per_token_ = 0, active_params_ = 0, attn_width_ = 0, hidden_bytes_ = 0;
  double routed_bytes_ = 0, other_weight_bytes_ = 0, experts_ = 1, top_k_ = 0;
  double flops_per_s_ = 0, bytes_per_s_ = 0;  // achieved: peak x mfu, bandwidth x mbu
};

}  // namespace

double LatencyFit::predict_us(const BatchFeatures& b) const {
  const auto t = terms(b);
  double y = 0;
  for (std::size_t i = 0; i < t.size(); ++i) y += coefficients_us[i] * t[i];
  return y;
}

LatencyFit fit_latency(const std::vector<BatchFeatures>& batches, const std::vector<double>& y) {
  const auto n = static_cast<Eigen::Index>(batches.size());
  constexpr Eigen::Index k = 6;
  Eigen::MatrixXd a(n, k);
  Eigen::VectorXd b(n);
  for (Eigen::Index i = 0; i < n; ++i) {
    const auto t = terms(batches[static_cast<std::size_t>(i)]);
    for (Eigen::Index j = 0; j < k; ++j) a(i, j) = t[static_cast<std::size_t>(j)];
    b(i) = y[static_cast<std::size_t>(i)];
  }
  // Unit-scale the columns: sum_context_sq is ~1e12 where the intercept is 1.
  Eigen::VectorXd scale(k);
  for (Eigen::Index j = 0; j < k; ++j) {
    const double m = n > 0 ? a.col(j).cwiseAbs().maxCoeff() : 0.0;
    scale(j) = m > 0 ? m : 1.0;
    a.col(j) /= scale(j);
  }
  Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(a);
  const Eigen::VectorXd x = qr.solve(b);
  LatencyFit fit;
  fit.rows = n;
  for (Eigen::Index j = 0; j < k; ++j) {
    const double c = x(j) / scale(j);
    fit.coefficients_us[static_cast<std::size_t>(j)] = std::isfinite(c) ? c : 0.0;
  }
  double sse = 0, mean = 0, sst = 0;
  for (Eigen::Index i = 0; i < n; ++i) mean += b(i);
  mean /= std::max<double>(1.0, static_cast<double>(n));
  for (Eigen::Index i = 0; i < n; ++i) {
    const double pred = fit.predict_us(batches[static_cast<std::size_t>(i)]);
    const double e = pred - b(i);
    sse += e * e;
    sst += (b(i) - mean) * (b(i) - mean);
    if (b(i) > 0) fit.max_rel_error = std::max(fit.max_rel_error, std::fabs(e) / b(i));
  }
  fit.rmse_us = n > 0 ? std::sqrt(sse / static_cast<double>(n)) : 0.0;
  fit.r2 = sst > 0 ? 1.0 - sse / sst : (sse == 0 ? 1.0 : 0.0);
  return fit;
}

void read_measurements_csv(const std::string& path, std::vector<BatchFeatures>& batches,
                           std::vector<double>& step_time_us) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open file");
  std::string line;
  std::vector<std::string> f;
  if (!std::getline(in, line) || !split_csv_line(line, f))
    throw ConfigError(path, 1, 1, "expected a CSV header row");
  constexpr std::array<const char*, 6> kRequired = {"num_seqs",       "prefill_tokens",
                                                    "decode_tokens",  "sum_context_tokens",
                                                    "sum_context_sq", "step_time_us"};
  std::array<std::size_t, 6> col{};
  for (std::size_t i = 0; i < kRequired.size(); ++i) {
    auto c = csv_column(f, kRequired[i]);
    if (!c)
      throw ConfigError(path, 1, 1,
                        fmt::format("header has no column '{}' (need: num_seqs, "
                                    "prefill_tokens, decode_tokens, sum_context_tokens, "
                                    "sum_context_sq, step_time_us)",
                                    kRequired[i]));
    col[i] = *c;
  }
  const auto col_prefill_seqs = csv_column(f, "num_prefill_seqs");
  std::int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    if (!split_csv_line(line, f)) throw ConfigError(path, line_no, 1, "unterminated quote");
    auto cell = [&](std::size_t c, const char* name) {
      if (c >= f.size())
        throw ConfigError(path, line_no, 1, fmt::format("row has no column '{}'", name));
      auto v = parse_double_text(f[c]);
      if (!v || *v < 0)
        throw ConfigError(path, line_no, 1,
                          fmt::format("{}: expected a number >= 0, got '{}'", name, f[c]));
      return *v;
    };
    BatchFeatures b;
    b.num_seqs = static_cast<std::int64_t>(cell(col[0], kRequired[0]));
    b.prefill_tokens = static_cast<std::int64_t>(cell(col[1], kRequired[1]));
    b.decode_tokens = static_cast<std::int64_t>(cell(col[2], kRequired[2]));
    b.sum_context_tokens = static_cast<std::int64_t>(cell(col[3], kRequired[3]));
    b.sum_context_sq = cell(col[4], kRequired[4]);
    if (col_prefill_seqs)
      b.num_prefill_seqs = static_cast<std::int64_t>(cell(*col_prefill_seqs, "num_prefill_seqs"));
    batches.push_back(b);
    step_time_us.push_back(cell(col[5], kRequired[5]));
  }
  if (batches.empty()) throw ConfigError(path + ": no measurement rows");
}

std::string fit_to_yaml(const LatencyFit& fit, const std::string& source) {
  std::string out =
      "# Step latency model fitted by `kvsim calibrate`; use it as\n"
      "#   latency: {model: fitted, file: THIS_FILE}\n"
      "# step_time_us = intercept + sum(coefficient * feature)\n";
  out += "model: fitted\nunit: us\ncoefficients:\n";
  for (std::size_t i = 0; i < kFitTermNames.size(); ++i)
    out += fmt::format("  {}: {:.17g}\n", kFitTermNames[i], fit.coefficients_us[i]);
  out += fmt::format("fit: {{rows: {}, rmse_us: {:.6g}, r2: {:.6f}, max_rel_error: {:.6f}}}\n",
                     fit.rows, fit.rmse_us, fit.r2, fit.max_rel_error);
  YAML::Emitter e;
  e << YAML::DoubleQuoted << source;
  out += fmt::format("source: {}\n", e.c_str());
  return out;
}

LatencyFit load_fit_file(const std::string& path) {
  LatencyFit fit;
  static_cast<FitCoefficients&>(fit) = read_fit_file(path);
  return fit;
}

std::unique_ptr<LatencyModel> make_latency_model(const LatencyConfig& c, const ModelConfig& model,
                                                 const GpuPreset& gpu, int tp) {
  switch (c.kind) {
    case LatencyConfig::Kind::kConstant:
      return std::make_unique<ConstantLatency>(c.step_time_us);
    case LatencyConfig::Kind::kFitted:
      return std::make_unique<FittedLatency>(c.fit);
    case LatencyConfig::Kind::kRoofline:
      break;
  }
  KVSIM_ASSERT(tp >= 1);  // hardware.tensor_parallel_size is validated when the scenario loads
  return std::make_unique<RooflineLatency>(model, gpu, tp, c.roofline);
}

}  // namespace kvsim
