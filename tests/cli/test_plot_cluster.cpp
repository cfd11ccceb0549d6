// kvsim plot on cluster runs (plots/cluster.py): a cluster sweep draws the hit rate and the load
// imbalance by router and replica count; a cluster run draws its requests per replica; a cache_only
// sweep leaves out the line and breakdown figures it has no data for; a single engine's run draws
// no cluster figure. Needs matplotlib under Debian's /usr/bin/python3 (scripts/install-deps.sh).

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace {

namespace fs = std::filesystem;
using kvsim::test::run_kvsim;
using kvsim::test::slurp;
using kvsim::test::TempDir;

void require_figure(const fs::path& out, const std::string& stem) {
  for (const char* ext : {".png", ".svg"}) {
    const fs::path p = out / (stem + ext);
    INFO(p);
    REQUIRE(fs::exists(p));
    CHECK(fs::file_size(p) > 1000);
  }
  CHECK_THAT(slurp(out / "index.html"), Catch::Contains(stem + ".png"));
}

}  // namespace

TEST_CASE("kvsim plot draws a cluster sweep's hit rate by router and replicas, and each run's "
          "replicas",
          "[cli][plots]") {
  REQUIRE(std::system("MPLBACKEND=Agg /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1") ==
          0);
  TempDir tmp("plot-cluster");
  const fs::path yaml = tmp.path / "mc.yaml";
  std::ofstream(yaml) << "name: mc\n"
                         "engine: {profile: vllm-0.7.2, mode: cache_only}\n"
                         "cache: {block_size: 512, capacity_tokens: 1000000, "
                         "enable_prefix_caching: true, num_preallocate_tokens: 0}\n"
                         "scheduler: {max_model_len: 4000000}\n"
                         "workload: {trace: {format: mooncake, max_requests: 400, path: " KVSIM_TRACES_DIR
                         "/mooncake_synthetic.jsonl}}\n"
                         "cluster: {replicas: 2, router: {policy: round_robin, seed: 1}}\n"
                         "sweep: {cluster.replicas: [2, 4], "
                         "cluster.router.policy: [round_robin, prefix_hash]}\n";
  const fs::path out = tmp.path / "out";
  REQUIRE(run_kvsim({"sweep", yaml.string(), "-o", out.string(), "--quiet"}, tmp.path).status ==
          0);
  const fs::path sweep = out / "mc";
  const auto p = run_kvsim({"plot", sweep.string(), "-q", "--per-run"}, tmp.path);
  INFO(p.err);
  REQUIRE(p.status == 0);
  const fs::path plots = sweep / "plots";
  require_figure(plots, "cluster_hit_rate");
  const std::string index = slurp(plots / "index.html");
  CHECK_THAT(index, Catch::Contains("a cache_only sweep"));
  CHECK_FALSE(fs::exists(plots / "lines_output_throughput_vs_replicas.png"));
  const fs::path run = plots / "runs" / "replicas-4_policy-prefix_hash";
  require_figure(run, "replica_requests");
  CHECK_THAT(slurp(run / "index.html"), Catch::Contains("cache_only runs have no steps"));

  // One replica is the single engine: no cluster figure, none listed as not drawn.
  const auto one = run_kvsim({"run", yaml.string(), "-o", (tmp.path / "one").string(), "--set",
                              "cluster.replicas=1", "--quiet"},
                             tmp.path);
  REQUIRE(one.status == 0);
  REQUIRE(run_kvsim({"plot", (tmp.path / "one" / "mc").string(), "-q"}, tmp.path).status == 0);
  const std::string single = slurp(tmp.path / "one" / "mc" / "plots" / "index.html");
  CHECK_THAT(single, !Catch::Contains("replica_"));
}
