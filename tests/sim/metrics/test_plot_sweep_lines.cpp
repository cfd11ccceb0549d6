// plots/sweep_lines.py on a real sweep (a small fragmentation study): any metric against a swept
// key with one line per value of another, and the breakdown bars per profile; the derived
// normalized latency and the loaded-phase breakdown on hand-made files; bad flags exit 2.
// Skipped with a warning when Debian's /usr/bin/python3 has no matplotlib.

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "sim_test_util.h"

namespace fs = std::filesystem;
using kvsim::test::slurp;
using kvsim::test::TempDir;
using kvsim::test::write_file;

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

int plot(const std::string& args, const fs::path& log) {
  return shell(kPython + " " + (kSource / "plots/kvsim_plot.py").string() + " -q " + args + " > " +
               log.string() + " 2>&1");
}

void require_figure(const fs::path& out, const std::string& stem, bool svg = true) {
  for (const char* ext : {".png", ".svg"}) {
    if (!svg && std::string(ext) == ".svg") continue;
    const fs::path p = out / (stem + ext);
    INFO(p);
    REQUIRE(fs::exists(p));
    CHECK(fs::file_size(p) > 1000);
  }
  CHECK(slurp(out / "index.html").find(stem + ".png") != std::string::npos);
}

/// What `expr` evaluates to in Python with plots/ on the path (stdout, stripped).
std::string python_eval(const std::string& expr, const fs::path& dir) {
  const fs::path out = dir / "eval.txt";
  const int rc =
      shell(kPython + " -c \"import sys; sys.path.insert(0, '" + (kSource / "plots").string() +
            "'); " + expr + "\" > " + out.string() + " 2>&1");
  std::string s = slurp(out);
  INFO(s);
  REQUIRE(rc == 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

TEST_CASE("a profile x rate x lengths sweep gets its line figures and breakdown bars",
          "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  TempDir dir("plot-lines");
  const std::string sweep_cmd = kvsim::test::kvsim_exe() + " sweep " +
                                (kSource / "scenarios/fragmentation-study.yaml").string() + " -o " +
                                dir.path.string() +
                                " --jobs 2 --quiet --set workload.num_requests=40" +
                                " --set 'sweep.workload.arrival.rate_per_s=[1, 4, 16]' > " +
                                (dir.path / "sweep.log").string() + " 2>&1";
  REQUIRE(shell(sweep_cmd) == 0);
  const fs::path sweep = dir.path / "fragmentation-study";
  const fs::path out = dir.path / "plots";
  int rc = plot(sweep.string() + " -o " + out.string(), dir.path / "log.txt");
  INFO(slurp(dir.path / "log.txt"));
  REQUIRE(rc == 0);
  for (const char* stem :
       {"kv_breakdown_by_profile", "lines_normalized_latency_s_vs_rate_per_s",
        "lines_mean_batch_size_vs_rate_per_s", "lines_output_throughput_vs_rate_per_s"})
    require_figure(out, stem);
  const std::string svg = slurp(out / "kv_breakdown_by_profile.svg");
  for (const char* label : {"orca-max", "orca-pow2", "orca-oracle", "vllm-0.7.2", "sharegpt-like",
                            "alpaca-like", "external fragmentation", "rate_per_s=16"})
    CHECK(svg.find(label) != std::string::npos);

  // The general kind: any summary metric, any swept x, lines by another key, bars at a point.
  const fs::path out2 = dir.path / "plots2";
  rc = plot(sweep.string() + " -o " + out2.string() +
                " --lines kv_breakdown.external_fragmentation,request_throughput --x rate_per_s"
                " --by lengths --at 4 --format png",
            dir.path / "log.txt");
  REQUIRE(rc == 0);
  require_figure(out2, "lines_kv_breakdown.external_fragmentation_vs_rate_per_s", false);
  require_figure(out2, "lines_request_throughput_vs_rate_per_s", false);
  require_figure(out2, "kv_breakdown_by_lengths", false);
  CHECK(slurp(out2 / "index.html").find("fragmentation-study at rate_per_s=4") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(out2 / "lines_mean_batch_size_vs_rate_per_s.png"));

  // Typos are errors, not empty figures.
  CHECK(plot(sweep.string() + " -o " + out2.string() + " --x rate", dir.path / "log.txt") == 2);
  CHECK(slurp(dir.path / "log.txt").find("--x: no sweep varies 'rate'") != std::string::npos);
  CHECK(plot(sweep.string() + " -o " + out2.string() + " --lines mean_batch_sise",
             dir.path / "log.txt") == 2);
  CHECK(slurp(dir.path / "log.txt").find("did you mean 'mean_batch_size'?") != std::string::npos);
}

TEST_CASE("normalized latency and the loaded-phase breakdown are computed as documented",
          "[sim][plots]") {
  // The plots are part of what is tested: scripts/install-deps.sh installs matplotlib.
  REQUIRE(have_matplotlib());
  TempDir dir("plot-derived");
  const fs::path run = dir.path / "run";
  write_file(run / "summary.json",
             R"({"name": "r", "kv_breakdown": {"token_states": 0.5, "reservation": 0, )"
             R"("internal_fragmentation": 0, "external_fragmentation": 0, "cached_free": 0, )"
             R"("free": 0.5}})");
  write_file(run / "requests.csv",
             "request_id,arrival_s,prompt_tokens,output_tokens,first_scheduled_s,first_token_s,"
             "finish_s,ttft_ms,tpot_ms,e2el_ms,queue_ms,first_lookup_hit_tokens,num_preemptions,"
             "finish_reason\n"
             "0,0,10,10,0,0.1,1,100,10,1000,0,0,0,length\n"
             "1,0,10,30,0,0.1,6,100,10,6000,0,0,0,length\n"
             "2,0,5000,0,,,,,,,,0,0,rejected\n");
  // (1000 ms / 10 + 6000 ms / 30) / 2 = 150 ms per token; the rejected request does not count.
  CHECK(python_eval("from rundata import Run; from sweep_lines import metric_value; "
                    "print(round(metric_value(Run('" +
                        run.string() + "'), 'normalized_latency_s'), 9))",
                    dir.path) == "0.15");
  // 10 rows with requests waiting (all token states) and 5 without (all free): the bars average
  // the loaded rows only; with fewer than 10 loaded rows, summary.json's mean.
  std::string steps =
      "step,time_s,duration_ms,num_running,num_waiting,num_scheduled,prefill_tokens,decode_tokens,"
      "batch_tokens,kv_cache_usage_perc,num_free_blocks,slots_token_states,slots_reservation,"
      "slots_internal_fragmentation,slots_external_fragmentation,slots_cached_free,slots_free,"
      "prefix_queries,prefix_hits,preemptions,evictions,blocks_allocated\n";
  for (int i = 0; i < 15; ++i)
    steps += std::to_string(i) + ",0,1,1," + (i < 10 ? "3" : "0") + ",1,0,1,1,0,0," +
             (i < 10 ? "60,20,0,20,0,0" : "0,0,0,0,0,100") + ",0,0,0,0,0\n";
  write_file(run / "steps.csv", steps);
  const std::string expr =
      "from rundata import Run; from sweep_lines import loaded_breakdown; "
      "b, loaded = loaded_breakdown(Run('" +
      run.string() +
      "')); print(loaded, round(b['token_states'], 6), "
      "round(b['reservation'], 6), round(b['external_fragmentation'], 6), "
      "round(b['free'], 6))";
  CHECK(python_eval(expr, dir.path) == "True 0.6 0.2 0.2 0.0");
  write_file(run / "steps.csv", steps.substr(0, steps.find("\n5,") + 1));  // 5 loaded rows
  CHECK(python_eval(expr, dir.path) == "False 0.5 0 0 0.5");  // summary.json's numbers as written
}
