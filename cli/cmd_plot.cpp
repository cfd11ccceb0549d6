// kvsim plot RUN_DIR... [-o OUT_DIR]: runs plots/kvsim_plot.py under Debian's Python (which has
// matplotlib) with MPLBACKEND=Agg, passing the arguments through, and returns its exit status.

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "sim/common/errors.h"

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
  if (::access(kPython, X_OK) != 0) {
    throw ConfigError(std::string(kPython) +
                      " not found: kvsim plot needs Debian's Python 3 with matplotlib "
                      "(apt-get install python3-matplotlib)");
  }
  const fs::path script = find_plots_dir() / kScript;

  std::vector<std::string> argv_s = {kPython, script.string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
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
