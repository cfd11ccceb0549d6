// kvsim check RUN_DIR --baseline FILE [--update-baseline] [--all]: the regression gate.

#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/check/check.h"
#include "sim/common/errors.h"

namespace kvsim::cli {
namespace {

constexpr const char* kAbout =
    "Compares RUN_DIR's summary.json (RUN_DIR: a run folder, or a summary.json) with a baseline "
    "and prints the metrics that moved.\n"
    "Rules: exact for counters (prefix_cache_hits, num_preemptions, ...), rel 0.02 for *_ms and "
    "throughputs, abs 1e-9 for hit rates; a baseline YAML may set its own per metric.\n"
    "Exit status: 0 pass, 1 regression, 2 bad input.";

}  // namespace

int check(const Args& args) {
  std::string run_dir, baseline, scenario;
  bool update = false, all_rows = false;
  CommandLine cl("check", "RUN_DIR --baseline FILE [options]", kAbout);
  cl.positional("RUN_DIR", text(&run_dir, "RUN_DIR"));
  cl.options()  //
      ("baseline", text(&baseline, "FILE"),
       "a baseline YAML (scenarios/baselines/NAME.yaml), another run folder, or its summary.json "
       "(required)")  //
      ("update-baseline", flag(&update),
       "write RUN_DIR's metrics into the baseline YAML (kept rules and header)")  //
      ("scenario", text(&scenario, "YAML"),
       "the scenario a new baseline's header names for regenerating it (default: the file under "
       "./scenarios/ with the run's name)")  //
      ("all", flag(&all_rows), "print every metric, not only those that moved");
  if (!cl.parse(args)) return 0;
  if (baseline.empty()) throw cl.error("--baseline FILE is required");

  const MetricSet current = load_metric_set(run_dir);
  const std::filesystem::path baseline_path(baseline);
  if (update) {
    const std::string ext = baseline_path.extension().string();
    if (ext != ".yaml" && ext != ".yml") {
      throw ConfigError(baseline +
                        ": --update-baseline writes a baseline .yaml, not a run folder "
                        "or summary.json");
    }
    std::error_code ec;
    if (scenario.empty()) {
      const auto name = current.values.find("name");
      if (name != current.values.end() && name->second.is_string()) {
        scenario =
            find_scenario_file("scenarios", name->second.get<std::string>()).generic_string();
      }
    }
    if (!std::filesystem::exists(baseline_path, ec)) {
      write_baseline(baseline_path, current, nullptr, scenario);
      std::printf("baseline created: %s (%zu metrics)\n", baseline.c_str(), current.values.size());
      return 0;
    }
    const MetricSet previous = load_metric_set(baseline_path);
    std::fputs(format_check_report(compare_metrics(previous, current), all_rows).c_str(), stdout);
    write_baseline(baseline_path, current, &previous, scenario);
    std::printf("baseline updated: %s\n", baseline.c_str());
    return 0;
  }
  const MetricSet base = load_metric_set(baseline_path);
  const CheckReport report = compare_metrics(base, current);
  std::printf("kvsim check: %s against %s\n", current.source.c_str(), base.source.c_str());
  std::fputs(format_check_report(report, all_rows).c_str(), stdout);
  return report.passed() ? 0 : 1;
}

}  // namespace kvsim::cli
