// Which steps `kvsim validate` checks: the survey pass, the bounded default plan (count, the
// steps with preemptions and prefix hits among them, the cost cap), its determinism, and the
// progress line (never written where stderr is not a terminal).

#include <fmt/format.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "sim/config/scenario.h"
#include "validate/progress.h"
#include "validate/sample_plan.h"
#include "validate/validate_run.h"
#include "validate_test_util.h"

using namespace kvsim;
using namespace kvsim::validate;

namespace {

using kvsim::validate::test::kSmall;
using kvsim::validate::test::out_dir;

/// `n` steps costing 1 ms each to check, with `flags` set on the given steps.
std::vector<StepTraits> synthetic_steps(std::int64_t n, const std::set<std::int64_t>& preempting,
                                        const std::set<std::int64_t>& hitting) {
  std::vector<StepTraits> steps(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < n; ++s) {
    StepTraits& t = steps[static_cast<std::size_t>(s)];
    t.check_s = 1e-3f;
    t.run_s = 1e-6f;
    t.read_blocks = 1;
    if (preempting.count(s)) t.flags |= StepTraits::kPreemption;
    if (hitting.count(s)) t.flags |= StepTraits::kPrefixHit;
  }
  return steps;
}

std::vector<std::int64_t> steps_with(const SamplePlan& plan, std::uint8_t reason) {
  std::vector<std::int64_t> out;
  for (std::int64_t s = 0; s < plan.num_steps(); ++s)
    if (plan.reason(s) & reason) out.push_back(s);
  return out;
}

/// validate-small with no sampling in its `validate:` section: the bounded default applies.
Scenario small_unsampled() { return load_scenario(kSmall, {"validate.sample_every_steps=0"}); }

std::vector<StepTraits> survey_of(const Scenario& s) {
  ValidationOptions o;
  o.repeats = 1;
  const ValidationHarness h(s, o);
  return survey_run(s, make_step_time(s), h.cost_model(), s.cache.sizing.block_size);
}

}  // namespace

TEST_CASE("the bounded plan takes count steps: preemptions and prefix hits first, then spread",
          "[validate]") {
  // 1000 steps; 3 with preemptions (all taken: fewer than count/4), 143 with prefix hits (every
  // 7th: count/4 = 50 of them, evenly spread), the rest spread evenly over the run.
  std::set<std::int64_t> hitting;
  for (std::int64_t s = 0; s < 1000; s += 7) hitting.insert(s);
  const auto steps = synthetic_steps(1000, {5, 500, 990}, hitting);
  SamplingRule rule;
  rule.count = 200;
  const SamplePlan plan = plan_samples(steps, rule);
  CHECK(plan.mode == SamplePlan::Mode::kBounded);
  CHECK(plan.num_sampled == 200);
  CHECK(plan.preemption == 3);
  CHECK(plan.prefix_hit == 50);
  CHECK(plan.spread == 147);
  CHECK(plan.swapped == 0);
  CHECK(steps_with(plan, SampleReason::kPreemption) == std::vector<std::int64_t>{5, 500, 990});
  // The j-th prefix-hit pick is the middle of the j-th of 50 windows over the 143 hit steps.
  const std::vector<std::int64_t> hits(hitting.begin(), hitting.end());
  std::vector<std::int64_t> expect;
  for (std::int64_t j = 0; j < 50; ++j) {
    const std::int64_t lo = j * 143 / 50, hi = (j + 1) * 143 / 50;
    expect.push_back(hits[static_cast<std::size_t>(lo + (hi - lo) / 2)]);
  }
  CHECK(steps_with(plan, SampleReason::kPrefixHit) == expect);
  // Spread picks: the middle of each of 147 windows over the 947 steps not picked before.
  std::vector<std::int64_t> rest;
  for (std::int64_t s = 0; s < 1000; ++s)
    if (!(plan.reason(s) & (SampleReason::kPreemption | SampleReason::kPrefixHit)))
      rest.push_back(s);
  REQUIRE(rest.size() == 947);
  std::vector<std::int64_t> expect_spread;
  for (std::int64_t j = 0; j < 147; ++j) {
    const std::int64_t lo = j * 947 / 147, hi = (j + 1) * 947 / 147;
    expect_spread.push_back(rest[static_cast<std::size_t>(lo + (hi - lo) / 2)]);
  }
  CHECK(steps_with(plan, SampleReason::kSpread) == expect_spread);
  for (std::int64_t s = 0; s < 1000; ++s) {
    const std::uint8_t r = plan.reason(s);
    CHECK((r == 0 || r == SampleReason::kSpread || r == SampleReason::kPreemption ||
           r == SampleReason::kPrefixHit));  // one reason per pick
  }
  CHECK(plan.check_s == Approx(200 * 1e-3).epsilon(1e-4));
  CHECK(plan.description ==
        "validating 200 of 1,000 steps: 147 evenly spread + 3 with preemptions + 50 with prefix "
        "hits; --sample-every N or --sample-prob P to change");
  // Deterministic: the same survey gives the same plan.
  CHECK(plan_samples(steps, rule).reasons == plan.reasons);
}

TEST_CASE(
    "the bounded plan moves a pick over its share of the budget to a lighter neighbour, and "
    "takes fewer steps when their checks would pass the budget",
    "[validate]") {
  SamplingRule rule;
  rule.count = 10;
  rule.budget_s = 1.0;  // cap 0.1 s per pick
  // Heavy steps at and around two windows' middles: the nearest light step is taken instead.
  auto mixed = synthetic_steps(100, {}, {});
  for (const int s : {5, 14, 15, 16}) mixed[static_cast<std::size_t>(s)].check_s = 10.0f;
  const SamplePlan moved = plan_samples(mixed, rule);
  CHECK(moved.num_sampled == 10);
  CHECK(steps_with(moved, SampleReason::kSpread) ==
        std::vector<std::int64_t>{4, 13, 25, 35, 45, 55, 65, 75, 85, 95});
  CHECK(moved.swapped == 2);
  CHECK(moved.description ==
        "validating 10 of 100 steps: 10 evenly spread + 0 with preemptions + 0 with prefix hits "
        "(2 moved to a lighter step nearby: over 0.1 s each); --sample-every N or --sample-prob P "
        "to change");

  // Steps 40..59 all heavy: two windows have no light step, their picks would cost 20 s, so the
  // plan takes 8 steps in wider windows, whose light steps fit the budget.
  auto block = synthetic_steps(100, {}, {});
  for (std::int64_t s = 40; s < 60; ++s) block[static_cast<std::size_t>(s)].check_s = 10.0f;
  const SamplePlan fewer = plan_samples(block, rule);
  CHECK(fewer.num_sampled == 8);
  CHECK(steps_with(fewer, SampleReason::kSpread) ==
        std::vector<std::int64_t>{6, 18, 31, 39, 60, 68, 81, 93});
  CHECK(fewer.check_s <= rule.budget_s);
  CHECK(fewer.description.find("(not 10: their checks would take over 1 s of one core)") !=
        std::string::npos);

  // Everything heavy: no fewer than 8 steps all the same.
  auto heavy = synthetic_steps(100, {}, {});
  for (StepTraits& t : heavy) t.check_s = 10.0f;
  CHECK(plan_samples(heavy, rule).num_sampled == 8);
  // A run of fewer steps than the count, too heavy to check whole: a bounded plan of it.
  CHECK(plan_samples(synthetic_steps(9, {}, {}), rule).num_sampled == 9);
  rule.budget_s = 1e-3;
  CHECK(plan_samples(synthetic_steps(9, {}, {}), rule).num_sampled == 8);
}

TEST_CASE("a run with no more steps than the bounded count is checked whole, every and prob rules",
          "[validate]") {
  const auto steps = synthetic_steps(150, {3}, {4});
  SamplingRule rule;
  const SamplePlan all = plan_samples(steps, rule);
  CHECK(all.num_sampled == 150);
  CHECK(all.description == "validating all 150 steps (no more than the 200 checked by default)");
  rule.every_steps = 7;
  const SamplePlan every = plan_samples(steps, rule);
  CHECK(every.mode == SamplePlan::Mode::kEvery);
  CHECK(every.num_sampled == 22);  // 0, 7, ..., 147
  CHECK(every.reason(147) == SampleReason::kEvery);
  CHECK(every.reason(146) == 0);
  rule.every_steps = 0;
  rule.prob = 0.25;
  rule.seed = 11;
  const SamplePlan prob = plan_samples(steps, rule);
  CHECK(prob.mode == SamplePlan::Mode::kProb);
  std::int64_t drawn = 0;
  for (std::int64_t s = 0; s < 150; ++s) {
    CHECK((prob.reason(s) != 0) == drawn_with_prob(11, s, 0.25));
    drawn += prob.reason(s) != 0;
  }
  CHECK(drawn == prob.num_sampled);
  CHECK(drawn > 15);
  CHECK(drawn < 60);
  CHECK(sample_reason_names(SampleReason::kSpread | SampleReason::kFault) == "spread+fault");
  CHECK(group_thousands(373112) == "373,112");
  CHECK(group_thousands(999) == "999");
}

TEST_CASE("the survey sees the run's steps, preemptions and prefix hits", "[validate]") {
  const Scenario s = small_unsampled();
  const auto steps = survey_of(s);
  const RunResult run = run_scenario(s, out_dir("survey-plain"));
  CHECK(static_cast<std::int64_t>(steps.size()) == run.num_steps);
  std::int64_t preempting = 0, hitting = 0;
  for (const StepTraits& t : steps) {
    preempting += (t.flags & StepTraits::kPreemption) ? 1 : 0;
    hitting += (t.flags & StepTraits::kPrefixHit) ? 1 : 0;
    CHECK(t.check_s > 0);
    CHECK(t.read_blocks > 0);
  }
  const nlohmann::json sum = nlohmann::json::parse(run.summary_json);
  CHECK(preempting > 0);
  CHECK(preempting <= sum["num_preemptions"].get<std::int64_t>());
  CHECK(hitting > 0);
}

TEST_CASE(
    "validate-small without sampling checks a bounded plan with its preemption and prefix-hit "
    "steps, the same one every time",
    "[validate]") {
  const Scenario s = small_unsampled();
  const ValidationOptions o = options_from_scenario(s);
  REQUIRE(o.sample_every_steps == 0);
  REQUIRE(o.sample_prob == 0);
  ValidationOptions small = o;
  small.sample_steps = 40;
  small.repeats = 1;
  std::vector<std::string> announced;
  small.announce = [&](const std::string& line) { announced.push_back(line); };
  const ValidationRunResult a = run_validation(s, out_dir("bounded-a"), small);
  const ValidationRunResult b = run_validation(s, out_dir("bounded-b"), small);
  CHECK(a.summary.pass);
  CHECK(a.summary.steps_sampled == 40);

  // Every step with a preemption is checked (4 or so, fewer than 40 / 4), and 10 of the
  // prefix-hit steps, evenly spread over them.
  const auto steps = survey_of(s);
  std::vector<std::int64_t> preempting, hitting;
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(steps.size()); ++i) {
    if (steps[static_cast<std::size_t>(i)].flags & StepTraits::kPreemption) preempting.push_back(i);
    if (steps[static_cast<std::size_t>(i)].flags & StepTraits::kPrefixHit) hitting.push_back(i);
  }
  REQUIRE(!preempting.empty());
  REQUIRE(preempting.size() <= 10);
  REQUIRE(hitting.size() > 10);
  std::map<std::int64_t, std::uint8_t> checked;
  for (const ValidationRecord& r : a.records) checked[r.step] = r.reasons;
  for (const std::int64_t p : preempting) {
    INFO("preemption step " << p);
    REQUIRE(checked.count(p));
    CHECK((checked[p] & SampleReason::kPreemption));
  }
  std::int64_t hit_picks = 0;
  for (const auto& [step, why] : checked)
    if (why & SampleReason::kPrefixHit) {
      ++hit_picks;
      CHECK(std::find(hitting.begin(), hitting.end(), step) != hitting.end());
    }
  CHECK(hit_picks == 10);
  REQUIRE(announced.size() == 2);  // once per run, the same line
  CHECK(announced[1] == announced[0]);
  CHECK(announced[0] == fmt::format("validating 40 of {} steps: {} evenly spread + {} with "
                                    "preemptions + 10 with prefix hits; --sample-every N or "
                                    "--sample-prob P to change",
                                    steps.size(), 30 - preempting.size(), preempting.size()));

  // Deterministic: the second run checks the same steps with the same errors.
  REQUIRE(a.records.size() == b.records.size());
  for (std::size_t i = 0; i < a.records.size(); ++i) {
    CHECK(a.records[i].step == b.records[i].step);
    CHECK(a.records[i].reasons == b.records[i].reasons);
    CHECK(a.records[i].err.max_abs == b.records[i].err.max_abs);
  }
  // The files say which steps were checked and why.
  std::ifstream csv(a.csv);
  std::string header, row;
  std::getline(csv, header);
  CHECK(header.substr(header.rfind(',') + 1) == "sampled_as");
  std::int64_t rows = 0, preemption_rows = 0;
  while (std::getline(csv, row)) {
    ++rows;
    const std::string why = row.substr(row.rfind(',') + 1);
    CHECK((why == "spread" || why == "preemption" || why == "prefix_hit"));
    preemption_rows += why == "preemption";
  }
  CHECK(rows == 40);
  CHECK(preemption_rows == static_cast<std::int64_t>(preempting.size()));
  std::ifstream jf(a.json);
  const nlohmann::json j = nlohmann::json::parse(jf);
  CHECK(j["sampling"]["mode"] == "bounded");
  CHECK(j["sampling"]["planned"] == 40);
  CHECK(j["sampling"]["prefix_hit"] == 10);
  CHECK(j["sampling"]["description"] == announced[0]);
}

TEST_CASE("no progress is drawn where stderr is not a terminal, the line says where the run is",
          "[validate]") {
  std::FILE* f = std::tmpfile();
  REQUIRE(f != nullptr);
  CHECK_FALSE(static_cast<bool>(terminal_progress(f)));  // a file is no terminal: no function
  // A whole run with that (empty) function and a recording one beside it.
  const Scenario s = load_scenario(kSmall, {});
  ValidationOptions o =
      kvsim::validate::test::options(kernels::BackendKind::kCpu, kernels::DType::kBF16, 3);
  o.progress = terminal_progress(f);
  run_validation(s, out_dir("progress-file"), o);
  CHECK(std::ftell(f) == 0);
  std::vector<ValidationProgress> seen;
  o.progress = [&](const ValidationProgress& p) { seen.push_back(p); };
  run_validation(s, out_dir("progress-recorded"), o);
  REQUIRE(!seen.empty());
  CHECK(seen.back().finished);
  CHECK(seen.back().step == 240);
  CHECK(seen.back().checked == 80);
  CHECK(seen.back().num_checked == 80);

  // What a terminal receives: the line redrawn in place, erased at the end.
  line_progress(f)(ValidationProgress{12345, 373112, 57, 200, 0.25, 42, false, false});
  line_progress(f)(ValidationProgress{373112, 373112, 200, 200, 1.0, 168, false, true});
  std::rewind(f);
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  CHECK(std::string(buf, n) ==
        "\rvalidate: step 12,345 of 373,112, checked 57 of 200, 0:42 elapsed, about 2:06 left"
        "\x1b[K\r\x1b[K");
  ValidationProgress surveying;
  surveying.surveying = true;
  surveying.step = 2048;
  surveying.elapsed_s = 1.4;
  CHECK(progress_line(surveying) ==
        "validate: surveying the run without kernels, step 2,048, 0:01 elapsed");
}
