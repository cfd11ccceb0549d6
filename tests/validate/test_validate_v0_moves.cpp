// vLLM V0's block moves in validation: a run with swaps (preemption by swap) and copy-on-write
// copies (parallel sampling by fork) validates clean at every step with the moves applied to the
// pool and its swap pool, fails when they are left out, catches a wrongly mapped swap-in or copy,
// and gives bit for bit the same errors with lazy writes as with writing every step.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "validate/validate_run.h"
#include "validate_test_util.h"

using namespace kvsim;
using namespace kvsim::validate;

namespace {

using kvsim::validate::test::cpu_options;
using kvsim::validate::test::kSmall;
using kvsim::validate::test::out_dir;
using kvsim::validate::test::record_at;
using kvsim::validate::test::require_same_records;

/// validate-small under vLLM V0 with swaps and forks (validate_test_util.h).
Scenario v0_swap_fork() { return load_scenario(kSmall, kvsim::validate::test::kV0SwapFork); }

/// The clean run, every step checked (computed once).
const ValidationRunResult& clean_run() {
  static const ValidationRunResult r =
      run_validation(v0_swap_fork(), out_dir("v0-moves-clean"), cpu_options(1));
  return r;
}

}  // namespace

TEST_CASE("a V0 run with swaps and copy-on-write validates clean at every step, moves applied",
          "[validate]") {
  const ValidationRunResult& r = clean_run();
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(r.json));
  INFO(j["block_moves"].dump());
  CHECK(r.summary.pass);
  CHECK(r.summary.steps_sampled == r.summary.steps_total);
  CHECK(r.summary.steps_total > 300);
  CHECK(r.summary.mismatched_slots == 0);
  CHECK(r.summary.nonfinite == 0);
  CHECK(r.summary.max_abs_err < 1e-2);
  // The run really moves blocks, each kind, and checked steps read blocks as the moves left them.
  const nlohmann::json& mv = j["block_moves"];
  CHECK(mv["num_cpu_blocks"] == 655);  // 0.01 GiB over 16 KiB blocks (2 layers)
  CHECK(mv["swapped_in_blocks"].get<std::int64_t>() > 100);
  CHECK(mv["swapped_out_blocks"].get<std::int64_t>() > 100);
  CHECK(mv["copied_blocks"].get<std::int64_t>() > 20);
  CHECK(mv["steps_with_moves"].get<std::int64_t>() > 20);
  CHECK(mv["checked_steps_with_moves"] == mv["steps_with_moves"]);
  CHECK(mv["moved_slots_read"].get<std::int64_t>() > 10000);
  // The simulator's own counts agree with the moves the harness applied.
  const nlohmann::json sum = nlohmann::json::parse(r.run.summary_json);
  CHECK(sum["num_swapped_in_blocks"] == mv["swapped_in_blocks"]);
  CHECK(sum["num_swapped_out_blocks"] == mv["swapped_out_blocks"]);
  CHECK(sum["num_preemptions_swap"].get<std::int64_t>() > 0);
}

TEST_CASE("a V0 run validated with its block moves left out fails", "[validate]") {
  // What validation looked like before the moves were modelled: the swapped-in and copied blocks
  // hold stale or no K/V, which both the outputs and the content audit see.
  ValidationOptions o = cpu_options(1);
  o.ignore_block_moves = true;
  const ValidationRunResult r = run_validation(v0_swap_fork(), out_dir("v0-moves-ignored"), o);
  CHECK_FALSE(r.summary.pass);
  CHECK(r.summary.steps_failed > 20);
  CHECK(r.summary.mismatched_slots > 0);
  // The first failure is at or after the first step with moves, where the clean run passes.
  const ValidationRecord* good = record_at(clean_run(), r.summary.first_failed_step);
  REQUIRE(good != nullptr);
  CHECK(good->pass);
}

TEST_CASE("a wrongly mapped swap-in or copy-on-write copy fails validation", "[validate]") {
  for (const auto kind :
       {FaultInjection::Kind::kWrongSwapIn, FaultInjection::Kind::kWrongCopyDst}) {
    INFO("fault " << fault_kind_name(kind));
    ValidationOptions o = cpu_options(1 << 30);  // step 0 and the fault's step
    o.fault = {kind, 10};
    const ValidationRunResult r =
        run_validation(v0_swap_fork(), out_dir(std::string("v0-") + fault_kind_name(kind)), o);
    REQUIRE(r.fault_step >= 10);
    const ValidationRecord* bad = record_at(r, r.fault_step);
    const ValidationRecord* good = record_at(clean_run(), r.fault_step);
    REQUIRE(bad != nullptr);
    REQUIRE(good != nullptr);
    INFO("clean: " << kernels::to_string(good->err));
    INFO("fault: " << kernels::to_string(bad->err)
                   << " mismatched_slots=" << bad->mismatched_slots);
    CHECK(bad->fault_planted);
    CHECK(good->pass);
    CHECK_FALSE(bad->pass);
    CHECK_FALSE(r.summary.pass);
    CHECK(r.summary.first_failed_step == r.fault_step);
    // Well above the bf16 tolerance (atol 1.5e-2) and 20x the clean error of the same step. A
    // copy-on-write copy moves a partial block (here 14 slots of a long context), which weighs
    // less in a softmax than a swapped-in block.
    CHECK(bad->error_score() > (kind == FaultInjection::Kind::kWrongSwapIn ? 0.1 : 0.04));
    CHECK(bad->error_score() > 20 * good->err.max_abs);
    CHECK(bad->mismatched_slots > 0);
    const nlohmann::json j = nlohmann::json::parse(std::ifstream(r.json));
    CHECK(j["fault"]["kind"] == fault_kind_name(kind));
  }
}

TEST_CASE("with block moves, lazy writes check steps exactly as writing every step does",
          "[validate]") {
  const Scenario s = v0_swap_fork();
  for (const auto kind : {FaultInjection::Kind::kNone, FaultInjection::Kind::kWrongSwapIn,
                          FaultInjection::Kind::kWrongCopyDst}) {
    INFO("fault " << fault_kind_name(kind));
    // Every 7th step: blocks move between checked steps while the lazy pool is behind.
    ValidationOptions o = cpu_options(7);
    o.fault = {kind, 10};
    const ValidationRunResult lazy =
        run_validation(s, out_dir(std::string("v0-lazy-") + fault_kind_name(kind)), o);
    o.write_every_step = true;
    const ValidationRunResult eager =
        run_validation(s, out_dir(std::string("v0-eager-") + fault_kind_name(kind)), o);
    CHECK(lazy.summary.pass == (kind == FaultInjection::Kind::kNone));
    require_same_records(lazy, eager);
  }
}

TEST_CASE("a V0 swap pool whose shadow passes the memory limit is refused up front", "[validate]") {
  // vLLM's default swap_space (4 GiB) over this tiny model's 16 KiB blocks: 262,144 CPU blocks,
  // whose 8-byte shadow per slot (32 MiB) the CPU backend always holds.
  const Scenario s = load_scenario(
      kSmall, {"engine.profile=vllm-0.7.2-v0", "scheduler.max_num_batched_tokens=2048"});
  ValidationOptions o = cpu_options(1);
  o.max_pool_bytes = std::int64_t{16} << 20;
  try {
    ValidationHarness h(s, o);
    FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("262144 CPU blocks") != std::string::npos);
    CHECK(msg.find("lower cache.swap_space") != std::string::npos);
  }
  o.max_pool_bytes = std::int64_t{64} << 20;
  const ValidationHarness fits(s, o);
  CHECK(fits.setup().num_cpu_blocks == 262144);
  CHECK(fits.setup().swap_pool_bytes == 262144 * fits.setup().block_bytes);
}
