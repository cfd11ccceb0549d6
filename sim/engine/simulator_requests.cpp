// The request life of the simulator: arrivals, the server's rule, admission into the
// scheduler's waiting queue, client aborts, and finished requests (the step loop is in
// simulator.cpp).
#include <fmt/format.h>

#include <algorithm>

#include "core/common/assert.h"
#include "sim/engine/parallel_sampling.h"
#include "sim/engine/simulator.h"

namespace kvsim {

// ---- arrivals -------------------------------------------------------------------------------

void Simulator::queue_arrival(RequestSpec spec, bool open_loop) {
  const std::int64_t slot = pending_.put(std::move(spec), open_loop);
  const SimTimeNs t = std::max(pending_.at(slot).arrival_ns, engine_.now());
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

std::optional<Simulator::OutputPlan> Simulator::plan_outputs(const RequestSpec& spec) const {
  KVSIM_ASSERT(spec.output_tokens >= 1);
  const std::int64_t mml = scenario_.scheduler.max_model_len;
  const std::optional<std::int64_t> max_tokens =
      admission_.engine_max_tokens(spec.num_prompt_tokens(), spec.max_tokens, mml);
  if (!max_tokens) return std::nullopt;
  OutputPlan p;
  p.max_tokens = *max_tokens;
  p.num_outputs =
      spec.stops_at_eos() ? std::min<std::int64_t>(*max_tokens, spec.output_tokens) : *max_tokens;
  // vLLM checks the length limits before EOS (v0.7.2 vllm/v1/core/scheduler.py:483-494): an EOS
  // on the last token max_tokens or max_model_len allows is a "length"; v0.20 checks EOS first.
  const bool eos_reached = spec.stops_at_eos() && p.num_outputs == spec.output_tokens;
  p.reason = p.num_outputs < *max_tokens || (eos_reached && stop_tokens_before_length_)
                 ? FinishReason::kStop
                 : FinishReason::kLength;
  // An engine that can never serve it (a contiguous reservation larger than the pool) refuses it
  // too.
  const std::int64_t prompt = spec.num_prompt_tokens();
  if (core_->admission_error(prompt, prompt + p.num_outputs) != nullptr) return std::nullopt;
  return p;
}

SamplingLimits Simulator::sampling_limits(const RequestSpec& spec, const OutputPlan& plan) {
  SamplingLimits limits;
  limits.max_tokens = plan.max_tokens;
  limits.ignore_eos = spec.ignore_eos;
  limits.eos_token_id = spec.eos_token_id;
  return limits;
}

void Simulator::generated_tokens(const RequestSpec& spec, std::int64_t n,
                                 std::vector<Token>& out) const {
  out.resize(static_cast<std::size_t>(n));
  fill_output_tokens(out.data(), spec.output_seed, n, vocab_size_, spec.eos_token_id.value_or(-1));
  if (spec.stops_at_eos() && n >= spec.output_tokens)
    out[static_cast<std::size_t>(spec.output_tokens - 1)] = *spec.eos_token_id;
}

void Simulator::reject(const RequestSpec& spec, std::int64_t sample) {
  RequestRecord rec;
  rec.request_id = spec.id;
  rec.arrival_ns = spec.arrival_ns;
  rec.prompt_tokens = spec.num_prompt_tokens();
  rec.reason = FinishReason::kRejected;
  request_done(rec);
  if (sample == 0) source_.on_dropped(spec);  // a session follows its request's first sample
}

void Simulator::request_done(const RequestRecord& rec) {
  ++requests_done_;
  for (StepObserver* o : observers_) o->on_request_done(rec);
}

std::int64_t Simulator::add_live(RequestSpec spec, const OutputPlan& plan, std::int64_t sample) {
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
  final_kv_tokens_[s] = spec.num_prompt_tokens() + plan.num_outputs - 1;
  request_ids_[s] = spec.id;
  l.spec = std::move(spec);
  l.plan = plan;
  l.request.reset();
  l.first_scheduled_ns = l.first_token_ns = l.last_token_ns = -1;
  l.first_lookup_hit_tokens = 0;
  l.sample = sample;
  l.fork_children.clear();
  l.fork_parent = -1;
  if (l.spec.client_timeout_ns >= 0) {
    KVSIM_ASSERT(slot <= 0xffffffff);
    const SimTimeNs t =
        std::max(add_time_saturating(l.spec.arrival_ns, l.spec.client_timeout_ns), engine_.now());
    engine_.schedule(t, kPriorityClientAbort, EventKind::kClientAbort,
                     static_cast<std::int64_t>(std::uint64_t{l.generation} << 32 |
                                               static_cast<std::uint64_t>(slot)));
  }
  return slot;
}

void Simulator::on_arrival(std::int64_t pending_slot) {
  RequestSpec spec = pending_.take(pending_slot);
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
    const std::optional<OutputPlan> plan = plan_outputs(sample);
    if (!plan) {
      reject(sample, i);
      continue;
    }
    const std::int64_t slot = add_live(std::move(sample), *plan, i);
    if (fork && i > 0 && parent >= 0) {
      live_[static_cast<std::size_t>(slot)].fork_parent = parent;
      live_[static_cast<std::size_t>(parent)].fork_children.push_back(slot);
      continue;  // it enters the engine with its parent
    }
    if (i == 0) parent = slot;
    unadmitted_.push_back(slot);  // the scheduler's waiting queue gets it in admit_waiting()
  }
  // (Async: a busy engine is blocked on its oldest step, and sees arrivals when it ends.)
  if (!step_in_flight_ && !schedule_queued_ && async_count_ == 0) {
    schedule_queued_ = true;
    engine_.schedule(engine_.now(), kPriorityScheduleStep, EventKind::kScheduleStep);
  }
}

void Simulator::make_request(std::int64_t slot) {
  const auto s = static_cast<std::size_t>(slot);
  Live& l = live_[s];
  RequestSpec& spec = l.spec;
  const std::int64_t num_outputs = l.plan.num_outputs;
  spec.materialize_prompt(num_outputs);
  generated_tokens(spec, num_outputs, l.outputs);
  SamplingLimits limits = sampling_limits(spec, l.plan);
  // Room for exactly the tokens it will generate (a stop-at-EOS request's max_tokens may be the
  // rest of the context).
  l.request = std::make_unique<Request>(slot, std::move(spec.prompt), std::move(limits),
                                        std::vector<MMPlaceholder>{}, num_outputs);
  l.request->oracle_final_num_tokens = l.request->num_tokens() + num_outputs;
  l.request->planned_outputs = l.outputs;  // every engine reads its samples from it
  if (pd_) pd_->on_admit(*l.request, request_ids_[s]);  // its id and kv_transfer_params
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
    fork_requests_.push_back(child.request.get());
  }
  core_->add_forking_request(*l.request, fork_requests_);
}

void Simulator::admit_waiting() {
  // One schedule() looks at most at the first max_num_seqs - running waiting requests: it stops
  // before looking at one more once running reaches max_num_seqs, and at the first that does not
  // fit (which is then within that count too). Arrivals beyond those wait here, in arrival order,
  // with their prompts unmade.
  // With the CPU tier or P/D the loop goes on past requests that start a load (they do not
  // run), so it may look at any of them: every arrival is handed over.
  const EngineCore& eng = *core_;
  const std::int64_t examined =
      tier_ || pd_ ? std::numeric_limits<std::int64_t>::max()
            : std::max<std::int64_t>(
                  scenario_.scheduler.max_num_seqs - static_cast<std::int64_t>(eng.running().size()),
                  0);
  while (!unadmitted_.empty()) {
    const std::int64_t slot = unadmitted_.front();
    if (unadmitted_gone_ > 0 && live_[static_cast<std::size_t>(slot)].client_gone) {
      // Aborted while it waited here.
      unadmitted_.pop_front();
      --unadmitted_gone_;
      release_slot(slot, true);
      continue;
    }
    if (eng.num_waiting() >= examined) break;
    admit(slot);
    unadmitted_.pop_front();
  }
}

// ---- client aborts --------------------------------------------------------------------------

void Simulator::on_client_timeout(std::int64_t payload) {
  const auto slot = static_cast<std::int64_t>(static_cast<std::uint64_t>(payload) & 0xffffffff);
  const auto generation = static_cast<std::uint32_t>(static_cast<std::uint64_t>(payload) >> 32);
  Live& l = live_[static_cast<std::size_t>(slot)];
  if (l.generation != generation || l.client_gone) return;  // finished (or aborted) before
  l.client_gone = true;
  request_done(record_of(slot, FinishReason::kAbort));
  if (!l.request) {
    // Still in the simulator's part of the waiting queue: dropped from its front now, else when
    // admit_waiting() reaches it.
    ++unadmitted_gone_;
    while (!unadmitted_.empty() &&
           live_[static_cast<std::size_t>(unadmitted_.front())].client_gone) {
      release_slot(unadmitted_.front(), true);
      unadmitted_.pop_front();
      --unadmitted_gone_;
    }
    return;
  }
  // vLLM's EngineCore takes aborts between steps: the step in flight (under async scheduling,
  // the oldest of the batch queue) ends first.
  if (step_in_flight_ || async_count_ > 0 || pd_sleeping_) {
    pending_aborts_.push_back(slot);
    return;
  }
  core_->abort_request(*l.request);
  release_slot(slot, true);
}

// ---- finished requests ----------------------------------------------------------------------

RequestRecord Simulator::record_of(std::int64_t slot, FinishReason reason) const {
  const Live& l = live_[static_cast<std::size_t>(slot)];
  const Request* r = l.request.get();  // null while it waits in the simulator's queue
  RequestRecord rec;
  rec.request_id = l.spec.id;
  rec.arrival_ns = l.spec.arrival_ns;
  rec.prompt_tokens = r ? r->num_prompt_tokens() : l.spec.num_prompt_tokens();
  rec.output_tokens = r ? r->num_output_tokens() : 0;
  rec.first_scheduled_ns = l.first_scheduled_ns;
  rec.first_token_ns = l.first_token_ns;
  rec.finish_ns = engine_.now();
  rec.first_lookup_hit_tokens = l.first_lookup_hit_tokens;
  rec.num_preemptions = r ? r->num_preemptions : 0;
  rec.reason = reason;
  return rec;
}

void Simulator::release_slot(std::int64_t slot, bool dropped) {
  Live& l = live_[static_cast<std::size_t>(slot)];
  if (dropped && l.sample == 0) source_.on_dropped(l.spec);
  if (pd_ && dropped && !l.request) pd_->on_dropped(request_ids_[static_cast<std::size_t>(slot)]);
  // A request whose blocks the scheduler holds for the CPU tier (a delayed free) keeps its
  // object and its slot (the connector and the worker know it by both) until it is let go.
  const bool parked = (tier_ && l.request && tier_->holds(*l.request)) ||
                      (pd_ && l.request && pd_->holds(*l.request));
  if (parked && tier_)
    tier_->park(std::move(l.request), slot);
  else if (parked)
    pd_->park(std::move(l.request), slot);
  else if (async_count_ > 0 && l.request)
    retired_.push_back(std::move(l.request));  // a step in flight may still name it
  else
    l.request.reset();
  l.spec = RequestSpec{};
  l.client_gone = false;
  ++l.generation;  // a pending timeout of the request that held it no longer matches
  if (!parked) free_slots_.push_back(slot);
}

void Simulator::finish_request(std::int64_t slot, FinishReason reason) {
  Live& l = live_[static_cast<std::size_t>(slot)];
  Request& r = *l.request;
  request_done(record_of(slot, reason));
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
  release_slot(slot, false);
  if (follow) queue_arrival(std::move(*follow), false);
}

}  // namespace kvsim
