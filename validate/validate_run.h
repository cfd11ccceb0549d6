#pragma once
// One validated run: the scenario simulated exactly as `kvsim run` does (same run folder, same
// files), with a ValidationHarness seeing every step, then validation.csv and validation.json
// written into the run folder (and a calibration CSV when asked). Used by `kvsim validate`.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/dtype.h"
#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "validate/harness.h"
#include "validate/report.h"

namespace kvsim::validate {

struct ValidationRunResult {
  RunResult run;          // the run folder and summary of the simulation
  ValidationSetup setup;  // what was validated (backend, device, shapes, tolerance)
  ValidationSummary summary;
  std::vector<ValidationRecord> records;  // one per sampled step
  std::int64_t fault_step = -1;           // tests: where the injected fault was planted
  std::filesystem::path csv, json;        // inside run.folder
};

/// Parses a dtype name: bf16 / bfloat16, fp16 / f16 / float16 / half, fp32 / f32 / float32 /
/// float. nullopt otherwise.
[[nodiscard]] std::optional<kernels::DType> parse_dtype_name(std::string_view name);

/// The options the scenario's `validate:` section asks for: backend, sampling (the bounded plan of
/// sample_plan.h when neither sample_every_steps nor sample_prob is set), dtype ("auto": the KV
/// cache dtype, i.e. cache.cache_dtype or else the model's dtype). Throws ConfigError for a dtype
/// the kernels do not store (fp8).
[[nodiscard]] ValidationOptions options_from_scenario(const Scenario& scenario);

/// Surveys `scenario` (survey_run), plans the steps to check (plan_samples; announced through
/// options.announce), then simulates it into `<out_dir>/<name>/` with the harness attached and
/// writes the validation files there, and `calibration_csv` when not empty. Throws what
/// run_scenario throws, and ConfigError from the harness's checks (before anything is written).
ValidationRunResult run_validation(const Scenario& scenario, const std::filesystem::path& out_dir,
                                   const ValidationOptions& options,
                                   const RunOptions& run_options = {},
                                   const std::filesystem::path& calibration_csv = {});

}  // namespace kvsim::validate
