// The lazily written pool: checking a step after writing K/V lazily gives bit for bit what
// writing every step gives (clean and with each planted fault), the pool holds only the blocks
// checked steps read, and the memory limit applies to what is held.

#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "validate/sample_plan.h"
#include "validate/validate_run.h"
#include "validate_test_util.h"

using namespace kvsim;
using namespace kvsim::validate;
namespace fs = std::filesystem;

namespace {

using kvsim::validate::test::cpu_options;
using kvsim::validate::test::kSmall;
using kvsim::validate::test::out_dir;
using kvsim::validate::test::require_same_records;

std::vector<StepTraits> survey_of(const Scenario& s) {
  const ValidationHarness h(s, cpu_options(1));
  return survey_run(s, make_step_time(s), h.cost_model(), s.cache.sizing.block_size);
}

}  // namespace

TEST_CASE("lazy writes check every step exactly as writing every step does", "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  ValidationOptions o = cpu_options(1);
  const ValidationRunResult lazy = run_validation(s, out_dir("lazy-clean"), o);
  o.write_every_step = true;
  const ValidationRunResult eager = run_validation(s, out_dir("eager-clean"), o);
  CHECK(lazy.summary.pass);
  require_same_records(lazy, eager);
  // Eager: every token of the run goes into the pool; lazy: only what checked steps read, once
  // per change (every step is checked here, so about as much).
  CHECK(eager.summary.tokens_written == lazy.summary.tokens_written);
}

TEST_CASE("lazy writes catch each planted fault exactly as writing every step does", "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  for (const auto kind :
       {FaultInjection::Kind::kWrongPrefixHit, FaultInjection::Kind::kBlockSharedInUse,
        FaultInjection::Kind::kSlotOffByOne, FaultInjection::Kind::kCorruptBlockTable,
        FaultInjection::Kind::kPermutedBlockTable}) {
    INFO("fault " << fault_kind_name(kind));
    // Only step 0 and the fault's step are checked: the lazy pool writes little.
    ValidationOptions o = cpu_options(1 << 30);
    o.fault = {kind, 10};
    const ValidationRunResult lazy =
        run_validation(s, out_dir(std::string("lazy-") + fault_kind_name(kind)), o);
    o.write_every_step = true;
    const ValidationRunResult eager =
        run_validation(s, out_dir(std::string("eager-") + fault_kind_name(kind)), o);
    REQUIRE(lazy.fault_step >= 10);
    CHECK_FALSE(lazy.summary.pass);
    require_same_records(lazy, eager);
  }
}

TEST_CASE("the pool holds only the blocks checked steps read", "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  const auto steps = survey_of(s);
  // Only step 0 is checked: its blocks are all the pool ever holds (nothing is cached before
  // step 0, so no block is read twice).
  ValidationHarness probe(s, cpu_options(1));
  const std::int64_t block_bytes = probe.setup().block_bytes;
  const std::int64_t bookkeeping = probe.setup().bookkeeping_bytes;
  CHECK(block_bytes == 2 * 16 * 2 * 64 * 2);
  CHECK(bookkeeping == 72 * (16 * 8 + 25));
  const ValidationRunResult first = run_validation(s, out_dir("held-first"), cpu_options(1 << 30));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(first.json));
  CHECK(j["memory"]["peak_bytes"] == bookkeeping + steps[0].read_blocks * block_bytes);
  CHECK(j["memory"]["clears"] == 0);
  CHECK(steps[0].read_blocks < 72);
  CHECK(j["pool_bytes"] == 72 * block_bytes);
  // Every step checked: the pool ends up holding every block, no more.
  const ValidationRunResult all = run_validation(s, out_dir("held-all"), cpu_options(1));
  CHECK(all.summary.pass);
  const nlohmann::json ja = nlohmann::json::parse(std::ifstream(all.json));
  CHECK(ja["memory"]["peak_bytes"].get<std::int64_t>() <= bookkeeping + 72 * block_bytes);
  CHECK(ja["memory"]["peak_bytes"].get<std::int64_t>() > bookkeeping + 60 * block_bytes);
}

TEST_CASE(
    "over the memory limit the held blocks are dropped, a step that alone passes it is "
    "refused before anything runs",
    "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  const auto steps = survey_of(s);
  std::int32_t most = 0;
  for (const StepTraits& t : steps) most = std::max(most, t.read_blocks);
  REQUIRE(most < 72);  // no step reads the whole 72-block pool: holding every block needs more
  ValidationOptions o = cpu_options(1);
  ValidationHarness probe(s, o);
  const std::int64_t block_bytes = probe.setup().block_bytes;
  const std::int64_t bookkeeping = probe.setup().bookkeeping_bytes;

  // Room for the largest step and no more: blocks are dropped and rewritten, the verdicts stay.
  // (Every 4th step: far enough apart that two checked steps' blocks do not fit together twice
  // in this run; checking every step, the usual release of stale blocks suffices.)
  o.max_pool_bytes = bookkeeping + most * block_bytes;
  ValidationOptions every4 = cpu_options(4);
  every4.max_pool_bytes = o.max_pool_bytes;
  const ValidationRunResult tight = run_validation(s, out_dir("limit-tight"), every4);
  const ValidationRunResult roomy = run_validation(s, out_dir("limit-roomy"), cpu_options(4));
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(tight.json));
  CHECK(j["memory"]["clears"].get<std::int64_t>() == 2);
  CHECK(j["memory"]["peak_bytes"].get<std::int64_t>() <= o.max_pool_bytes);
  const nlohmann::json jr = nlohmann::json::parse(std::ifstream(roomy.json));
  CHECK(jr["memory"]["clears"] == 0);
  require_same_records(tight, roomy);
  const ValidationRunResult tight_all = run_validation(s, out_dir("limit-tight-all"), o);
  CHECK(nlohmann::json::parse(std::ifstream(tight_all.json))["memory"]["peak_bytes"]
            .get<std::int64_t>() <= o.max_pool_bytes);
  require_same_records(tight_all, run_validation(s, out_dir("limit-roomy-all"), cpu_options(1)));

  // One block less: the largest step cannot be checked; refused from the plan, no folder.
  o.max_pool_bytes -= block_bytes;
  const fs::path dir = out_dir("limit-refused");
  try {
    run_validation(s, dir, o);
    FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(fmt::format("reads {} blocks of the validation KV pool", most)) !=
          std::string::npos);
    CHECK(msg.find("GiB limit") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  CHECK_FALSE(fs::exists(dir / "validate-small"));

  // The shadow and per-block state alone over the limit: refused at once, with the pool size
  // that fits.
  const Scenario huge = load_scenario(kSmall, {"cache.num_gpu_blocks_override=100000"});
  ValidationOptions tiny = cpu_options(1);
  tiny.max_pool_bytes = 1 << 20;
  try {
    ValidationHarness h(huge, tiny);
    FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("GiB limit") != std::string::npos);
    CHECK(msg.find(fmt::format("--set cache.num_gpu_blocks_override={}",
                               (1 << 20) / (16 * 8 + 25))) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  // The default limit: a pool of 100,000 blocks costs its bookkeeping only (15 MB), not 820 MB.
  CHECK_NOTHROW(ValidationHarness(huge, cpu_options(1)));
}
