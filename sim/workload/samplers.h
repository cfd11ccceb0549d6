#pragma once
// Random variates written here rather than taken from std::*_distribution, whose algorithms the
// standard leaves to the library: these give the same numbers with every libstdc++/libc++.
// Each function draws from a caller-owned stream (sim/rng.h) and documents how many 64-bit words
// it consumes where that is fixed.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/common/rng.h"

namespace kvsim {

/// Uniform in [0, 1) with 53 random bits: (word >> 11) * 2^-53. One word.
[[nodiscard]] double uniform01(RngStream& rng);
/// Uniform in (0, 1]: 1 - uniform01(). One word. Safe for log().
[[nodiscard]] double uniform01_open_low(RngStream& rng);
/// Uniform integer in [lo, hi] (inclusive), unbiased (Lemire's multiply-and-reject).
/// Precondition: lo <= hi.
[[nodiscard]] std::int64_t uniform_int(RngStream& rng, std::int64_t lo, std::int64_t hi);
/// Exponential with the given rate (mean 1/rate) by inversion. One word. Precondition: rate > 0.
[[nodiscard]] double exponential(RngStream& rng, double rate);
/// Standard normal by Marsaglia's polar method (a pair is drawn, one value kept, so a call is
/// self-contained and the stream position depends only on the number of rejections).
[[nodiscard]] double standard_normal(RngStream& rng);
/// Normal with mean `mean` and standard deviation `stddev`.
[[nodiscard]] double normal(RngStream& rng, double mean, double stddev);
/// Lognormal whose *distribution mean* is `mean` and whose log has standard deviation `sigma`:
/// exp(mu + sigma Z) with mu = ln(mean) - sigma^2/2. Precondition: mean > 0, sigma >= 0.
[[nodiscard]] double lognormal_mean(RngStream& rng, double mean, double sigma);
/// Gamma(shape, scale) by Marsaglia and Tsang (2000); shape < 1 via the boost
/// Gamma(shape+1) * U^(1/shape). Precondition: shape > 0, scale > 0.
[[nodiscard]] double gamma(RngStream& rng, double shape, double scale);
/// Gamma with the given mean and coefficient of variation: shape = 1/cv^2, scale = mean*cv^2.
[[nodiscard]] double gamma_mean_cv(RngStream& rng, double mean, double cv);

/// Zipf over {1, ..., n} with P(k) proportional to k^-s, by Hörmann and Derflinger's
/// rejection-inversion (O(1) memory and expected time for any n). s = 0 is uniform.
class ZipfSampler {
 public:
  /// Precondition: n >= 1, s >= 0.
  ZipfSampler(std::int64_t n, double s);
  /// One draw in [1, n].
  [[nodiscard]] std::int64_t operator()(RngStream& rng) const;
  [[nodiscard]] std::int64_t n() const { return n_; }
  [[nodiscard]] double s() const { return s_; }

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;

  std::int64_t n_;
  double s_;
  double h_integral_x1_ = 0;
  double h_integral_n_ = 0;
  double threshold_ = 0;
};

/// Resampling of observed values (bootstrap): each draw is one of `values`, uniformly.
class EmpiricalSampler {
 public:
  /// Precondition: values is not empty.
  explicit EmpiricalSampler(std::vector<double> values);
  /// Reads column `column` (by header name) of a CSV file; a missing column or a non-numeric cell
  /// is a ConfigError naming file:line.
  static EmpiricalSampler from_csv_column(const std::string& path, const std::string& column);
  [[nodiscard]] double operator()(RngStream& rng) const;
  [[nodiscard]] double mean() const;
  [[nodiscard]] const std::vector<double>& values() const { return values_; }

 private:
  std::vector<double> values_;
};

}  // namespace kvsim
