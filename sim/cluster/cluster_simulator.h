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
// The replicas are driven through Simulator's outside interface (begin, advance_to, inject_arrival,
// serve_cache_only, finish): a replica is brought to an instant only when something needs it.
// One routing decision allocates nothing once warm.

#include <cstdint>
#include <csignal>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sim/cluster/router.h"
#include "sim/config/scenario.h"
#include "sim/engine/engine.h"
#include "sim/engine/pending_arrivals.h"
#include "sim/engine/simulator.h"
#include "sim/metrics/cluster_outputs.h"

namespace kvsim {

class ClusterSimulator {
 public:
  /// `source` must outlive the cluster. Precondition: cache_only mode.
  ClusterSimulator(const Scenario& scenario, RequestSource& source);
  ~ClusterSimulator();

  std::int32_t num_replicas() const { return static_cast<std::int32_t>(replicas_.size()); }
  /// An observer of every request of every replica (on_request_done, on_lookup; a refused
  /// request's record too), not of steps or the end (on_cluster_end is the caller's).
  void attach_cluster(StepObserver* o) { cluster_observers_.push_back(o); }
  /// An observer of replica r's simulator (all of its calls).
  void attach_replica(std::int32_t r, StepObserver* o);
  /// Receives every routing decision (may be null).
  void set_routing_writer(RoutingCsvWriter* w) { routing_ = w; }
  void set_interrupt_flag(const volatile std::sig_atomic_t* flag) { interrupt_ = flag; }

  /// Runs to completion.
  void run();

  /// The replica whose request is being recorded now (-1: a request refused before routing):
  /// requests.csv's `replica` column reads it.
  const std::int32_t* current_replica() const { return &current_; }
  const Simulator& replica(std::int32_t r) const { return *replicas_[static_cast<std::size_t>(r)]; }
  std::span<const ReplicaLoad> loads() const { return loads_; }
  /// Decisions per branch name, sorted by name.
  std::map<std::string, std::int64_t> decisions_by_branch() const;
  /// Each replica's engine, in replica order.
  std::vector<const EngineCore*> engines() const;
  SimTimeNs now() const { return arrivals_.now(); }
  std::int64_t requests_done() const { return requests_done_; }

  /// The stable ids of the first `n` blocks of `prompt` (block_size tokens each, a partial last
  /// block included): id_j = xxh3-64 of block j's tokens seeded with id_{j-1} (id_{-1} = 0), so
  /// equal leading content gives equal ids. Writes min(n, blocks) ids to `out` (replaced).
  static void block_ids(std::span<const std::int32_t> prompt, std::int64_t block_size,
                        std::int64_t n, std::vector<std::uint64_t>& out);

 private:
  void queue_arrival(RequestSpec spec, bool open_loop);
  void pull_next_open_loop();
  void route_and_serve(RequestSpec& spec);
  void record_rejected(const RequestSpec& spec);

  const Scenario& scenario_;
  RequestSource& source_;
  class EmptySource;
  class Tap;
  std::unique_ptr<EmptySource> empty_source_;
  std::vector<std::unique_ptr<Simulator>> replicas_;
  std::vector<std::unique_ptr<Tap>> taps_;
  std::unique_ptr<Router> router_;
  std::vector<StepObserver*> cluster_observers_;
  RoutingCsvWriter* routing_ = nullptr;
  const volatile std::sig_atomic_t* interrupt_ = nullptr;

  Engine arrivals_;  // arrival events only (cache_only)
  PendingArrivals pending_;  // arrivals not yet happened
  bool open_loop_done_ = false;

  std::vector<ReplicaLoad> loads_;
  std::vector<std::pair<std::string_view, std::int64_t>> branches_;  // in first-seen order
  std::vector<std::uint64_t> ids_;           // scratch: the routed request's block ids
  std::vector<std::int32_t> outputs_;        // scratch: its generated tokens
  std::int64_t routed_ = 0;
  std::int64_t requests_done_ = 0;
  std::int32_t current_ = -1;
};

}  // namespace kvsim
