// The validation harness: the content model, a clean run of the CI scenario, and planted KV-cache
// faults that must each fail validation with a large error while the clean run passes.

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/backend.h"
#include "sim/common/errors.h"
#include "sim/config/scenario.h"
#include "sim/engine/latency_model.h"
#include "tests/common/util.h"
#include "validate/kv_content.h"
#include "validate/validate_run.h"
#include "validate_test_util.h"

using namespace kvsim;
using namespace kvsim::validate;
namespace fs = std::filesystem;

namespace {

using kvsim::test::slurp;
using kvsim::validate::test::cpu_options;
using kvsim::validate::test::kSmall;
using kvsim::validate::test::out_dir;
using kvsim::validate::test::record_at;

/// The clean run of validate-small, sampled at every step (computed once).
const ValidationRunResult& clean_run() {
  static const ValidationRunResult r = [] {
    const Scenario s = load_scenario(kSmall, {});
    return run_validation(s, out_dir("clean"), cpu_options());
  }();
  return r;
}

/// Runs validate-small with `kind` planted from step `from` on, checking only step 0 and the
/// fault's step, and compares the fault's step with the same step of a clean run.
void expect_fault_fails(FaultInjection::Kind kind, std::int64_t from,
                        const std::string& profile = "vllm-0.7.2",
                        std::vector<std::string> sets = {}) {
  sets.push_back("engine.profile=" + profile);
  const Scenario s = load_scenario(kSmall, sets);
  ValidationOptions o = cpu_options(1 << 30);
  o.fault = {kind, from};
  const ValidationRunResult r =
      validate::test::expect_fault_fails(s, o, profile + "-" + fault_kind_name(kind));
  const nlohmann::json j = nlohmann::json::parse(slurp(r.json));
  CHECK(j["pass"] == false);
  CHECK(j["fault"]["kind"] == fault_kind_name(kind));
}

}  // namespace

TEST_CASE("equal prefixes get equal K/V and any other token or position changes them",
          "[validate]") {
  const KvContentModel m(3, 4, 2, 64, kernels::DType::kBF16);
  const std::vector<Token> a = {5, 6, 7, 8}, b = {5, 6, 7, 9}, c = {1, 6, 7, 8};
  std::vector<std::uint64_t> ka, kb, kc;
  m.prefix_keys(a, 4, ka);
  m.prefix_keys(b, 4, kb);
  m.prefix_keys(c, 4, kc);
  for (int p = 0; p < 3; ++p) CHECK(ka[p] == kb[p]);
  CHECK(ka[3] != kb[3]);
  for (int p = 0; p < 4; ++p) CHECK(ka[p] != kc[p]);  // a different first token changes every key
  std::vector<std::uint64_t> pieces;                  // extending in steps gives the same keys
  m.extend_prefix_keys(a, 1, pieces);
  m.extend_prefix_keys(a, 3, pieces);
  m.extend_prefix_keys(a, 2, pieces);  // no change
  m.extend_prefix_keys(a, 4, pieces);
  CHECK(pieces == ka);
  const std::vector<Token> same = {7, 7, 7};
  std::vector<std::uint64_t> ks;
  m.prefix_keys(same, 3, ks);
  CHECK(ks[0] != ks[1]);  // the position is part of the key

  std::vector<float> k1(128), k2(128), v1(128);
  m.values(ka[2], KvPart::kKey, k1.data());
  m.values(kb[2], KvPart::kKey, k2.data());
  m.values(ka[2], KvPart::kValue, v1.data());
  CHECK(k1 == k2);
  CHECK(k1 != v1);
  double sum = 0, sq = 0;
  int n = 0;
  for (std::uint64_t key = 1; key < 200; ++key) {
    m.values(key * 7919, KvPart::kValue, v1.data());
    for (float x : v1) {
      CHECK(kernels::round_to_dtype(x, kernels::DType::kBF16) == x);
      sum += x, sq += double{x} * x, ++n;
    }
  }
  CHECK(std::fabs(sum / n) < 0.02);
  CHECK(std::sqrt(sq / n) == Approx(1.0).epsilon(0.02));
}

TEST_CASE("the unmodified validate-small run passes at every step with small errors",
          "[validate]") {
  const ValidationRunResult& r = clean_run();
  CHECK(r.summary.pass);
  CHECK(r.summary.steps_sampled == r.summary.steps_total);
  CHECK(r.summary.steps_total > 100);
  CHECK(r.summary.max_abs_err < 0.01);
  CHECK(r.summary.max_rel_err < 0.005);
  CHECK(r.summary.nonfinite == 0);
  CHECK(r.summary.mismatched_slots == 0);
  // The scenario exercises what validation is for: prefix hits, chunked prefill, preemptions,
  // evictions, and batches mixing prefill chunks with decodes.
  const nlohmann::json sum = nlohmann::json::parse(r.run.summary_json);
  CHECK(sum["prefix_cache_hits"].get<std::int64_t>() > 0);
  CHECK(sum["num_preemptions"].get<std::int64_t>() > 0);
  CHECK(sum["num_evictions"].get<std::int64_t>() > 0);
  bool mixed = false;
  for (const ValidationRecord& rec : r.records) {
    mixed = mixed || (rec.prefill_tokens > 0 && rec.decode_tokens > 0);
    CHECK(rec.latency_us > 0);
    CHECK(rec.bytes > 0);
  }
  CHECK(mixed);
  // A prompt longer than max_num_batched_tokens (256) is necessarily prefilled in chunks.
  std::istringstream requests(slurp(r.run.folder / "requests.csv"));
  std::string line;
  std::getline(requests, line);
  CHECK(line.rfind("request_id,arrival_s,prompt_tokens,", 0) == 0);
  std::int64_t longest_prompt = 0;
  while (std::getline(requests, line)) {
    std::istringstream row(line);
    std::string id, arrival, prompt;
    std::getline(row, id, ',');
    std::getline(row, arrival, ',');
    std::getline(row, prompt, ',');
    longest_prompt = std::max<std::int64_t>(longest_prompt, std::stoll(prompt));
  }
  CHECK(longest_prompt > 256);
  // Files next to the normal outputs.
  const std::string csv = slurp(r.csv);
  CHECK(csv.rfind(kValidationCsvHeader, 0) == 0);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == r.summary.steps_sampled + 1);
  CHECK(fs::exists(r.run.folder / "summary.json"));
  const nlohmann::json j = nlohmann::json::parse(slurp(r.json));
  CHECK(j["pass"] == true);
  CHECK(j["backend"] == "cpu");
  CHECK(j["dtype"] == "bf16");
  CHECK(j["steps_sampled"] == r.summary.steps_sampled);
}

TEST_CASE("a planted wrong prefix hit fails validation", "[validate]") {
  expect_fault_fails(FaultInjection::Kind::kWrongPrefixHit, 10);
}

TEST_CASE("a block handed to a second request while in use fails validation", "[validate]") {
  expect_fault_fails(FaultInjection::Kind::kBlockSharedInUse, 10);
}

TEST_CASE("an off-by-one slot in the write mapping fails validation", "[validate]") {
  expect_fault_fails(FaultInjection::Kind::kSlotOffByOne, 10);
}

TEST_CASE("a corrupted block table fails validation", "[validate]") {
  expect_fault_fails(FaultInjection::Kind::kCorruptBlockTable, 10);
}

TEST_CASE("a permuted block table leaves attention unchanged but fails the content audit",
          "[validate]") {
  // Attention over a decode row sums over its keys, so swapping two blocks of a request's table
  // gives the same output; the audit of which K/V each context slot holds is what catches it.
  const Scenario s = load_scenario(kSmall, {});
  ValidationOptions o = cpu_options(1 << 30);
  o.fault = {FaultInjection::Kind::kPermutedBlockTable, 10};
  const ValidationRunResult r = run_validation(s, out_dir("permuted"), o);
  REQUIRE(r.fault_step >= 10);
  const ValidationRecord* bad = record_at(r, r.fault_step);
  REQUIRE(bad != nullptr);
  INFO("fault: " << kernels::to_string(bad->err) << " mismatched_slots=" << bad->mismatched_slots);
  CHECK(bad->mismatched_slots == 32);
  CHECK_FALSE(bad->pass);
  CHECK_FALSE(r.summary.pass);
}

TEST_CASE("sampling by probability is seeded and checks a subset of steps", "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  ValidationOptions o = cpu_options(0);
  o.sample_prob = 0.25;
  const ValidationRunResult a = run_validation(s, out_dir("prob-a"), o);
  const ValidationRunResult b = run_validation(s, out_dir("prob-b"), o);
  CHECK(a.summary.pass);
  CHECK(a.summary.steps_sampled > 0);
  CHECK(a.summary.steps_sampled < a.summary.steps_total / 2);
  REQUIRE(a.records.size() == b.records.size());
  for (std::size_t i = 0; i < a.records.size(); ++i) {
    CHECK(a.records[i].step == b.records[i].step);
    CHECK(a.records[i].err.max_abs == b.records[i].err.max_abs);
  }
  // The simulation itself is the one `kvsim run` does: identical run-folder outputs.
  const RunResult plain = run_scenario(s, out_dir("plain"));
  CHECK(slurp(a.run.folder / "steps.csv") == slurp(plain.folder / "steps.csv"));
  CHECK(slurp(a.run.folder / "requests.csv") == slurp(plain.folder / "requests.csv"));
  CHECK(a.run.summary_json == plain.summary_json);
}

TEST_CASE("fp16 and fp32 pools pass with their own tolerances", "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  for (kernels::DType d : {kernels::DType::kF16, kernels::DType::kF32}) {
    ValidationOptions o = cpu_options(7);
    o.dtype = d;
    const ValidationRunResult r =
        run_validation(s, out_dir(std::string("dtype-") + kernels::dtype_name(d)), o);
    INFO(kernels::dtype_name(d) << ": max abs " << r.summary.max_abs_err << " rel "
                                << r.summary.max_rel_err);
    CHECK(r.summary.pass);
    CHECK(r.summary.steps_sampled > 10);
  }
}

TEST_CASE("exported calibration rows are read by kvsim calibrate's reader", "[validate]") {
  const Scenario s = load_scenario(kSmall, {});
  const fs::path dir = out_dir("calibration");
  const fs::path cal = dir.string() + ".csv";
  const ValidationRunResult r = run_validation(s, dir, cpu_options(5), {}, cal);
  std::vector<BatchFeatures> batches;
  std::vector<double> times;
  read_measurements_csv(cal.string(), batches, times);
  REQUIRE(static_cast<std::int64_t>(batches.size()) == r.summary.steps_sampled);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    CHECK(batches[i].num_seqs == r.records[i].num_seqs);
    CHECK(batches[i].sum_context_tokens == r.records[i].sum_context_tokens);
    CHECK(times[i] == Approx(r.records[i].latency_us * 2).epsilon(1e-3));  // 2 layers
  }
  const LatencyFit fit = fit_latency(batches, times);
  CHECK(fit.rows == r.summary.steps_sampled);
}

TEST_CASE("validation refuses cache_only scenarios and a cuda backend without a device",
          "[validate]") {
  const Scenario co = load_scenario(kSmall, {"engine.mode=cache_only"});
  CHECK_THROWS_AS(ValidationHarness(co, cpu_options()), ConfigError);
  // A cluster's replicas each have their own pool: one harness cannot check them.
  const Scenario cl = load_scenario(kSmall, {"cluster.replicas=2"});
  try {
    ValidationHarness h(cl, cpu_options());
    FAIL("no ConfigError");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("cluster.replicas is 2") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
  if (!kernels::cuda_device_available()) {
    const Scenario s = load_scenario(kSmall, {});
    ValidationOptions o = cpu_options();
    o.backend = kernels::BackendKind::kCuda;
    CHECK_THROWS_AS(ValidationHarness(s, o), ConfigError);
  }
  const Scenario fp8 = load_scenario(kSmall, {"validate.dtype=auto", "cache.cache_dtype=fp8"});
  CHECK_THROWS_AS(options_from_scenario(fp8), ConfigError);
  const Scenario autod = load_scenario(kSmall, {"validate.dtype=auto"});
  CHECK(options_from_scenario(autod).dtype == kernels::DType::kBF16);
}

TEST_CASE("0.8.5's, 0.20's (async) and V0's block tables validate clean, planted faults fail",
          "[validate]") {
  // V0 without chunked prefill needs a batch budget of max_model_len (vLLM's _verify_args).
  // vllm-0.20 runs its default async scheduling: each step is scheduled before the outputs of
  // the step in flight are appended, so its contexts reach past the requests' tokens.
  const std::vector<std::pair<std::string, std::vector<std::string>>> profiles = {
      {"vllm-0.8.5", {}},
      {"vllm-0.20", {}},
      {"vllm-0.7.2-v0", {"scheduler.max_num_batched_tokens=2048"}}};
  for (const auto& [profile, sets] : profiles) {
    INFO(profile);
    std::vector<std::string> all = sets;
    all.push_back("engine.profile=" + profile);
    const Scenario s = load_scenario(kSmall, all);
    const ValidationRunResult r = run_validation(s, out_dir("clean-" + profile), cpu_options());
    CHECK(r.summary.pass);
    CHECK(r.summary.steps_sampled == r.summary.steps_total);
    CHECK(r.summary.steps_total > 100);
    CHECK(r.summary.mismatched_slots == 0);
    CHECK(r.summary.max_abs_err < 1e-2);
    expect_fault_fails(FaultInjection::Kind::kCorruptBlockTable, 10, profile, sets);
    expect_fault_fails(FaultInjection::Kind::kSlotOffByOne, 10, profile, sets);
  }
  // V0 schedules a new request's whole prompt (its cached blocks are shared, not skipped), so
  // no request starts with computed tokens to plant a wrong hit on; 0.8.5 does.
  expect_fault_fails(FaultInjection::Kind::kWrongPrefixHit, 10, "vllm-0.8.5");
}
