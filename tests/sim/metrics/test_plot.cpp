// plots/kvsim_plot.py renders synthetic run folders (tests/sim/fixtures/make_plot_fixtures.py,
// which follows sim/OUTPUTS.md) into PNG, SVG and index.html, and a simulated hybrid-model run its
// KV cache groups. The tests require matplotlib under Debian's /usr/bin/python3
// (scripts/install-deps.sh installs it).

#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;

namespace {

const fs::path kSource = KVSIM_SOURCE_DIR;
const std::string kPython = "MPLBACKEND=Agg /usr/bin/python3";

int shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

bool have_matplotlib() {
  return fs::exists("/usr/bin/python3") &&
         shell(kPython + " -c 'import matplotlib, numpy' > /dev/null 2>&1") == 0;
}

/// Fixtures generated afresh for each test case into a temporary folder (fx.root/fx).
struct Fixtures {
  kvsim::test::TempDir dir{"plot"};
  const fs::path& root = dir.path;
  Fixtures() {
    const int rc =
        shell(kPython + " " + (kSource / "tests/sim/fixtures/make_plot_fixtures.py").string() +
              " " + (root / "fx").string());
    REQUIRE(rc == 0);
  }
};

int plot(const std::string& args, const fs::path& log) {
  return shell(kPython + " " + (kSource / "plots/kvsim_plot.py").string() + " -q " + args + " > " +
               log.string() + " 2>&1");
}

void require_figure(const fs::path& out, const std::string& stem) {
  for (const char* ext : {".png", ".svg"}) {
    const fs::path p = out / (stem + ext);
    INFO(p);
    REQUIRE(fs::exists(p));
    CHECK(fs::file_size(p) > 1000);
  }
  CHECK(kvsim::test::slurp(out / "index.html").find(stem + ".png") != std::string::npos);
}

}  // namespace

TEST_CASE("one run folder renders its five figures and an index", "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  Fixtures fx;
  const fs::path out = fx.root / "single";
  const int rc =
      plot((fx.root / "fx/runs/chat-a").string() + " -o " + out.string(), fx.root / "log.txt");
  INFO(kvsim::test::slurp(fx.root / "log.txt"));
  REQUIRE(rc == 0);
  for (const char* stem : {"kv_breakdown", "kv_usage_queue", "prefix_hit_rate", "latency_cdf",
                           "preemptions_evictions"}) {
    require_figure(out, stem);
  }
  const std::string index = kvsim::test::slurp(out / "index.html");
  CHECK(index.find("prefix_cache_hit_rate") != std::string::npos);  // the summary table
  CHECK(index.find("Not drawn") == std::string::npos);

  // Same inputs, same bytes.
  const fs::path again = fx.root / "single-again";
  REQUIRE(plot((fx.root / "fx/runs/chat-a").string() + " -o " + again.string(),
               fx.root / "log.txt") == 0);
  for (const auto& entry : fs::directory_iterator(out)) {
    INFO(entry.path().filename());
    CHECK(kvsim::test::slurp(entry.path()) == kvsim::test::slurp(again / entry.path().filename()));
  }
}

TEST_CASE("a run of several KV cache groups draws each group's share of the pool", "[sim][plots]") {
  REQUIRE(have_matplotlib());
  Fixtures fx;
  // gpt-oss-20b under vllm-0.20: a sliding-window group (window 128) and a full one.
  const std::string yaml =
      "name: hybrid\nseed: 2\nengine: {profile: vllm-0.20}\nmodel: {config: " +
      (kSource / "scenarios/models/gpt-oss-20b.json").string() +
      "}\ncache: {block_size: 16, num_gpu_blocks_override: 400}\nscheduler: {max_model_len: "
      "1024}\nworkload: {num_requests: 30, arrival: {process: poisson, rate_per_s: 40}, "
      "prompt_tokens: {uniform: {min: 100, max: 700}}, output_tokens: {uniform: {min: 10, max: "
      "300}}}\noutputs: {steps_every: 2}\n";
  kvsim::RunOptions opt;
  opt.step_time = [](const kvsim::StepView&) { return kvsim::SimTimeNs{5'000'000}; };
  const fs::path run =
      kvsim::run_scenario(kvsim::parse_scenario(kvsim::load_yaml_string(yaml, "h.yaml"), "h.yaml"),
                          fx.root / "hybrid", opt)
          .folder;
  const fs::path out = fx.root / "hybrid-plots";
  int rc = plot(run.string() + " -o " + out.string(), fx.root / "log.txt");
  INFO(kvsim::test::slurp(fx.root / "log.txt"));
  REQUIRE(rc == 0);
  require_figure(out, "kv_groups");
  const std::string svg = kvsim::test::slurp(out / "kv_groups.svg");
  CHECK(svg.find("g0: sliding window 128 (12 layers)") != std::string::npos);
  CHECK(svg.find("g1: full attention (12 layers)") != std::string::npos);
  // A run of one group draws no such figure and reports nothing missing.
  const fs::path single = fx.root / "single";
  REQUIRE(plot((fx.root / "fx/runs/chat-a").string() + " -o " + single.string(),
               fx.root / "log.txt") == 0);
  CHECK_FALSE(fs::exists(single / "kv_groups.png"));
  CHECK(kvsim::test::slurp(single / "index.html").find("kv_groups") == std::string::npos);
  // steps.csv without the second group's columns: the figure is skipped, saying why.
  {
    std::ifstream in(run / "steps.csv");
    std::ofstream cut(fx.root / "steps-cut.csv");
    for (std::string line; std::getline(in, line);) {
      std::size_t pos = line.size();
      for (int k = 0; k < 5; ++k) pos = line.rfind(',', pos - 1);
      cut << line.substr(0, pos) << "\n";
    }
  }
  fs::rename(fx.root / "steps-cut.csv", run / "steps.csv");
  const fs::path cut_out = fx.root / "hybrid-cut";
  REQUIRE(plot(run.string() + " -o " + cut_out.string(), fx.root / "log.txt") == 0);
  CHECK_FALSE(fs::exists(cut_out / "kv_groups.png"));
  CHECK(kvsim::test::slurp(cut_out / "index.html")
            .find("has columns for 1 KV cache groups, summary.json 2") != std::string::npos);
}

TEST_CASE("a sweep folder renders the comparison figures and a heatmap", "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  Fixtures fx;
  const fs::path out = fx.root / "sweep-out";
  const int rc = plot((fx.root / "fx/sweep").string() + " -o " + out.string(), fx.root / "log.txt");
  INFO(kvsim::test::slurp(fx.root / "log.txt"));
  REQUIRE(rc == 0);
  for (const char* stem :
       {"hit_rate_vs_capacity", "kv_breakdown_bars", "latency_table", "latency_cdf_overlay",
        "metrics_bars", "run_timelines", "heatmap_sweep"}) {
    require_figure(out, stem);
  }
  const std::string table = kvsim::test::slurp(out / "latency_table.csv");
  CHECK(table.rfind("run,completed,p50_ttft_ms", 0) == 0);
  CHECK(std::count(table.begin(), table.end(), '\n') == 17);  // header + 16 runs
}

TEST_CASE("several run folders are compared and a missing optional file skips its figure",
          "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  Fixtures fx;
  fs::remove(fx.root / "fx/runs/chat-b/steps.csv");
  fs::remove(fx.root / "fx/runs/chat-b/requests.csv");
  const fs::path out = fx.root / "cmp";
  int rc = plot((fx.root / "fx/runs/chat-a").string() + " " +
                    (fx.root / "fx/runs/chat-b").string() + " -o " + out.string(),
                fx.root / "log.txt");
  INFO(kvsim::test::slurp(fx.root / "log.txt"));
  REQUIRE(rc == 0);
  require_figure(out, "kv_breakdown_bars");
  require_figure(out, "latency_cdf_overlay");          // chat-a still has requests.csv
  require_figure(out, "metrics_bars");                 // from the two summaries
  CHECK_FALSE(fs::exists(out / "run_timelines.png"));  // only chat-a has a steps.csv

  const fs::path single = fx.root / "single-b";
  rc = plot((fx.root / "fx/runs/chat-b").string() + " -o " + single.string(), fx.root / "log.txt");
  REQUIRE(rc == 0);
  CHECK_FALSE(fs::exists(single / "kv_breakdown.png"));
  const std::string index = kvsim::test::slurp(single / "index.html");
  CHECK(index.find("no steps.csv") != std::string::npos);
  CHECK(index.find("no requests.csv") != std::string::npos);
}

TEST_CASE("a folder that is not a run is refused with status 2", "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  Fixtures fx;
  fs::create_directories(fx.root / "empty");
  CHECK(plot((fx.root / "empty").string(), fx.root / "log.txt") == 2);
  CHECK(kvsim::test::slurp(fx.root / "log.txt").find("not a run folder") != std::string::npos);
  std::ofstream(fx.root / "fx/runs/chat-a/summary.json") << "{\"name\": \"x\",\n";
  CHECK(plot((fx.root / "fx/runs/chat-a").string(), fx.root / "log.txt") == 2);
  CHECK(kvsim::test::slurp(fx.root / "log.txt").find("summary.json:2:1: malformed JSON") !=
        std::string::npos);
}

TEST_CASE("the shipped release comparison sweeps every V1 release and draws their comparison",
          "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  const kvsim::test::TempDir dir("plot-profiles");
  const fs::path scenario = kSource / "scenarios/vllm-releases.yaml";
  REQUIRE(shell(kvsim::test::kvsim_exe() + " sweep " + scenario.string() + " -o " +
                dir.path.string() + " --set workload.num_requests=60 > " +
                (dir.path / "log.txt").string() + " 2>&1") == 0);
  const fs::path sweep = dir.path / "vllm-releases";
  // Every point under the three profiles, each run recording its profile.
  int runs = 0;
  for (const auto& e : fs::directory_iterator(sweep)) {
    if (!fs::is_directory(e.path())) continue;
    const std::string name = e.path().filename().string();
    const std::string summary = kvsim::test::slurp(e.path() / "summary.json");
    INFO(name);
    const char* profile = name.find("vllm-0.8.5") != std::string::npos  ? "vllm-0.8.5"
                          : name.find("vllm-0.20") != std::string::npos ? "vllm-0.20"
                                                                        : "vllm-0.7.2";
    CHECK(summary.find(std::string("\"profile\": \"") + profile + "\"") != std::string::npos);
    ++runs;
  }
  CHECK(runs == 6);
  const fs::path out = dir.path / "plots";
  const int rc = plot(sweep.string() + " -o " + out.string(), dir.path / "plot-log.txt");
  INFO(kvsim::test::slurp(dir.path / "plot-log.txt"));
  REQUIRE(rc == 0);
  for (const char* stem : {"kv_breakdown_bars", "latency_cdf_overlay", "metrics_bars",
                           "run_timelines", "hit_rate_vs_capacity", "heatmap_vllm-releases"})
    require_figure(out, stem);
  const std::string index = kvsim::test::slurp(out / "index.html");
  CHECK(index.find("profile=vllm-0.8.5") != std::string::npos);
  CHECK(index.find("profile=vllm-0.20") != std::string::npos);
}

TEST_CASE("the shipped V0-against-V1 sweep runs its listed points and plots them together",
          "[sim]") {
  // scenarios/v0-vs-v1.yaml lists three points (V1; V0 with recompute; V0 with swap and forks):
  // each runs with its own keys, the fork run shares blocks and swaps, and `kvsim plot` of the
  // sweep draws the engine comparisons (and each V0 run its swap/sharing figure with --per-run).
  const kvsim::test::TempDir dir("plot-v0-v1");
  const fs::path scenario = kSource / "scenarios/v0-vs-v1.yaml";
  REQUIRE(shell(kvsim::test::kvsim_exe() + " sweep " + scenario.string() + " -o " +
                dir.path.string() + " --set workload.num_requests=300 > " +
                (dir.path / "log.txt").string() + " 2>&1") == 0);
  const fs::path sweep = dir.path / "v0-vs-v1";
  const std::string v1 = "engine.profile=vllm-0.7.2";
  const std::string recompute = "engine.profile=vllm-0.7.2-v0,scheduler.preemption_mode=recompute";
  const std::string fork =
      "engine.profile=vllm-0.7.2-v0,scheduler.preemption_mode=swap,workload.parallel_sampling=fork";
  for (const std::string& point : {v1, recompute, fork}) {
    INFO(point);
    REQUIRE(fs::exists(sweep / point / "summary.json"));
  }
  const std::string s1 = kvsim::test::slurp(sweep / v1 / "summary.json");
  CHECK(s1.find("\"profile\": \"vllm-0.7.2\"") != std::string::npos);
  CHECK(s1.find("num_preemptions_swap") == std::string::npos);  // V1: no V0 figures
  const std::string sr = kvsim::test::slurp(sweep / recompute / "summary.json");
  CHECK(sr.find("\"num_preemptions_swap\": 0,") != std::string::npos);
  CHECK(sr.find("\"kv_sharing_saved_share\": 0.000000000") != std::string::npos);
  const std::string sf = kvsim::test::slurp(sweep / fork / "summary.json");
  CHECK(sf.find("\"num_preemptions_recompute\": 0,") != std::string::npos);
  CHECK(sf.find("\"num_preemptions_swap\": 0,") == std::string::npos);
  CHECK(sf.find("\"num_cow_copies\": 0,") == std::string::npos);
  CHECK(sf.find("\"kv_sharing_saved_share\": 0.0") != std::string::npos);  // a few percent
  CHECK(sf.find("\"kv_sharing_saved_share\": 0.000000000") == std::string::npos);
  for (const std::string* s : {&s1, &sr, &sf})
    CHECK(s->find("\"completed\": 1200,") != std::string::npos);
  const std::string table = kvsim::test::slurp(sweep / "sweep.csv");
  CHECK(table.rfind("engine.profile,scheduler.preemption_mode,workload.parallel_sampling,", 0) ==
        0);

  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  const fs::path out = dir.path / "plots";
  const int rc = plot(sweep.string() + " --per-run -o " + out.string(), dir.path / "plot-log.txt");
  INFO(kvsim::test::slurp(dir.path / "plot-log.txt"));
  REQUIRE(rc == 0);
  for (const char* stem : {"engine_timelines", "engine_bars", "metrics_bars", "latency_cdf_overlay",
                           "run_timelines", "kv_breakdown_bars"})
    require_figure(out, stem);
  const std::string index = kvsim::test::slurp(out / "index.html");
  CHECK(index.find("lists its points") != std::string::npos);  // no grid figures, said so
  int v0_figures = 0;
  for (const auto& e : fs::recursive_directory_iterator(out / "runs"))
    v0_figures += e.path().filename() == "v0_swap_sharing.png";
  CHECK(v0_figures == 2);  // the two V0 runs
}

TEST_CASE("the shipped CPU tier sweep runs its points and plots hit rate, TTFT and the timeline",
          "[sim][offload]") {
  // scenarios/cpu-offload.yaml: no tier, LRU and ARC tiers of 8 ... 128 GiB, and slower links.
  // Fewer sessions here; the tier still raises the hit rate over the run without one.
  const kvsim::test::TempDir dir("plot-cpu-offload");
  const fs::path scenario = kSource / "scenarios/cpu-offload.yaml";
  REQUIRE(shell(kvsim::test::kvsim_exe() + " sweep " + scenario.string() + " -o " +
                dir.path.string() + " --set workload.num_requests=80 > " +
                (dir.path / "log.txt").string() + " 2>&1") == 0);
  const fs::path sweep = dir.path / "cpu-offload";
  const auto summary = [&](const std::string& point) {
    INFO(point);
    return kvsim::test::read_json(sweep / point / "summary.json");
  };
  const nlohmann::json none = summary("cache.kv_offloading_size=~");
  const nlohmann::json lru = summary(
      "cache.kv_offloading_size=64,cache.kv_offloading_eviction_policy=lru");
  const nlohmann::json slow =
      summary("cache.kv_offloading_size=32,hardware.host_link_bytes_per_s=4.0e9");
  CHECK_FALSE(none.contains("kv_offload"));
  CHECK(lru.at("kv_offload").at("num_cpu_blocks") == 32768);  // 64 GiB of 2 MiB blocks
  CHECK(lru.at("first_lookup_hit_rate").get<double>() >
        none.at("first_lookup_hit_rate").get<double>() + 0.1);
  CHECK(lru.at("mean_ttft_ms").get<double>() < none.at("mean_ttft_ms").get<double>());
  CHECK(slow.at("kv_offload").at("polling_steps").get<std::int64_t>() >
        lru.at("kv_offload").at("polling_steps").get<std::int64_t>());

  REQUIRE(have_matplotlib());
  const std::string script = kPython + " " + (kSource / "plots/cpu_offload.py").string() + " ";
  const fs::path out = dir.path / "plots";
  const fs::path log = dir.path / "plot-log.txt";
  const int rc = shell(script + sweep.string() + " -o " + out.string() + " --format png > " +
                       log.string() + " 2>&1");
  INFO(kvsim::test::slurp(log));
  REQUIRE(rc == 0);
  for (const char* stem : {"cpu_offload.png", "cpu_offload_timeline.png"}) {
    INFO(stem);
    REQUIRE(fs::exists(out / stem));
    CHECK(fs::file_size(out / stem) > 10000);
  }
  // A folder that is not a sweep: one line, status 2.
  CHECK(shell(script + (sweep / "cache.kv_offloading_size=~").string() + " > " + log.string() +
              " 2>&1") == 2);
  CHECK(kvsim::test::slurp(log).find("cpu_offload.py: ") == 0);
}
