#pragma once
// Helpers shared by the CPU and GPU validation tests.

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "sim/config/scenario.h"
#include "validate/harness.h"
#include "validate/validate_run.h"

namespace kvsim::validate::test {

/// The small CI scenario.
inline const std::string kSmall = std::string(KVSIM_SOURCE_DIR) + "/scenarios/validate-small.yaml";

/// --set overrides that turn validate-small into a vLLM V0 run with parallel sampling by fork
/// (n = 3) on a 48-block pool: groups are preempted by swapping to a CPU pool and back, forks
/// copy shared partial blocks (no chunked prefill in V0: the batch budget is max_model_len).
inline const std::vector<std::string> kV0SwapFork = {"engine.profile=vllm-0.7.2-v0",
                                                     "scheduler.max_num_batched_tokens=2048",
                                                     "scheduler.max_num_seqs=16",
                                                     "scheduler.preemption_mode=swap",
                                                     "workload.n=3",
                                                     "workload.parallel_sampling=fork",
                                                     "cache.swap_space=0.01",
                                                     "cache.num_preallocate_tokens=0",
                                                     "cache.num_gpu_blocks_override=48"};

/// A fresh, empty output folder for one test (per process, so parallel ctest runs do not clash).
inline std::filesystem::path out_dir(const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(KVSIM_BINARY_DIR) / "validate-test-out" /
                                  (name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p;
}

/// Options sampling every `sample_every`-th step on `backend` in `dtype`; the cpu backend times
/// one call per step (the tests do not need its latencies), the cuda backend keeps its default.
inline ValidationOptions options(kernels::BackendKind backend, kernels::DType dtype,
                                 std::int64_t sample_every = 1) {
  ValidationOptions o;
  o.backend = backend;
  o.dtype = dtype;
  o.sample_every_steps = sample_every;
  if (backend == kernels::BackendKind::kCpu) o.repeats = 1;
  return o;
}

/// The cpu backend in bf16, sampling every `sample_every`-th step.
inline ValidationOptions cpu_options(std::int64_t sample_every = 1) {
  return options(kernels::BackendKind::kCpu, kernels::DType::kBF16, sample_every);
}

/// The record of `step` in a validation run, or nullptr when that step was not checked.
inline const ValidationRecord* record_at(const ValidationRunResult& r, std::int64_t step) {
  for (const ValidationRecord& rec : r.records)
    if (rec.step == step) return &rec;
  return nullptr;
}

/// Runs `s` with the fault `faulty.fault` plants into `out_dir(name)`, then a clean run with the
/// same options checking the fault's step, and checks that the clean step passes while the faulty
/// one fails by far more than the tolerance: well above bf16's atol (1.5e-2) and 20x the clean
/// error of the same step, with mismatched slots, as the run's first failed step. Returns the
/// faulty run.
inline ValidationRunResult expect_fault_fails(const Scenario& s, const ValidationOptions& faulty,
                                              const std::string& name) {
  const ValidationRunResult r = run_validation(s, out_dir(name), faulty);
  INFO(name << ": fault " << fault_kind_name(faulty.fault.kind) << " planted at step "
            << r.fault_step);
  REQUIRE(r.fault_step >= faulty.fault.from_step);
  ValidationOptions clean_options = faulty;
  clean_options.fault = {};
  clean_options.sample_every_steps = r.fault_step;
  const ValidationRunResult clean = run_validation(s, out_dir("clean-" + name), clean_options);
  const ValidationRecord* bad = record_at(r, r.fault_step);
  const ValidationRecord* good = record_at(clean, r.fault_step);
  REQUIRE(bad != nullptr);
  REQUIRE(good != nullptr);
  REQUIRE(bad->fault_planted);
  INFO("clean: " << kernels::to_string(good->err)
                 << " mismatched_slots=" << good->mismatched_slots);
  INFO("fault: " << kernels::to_string(bad->err) << " mismatched_slots=" << bad->mismatched_slots);
  CHECK(good->pass);
  CHECK(good->mismatched_slots == 0);
  CHECK_FALSE(bad->pass);
  CHECK_FALSE(r.summary.pass);
  CHECK(r.summary.first_failed_step == r.fault_step);
  CHECK(bad->error_score() > 0.1);
  CHECK(bad->error_score() > 20 * good->err.max_abs);
  CHECK(bad->mismatched_slots > 0);
  return r;
}

/// Two runs of one scenario checked the same steps with bit-identical kernel outputs and the same
/// verdicts.
inline void require_same_records(const ValidationRunResult& a_run,
                                 const ValidationRunResult& b_run) {
  REQUIRE(a_run.records.size() == b_run.records.size());
  CHECK(a_run.fault_step == b_run.fault_step);
  for (std::size_t i = 0; i < a_run.records.size(); ++i) {
    const ValidationRecord& a = a_run.records[i];
    const ValidationRecord& b = b_run.records[i];
    INFO("step " << a.step);
    CHECK(a.step == b.step);
    CHECK(a.err.max_abs == b.err.max_abs);  // the same kernel output, bit for bit
    CHECK(a.err.mean_abs == b.err.mean_abs);
    CHECK(a.err.rel_fro == b.err.rel_fro);
    CHECK(a.err.num_nonfinite == b.err.num_nonfinite);
    CHECK(a.err.num_violations == b.err.num_violations);
    CHECK(a.mismatched_slots == b.mismatched_slots);
    CHECK(a.pass == b.pass);
  }
}

}  // namespace kvsim::validate::test
