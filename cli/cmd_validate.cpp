// kvsim validate SCENARIO.yaml [-o DIR] [--backend cpu|cuda] [--sample-every N | --sample-prob P]
//                [--dtype bf16|fp16] [--set k=v ...] [--seed N] [--repeats N] [--warmup N]
//                [--export-calibration FILE] [--quiet]
// Runs the scenario like `kvsim run` with the kernel validation harness (validate/harness.h) on
// every step, and writes validation.csv + validation.json into the run folder. Exit 0 when every
// sampled step is within the dtype's tolerance, 1 when one is not (or the run fails), 2 on bad
// input (ConfigError, printed by main as one line).

#include <fmt/format.h>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "kernels/backend.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/config/scenario.h"
#include "validate/validate_run.h"

namespace kvsim::cli {
namespace {

constexpr const char* kValidateUsage =
    "usage: kvsim validate SCENARIO.yaml [-o DIR] [--backend cpu|cuda]\n"
    "                      [--sample-every N | --sample-prob P] [--dtype bf16|fp16]\n"
    "                      [--set key.path=value ...] [--seed N] [--repeats N] [--warmup N]\n"
    "                      [--export-calibration FILE] [--quiet]\n"
    "Runs the scenario (as `kvsim run`) and checks real paged-attention kernels on its block\n"
    "tables against a dense reference; writes validation.csv and validation.json in the run "
    "folder.\n"
    "  -o DIR                     parent folder of the run folder DIR/<name>/ (default: results)\n"
    "  --backend cpu|cuda         kernel backend (default: the scenario's validate.backend, cpu)\n"
    "  --sample-every N           check steps 0, N, 2N, ... (default: "
    "validate.sample_every_steps,\n"
    "                             or, when the scenario sets no sampling, 200 steps spread over\n"
    "                             the run, with preemptions and prefix hits among them)\n"
    "  --sample-prob P            check each step with probability P (seeded by the scenario "
    "seed)\n"
    "  --dtype bf16|fp16          KV/Q/O dtype (default: validate.dtype, auto = the KV cache "
    "dtype;\n"
    "                             fp32 is accepted for the cpu backend)\n"
    "  --set k.path=value         override a scenario key (value parsed as YAML), repeatable\n"
    "  --seed N                   override the scenario's seed\n"
    "  --repeats N, --warmup N    timed / untimed kernel calls per sampled step\n"
    "                             (default: cuda 20 / 3, cpu 3 / 0)\n"
    "  --export-calibration FILE  measured kernel latencies as rows for `kvsim calibrate`\n"
    "  --quiet                    print nothing but errors\n"
    "Exit status: 0 all sampled steps within tolerance, 1 a step out of tolerance or a failed "
    "run,\n"
    "2 bad input.\n";

std::int64_t parse_count(const std::string& flag, const std::string& text, std::int64_t min) {
  try {
    std::size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (used == text.size() && v >= min) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("{}: expected an integer >= {}, got '{}'", flag, min, text));
}

double parse_prob(const std::string& text) {
  try {
    std::size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && v > 0 && v <= 1) return v;
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("--sample-prob: expected a probability in (0, 1], got '{}'", text));
}

}  // namespace

int validate(const Args& args) {
  static constexpr std::string_view kFlags[] = {
      "--output", "--backend", "--sample-every", "--sample-prob",        "--dtype", "--set",
      "--seed",   "--repeats", "--warmup",       "--export-calibration", "--quiet", "--help"};
  ArgParser cli(args, "validate", kFlags);
  ScenarioArgs args_in;
  std::string calibration;
  std::optional<std::string> backend, dtype;
  std::optional<std::int64_t> every, repeats, warmup;
  std::optional<double> prob;
  while (cli.next()) {
    if (cli.is("-h", "--help")) {
      std::fputs(kValidateUsage, stdout);
      return 0;
    }
    if (take_scenario_arg(cli, args_in)) continue;
    if (cli.is("--backend")) {
      backend = cli.value();
      if (*backend != "cpu" && *backend != "cuda")
        throw ConfigError(
            fmt::format("--backend: unknown kernel backend '{}' (allowed: cpu, cuda)", *backend));
    } else if (cli.is("--sample-every")) {
      every = parse_count("--sample-every", cli.value(), 1);
    } else if (cli.is("--sample-prob")) {
      prob = parse_prob(cli.value());
    } else if (cli.is("--dtype")) {
      dtype = cli.value();
      if (!validate::parse_dtype_name(*dtype))
        throw ConfigError(
            fmt::format("--dtype: unknown dtype '{}' (allowed: bf16, fp16; fp32 "
                        "for the cpu backend)",
                        *dtype));
    } else if (cli.is("--repeats")) {
      repeats = parse_count("--repeats", cli.value(), 1);
    } else if (cli.is("--warmup")) {
      warmup = parse_count("--warmup", cli.value(), 0);
    } else if (cli.is("--export-calibration")) {
      calibration = cli.value();
      if (calibration.empty()) throw ConfigError("--export-calibration: empty file name");
    } else {
      cli.unknown();
    }
  }
  const std::optional<std::string>& scenario_path = args_in.path;
  const std::string& out_dir = args_in.out_dir;
  std::vector<std::string>& sets = args_in.sets;
  std::optional<std::uint64_t> seed;
  if (args_in.seed) seed = parse_seed(*args_in.seed);
  const bool quiet = args_in.quiet;
  if (!scenario_path) throw ConfigError("missing SCENARIO.yaml (see kvsim validate --help)");
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
    const kernels::DType d = *validate::parse_dtype_name(*dtype);
    sets.push_back(std::string("validate.dtype=") + (d == kernels::DType::kBF16  ? "bfloat16"
                                                     : d == kernels::DType::kF16 ? "float16"
                                                                                 : "float32"));
  }
  const Scenario scenario = load_scenario(*scenario_path, sets, seed);
  validate::ValidationOptions opts = validate::options_from_scenario(scenario);
  if (repeats) opts.repeats = static_cast<std::int32_t>(*repeats);
  if (warmup) opts.warmup = static_cast<std::int32_t>(*warmup);
  if (!quiet) {
    opts.announce = [](const std::string& line) {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    };
    opts.progress = validate::terminal_progress(stderr);  // nothing unless stderr is a terminal
  }

  const validate::ValidationRunResult r =
      validate::run_validation(scenario, out_dir, opts, {}, calibration);
  const validate::ValidationSummary& s = r.summary;
  if (s.steps_sampled == 0)
    std::fprintf(stderr,
                 "kvsim validate: warning: no step was sampled (%lld steps); nothing was checked\n",
                 static_cast<long long>(s.steps_total));
  if (!quiet) {
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
