// kvsim calibrate: fits the linear step-latency model to measured steps.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/engine/latency_model.h"

namespace kvsim::cli {

namespace {
constexpr const char* kAbout =
    "Fits step_time_us = c0 + c1*prefill_tokens + c2*decode_tokens\n"
    "                    + c3*sum_context_tokens + c4*sum_context_sq + c5*num_seqs\n"
    "by least squares. MEASUREMENTS.csv has a header with num_seqs, prefill_tokens, "
    "decode_tokens, sum_context_tokens, sum_context_sq and step_time_us (one row per measured "
    "step). The output is read by a scenario's  latency: {model: fitted, file: model.yaml}.";
}  // namespace

int calibrate(const Args& args) {
  std::string input, output;
  CommandLine cl("calibrate", "MEASUREMENTS.csv -o model.yaml", kAbout);
  cl.positional("MEASUREMENTS.csv", text(&input, "MEASUREMENTS.csv"));
  cl.options()("output,o", text(&output, "FILE"), "the fitted model's YAML file (required)");
  if (!cl.parse(args)) return 0;
  if (output.empty()) throw cl.error("-o model.yaml is required");
  std::vector<BatchFeatures> batches;
  std::vector<double> times;
  read_measurements_csv(input, batches, times);
  const LatencyFit fit = fit_latency(batches, times);
  {
    const std::string tmp = output + ".tmp";
    std::ofstream out(tmp, std::ios::binary);
    if (!out) throw ConfigError(output + ": cannot write file");
    out << fit_to_yaml(fit, input);
    out.close();
    if (!out || std::rename(tmp.c_str(), output.c_str()) != 0)
      throw ConfigError(output + ": cannot write file");
  }
  std::string report = fmt::format("fitted {} steps from {}\n", fit.rows, input);
  for (std::size_t i = 0; i < kFitTermNames.size(); ++i)
    report += fmt::format("  {:<20} {:.6g} us\n", kFitTermNames[i], fit.coefficients_us[i]);
  report += fmt::format("RMSE {:.4g} us, R^2 {:.6f}, max relative error {:.4g}\nwrote {}\n",
                        fit.rmse_us, fit.r2, fit.max_rel_error, output);
  std::fputs(report.c_str(), stdout);
  return 0;
}

}  // namespace kvsim::cli
