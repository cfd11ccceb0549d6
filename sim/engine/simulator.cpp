#include "sim/engine/simulator.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/common/assert.h"
#include "core/engine_factory.h"
#include "core/v1/v1_policy.h"

namespace kvsim {

namespace {
/// EngineCore's sleep after a step that ran no model while requests are unfinished (1 ms).
constexpr SimTimeNs kPollIntervalNs = 1'000'000;
}  // namespace

Simulator::Simulator(const Scenario& scenario, RequestSource& source, StepTimeFn step_time)
    : scenario_(scenario),
      admission_(server_admission(scenario.engine.profile)),
      source_(source),
      step_time_(std::move(step_time)),
      vocab_size_(scenario_vocab_size(scenario)) {
  core_ = make_engine(scenario.engine_params());
  if (scenario.offload) {
    auto* sched = dynamic_cast<Scheduler*>(core_.get());
    const bool timed = scenario.engine.mode == EngineConfig::Mode::kTimed;
    KVSIM_ASSERT(sched != nullptr && !(timed && scenario.scheduler.async_scheduling),
                 "the CPU tier runs on vllm-0.20's synchronous loop (the scenario checks it)");
    tier_ = std::make_unique<OffloadTier>(scenario, *sched, /*instant=*/!timed);
    view_.offload = &tier_->stats();
  }
  view_.engine = core_.get();
  view_.out = &out_;
  view_.final_kv_tokens = &final_kv_tokens_;
  async_ = scenario.scheduler.async_scheduling;
  fast_forward_ = scenario.engine.fast_forward;
  ff_view_.engine = core_.get();
  ff_view_.out = &ff_out_;
  ff_view_.final_kv_tokens = &final_kv_tokens_;
  const Profile profile = scenario.engine.profile;
  stop_tokens_before_length_ = profile_info(profile).family == EngineFamily::kV1 &&
                               v1_policy(profile).stop_tokens_before_length;
  for (AsyncStep& a : async_steps_) {
    a.view.engine = core_.get();
    a.view.out = &a.out;
    a.view.final_kv_tokens = &final_kv_tokens_;
  }
}

Simulator::~Simulator() = default;

void Simulator::run() {
  begin();
  advance_to(kNeverNs);
  finish();
}

void Simulator::begin() {
  events_handled_ = 0;
  pull_next_open_loop();
}

std::uint64_t Simulator::advance_to(SimTimeNs t_ns) {
  const bool cache_only = scenario_.engine.mode == EngineConfig::Mode::kCacheOnly;
  std::uint64_t handled = 0;
  advance_limit_ns_ = t_ns;
  while (!engine_.empty() && engine_.peek().time_ns < t_ns) {
    const Event ev = *engine_.next();
    if (cache_only)
      handle_cache_only(ev);
    else
      handle_timed(ev);
    ++handled;
    if (++events_handled_ % progress_every_ == 0) report_progress();
    // Every event (one load): a signal must stop even a run of slow steps (kvsim validate).
    if (interrupt_ != nullptr && *interrupt_ != 0) [[unlikely]]
      check_interrupt();
  }
  return handled;
}

void Simulator::finish() {
  if (scenario_.engine.mode == EngineConfig::Mode::kTimed) {
    if (tier_) tier_->reap(free_slots_);
    if (pd_) pd_->reap(free_slots_);
    KVSIM_ASSERT(unadmitted_.empty(), "arrivals left unadmitted after the last step");
    if (core_->num_unfinished_requests() > 0) {
      const Request* r =
          core_->num_waiting() > 0 ? core_->first_waiting() : core_->running().front();
      fail_cannot_fit(*r);
    }
  }
  report_progress();
  for (StepObserver* o : observers_) o->on_simulation_end(engine_.now(), *core_);
}

// ---- timed mode -----------------------------------------------------------------------------

std::int64_t Simulator::num_waiting() const {
  return core_->num_waiting() + static_cast<std::int64_t>(unadmitted_.size()) - unadmitted_gone_;
}

void Simulator::fail_cannot_fit(const Request& r) const {
  const std::int64_t bs = scenario_.cache.sizing.block_size;
  const std::int64_t idx = r.index();
  throw RunError(
      fmt::format("request {} can never be scheduled: it needs {} blocks of {} tokens ({} prompt + "
                  "{} generated "
                  "tokens) and the pool has {} blocks in all; raise the KV cache "
                  "(cache.num_gpu_blocks_override, "
                  "gpu_memory_utilization) or lower scheduler.max_model_len",
                  request_ids_[static_cast<std::size_t>(idx)], cdiv(r.num_tokens(), bs), bs,
                  r.num_prompt_tokens(), r.num_output_tokens(), scenario_.num_gpu_blocks));
}

void Simulator::describe_step(StepView& v, const SchedulerOutput& out, SimTimeNs now) {
  v.step = step_;
  v.start_ns = now;
  v.prefill_tokens = v.decode_tokens = v.num_prefill_seqs = v.sum_context_tokens = 0;
  v.sum_context_sq = 0;
  v.attention_pairs = 0;
  v.outputs = {};
  v.prev_token_ns = {};
  v.request_id_of_index = request_ids_;
  v.num_waiting = num_waiting();
  for (const ScheduledRequest& sr : out.scheduled) {
    Request& r = *sr.request;
    Live& l = live_[static_cast<std::size_t>(r.index())];
    if (l.first_scheduled_ns < 0) {
      l.first_scheduled_ns = now;
      // Local prefix hits: a P/D decode request read its prompt past them (the last token then
      // recomputed), so they are the prompt less what it read.
      const std::int64_t read = pd_ ? pd_->take_external_tokens(r) : 0;
      l.first_lookup_hit_tokens = read > 0 ? r.num_prompt_tokens() - read : sr.num_computed_tokens;
      for (std::int64_t c : l.fork_children) {  // forks share their parent's prompt pass
        live_[static_cast<std::size_t>(c)].first_scheduled_ns = now;
        live_[static_cast<std::size_t>(c)].first_lookup_hit_tokens = sr.num_computed_tokens;
      }
    }
    const bool decode = sr.num_tokens == 1 && r.num_output_tokens() > 0 &&
                        sr.num_computed_tokens == r.num_tokens() - 1;
    if (decode) {
      ++v.decode_tokens;
    } else {
      v.prefill_tokens += sr.num_tokens;
      ++v.num_prefill_seqs;
    }
    const std::int64_t ctx = sr.num_computed_tokens + sr.num_tokens;
    v.sum_context_tokens += ctx;
    v.sum_context_sq += static_cast<double>(ctx) * static_cast<double>(ctx);
    // Query token k (1-based) of the n new ones attends to c + k keys.
    const auto n = static_cast<double>(sr.num_tokens);
    v.attention_pairs += n * static_cast<double>(sr.num_computed_tokens) + n * (n + 1) / 2;
  }
}

void Simulator::start_step() {
  if (pd_) return start_step_pd();
  if (async_) return start_step_async();
  schedule_queued_ = false;
  if (step_in_flight_) return;
  EngineCore& eng = *core_;
  admit_waiting();
  if (tier_) return start_step_tier();
  if (eng.num_unfinished_requests() == 0) {
    // A DP rank of an MoE model runs a dummy batch while the wave runs (core.py:1755-1758).
    if (barrier_ != nullptr && barrier_->wave_running()) {
      dummy_in_flight_ = true;
      step_in_flight_ = true;
      launch_forward(view_, dummy_ns_);
    }
    return;
  }
  if (fast_forward_ && barrier_ == nullptr && step_time_ && fast_forward()) return;
  schedule_engine();
  if (out_.scheduled.empty()) {
    KVSIM_ASSERT(eng.running().empty(), "running requests but nothing scheduled");
    if (!out_.ignored.empty()) {  // the engine dropped what it can never run: try again now
      schedule_queued_ = true;
      engine_.schedule(engine_.now(), kPriorityScheduleStep, EventKind::kScheduleStep);
      return;
    }
    fail_cannot_fit(*eng.first_waiting());
  }
  const SimTimeNs now = engine_.now();
  StepView& v = view_;
  describe_step(v, out_, now);
  const SimTimeNs dur = forward_ns(v);
  step_start_ns_ = now;
  if (barrier_ != nullptr) {
    step_in_flight_ = true;
    return launch_forward(v, dur);
  }
  v.end_ns = now + dur;
  for (StepObserver* o : observers_) o->on_step_begin(v);
  step_in_flight_ = true;
  engine_.schedule(v.end_ns, kPriorityStepEnd, EventKind::kStepEnd);
}

void Simulator::launch_forward(StepView& v, SimTimeNs duration_ns) {
  v.start_ns = engine_.now();
  v.end_ns = kNeverNs;  // until the barrier sets it (set_forward_end may come at once)
  ++awaiting_end_;
  barrier_->on_launch(rank_, engine_.now(), duration_ns);
}

void Simulator::set_forward_barrier(ForwardBarrier* barrier, std::int32_t rank) {
  KVSIM_ASSERT(!tier_, "a forward barrier over the CPU tier's loop (the scenario refuses it)");
  barrier_ = barrier;
  rank_ = rank;
  // vLLM's dummy batch: one decode token of one sequence (execute_dummy_batch -> _dummy_run(1)).
  dummy_out_.scheduled.assign(1, ScheduledRequest{});
  dummy_out_.scheduled[0].num_tokens = 1;
  StepView d;
  d.engine = core_.get();
  d.out = &dummy_out_;
  d.decode_tokens = 1;
  d.sum_context_tokens = 1;
  d.sum_context_sq = 1;
  d.attention_pairs = 1;
  dummy_ns_ = forward_ns(d);
}

void Simulator::set_forward_end(SimTimeNs end_ns) {
  KVSIM_ASSERT(awaiting_end_ > 0, "a forward end for a rank with no forward pass launched");
  StepView* v = &view_;
  bool executed = !dummy_in_flight_;
  if (async_) {
    AsyncStep& a = async_steps_[(async_head_ + async_count_ - awaiting_end_) & 1];
    v = &a.view;
    executed = a.executed;
    gpu_free_ns_ = end_ns;
  }
  --awaiting_end_;
  KVSIM_ASSERT(end_ns >= v->start_ns);
  v->end_ns = end_ns;
  if (executed)
    for (StepObserver* o : observers_) o->on_step_begin(*v);
  engine_.schedule(end_ns, kPriorityStepEnd, EventKind::kStepEnd);
}

void Simulator::kick(SimTimeNs now_ns) {
  if (step_in_flight_ || schedule_queued_ || async_count_ > 0) return;
  schedule_queued_ = true;
  engine_.schedule(now_ns, kPriorityScheduleStep, EventKind::kScheduleStep);
}

void Simulator::end_dummy_step() {
  ++dummy_steps_;
  delivered_.clear();
  finish_delivered(delivered_);  // the aborts that came during it
  barrier_->on_forward_done(rank_, core_->num_unfinished_requests() > 0);
  next_step_after_end();
}

void Simulator::end_step() {
  if (run_in_flight_) return end_decode_run();
  if (pd_) return end_step_pd();
  if (async_) return end_step_async();
  if (tier_) return end_step_tier();
  if (dummy_in_flight_) {
    dummy_in_flight_ = step_in_flight_ = false;
    return end_dummy_step();
  }
  EngineCore& eng = *core_;
  eng.update_from_output(outputs_);
  check_step_error("update_from_output()");
  const std::vector<RequestOutput>& delivered = deliver_outputs(view_, /*executed=*/true);
  step_in_flight_ = false;
  finish_delivered(delivered);
  if (barrier_ != nullptr) barrier_->on_forward_done(rank_, eng.num_unfinished_requests() > 0);
  next_step_after_end();
}

const std::vector<RequestOutput>& Simulator::deliver_outputs(StepView& v, bool executed) {
  const SimTimeNs now = engine_.now();
  // The tokens of requests whose clients are gone are computed but not delivered (vLLM's output
  // processor drops them): observers see the others.
  if (!pending_aborts_.empty()) {
    delivered_.clear();
    for (const RequestOutput& o : outputs_)
      if (!live_[static_cast<std::size_t>(o.request->index())].client_gone) delivered_.push_back(o);
  }
  const std::vector<RequestOutput>& delivered = pending_aborts_.empty() ? outputs_ : delivered_;
  prev_token_ns_.clear();
  for (const RequestOutput& o : delivered) {
    Live& l = live_[static_cast<std::size_t>(o.request->index())];
    prev_token_ns_.push_back(l.last_token_ns);
    if (l.first_token_ns < 0) l.first_token_ns = now;
    l.last_token_ns = now;
  }
  v.outputs = delivered;
  v.prev_token_ns = prev_token_ns_;
  v.request_id_of_index = request_ids_;
  v.num_waiting = num_waiting();
  if (executed) {  // (an empty async batch ran no forward pass: no step)
    for (StepObserver* o : observers_) o->on_step(v);
    ++step_;
  }
  return delivered;
}

void Simulator::finish_delivered(const std::vector<RequestOutput>& delivered) {
  for (const RequestOutput& o : delivered) {
    if (!o.finished) continue;
    const RequestStatus st = o.request->status;
    finish_request(o.request->index(), st == RequestStatus::kFinishedStopped ? FinishReason::kStop
                                       : st == RequestStatus::kFinishedAborted
                                           ? FinishReason::kAbort
                                           : FinishReason::kLength);
  }
  // Then the aborts that came during the step (a request the step finished is already free).
  for (const std::int64_t slot : pending_aborts_) {
    core_->abort_request(*live_[static_cast<std::size_t>(slot)].request);
    release_slot(slot, true);
  }
  pending_aborts_.clear();
  if (check_invariants_) {
    core_->check_invariants();
    if (tier_)
      if (const std::string v = tier_->find_violation(); !v.empty())
        throw RunError("CPU tier invariant violated: " + v);
  }
}

void Simulator::next_step_after_end() {
  // The next step starts now, after whatever else is due at this instant (arrivals): when
  // nothing is, start it here instead of through the queue (the same order, one event less).
  const SimTimeNs now = engine_.now();
  if (!queue_step_starts_ && (engine_.empty() || engine_.peek().time_ns > now)) {
    start_step();
    return;
  }
  schedule_queued_ = true;
  engine_.schedule(now, kPriorityScheduleStep, EventKind::kScheduleStep);
}

// ---- the synchronous loop with the CPU tier --------------------------------------------------

void Simulator::start_step_tier() {
  // EngineCore steps while the scheduler has unfinished requests or finished ids to flush
  // (has_requests); otherwise it blocks on its input queue until the next arrival.
  const auto& sched = static_cast<const Scheduler&>(*core_);
  if (core_->num_unfinished_requests() == 0 && !sched.has_finished_requests()) return;
  schedule_engine();
  const SimTimeNs now = engine_.now();
  step_executed_ = out_.total_num_scheduled_tokens > 0;
  const SimTimeNs start = tier_->begin_step(now, out_);
  StepView& v = view_;
  describe_step(v, out_, now);
  // A step that schedules nothing runs no forward pass.
  const SimTimeNs dur = step_executed_ ? forward_ns(v) : 0;
  tier_->report(start, step_executed_, out_);
  launch_step(v, now, start, dur);
}

void Simulator::launch_step(StepView& v, SimTimeNs now, SimTimeNs start, SimTimeNs dur) {
  v.end_ns = start + dur;
  step_start_ns_ = now;
  if (step_executed_)
    for (StepObserver* o : observers_) o->on_step_begin(v);
  step_in_flight_ = true;
  engine_.schedule(v.end_ns, kPriorityStepEnd, EventKind::kStepEnd);
}

void Simulator::end_step_tier() {
  EngineCore& eng = *core_;
  eng.update_from_output(outputs_);
  check_step_error("update_from_output()");
  const std::vector<RequestOutput>& delivered = deliver_outputs(view_, step_executed_);
  if (!step_executed_)
    for (StepObserver* o : observers_) o->on_empty_step(view_);
  step_in_flight_ = false;
  finish_delivered(delivered);
  tier_->reap(free_slots_);
  if (step_executed_) return next_step_after_end();
  // A step that scheduled nothing: EngineCore sleeps 1 ms while requests are unfinished
  // (core.py:1220-1221); arrivals in between join the next step.
  const bool polling = eng.num_unfinished_requests() > 0;
  tier_->count_empty_step(polling);
  if (!polling) return next_step_after_end();
  check_tier_progress();
  schedule_queued_ = true;
  engine_.schedule(engine_.now() + kPollIntervalNs, kPriorityScheduleStep,
                   EventKind::kScheduleStep);
}

void Simulator::check_tier_progress() {
  // Nothing runs, no transfer is unfinished and the worker reported nothing: every later step
  // sees the same queues (an arrival joins behind the request the waiting loop stops at), so
  // only a client's abort can change anything.
  if (!core_->running().empty() || tier_->transfers_pending() || tier_->reported_anything()) return;
  if (engine_.contains_kind(EventKind::kClientAbort)) return;
  const auto& sched = static_cast<const Scheduler&>(*core_);
  const Request* head = core_->first_waiting();
  std::int64_t loaded = 0;  // requests behind it holding blocks of a finished load
  for (const Request* r : sched.skipped_waiting())
    loaded += r != head && !r->kv_groups[0].blocks.empty();
  if (loaded == 0) fail_cannot_fit(*head);
  throw RunError(fmt::format(
      "step {} at {:.6f} s: no step can make progress: request {} (at the head of the waiting "
      "loop) cannot fit its sequence next to the blocks of the {} requests behind it that "
      "loaded from the CPU tier, and nothing runs to free blocks -- vLLM v0.20.1's livelock of "
      "loaded requests (its waiting loop stops at the first request it cannot allocate; the "
      "engine polls forever); a larger GPU pool (cache.num_gpu_blocks_override, "
      "gpu_memory_utilization) avoids it",
      step_, static_cast<double>(engine_.now()) / 1e9,
      request_ids_[static_cast<std::size_t>(head->index())], loaded));
}

// ---- async scheduling (vLLM v0.20's default) -----------------------------------------------

void Simulator::start_step_async() {
  schedule_queued_ = false;
  if (async_count_ == 2) return;  // the batch queue is full: the oldest step's end comes first
  // A DP rank blocks in its dummy batch (execute_dummy_batch returns when the pass is done).
  if (barrier_ != nullptr && async_count_ == 1 && async_steps_[async_head_].dummy) return;
  EngineCore& eng = *core_;
  admit_waiting();
  const SimTimeNs now = engine_.now();
  if (eng.num_unfinished_requests() == 0) {  // the steps in flight end on their own
    if (barrier_ != nullptr && async_count_ == 0 && barrier_->wave_running()) {
      AsyncStep& d = async_steps_[async_head_];  // a dummy batch alone: no schedule()
      d.executed = d.scheduled = false;
      d.dummy = true;
      ++async_count_;
      launch_forward(d.view, dummy_ns_);
    }
    return;
  }
  AsyncStep& a = async_steps_[(async_head_ + async_count_) & 1];
  eng.schedule(a.out);
  check_step_error("schedule()");
  a.executed = a.out.total_num_scheduled_tokens > 0;
  a.scheduled = true;
  // With a barrier an empty batch is followed by a dummy batch, after the oldest step's outputs
  // (step_with_batch_queue returns model_executed false; core.py:1755-1758).
  a.dummy = barrier_ != nullptr && !a.executed;
  // The step in flight, if any (there is room for this one): its batch runs first.
  const int executed_in_flight = async_count_ == 1 && async_steps_[async_head_].executed;
  if (!a.executed && async_count_ == 0) {  // nothing in flight and nothing to run: no progress
    if (eng.running().empty()) fail_cannot_fit(*eng.first_waiting());
    throw RunError(fmt::format("the engine made no progress at simulated time {:.3f} s",
                               static_cast<double>(now) / 1e9));
  }
  StepView& v = a.view;
  describe_step(v, a.out, now);
  v.step = step_ + executed_in_flight;
  const SimTimeNs dur = a.executed ? forward_ns(v) : 0;  // an empty batch runs no forward pass
  if (barrier_ != nullptr) {
    ++async_count_;
    launch_forward(v, a.executed ? dur : dummy_ns_);
    // The oldest batch is not done before the barrier has set its end.
    if (a.executed && async_count_ < 2) {
      schedule_queued_ = true;
      engine_.schedule(now, kPriorityScheduleStep, EventKind::kScheduleStep);
    }
    return;
  }
  // The GPU runs the batches in order: this one starts when the previous one is done.
  v.end_ns = std::max(now, gpu_free_ns_) + dur;
  gpu_free_ns_ = v.end_ns;
  if (a.executed)
    for (StepObserver* o : observers_) o->on_step_begin(v);
  ++async_count_;
  engine_.schedule(v.end_ns, kPriorityStepEnd, EventKind::kStepEnd);
  // step_with_batch_queue returns without waiting while the queue has room and its oldest batch
  // is still running: the next step is scheduled now, after whatever else is due at this instant.
  if (a.executed && async_count_ < 2 && async_steps_[async_head_].view.end_ns > now) {
    schedule_queued_ = true;
    engine_.schedule(now, kPriorityScheduleStep, EventKind::kScheduleStep);
  }
}

void Simulator::end_step_async() {
  EngineCore& eng = *core_;
  AsyncStep& a = async_steps_[async_head_];
  async_head_ = 1 - async_head_;
  --async_count_;
  if (!a.scheduled) {  // a barrier's dummy batch alone
    a.scheduled = true;
    a.dummy = false;
    return end_dummy_step();
  }
  if (a.dummy) ++dummy_steps_;
  // What the model sampled for each of its requests is that request's next planned output
  // (Request::planned_outputs; updates apply in scheduling order).
  eng.update_from_output(outputs_);
  check_step_error("update_from_output()");
  const std::vector<RequestOutput>& delivered = deliver_outputs(a.view, a.executed);
  // A request that finished (or was aborted) at the previous step's end may have been in this
  // step: its object lived until now.
  retired_.clear();
  finish_delivered(delivered);
  if (barrier_ != nullptr) barrier_->on_forward_done(rank_, eng.num_unfinished_requests() > 0);
  next_step_after_end();
}

void Simulator::check_interrupt() const {
  if (interrupt_ && *interrupt_)
    throw RunError(fmt::format("interrupted at simulated time {:.3f} s; no run folder written",
                               static_cast<double>(engine_.now()) / 1e9));
}

void Simulator::report_progress() {
  if (!progress_) return;
  SimProgress p;
  p.now_ns = engine_.now();
  p.requests_done = requests_done_;
  p.num_steps = step_;
  p.num_running = static_cast<std::int64_t>(core_->running().size());
  p.num_waiting = num_waiting();
  progress_(p);
}

void Simulator::handle_timed(const Event& ev) {
  switch (ev.kind) {
    case EventKind::kArrival: {
      // An open-loop arrival pulls the next one, so exactly one is queued at a time.
      const bool open_loop = pending_.open_loop(ev.payload);
      on_arrival(ev.payload);
      if (open_loop) pull_next_open_loop();
      break;
    }
    case EventKind::kStepEnd:
      end_step();
      break;
    case EventKind::kScheduleStep:
      start_step();
      break;
    case EventKind::kClientAbort:
      on_client_timeout(ev.payload);
      break;
    case EventKind::kUser:
      break;
  }
}

// ---- cache_only mode ------------------------------------------------------------------------

void Simulator::handle_cache_only(const Event& ev) {
  if (ev.kind != EventKind::kArrival) return;
  const bool open_loop = pending_.open_loop(ev.payload);
  RequestSpec spec = pending_.take(ev.payload);
  if (open_loop) pull_next_open_loop();
  if (!serve_cache_only(spec, cache_only_outputs_)) {
    source_.on_dropped(spec);
    return;
  }
  std::optional<RequestSpec> follow = source_.on_finished(spec, engine_.now(), cache_only_outputs_);
  if (follow) queue_arrival(std::move(*follow), false);
}

bool Simulator::serve_cache_only(RequestSpec& spec, std::vector<std::int32_t>& outputs) {
  const std::optional<OutputPlan> plan = plan_outputs(spec);
  if (!plan) {
    RequestRecord rec;
    rec.request_id = spec.id;
    rec.arrival_ns = spec.arrival_ns;
    rec.prompt_tokens = spec.num_prompt_tokens();
    rec.reason = FinishReason::kRejected;
    request_done(rec);
    return false;
  }
  spec.materialize_prompt();
  SamplingLimits limits = sampling_limits(spec, *plan);
  if (tier_) {  // its prompt pass, then it finishes
    limits = SamplingLimits{};
    limits.max_tokens = 1;
  }
  Request req(0, std::move(spec.prompt), std::move(limits), {},
              /*output_capacity=*/0);  // never decodes
  const std::int64_t num_prompt = req.num_prompt_tokens();
  std::int64_t computed = 0;
  if (tier_) {
    computed = tier_->serve_cache_only(req, engine_.now());
    check_step_error("a cache_only step with the CPU tier");
  } else {
    computed = core_->cache_only_request(req);
  }
  for (StepObserver* o : observers_) o->on_lookup(num_prompt, computed);
  spec.prompt = req.take_token_ids();  // the prompt (and with the tier its one sampled token)
  spec.prompt.resize(static_cast<std::size_t>(num_prompt));
  RequestRecord rec;
  rec.request_id = spec.id;
  rec.arrival_ns = spec.arrival_ns;
  rec.prompt_tokens = spec.num_prompt_tokens();
  rec.output_tokens = plan->num_outputs;
  rec.first_lookup_hit_tokens = computed;
  rec.reason = plan->reason;
  request_done(rec);
  generated_tokens(spec, rec.output_tokens, outputs);
  return true;
}

std::int32_t scenario_vocab_size(const Scenario& scenario) {
  return scenario.model
             ? static_cast<std::int32_t>(std::max<std::int64_t>(scenario.model->vocab_size, 1))
             : 32000;
}

}  // namespace kvsim
