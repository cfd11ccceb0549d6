// kvsim sweep SCENARIO.yaml [-o DIR] [--jobs N | --emit-jobs FILE] [--set k=v ...] [--seed N]
//   Expands the scenario's `sweep:` grid (cartesian product, first key slowest; or its list of
//   points, in order) into one run per point, DIR/<name>/<key>=<value>,.../, run by N local
//   `kvsim run` processes (fork/exec of /proc/self/exe), then merges them into
//   DIR/<name>/sweep.csv. With --emit-jobs, writes one
//   `kvsim run ...` command per line instead (for GNU parallel or a Slurm array) and runs nothing.
//   Before anything runs (or is emitted), DIR/<name>/sweep.json lists the points and the hash
//   of each point's config.resolved.yaml; `kvsim merge` (cli/cmd_merge.cpp) checks runs against
//   it and writes the same sweep.csv from run folders gathered from anywhere.

#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/sweep_files.h"
#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "sim/metrics/writers.h"

namespace kvsim::cli {
namespace {
namespace fs = std::filesystem;

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "kvsim";
  return std::string(buf, static_cast<std::size_t>(n));
}

/// Single-quotes `s` for a POSIX shell.
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

/// A YAML single-quoted scalar.
std::string yaml_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

extern "C" void on_child_exit(int) {}

/// While alive: SIGCHLD, SIGINT and SIGTERM are blocked except inside wait() (so none can slip in
/// between a check and the wait), SIGCHLD wakes wait(), and SIGINT / SIGTERM are recorded by an
/// InterruptScope. child_setup() undoes it all in a forked child before exec.
class ChildSignals {
 public:
  ChildSignals() {
    struct sigaction sa {};
    sa.sa_handler = on_child_exit;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, &old_chld_);
    sigset_t block;
    sigemptyset(&block);
    for (int s : {SIGCHLD, SIGINT, SIGTERM}) sigaddset(&block, s);
    sigprocmask(SIG_BLOCK, &block, &old_mask_);
    wait_mask_ = old_mask_;
    for (int s : {SIGCHLD, SIGINT, SIGTERM}) sigdelset(&wait_mask_, s);
  }
  ~ChildSignals() {
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
    sigaction(SIGCHLD, &old_chld_, nullptr);
  }
  ChildSignals(const ChildSignals&) = delete;
  ChildSignals& operator=(const ChildSignals&) = delete;
  /// Sleeps until one of the three signals arrives (returns at once if one is pending).
  void wait() const { sigsuspend(&wait_mask_); }
  /// In the child, between fork and exec (async-signal-safe calls only).
  void child_setup() const {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, nullptr);
    sigaction(SIGTERM, &dfl, nullptr);
    sigaction(SIGCHLD, &old_chld_, nullptr);
    sigprocmask(SIG_SETMASK, &old_mask_, nullptr);
  }

 private:
  const InterruptScope interrupt_;
  struct sigaction old_chld_ {};
  sigset_t old_mask_{}, wait_mask_{};
};

/// Runs argvs[i] (argv[0] is the executable) as child processes, at most `jobs` at a time, and
/// returns how many failed. SIGINT / SIGTERM stop the launching, are passed on to the running
/// children (each removes its temporary run folder) and, once all have ended, throw.
int run_children(const std::vector<std::vector<std::string>>& argvs,
                 const std::vector<std::string>& names, std::size_t jobs, bool quiet) {
  const ChildSignals signals;
  std::size_t next = 0, done = 0;
  int failed = 0;
  bool passed_on = false;
  std::map<pid_t, std::size_t> running;
  while (true) {
    const int sig = interrupt_signal();
    while (sig == 0 && next < argvs.size() && running.size() < jobs) {
      std::vector<char*> argv;
      for (const std::string& x : argvs[next]) argv.push_back(const_cast<char*>(x.c_str()));
      argv.push_back(nullptr);
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid < 0) throw std::runtime_error(fmt::format("fork failed: {}", std::strerror(errno)));
      if (pid == 0) {
        signals.child_setup();
        ::execv(argv[0], argv.data());
        std::fprintf(stderr, "kvsim sweep: cannot exec %s: %s\n", argv[0], std::strerror(errno));
        ::_exit(127);
      }
      running[pid] = next++;
    }
    if (sig != 0 && !passed_on) {
      for (const auto& [pid, i] : running) ::kill(pid, sig);
      passed_on = true;
    }
    bool reaped = false;
    int status = 0;
    for (pid_t pid; (pid = ::waitpid(-1, &status, WNOHANG)) > 0;) {
      const auto it = running.find(pid);
      if (it == running.end()) continue;
      const std::string& name = names[it->second];
      running.erase(it);
      reaped = true;
      ++done;
      const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!ok) ++failed;
      if (!quiet || !ok)
        std::fprintf(stderr, "[%zu/%zu] %s %s\n", done, argvs.size(), name.c_str(),
                     ok         ? "done"
                     : sig != 0 ? "stopped"
                                : "FAILED");
    }
    if (running.empty() && (sig != 0 || next == argvs.size())) break;
    if (!reaped) signals.wait();
  }
  if (const int sig = interrupt_signal(); sig != 0)
    throw std::runtime_error(fmt::format(
        "interrupted by {}: {} of {} runs finished ({} failed or stopped); no sweep.csv written",
        signal_name(sig), done - static_cast<std::size_t>(failed), argvs.size(), failed));
  return failed;
}

}  // namespace

int sweep(const Args& args) {
  CommandLine cl("sweep", "SCENARIO.yaml [options]",
                 "Expands the scenario's sweep: grid into one run per point, DIR/<name>/<point>/, "
                 "run by local `kvsim run` processes, then merges them into DIR/<name>/sweep.csv.\n"
                 "Exit status: 0 all runs done, 1 a run failed, 2 bad input, 130 / 143 "
                 "interrupted by SIGINT / SIGTERM (passed on to the runs, which leave no "
                 "folder behind; no sweep.csv).");
  ScenarioArgs in;
  std::optional<std::string> emit;
  std::int64_t jobs = std::max(1u, std::thread::hardware_concurrency());
  add_scenario_args(cl, in);
  cl.options()  //
      ("jobs,j", integer(&jobs, 1, 4096, "N"),
       "local processes (default: the number of cores)")  //
      ("emit-jobs", text(&emit, "FILE"), "write one 'kvsim run' command per line and run nothing");
  if (!cl.parse(args)) return 0;
  const std::string& out_dir = in.out_dir;
  const bool quiet = in.quiet;
  std::vector<std::string> base_sets = in.sets;
  if (in.seed) base_sets.push_back(fmt::format("seed={}", *in.seed));
  const Scenario scenario = load_scenario(in.path, base_sets);
  const auto points = sweep_points(scenario);
  if (points.empty())
    throw ConfigError(in.path + ": sweep: the scenario has no `sweep:` section to expand");

  // Validate every point before anything runs (bad values fail the whole sweep with status 2).
  // Each point's config.resolved.yaml is known now: its hash goes into sweep.json.
  std::vector<std::vector<std::string>> point_sets;
  std::vector<SweepPoint> manifest_points;
  for (const auto& p : points) {
    std::vector<std::string> s = base_sets;
    for (const auto& [k, v] : p) s.push_back(k + "=" + v);
    s.push_back("name=" + yaml_quote(sweep_point_name(p)));
    manifest_points.push_back(
        {sweep_point_name(p), xxh3_hex(resolved_yaml(load_scenario(in.path, s)))});
    point_sets.push_back(std::move(s));
  }
  const fs::path sweep_dir = fs::path(out_dir) / scenario.name;
  // A run folder there that is no point of this sweep would end in its table: refuse it now.
  std::error_code ec;
  if (fs::is_directory(sweep_dir, ec)) {
    for (const fs::path& d : run_subfolders(sweep_dir)) {
      const std::string name = d.filename().string();
      if (std::none_of(manifest_points.begin(), manifest_points.end(),
                       [&](const SweepPoint& p) { return p.run == name; }))
        throw ConfigError(d.string() +
                          ": a run that is no point of this sweep (remove it, or choose another "
                          "-o)");
    }
  }
  fs::create_directories(sweep_dir);
  write_text_file(sweep_dir / "sweep.json",
                  sweep_manifest_json(in.path, scenario.name, base_sets, manifest_points));
  const std::string exe = self_exe();
  auto argv_of = [&](const std::vector<std::string>& s) {
    std::vector<std::string> a = {exe, "run", in.path, "-o", sweep_dir.string(), "--quiet"};
    for (const std::string& x : s) {
      a.push_back("--set");
      a.push_back(x);
    }
    return a;
  };

  if (emit) {
    // Each line starts in this working directory: scenario, output and trace paths stay valid
    // wherever GNU parallel or Slurm runs it.
    std::string text;
    const std::string cd = "cd " + shell_quote(fs::current_path().string()) + " &&";
    for (const auto& s : point_sets) {
      std::string line = cd;
      for (const std::string& a : argv_of(s)) line += (line.empty() ? "" : " ") + shell_quote(a);
      text += line + "\n";
    }
    write_text_file(*emit, text);
    std::printf("%zu runs written to %s (sweep.json in %s); afterwards: %s merge %s\n",
                point_sets.size(), emit->c_str(), sweep_dir.c_str(), exe.c_str(),
                sweep_dir.c_str());
    return 0;
  }

  std::vector<std::vector<std::string>> argvs;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < points.size(); ++i) {
    argvs.push_back(argv_of(point_sets[i]));
    names.push_back(sweep_point_name(points[i]));
  }
  const int failed = run_children(argvs, names, static_cast<std::size_t>(jobs), quiet);
  const GatherResult merged = gather_sweep({sweep_dir}, sweep_dir, std::nullopt);
  std::printf("%zu runs (%d failed) in %s; %zu rows in %s\n", point_sets.size(), failed,
              sweep_dir.c_str(), merged.rows, merged.table.c_str());
  return failed || !merged.missing.empty() ? 1 : 0;
}

}  // namespace kvsim::cli
