// kvsim run SCENARIO.yaml [-o DIR] [--set key.path=value ...] [--seed N] [--quiet]
//                         [--check-invariants]
// Runs one scenario into DIR/<name>/ (default DIR: results). Exit 0 ok, 1 run failure (a request
// that can never fit, I/O), 2 bad input (ConfigError, printed by main as one line), 130 / 143
// interrupted by SIGINT / SIGTERM (no run folder left behind).

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "cli/interrupt.h"
#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"

namespace kvsim::cli {
namespace {

void print_summary(const RunResult& r, std::FILE* out) {
  const nlohmann::json j = nlohmann::json::parse(r.summary_json);
  auto d = [&](const char* k) { return j.value(k, 0.0); };
  auto i = [&](const char* k) { return j.value(k, std::int64_t{0}); };
  std::fprintf(out, "%s  (%s, %s)  ->  %s\n", j.value("name", "").c_str(),
               j.value("profile", "").c_str(), j.value("mode", "").c_str(), r.folder.c_str());
  std::fprintf(out, "  requests   %lld completed, %lld rejected, %lld steps, %.3f s simulated\n",
               static_cast<long long>(i("completed")), static_cast<long long>(i("rejected")),
               static_cast<long long>(i("num_steps")), d("duration"));
  if (r.fast_forward_steps > 0)
    std::fprintf(out, "  steps      %lld of them advanced in decode runs (fast-forward)\n",
                 static_cast<long long>(r.fast_forward_steps));
  std::fprintf(out, "  KV cache   %lld blocks of %lld tokens, usage mean %.1f%% max %.1f%%\n",
               static_cast<long long>(i("num_gpu_blocks")), static_cast<long long>(i("block_size")),
               100 * d("mean_kv_cache_usage_perc"), 100 * d("max_kv_cache_usage_perc"));
  std::fprintf(
      out, "  prefix     hit rate %.4f (first lookup %.4f), %lld preemptions, %lld evictions\n",
      d("prefix_cache_hit_rate"), d("first_lookup_hit_rate"),
      static_cast<long long>(i("num_preemptions")), static_cast<long long>(i("num_evictions")));
  if (j.value("mode", "") == "timed") {
    std::fprintf(out, "  throughput %.2f req/s, %.1f output tok/s\n", d("request_throughput"),
                 d("output_throughput"));
    std::fprintf(out, "  TTFT ms    mean %.2f  p50 %.2f  p99 %.2f\n", d("mean_ttft_ms"),
                 d("p50_ttft_ms"), d("p99_ttft_ms"));
    std::fprintf(out, "  TPOT ms    mean %.2f  p50 %.2f  p99 %.2f\n", d("mean_tpot_ms"),
                 d("p50_tpot_ms"), d("p99_tpot_ms"));
    std::fprintf(out, "  E2E ms     mean %.2f  p50 %.2f  p99 %.2f\n", d("mean_e2el_ms"),
                 d("p50_e2el_ms"), d("p99_e2el_ms"));
  }
  const auto& b = j["kv_breakdown"];
  if (b.is_object())
    std::fprintf(out,
                 "  KV slots   token states %.1f%%, reservation %.1f%%, internal frag %.1f%%, "
                 "cached free %.1f%%, free %.1f%%\n",
                 100 * b.value("token_states", 0.0), 100 * b.value("reservation", 0.0),
                 100 * b.value("internal_fragmentation", 0.0), 100 * b.value("cached_free", 0.0),
                 100 * b.value("free", 0.0));
}

}  // namespace

int run(const Args& args) {
  CommandLine cl(
      "run", "SCENARIO.yaml [options]",
      "Runs one scenario into DIR/<name>/ (see sim/OUTPUTS.md).\nExit status: 0 done, 1 a "
      "failed run, 2 bad input, 130 / 143 interrupted by SIGINT / SIGTERM (no run "
      "folder left behind).");
  ScenarioArgs in;
  bool check = false;
  add_scenario_args(cl, in);
  cl.options()  //
      ("check-invariants", flag(&check),
       "check the KV cache manager's invariants after every step (slow)");
  if (!cl.parse(args)) return 0;
  const std::string& out_dir = in.out_dir;
  const bool quiet = in.quiet;

  const Scenario scenario = load_scenario(in.path, in.sets, in.seed);
  RunOptions opts;
  opts.check_invariants = check;
  const bool tty = !quiet && ::isatty(2);
  const auto wall0 = std::chrono::steady_clock::now();
  if (tty) {
    opts.progress = [wall0, last = -1.0](const SimProgress& p) mutable {
      const double wall =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
      if (wall - last < 0.1) return;  // redraw at most ten times a second
      last = wall;
      std::fprintf(stderr,
                   "\r\033[K  sim %9.2f s | %lld requests done | %lld steps | running %lld waiting "
                   "%lld | %.0f req/s",
                   static_cast<double>(p.now_ns) / 1e9, static_cast<long long>(p.requests_done),
                   static_cast<long long>(p.num_steps), static_cast<long long>(p.num_running),
                   static_cast<long long>(p.num_waiting),
                   wall > 0 ? static_cast<double>(p.requests_done) / wall : 0.0);
      std::fflush(stderr);
    };
  }
  // Ctrl-C / SIGTERM end the run cleanly: the temporary folder is removed, nothing half-written
  // (main exits 130 / 143).
  const InterruptScope interrupt;
  opts.interrupt = InterruptScope::flag();
  RunResult result;
  try {
    result = run_scenario(scenario, out_dir, opts);
  } catch (...) {
    if (tty) std::fputs("\n", stderr);
    throw;
  }
  if (tty) std::fputs("\n", stderr);
  for (const std::string& w : result.warnings)
    std::fprintf(stderr, "kvsim: warning: %s\n", w.c_str());
  if (!quiet) print_summary(result, stdout);
  return 0;
}

}  // namespace kvsim::cli
