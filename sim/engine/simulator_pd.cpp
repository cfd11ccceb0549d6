// The engine loop of a P/D replica (Simulator::set_pd_role, sim/engine/pd_endpoint.h): vLLM
// v0.20.1's EngineCore loop with NixlConnector (vllm/v1/engine/core.py: step 402-431,
// step_with_batch_queue 433-560, run_busy_loop / _process_input_queue / _process_engine_step
// 1164-1223), synchronous and with async scheduling. An iteration: the input queue (arrivals,
// aborts), then, while the scheduler has requests (unfinished, or finished ids to flush),
// schedule() -> the worker executes the batch (start_load_kv at its start, the forward pass when
// it has tokens, get_finished at its end) -> update_from_output with the worker's report; after
// an iteration whose new batch ran no forward pass, a 1 ms sleep while requests are unfinished.

#include <fmt/format.h>

#include "core/common/assert.h"
#include "core/v1/scheduler.h"
#include "sim/engine/simulator.h"

namespace kvsim {

namespace {
/// EngineCore's sleep after a step that ran no model while requests are unfinished (1 ms).
constexpr SimTimeNs kPdPollIntervalNs = 1'000'000;
}  // namespace

void Simulator::set_pd_role(PdRole role, PdHooks* hooks, std::string engine_id) {
  auto* sched = dynamic_cast<Scheduler*>(core_.get());
  KVSIM_ASSERT(sched != nullptr && scenario_.engine.profile == Profile::kVllm020 &&
                   scenario_.engine.mode == EngineConfig::Mode::kTimed,
               "P/D runs vllm-0.20 in timed mode");
  KVSIM_ASSERT(!tier_ && barrier_ == nullptr && scenario_.workload.per_request.n == 1,
               "P/D without the CPU tier, a forward barrier or parallel sampling");
  KVSIM_ASSERT(!pd_ && live_.empty() && step_ == 0, "set_pd_role once, before the run");
  pd_ = std::make_unique<PdEndpoint>(*sched, engine_, role, hooks, std::move(engine_id));
}

void Simulator::inject_pd_arrival(RequestSpec spec, PdTransferParams params) {
  KVSIM_ASSERT(pd_ != nullptr, "inject_pd_arrival without a P/D role");
  // The toy proxy sends P max_tokens = max_completion_tokens = 1, without min_tokens.
  if (params.do_remote_decode) spec.max_tokens = 1;
  pd_->expect(spec.id, std::move(params));
  inject_arrival(std::move(spec));
}

// ---- the synchronous loop (EngineCore.step) -------------------------------------------------

void Simulator::start_step_pd() {
  schedule_queued_ = false;
  pd_sleeping_ = false;
  if (async_) return start_step_async_pd();
  if (step_in_flight_) return;
  if (!pending_aborts_.empty()) {  // the input queue: aborts that came during the sleep
    delivered_.clear();
    finish_delivered(delivered_);
    pd_->reap(free_slots_);
  }
  admit_waiting();
  if (!pd_->has_requests()) return;  // EngineCore blocks on its input queue
  schedule_engine();
  const SimTimeNs now = engine_.now();
  step_executed_ = out_.total_num_scheduled_tokens > 0;
  pd_->start_execution(now);  // start_load_kv, even for a step that schedules nothing
  StepView& v = view_;
  describe_step(v, out_, now);
  // A step that schedules nothing runs no forward pass.
  launch_step(v, now, now, step_executed_ ? forward_ns(v) : 0);
}

void Simulator::end_step_pd() {
  if (async_) return end_step_async_pd();
  pd_->end_execution(engine_.now());  // get_finished at the end of the step's execution
  pd_->apply_report();
  core_->update_from_output(outputs_);
  check_step_error("update_from_output()");
  const std::vector<RequestOutput>& delivered = deliver_outputs(view_, step_executed_);
  if (!step_executed_)
    for (StepObserver* o : observers_) o->on_empty_step(view_);
  step_in_flight_ = false;
  finish_delivered(delivered);
  pd_->reap(free_slots_);
  if (check_invariants_)
    if (const std::string v = pd_->find_violation(); !v.empty())
      throw RunError("P/D worker invariant violated: " + v);
  if (!step_executed_) check_pd_progress();
  next_iteration_pd(step_executed_);
}

void Simulator::next_iteration_pd(bool model_executed) {
  if (model_executed || core_->num_unfinished_requests() == 0) return next_step_after_end();
  // _process_engine_step: no model ran and requests are unfinished (waiting for remote KVs, or
  // for blocks P holds): time.sleep(0.001); arrivals and aborts wait for the next iteration.
  pd_sleeping_ = true;
  schedule_queued_ = true;
  engine_.schedule(engine_.now() + kPdPollIntervalNs, kPriorityScheduleStep,
                   EventKind::kScheduleStep);
}

void Simulator::check_pd_progress() {
  // Nothing runs, no transfer is unfinished, no block is held for one and no loaded request
  // waits for its promotion: every later iteration sees the same queues (vLLM polls forever);
  // only a client's abort can change anything.
  if (!core_->running().empty() || pd_->transfers_pending()) return;
  // This step's update freed held blocks or took in reads: the next schedule() sees a new pool.
  if (pd_->last_report_changed()) return;
  const auto& sched = static_cast<const Scheduler&>(*core_);
  if (!sched.held().empty() || !sched.finished_recving_pending().empty()) return;
  if (core_->num_unfinished_requests() == 0 || engine_.contains_kind(EventKind::kClientAbort))
    return;
  fail_cannot_fit(*core_->first_waiting());
}

// ---- async scheduling (EngineCore.step_with_batch_queue, a queue of two batches) ------------

void Simulator::start_step_async_pd() {
  if (pd_blocked_) return;  // the oldest batch's end resumes the loop
  KVSIM_ASSERT(async_count_ < 2, "an iteration with the batch queue full");
  if (!pending_aborts_.empty()) {  // the input queue's aborts
    delivered_.clear();
    finish_delivered(delivered_);
    pd_->reap(free_slots_);
  }
  admit_waiting();
  const SimTimeNs now = engine_.now();
  pd_iter_executed_ = false;
  if (pd_->has_requests()) {
    AsyncStep& a = async_steps_[(async_head_ + async_count_) & 1];
    core_->schedule(a.out);
    check_step_error("schedule()");
    a.executed = a.out.total_num_scheduled_tokens > 0;
    a.scheduled = true;
    a.dummy = false;
    pd_iter_executed_ = a.executed;
    const int executed_in_flight = async_count_ == 1 && async_steps_[async_head_].executed;
    StepView& v = a.view;
    describe_step(v, a.out, now);
    v.step = step_ + executed_in_flight;
    // An empty batch runs no forward pass (the connector still runs).
    const SimTimeNs dur = a.executed ? forward_ns(v) : 0;
    // The worker runs the batches in order: this one starts now when every batch queued before
    // it has ended, else when the last of them ends (end_step_async_pd starts it).
    const bool worker_free = pd_ended_ == async_count_;
    v.end_ns = (worker_free ? now : gpu_free_ns_) + dur;
    gpu_free_ns_ = v.end_ns;
    if (a.executed)
      for (StepObserver* o : observers_) o->on_step_begin(v);
    ++async_count_;
    if (worker_free) pd_->start_execution(now);
    engine_.schedule(v.end_ns, kPriorityStepEnd, EventKind::kStepEnd);
    // The queue has room and the batch runs: return without waiting (schedule again now).
    if (a.executed && async_count_ == 1) {
      schedule_queued_ = true;
      engine_.schedule(now, kPriorityScheduleStep, EventKind::kScheduleStep);
      return;
    }
  } else if (async_count_ == 0) {
    return;  // EngineCore blocks on its input queue
  }
  // Block until the oldest batch is done.
  if (pd_ended_ > 0) return update_oldest_async_pd();
  pd_blocked_ = true;
}

void Simulator::end_step_async_pd() {
  const SimTimeNs now = engine_.now();
  // The worker: get_finished at the end of the oldest running batch, then the next one starts.
  pd_->end_execution(now);
  ++pd_ended_;
  if (pd_ended_ < async_count_) pd_->start_execution(now);
  if (!pd_blocked_) return;  // the loop pops it at its next iteration
  pd_blocked_ = false;
  update_oldest_async_pd();
}

void Simulator::update_oldest_async_pd() {
  AsyncStep& a = async_steps_[async_head_];
  async_head_ = 1 - async_head_;
  --async_count_;
  --pd_ended_;
  pd_->apply_report();
  core_->update_from_output(outputs_);
  check_step_error("update_from_output()");
  const std::vector<RequestOutput>& delivered = deliver_outputs(a.view, a.executed);
  if (!a.executed)
    for (StepObserver* o : observers_) o->on_empty_step(a.view);
  retired_.clear();
  finish_delivered(delivered);
  pd_->reap(free_slots_);
  if (check_invariants_)
    if (const std::string v = pd_->find_violation(); !v.empty())
      throw RunError("P/D worker invariant violated: " + v);
  // (A batch just updated that ran may have finished requests: their blocks are free now.)
  if (!a.executed && !pd_iter_executed_ &&
      (async_count_ == 0 || !async_steps_[async_head_].executed))
    check_pd_progress();
  // post_step: model_executed is whether this iteration's new batch ran a forward pass.
  next_iteration_pd(pd_iter_executed_);
}

}  // namespace kvsim
