#include "sim/config/latency_config.h"

#include <fmt/format.h>

#include <vector>

namespace kvsim {

namespace {

// The `model:` names, in LatencyConfig::Kind's order, and the keys of each.
constexpr std::string_view kModelNames[] = {"roofline", "fitted", "constant"};
constexpr std::string_view kRooflineKeys[] = {
    "model", "mfu", "mbu", "step_overhead_us", "interconnect_bytes_per_s", "allreduce_latency_us"};
constexpr std::string_view kFittedKeys[] = {"model", "file", "coefficients"};
constexpr std::string_view kConstantKeys[] = {"model", "step_time_us"};

FitCoefficients parse_coefficients(const YAML::Node& n, const YamlContext& ctx) {
  std::vector<std::string_view> names(kFitTermNames.begin(), kFitTermNames.end());
  check_keys(n, std::span<const std::string_view>(names), ctx);
  FitCoefficients fit;
  for (std::size_t i = 0; i < kFitTermNames.size(); ++i)
    fit.coefficients_us[i] = get_double(n, kFitTermNames[i], ctx, 0.0);
  return fit;
}

FitCoefficients parse_fit_file(const YAML::Node& root, const YamlContext& ctx) {
  check_keys(root, {"model", "unit", "coefficients", "fit", "source"}, ctx);
  const std::string unit = get_choice(root, "unit", ctx, "us", {"us"});
  (void)unit;
  if (!has_key(root, "coefficients"))
    throw yaml_error(root, ctx,
                     fmt::format("missing required key 'coefficients' in {}", ctx.where()));
  return parse_coefficients(root["coefficients"], ctx.child("coefficients"));
}

}  // namespace

std::span<const std::string_view> latency_keys(LatencyConfig::Kind kind) {
  switch (kind) {
    case LatencyConfig::Kind::kFitted:
      return kFittedKeys;
    case LatencyConfig::Kind::kConstant:
      return kConstantKeys;
    case LatencyConfig::Kind::kRoofline:
      break;
  }
  return kRooflineKeys;
}

FitCoefficients read_fit_file(const std::string& path) {
  return parse_fit_file(load_yaml_file(path), YamlContext{path, ""});
}

LatencyConfig parse_latency_config(const YAML::Node& latency, const YamlContext& ctx) {
  require_map(latency, ctx);
  LatencyConfig c;
  c.kind = static_cast<LatencyConfig::Kind>(
      get_choice_index(latency, "model", ctx, "roofline", kModelNames));
  check_keys(latency, latency_keys(c.kind), ctx);
  if (c.kind == LatencyConfig::Kind::kConstant) {
    c.step_time_us = get_double(latency, "step_time_us", ctx, std::nullopt, 0.001, 1e12);
    return c;
  }
  if (c.kind == LatencyConfig::Kind::kFitted) {
    const bool has_file = has_key(latency, "file");
    const bool has_coefficients = has_key(latency, "coefficients");
    if (!has_file && !has_coefficients)
      throw yaml_error(latency, ctx,
                       fmt::format("{}: model fitted needs 'file' or 'coefficients'", ctx.where()));
    if (has_file) {
      c.fit_file =
          resolve_input_path(ctx.child("file"), get_string(latency, "file", ctx, std::nullopt));
      c.fit = read_fit_file(*c.fit_file);
    }
    if (has_coefficients) {
      const YAML::Node given = latency["coefficients"];
      const YamlContext gctx = ctx.child("coefficients");
      const FitCoefficients fit = parse_coefficients(given, gctx);
      if (has_file)
        for (std::size_t i = 0; i < kFitTermNames.size(); ++i) {
          if (fit.coefficients_us[i] == c.fit.coefficients_us[i]) continue;
          const YAML::Node at = given[kFitTermNames[i]];
          const YamlContext term = gctx.child(kFitTermNames[i]);
          throw yaml_error(at.IsDefined() ? at : given, term,
                           fmt::format("{}: {} differs from {} in the fit file '{}' (give file and "
                                       "coefficients together only when they agree)",
                                       term.path, number_text(fit.coefficients_us[i]),
                                       number_text(c.fit.coefficients_us[i]), *c.fit_file));
        }
      c.fit = fit;
    }
    return c;
  }
  RooflineParams& p = c.roofline;
  p.mfu = get_double(latency, "mfu", ctx, p.mfu, 1e-6, 1.0);
  p.mbu = get_double(latency, "mbu", ctx, p.mbu, 1e-6, 1.0);
  p.step_overhead_us = get_double(latency, "step_overhead_us", ctx, p.step_overhead_us, 0.0, 1e9);
  p.interconnect_bytes_per_s =
      get_double(latency, "interconnect_bytes_per_s", ctx, p.interconnect_bytes_per_s, 1.0);
  p.allreduce_latency_us =
      get_double(latency, "allreduce_latency_us", ctx, p.allreduce_latency_us, 0.0, 1e9);
  return c;
}

YAML::Node latency_config_yaml(const LatencyConfig& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["model"] = std::string(kModelNames[static_cast<std::size_t>(c.kind)]);
  switch (c.kind) {
    case LatencyConfig::Kind::kRoofline:
      n["mfu"] = number_node(c.roofline.mfu);
      n["mbu"] = number_node(c.roofline.mbu);
      n["step_overhead_us"] = number_node(c.roofline.step_overhead_us);
      n["interconnect_bytes_per_s"] = number_node(c.roofline.interconnect_bytes_per_s);
      n["allreduce_latency_us"] = number_node(c.roofline.allreduce_latency_us);
      break;
    case LatencyConfig::Kind::kFitted: {
      n["file"] = optional_node(c.fit_file);
      YAML::Node coefficients(YAML::NodeType::Map);
      for (std::size_t i = 0; i < kFitTermNames.size(); ++i)
        coefficients[kFitTermNames[i]] = number_node(c.fit.coefficients_us[i]);
      n["coefficients"] = coefficients;
      break;
    }
    case LatencyConfig::Kind::kConstant:
      n["step_time_us"] = number_node(c.step_time_us);
      break;
  }
  return n;
}

}  // namespace kvsim
