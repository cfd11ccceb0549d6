// SIGINT / SIGTERM in the middle of a run, a validation or a sweep: the temporary run folders are
// removed and the exit status is 128 + the signal; a temporary folder that a killed run left
// behind is removed by the next run of that name unless its pid is alive.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"
#include "sim/metrics/writers.h"

namespace fs = std::filesystem;
using kvsim::test::lines_of;
using kvsim::test::spawn_kvsim;
using kvsim::test::TempDir;
using kvsim::test::wait_exit;
using kvsim::test::wait_until;

namespace {

/// A timed scenario named `name` whose run takes minutes (millions of requests).
fs::path long_scenario(const fs::path& dir, const std::string& name) {
  const fs::path p = dir / (name + ".yaml");
  std::ofstream(p)
      << "name: " << name << "\nseed: 3\nengine: {profile: vllm-0.7.2, mode: timed}\n"
      << "model: {config: " << KVSIM_SOURCE_DIR << "/scenarios/models/qwen2-1.5b.json}\n"
      << "cache: {block_size: 16, num_gpu_blocks_override: 600}\n"
      << "scheduler: {max_num_seqs: 32, max_num_batched_tokens: 1024, max_model_len: 4096}\n"
      << "workload:\n  num_requests: 5000000\n  arrival: {process: poisson, rate_per_s: 30}\n"
      << "  prompt_tokens: {uniform: {min: 20, max: 400}}\n  output_tokens: {uniform: {min: 10, "
         "max: 200}}\n"
      << "latency: {model: constant, step_time_us: 2000}\n"
      << "sweep: {cache.block_size: [8, 16, 32, 64]}\n";
  return p;
}

/// The entries of `dir` (recursively) whose name has ".tmp-".
std::vector<std::string> tmp_entries(const fs::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().find(".tmp-") != std::string::npos)
      out.push_back(it->path().string());
  return out;
}

/// Whether `dir` has an entry whose name has ".tmp-" (a run is writing).
bool has_tmp(const fs::path& dir) { return !tmp_entries(dir).empty(); }

/// A pid no process has: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  REQUIRE(pid > 0);
  REQUIRE(wait_exit(pid) == 0);
  return pid;
}

/// Starts `args`, waits until a temporary folder appears under `out`, sends `sig` (to the
/// process group when `group`), and returns the exit status and stderr.
std::pair<int, std::string> interrupt(const std::vector<std::string>& args, const fs::path& out,
                                      const fs::path& dir, int sig, bool group = false) {
  const fs::path err = dir / "stderr.txt";
  const pid_t pid = spawn_kvsim(args, dir / "stdout.txt", err, /*own_group=*/group);
  int status = 0;
  bool ended = false;  // before it wrote anything: a bad scenario
  const bool started = wait_until([&] {
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    return ended || has_tmp(out);
  });
  INFO("kvsim's stderr: " << kvsim::test::slurp(err));
  REQUIRE_FALSE(ended);
  ::kill(group ? -pid : pid, sig);
  // It must stop soon: a run that ignored the signal is killed and fails the test.
  const bool stopped = wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, 60);
  if (!stopped) {
    ::kill(pid, SIGKILL);
    (void)wait_exit(pid);
  }
  REQUIRE(stopped);
  REQUIRE(started);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status), kvsim::test::slurp(err)};
}

}  // namespace

TEST_CASE("kvsim run stopped by SIGTERM or SIGINT leaves no folder and exits 143 / 130", "[cli]") {
  TempDir tmp("sig-run");
  const fs::path scenario = long_scenario(tmp.path, "long");
  const fs::path out = tmp.path / "out";
  const auto [status, err] =
      interrupt({"run", scenario.string(), "-o", out.string(), "--quiet"}, out, tmp.path, SIGTERM);
  CHECK(status == 128 + SIGTERM);
  CHECK(lines_of(err).size() == 1);
  CHECK_THAT(err, Catch::StartsWith("kvsim run: error: interrupted at simulated time"));
  CHECK(tmp_entries(out).empty());
  CHECK_FALSE(fs::exists(out / "long"));

  // Ctrl-C reaches the whole process group.
  const auto [status2, err2] =
      interrupt({"run", scenario.string(), "-o", out.string()}, out, tmp.path, SIGINT, true);
  CHECK(status2 == 128 + SIGINT);
  CHECK(tmp_entries(out).empty());
}

TEST_CASE("kvsim validate stopped by SIGTERM leaves no folder and exits 143", "[cli]") {
  TempDir tmp("sig-validate");
  const fs::path out = tmp.path / "out";
  const std::string scenario = std::string(KVSIM_SOURCE_DIR) + "/scenarios/validate-small.yaml";
  const auto [status, err] = interrupt({"validate", scenario, "--backend", "cpu", "-o",
                                        out.string(), "--set", "workload.num_requests=100000"},
                                       out, tmp.path, SIGTERM);
  CHECK(status == 128 + SIGTERM);
  CHECK_THAT(err, Catch::Contains("interrupted"));
  CHECK(tmp_entries(out).empty());
  CHECK_FALSE(fs::exists(out / "validate-small"));
}

TEST_CASE("kvsim sweep passes SIGTERM on to its runs: no folder of theirs is left", "[cli]") {
  TempDir tmp("sig-sweep");
  const fs::path scenario = long_scenario(tmp.path, "swept");
  const fs::path out = tmp.path / "out";
  const auto [status, err] =
      interrupt({"sweep", scenario.string(), "-o", out.string(), "--jobs", "2", "--quiet"}, out,
                tmp.path, SIGTERM);
  CHECK(status == 128 + SIGTERM);
  CHECK_THAT(err, Catch::Contains("kvsim sweep: error: interrupted by SIGTERM: 0 of 4 runs"));
  CHECK(tmp_entries(out).empty());
  CHECK_FALSE(fs::exists(out / "swept" / "sweep.csv"));
  CHECK_FALSE(fs::exists(out / "swept" / "cache.block_size=8"));
}

TEST_CASE("a run removes the temporary folders of dead runs of its name, not of live ones",
          "[cli]") {
  TempDir tmp("stale");
  const fs::path out = tmp.path / "out";
  const std::string scenario =
      std::string(KVSIM_SOURCE_DIR) + "/scenarios/regression/tiny-chat.yaml";
  const std::string name = "regression-tiny-chat";
  const pid_t dead = dead_pid();
  const fs::path stale = out / (name + ".tmp-" + std::to_string(dead));
  const fs::path live = out / (name + ".tmp-" + std::to_string(::getpid()));
  const fs::path other = out / ("other.tmp-" + std::to_string(dead));
  const fs::path odd = out / (name + ".tmp-12ab");
  for (const fs::path& p : {stale, live, other, odd}) {
    fs::create_directories(p);
    std::ofstream(p / "steps.csv") << "half-written\n";
  }
  const auto o = kvsim::test::run_kvsim({"run", scenario, "-o", out.string(), "--quiet"}, tmp.path);
  REQUIRE(o.status == 0);
  CHECK(fs::exists(out / name / "summary.json"));
  CHECK_FALSE(fs::exists(stale));
  CHECK(fs::exists(live / "steps.csv"));   // a live pid: a run in progress
  CHECK(fs::exists(other / "steps.csv"));  // another name
  CHECK(fs::exists(odd / "steps.csv"));    // not a pid
}

TEST_CASE("RunFolder::remove_stale counts what it removed and keeps files and live pids", "[cli]") {
  TempDir tmp("stale-unit");
  const pid_t dead1 = dead_pid(), dead2 = dead_pid();
  const std::string n = "a,b=1";
  fs::create_directories(tmp.path / (n + ".tmp-" + std::to_string(dead1)));
  fs::create_directories(tmp.path / (n + ".tmp-" + std::to_string(dead2)) / "sub");
  fs::create_directories(tmp.path / (n + ".tmp-" + std::to_string(::getppid())));
  fs::create_directories(tmp.path / (n + ".tmp-0"));
  std::ofstream(tmp.path / (n + ".tmp-" + std::to_string(dead1) + "x")) << "";
  std::ofstream(tmp.path / ("sweep.csv.tmp-" + std::to_string(dead1))) << "";
  CHECK(kvsim::RunFolder::remove_stale(tmp.path, n) == 2);
  CHECK(kvsim::RunFolder::remove_stale(tmp.path, n) == 0);
  CHECK(fs::exists(tmp.path / (n + ".tmp-" + std::to_string(::getppid()))));
  CHECK(fs::exists(tmp.path / (n + ".tmp-0")));
  CHECK(fs::exists(tmp.path / ("sweep.csv.tmp-" + std::to_string(dead1))));
  CHECK(kvsim::RunFolder::remove_stale(tmp.path / "absent", n) == 0);
}
