#pragma once
// A scalar distribution read from scenario YAML, used for token lengths, think times and the like.
//
// Accepted forms (one family key, plus optional `min`/`max` bounds that clamp every draw):
//   512                                  fixed value (same as {fixed: 512})
//   {fixed: 512}
//   {uniform: {min: 100, max: 200}}      integers: inclusive [min, max]; reals: [min, max)
//   {normal: {mean: 300, std: 50}}
//   {lognormal: {mean: 300, sigma: 0.8}} `mean` is the distribution's mean (not the log's)
//   {gamma: {mean: 300, cv: 1.5}}
//   {exponential: {mean: 300}}
//   {zipf: {n: 4096, s: 1.1}}            values 1..n, P(k) ~ k^-s
//   {empirical: {file: lengths.csv, column: ContextTokens}}   resampled column of a CSV file
// Integer draws round to nearest, then clamp to [min, max].

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sim/common/rng.h"
#include "sim/workload/samplers.h"
#include "sim/common/yaml_util.h"

namespace kvsim {

class Distribution {
 public:
  enum class Kind {
    kFixed,
    kUniform,
    kNormal,
    kLognormal,
    kGamma,
    kExponential,
    kZipf,
    kEmpirical
  };

  /// A distribution that always gives `value` clamped to [min, max] (as parse() of
  /// {fixed: value, min: min, max: max} would).
  static Distribution fixed(double value, double min = -kDoubleMax, double max = kDoubleMax);
  /// Parses one of the forms above. `lower`/`upper` are the bounds a value may never leave (the
  /// YAML `min`/`max` may narrow them, not widen them); `integer` selects integer semantics.
  static Distribution parse(const YAML::Node& node, const YamlContext& ctx, double lower,
                            double upper, bool integer);

  /// One draw, clamped to [min, max].
  [[nodiscard]] double sample(RngStream& rng) const;
  /// One draw rounded to the nearest integer, clamped to [min, max].
  [[nodiscard]] std::int64_t sample_int(RngStream& rng) const;
  /// The mean before clamping (exact for every family; the empirical sample mean).
  [[nodiscard]] double mean() const;
  [[nodiscard]] Kind kind() const { return kind_; }
  [[nodiscard]] double min() const { return min_; }
  [[nodiscard]] double max() const { return max_; }
  /// The canonical form of this distribution, in flow style: the family with all its parameters,
  /// then the finite bounds, e.g. {lognormal: {mean: 300, sigma: 0.8}, min: 1, max: 4000}.
  /// Numbers are written to round-trip exactly and an empirical file as resolved, so parse() of
  /// it with the same lower/upper/integer gives the same draws (and the same canonical form).
  [[nodiscard]] YAML::Node to_yaml() const;

 private:
  Kind kind_ = Kind::kFixed;
  double a_ = 0, b_ = 0;  // family parameters: (value), (min,max), (mean,std), (mean,sigma), ...
  bool integer_ = false;
  double min_ = -kDoubleMax, max_ = kDoubleMax;
  std::optional<ZipfSampler> zipf_;
  std::shared_ptr<const EmpiricalSampler> empirical_;
  std::string empirical_file_, empirical_column_;  // kEmpirical: the CSV (resolved) and column
};

}  // namespace kvsim
