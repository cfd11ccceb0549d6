// kvsim plot RUN_DIR... [-o OUT_DIR]: checks the arguments against the options below, then runs
// plots/kvsim_plot.py under Debian's Python (which has matplotlib) with MPLBACKEND=Agg, passing
// them on (long flags, then `--` and the folders), and returns its exit status.

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"

extern char** environ;

namespace kvsim::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kPython = "/usr/bin/python3";
constexpr const char* kScript = "kvsim_plot.py";

/// The plots/ folder: $KVSIM_PLOTS_DIR, else the source tree's (compiled in), else
/// <dir of the executable>/../plots or <dir of the executable>/plots.
fs::path find_plots_dir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("KVSIM_PLOTS_DIR"); env != nullptr && *env != '\0') {
    const fs::path p(env);
    if (!fs::exists(p / kScript)) {
      throw ConfigError("$KVSIM_PLOTS_DIR=" + p.string() + " has no " + kScript);
    }
    return p;
  }
#ifdef KVSIM_PLOTS_DIR
  candidates.emplace_back(KVSIM_PLOTS_DIR);
#endif
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "plots");
    candidates.push_back(exe.parent_path() / "plots");
    candidates.push_back(exe.parent_path().parent_path() / "share" / "kvsim" / "plots");
  }
  for (const fs::path& c : candidates) {
    if (fs::exists(c / kScript, ec)) return c;
  }
  std::string tried;
  for (const fs::path& c : candidates) tried += (tried.empty() ? "" : ", ") + c.string();
  throw ConfigError(std::string("cannot find plots/") + kScript + " (tried " + tried +
                    "); set $KVSIM_PLOTS_DIR to the plots/ folder");
}

}  // namespace

int plot(const Args& args) {
  CommandLine cl("plot", "RUN_DIR... [options]",
                 "Figures (PNG + SVG) and an index.html of run folders (or summary.json files) and "
                 "sweep folders; several runs or a sweep give comparisons (plots/README.md).");
  std::vector<std::string> paths;
  std::optional<std::string> out, formats, heatmap_keys, ttft_slo, tpot_slo, attainment;
  std::optional<std::int64_t> max_points;
  bool per_run = false, quiet = false;
  cl.positional("RUN_DIR", texts(&paths, "RUN_DIR"), -1);
  cl.options()  //
      ("out,o", text(&out, "OUT_DIR"),
       "output folder (default: RUN_DIR/plots for one run or one sweep, ./plots-compare for "
       "several)")  //
      ("format", text(&formats, "LIST"),
       "comma-separated image formats: png, svg, pdf (default: png,svg)")  //
      ("max-points", integer(&max_points, 10, kIntMax, "N"),
       "steps.csv rows are averaged into at most N points (default: 3000)")  //
      ("heatmap-keys", text(&heatmap_keys, "ROWS,COLS"),
       "the two swept keys a sweep heatmap is drawn over (full or short names, e.g. "
       "block_size,enable_prefix_caching; default: the first two)")  //
      ("ttft-slo-ms", text(&ttft_slo, "MS"),
       "P/D goodput (pd_goodput): the TTFT target (default: 1000)")  //
      ("tpot-slo-ms", text(&tpot_slo, "MS"),
       "P/D goodput: the TPOT target (default: 25)")  //
      ("attainment", text(&attainment, "FRACTION"),
       "P/D goodput: the fraction of requests that must meet both targets (default: 0.9)")  //
      ("per-run", flag(&per_run),
       "when comparing, also draw each run's own figures under OUT_DIR/runs/")  //
      ("quiet,q", flag(&quiet), "print only errors");
  if (!cl.parse(args)) return 0;
  if (::access(kPython, X_OK) != 0) {
    throw ConfigError(std::string(kPython) +
                      " not found: kvsim plot needs Debian's Python 3 with matplotlib "
                      "(apt-get install python3-matplotlib)");
  }
  const fs::path script = find_plots_dir() / kScript;

  // The options as the script's argparse reads them, then the folders.
  std::vector<std::string> argv_s = {kPython, script.string()};
  const auto pass = [&](const char* name, const std::optional<std::string>& v) {
    if (v) argv_s.push_back(std::string(name) + "=" + *v);  // '=': a value may start with '-'
  };
  pass("--out", out);
  pass("--format", formats);
  if (max_points) pass("--max-points", std::to_string(*max_points));
  pass("--heatmap-keys", heatmap_keys);
  pass("--ttft-slo-ms", ttft_slo);
  pass("--tpot-slo-ms", tpot_slo);
  pass("--attainment", attainment);
  if (per_run) argv_s.push_back("--per-run");
  if (quiet) argv_s.push_back("--quiet");
  argv_s.push_back("--");
  argv_s.insert(argv_s.end(), paths.begin(), paths.end());
  std::vector<char*> argv;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);

  // The environment, with MPLBACKEND forced to Agg (no display).
  std::vector<std::string> env_s;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "MPLBACKEND=", 11) != 0) env_s.emplace_back(*e);
  }
  env_s.emplace_back("MPLBACKEND=Agg");
  std::vector<char*> envp;
  for (std::string& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);

  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, kPython, nullptr, nullptr, argv.data(), envp.data());
  if (rc != 0) {
    throw std::runtime_error(std::string("cannot start ") + kPython + ": " + std::strerror(rc));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw std::runtime_error("waitpid failed: " + std::string(std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 1;  // killed by a signal
}

}  // namespace kvsim::cli
