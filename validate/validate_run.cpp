#include "validate/validate_run.h"

#include <fmt/format.h>

#include "core/common/assert.h"
#include "sim/common/errors.h"

namespace kvsim::validate {

std::optional<kernels::DType> parse_dtype_name(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "bf16" || name == "bfloat16") return kernels::DType::kBF16;
  if (name == "fp16" || name == "f16" || name == "float16" || name == "half")
    return kernels::DType::kF16;
  if (name == "fp32" || name == "f32" || name == "float32" || name == "float")
    return kernels::DType::kF32;
  return std::nullopt;
}

ValidationOptions options_from_scenario(const Scenario& scenario) {
  ValidationOptions o;
  o.backend = kernels::parse_backend_kind(scenario.validate.backend);  // the parser allows cpu|cuda
  o.sample_every_steps = scenario.validate.sample_every_steps;
  o.sample_prob = scenario.validate.sample_prob;  // neither set: the bounded plan
  std::string dtype = scenario.validate.dtype;
  if (dtype == "auto") dtype = scenario.cache.sizing.cache_dtype;
  if (dtype == "auto") dtype = scenario.model ? scenario.model->dtype : "bfloat16";
  const std::optional<kernels::DType> d = parse_dtype_name(dtype);
  if (!d)
    throw ConfigError(
        fmt::format("{}: validate.dtype: the KV cache dtype '{}' is not one the kernels "
                    "store; set validate.dtype (or --dtype) to bf16 or fp16",
                    scenario.file, dtype));
  o.dtype = *d;
  return o;
}

ValidationRunResult run_validation(const Scenario& scenario, const std::filesystem::path& out_dir,
                                   const ValidationOptions& options, const RunOptions& run_options,
                                   const std::filesystem::path& calibration_csv) {
  ValidationHarness harness(scenario, options);
  // Whatever happens (an error, an interrupt), the progress line is erased before anything else
  // is printed.
  struct EraseProgress {
    ValidationHarness& h;
    ~EraseProgress() { h.finish(); }
  } erase_progress{harness};
  RunOptions ro = run_options;
  StepTimeFn base = ro.step_time ? ro.step_time : make_step_time(scenario);
  // The survey: the same simulation without kernels or files, so the plan knows the run's steps.
  std::vector<StepTraits> traits =
      survey_run(scenario, base, harness.cost_model(), scenario.cache.sizing.block_size,
                 ro.interrupt, options.progress);
  SamplePlan plan = plan_samples(traits, sampling_rule(options, scenario.seed));
  const std::string description = plan.description;
  harness.set_plan(std::move(plan), std::move(traits));
  if (options.announce) options.announce(description);
  // run_scenario has no observer list; its step-time hook sees the same StepView as
  // on_step_begin (after schedule(), block tables final), once per step, so the harness rides
  // on it and the run folder is exactly what `kvsim run` writes.
  ro.step_time = [&harness, base](const StepView& v) {
    harness.on_step_begin(v);
    return base(v);
  };
  ro.fast_forward = false;  // the harness sees every step, its kernels run on the sampled ones
  ValidationRunResult result;
  result.run = run_scenario(scenario, out_dir, ro);
  harness.finish();
  KVSIM_ASSERT(harness.steps_seen() == harness.plan().num_steps(),
               "the validated run and its survey took different steps");
  result.setup = harness.setup();
  result.summary = summarize(harness);
  result.records = harness.records();
  result.fault_step = harness.fault_step();
  result.csv = result.run.folder / "validation.csv";
  result.json = result.run.folder / "validation.json";
  write_file_atomically(result.csv, validation_csv(harness.records()));
  write_file_atomically(result.json, validation_json(scenario, harness, options, result.summary));
  if (!calibration_csv.empty())
    write_file_atomically(calibration_csv, kvsim::validate::calibration_csv(harness));
  return result;
}

}  // namespace kvsim::validate
