// bench_sim [SCENARIO.yaml ...] [--set k=v ...]: runs each scenario end to end (all output files
// written, to a temporary folder) in its own child process and reports simulated requests per
// second of CPU time and of wall time, and the child's peak RSS (getrusage via wait4). Without
// arguments it runs the standard set: the Azure conv trace, Mooncake (timed), and 1,000,000
// synthetic requests. Run it from the repository root (scenarios name ../shared/traces/...).

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/scenario.h"
#include "sim/simulator.h"

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

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> paths, sets;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--set" && i + 1 < argc) {
      sets.push_back(argv[++i]);
    } else {
      paths.push_back(a);
    }
  }
  if (paths.empty())
    paths = {"scenarios/azure-conv.yaml", "bench/sim/mooncake-timed.yaml",
             "bench/sim/synthetic-1m.yaml"};
  std::printf("%-34s %10s %10s %12s %8s %8s %12s %12s %9s\n", "scenario", "requests", "steps",
              "simulated_s", "wall_s", "cpu_s", "req/s(cpu)", "req/s(wall)", "rss_MB");
  int status_all = 0;
  for (const std::string& path : paths) {
    int pipefd[2];
    if (::pipe(pipefd) != 0) return 1;
    const auto t0 = std::chrono::steady_clock::now();
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(pipefd[0]);
      ::_exit(run_child(path, sets, pipefd[1]));
    }
    ::close(pipefd[1]);
    ChildReport rep;
    const bool got = ::read(pipefd[0], &rep, sizeof rep) == static_cast<ssize_t>(sizeof rep);
    ::close(pipefd[0]);
    int status = 0;
    struct rusage ru {};
    ::wait4(pid, &status, 0, &ru);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("%-34s FAILED\n", path.c_str());
      status_all = 1;
      continue;
    }
    std::printf("%-34s %10lld %10lld %12.1f %8.2f %8.2f %12.0f %12.0f %9.1f\n",
                fs::path(path).stem().c_str(), rep.requests, rep.steps, rep.sim_s, wall, cpu,
                static_cast<double>(rep.requests) / cpu, static_cast<double>(rep.requests) / wall,
                static_cast<double>(ru.ru_maxrss) / 1024.0);
    std::fflush(stdout);
  }
  return status_all;
}
