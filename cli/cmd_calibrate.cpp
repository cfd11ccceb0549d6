// kvsim calibrate: fits the linear step-latency model to measured steps.
#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/common/errors.h"
#include "sim/engine/latency_model.h"
#include "sim/common/yaml_util.h"

namespace kvsim::cli {

namespace {
constexpr const char* kUsage =
    "usage: kvsim calibrate MEASUREMENTS.csv -o model.yaml\n"
    "\n"
    "Fits step_time_us = c0 + c1*prefill_tokens + c2*decode_tokens + c3*sum_context_tokens\n"
    "                    + c4*sum_context_sq + c5*num_seqs\n"
    "by least squares. MEASUREMENTS.csv has a header with num_seqs, prefill_tokens, "
    "decode_tokens,\n"
    "sum_context_tokens, sum_context_sq and step_time_us (one row per measured step). The output "
    "is\n"
    "read by a scenario's  latency: {model: fitted, file: model.yaml}.\n";
}  // namespace

int calibrate(const Args& args) {
  std::string input, output;
  static constexpr std::string_view kFlags[] = {"--output", "--help"};
  ArgParser cli(args, "calibrate", kFlags);
  while (cli.next()) {
    if (cli.is("-h", "--help")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (cli.is("-o", "--output"))
      output = cli.value();
    else if (!cli.is_flag() && input.empty())
      input = cli.arg();
    else if (!cli.is_flag())
      throw ConfigError(
          fmt::format("unexpected argument '{}' (one MEASUREMENTS.csv only)", cli.arg()));
    else
      cli.unknown();
  }
  if (input.empty())
    throw ConfigError(std::string("calibrate: MEASUREMENTS.csv is required\n") + kUsage);
  if (output.empty()) throw ConfigError("calibrate: -o model.yaml is required");
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
