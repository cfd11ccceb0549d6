// kvsim sweep SCENARIO.yaml [-o DIR] [--jobs N | --emit-jobs FILE] [--set k=v ...] [--seed N]
//   Expands the scenario's `sweep:` grid (cartesian product, first key slowest; or its list of
//   points, in order) into one run per point, DIR/<name>/<key>=<value>,.../, run by N local
//   `kvsim run` processes (fork/exec of /proc/self/exe), then merges them into
//   DIR/<name>/sweep.csv. With --emit-jobs, writes one
//   `kvsim run ...` command per line instead (for GNU parallel or a Slurm array) and runs nothing.
// kvsim merge SWEEP_DIR [-o FILE]
//   One row per run folder of a sweep (the swept keys, parsed from the folder names, then the
//   summary.json scalars, kv_breakdown flattened as kv_breakdown.<part>) into SWEEP_DIR/sweep.csv.

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

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

/// "a.b=1,c=[1, 2]" -> {(a.b, 1), (c, [1, 2])}: a comma starts a new pair only when the text
/// after it up to the next '=' has no comma, bracket or brace.
std::vector<std::pair<std::string, std::string>> parse_point_name(const std::string& name) {
  std::vector<std::pair<std::string, std::string>> out;
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : name) {
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  for (const std::string& p : parts) {
    const std::size_t eq = p.find('=');
    if (eq == std::string::npos) {
      if (out.empty()) return {};
      out.back().second += "," + p;
    } else {
      out.emplace_back(p.substr(0, eq), p.substr(eq + 1));
    }
  }
  return out;
}

bool less_value(const std::string& a, const std::string& b) {
  char* ea = nullptr;
  char* eb = nullptr;
  const double da = std::strtod(a.c_str(), &ea);
  const double db = std::strtod(b.c_str(), &eb);
  const bool na = !a.empty() && *ea == '\0', nb = !b.empty() && *eb == '\0';
  if (na && nb && da != db) return da < db;
  if (na != nb) return na;
  return a < b;
}

void flatten(const nlohmann::ordered_json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      flatten(*it, key, out);
    } else if (it->is_string()) {
      out.emplace_back(key, it->get<std::string>());
    } else if (!it->is_array()) {
      out.emplace_back(key, it->dump());
    }
  }
}

/// Writes sweep.csv for `dir`; returns the number of rows.
std::size_t merge_dir(const fs::path& dir, const fs::path& out_file) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw ConfigError(dir.string() + ": not a folder");
  struct Row {
    std::vector<std::pair<std::string, std::string>> params, values;
  };
  std::vector<Row> rows;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.find(".tmp-") != std::string::npos) continue;
    const fs::path summary = entry.path() / "summary.json";
    if (!fs::exists(summary)) continue;
    std::ifstream f(summary);
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(f);
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("{}: not valid JSON: {}", summary.string(), e.what()));
    }
    Row r;
    r.params = parse_point_name(name);
    flatten(j, "", r.values);
    rows.push_back(std::move(r));
  }
  if (rows.empty())
    throw ConfigError(dir.string() + ": no run folders (with a summary.json) to merge");
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    const std::size_t n = std::min(a.params.size(), b.params.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (a.params[i].first != b.params[i].first) return a.params[i].first < b.params[i].first;
      if (a.params[i].second != b.params[i].second)
        return less_value(a.params[i].second, b.params[i].second);
    }
    return a.params.size() < b.params.size();
  });
  std::vector<std::string> keys, cols;
  for (const Row& r : rows) {
    for (const auto& [k, v] : r.params)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    for (const auto& [k, v] : r.values)
      if (std::find(cols.begin(), cols.end(), k) == cols.end()) cols.push_back(k);
  }
  std::string text;
  for (std::size_t i = 0; i < keys.size() + cols.size(); ++i)
    text += (i ? "," : "") + csv_field(i < keys.size() ? keys[i] : cols[i - keys.size()]);
  text += '\n';
  for (const Row& r : rows) {
    std::map<std::string, std::string> p(r.params.begin(), r.params.end());
    std::map<std::string, std::string> v(r.values.begin(), r.values.end());
    for (std::size_t i = 0; i < keys.size() + cols.size(); ++i) {
      const std::string& k = i < keys.size() ? keys[i] : cols[i - keys.size()];
      const auto& m = i < keys.size() ? p : v;
      const auto it = m.find(k);
      text += (i ? "," : "") + (it == m.end() ? std::string() : csv_field(it->second));
    }
    text += '\n';
  }
  const fs::path tmp = out_file.string() + fmt::format(".tmp-{}", static_cast<long>(::getpid()));
  write_text_file(tmp, text);
  fs::rename(tmp, out_file);
  return rows.size();
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
  std::vector<std::vector<std::string>> point_sets;
  for (const auto& p : points) {
    std::vector<std::string> s = base_sets;
    for (const auto& [k, v] : p) s.push_back(k + "=" + v);
    s.push_back("name=" + yaml_quote(sweep_point_name(p)));
    (void)load_scenario(in.path, s);
    point_sets.push_back(std::move(s));
  }
  const fs::path sweep_dir = fs::path(out_dir) / scenario.name;
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
    std::printf("%zu runs written to %s; afterwards: %s merge %s\n", point_sets.size(),
                emit->c_str(), exe.c_str(), sweep_dir.c_str());
    return 0;
  }

  fs::create_directories(sweep_dir);
  std::vector<std::vector<std::string>> argvs;
  std::vector<std::string> names;
  for (std::size_t i = 0; i < points.size(); ++i) {
    argvs.push_back(argv_of(point_sets[i]));
    names.push_back(sweep_point_name(points[i]));
  }
  const int failed = run_children(argvs, names, static_cast<std::size_t>(jobs), quiet);
  const std::size_t rows = merge_dir(sweep_dir, sweep_dir / "sweep.csv");
  std::printf("%zu runs (%d failed) in %s; %zu rows in %s\n", point_sets.size(), failed,
              sweep_dir.c_str(), rows, (sweep_dir / "sweep.csv").c_str());
  return failed ? 1 : 0;
}

int merge(const Args& args) {
  CommandLine cl("merge", "SWEEP_DIR [-o FILE]",
                 "One row per run folder of a sweep (the swept keys from the folder names, then "
                 "the summary.json scalars) into SWEEP_DIR/sweep.csv.");
  std::string dir;
  std::optional<std::string> out;
  cl.positional("SWEEP_DIR", text(&dir, "SWEEP_DIR"));
  cl.options()("output,o", text(&out, "FILE"), "the table's file (default: SWEEP_DIR/sweep.csv)");
  if (!cl.parse(args)) return 0;
  const fs::path out_file = out ? fs::path(*out) : fs::path(dir) / "sweep.csv";
  const std::size_t rows = merge_dir(dir, out_file);
  std::printf("%zu rows in %s\n", rows, out_file.c_str());
  return 0;
}

}  // namespace kvsim::cli
