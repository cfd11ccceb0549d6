// Fast-forward: the synchronous loop's runs of pure decode steps advanced at once.
//
// At a step start with nothing else due at this instant, the engine says how many of the next
// steps are pure decodes of its running batch (EngineCore::decode_horizon: nothing admitted,
// preempted or finished, no allocation that can fail). Their durations need no visit of the
// requests: in step j every request of the batch has c_i + j tokens of context, so the batch
// features are running sums (sum of contexts S + (j-1) R, of squares Q + 2 (j-1) S + (j-1)^2 R),
// and the latency model is asked step by step exactly as describe_step would fill the view. The
// run stops before the first step that would end at or after the next queued event (an arrival,
// a client's timeout) or advance_to's limit (a cluster's next routing instant), since that event
// must find the step in flight; before the first step an observer needs on its own (a recorded
// steps.csv row); and at the engine's horizon. The engine then applies the run
// (EngineCore::advance_decode), observers get it as one on_decode_run, the clock moves to the
// run's end, and the step loop goes on from there as if it had stepped.
//
// The step in flight at the next event may end the run when nothing due before that step's end
// reads or changes the engine: arrivals (they only queue behind the scheduler's waiting queue)
// and client aborts of requests not handed to the scheduler yet. The run's end is then queued as
// a step's end; those events are handled at their times while it is in flight, as the step loop
// would handle them, and the observers get the run at its end (end_decode_run), when the waiting
// count its last step reports is known.

#include <algorithm>

#include "sim/engine/simulator.h"

namespace kvsim {

namespace {
/// The longest run asked for at once (bounds the scratch and the stop-token scan).
constexpr std::int64_t kMaxRunSteps = 4096;
/// A run is tried only when the next event is at least this many last-step lengths away.
constexpr SimTimeNs kMinRunSteps = 4;
/// The sum of squared contexts is a double in describe_step: exact while below 2^53.
constexpr std::int64_t kExactDoubleLimit = std::int64_t{1} << 53;
}  // namespace

bool Simulator::events_leave_engine_before(SimTimeNs t) const {
  for (const Event& e : engine_.queued()) {
    if (e.time_ns >= t || e.kind == EventKind::kArrival) continue;
    if (e.kind != EventKind::kClientAbort) return false;
    const auto payload = static_cast<std::uint64_t>(e.payload);
    const Live& l = live_[static_cast<std::size_t>(payload & 0xffffffff)];
    if (l.generation == static_cast<std::uint32_t>(payload >> 32) && !l.client_gone && l.request)
      return false;  // it aborts a request the scheduler holds
  }
  return true;
}

bool Simulator::fast_forward() {
  // Before any visit of the batch: the run is not worth it when the next event comes within a
  // few steps of the last step's length (the usual case under dense arrivals).
  const SimTimeNs event_ns = next_event_ns();
  const SimTimeNs limit = std::min(advance_limit_ns_, event_ns);
  // Whether the step in flight at the next event may be the run's last (see above).
  const bool through = event_ns < advance_limit_ns_;
  const SimTimeNs last_ns = view_.end_ns - view_.start_ns;
  if (limit != kNeverNs && last_ns > 0 &&
      (limit - engine_.now()) / last_ns + (through ? 1 : 0) < kMinRunSteps)
    return false;
  std::int64_t max_steps = kMaxRunSteps;
  for (StepObserver* o : observers_) {
    if (!o->takes_decode_runs()) return false;
    max_steps = std::min(max_steps, o->next_step_needed(step_) - step_);
  }
  if (max_steps < 2) return false;
  std::int64_t k = core_->decode_horizon(max_steps);
  if (k < 2) return false;  // one step costs what stepping does

  const std::span<Request* const> batch = core_->running();
  const auto n = static_cast<std::int64_t>(batch.size());
  // Step 1's contexts: computed tokens + the one scheduled.
  std::int64_t sum = 0, sum_sq = 0;
  for (const Request* r : batch) {
    const std::int64_t ctx = r->num_computed_tokens + 1;
    sum += ctx;
    sum_sq += ctx * ctx;
  }
  ff_out_.scheduled.resize(static_cast<std::size_t>(n));  // the latency model's num_seqs
  StepView& v = ff_view_;
  v.prefill_tokens = v.num_prefill_seqs = 0;
  v.decode_tokens = n;
  v.num_waiting = num_waiting();
  ff_times_.resize(static_cast<std::size_t>(k) + 1);
  SimTimeNs t = engine_.now();
  ff_times_[0] = t;
  bool in_flight = false;  // the run's last step is in flight at the next event
  for (std::int64_t j = 1; j <= k; ++j) {
    const std::int64_t d = j - 1;  // tokens each request gained since step 1
    const std::int64_t step_sum = sum + d * n;
    const std::int64_t step_sq = sum_sq + 2 * d * sum + d * d * n;
    if (step_sq >= kExactDoubleLimit) {  // describe_step's double sum may round: step instead
      k = j - 1;
      break;
    }
    v.step = step_ + d;
    v.start_ns = t;
    v.sum_context_tokens = step_sum;
    v.sum_context_sq = static_cast<double>(step_sq);
    v.attention_pairs = static_cast<double>(step_sum);  // one query token per request
    const SimTimeNs dur = forward_ns(v);
    if (t + dur >= limit) {
      in_flight = through && t + dur < advance_limit_ns_ && events_leave_engine_before(t + dur);
      if (!in_flight) {
        k = j - 1;
        break;
      }
      k = j;  // the last step, in flight at the event
    }
    t += dur;
    ff_times_[static_cast<std::size_t>(j)] = t;
    if (in_flight) break;
  }
  if (k < 2) return false;

  ff_pool_.resize(static_cast<std::size_t>(k));
  core_->advance_decode(k, ff_pool_);
  ff_prev_.clear();
  const SimTimeNs end = ff_times_[static_cast<std::size_t>(k)];
  for (const Request* r : batch) {
    Live& l = live_[static_cast<std::size_t>(r->index())];
    ff_prev_.push_back(l.last_token_ns);
    l.last_token_ns = end;
  }
  ff_run_.first_step = step_;
  ff_run_.num_steps = k;
  ff_run_.times = std::span<const SimTimeNs>(ff_times_.data(), static_cast<std::size_t>(k) + 1);
  ff_run_.pool = std::span<const KVPoolStats>(ff_pool_.data(), static_cast<std::size_t>(k));
  ff_run_.batch = n;
  ff_run_.num_waiting = ff_run_.last_num_waiting = v.num_waiting;
  ff_run_.prev_token_ns = ff_prev_;
  ff_run_.engine = core_.get();
  ++ff_runs_;
  ff_steps_ += k;
  if (check_invariants_) core_->check_invariants();
  if (in_flight) {
    run_in_flight_ = step_in_flight_ = true;
    engine_.schedule(end, kPriorityStepEnd, EventKind::kStepEnd);
    return true;
  }
  engine_.advance_clock(end);
  report_decode_run();
  return false;
}

void Simulator::report_decode_run() {
  for (StepObserver* o : observers_) o->on_decode_run(ff_run_);
  step_ += ff_run_.num_steps;
}

void Simulator::end_decode_run() {
  run_in_flight_ = step_in_flight_ = false;
  ff_run_.last_num_waiting = num_waiting();  // with what arrived during its last step
  report_decode_run();
  next_step_after_end();
}

}  // namespace kvsim
