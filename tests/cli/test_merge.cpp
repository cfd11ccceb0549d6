// kvsim merge: a sweep's emitted jobs run by GNU parallel in any order, their folders split over
// two places (two machines) and gathered by `kvsim merge`, give the folder `kvsim sweep` writes
// itself, byte for byte; bad input (a folder that is no run, runs of another sweep, two different
// runs of one point) exits 2 with one line naming the path and writes nothing.

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using kvsim::test::lines_of;
using kvsim::test::run_kvsim;
using kvsim::test::slurp;
using kvsim::test::TempDir;

/// A small cache-only cluster sweep over the first 300 requests of the Mooncake synthetic
/// trace: 3 replica counts x 2 routers.
fs::path sweep_scenario(const fs::path& dir) {
  const fs::path p = dir / "mc.yaml";
  std::ofstream(p) << "name: mc\n"
                      "engine: {profile: vllm-0.7.2, mode: cache_only}\n"
                      "cache: {block_size: 512, capacity_tokens: 1000000, "
                      "enable_prefix_caching: true, num_preallocate_tokens: 0}\n"
                      "scheduler: {max_model_len: 4000000}\n"
                      "workload: {trace: {format: mooncake, max_requests: 300, path: " KVSIM_TRACES_DIR
                      "/mooncake_synthetic.jsonl}}\n"
                      "cluster: {replicas: 2, router: {policy: round_robin, seed: 1}}\n"
                      "sweep: {cluster.replicas: [1, 2, 4], "
                      "cluster.router.policy: [round_robin, prefix_hash]}\n";
  return p;
}

/// Every file under `root` (relative path -> bytes).
std::map<std::string, std::string> tree(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    if (e.is_regular_file()) out[fs::relative(e.path(), root).string()] = slurp(e.path());
  return out;
}

int shell(const std::string& cmd) {
  const int rc = std::system(("bash -c '" + cmd + "' >/dev/null 2>&1").c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

}  // namespace

TEST_CASE("a sweep's emitted jobs run by GNU parallel and merged from two places are the sweep",
          "[cli]") {
  // The suite needs GNU parallel (scripts/install-deps.sh installs it): missing, this fails.
  INFO("GNU parallel is needed: apt-get install parallel (scripts/install-deps.sh)");
  REQUIRE(shell("command -v parallel") == 0);
  TempDir tmp("merge-parallel");
  const std::string scenario = sweep_scenario(tmp.path).string();
  const fs::path own = tmp.path / "own", emitted = tmp.path / "emitted";
  REQUIRE(run_kvsim({"sweep", scenario, "-o", own.string(), "--jobs", "2", "--quiet"}, tmp.path)
              .status == 0);
  const auto own_tree = tree(own / "mc");
  REQUIRE(own_tree.size() > 6 * 4);
  CHECK(own_tree.contains("sweep.json"));
  CHECK(lines_of(own_tree.at("sweep.csv")).size() == 7);

  const fs::path jobs = tmp.path / "jobs.txt";
  const auto e = run_kvsim(
      {"sweep", scenario, "-o", emitted.string(), "--emit-jobs", jobs.string()}, tmp.path);
  REQUIRE(e.status == 0);
  CHECK(lines_of(slurp(jobs)).size() == 6);
  CHECK(slurp(emitted / "mc" / "sweep.json") == own_tree.at("sweep.json"));
  // Shuffled, three at a time; then half of the folders move to "machine b".
  REQUIRE(shell("parallel --will-cite --halt now,fail=1 --shuf -j 3 < " + jobs.string()) == 0);
  const fs::path b = tmp.path / "machine-b";
  fs::create_directories(b);
  int moved = 0;
  for (const auto& d : std::vector<fs::path>(fs::directory_iterator(emitted / "mc"), {}))
    if (d.filename().string().find("prefix_hash") != std::string::npos) {
      fs::rename(d, b / d.filename());
      ++moved;
    }
  CHECK(moved == 3);

  const fs::path gathered = tmp.path / "gathered" / "mc";
  const auto m = run_kvsim(
      {"merge", b.string(), (emitted / "mc").string(), "--into", gathered.string()}, tmp.path);
  INFO(m.err);
  REQUIRE(m.status == 0);
  CHECK(tree(gathered) == own_tree);
  // Again, with the copies already there (the same runs twice is no conflict): still the sweep.
  CHECK(run_kvsim({"merge", b.string(), (emitted / "mc").string(), "--into", gathered.string()},
                  tmp.path)
            .status == 0);
  CHECK(tree(gathered) == own_tree);
  // The half left in place, merged in place: three points missing (exit 1, the table written).
  const auto half = run_kvsim({"merge", (emitted / "mc").string()}, tmp.path);
  CHECK(half.status == 1);
  CHECK_THAT(half.err, Catch::Contains("3 points of the sweep have no run"));
  CHECK(lines_of(slurp(emitted / "mc" / "sweep.csv")).size() == 4);
}

TEST_CASE("kvsim merge: bad input exits 2 with one line naming the path, and writes nothing",
          "[cli]") {
  TempDir tmp("merge-bad");
  const std::string scenario = sweep_scenario(tmp.path).string();
  const fs::path own = tmp.path / "own" / "mc";
  REQUIRE(run_kvsim({"sweep", scenario, "-o", (tmp.path / "own").string(), "--quiet"}, tmp.path)
              .status == 0);
  // The same sweep at another seed: other configurations under the same folder names.
  REQUIRE(run_kvsim({"sweep", scenario, "-o", (tmp.path / "seed2").string(), "--seed", "2",
                     "--quiet"},
                    tmp.path)
              .status == 0);
  const fs::path seed2 = tmp.path / "seed2" / "mc";
  const std::string point = "cluster.replicas=2,cluster.router.policy=prefix_hash";
  const fs::path empty = tmp.path / "empty";
  fs::create_directories(empty);
  // A second copy of one point whose summary differs.
  const fs::path dup = tmp.path / "dup" / point;
  fs::create_directories(dup.parent_path());
  fs::copy(own / point, dup, fs::copy_options::recursive);
  std::ofstream(dup / "summary.json", std::ios::app) << " ";
  // A run folder that is no point of the sweep in the way of a new one.
  const fs::path stale = tmp.path / "stale";
  fs::create_directories(stale / "mc");
  fs::copy(own / point, stale / "mc" / "cache.block_size=16", fs::copy_options::recursive);

  struct Bad {
    std::vector<std::string> args;
    std::string path, words;  // the line names `path` and says `words`
  };
  const fs::path into = tmp.path / "into";
  const std::vector<Bad> cases = {
      {{"merge", empty.string()}, empty.string(), "not a run folder (no summary.json)"},
      {{"merge", (tmp.path / "absent").string()}, (tmp.path / "absent").string(), "not a folder"},
      {{"merge", own.string(), (seed2 / point).string(), "--into", into.string()},
       (seed2 / point / "config.resolved.yaml").string(), "not the configuration of this point"},
      {{"merge", own.string(), seed2.string(), "--into", into.string()},
       (seed2 / "sweep.json").string(), "the points of another sweep"},
      {{"merge", own.string(), dup.parent_path().string(), "--into", into.string()},
       dup.string(), "a second run of point " + point},
      {{"merge", own.string(), (own / point).string()}, "", "several folders"},
      {{"sweep", scenario, "-o", stale.string()}, (stale / "mc" / "cache.block_size=16").string(),
       "no point of this sweep"},
  };
  const std::string csv = slurp(own / "sweep.csv");
  for (const Bad& c : cases) {
    std::string line;
    for (const std::string& a : c.args) line += " " + a;
    INFO("kvsim" << line);
    const auto o = run_kvsim(c.args, tmp.path);
    CHECK(o.status == 2);
    const auto err = lines_of(o.err);
    REQUIRE(err.size() == 1);
    CHECK_THAT(err[0], Catch::StartsWith("kvsim " + c.args[0] + ": error: " + c.path));
    CHECK_THAT(err[0], Catch::Contains(c.words));
    CHECK_FALSE(fs::exists(into));
  }
  CHECK(slurp(own / "sweep.csv") == csv);
  CHECK_FALSE(fs::exists(stale / "mc" / "sweep.csv"));
}
