#pragma once
// PdEndpoint: prefill/decode disaggregation inside one timed vllm-0.20 engine (a replica of a
// P/D cluster, shared/spec/cluster-routing.md §7). It hosts vLLM v0.20.1's NixlConnector
// (scheduler role, core/pd/nixl_connector.h) plugged into the V1 scheduler as its one
// KVConnector, and the worker's bookkeeping (core/pd/nixl_worker.h) on the simulator's clock.
// What moves between replicas (the proxy's hops, the KV read's duration, D's notification to
// P) is the cluster's: it implements PdHooks and calls back read_done() and notify().
//
// Who calls what, in order (a cluster, sim/cluster/, is the caller; tests/sim/engine/
// test_pd_timed.cpp is a small one):
//   setup     Simulator::set_pd_role(role, hooks, engine_id), before begin().
//   P side    Simulator::inject_pd_arrival(spec, {do_remote_decode: true}) -- the toy proxy's
//             request: max_tokens 1 (the simulator sets it), the first token sampled on P.
//             When P finishes it: hooks->on_prefill_done(result) with the kv_transfer_params P
//             returns (remote_block_ids = every block of the request, P's engine id, P's request
//             id) and the finish time; P holds the blocks (still cached and hittable).
//             Later: P's endpoint notify(remote_request_id, t) when D's read notification lands;
//             the blocks are freed at the end of P's first step whose get_finished runs at or
//             after t. An idle P does not step: it sees the notification at its next step (a new
//             arrival). Without a notification the blocks are freed at P's first step end at or
//             after finish + 480 s (VLLM_NIXL_ABORT_REQUEST_TIMEOUT; the expiry is registered at
//             P's next schedule() after the finish, as vLLM does).
//   D side    Simulator::inject_pd_arrival(spec, {do_remote_prefill: true, remote_block_ids,
//             remote_engine_id, remote_request_id}). The scheduler allocates its prompt (local
//             hits first) and parks it in WAITING_FOR_REMOTE_KVS (waiting, no running slot).
//             When D starts executing the step that allocated the blocks:
//             hooks->on_read_start(request, blocks to read, P engine, t). The cluster decides the
//             transfer time and calls D's endpoint read_done(request, t_done) no later than when
//             it brings D to t_done (before D handles events at t_done); then at once
//             hooks->on_read_notify(request, P engine, P's request id, t_done) (the read carries
//             the notification: the cluster delivers it to P's notify() with its own delay).
//             D's first step end at or after t_done sees the read in get_finished; the next
//             schedule() promotes the request (with async scheduling the one after, the next step
//             being scheduled already), caches the read blocks, recomputes the last prompt token
//             and samples the first output token on D. A read of no blocks (the request aborted
//             before its blocks were allocated) only notifies P: on_read_notify at the start of
//             the step that carries it.
// Hooks are called from inside the replica's event handling: they must not advance or inject
// into the same replica; read_done() and notify() (of any endpoint) only record, and may be
// called from a hook.
//
// The engine loop with a role (simulator_pd.cpp) is vLLM v0.20.1's EngineCore loop, synchronous
// (step) or with async scheduling (step_with_batch_queue): the engine steps while it has
// unfinished requests or finished ids to flush (has_requests); a step that schedules nothing
// runs no forward pass (0 ns) but still runs the connector (start_load_kv at its start,
// get_finished at its end); after a step whose newly scheduled batch ran nothing, EngineCore
// sleeps 1 ms when requests are unfinished (core.py:1216-1221); aborts wait for the next
// iteration. Modelled, not exact: the transfer (the cluster's), the handshake, the empty step's
// own time (0). Not modelled: read failures (kv_load_failure_policy), several KV cache groups,
// heterogeneous TP, parallel sampling.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/pd/nixl_connector.h"
#include "core/pd/nixl_worker.h"
#include "sim/common/sim_types.h"

namespace kvsim {

class Engine;
class Scheduler;

/// A replica's P/D role: a prefill engine (P), a decode engine (D). Both run the same connector
/// (vLLM's kv_both); the role says which kv_transfer_params the replica accepts.
enum class PdRole : std::uint8_t { kPrefill, kDecode };

/// The kv_transfer_params of a request, as the toy proxy sends them (vLLM's
/// toy_proxy_server.py @ v0.20.1): to P {do_remote_decode: true, remote_*: null}; to D what P
/// returned. host, port and tp_size are not modelled (homogeneous TP, handshake done).
struct PdTransferParams {
  bool do_remote_decode = false;          // P: hold the blocks for D's read once finished
  bool do_remote_prefill = false;         // D: read the prompt's KV from P
  std::vector<BlockId> remote_block_ids;  // P's blocks (D reads the last ones it allocates)
  std::string remote_engine_id;           // P's engine id
  std::string remote_request_id;          // P's request id (what P's notify() takes)
};

/// What P's response carries when a do_remote_decode request finishes.
struct PdPrefillResult {
  std::uint64_t request_id = 0;  // the RequestSpec id
  /// kv_transfer_params returned (finished FINISHED_LENGTH_CAPPED); false: none (an abort, or
  /// EOS on the first token): P freed the blocks at once and D has nothing to read.
  bool returned_params = false;
  bool delay_free = false;  // P holds the blocks for D (returned with blocks)
  PdTransferParams params;  // do_remote_prefill: true, remote_block_ids, remote_engine_id, ..._id
  SimTimeNs finish_ns = 0;
};

/// What the cluster implements (no dependency on sim/cluster).
class PdHooks {
 public:
  virtual ~PdHooks() = default;
  /// P: a do_remote_decode request finished (its response is complete) at result.finish_ns.
  virtual void on_prefill_done(const PdPrefillResult& result) = 0;
  /// D: the read of `num_blocks` blocks of request `request_id` from P `remote_engine_id` starts
  /// at `start_ns` (D starts executing the step that allocated them). The cluster calls D's
  /// read_done(request_id, t) once the transfer is over.
  virtual void on_read_start(std::uint64_t request_id, std::int64_t num_blocks,
                             const std::string& remote_engine_id, SimTimeNs start_ns) = 0;
  /// D: the read notification for P's request `remote_request_id` leaves D at `sent_ns`; the
  /// cluster calls P's notify(remote_request_id, arrival).
  virtual void on_read_notify(std::uint64_t request_id, const std::string& remote_engine_id,
                              const std::string& remote_request_id, SimTimeNs sent_ns) = 0;
  /// The worker's get_finished at the end of a step at `t_ns`, by engine request name
  /// (PdEndpoint::request_name): P's holds that end (the blocks are freed by this step's
  /// update_from_output; expired ones included) and D's reads it sees.
  virtual void on_get_finished(std::span<const std::string> sending,
                               std::span<const std::string> recving, SimTimeNs t_ns) {
    (void)sending;
    (void)recving;
    (void)t_ns;
  }
};

/// Running totals of an endpoint.
struct PdStats {
  std::int64_t prefills_returned = 0;               // P: requests that returned kv_transfer_params
  std::int64_t reads_started = 0, blocks_read = 0;  // D: reads with blocks, and their blocks
  std::int64_t notify_only = 0;                     // D: notifications without a read
  std::int64_t notifications_received = 0;          // P: notify() calls seen by get_finished
  std::int64_t expired = 0;                         // P: holds ended by the 480 s expiry
  std::int64_t freed_by_notification = 0;           // P: holds ended by D's notification
  /// vllm:external_prefix_cache_queries / _hits (scheduler.py:638-641, 788-796): at a request's
  /// allocation after a lookup, the tokens past the local hits and those the connector provides
  /// (the scheduler's ConnectorCacheStats, preempted lookups included).
  std::int64_t external_queries = 0, external_hits = 0;
};

class PdEndpoint final : public KVConnector {
 public:
  /// Plugs into `scheduler` (vllm-0.20, one KV cache group, no request yet); `clock` is the
  /// replica's simulated clock. Both must outlive the endpoint.
  PdEndpoint(Scheduler& scheduler, const Engine& clock, PdRole role, PdHooks* hooks,
             std::string engine_id, double abort_timeout_s = 480);
  ~PdEndpoint() override;
  PdEndpoint(const PdEndpoint&) = delete;
  PdEndpoint& operator=(const PdEndpoint&) = delete;

  // ---- the cluster's calls ----------------------------------------------------------------
  /// D: the read of request `request_id` (its RequestSpec id) ended at `t_ns`; calls
  /// hooks->on_read_notify at once. Seen by the first get_finished at or after t_ns that runs
  /// after this call.
  void read_done(std::uint64_t request_id, SimTimeNs t_ns);
  /// P: D's read notification for `request_id` (P's request id, as returned) arrives at `t_ns`;
  /// seen by the first get_finished at or after t_ns that runs after this call.
  void notify(std::string_view request_id, SimTimeNs t_ns);
  PdRole role() const { return role_; }
  const std::string& engine_id() const { return engine_id_; }
  const PdStats& stats() const { return stats_; }
  /// The engine's request id of RequestSpec id `id` (what P returns as remote_request_id).
  static std::string request_name(std::uint64_t id);

  // ---- the simulator's calls (sim/engine/simulator_pd.cpp) --------------------------------
  /// The kv_transfer_params of the request with RequestSpec id `request_id`, before it arrives.
  void expect(std::uint64_t request_id, PdTransferParams params);
  /// The request was made (before its first schedule()): its id and kv_transfer_params.
  void on_admit(Request& request, std::uint64_t request_id);
  /// Request `request_id` was aborted before the scheduler saw it (its client gave up while it
  /// waited for the engine's next iteration): vLLM adds and aborts it in one pass of the input
  /// queue, so a D request's read of no blocks notifies P at the start of the next step.
  void on_dropped(std::uint64_t request_id);
  /// EngineCore's scheduler.has_requests(): unfinished requests or finished ids to flush.
  bool has_requests() const;
  /// The worker starts executing the oldest scheduled step not started yet, at `t_ns`:
  /// start_load_kv of its metadata (reads start: on_read_start; reads of no blocks notify P).
  void start_execution(SimTimeNs t_ns);
  /// The worker ends the oldest started step at `t_ns`: the reads done and notifications
  /// arrived by then are applied, get_finished runs; its report waits for apply_report().
  void end_execution(SimTimeNs t_ns);
  /// The oldest ended step's report goes to the scheduler (before its update_from_output).
  void apply_report();
  /// Whether the last report applied had finished sends or reads (its update frees or loads).
  bool last_report_changed() const { return last_report_changed_; }
  /// Whether something may still change without a new arrival (reads in flight or not started).
  bool transfers_pending() const;
  /// The tokens the connector provided to `request` (D: its read), once: the first schedule's
  /// computed tokens less these are its local prefix hits. 0 when none.
  std::int64_t take_external_tokens(const Request& request);
  /// Whether the scheduler holds `request` (finished, blocks held for the connector).
  bool holds(const Request& request) const;
  /// Keeps a finished request the scheduler holds (and its slot) until the scheduler lets go.
  void park(std::unique_ptr<Request> request, std::int64_t slot) {
    parked_.push_back({std::move(request), slot});
  }
  /// Destroys the parked requests the scheduler no longer holds; appends their slots.
  void reap(std::vector<std::int64_t>& free_slots);
  std::size_t num_parked() const { return parked_.size(); }
  const NixlConnector& connector() const { return nixl_; }
  const NixlWorkerSim& worker() const { return worker_; }
  /// "" or the first broken invariant of the worker.
  std::string find_violation() const { return worker_.find_violation(); }

  // ---- KVConnector: the scheduler's calls, forwarded to NixlConnector ----------------------
  ExternalMatch lookup(Request& request, std::int64_t num_local_tokens) override;
  void update_state_after_alloc(Request& request, const ConnectorBlocks& blocks,
                                std::int64_t num_external_tokens) override;
  /// Also queues the step's metadata for start_execution().
  const char* build_connector_meta(const SchedulerOutput& out) override;
  /// Also reports a do_remote_decode request's end to the hooks.
  bool request_finished(Request& request, std::span<const BlockId> block_ids) override;
  void update_connector_output(const ConnectorOutput& output) override;

 private:
  double now_s() const;
  /// The request the scheduler knows by `id`: among those it holds, and (unless `held_only`)
  /// those in skipped_waiting; nullptr when none.
  Request* find(const std::string& id, bool held_only) const;
  void convert(const std::vector<std::string>& ids, bool held_only, std::vector<Request*>& out);

  Scheduler& scheduler_;
  const Engine& clock_;
  PdRole role_;
  PdHooks* hooks_;
  std::string engine_id_;
  NixlConnector nixl_;
  NixlWorkerSim worker_;
  /// A D request's P side (by its engine request id), until its notification left.
  struct Remote {
    std::uint64_t request_id = 0;
    std::string engine_id, request_name;
  };
  std::map<std::string, Remote, std::less<>> remote_;
  std::vector<Remote> dropped_;  // D requests aborted before admission: P to notify
  std::vector<std::pair<std::uint64_t, PdTransferParams>> expected_;  // not arrived yet
  /// A scheduled step's metadata, and the requests dropped before it was scheduled (their reads
  /// of no blocks are in it).
  struct StepMeta {
    NixlStepMeta meta;
    std::vector<Remote> dropped;
  };
  std::deque<StepMeta> unstarted_;  // scheduled steps not started, oldest first
  std::size_t started_steps_ = 0;   // steps started and not ended
  std::vector<std::pair<std::string, SimTimeNs>> reads_done_, notifications_;  // not applied
  struct Report {
    std::vector<std::string> sending, recving;
  };
  std::deque<Report> reports_;                            // ended steps' get_finished, oldest first
  std::vector<std::string> sending_, recving_, expired_;  // get_finished scratch
  std::vector<Request*> sending_req_, recving_req_;       // handed to the scheduler
  std::vector<const NixlRecv*> started_, notify_only_;    // start_load_kv scratch
  struct Parked {
    std::unique_ptr<Request> request;
    std::int64_t slot = 0;
  };
  std::vector<Parked> parked_;
  bool last_report_changed_ = false;
  std::map<std::string, std::int64_t, std::less<>>
      external_tokens_;  // until the first schedule  // the last lookup's, until its allocation
  PdStats stats_;
};

}  // namespace kvsim
