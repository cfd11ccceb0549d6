#pragma once
// ClusterSimulator: N replicas of the scenario's engine (each a complete Simulator with its own
// pool, prefix cache and clock position) behind one router (shared/spec/cluster-routing.md).
//
// cache_only mode (spec §8): requests one at a time in timestamp order (equal timestamps keep
// their order; follow-up turns arrive at max(their arrival, now) as in a single engine), each
// served on the replica the router picks through that replica's exact cache_only engine
// (Simulator::serve_cache_only). A request the server refuses is refused before routing: it is
// not routed, takes no round-robin turn and has no replica. "Load" is the number of requests
// routed so far (nothing completes).
//
// timed mode (spec §1.2): one event loop over the replicas' events and the cluster's (arrivals,
// view refreshes), in the global order (time, priority), replicas in index order at a tie and
// before the cluster's event of the same priority. At one instant: the replicas' step ends and
// client aborts (outputs applied, completions reported, follow-up turns queued), then the view
// refreshes due (Router::on_refresh, each replica's figures at its last step end), then the
// arrivals routed in arrival order (refused ones before routing) and handed to their replicas,
// then the replicas' step starts, each taking in the arrivals routed to it. A follow-up turn goes
// back to the cluster's source and is routed like any arrival.
//
// P/D (cluster.prefill_replicas / decode_replicas; spec §7; cluster_pd.cpp): replicas [0, P) run
// vLLM v0.20.1's prefill role, [P, P + D) its decode role (Simulator::set_pd_role). Each pool has
// its own router (Pool). A client's request goes through the proxy (cluster.router.pd.proxy): to a
// prefill replica with max_tokens 1 one proxy hop after its arrival; P's response comes back one
// hop after P finished it, the proxy picks the decode replica (toy_proxy, dynamo) and the request
// with P's kv_transfer_params reaches it one more hop later (llm_d: the decode pod was picked first
// and its sidecar is local, so two hops; a request llm-d's decider keeps on the decode pod goes
// there at once, served whole). D's read of the blocks it allocated is a transfer of the model of
// §7.5 (PdTransferModel), delivered to D (read_done) before D handles events at its end; the read
// carries P's notification (notify at the same instant). requests.csv has one row per client
// request: D's record (or P's, when the request ended there) with the client's arrival, P's first
// schedule, P's prefix hits and both replicas' preemptions.
//
// The replicas are driven through Simulator's outside interface (begin, advance_to,
// advance_before, inject_arrival, serve_cache_only, finish): a replica handles an event only when
// it is the next one of the whole cluster. One routing decision allocates nothing once warm.

#include <csignal>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/cluster/dp_lockstep.h"
#include "sim/cluster/router.h"
#include "sim/config/scenario.h"
#include "sim/engine/engine.h"
#include "sim/engine/pending_arrivals.h"
#include "sim/engine/simulator.h"
#include "sim/metrics/cluster_outputs.h"
#include "sim/metrics/transfers_csv.h"
#include "sim/metrics/writers.h"

namespace kvsim {

class ClusterSimulator {
 public:
  /// `source` must outlive the cluster. `step_time` (timed mode: every replica's latency model,
  /// one copy each) may be empty in cache_only mode.
  ClusterSimulator(const Scenario& scenario, RequestSource& source, StepTimeFn step_time = {});
  /// Replica r's latency model is step_times[r] (cluster.overrides: a replica of another GPU).
  ClusterSimulator(const Scenario& scenario, RequestSource& source,
                   std::vector<StepTimeFn> step_times);
  /// The scenario replica r runs: the scenario, or its override group's (cluster.overrides).
  static const Scenario& replica_scenario(const Scenario& scenario, std::int32_t r);
  ~ClusterSimulator();

  std::int32_t num_replicas() const { return static_cast<std::int32_t>(replicas_.size()); }
  /// An observer of every request of every replica (on_request_done, on_lookup; a refused
  /// request's record too) and of every replica's step (on_step, StepView::step numbered from 1),
  /// not of the end (on_cluster_end is the caller's).
  void attach_cluster(StepObserver* o) { cluster_observers_.push_back(o); }
  /// An observer of replica r's simulator (all of its calls).
  void attach_replica(std::int32_t r, StepObserver* o);
  /// Receives every routing decision (may be null).
  void set_routing_writer(RoutingCsvWriter* w) { routing_ = w; }
  void set_interrupt_flag(const volatile std::sig_atomic_t* flag) { interrupt_ = flag; }
  /// Calls every replica's EngineCore::check_invariants after each of its steps.
  void set_check_invariants(bool on);

  /// Runs to completion.
  void run();

  /// The replica whose request is being recorded now (-1: a request refused before routing):
  /// requests.csv's `replica` column reads it.
  const std::int32_t* current_replica() const { return &current_; }
  /// P/D: the P/D columns of the request being recorded now (requests.csv reads them).
  const PdRequestColumns* current_pd_columns() const;
  /// P/D: the run's transfers (transfers.csv rows, in completion order) and its summary keys
  /// (summary.json lines; empty without P/D). Valid after run().
  std::span<const TransferRow> transfers() const;
  std::string pd_summary_keys() const;
  /// P/D: replica r's vllm:nixl_* and external prefix cache families for metrics.prom (labelled
  /// model_name only: the cluster adds engine); empty without P/D.
  std::string pd_prometheus(std::int32_t r, const std::string& model) const;
  /// Replica r's role.
  ReplicaRole role(std::int32_t r) const { return scenario_.cluster.role_of(r); }
  const Simulator& replica(std::int32_t r) const { return *replicas_[static_cast<std::size_t>(r)]; }
  std::span<const ReplicaLoad> loads() const { return loads_; }
  /// Decisions per branch name, sorted by name.
  std::map<std::string, std::int64_t> decisions_by_branch() const;
  /// Each replica's engine, in replica order.
  std::vector<const EngineCore*> engines() const;
  SimTimeNs now() const { return now_ns_; }
  /// The DP-MoE lockstep barrier (timed vllm_dp over an MoE model), or nullptr.
  const DpLockstep* lockstep() const { return lockstep_.get(); }
  std::int64_t requests_done() const { return requests_done_; }

  /// The stable ids of the first `n` blocks of `prompt` (block_size tokens each, a partial last
  /// block included): id_j = xxh3-64 of block j's tokens seeded with id_{j-1} (id_{-1} = 0), so
  /// equal leading content gives equal ids. Writes min(n, blocks) ids to `out` (replaced).
  static void block_ids(std::span<const std::int32_t> prompt, std::int64_t block_size,
                        std::int64_t n, std::vector<std::uint64_t>& out);

 private:
  void queue_arrival(RequestSpec spec, bool open_loop, SimTimeNs now_ns);
  void pull_next_open_loop();
  /// A pool of replicas one router serves: aggregated serving has one (every replica), P/D two
  /// (the prefill replicas, then the decode replicas), each with its own router, cycle, books and
  /// index of KV events; a router sees its pool's replicas as 0 .. size-1.
  struct Pool {
    std::int32_t first = 0, size = 0;
    std::unique_ptr<Router> router;
    bool books = false;             // the router keeps books of its requests (books_requests)
    bool tracks_in_flight = false;  // Router::tracks_in_flight
    std::unique_ptr<KvBlockIndex> kv_index;
    std::int64_t routed = 0;  // decisions so far (RouteInput::index)
  };
  Pool& pool_of(std::int32_t r) {
    return pools_[static_cast<std::size_t>(pool_index_[static_cast<std::size_t>(r)])];
  }
  /// Routes `spec` in pool `pool` (the decision, the loads, routing.csv with `stage`); returns
  /// the replica (a cluster index). `decision` (may be null) receives the router's decision.
  std::int32_t route(RequestSpec& spec, std::size_t pool = 0, std::string_view stage = "route",
                     RouteDecision* decision = nullptr);
  void add_pool(std::int32_t first, std::int32_t size, std::unique_ptr<Router> router);
  /// A request finished (once per sample) on replica r: the router-side counts and books.
  void on_replica_done(std::int32_t r, std::uint64_t request_id);
  // P/D: the proxy, the flows and the reads (cluster_pd.h; its calls, with kPdHandOff events).
  static constexpr std::uint8_t kPdHandOff = 1;  // pending_'s tag of a P/D hand-off
  void route_and_serve(RequestSpec& spec);
  /// Records `spec` refused before routing (one row per sample) and tells the source.
  void record_rejected(const RequestSpec& spec);
  void run_cache_only();
  void run_timed();
  /// timed: the refresh of the routers' polled view due now.
  void refresh_view();
  void check_interrupt() const;
  /// Replica r's KV events since its last batch go to the index now (or, with a delay, at
  /// `now_ns` + delay: spec §1.3).
  void take_kv_events(std::int32_t r, SimTimeNs now_ns);
  /// The delayed batches due by now, into the index.
  void apply_due_kv_events();

  const Scenario& scenario_;
  RequestSource& source_;
  class EmptySource;
  class ForwardSource;
  class Tap;
  std::unique_ptr<EmptySource> empty_source_;
  std::unique_ptr<ForwardSource> forward_source_;  // timed: the replicas' follow-ups come back
  std::vector<std::unique_ptr<Simulator>> replicas_;
  std::vector<std::unique_ptr<Tap>> taps_;
  std::vector<Pool> pools_;
  std::vector<std::int32_t> pool_index_;  // replica -> its pool
  class Pd;  // P/D: the proxy, the flows, the transfers (cluster_pd.cpp)
  std::unique_ptr<Pd> pd_;
  std::vector<std::unique_ptr<ForwardSource>> pd_sources_;  // P/D: one per replica (its role)
  std::vector<std::int32_t> touched_;  // replicas handed something outside their own events
  std::unique_ptr<DpLockstep> lockstep_;
  std::vector<StepObserver*> cluster_observers_;
  RoutingCsvWriter* routing_ = nullptr;
  const volatile std::sig_atomic_t* interrupt_ = nullptr;

  bool timed_ = false;
  Engine arrivals_;          // the cluster's events: arrivals (kArrival), view refreshes (kUser)
  PendingArrivals pending_;  // arrivals not yet happened
  bool open_loop_done_ = false;

  std::vector<ReplicaLoad> loads_;
  std::vector<std::pair<std::string_view, std::int64_t>> branches_;  // in first-seen order
  std::vector<std::uint64_t> ids_;     // scratch: the routed request's block ids
  std::vector<std::int32_t> outputs_;  // scratch: its generated tokens
  std::vector<ReplicaView> step_end_;  // timed: each replica's figures at its last step end
  // router.view.delay_ms: each replica's step-end figures not yet superseded for the view, with
  // their instants, and the view they give.
  SimTimeNs view_delay_ns_ = 0;
  std::vector<std::deque<std::pair<SimTimeNs, ReplicaView>>> step_history_;
  std::vector<ReplicaView> delayed_view_;
  // Routers that read the replicas' caches: the index of their KV events, each replica's log of
  // events not yet taken, the batches on their way (kv_events.delay_ms), spare event buffers.
  bool reads_kv_events_ = false;  // some pool's router reads them (its Pool::kv_index)
  std::vector<std::vector<KvEvent>> kv_logs_;
  struct KvBatch {
    SimTimeNs due_ns = 0;
    std::int32_t replica = 0;
    std::vector<KvEvent> events;
  };
  std::deque<KvBatch> kv_in_transit_;
  std::vector<std::vector<KvEvent>> kv_spare_;
  SimTimeNs kv_delay_ns_ = 0;
  std::vector<std::uint64_t> content_hashes_;  // scratch: the routed prompt's full blocks
  std::int64_t samples_per_request_ = 1;
  SimTimeNs now_ns_ = 0;
  std::int64_t requests_done_ = 0;
  std::int32_t current_ = -1;
};

}  // namespace kvsim
