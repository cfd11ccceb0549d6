#include "sim/workload/distribution.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace kvsim {
namespace {
// The family keys, in Distribution::Kind's order.
constexpr std::string_view kFamilies[] = {"fixed", "uniform",     "normal", "lognormal",
                                          "gamma", "exponential", "zipf",   "empirical"};
}  // namespace

Distribution Distribution::fixed(double value, double min, double max) {
  Distribution d;
  d.kind_ = Kind::kFixed;
  d.a_ = value;
  d.min_ = min;
  d.max_ = max;
  return d;
}

Distribution Distribution::parse(const YAML::Node& node, const YamlContext& ctx, double lower,
                                 double upper, bool integer) {
  Distribution d;
  d.integer_ = integer;
  d.min_ = lower;
  d.max_ = upper;
  if (!node.IsDefined() || node.IsNull())
    throw yaml_error(node, ctx, fmt::format("{}: a distribution is required", ctx.path));
  if (node.IsScalar()) {
    d.kind_ = Kind::kFixed;
    d.a_ = as_double(node, ctx, lower, upper);
    return d;
  }
  if (!node.IsMap())
    throw yaml_error(
        node, ctx,
        fmt::format("{}: expected a number or a mapping like {{lognormal: {{mean: 300, "
                    "sigma: 0.8}}}}, got {}",
                    ctx.path, describe_node(node)));
  std::vector<std::string_view> allowed(std::begin(kFamilies), std::end(kFamilies));
  allowed.push_back("min");
  allowed.push_back("max");
  check_keys(node, std::span<const std::string_view>(allowed), ctx);
  d.min_ = get_double(node, "min", ctx, lower, lower, upper);
  d.max_ = get_double(node, "max", ctx, upper, d.min_, upper);

  std::string family;
  for (std::string_view f : kFamilies) {
    if (!has_key(node, f)) continue;
    if (!family.empty())
      throw yaml_error(
          node, ctx,
          fmt::format("{}: give one distribution, not both '{}' and '{}'", ctx.path, family, f));
    family = f;
  }
  if (family.empty())
    throw yaml_error(node, ctx,
                     fmt::format("{}: no distribution given (one of: fixed, uniform, normal, "
                                 "lognormal, gamma, exponential, zipf, empirical)",
                                 ctx.path));
  const YAML::Node p = node[family];
  const YamlContext pc = ctx.child(family);
  if (family == "fixed") {
    d.kind_ = Kind::kFixed;
    d.a_ = as_double(p, pc, lower, upper);
    return d;
  }
  if (family == "empirical") {
    check_keys(p, {"file", "column"}, pc);
    const std::string file = resolve_input_path(pc, get_string(p, "file", pc, std::nullopt));
    const std::string column = get_string(p, "column", pc, std::nullopt);
    d.kind_ = Kind::kEmpirical;
    d.empirical_ =
        std::make_shared<const EmpiricalSampler>(EmpiricalSampler::from_csv_column(file, column));
    d.empirical_file_ = file;
    d.empirical_column_ = column;
    return d;
  }
  if (!p.IsMap())
    throw yaml_error(
        p, pc,
        fmt::format("{}: expected a mapping of parameters, got {}", pc.path, describe_node(p)));
  if (family == "uniform") {
    check_keys(p, {"min", "max"}, pc);
    d.kind_ = Kind::kUniform;
    d.a_ = get_double(p, "min", pc, std::nullopt, lower, upper);
    d.b_ = get_double(p, "max", pc, std::nullopt, d.a_, upper);
  } else if (family == "normal") {
    check_keys(p, {"mean", "std"}, pc);
    d.kind_ = Kind::kNormal;
    d.a_ = get_double(p, "mean", pc, std::nullopt);
    d.b_ = get_double(p, "std", pc, std::nullopt, 0.0);
  } else if (family == "lognormal") {
    check_keys(p, {"mean", "sigma"}, pc);
    d.kind_ = Kind::kLognormal;
    d.a_ = get_double(p, "mean", pc, std::nullopt, 1e-300);
    d.b_ = get_double(p, "sigma", pc, std::nullopt, 0.0, 10.0);
  } else if (family == "gamma") {
    check_keys(p, {"mean", "cv"}, pc);
    d.kind_ = Kind::kGamma;
    d.a_ = get_double(p, "mean", pc, std::nullopt, 1e-300);
    d.b_ = get_double(p, "cv", pc, std::nullopt, 1e-3, 100.0);
  } else if (family == "exponential") {
    check_keys(p, {"mean"}, pc);
    d.kind_ = Kind::kExponential;
    d.a_ = get_double(p, "mean", pc, std::nullopt, 1e-300);
  } else {  // zipf
    check_keys(p, {"n", "s"}, pc);
    d.kind_ = Kind::kZipf;
    const std::int64_t n = get_int(p, "n", pc, std::nullopt, 1, std::int64_t{1} << 40);
    const double s = get_double(p, "s", pc, std::nullopt, 0.0, 100.0);
    d.zipf_.emplace(n, s);
  }
  return d;
}

YAML::Node Distribution::to_yaml() const {
  YAML::Node out(YAML::NodeType::Map);
  const std::string family(kFamilies[static_cast<std::size_t>(kind_)]);
  YAML::Node p(YAML::NodeType::Map);
  const auto params = [&](const char* a_key, const char* b_key) {
    p[a_key] = number_node(a_);
    if (b_key) p[b_key] = number_node(b_);
  };
  switch (kind_) {
    case Kind::kFixed:
      break;
    case Kind::kUniform:
      params("min", "max");
      break;
    case Kind::kNormal:
      params("mean", "std");
      break;
    case Kind::kLognormal:
      params("mean", "sigma");
      break;
    case Kind::kGamma:
      params("mean", "cv");
      break;
    case Kind::kExponential:
      params("mean", nullptr);
      break;
    case Kind::kZipf:
      p["n"] = zipf_->n();
      p["s"] = number_node(zipf_->s());
      break;
    case Kind::kEmpirical:
      p["file"] = empirical_file_;
      p["column"] = empirical_column_;
      break;
  }
  if (kind_ == Kind::kFixed)
    out[family] = number_node(a_);
  else
    out[family] = p;
  if (min_ != -kDoubleMax) out["min"] = number_node(min_);
  if (max_ != kDoubleMax) out["max"] = number_node(max_);
  out.SetStyle(YAML::EmitterStyle::Flow);
  return out;
}

double Distribution::sample(RngStream& rng) const {
  double x = 0;
  switch (kind_) {
    case Kind::kFixed:
      x = a_;
      break;
    case Kind::kUniform:
      x = integer_ ? static_cast<double>(uniform_int(rng, std::llround(a_), std::llround(b_)))
                   : a_ + (b_ - a_) * uniform01(rng);
      break;
    case Kind::kNormal:
      x = normal(rng, a_, b_);
      break;
    case Kind::kLognormal:
      x = lognormal_mean(rng, a_, b_);
      break;
    case Kind::kGamma:
      x = gamma_mean_cv(rng, a_, b_);
      break;
    case Kind::kExponential:
      x = exponential(rng, 1.0 / a_);
      break;
    case Kind::kZipf:
      x = static_cast<double>((*zipf_)(rng));
      break;
    case Kind::kEmpirical:
      x = (*empirical_)(rng);
      break;
  }
  return std::clamp(x, min_, max_);
}

std::int64_t Distribution::sample_int(RngStream& rng) const {
  const double x = std::round(sample(rng));
  return static_cast<std::int64_t>(
      std::clamp(std::clamp(x, std::ceil(min_), std::floor(max_)), -9.0e18, 9.0e18));
}

double Distribution::mean() const {
  switch (kind_) {
    case Kind::kFixed:
      return a_;
    case Kind::kUniform:
      return 0.5 * (a_ + b_);
    case Kind::kNormal:
    case Kind::kLognormal:
    case Kind::kGamma:
    case Kind::kExponential:
      return a_;
    case Kind::kZipf: {
      double num = 0, den = 0;
      const std::int64_t n = std::min<std::int64_t>(zipf_->n(), 10'000'000);
      for (std::int64_t k = 1; k <= n; ++k) {
        const double w = std::pow(static_cast<double>(k), -zipf_->s());
        num += w * static_cast<double>(k);
        den += w;
      }
      return num / den;
    }
    case Kind::kEmpirical:
      return empirical_->mean();
  }
  return 0;
}

}  // namespace kvsim
