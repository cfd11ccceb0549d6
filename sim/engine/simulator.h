#pragma once
// Simulator: runs one Scenario on the Engine with the exact vLLM scheduler.
//
// Timed mode, each step: Scheduler::schedule() -> step duration from the latency model (batch
// features of the scheduled requests) -> step-end event -> each request that catches up gets
// its next generated token (output_token(output_seed, i, vocab), or EOS where the request stops
// at EOS: see RequestSpec::output_tokens) as its sampled token -> update_from_output() -> observers
// -> finished requests are reported and may spawn follow-up turns (RequestSource::on_finished).
// Arrivals during a step join waiting and are seen by the next schedule(); the scheduler's queue
// gets them (and their prompts get their tokens) only when they come within the first
// max_num_seqs - running waiting requests, all a schedule() can look at, so a deep queue costs no
// token memory; observers still count the whole queue (StepView::num_waiting). At its arrival a
// request is refused, or given the engine's max_tokens, by the profile's ServerAdmission rule
// (as vLLM's OpenAI server does: sim/engine/server_admission.h), and refused too when the engine
// says it can never admit it (EngineCore::admission_error: a contiguous reservation larger than
// the pool). Each request gets its final length (Request::oracle_final_num_tokens) for the
// engines that play an oracle. A step that can schedule nothing while requests wait and none run
// means a request can never fit: the run fails with RunError naming it.
//
// Client aborts (RequestSpec::client_timeout_ns): a request not finished that long after its
// arrival is aborted at that instant, as when its client closes the connection. Its row is
// written then (finish_reason abort, the tokens delivered so far); vLLM's EngineCore takes the
// abort between steps, so the scheduler frees it (finish_requests(FINISHED_ABORTED)) at once when
// no step is in flight, else when the step in flight ends, before the next schedule(): that step
// still computes it, and its token is not delivered. At one instant a step's end comes first: a
// request that step finishes is not aborted, and the token it gets is delivered.
//
// P/D (set_pd_role; sim/engine/pd_endpoint.h): a replica of a prefill/decode cluster runs vLLM
// v0.20.1's NixlConnector and EngineCore's loop with it (simulator_pd.cpp): steps that schedule
// nothing still run the connector, a 1 ms sleep while requests wait for remote KV or held blocks,
// finished requests whose blocks P holds for D (or D holds for an aborted read) stay until the
// worker reports them. The transfers are the cluster's (PdHooks, read_done, notify).
//
// cache_only mode (hit-rate studies): requests in arrival order, one at a time, through the same
// KVCacheManager: lookup (get_computed_blocks, with the scheduler's full-hit last-block rule),
// allocate_slots for the rest of the prompt with the hits, then free (tail first). No timing.
// Policy for a request larger than the pool: its lookup counts in full, and the longest prefix of
// the rest that fits in the pool (after its hits) is allocated and cached before it is freed.

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "core/common/ring_deque.h"
#include "core/engine_api.h"
#include "sim/config/scenario.h"
#include "sim/engine/engine.h"
#include "sim/engine/forward_barrier.h"
#include "sim/engine/observer.h"
#include "sim/engine/offload_tier.h"
#include "sim/engine/pd_endpoint.h"
#include "sim/engine/pending_arrivals.h"
#include "sim/engine/server_admission.h"
#include "sim/workload/workload.h"

namespace kvsim {

/// A run that cannot complete (a request that can never fit). main() exits with status 1.
class RunError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// The duration of one step from its batch (StepView's batch fields are set; outputs empty).
using StepTimeFn = std::function<SimTimeNs(const StepView&)>;

/// Progress of a run, reported about every `progress_every_events` events.
struct SimProgress {
  SimTimeNs now_ns = 0;
  std::int64_t requests_done = 0;  // finished + rejected
  std::int64_t num_steps = 0;
  std::int64_t num_running = 0, num_waiting = 0;
};

class Simulator {
 public:
  /// `source` and `step_time` must outlive the simulator; step_time may be empty in cache_only.
  Simulator(const Scenario& scenario, RequestSource& source, StepTimeFn step_time);
  ~Simulator();

  /// Observers are called in attachment order; they must outlive run().
  void attach(StepObserver* observer) { observers_.push_back(observer); }
  /// Fast-forward (engine.fast_forward, on by default): runs of pure decode steps between events
  /// are advanced at once (EngineCore::decode_horizon / advance_decode; observers get
  /// on_decode_run), byte-identical to stepping. Only on the synchronous loop without the CPU
  /// tier or a forward barrier, while every observer takes decode runs, and with a step-time
  /// function that is a pure function of the batch (it is asked ahead for steps a run may then
  /// not take).
  void set_fast_forward(bool on) { fast_forward_ = on; }
  /// Steps advanced by fast-forward runs, and the runs.
  std::int64_t num_fast_forward_steps() const { return ff_steps_; }
  std::int64_t num_fast_forward_runs() const { return ff_runs_; }
  /// Calls EngineCore::check_invariants after every step (kvsim run --check-invariants).
  void set_check_invariants(bool on) { check_invariants_ = on; }
  void set_progress(std::function<void(const SimProgress&)> fn, std::uint64_t every_events) {
    progress_ = std::move(fn);
    progress_every_ = every_events ? every_events : 1;
  }

  /// When `*flag` becomes non-zero (a signal handler sets it), run() throws RunError soon after.
  void set_interrupt_flag(const volatile std::sig_atomic_t* flag) { interrupt_ = flag; }

  /// Runs to completion. Throws RunError when a request can never be scheduled. The same as
  /// begin(); advance_to(kNeverNs); finish().
  void run();

  // ---- Driving the engine from outside (a cluster's replicas, sim/cluster/) -------------------
  // A cluster brings each replica up to an instant only when something needs it (an arrival
  // routed to it, a router reading its state). These calls are that interface; run() goes through
  // them, so a run driven by them in any chunks is the same run. Fast-forward runs of pure
  // decode steps (set_fast_forward) stay inside advance_to(t): a run's steps all end before t,
  // and before the replica's next queued event unless the run's last step is in flight at
  // arrivals (fast_forward.cpp), whose end is then queued as a step end.
  static constexpr SimTimeNs kNeverNs = std::numeric_limits<SimTimeNs>::max();
  /// Starts a run: queues the first open-loop arrival of the simulator's own source (a replica's
  /// source is empty: its arrivals come through inject_arrival).
  void begin();
  /// Handles, in order, every queued event strictly before `t_ns` (events at t_ns stay queued, so
  /// an arrival injected at t_ns is ordered after the step ends due then). Returns the number of
  /// events handled (both modes). Throws RunError as run() does.
  std::uint64_t advance_to(SimTimeNs t_ns);
  /// The time of the next queued event, or kNeverNs when none is queued (the engine is idle).
  SimTimeNs next_event_ns() const { return engine_.empty() ? kNeverNs : engine_.peek().time_ns; }
  /// The priority of the next queued event (kPriorityStepEnd, ...); 0 when none is queued.
  std::int32_t next_event_priority() const { return engine_.empty() ? 0 : engine_.peek().priority; }
  /// Timed mode: advance_to(t_ns), then the events at t_ns of a priority below `priority` (those
  /// they queue too). A cluster applies its replicas' step ends and aborts due at t_ns
  /// (kPriorityArrival) before it routes the arrivals of t_ns (spec cluster-routing.md 1.2).
  std::uint64_t advance_before(SimTimeNs t_ns, std::int32_t priority) {
    std::uint64_t n = advance_to(t_ns);
    while (!engine_.empty() && engine_.peek().time_ns == t_ns &&
           engine_.peek().priority < priority) {
      handle_timed(*engine_.next());
      ++n;
    }
    return n;
  }
  /// A cluster's replica: the next step always starts through the queue, after the arrivals the
  /// cluster routes to it at the instant a step ends (a single engine's are queued already).
  void set_queue_step_starts(bool on) { queue_step_starts_ = on; }
  /// A data-parallel rank of an MoE model (sim/engine/forward_barrier.h): every forward pass is
  /// launched through `barrier` (rank `rank`), which sets its end (set_forward_end); while the
  /// barrier's wave runs, an iteration with nothing to run launches a dummy batch (one decode
  /// token under the latency model). The synchronous loop and async scheduling; not the CPU tier.
  void set_forward_barrier(ForwardBarrier* barrier, std::int32_t rank);
  /// The barrier's answer for this rank's oldest forward pass whose end is not set: it ends at
  /// `end_ns` (>= its launch).
  void set_forward_end(SimTimeNs end_ns);
  /// A wave starts: an idle rank starts an iteration now (nothing when a step is in flight or
  /// queued).
  void kick(SimTimeNs now_ns);
  /// Dummy batches run (with a forward barrier).
  std::int64_t num_dummy_steps() const { return dummy_steps_; }
  /// The duration of a dummy batch's own forward pass.
  SimTimeNs dummy_step_ns() const { return dummy_ns_; }
  /// Queues `spec` to arrive at max(spec.arrival_ns, now()) (not from the simulator's source: its
  /// follow-up turns go to that source's on_finished as usual). Timed mode only.
  void inject_arrival(RequestSpec spec) { queue_arrival(std::move(spec), /*open_loop=*/false); }
  /// Ends the run: fails with RunError when requests are left that can never run; observers get
  /// on_simulation_end.
  void finish();
  /// cache_only: whether the server admits `spec` (the profile's ServerAdmission rule and
  /// EngineCore::admission_error); a refused request is not served (nor routed).
  bool admits(const RequestSpec& spec) const { return plan_outputs(spec).has_value(); }
  /// cache_only: serves one request now, as the cache_only loop does (lookup, allocate, free;
  /// observers get on_lookup and on_request_done), and writes the tokens it generates into
  /// `outputs`. Returns false, with a rejected record to the observers, when the server refuses
  /// it. Does not call the source (the caller reports the request to its source).
  bool serve_cache_only(RequestSpec& spec, std::vector<std::int32_t>& outputs);

  /// Makes this replica a prefill (P) or decode (D) engine of a P/D cluster
  /// (sim/engine/pd_endpoint.h: the interface, who calls what and when): vllm-0.20 in timed mode,
  /// no CPU tier, no forward barrier, one sample per request; before begin(). `hooks` (the
  /// cluster) must outlive the simulator.
  void set_pd_role(PdRole role, PdHooks* hooks, std::string engine_id);
  /// The P/D endpoint (nullptr without a role): the cluster calls its read_done() and notify().
  PdEndpoint* pd_endpoint() { return pd_.get(); }
  const PdEndpoint* pd_endpoint() const { return pd_.get(); }
  /// inject_arrival of a request with kv_transfer_params `params` (the replica's role decides
  /// which are allowed): on P (do_remote_decode) with the toy proxy's max_tokens 1.
  void inject_pd_arrival(RequestSpec spec, PdTransferParams params);

  const EngineCore& engine() const { return *core_; }
  /// EngineCore::set_kv_event_log of this replica's engine (a cluster's KV-event index).
  bool set_kv_event_log(std::vector<KvEvent>* log) { return core_->set_kv_event_log(log); }
  /// The CPU tier (cache.kv_offloading in a timed run), or nullptr.
  const OffloadTier* offload_tier() const { return tier_.get(); }
  SimTimeNs now() const { return engine_.now(); }
  std::int64_t num_steps() const { return step_; }
  std::int64_t requests_done() const { return requests_done_; }
  /// By Request::index(): final K/V positions (for MetricsCollector).
  const std::vector<std::int64_t>& final_kv_tokens() const { return final_kv_tokens_; }

 private:
  /// How an admitted request ends: the engine's max_tokens, the tokens it generates and why it
  /// stops.
  struct OutputPlan {
    std::int64_t max_tokens = 1;
    std::int64_t num_outputs = 1;
    FinishReason reason = FinishReason::kLength;
  };
  /// One event of each mode's loop (advance_to).
  void handle_timed(const Event& ev);
  void handle_cache_only(const Event& ev);
  void queue_arrival(RequestSpec spec, bool open_loop);
  /// The client of the request in live slot `payload & 0xffffffff` gives up (if it is still that
  /// request: the high half is its generation).
  void on_client_timeout(std::int64_t payload);
  /// Frees live slot `slot` for reuse, its request and spec; on_dropped tells the source.
  void release_slot(std::int64_t slot, bool dropped);
  /// The requests.csv row of live slot `slot` finishing now for `reason`.
  RequestRecord record_of(std::int64_t slot, FinishReason reason) const;
  void pull_next_open_loop();
  void on_arrival(std::int64_t pending_slot);
  /// A live slot for `spec` (sample `sample` of its request) with its plan; its client's timeout
  /// is scheduled.
  std::int64_t add_live(RequestSpec spec, const OutputPlan& plan, std::int64_t sample);
  /// Makes the Request of live slot `slot` (its prompt's tokens too).
  void make_request(std::int64_t slot);
  /// Makes the request of live slot `slot` (and of the samples that fork from it) and appends it
  /// to the scheduler's waiting queue.
  void admit(std::int64_t slot);
  /// EngineCore::schedule into out_, then the requests the engine ignored are finished; an
  /// engine that aborts ends the run (RunError naming the step, the request and the pool).
  void schedule_engine();
  /// Ends the run (RunError naming the step) when the engine raised out of `where`.
  void check_step_error(const char* where) const;
  /// Admits arrivals, in order, until the waiting queue holds every request schedule() may look at.
  void admit_waiting();
  /// Waiting requests: the scheduler's and those not yet admitted.
  std::int64_t num_waiting() const;
  /// The duration of the forward pass of the batch in `v` (the step-time function's, at least
  /// 1 ns: time must advance for a run to make progress).
  SimTimeNs forward_ns(const StepView& v) const {
    const SimTimeNs d = step_time_ ? step_time_(v) : 1;
    return d < 1 ? 1 : d;
  }
  /// The synchronous loops with a connector (CPU tier, P/D): the step scheduled at `now` runs
  /// from `start` for `dur` (0: nothing executed, no forward pass); observers see it begin when it
  /// executes, and its end is queued.
  void launch_step(StepView& v, SimTimeNs now, SimTimeNs start, SimTimeNs dur);
  /// At a synchronous step start: advances the next steps at once when they are a run of pure
  /// decodes that ends before the next event and before advance_to's limit, or whose last step
  /// is in flight at events that leave the engine alone (fast_forward.cpp). True when that last
  /// step's end is queued (end_decode_run): no step starts now.
  bool fast_forward();
  /// Whether every event queued before `t` leaves the engine alone: arrivals, and client aborts
  /// of requests the scheduler does not hold.
  bool events_leave_engine_before(SimTimeNs t) const;
  /// The observers get the run ff_run_ (on_decode_run) and the step count moves past it.
  void report_decode_run();
  /// The end of a run whose last step was in flight: reported, then the next step.
  void end_decode_run();
  void start_step();
  void end_step();
  /// The synchronous loop's step with the CPU tier (sim/engine/offload_tier.h): the worker's
  /// transfers around the forward pass, steps that schedule nothing (0 ns, then EngineCore's
  /// 1 ms sleep while requests are unfinished), the idle step that flushes finished ids.
  void start_step_tier();
  void end_step_tier();
  /// Ends the run when an empty step left nothing that could ever change (vLLM polls forever).
  void check_tier_progress();
  /// Fills `v` with the batch features of `out` (scheduled at `now`). The tokens the model samples
  /// are not written here: every engine reads them from Request::planned_outputs.
  void describe_step(StepView& v, const SchedulerOutput& out, SimTimeNs now);
  /// With a P/D role (simulator_pd.cpp): vLLM v0.20.1's EngineCore loop with NixlConnector,
  /// synchronous (step) and with async scheduling (step_with_batch_queue): steps that schedule
  /// nothing still run the connector, the 1 ms sleep after an iteration that ran no new batch
  /// while requests are unfinished, aborts taken at each iteration's start.
  void start_step_pd();
  void end_step_pd();
  void start_step_async_pd();
  void end_step_async_pd();
  /// The async loop pops its oldest batch (ended): its report, update_from_output, post_step.
  void update_oldest_async_pd();
  /// After an update: the next iteration, at once or after EngineCore's 1 ms sleep.
  void next_iteration_pd(bool model_executed);
  /// Ends the run when an empty step left nothing that could ever change.
  void check_pd_progress();
  /// vLLM v0.20's async scheduling: EngineCore's batch queue of two steps (step k+1 scheduled
  /// before step k's tokens are known; a step's outputs applied at its end, in order).
  void start_step_async();
  void end_step_async();
  /// With a forward barrier: launches the step in `v` (`duration_ns` long on its own) whose end
  /// the barrier sets.
  void launch_forward(StepView& v, SimTimeNs duration_ns);
  /// A dummy batch ended (its aborts, the barrier told, the next iteration).
  void end_dummy_step();
  /// The outputs_ of the step that ended, less those of aborted requests, to the step's
  /// observers (when it ran a batch); returns them.
  const std::vector<RequestOutput>& deliver_outputs(StepView& v, bool executed);
  /// Finishes the requests `delivered` finished, then applies the aborts that came during the step.
  void finish_delivered(const std::vector<RequestOutput>& delivered);
  /// The next step: now, after whatever else is due at this instant.
  void next_step_after_end();
  void finish_request(std::int64_t slot, FinishReason reason);
  void request_done(const RequestRecord& rec);
  /// The plan of `spec` under the server's rule, or nullopt when the server refuses it (or the
  /// engine: EngineCore::admission_error).
  std::optional<OutputPlan> plan_outputs(const RequestSpec& spec) const;
  /// Records `spec` (sample `sample` of its request) as refused at its arrival.
  void reject(const RequestSpec& spec, std::int64_t sample = 0);
  /// The request's SamplingLimits (max_tokens: the engine's, from the plan).
  static SamplingLimits sampling_limits(const RequestSpec& spec, const OutputPlan& plan);
  /// The first n tokens `spec` generates, into `out`: output_token's, with the EOS token at
  /// position output_tokens - 1 where the request stops at EOS.
  void generated_tokens(const RequestSpec& spec, std::int64_t n, std::vector<Token>& out) const;
  [[noreturn]] void fail_cannot_fit(const Request& r) const;
  /// A request between its arrival and its end, in its slot of live_.
  struct Live {
    RequestSpec spec;                  // prompt moved into `request` while live
    std::unique_ptr<Request> request;  // null until admitted into the scheduler's waiting queue
    SimTimeNs first_scheduled_ns = -1;
    SimTimeNs first_token_ns = -1;
    SimTimeNs last_token_ns = -1;
    std::int64_t first_lookup_hit_tokens = 0;
    OutputPlan plan;               // from the server's rule at arrival
    std::vector<Token> outputs;    // the tokens it will generate, made at admission
    std::uint32_t generation = 0;  // bumped when the slot is released (timeout events carry it)
    bool client_gone = false;      // aborted by its client; the engine may still hold it
    // Parallel sampling (sim/engine/parallel_sampling.h): the sample's index; in fork mode, sample
    // 0's slots of the samples that fork from it, and theirs of sample 0 (-1: none).
    std::int64_t sample = 0;
    std::vector<std::int64_t> fork_children;
    std::int64_t fork_parent = -1;
  };
  void report_progress();

  const Scenario& scenario_;
  // The release checks EOS before the length limits (vLLM v0.20's check_stop): an EOS on the
  // last token max_tokens allows is a "stop" (cache_only's plans; timed runs take the engine's).
  bool stop_tokens_before_length_ = false;
  ServerAdmission admission_;
  RequestSource& source_;
  StepTimeFn step_time_;
  std::int32_t vocab_size_;  // generated tokens lie in [0, vocab_size_)
  std::vector<StepObserver*> observers_;
  bool check_invariants_ = false;
  std::function<void(const SimProgress&)> progress_;
  std::uint64_t progress_every_ = 1 << 16;
  const volatile std::sig_atomic_t* interrupt_ = nullptr;
  void check_interrupt() const;

  Engine engine_;
  std::unique_ptr<EngineCore> core_;  // the engine family's state machines
  std::unique_ptr<OffloadTier> tier_;  // the CPU tier (timed runs with cache.kv_offloading)
  bool step_executed_ = false;         // the step in flight has a forward pass (tier loop)
  std::unique_ptr<PdEndpoint> pd_;     // the P/D connector (set_pd_role)
  bool pd_sleeping_ = false;           // P/D: EngineCore's 1 ms sleep (aborts wait for it)
  bool pd_blocked_ = false;            // P/D async: the loop waits for its oldest batch's end
  bool pd_iter_executed_ = false;      // P/D async: the iteration's new batch has a forward pass
  int pd_ended_ = 0;                   // P/D async: batches ended, not yet updated (from head)
  SchedulerOutput out_;
  std::vector<RequestOutput> outputs_;
  std::vector<SimTimeNs> prev_token_ns_;
  std::vector<Request*> fork_requests_;  // scratch of admit()

  std::vector<Live> live_;  // by slot = Request::index()
  std::vector<std::int64_t> free_slots_;
  std::vector<std::int64_t> final_kv_tokens_;  // by slot
  std::vector<std::uint64_t> request_ids_;     // by slot
  PendingArrivals pending_;  // arrivals not yet happened
  RingDeque<std::int64_t> unadmitted_;        // live slots that arrived, behind the waiting queue
  std::int64_t unadmitted_gone_ = 0;          // of those, aborted by their clients (skipped)
  std::vector<std::int64_t> pending_aborts_;  // slots the engine aborts when the step ends
  std::vector<RequestOutput> delivered_;      // outputs_ less those of aborted requests
  bool open_loop_done_ = false;
  std::uint64_t events_handled_ = 0;             // since begin() (progress reports)
  std::vector<std::int32_t> cache_only_outputs_;  // scratch of handle_cache_only

  // Fast-forward (set_fast_forward): the limit of the current advance_to, a run's step times
  // and pools, the batch's previous token times, the batch as the latency model sees it.
  bool fast_forward_ = true;
  SimTimeNs advance_limit_ns_ = kNeverNs;
  std::vector<SimTimeNs> ff_times_;
  std::vector<KVPoolStats> ff_pool_;
  std::vector<SimTimeNs> ff_prev_;
  SchedulerOutput ff_out_;
  StepView ff_view_;
  DecodeRun ff_run_;            // the last run (until end_decode_run when its last step flies)
  bool run_in_flight_ = false;  // a run's last step is in flight: its kStepEnd ends the run
  std::int64_t ff_steps_ = 0, ff_runs_ = 0;
  bool step_in_flight_ = false;
  bool schedule_queued_ = false;
  bool queue_step_starts_ = false;  // set_queue_step_starts
  std::int64_t step_ = 0;
  SimTimeNs step_start_ns_ = 0;
  StepView view_;
  // Async scheduling: the steps in flight (at most two), oldest at async_head_.
  struct AsyncStep {
    SchedulerOutput out;
    StepView view;
    bool executed = false;   // it scheduled tokens (a forward pass)
    bool scheduled = true;   // schedule() made it (a barrier's dummy batch alone is not)
    bool dummy = false;      // with a barrier: it runs a dummy batch
  };
  bool async_ = false;
  AsyncStep async_steps_[2];
  int async_head_ = 0;
  int async_count_ = 0;
  SimTimeNs gpu_free_ns_ = 0;  // when the GPU finishes the last step launched
  // Finished requests a step in flight may still list: kept until that step's end.
  std::vector<std::unique_ptr<Request>> retired_;
  std::int64_t requests_done_ = 0;
  // A forward barrier (set_forward_barrier): this engine's rank, a dummy batch's duration, the
  // launched forward passes whose end the barrier has not set, the synchronous loop's dummy batch
  // in flight, the dummy batches run.
  ForwardBarrier* barrier_ = nullptr;
  std::int32_t rank_ = 0;
  SimTimeNs dummy_ns_ = 0;
  int awaiting_end_ = 0;
  bool dummy_in_flight_ = false;
  std::int64_t dummy_steps_ = 0;
  SchedulerOutput dummy_out_;  // a dummy batch as the latency model sees it
};

/// The step-time function of the scenario's `latency:` section (sim/engine/latency_model.h).
[[nodiscard]] StepTimeFn make_step_time(const Scenario& scenario);

/// The vocabulary generated and synthetic tokens are drawn from: the model's, else 32,000.
std::int32_t scenario_vocab_size(const Scenario& scenario);

}  // namespace kvsim
