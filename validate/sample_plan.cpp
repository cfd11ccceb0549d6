#include "validate/sample_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/common/types.h"
#include "sim/common/rng.h"
#include "sim/engine/simulator.h"
#include "sim/workload/workload.h"

namespace kvsim::validate {

CheckCostModel CheckCostModel::for_shape(std::int64_t num_q_heads, std::int64_t num_kv_heads,
                                         std::int64_t head_size) {
  CheckCostModel m;
  m.num_q_heads = num_q_heads;
  m.num_kv_heads = num_kv_heads;
  m.head_size = head_size;
  // Measured with RelWithDebInfo on the CPU backend (validate/README.md, "Cost model").
  m.per_attention_elem_s = 1.3e-9;
  m.per_context_elem_s = 2.5e-8;
  m.per_check_s = 1.0e-3;
  m.per_written_token_s = 2.0e-8;
  m.per_step_s = 8.0e-6;
  return m;
}

namespace {

// The bounded plan never goes below this many steps (or the run's), whatever they cost.
constexpr std::int64_t kMinBoundedSteps = 8;

/// Records each step's traits in on_step_begin (the batch as scheduled, block tables final).
class Surveyor final : public StepObserver {
 public:
  Surveyor(const CheckCostModel& cost, std::int64_t block_size, const ProgressFn& progress)
      : cost_(cost), block_size_(block_size), progress_(progress) {}

  void on_step_begin(const StepView& v) override {
    StepTraits t;
    std::int64_t read_blocks = 0, new_tokens = 0;
    ++stamp_;  // one stamp per step: a block shared by several requests counts once
    for (const ScheduledRequest& sr : v.out->scheduled) {
      const std::span<const BlockId> table = v.engine->block_table(*sr.request);
      const std::int64_t n = cdiv(sr.num_computed_tokens + sr.num_tokens, block_size_);
      for (std::int64_t b = 0; b < n; ++b) {
        const auto id = static_cast<std::size_t>(to_int(table[static_cast<std::size_t>(b)]));
        if (id >= seen_.size()) seen_.resize(id + 1, 0);
        if (seen_[id] == stamp_) continue;
        seen_[id] = stamp_;
        ++read_blocks;
      }
      new_tokens += sr.num_tokens;
      if (sr.kind != ScheduledRequest::Kind::kRunning && sr.num_computed_tokens > 0)
        t.flags |= StepTraits::kPrefixHit;
    }
    if (!v.out->preempted.empty()) t.flags |= StepTraits::kPreemption;
    t.read_blocks = static_cast<std::int32_t>(read_blocks);
    const auto hq = static_cast<double>(cost_.num_q_heads);
    const auto hkv = static_cast<double>(cost_.num_kv_heads);
    const auto d = static_cast<double>(cost_.head_size);
    t.check_s = static_cast<float>(
        cost_.per_check_s + cost_.per_attention_elem_s * v.attention_pairs * hq * d +
        cost_.per_context_elem_s * static_cast<double>(v.sum_context_tokens) * hkv * d);
    t.run_s = static_cast<float>(cost_.per_step_s +
                                 cost_.per_written_token_s * static_cast<double>(new_tokens));
    steps_.push_back(t);
    if (progress_) {
      const auto now = std::chrono::steady_clock::now();
      if (std::chrono::duration<double>(now - last_report_).count() >= 0.25) {
        last_report_ = now;
        ValidationProgress p;
        p.surveying = true;
        p.step = static_cast<std::int64_t>(steps_.size());
        p.elapsed_s = std::chrono::duration<double>(now - t0_).count();
        progress_(p);
      }
    }
  }

  std::vector<StepTraits> take() { return std::move(steps_); }

 private:
  CheckCostModel cost_;
  std::int64_t block_size_;
  const ProgressFn& progress_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now(), last_report_ = t0_;
  std::vector<StepTraits> steps_;
  std::vector<std::uint64_t> seen_;  // by block id: the stamp of the last step that counted it
  std::uint64_t stamp_ = 0;
};

/// Picks up to `quota` members of `pool` (ascending steps, none picked yet), the j-th from the
/// j-th of `quota` equal windows of `pool`: the member nearest the window's middle whose check
/// costs at most `cap_s`, else the window's cheapest. Marks the picks in `reasons` with `why`;
/// returns how many, and adds to `swapped` the picks moved off the middle for its cost.
std::int64_t pick_spread(const std::vector<std::int64_t>& pool, std::int64_t quota,
                         const std::vector<StepTraits>& steps, double cap_s, std::uint8_t why,
                         std::vector<std::uint8_t>& reasons, std::int64_t& swapped) {
  const auto n = static_cast<std::int64_t>(pool.size());
  quota = std::min(quota, n);
  const auto cost_at = [&](std::int64_t i) {
    return static_cast<double>(
        steps[static_cast<std::size_t>(pool[static_cast<std::size_t>(i)])].check_s);
  };
  for (std::int64_t j = 0; j < quota; ++j) {
    const std::int64_t lo = j * n / quota, hi = (j + 1) * n / quota;  // [lo, hi), not empty
    const std::int64_t mid = lo + (hi - lo) / 2;
    std::int64_t best = -1;
    for (std::int64_t off = 0; best < 0 && (mid - off >= lo || mid + off < hi); ++off)
      for (const std::int64_t i : {mid - off, mid + off})
        if (best < 0 && i >= lo && i < hi && cost_at(i) <= cap_s) best = i;
    if (best < 0) {
      best = lo;
      for (std::int64_t i = lo + 1; i < hi; ++i)
        if (cost_at(i) < cost_at(best)) best = i;
    }
    swapped += best != mid ? 1 : 0;
    reasons[static_cast<std::size_t>(pool[static_cast<std::size_t>(best)])] |= why;
  }
  return quota;
}

/// The steps of [0, reasons.size()) not picked yet whose traits have `flag` (0: any).
std::vector<std::int64_t> free_steps(const std::vector<StepTraits>& steps,
                                     const std::vector<std::uint8_t>& reasons, std::uint8_t flag) {
  std::vector<std::int64_t> out;
  for (std::size_t s = 0; s < steps.size(); ++s)
    if (reasons[s] == 0 && (flag == 0 || (steps[s].flags & flag)))
      out.push_back(static_cast<std::int64_t>(s));
  return out;
}

}  // namespace

std::vector<StepTraits> survey_run(const Scenario& scenario, const StepTimeFn& step_time,
                                   const CheckCostModel& cost, std::int64_t block_size,
                                   const volatile std::sig_atomic_t* interrupt,
                                   const ProgressFn& progress) {
  std::unique_ptr<RequestSource> source =
      make_request_source(scenario.workload, scenario.seed, scenario_vocab_size(scenario));
  Surveyor surveyor(cost, block_size, progress);
  Simulator sim(scenario, *source, step_time);
  sim.attach(&surveyor);
  sim.set_interrupt_flag(interrupt);
  sim.run();
  return surveyor.take();
}

std::string sample_reason_names(std::uint8_t reasons) {
  static constexpr std::pair<std::uint8_t, const char*> kNames[] = {
      {SampleReason::kEvery, "every"},          {SampleReason::kProb, "prob"},
      {SampleReason::kSpread, "spread"},        {SampleReason::kPreemption, "preemption"},
      {SampleReason::kPrefixHit, "prefix_hit"}, {SampleReason::kFault, "fault"}};
  std::string out;
  for (const auto& [bit, name] : kNames)
    if (reasons & bit) out += (out.empty() ? "" : "+") + std::string(name);
  return out;
}

const char* sample_mode_name(SamplePlan::Mode mode) {
  switch (mode) {
    case SamplePlan::Mode::kEvery:
      return "every";
    case SamplePlan::Mode::kProb:
      return "prob";
    case SamplePlan::Mode::kBounded:
      return "bounded";
  }
  return "?";
}

bool drawn_with_prob(std::uint64_t seed, std::int64_t step, double prob) {
  const std::uint64_t stream = stream_seed(seed, "validate.sample");
  const double u =
      static_cast<double>(splitmix64(stream ^ static_cast<std::uint64_t>(step)) >> 11) * 0x1p-53;
  return u < prob;
}

std::string group_thousands(std::int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

SamplePlan plan_samples(const std::vector<StepTraits>& steps, const SamplingRule& rule) {
  SamplePlan plan;
  const auto n = static_cast<std::int64_t>(steps.size());
  plan.reasons.assign(steps.size(), 0);
  const std::string of = group_thousands(n);
  if (rule.every_steps > 0) {
    plan.mode = SamplePlan::Mode::kEvery;
    for (std::int64_t s = 0; s < n; s += rule.every_steps)
      plan.reasons[static_cast<std::size_t>(s)] = SampleReason::kEvery;
  } else if (rule.prob > 0) {
    plan.mode = SamplePlan::Mode::kProb;
    for (std::int64_t s = 0; s < n; ++s)
      if (drawn_with_prob(rule.seed, s, rule.prob))
        plan.reasons[static_cast<std::size_t>(s)] = SampleReason::kProb;
  } else {
    plan.mode = SamplePlan::Mode::kBounded;
    // Pick k steps with a cap of budget / k each; when their checks would still take longer
    // than the budget (steps heavier than the cap in whole windows), fewer and wider windows.
    std::int64_t k = std::min(std::max<std::int64_t>(rule.count, 1), n);
    while (true) {
      plan.reasons.assign(steps.size(), 0);
      plan.swapped = 0;
      plan.cap_s = rule.budget_s / static_cast<double>(std::max<std::int64_t>(k, 1));
      if (k == n) {
        std::fill(plan.reasons.begin(), plan.reasons.end(), SampleReason::kSpread);
        plan.spread = n;
        plan.preemption = plan.prefix_hit = 0;
      } else {
        // Each kind spread over the steps of that kind not picked yet, then the rest over the
        // steps of the run not picked yet: every window offers a free step.
        plan.preemption =
            pick_spread(free_steps(steps, plan.reasons, StepTraits::kPreemption), k / 4, steps,
                        plan.cap_s, SampleReason::kPreemption, plan.reasons, plan.swapped);
        plan.prefix_hit =
            pick_spread(free_steps(steps, plan.reasons, StepTraits::kPrefixHit), k / 4, steps,
                        plan.cap_s, SampleReason::kPrefixHit, plan.reasons, plan.swapped);
        plan.spread =
            pick_spread(free_steps(steps, plan.reasons, 0), k - plan.preemption - plan.prefix_hit,
                        steps, plan.cap_s, SampleReason::kSpread, plan.reasons, plan.swapped);
      }
      double cost = 0;
      for (std::size_t s = 0; s < steps.size(); ++s)
        if (plan.reasons[s]) cost += steps[s].check_s;
      if (cost <= rule.budget_s || k <= std::min(kMinBoundedSteps, n)) break;
      k = std::max(std::min(kMinBoundedSteps, n),
                   std::min(k - 1, static_cast<std::int64_t>(static_cast<double>(k) *
                                                             rule.budget_s / cost)));
    }
  }
  for (std::int64_t s = 0; s < n; ++s) {
    const StepTraits& t = steps[static_cast<std::size_t>(s)];
    plan.run_s += t.run_s;
    if (plan.reasons[static_cast<std::size_t>(s)] == 0) continue;
    ++plan.num_sampled;
    plan.check_s += t.check_s;
  }

  const std::string head =
      fmt::format("validating {} of {} steps", group_thousands(plan.num_sampled), of);
  switch (plan.mode) {
    case SamplePlan::Mode::kEvery:
      plan.description =
          rule.every_steps == 1
              ? fmt::format("{}: every step (sample_every_steps 1)", head)
              : fmt::format("{}: steps 0, {}, {}, ... (sample_every_steps {})", head,
                            rule.every_steps, 2 * rule.every_steps, rule.every_steps);
      break;
    case SamplePlan::Mode::kProb:
      plan.description = fmt::format("{}: each with probability {} (sample_prob)", head, rule.prob);
      break;
    case SamplePlan::Mode::kBounded:
      if (plan.num_sampled == n) {
        plan.description = fmt::format(
            "validating all {} steps (no more than the {} checked by default)", of, rule.count);
        break;
      }
      plan.description =
          fmt::format("{}: {} evenly spread + {} with preemptions + {} with prefix hits", head,
                      plan.spread, plan.preemption, plan.prefix_hit);
      if (plan.num_sampled < std::min(rule.count, n))
        plan.description +=
            fmt::format(" (not {}: their checks would take over {:.0f} s of one core)", rule.count,
                        rule.budget_s);
      if (plan.swapped > 0)
        plan.description += fmt::format(" ({} moved to a lighter step nearby: over {:.2g} s each)",
                                        plan.swapped, plan.cap_s);
      plan.description += "; --sample-every N or --sample-prob P to change";
      break;
  }
  return plan;
}

}  // namespace kvsim::validate
