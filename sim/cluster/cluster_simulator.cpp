#include "sim/cluster/cluster_simulator.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

/// A replica's own source: nothing (its requests are routed to it).
class ClusterSimulator::EmptySource final : public RequestSource {
 public:
  std::optional<RequestSpec> next() override { return std::nullopt; }
};

/// Forwards replica r's requests to the cluster's observers, with r as the current replica.
class ClusterSimulator::Tap final : public StepObserver {
 public:
  Tap(ClusterSimulator& c, std::int32_t r) : c_(c), r_(r) {}
  void on_request_done(const RequestRecord& rec) override {
    c_.current_ = r_;
    ++c_.requests_done_;
    for (StepObserver* o : c_.cluster_observers_) o->on_request_done(rec);
  }
  void on_lookup(std::int64_t q, std::int64_t h) override {
    for (StepObserver* o : c_.cluster_observers_) o->on_lookup(q, h);
  }

 private:
  ClusterSimulator& c_;
  std::int32_t r_;
};

ClusterSimulator::ClusterSimulator(const Scenario& scenario, RequestSource& source)
    : scenario_(scenario), source_(source), empty_source_(std::make_unique<EmptySource>()) {
  KVSIM_ASSERT(scenario.engine.mode == EngineConfig::Mode::kCacheOnly,
               "the cluster runs in cache_only mode");
  const auto n = static_cast<std::int32_t>(scenario.cluster.replicas);
  for (std::int32_t r = 0; r < n; ++r) {
    replicas_.push_back(std::make_unique<Simulator>(scenario, *empty_source_, StepTimeFn{}));
    taps_.push_back(std::make_unique<Tap>(*this, r));
  }
  loads_.assign(static_cast<std::size_t>(n), ReplicaLoad{});
  router_ = make_router(scenario.cluster.router, n);
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

void ClusterSimulator::queue_arrival(RequestSpec spec, bool open_loop) {
  const std::int64_t slot = pending_.put(std::move(spec), open_loop);
  const SimTimeNs t = std::max(pending_.at(slot).arrival_ns, arrivals_.now());
  arrivals_.schedule(t, kPriorityArrival, EventKind::kArrival, slot);
}

void ClusterSimulator::pull_next_open_loop() {
  if (open_loop_done_) return;
  std::optional<RequestSpec> next = source_.next();
  if (!next) {
    open_loop_done_ = true;
    return;
  }
  queue_arrival(std::move(*next), true);
}

void ClusterSimulator::record_rejected(const RequestSpec& spec) {
  RequestRecord rec;
  rec.request_id = spec.id;
  rec.arrival_ns = spec.arrival_ns;
  rec.prompt_tokens = spec.num_prompt_tokens();
  rec.reason = FinishReason::kRejected;
  current_ = -1;
  ++requests_done_;
  for (StepObserver* o : cluster_observers_) o->on_request_done(rec);
}

void ClusterSimulator::route_and_serve(RequestSpec& spec) {
  spec.materialize_prompt();
  const std::int64_t bs = scenario_.cache.sizing.block_size;
  const std::int64_t prompt_tokens = spec.num_prompt_tokens();
  RouteInput in;
  in.index = routed_;
  in.prompt_tokens = prompt_tokens;
  in.prompt_blocks = (prompt_tokens + bs - 1) / bs;
  if (const std::int64_t k = router_->block_ids_needed(); k > 0) {
    block_ids(spec.prompt, bs, k, ids_);
    in.block_ids = ids_;
  }
  const RouteDecision d = router_->route(in, loads_);
  KVSIM_ASSERT(d.replica >= 0 && d.replica < num_replicas(), "router picked no replica");
  ++routed_;
  ReplicaLoad& load = loads_[static_cast<std::size_t>(d.replica)];
  ++load.routed;
  ++load.in_flight;  // cache_only: nothing completes
  load.prompt_tokens_routed += prompt_tokens;
  auto it = std::find_if(branches_.begin(), branches_.end(),
                         [&](const auto& b) { return b.first == d.branch; });
  if (it == branches_.end())
    branches_.emplace_back(d.branch, 1);
  else
    ++it->second;
  if (routing_) {
    RoutingRecord rec;
    rec.request_id = spec.id;
    rec.time_ns = arrivals_.now();
    rec.replica = d.replica;
    rec.branch = d.branch;
    rec.has_score = d.has_score;
    rec.score = d.score;
    rec.runner_up = d.runner_up;
    rec.runner_up_score = d.runner_up_score;
    rec.matched_blocks = d.matched_blocks;
    rec.prompt_blocks = in.prompt_blocks;
    routing_->write(rec);
  }
  current_ = d.replica;
  const bool served =
      replicas_[static_cast<std::size_t>(d.replica)]->serve_cache_only(spec, outputs_);
  KVSIM_ASSERT(served, "a replica refused a request the server admitted");
}

void ClusterSimulator::run() {
  for (auto& r : replicas_) r->begin();
  for (std::size_t r = 0; r < replicas_.size(); ++r) replicas_[r]->attach(taps_[r].get());
  pull_next_open_loop();
  while (auto ev = arrivals_.next()) {
    const bool open_loop = pending_.open_loop(ev->payload);
    RequestSpec spec = pending_.take(ev->payload);
    if (open_loop) pull_next_open_loop();
    // Refused before routing (spec §1.2): every replica runs the same profile and server rule.
    if (!replicas_.front()->admits(spec)) {
      record_rejected(spec);
      source_.on_dropped(spec);
      continue;
    }
    route_and_serve(spec);
    std::optional<RequestSpec> follow = source_.on_finished(spec, arrivals_.now(), outputs_);
    if (follow) queue_arrival(std::move(*follow), false);
    if (interrupt_ != nullptr && *interrupt_ != 0) [[unlikely]]
      throw RunError(fmt::format("interrupted at simulated time {:.3f} s; no run folder written",
                                 static_cast<double>(arrivals_.now()) / 1e9));
  }
  for (auto& r : replicas_) r->finish();
}

}  // namespace kvsim
