#pragma once
// Which steps `kvsim validate` checks with the kernels, and why.
//
// A survey pass simulates the scenario first, without kernels or files (the simulator is fast),
// and records what each step holds: preemptions, requests reading prefix-cache hits, the blocks
// its batch reads, and what checking it would cost. The plan then names its steps exactly, the
// same ones for the same scenario and seed:
//   every N   the steps with step % N == 0          (validate.sample_every_steps, --sample-every)
//   prob P    each step with probability P, seeded by the scenario seed and the step
//                                                      (validate.sample_prob, --sample-prob)
//   bounded   neither set: k = `count` steps (default 200). Up to k/4 of the steps with
//             preemptions and up to k/4 of the steps with prefix hits, each spread evenly over the
//             steps of its kind not picked yet, then the rest spread evenly over the steps not
//             picked yet: the j-th pick of a kind comes from the j-th of equal windows over them,
//             the step nearest the window's middle whose check is estimated at most budget/k
//             (the window's cheapest when none is). When the picks' checks would still take more
//             than `budget_s`, k shrinks (windows widen) until they fit, but not below 8 steps.
//             A run of at most `count` steps whose checks fit the budget is checked whole.

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "validate/progress.h"

namespace kvsim::validate {

/// What checking steps costs, in estimated seconds of one core (fitted on the CPU backend; used
/// for the bounded plan's budget and the progress line's ETA, never for a verdict).
struct CheckCostModel {
  std::int64_t num_q_heads = 0, num_kv_heads = 0, head_size = 0;
  double per_attention_elem_s = 0;  // x attention (query, key) pairs x Hq x D: kernel + reference
  double per_context_elem_s = 0;    // x context tokens x Hkv x D: K/V generated for the check
  double per_check_s = 0;           // fixed, per checked step
  double per_written_token_s = 0;   // every step: a K/V row recorded in the shadow
  double per_step_s = 0;            // every step: the simulation itself

  /// The model of the harness on this attention shape (constants measured on the CPU backend).
  static CheckCostModel for_shape(std::int64_t num_q_heads, std::int64_t num_kv_heads,
                                  std::int64_t head_size);
};

/// One step of the run as the survey saw it.
struct StepTraits {
  static constexpr std::uint8_t kPreemption = 1;  // schedule() preempted a request
  static constexpr std::uint8_t kPrefixHit = 2;   // a request admitted with prefix-cache hits
  float check_s = 0;                              // estimated seconds to check it (CheckCostModel)
  float run_s = 0;               // estimated seconds to simulate it and record its writes
  std::int32_t read_blocks = 0;  // distinct pool blocks its batch reads (a shared block once)
  std::uint8_t flags = 0;
};

/// Simulates `scenario` with `step_time` (the same as the validated run's, so the steps are the
/// same) and records every step; reports to `progress` (surveying) at most every 0.25 s. No
/// kernels, no files. O(simulation). Throws what Simulator::run throws (RunError when
/// interrupted through `interrupt`).
[[nodiscard]] std::vector<StepTraits> survey_run(
    const Scenario& scenario, const StepTimeFn& step_time, const CheckCostModel& cost,
    std::int64_t block_size, const volatile std::sig_atomic_t* interrupt = nullptr,
    const ProgressFn& progress = {});

/// Why a step is checked (bits; 0: it is not).
struct SampleReason {
  static constexpr std::uint8_t kEvery = 1;       // step % sample_every_steps == 0
  static constexpr std::uint8_t kProb = 2;        // drawn with sample_prob
  static constexpr std::uint8_t kSpread = 4;      // bounded: spread evenly over the run
  static constexpr std::uint8_t kPreemption = 8;  // bounded: a step with preemptions
  static constexpr std::uint8_t kPrefixHit = 16;  // bounded: a step with prefix hits
  static constexpr std::uint8_t kFault = 32;      // tests: a planted fault
};
/// The reasons' names joined by '+' ("spread", "preemption+fault"; "" for 0).
[[nodiscard]] std::string sample_reason_names(std::uint8_t reasons);

/// How steps are chosen (ValidationOptions holds these).
struct SamplingRule {
  std::int64_t every_steps = 0;  // > 0: every N
  double prob = 0;               // > 0 (every_steps == 0): probability per step
  std::int64_t count = 200;      // bounded: steps to check when neither is set
  double budget_s = 40;          // bounded: estimated seconds of checks, at most (but 8 steps)
  std::uint64_t seed = 0;        // prob: the scenario seed
};

/// The steps to check, with their reasons and what choosing them took.
struct SamplePlan {
  enum class Mode : std::uint8_t { kEvery, kProb, kBounded };
  Mode mode = Mode::kBounded;
  std::vector<std::uint8_t> reasons;  // [num_steps] SampleReason bits, 0 = not checked
  std::int64_t num_sampled = 0;
  std::int64_t spread = 0, preemption = 0, prefix_hit = 0;  // bounded: picks by kind
  std::int64_t swapped = 0;       // bounded: picks moved off their window's middle for its cost
  double cap_s = 0;               // bounded: the per-pick cost cap (budget / picks)
  double check_s = 0, run_s = 0;  // estimated seconds: checks of the picks, the whole run's steps
  std::string description;        // one line for the user ("validating 200 of 373,112 steps: ...")

  std::int64_t num_steps() const { return static_cast<std::int64_t>(reasons.size()); }
  /// The reasons of `step`; 0 when not checked or past the run's end. O(1).
  std::uint8_t reason(std::int64_t step) const {
    return step >= 0 && step < num_steps() ? reasons[static_cast<std::size_t>(step)] : 0;
  }
};
/// "every", "prob" or "bounded".
const char* sample_mode_name(SamplePlan::Mode mode);

/// The plan for the surveyed steps under `rule`. Deterministic; O(steps).
[[nodiscard]] SamplePlan plan_samples(const std::vector<StepTraits>& steps,
                                      const SamplingRule& rule);

/// Whether `step` is drawn under probability `prob` with `seed` (the prob rule, seeded per step).
[[nodiscard]] bool drawn_with_prob(std::uint64_t seed, std::int64_t step, double prob);

/// 373112 -> "373,112".
[[nodiscard]] std::string group_thousands(std::int64_t n);

}  // namespace kvsim::validate
