// kvsim validate SCENARIO.yaml [-o DIR] [--backend cpu|cuda] [--sample-every N | --sample-prob P]
//                [--dtype bf16|fp16] [--set k=v ...] [--seed N] [--repeats N] [--warmup N]
//                [--threads N] [--export-calibration FILE] [--quiet]
// Runs the scenario like `kvsim run` with the kernel validation harness (validate/harness.h) on
// every step, and writes validation.csv + validation.json into the run folder. Exit 0 when every
// sampled step is within the dtype's tolerance, 1 when one is not (or the run fails), 2 on bad
// input (ConfigError, printed by main as one line), 130 / 143 interrupted by SIGINT / SIGTERM.

#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "cli/interrupt.h"
#include "kernels/backend.h"
#include "sim/common/csv_util.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/config/scenario.h"
#include "validate/validate_run.h"

namespace kvsim::cli {
namespace {

constexpr const char* kAbout =
    "Runs the scenario (as `kvsim run`) and checks real paged-attention kernels on its block "
    "tables against a dense reference; writes validation.csv and validation.json in the run "
    "folder.\nExit status: 0 all sampled steps within tolerance, 1 a step out of tolerance or a "
    "failed run, 2 bad input, 130 / 143 interrupted (no run folder left behind).";

std::string parse_backend(const std::string& text) {
  if (text != "cpu" && text != "cuda")
    throw BadValue(fmt::format("unknown kernel backend '{}' (allowed: cpu, cuda)", text));
  return text;
}

kernels::DType parse_dtype(const std::string& text) {
  const std::optional<kernels::DType> d = validate::parse_dtype_name(text);
  if (!d)
    throw BadValue(
        fmt::format("unknown dtype '{}' (allowed: bf16, fp16; fp32 for the cpu backend)", text));
  return *d;
}

double parse_prob(const std::string& text) {
  const std::optional<double> v = parse_double_text(text);
  if (!v || !(*v > 0 && *v <= 1))
    throw BadValue(fmt::format("expected a probability in (0, 1], got '{}'", text));
  return *v;
}

std::string parse_file_name(const std::string& text) {
  if (text.empty()) throw BadValue("empty file name");
  return text;
}

}  // namespace

int validate(const Args& args) {
  CommandLine cl("validate", "SCENARIO.yaml [options]", kAbout);
  ScenarioArgs in;
  std::string calibration;
  std::optional<std::string> backend;
  std::optional<kernels::DType> dtype;
  std::optional<std::int64_t> every, repeats, warmup, threads;
  std::optional<double> prob;
  add_scenario_args(cl, in);
  cl.options()  //
      ("backend", checked<std::string>(&backend, "cpu|cuda", parse_backend),
       "kernel backend (default: the scenario's validate.backend, cpu)")  //
      ("sample-every", integer(&every, 1, kIntMax, "N"),
       "check steps 0, N, 2N, ... (default: validate.sample_every_steps, or, when the scenario "
       "sets no sampling, 200 steps spread over the run with steps that preempt and steps with "
       "prefix hits among them)")  //
      ("sample-prob", checked<double>(&prob, "P", parse_prob),
       "check each step with probability P (seeded by the scenario seed)")  //
      ("dtype", checked<kernels::DType>(&dtype, "bf16|fp16", parse_dtype),
       "KV/Q/O dtype (default: validate.dtype; auto = the KV cache dtype; fp32 is accepted for "
       "the cpu backend)")  //
      ("repeats", integer(&repeats, 1, kIntMax, "N"),
       "timed kernel calls per sampled step (default: cuda 20, cpu 3)")  //
      ("warmup", integer(&warmup, 0, kIntMax, "N"),
       "untimed kernel calls per sampled step (default: cuda 3, cpu 0)")  //
      ("threads", integer(&threads, 1, 1024, "N"),
       "worker threads for the dense references (default: one per hardware thread); the results "
       "do not depend on it")  //
      ("export-calibration", checked<std::string>(&calibration, "FILE", parse_file_name),
       "measured kernel latencies as rows for `kvsim calibrate`");
  if (!cl.parse(args)) return 0;
  std::vector<std::string>& sets = in.sets;
  if (every && prob) throw ConfigError("give --sample-every or --sample-prob, not both");

  // Flags become --set overrides of the scenario's validate: section, so config.resolved.yaml
  // records the settings the run used.
  if (backend) sets.push_back("validate.backend=" + *backend);
  if (every) {
    sets.push_back(fmt::format("validate.sample_every_steps={}", *every));
    sets.push_back("validate.sample_prob=0");
  }
  if (prob) {
    sets.push_back("validate.sample_every_steps=0");
    sets.push_back(fmt::format("validate.sample_prob={}", *prob));
  }
  if (dtype) {
    const kernels::DType d = *dtype;
    sets.push_back(std::string("validate.dtype=") + (d == kernels::DType::kBF16  ? "bfloat16"
                                                     : d == kernels::DType::kF16 ? "float16"
                                                                                 : "float32"));
  }
  const Scenario scenario = load_scenario(in.path, sets, in.seed);
  validate::ValidationOptions opts = validate::options_from_scenario(scenario);
  if (repeats) opts.repeats = static_cast<std::int32_t>(*repeats);
  if (warmup) opts.warmup = static_cast<std::int32_t>(*warmup);
  if (threads) opts.threads = static_cast<std::int32_t>(*threads);
  if (!in.quiet) {
    if (!scenario.sweep.empty())
      std::printf(
          "%s has a sweep of %zu points; validating its base point, as `kvsim run` runs it "
          "(--set KEY=VALUE validates another)\n",
          in.path.c_str(), sweep_points(scenario).size());
    opts.announce = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    opts.progress = validate::terminal_progress(stderr);  // nothing unless stderr is a terminal
  }

  // Ctrl-C / SIGTERM end the run cleanly, as in `kvsim run`.
  const InterruptScope interrupt;
  RunOptions run_options;
  run_options.interrupt = InterruptScope::flag();
  const validate::ValidationRunResult r =
      validate::run_validation(scenario, in.out_dir, opts, run_options, calibration);
  const validate::ValidationSummary& s = r.summary;
  if (s.steps_sampled == 0)
    std::fprintf(stderr,
                 "kvsim validate: warning: no step was sampled (%lld steps); nothing was checked\n",
                 static_cast<long long>(s.steps_total));
  if (!in.quiet) {
    const validate::ValidationSetup& u = r.setup;
    std::printf("%s: %s backend (%s), %s, %d/%d heads x %d, %d blocks of %d  ->  %s\n",
                scenario.name.c_str(), kernels::backend_name(u.backend), u.device.c_str(),
                kernels::dtype_name(u.dtype), u.num_q_heads, u.pool.num_kv_heads, u.pool.head_size,
                u.pool.num_blocks, u.pool.block_size, r.run.folder.c_str());
    std::printf("  steps      %lld sampled of %lld, %lld failed; %lld K/V rows written\n",
                static_cast<long long>(s.steps_sampled), static_cast<long long>(s.steps_total),
                static_cast<long long>(s.steps_failed), static_cast<long long>(s.tokens_written));
    std::printf(
        "  errors     max abs %.3e, max rel %.3e, max NMSE %.3e, non-finite %lld, "
        "mismatched slots %lld\n",
        s.max_abs_err, s.max_rel_err, s.max_nmse, static_cast<long long>(s.nonfinite),
        static_cast<long long>(s.mismatched_slots));
    std::printf("  kernel     median %.1f us per sampled step\n", s.median_latency_us);
    if (!calibration.empty()) std::printf("  calibration rows -> %s\n", calibration.c_str());
    if (s.pass)
      std::printf("  PASS\n");
    else
      std::printf("  FAIL: first at step %lld; worst step %lld (request %llu); see %s\n",
                  static_cast<long long>(s.first_failed_step), static_cast<long long>(s.worst_step),
                  static_cast<unsigned long long>(s.worst_request_id), r.csv.c_str());
  }
  return s.pass ? 0 : 1;
}

}  // namespace kvsim::cli
