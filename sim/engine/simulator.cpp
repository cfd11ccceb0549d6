#include "sim/engine/simulator.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/common/assert.h"
#include "core/engine_factory.h"
#include "sim/engine/parallel_sampling.h"

namespace kvsim {

struct Simulator::Live {
  RequestSpec spec;  // prompt moved into `request` while live
  std::unique_ptr<Request> request;
  SimTimeNs first_scheduled_ns = -1;
  SimTimeNs first_token_ns = -1;
  SimTimeNs last_token_ns = -1;
  std::int64_t first_lookup_hit_tokens = 0;
  std::vector<Token> outputs;  // the tokens it will generate, made at admission
  // Parallel sampling (sim/engine/parallel_sampling.h): the sample's index; in fork mode, sample
  // 0's slots of the samples that fork from it, and theirs of sample 0 (-1: none).
  std::int64_t sample = 0;
  std::vector<std::int64_t> fork_children;
  std::int64_t fork_parent = -1;
};

Simulator::Simulator(const Scenario& scenario, RequestSource& source, StepTimeFn step_time)
    : scenario_(scenario),
      source_(source),
      step_time_(std::move(step_time)),
      vocab_size_(scenario_vocab_size(scenario)) {
  core_ = make_engine(scenario.engine_params());
  view_.engine = core_.get();
  view_.out = &out_;
  view_.final_kv_tokens = &final_kv_tokens_;
}

Simulator::~Simulator() = default;

void Simulator::run() {
  if (scenario_.engine.mode == EngineConfig::Mode::kCacheOnly)
    run_cache_only();
  else
    run_timed();
  for (StepObserver* o : observers_) o->on_simulation_end(engine_.now(), *core_);
}

// ---- arrivals -------------------------------------------------------------------------------

void Simulator::queue_arrival(RequestSpec spec, bool open_loop) {
  std::int64_t slot;
  if (!free_pending_.empty()) {
    slot = free_pending_.back();
    free_pending_.pop_back();
    pending_[static_cast<std::size_t>(slot)] = std::move(spec);
    pending_open_loop_[static_cast<std::size_t>(slot)] = open_loop;
  } else {
    slot = static_cast<std::int64_t>(pending_.size());
    pending_.push_back(std::move(spec));
    pending_open_loop_.push_back(open_loop);
  }
  const SimTimeNs t = std::max(pending_[static_cast<std::size_t>(slot)].arrival_ns, engine_.now());
  engine_.schedule(t, kPriorityArrival, EventKind::kArrival, slot);
}

void Simulator::pull_next_open_loop() {
  if (open_loop_done_) return;
  std::optional<RequestSpec> next = source_.next();
  if (!next) {
    open_loop_done_ = true;
    return;
  }
  queue_arrival(std::move(*next), true);
}

namespace {
bool stops_at_eos(const RequestSpec& spec) { return !spec.ignore_eos && spec.eos_token_id; }
}  // namespace

std::int64_t Simulator::final_output_tokens(const RequestSpec& spec) const {
  const std::int64_t n =
      std::min<std::int64_t>(spec.max_tokens, scenario_.scheduler.max_model_len -
                                                  spec.num_prompt_tokens());
  return std::max<std::int64_t>(n, 1);
}

FinishReason Simulator::final_reason(const RequestSpec& spec) const {
  // vLLM checks the length cap before EOS: an EOS that lands on max_model_len is a "length".
  const bool capped = spec.num_prompt_tokens() + final_output_tokens(spec) >=
                      scenario_.scheduler.max_model_len;
  return stops_at_eos(spec) && !capped ? FinishReason::kStop : FinishReason::kLength;
}

SamplingLimits Simulator::sampling_limits(const RequestSpec& spec) const {
  SamplingLimits limits;
  // Stopping at EOS: no client max_tokens, so vLLM's default (the rest of the context).
  limits.max_tokens = stops_at_eos(spec) ? scenario_.scheduler.max_model_len -
                                               spec.num_prompt_tokens()
                                         : spec.max_tokens;
  limits.ignore_eos = spec.ignore_eos;
  limits.eos_token_id = spec.eos_token_id;
  return limits;
}

void Simulator::generated_tokens(const RequestSpec& spec, std::int64_t n,
                                 std::vector<Token>& out) const {
  out.resize(static_cast<std::size_t>(n));
  fill_output_tokens(out.data(), spec.output_seed, n, vocab_size_, spec.eos_token_id.value_or(-1));
  if (stops_at_eos(spec) && n >= spec.max_tokens)
    out[static_cast<std::size_t>(spec.max_tokens - 1)] = *spec.eos_token_id;
}

bool Simulator::reject_if_invalid(const RequestSpec& spec) {
  const auto prompt = spec.num_prompt_tokens();
  if (prompt > 0 && spec.max_tokens >= 1 &&
      prompt + spec.max_tokens <= scenario_.scheduler.max_model_len &&
      core_->admission_error(prompt, prompt + final_output_tokens(spec)) == nullptr)
    return false;
  RequestRecord rec;
  rec.request_id = spec.id;
  rec.arrival_ns = spec.arrival_ns;
  rec.prompt_tokens = prompt;
  rec.reason = FinishReason::kRejected;
  request_done(rec);
  return true;
}

void Simulator::request_done(const RequestRecord& rec) {
  ++requests_done_;
  for (StepObserver* o : observers_) o->on_request_done(rec);
}

std::int64_t Simulator::add_live(RequestSpec spec, std::int64_t sample) {
  std::int64_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    slot = static_cast<std::int64_t>(live_.size());
    live_.emplace_back();
    final_kv_tokens_.push_back(0);
    request_ids_.push_back(0);
  }
  const auto s = static_cast<std::size_t>(slot);
  Live& l = live_[s];
  final_kv_tokens_[s] = spec.num_prompt_tokens() + final_output_tokens(spec) - 1;
  request_ids_[s] = spec.id;
  l.spec = std::move(spec);
  l.request.reset();
  l.first_scheduled_ns = l.first_token_ns = l.last_token_ns = -1;
  l.first_lookup_hit_tokens = 0;
  l.sample = sample;
  l.fork_children.clear();
  l.fork_parent = -1;
  return slot;
}

void Simulator::on_arrival(std::int64_t pending_slot) {
  RequestSpec spec = std::move(pending_[static_cast<std::size_t>(pending_slot)]);
  free_pending_.push_back(pending_slot);
  const PerRequestConfig& pr = scenario_.workload.per_request;
  const bool fork = pr.parallel_sampling == PerRequestConfig::ParallelSampling::kFork;
  std::int64_t parent = -1;
  for (std::int64_t i = 0; i < pr.n; ++i) {
    // Sample i (parallel_sampling.h): the last one takes the spec, the others a copy.
    RequestSpec sample;
    if (i + 1 < pr.n)
      sample = spec;
    else
      sample = std::move(spec);
    sample.id = sample_request_id(sample.id, pr.n, i);
    sample.output_seed = sample_output_seed(sample.output_seed, i);
    if (reject_if_invalid(sample)) continue;
    const std::int64_t slot = add_live(std::move(sample), i);
    if (fork && i > 0 && parent >= 0) {
      live_[static_cast<std::size_t>(slot)].fork_parent = parent;
      live_[static_cast<std::size_t>(parent)].fork_children.push_back(slot);
      continue;  // it enters the engine with its parent
    }
    if (i == 0) parent = slot;
    unadmitted_.push_back(slot);  // the scheduler's waiting queue gets it in admit_waiting()
  }
  if (!step_in_flight_ && !schedule_queued_) {
    schedule_queued_ = true;
    engine_.schedule(engine_.now(), kPriorityScheduleStep, EventKind::kScheduleStep);
  }
}

void Simulator::make_request(std::int64_t slot) {
  const auto s = static_cast<std::size_t>(slot);
  Live& l = live_[s];
  RequestSpec& spec = l.spec;
  spec.materialize_prompt();
  const std::int64_t num_outputs = final_output_tokens(spec);
  generated_tokens(spec, num_outputs, l.outputs);
  SamplingLimits limits = sampling_limits(spec);  // before the prompt moves
  // Room for exactly the tokens it will generate (a stop-at-EOS request's max_tokens is the
  // rest of the context).
  l.request = std::make_unique<Request>(slot, std::move(spec.prompt), std::move(limits),
                                        std::vector<MMPlaceholder>{}, num_outputs);
  l.request->oracle_final_num_tokens = l.request->num_tokens() + num_outputs;
  // Size the per-request tables once: the step loop then never grows them.
  core_->reserve_request(*l.request, final_kv_tokens_[s] + 1);
  spec.prompt.clear();
}

void Simulator::admit(std::int64_t slot) {
  make_request(slot);
  Live& l = live_[static_cast<std::size_t>(slot)];
  if (l.fork_children.empty()) {
    core_->add_request(*l.request);
    return;
  }
  // Fork mode: the children's first tokens come with their parent's first one.
  fork_requests_.clear();
  for (std::int64_t c : l.fork_children) {
    make_request(c);
    Live& child = live_[static_cast<std::size_t>(c)];
    child.request->sampled_token = child.outputs.front();
    fork_requests_.push_back(child.request.get());
  }
  core_->add_forking_request(*l.request, fork_requests_);
}

void Simulator::admit_waiting() {
  // One schedule() looks at most at the first max_num_seqs - running waiting requests: it stops
  // before looking at one more once running reaches max_num_seqs, and at the first that does not
  // fit (which is then within that count too). Arrivals beyond those wait here, in arrival order,
  // with their prompts unmade.
  const EngineCore& eng = *core_;
  const std::int64_t examined = std::max<std::int64_t>(
      scenario_.scheduler.max_num_seqs - static_cast<std::int64_t>(eng.running().size()), 0);
  while (!unadmitted_.empty() && eng.num_waiting() < examined) {
    admit(unadmitted_.front());
    unadmitted_.pop_front();
  }
}

std::int64_t Simulator::num_waiting() const {
  return core_->num_waiting() + static_cast<std::int64_t>(unadmitted_.size());
}

// ---- timed mode -----------------------------------------------------------------------------

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

void Simulator::start_step() {
  schedule_queued_ = false;
  if (step_in_flight_) return;
  EngineCore& eng = *core_;
  admit_waiting();
  if (eng.num_unfinished_requests() == 0) return;
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
  v.step = step_;
  v.start_ns = now;
  v.prefill_tokens = v.decode_tokens = v.num_prefill_seqs = v.sum_context_tokens = 0;
  v.sum_context_sq = 0;
  v.attention_pairs = 0;
  v.outputs = {};
  v.prev_token_ns = {};
  v.request_id_of_index = request_ids_;
  v.num_waiting = num_waiting();
  for (const ScheduledRequest& sr : out_.scheduled) {
    Request& r = *sr.request;
    Live& l = live_[static_cast<std::size_t>(r.index())];
    // What the model samples at this step's end for a request whose tokens are then all
    // computed (read by update_from_output).
    if (sr.num_computed_tokens + sr.num_tokens == r.num_tokens())
      r.sampled_token = l.outputs[static_cast<std::size_t>(r.num_output_tokens())];
    if (l.first_scheduled_ns < 0) {
      l.first_scheduled_ns = now;
      l.first_lookup_hit_tokens = sr.num_computed_tokens;
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
  SimTimeNs dur = step_time_ ? step_time_(v) : 1;
  if (dur < 1) dur = 1;  // time must advance for the run to make progress
  v.end_ns = now + dur;
  step_start_ns_ = now;
  for (StepObserver* o : observers_) o->on_step_begin(v);
  step_in_flight_ = true;
  engine_.schedule(v.end_ns, kPriorityStepEnd, EventKind::kStepEnd);
}

void Simulator::end_step() {
  EngineCore& eng = *core_;
  const SimTimeNs now = engine_.now();
  eng.update_from_output(outputs_);
  prev_token_ns_.clear();
  for (const RequestOutput& o : outputs_) {
    Live& l = live_[static_cast<std::size_t>(o.request->index())];
    prev_token_ns_.push_back(l.last_token_ns);
    if (l.first_token_ns < 0) l.first_token_ns = now;
    l.last_token_ns = now;
  }
  StepView& v = view_;
  v.outputs = outputs_;
  v.prev_token_ns = prev_token_ns_;
  v.request_id_of_index = request_ids_;
  v.num_waiting = num_waiting();
  for (StepObserver* o : observers_) o->on_step(v);
  step_in_flight_ = false;
  ++step_;
  if (check_invariants_) eng.check_invariants();
  for (const RequestOutput& o : outputs_) {
    if (!o.finished) continue;
    const RequestStatus st = o.request->status;
    finish_request(o.request->index(), st == RequestStatus::kFinishedStopped ? FinishReason::kStop
                                       : st == RequestStatus::kFinishedAborted
                                           ? FinishReason::kAbort
                                           : FinishReason::kLength);
  }
  // The next step starts now, after whatever else is due at this instant (arrivals): when
  // nothing is, start it here instead of through the queue (the same order, one event less).
  if (engine_.empty() || engine_.peek().time_ns > now) {
    start_step();
    return;
  }
  schedule_queued_ = true;
  engine_.schedule(now, kPriorityScheduleStep, EventKind::kScheduleStep);
}

void Simulator::finish_request(std::int64_t slot, FinishReason reason) {
  const auto s = static_cast<std::size_t>(slot);
  Live& l = live_[s];
  Request& r = *l.request;
  RequestRecord rec;
  rec.request_id = l.spec.id;
  rec.arrival_ns = l.spec.arrival_ns;
  rec.prompt_tokens = r.num_prompt_tokens();
  rec.output_tokens = r.num_output_tokens();
  rec.first_scheduled_ns = l.first_scheduled_ns;
  rec.first_token_ns = l.first_token_ns;
  rec.finish_ns = engine_.now();
  rec.first_lookup_hit_tokens = l.first_lookup_hit_tokens;
  rec.num_preemptions = r.num_preemptions;
  rec.reason = reason;
  request_done(rec);
  // Give the spec its prompt back for the source (multi-turn builds the next turn from it):
  // the request's own buffer, cut after the prompt once the outputs are copied out.
  // (Its outputs are the first num_output_tokens of l.outputs, which it sampled.)
  const auto num_prompt = static_cast<std::size_t>(r.num_prompt_tokens());
  const auto num_outputs = static_cast<std::size_t>(r.num_output_tokens());
  std::vector<Token> toks = r.take_token_ids();
  toks.resize(num_prompt);
  l.spec.prompt = std::move(toks);
  // A session goes on from its request's first sample only.
  std::optional<RequestSpec> follow =
      l.sample > 0 ? std::nullopt
                   : source_.on_finished(l.spec, engine_.now(),
                                         std::span<const Token>(l.outputs).first(num_outputs));
  l.request.reset();
  l.spec = RequestSpec{};
  free_slots_.push_back(slot);
  if (follow) queue_arrival(std::move(*follow), false);
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

void Simulator::run_timed() {
  pull_next_open_loop();
  std::uint64_t n = 0;
  while (auto ev = engine_.next()) {
    switch (ev->kind) {
      case EventKind::kArrival: {
        // An open-loop arrival pulls the next one, so exactly one is queued at a time.
        const bool open_loop = pending_open_loop_[static_cast<std::size_t>(ev->payload)];
        on_arrival(ev->payload);
        if (open_loop) pull_next_open_loop();
        break;
      }
      case EventKind::kStepEnd:
        end_step();
        break;
      case EventKind::kScheduleStep:
        start_step();
        break;
      case EventKind::kUser:
        break;
    }
    if (++n % progress_every_ == 0) report_progress();
    // Every event (one load): a signal must stop even a run of slow steps (kvsim validate).
    if (interrupt_ != nullptr && *interrupt_ != 0) [[unlikely]] check_interrupt();
  }
  KVSIM_ASSERT(unadmitted_.empty(), "arrivals left unadmitted after the last step");
  if (core_->num_unfinished_requests() > 0) {
    const Request* r = core_->num_waiting() > 0 ? core_->first_waiting()
                                                  : core_->running().front();
    fail_cannot_fit(*r);
  }
  report_progress();
}

// ---- cache_only mode ------------------------------------------------------------------------

void Simulator::run_cache_only() {
  std::vector<std::int32_t> outputs;
  pull_next_open_loop();
  std::uint64_t n = 0;
  while (auto ev = engine_.next()) {
    if (ev->kind != EventKind::kArrival) continue;
    const auto ps = static_cast<std::size_t>(ev->payload);
    const bool open_loop = pending_open_loop_[ps];
    RequestSpec spec = std::move(pending_[ps]);
    free_pending_.push_back(ev->payload);
    if (open_loop) pull_next_open_loop();
    if (reject_if_invalid(spec)) continue;
    spec.materialize_prompt();
    SamplingLimits limits = sampling_limits(spec);  // before the prompt moves
    Request req(0, std::move(spec.prompt), std::move(limits), {},
                /*output_capacity=*/0);  // never decodes
    const std::int64_t computed = core_->cache_only_request(req);
    for (StepObserver* o : observers_) o->on_lookup(req.num_tokens(), computed);
    spec.prompt = req.take_token_ids();  // nothing was generated: the prompt
    RequestRecord rec;
    rec.request_id = spec.id;
    rec.arrival_ns = spec.arrival_ns;
    rec.prompt_tokens = spec.num_prompt_tokens();
    rec.output_tokens = final_output_tokens(spec);
    rec.first_lookup_hit_tokens = computed;
    rec.reason = final_reason(spec);
    request_done(rec);
    generated_tokens(spec, rec.output_tokens, outputs);
    std::optional<RequestSpec> follow = source_.on_finished(spec, engine_.now(), outputs);
    if (follow) queue_arrival(std::move(*follow), false);
    if (++n % progress_every_ == 0) report_progress();
    if (interrupt_ != nullptr && *interrupt_ != 0) [[unlikely]] check_interrupt();
  }
  report_progress();
}

std::int32_t scenario_vocab_size(const Scenario& scenario) {
  return scenario.model
             ? static_cast<std::int32_t>(std::max<std::int64_t>(scenario.model->vocab_size, 1))
             : 32000;
}

}  // namespace kvsim
