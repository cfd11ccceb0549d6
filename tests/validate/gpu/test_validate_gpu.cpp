// validate-small with the CUDA backend: every step within tolerance, the timed launch agrees with
// the backend bitwise, the errors stay within the FA3-style bound of the CPU backend's, and a
// planted fault still fails.

#include <catch2/catch.hpp>
#include <filesystem>

#include "kernels/metrics.h"
#include "sim/config/scenario.h"
#include "tests/validate/validate_test_util.h"
#include "validate/validate_run.h"

using namespace kvsim;
using namespace kvsim::validate;
namespace fs = std::filesystem;

namespace {

using kvsim::validate::test::kSmall;
using kvsim::validate::test::options;
using kvsim::validate::test::out_dir;

}  // namespace

TEST_CASE("validate-small passes on the cuda backend within the cpu baseline's error bound",
          "[validate][gpu]") {
  const Scenario s = load_scenario(kSmall, {});
  for (kernels::DType d : {kernels::DType::kBF16, kernels::DType::kF16}) {
    const std::string tag = kernels::dtype_name(d);
    const ValidationRunResult gpu =
        run_validation(s, out_dir("gpu-" + tag), options(kernels::BackendKind::kCuda, d));
    const ValidationRunResult cpu =
        run_validation(s, out_dir("cpu-" + tag), options(kernels::BackendKind::kCpu, d));
    INFO(tag << " on " << gpu.setup.device << ": max abs " << gpu.summary.max_abs_err << " (cpu "
             << cpu.summary.max_abs_err << "), median " << gpu.summary.median_latency_us << " us");
    CHECK(gpu.summary.pass);
    CHECK(gpu.summary.steps_sampled == gpu.summary.steps_total);
    CHECK(gpu.summary.timer_output_mismatch_steps == 0);
    CHECK(gpu.summary.mismatched_slots == 0);
    REQUIRE(gpu.records.size() == cpu.records.size());
    for (std::size_t i = 0; i < gpu.records.size(); ++i) {
      const ValidationRecord& g = gpu.records[i];
      INFO("step " << g.step << ": gpu " << kernels::to_string(g.err) << " cpu "
                   << kernels::to_string(cpu.records[i].err));
      CHECK(g.latency_us > 0);
      CHECK(g.repeats == 20);
      CHECK(kernels::passes_against_baseline(g.err, cpu.records[i].err));
    }
  }
}

TEST_CASE("every planted fault fails validation on the cuda backend as on the cpu one",
          "[validate][gpu]") {
  // The fault's step is checked against the same step of a clean cuda run, in both dtypes: the
  // clean step passes, the faulty one fails by far more than the tolerance, and the run's first
  // failed step is the fault's.
  const Scenario s = load_scenario(kSmall, {});
  for (kernels::DType d : {kernels::DType::kBF16, kernels::DType::kF16}) {
    for (FaultInjection::Kind kind :
         {FaultInjection::Kind::kWrongPrefixHit, FaultInjection::Kind::kBlockSharedInUse,
          FaultInjection::Kind::kSlotOffByOne, FaultInjection::Kind::kCorruptBlockTable}) {
      const std::string name =
          std::string("gpu-fault-") + kernels::dtype_name(d) + "-" + fault_kind_name(kind);
      INFO(name);
      ValidationOptions o = options(kernels::BackendKind::kCuda, d);
      o.sample_every_steps = 1 << 30;
      o.fault = {kind, 10};
      validate::test::expect_fault_fails(s, o, name);
    }
  }
}

TEST_CASE("a V0 run with swaps and copy-on-write passes on the cuda backend, moves applied",
          "[validate][gpu]") {
  // The swaps go through SwapBlocks (host swap pool <-> device pool) and the copies through the
  // CopyBlocks kernel, on the backend and on the timing mirror alike.
  const Scenario s = load_scenario(kSmall, kvsim::validate::test::kV0SwapFork);
  const ValidationRunResult gpu = run_validation(
      s, out_dir("gpu-v0"), options(kernels::BackendKind::kCuda, kernels::DType::kBF16));
  const ValidationRunResult cpu = run_validation(
      s, out_dir("cpu-v0"), options(kernels::BackendKind::kCpu, kernels::DType::kBF16));
  CHECK(gpu.summary.pass);
  CHECK(gpu.summary.steps_sampled == gpu.summary.steps_total);
  CHECK(gpu.summary.timer_output_mismatch_steps == 0);
  CHECK(gpu.summary.mismatched_slots == 0);
  CHECK(gpu.summary.nonfinite == 0);
  REQUIRE(gpu.records.size() == cpu.records.size());
  for (std::size_t i = 0; i < gpu.records.size(); ++i) {
    INFO("step " << gpu.records[i].step);
    CHECK(kernels::passes_against_baseline(gpu.records[i].err, cpu.records[i].err));
  }
  // Faulted: a swapped-in block lands in the wrong GPU block.
  ValidationOptions o = options(kernels::BackendKind::kCuda, kernels::DType::kBF16);
  o.sample_every_steps = 1 << 30;
  o.fault = {FaultInjection::Kind::kWrongSwapIn, 10};
  const ValidationRunResult bad = run_validation(s, out_dir("gpu-v0-fault"), o);
  REQUIRE(bad.fault_step >= 10);
  CHECK_FALSE(bad.summary.pass);
  CHECK(bad.summary.first_failed_step == bad.fault_step);
}
