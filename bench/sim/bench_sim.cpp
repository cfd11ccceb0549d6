// bench_sim [SCENARIO.yaml ...] [--set k=v ...] [--reps N] [--profiles P1,P2,...]: runs each
// scenario end to end (all output files written, to a temporary folder) in its own child process,
// N times (default 5), under each engine profile (default: every vLLM V1 profile; the repetitions
// interleave the profiles, so that machine noise hits them alike), and reports simulated requests
// per second of CPU time (the best run's and the median's) and of wall time (the best run's), and
// the peak RSS (getrusage via wait4). Without scenario arguments it runs the standard set: the
// Azure conv trace, Mooncake (timed), and 1,000,000 synthetic requests. Run it from the repository
// root (scenarios name their traces relative to their own folder).

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/engine_api.h"
#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"

namespace {
namespace fs = std::filesystem;

struct ChildReport {
  long long requests = 0;
  long long steps = 0;
  double sim_s = 0;
};

int run_child(const std::string& path, const std::vector<std::string>& sets, int fd) {
  try {
    const kvsim::Scenario s = kvsim::load_scenario(path, sets);
    const fs::path out = fs::temp_directory_path() / ("kvsim-bench-" + std::to_string(::getpid()));
    const kvsim::RunResult r = kvsim::run_scenario(s, out);
    ChildReport rep{static_cast<long long>(r.requests_done), static_cast<long long>(r.num_steps),
                    static_cast<double>(r.end_ns) / 1e9};
    if (::write(fd, &rep, sizeof rep) != static_cast<ssize_t>(sizeof rep)) return 1;
    fs::remove_all(out);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sim: %s: %s\n", path.c_str(), e.what());
    return 1;
  }
}

struct Measured {
  ChildReport rep;
  double wall = 0, cpu = 0, rss_mb = 0;
};

// One run of `path` in a child process; false when it failed.
bool measure(const std::string& path, const std::vector<std::string>& sets, Measured& m) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return false;
  const auto t0 = std::chrono::steady_clock::now();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipefd[0]);
    ::_exit(run_child(path, sets, pipefd[1]));
  }
  ::close(pipefd[1]);
  const bool got = ::read(pipefd[0], &m.rep, sizeof m.rep) == static_cast<ssize_t>(sizeof m.rep);
  ::close(pipefd[0]);
  int status = 0;
  struct rusage ru {};
  ::wait4(pid, &status, 0, &ru);
  m.wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
          static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  m.rss_mb = static_cast<double>(ru.ru_maxrss) / 1024.0;
  return got && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace po = boost::program_options;
  std::vector<std::string> paths, sets, profile_lists, profile_names;
  int reps = 5;
  po::options_description opts("bench_sim options");
  opts.add_options()("help,h", "this text")("set", po::value(&sets)->composing(),
                                            "k=v override for every scenario (repeatable)")(
      "reps", po::value(&reps)->default_value(reps), "runs per scenario and profile")(
      "profiles", po::value(&profile_lists)->composing(),
      "comma-separated engine profiles (default: every vLLM V1 profile)");
  po::options_description hidden;
  hidden.add_options()("scenario", po::value(&paths)->composing());
  po::options_description all;
  all.add(opts).add(hidden);
  po::positional_options_description positional;
  positional.add("scenario", -1);
  try {
    po::variables_map vm;
    po::store(po::command_line_parser(argc, argv).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      std::cout << "bench_sim [SCENARIO.yaml ...]: simulator throughput (see bench/README.md)\n"
                << opts;
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "bench_sim: %s\n", e.what());
    return 2;
  }
  if (reps < 1) {
    std::fprintf(stderr, "bench_sim: --reps needs a positive count\n");
    return 2;
  }
  for (const std::string& list : profile_lists)
    for (std::size_t start = 0; start <= list.size();) {
      const std::size_t comma = std::min(list.find(',', start), list.size());
      const std::string name = list.substr(start, comma - start);
      if (!kvsim::find_profile(name)) {
        std::fprintf(stderr, "bench_sim: --profiles: unknown profile '%s' (%s)\n", name.c_str(),
                     kvsim::profile_names().c_str());
        return 2;
      }
      profile_names.push_back(name);
      start = comma + 1;
    }
  if (paths.empty())
    paths = {"scenarios/azure-conv.yaml", "bench/sim/mooncake-timed.yaml",
             "bench/sim/synthetic-1m.yaml"};
  if (profile_names.empty())
    for (const kvsim::ProfileInfo& p : kvsim::profiles())
      if (p.family == kvsim::EngineFamily::kV1) profile_names.emplace_back(p.name);
  std::printf("%-26s %-11s %9s %9s %11s %7s %7s %11s %11s %11s %8s\n", "scenario", "profile",
              "requests", "steps", "simulated_s", "wall_s", "cpu_s", "req/s(cpu)", "median(cpu)",
              "req/s(wall)", "rss_MB");
  int status_all = 0;
  const std::size_t np = profile_names.size();
  for (const std::string& path : paths) {
    // runs[p][k]: repetition k under profile p; the repetitions interleave the profiles.
    std::vector<std::vector<Measured>> runs(np,
                                            std::vector<Measured>(static_cast<std::size_t>(reps)));
    std::vector<bool> ok(np, true);
    for (std::size_t k = 0; k < static_cast<std::size_t>(reps); ++k)
      for (std::size_t p = 0; p < np; ++p) {
        std::vector<std::string> with_profile = sets;
        with_profile.push_back("engine.profile=" + profile_names[p]);
        if (ok[p]) ok[p] = measure(path, with_profile, runs[p][k]);
      }
    for (std::size_t p = 0; p < np; ++p) {
      const std::string stem = fs::path(path).stem().string();
      if (!ok[p]) {
        std::printf("%-26s %-11s FAILED\n", stem.c_str(), profile_names[p].c_str());
        status_all = 1;
        continue;
      }
      std::vector<Measured>& rs = runs[p];
      std::sort(rs.begin(), rs.end(),
                [](const Measured& a, const Measured& b) { return a.cpu < b.cpu; });
      const Measured& best = rs.front();
      const double median = rs[rs.size() / 2].cpu;
      double rss = 0;
      for (const Measured& m : rs) rss = std::max(rss, m.rss_mb);
      const auto n = static_cast<double>(best.rep.requests);
      std::printf("%-26s %-11s %9lld %9lld %11.1f %7.3f %7.3f %11.0f %11.0f %11.0f %8.1f\n",
                  stem.c_str(), profile_names[p].c_str(), best.rep.requests, best.rep.steps,
                  best.rep.sim_s, best.wall, best.cpu, n / best.cpu, n / median, n / best.wall,
                  rss);
    }
    std::fflush(stdout);
  }
  return status_all;
}
