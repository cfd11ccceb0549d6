#include "sim/cluster/cluster_simulator.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <limits>

#include "core/common/assert.h"
#include "sim/cluster/cluster_pd.h"
#include "sim/engine/parallel_sampling.h"

namespace kvsim {

/// A replica's own source: nothing (its requests are routed to it).
class ClusterSimulator::EmptySource final : public RequestSource {
 public:
  std::optional<RequestSpec> next() override { return std::nullopt; }
};

/// A replica's source in a timed cluster: no requests of its own; a finished request's follow-up
/// turn goes to the cluster's source and comes back as a cluster arrival (routed like any other).
class ClusterSimulator::ForwardSource final : public RequestSource {
 public:
  /// `replica` >= 0: a P/D replica's (a request P hands on to D is not the client's end).
  explicit ForwardSource(ClusterSimulator& c, std::int32_t replica = -1) : c_(c), r_(replica) {}
  std::optional<RequestSpec> next() override { return std::nullopt; }
  std::optional<RequestSpec> on_finished(const RequestSpec& done, SimTimeNs finish_ns,
                                         std::span<const std::int32_t> outputs) override {
    if (r_ >= 0 && !c_.pd_->ends_here(r_, done.id)) return std::nullopt;
    std::optional<RequestSpec> follow = c_.source_.on_finished(done, finish_ns, outputs);
    if (follow) c_.queue_arrival(std::move(*follow), false, finish_ns);
    return std::nullopt;
  }
  void on_dropped(const RequestSpec& done) override { c_.source_.on_dropped(done); }

 private:
  ClusterSimulator& c_;
  std::int32_t r_;
};

/// Forwards replica r's requests to the cluster's observers, with r as the current replica;
/// keeps r's figures at its last step end (the polled views) and its router-side in-flight count.
class ClusterSimulator::Tap final : public StepObserver {
 public:
  Tap(ClusterSimulator& c, std::int32_t r) : c_(c), r_(r) {}
  void on_request_done(const RequestRecord& rec) override {
    if (c_.timed_)
      c_.on_replica_done(r_, rec.request_id / static_cast<std::uint64_t>(c_.samples_per_request_));
    // P/D: a client's request is recorded once, where it ended (the cluster rewrites it).
    if (c_.pd_) return c_.pd_->on_record(r_, rec);
    c_.current_ = r_;
    ++c_.requests_done_;
    for (StepObserver* o : c_.cluster_observers_) o->on_request_done(rec);
  }
  void on_step(const StepView& v) override {
    // vLLM publishes the step's KV events at its end (Scheduler.update_from_output).
    if (c_.reads_kv_events_) c_.take_kv_events(r_, v.end_ns);
    Pool& pool = c_.pool_of(r_);
    const bool books = pool.books;
    if (books || c_.pd_)
      for (std::size_t i = 0; i < v.outputs.size(); ++i)
        if (v.prev_token_ns[i] < 0) {  // the request's first token
          const std::uint64_t id =
              v.request_id_of_index[static_cast<std::size_t>(v.outputs[i].request->index())];
          if (books)
            pool.router->on_first_token(r_ - pool.first,
                                        id / static_cast<std::uint64_t>(c_.samples_per_request_));
          if (c_.pd_) c_.pd_->on_first_token(r_, id, v.start_ns);
        }
    ReplicaView& s = c_.step_end_[static_cast<std::size_t>(r_)];
    s.num_waiting = v.num_waiting;
    s.num_running = static_cast<std::int64_t>(v.engine->running().size());
    s.kv_usage = v.engine->pool_stats().usage;
    if (c_.view_delay_ns_ > 0)
      c_.step_history_[static_cast<std::size_t>(r_)].emplace_back(v.end_ns, s);
    // The cluster's observers see every replica's steps, numbered from 1 (a cluster-wide
    // collector records no step rows: each replica's are its own).
    StepView w = v;
    w.step = v.step + 1;
    for (StepObserver* o : c_.cluster_observers_) o->on_step(w);
  }
  void on_empty_step(const StepView& v) override {
    for (StepObserver* o : c_.cluster_observers_) o->on_empty_step(v);
  }
  void on_lookup(std::int64_t q, std::int64_t h) override {
    for (StepObserver* o : c_.cluster_observers_) o->on_lookup(q, h);
  }

 private:
  ClusterSimulator& c_;
  std::int32_t r_;
};

const Scenario& ClusterSimulator::replica_scenario(const Scenario& scenario, std::int32_t r) {
  const ReplicaOverride* o = scenario.cluster.override_of(r);
  return o != nullptr ? *o->scenario : scenario;
}

ClusterSimulator::ClusterSimulator(const Scenario& scenario, RequestSource& source,
                                   StepTimeFn step_time)
    : ClusterSimulator(scenario, source,
                       std::vector<StepTimeFn>(static_cast<std::size_t>(std::max<std::int64_t>(
                                                   scenario.cluster.replicas, 1)),
                                               step_time)) {}

ClusterSimulator::ClusterSimulator(const Scenario& scenario, RequestSource& source,
                                   std::vector<StepTimeFn> step_times)
    : scenario_(scenario),
      source_(source),
      empty_source_(std::make_unique<EmptySource>()),
      forward_source_(std::make_unique<ForwardSource>(*this)),
      timed_(scenario.engine.mode == EngineConfig::Mode::kTimed) {
  const auto n = static_cast<std::int32_t>(scenario.cluster.replicas);
  KVSIM_ASSERT(n >= 1);
  RequestSource& replica_source =
      timed_ ? static_cast<RequestSource&>(*forward_source_) : *empty_source_;
  KVSIM_ASSERT(step_times.size() == static_cast<std::size_t>(n));
  if (scenario.cluster.disaggregated())
    for (std::int32_t r = 0; r < n; ++r)
      pd_sources_.push_back(std::make_unique<ForwardSource>(*this, r));
  for (std::int32_t r = 0; r < n; ++r) {
    replicas_.push_back(std::make_unique<Simulator>(
        replica_scenario(scenario, r),
        pd_sources_.empty() ? replica_source : *pd_sources_[static_cast<std::size_t>(r)],
        timed_ ? std::move(step_times[static_cast<std::size_t>(r)]) : StepTimeFn{}));
    taps_.push_back(std::make_unique<Tap>(*this, r));
  }
  loads_.assign(static_cast<std::size_t>(n), ReplicaLoad{});
  step_end_.assign(static_cast<std::size_t>(n), ReplicaView{});
  if (timed_ && scenario.cluster.router.view_delay_ns > 0) {
    view_delay_ns_ = scenario.cluster.router.view_delay_ns;
    step_history_.resize(static_cast<std::size_t>(n));
    delayed_view_.assign(static_cast<std::size_t>(n), ReplicaView{});
  }
  samples_per_request_ = scenario.workload.per_request.n;
  RouterEnv env;
  env.moe_model = scenario.model && scenario.model->num_experts > 0;
  if (timed_ && dp_lockstep(scenario.cluster, env.moe_model)) {
    std::vector<Simulator*> ranks;
    for (auto& r : replicas_) ranks.push_back(r.get());
    lockstep_ = std::make_unique<DpLockstep>(ranks);
    for (std::int32_t r = 0; r < n; ++r)
      replicas_[static_cast<std::size_t>(r)]->set_forward_barrier(lockstep_.get(), r);
  }
  env.block_size = scenario.cache.sizing.block_size;
  env.num_gpu_blocks = scenario.num_gpu_blocks;
  env.samples_per_request = timed_ ? samples_per_request_ : 1;  // cache_only serves one
  // The pools: every replica behind one router, or P/D's prefill and decode pools.
  pool_index_.assign(static_cast<std::size_t>(n), 0);
  if (scenario.cluster.disaggregated()) {
    const auto p = static_cast<std::int32_t>(scenario.cluster.prefill_replicas);
    add_pool(0, p, make_pd_router(scenario.cluster.router, p, env, false));
    add_pool(p, n - p, make_pd_router(scenario.cluster.router, n - p, env, true));
    for (std::int32_t r = p; r < n; ++r) pool_index_[static_cast<std::size_t>(r)] = 1;
  } else {
    add_pool(0, n, make_router(scenario.cluster.router, n, env));
    KVSIM_ASSERT(pools_[0].router->kv_index_removal().has_value() ==
                 router_reads_kv_events(scenario.cluster.router));
  }
  for (Pool& pool : pools_) {
    pool.books = pool.router->books_requests();
    pool.tracks_in_flight = pool.router->tracks_in_flight();
    if (const std::optional<KvBlockIndex::Removal> removal = pool.router->kv_index_removal()) {
      pool.kv_index = std::make_unique<KvBlockIndex>(pool.size, *removal);
      reads_kv_events_ = true;
    }
  }
  if (reads_kv_events_) {
    kv_logs_.resize(static_cast<std::size_t>(n));
    kv_delay_ns_ = timed_ ? scenario.cluster.router.kv_event_delay_ns : 0;
    for (std::int32_t r = 0; r < n; ++r) {
      if (!pool_of(r).kv_index) continue;
      // (The parser refuses such a router for a family without KV events.)
      const bool publishes = replicas_[static_cast<std::size_t>(r)]->set_kv_event_log(
          &kv_logs_[static_cast<std::size_t>(r)]);
      KVSIM_ASSERT(publishes, "a router that reads KV events over an engine without them");
    }
  }
  if (scenario.cluster.disaggregated()) {
    pd_ = std::make_unique<Pd>(*this, scenario_);
    pd_->setup();
  }
}

void ClusterSimulator::add_pool(std::int32_t first, std::int32_t size,
                                std::unique_ptr<Router> router) {
  Pool& pool = pools_.emplace_back();
  pool.first = first;
  pool.size = size;
  pool.router = std::move(router);
}

void ClusterSimulator::on_replica_done(std::int32_t r, std::uint64_t request_id) {
  Pool& pool = pool_of(r);
  const std::int64_t left = --loads_[static_cast<std::size_t>(r)].in_flight;
  if (pool.tracks_in_flight) pool.router->on_in_flight(r - pool.first, left);
  if (pool.books) pool.router->on_finished(r - pool.first, request_id);
}

void ClusterSimulator::take_kv_events(std::int32_t r, SimTimeNs now_ns) {
  std::vector<KvEvent>& log = kv_logs_[static_cast<std::size_t>(r)];
  if (log.empty()) return;
  if (kv_delay_ns_ == 0) {
    Pool& pool = pool_of(r);
    pool.kv_index->apply(r - pool.first, log);
    log.clear();
    return;
  }
  KvBatch& b = kv_in_transit_.emplace_back();
  b.due_ns = now_ns + kv_delay_ns_;
  b.replica = r;
  if (!kv_spare_.empty()) {
    b.events.swap(kv_spare_.back());
    kv_spare_.pop_back();
  }
  b.events.swap(log);  // the log takes the spare (empty) buffer
}

void ClusterSimulator::apply_due_kv_events() {
  while (!kv_in_transit_.empty() && kv_in_transit_.front().due_ns <= now_ns_) {
    KvBatch& b = kv_in_transit_.front();
    Pool& pool = pool_of(b.replica);
    pool.kv_index->apply(b.replica - pool.first, b.events);
    b.events.clear();
    kv_spare_.push_back(std::move(b.events));
    kv_in_transit_.pop_front();
  }
}

void ClusterSimulator::set_check_invariants(bool on) {
  for (auto& r : replicas_) r->set_check_invariants(on);
}

void ClusterSimulator::check_interrupt() const {
  if (interrupt_ != nullptr && *interrupt_ != 0) [[unlikely]]
    throw RunError(fmt::format("interrupted at simulated time {:.3f} s; no run folder written",
                               static_cast<double>(now_ns_) / 1e9));
}

ClusterSimulator::~ClusterSimulator() = default;

void ClusterSimulator::attach_replica(std::int32_t r, StepObserver* o) {
  replicas_[static_cast<std::size_t>(r)]->attach(o);
}

std::map<std::string, std::int64_t> ClusterSimulator::decisions_by_branch() const {
  std::map<std::string, std::int64_t> m;
  for (const auto& [name, count] : branches_) m[std::string(name)] += count;
  return m;
}

std::vector<const EngineCore*> ClusterSimulator::engines() const {
  std::vector<const EngineCore*> e;
  for (const auto& r : replicas_) e.push_back(&r->engine());
  return e;
}

void ClusterSimulator::block_ids(std::span<const std::int32_t> prompt, std::int64_t block_size,
                                 std::int64_t n, std::vector<std::uint64_t>& out) {
  out.clear();
  const auto len = static_cast<std::int64_t>(prompt.size());
  std::uint64_t id = 0;
  for (std::int64_t j = 0; j < n && j * block_size < len; ++j) {
    const std::int64_t b = j * block_size;
    const std::int64_t e = std::min(len, b + block_size);
    id = XXH3_64bits_withSeed(prompt.data() + b,
                              static_cast<std::size_t>(e - b) * sizeof(std::int32_t), id);
    out.push_back(id);
  }
}

void ClusterSimulator::queue_arrival(RequestSpec spec, bool open_loop, SimTimeNs now_ns) {
  const std::int64_t slot = pending_.put(std::move(spec), open_loop);
  const SimTimeNs t = std::max({pending_.at(slot).arrival_ns, arrivals_.now(), now_ns});
  arrivals_.schedule(t, kPriorityArrival, EventKind::kArrival, slot);
}

void ClusterSimulator::pull_next_open_loop() {
  if (open_loop_done_) return;
  std::optional<RequestSpec> next = source_.next();
  if (!next) {
    open_loop_done_ = true;
    return;
  }
  queue_arrival(std::move(*next), true, now_ns_);
}

void ClusterSimulator::record_rejected(const RequestSpec& spec) {
  // As a single engine refuses each sample of a parallel-sampling request (sample i's id).
  const std::int64_t n = timed_ ? samples_per_request_ : 1;  // cache_only serves one
  for (std::int64_t i = 0; i < n; ++i) {
    RequestRecord rec;
    rec.request_id = n > 1 ? sample_request_id(spec.id, n, i) : spec.id;
    rec.arrival_ns = spec.arrival_ns;
    rec.prompt_tokens = spec.num_prompt_tokens();
    rec.reason = FinishReason::kRejected;
    current_ = -1;
    if (pd_) pd_->clear_columns();
    ++requests_done_;
    for (StepObserver* o : cluster_observers_) o->on_request_done(rec);
  }
  source_.on_dropped(spec);
}

std::int32_t ClusterSimulator::route(RequestSpec& spec, std::size_t pool_index,
                                     std::string_view stage, RouteDecision* decision) {
  Pool& pool = pools_[pool_index];
  spec.materialize_prompt();
  const std::int64_t bs = scenario_.cache.sizing.block_size;
  const std::int64_t prompt_tokens = spec.num_prompt_tokens();
  RouteInput in;
  in.now_ns = now_ns_;
  in.index = pool.routed;
  in.prompt_tokens = prompt_tokens;
  in.prompt_blocks = (prompt_tokens + bs - 1) / bs;
  in.request_id = spec.id;
  if (const std::int64_t k = pool.router->block_ids_needed(); k > 0) {
    block_ids(spec.prompt, bs, k, ids_);
    in.block_ids = ids_;
  }
  if (pool.kv_index) {
    apply_due_kv_events();
    prompt_content_hashes(spec.prompt, bs, std::numeric_limits<std::int64_t>::max(),
                          content_hashes_);
    in.content_hashes = content_hashes_;
    in.kv_index = pool.kv_index.get();
  }
  const std::span<ReplicaLoad> loads = std::span<ReplicaLoad>(loads_).subspan(
      static_cast<std::size_t>(pool.first), static_cast<std::size_t>(pool.size));
  RouteDecision d = pool.router->route(in, loads);
  KVSIM_ASSERT(d.replica >= 0 && d.replica < pool.size, "router picked no replica");
  ++pool.routed;
  ReplicaLoad& load = loads[static_cast<std::size_t>(d.replica)];
  ++load.routed;
  load.in_flight += timed_ ? samples_per_request_ : 1;  // cache_only: nothing completes
  if (pool.tracks_in_flight) pool.router->on_in_flight(d.replica, load.in_flight);
  load.prompt_tokens_routed += prompt_tokens;
  auto it = std::find_if(branches_.begin(), branches_.end(),
                         [&](const auto& b) { return b.first == d.branch; });
  if (it == branches_.end())
    branches_.emplace_back(d.branch, 1);
  else
    ++it->second;
  d.replica += pool.first;
  if (d.runner_up >= 0) d.runner_up += pool.first;
  if (routing_) {
    RoutingRecord rec;
    rec.request_id = spec.id;
    rec.time_ns = now_ns_;
    rec.stage = stage;
    rec.replica = d.replica;
    rec.branch = d.branch;
    rec.has_score = d.has_score;
    rec.score = d.score;
    rec.runner_up = d.runner_up;
    rec.runner_up_score = d.runner_up_score;
    rec.matched_blocks = d.matched_blocks;
    rec.prompt_blocks = in.prompt_blocks;
    rec.view_age_ns = d.view_age_ns;
    routing_->write(rec);
  }
  if (decision != nullptr) *decision = d;
  return d.replica;
}

void ClusterSimulator::route_and_serve(RequestSpec& spec) {
  const std::int32_t r = route(spec);
  current_ = r;
  const bool served = replicas_[static_cast<std::size_t>(r)]->serve_cache_only(spec, outputs_);
  KVSIM_ASSERT(served, "a replica refused a request the server admitted");
  // One request at a time: it is served whole before the next is routed (its events are in the
  // index, and the router learns that it ended).
  if (reads_kv_events_) take_kv_events(r, now_ns_);
  if (Pool& pool = pool_of(r); pool.books) {
    pool.router->on_first_token(r, spec.id);
    pool.router->on_finished(r, spec.id);
  }
}

void ClusterSimulator::run() {
  for (auto& r : replicas_) r->begin();
  for (std::size_t r = 0; r < replicas_.size(); ++r) replicas_[r]->attach(taps_[r].get());
  if (timed_)
    run_timed();
  else
    run_cache_only();
  for (auto& r : replicas_) r->finish();
}

void ClusterSimulator::run_cache_only() {
  pull_next_open_loop();
  while (auto ev = arrivals_.next()) {
    now_ns_ = ev->time_ns;
    const bool open_loop = pending_.open_loop(ev->payload);
    RequestSpec spec = pending_.take(ev->payload);
    if (open_loop) pull_next_open_loop();
    // Refused before routing (spec §1.2): every replica runs the same profile and server rule.
    if (!replicas_.front()->admits(spec)) {
      record_rejected(spec);
      continue;
    }
    route_and_serve(spec);
    std::optional<RequestSpec> follow = source_.on_finished(spec, now_ns_, outputs_);
    if (follow) queue_arrival(std::move(*follow), false, now_ns_);
    check_interrupt();
  }
}

}  // namespace kvsim
