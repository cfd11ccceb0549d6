#include "sim/workload/samplers.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "core/common/assert.h"
#include "sim/common/csv_util.h"
#include "sim/common/errors.h"

namespace kvsim {

namespace {
__extension__ typedef unsigned __int128 U128;
}  // namespace

double uniform01(RngStream& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

double uniform01_open_low(RngStream& rng) { return 1.0 - uniform01(rng); }

std::int64_t uniform_int(RngStream& rng, std::int64_t lo, std::int64_t hi) {
  KVSIM_ASSERT(lo <= hi);
  const std::uint64_t range = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
  if (range == ~std::uint64_t{0}) return static_cast<std::int64_t>(rng());
  const std::uint64_t span = range + 1;
  U128 m = static_cast<U128>(rng()) * span;
  auto low = static_cast<std::uint64_t>(m);
  if (low < span) {
    const std::uint64_t threshold = (0 - span) % span;
    while (low < threshold) {
      m = static_cast<U128>(rng()) * span;
      low = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(lo) +
                                   static_cast<std::uint64_t>(m >> 64));
}

double exponential(RngStream& rng, double rate) {
  KVSIM_ASSERT(rate > 0);
  return -std::log(uniform01_open_low(rng)) / rate;
}

double standard_normal(RngStream& rng) {
  while (true) {
    const double u = 2.0 * uniform01(rng) - 1.0;
    const double v = 2.0 * uniform01(rng) - 1.0;
    const double s = u * u + v * v;
    if (s >= 1.0 || s == 0.0) continue;
    return u * std::sqrt(-2.0 * std::log(s) / s);
  }
}

double normal(RngStream& rng, double mean, double stddev) {
  return mean + stddev * standard_normal(rng);
}

double lognormal_mean(RngStream& rng, double mean, double sigma) {
  KVSIM_ASSERT(mean > 0 && sigma >= 0);
  const double mu = std::log(mean) - 0.5 * sigma * sigma;
  return std::exp(mu + sigma * standard_normal(rng));
}

double gamma(RngStream& rng, double shape, double scale) {
  KVSIM_ASSERT(shape > 0 && scale > 0);
  if (shape < 1.0) {
    const double g = gamma(rng, shape + 1.0, scale);
    return g * std::pow(uniform01_open_low(rng), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x = 0, v = 0;
    do {
      x = standard_normal(rng);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform01_open_low(rng);
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2) return d * v * scale;
    if (std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

double gamma_mean_cv(RngStream& rng, double mean, double cv) {
  KVSIM_ASSERT(mean > 0 && cv > 0);
  const double shape = 1.0 / (cv * cv);
  return gamma(rng, shape, mean / shape);
}

// --- Zipf: rejection-inversion (W. Hörmann, G. Derflinger, "Rejection-inversion to generate
// variates from monotone discrete distributions", ACM TOMACS 1996). H is an integral of the hat
// h(x) = x^-s; helper1/helper2 keep log1p(x)/x and expm1(x)/x accurate near x = 0 (s near 1).
namespace {
double helper1(double x) {
  return std::fabs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double helper2(double x) {
  return std::fabs(x) > 1e-8 ? std::expm1(x) / x
                             : 1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + 0.25 * x));
}
}  // namespace

ZipfSampler::ZipfSampler(std::int64_t n, double s) : n_(n), s_(s) {
  KVSIM_ASSERT(n >= 1 && s >= 0);
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(static_cast<double>(n) + 0.5);
  threshold_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

double ZipfSampler::h(double x) const { return std::exp(-s_ * std::log(x)); }

double ZipfSampler::h_integral(double x) const {
  const double log_x = std::log(x);
  return helper2((1.0 - s_) * log_x) * log_x;
}

double ZipfSampler::h_integral_inverse(double x) const {
  double t = x * (1.0 - s_);
  if (t < -1.0) t = -1.0;  // numerical guard, as in the reference implementation
  return std::exp(helper1(t) * x);
}

std::int64_t ZipfSampler::operator()(RngStream& rng) const {
  if (n_ == 1) return 1;
  while (true) {
    const double u = h_integral_n_ + uniform01(rng) * (h_integral_x1_ - h_integral_n_);
    const double x = h_integral_inverse(u);
    auto k = static_cast<std::int64_t>(x + 0.5);
    if (k < 1) k = 1;
    if (k > n_) k = n_;
    const auto kd = static_cast<double>(k);
    if (kd - x <= threshold_ || u >= h_integral(kd + 0.5) - h(kd)) return k;
  }
}

// --- Empirical.
EmpiricalSampler::EmpiricalSampler(std::vector<double> values) : values_(std::move(values)) {
  KVSIM_ASSERT(!values_.empty());
}

EmpiricalSampler EmpiricalSampler::from_csv_column(const std::string& path,
                                                   const std::string& column) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot open file");
  std::string line;
  std::vector<std::string> fields;
  if (!std::getline(in, line) || !split_csv_line(line, fields))
    throw ConfigError(path, 1, 1, "expected a CSV header row");
  const auto col = csv_column(fields, column);
  if (!col) {
    std::string names;
    for (const auto& f : fields) names += (names.empty() ? "" : ", ") + f;
    throw ConfigError(path, 1, 1, fmt::format("no column '{}' (columns: {})", column, names));
  }
  std::vector<double> values;
  std::int64_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    if (!split_csv_line(line, fields) || *col >= fields.size())
      throw ConfigError(path, line_no, 1, fmt::format("row has no column '{}'", column));
    const auto v = parse_double_text(fields[*col]);
    if (!v)
      throw ConfigError(
          path, line_no, 1,
          fmt::format("column '{}': expected a number, got '{}'", column, fields[*col]));
    values.push_back(*v);
  }
  if (values.empty()) throw ConfigError(path + ": no data rows");
  return EmpiricalSampler(std::move(values));
}

double EmpiricalSampler::operator()(RngStream& rng) const {
  return values_[static_cast<std::size_t>(
      uniform_int(rng, 0, static_cast<std::int64_t>(values_.size()) - 1))];
}

double EmpiricalSampler::mean() const {
  return std::accumulate(values_.begin(), values_.end(), 0.0) / static_cast<double>(values_.size());
}

}  // namespace kvsim
