// The timed P/D state machine of one engine (Simulator::set_pd_role, sim/engine/pd_endpoint.h):
// a prefill replica (P) and a decode replica (D) of vllm-0.20 driven by a small cluster of this
// file (fixed proxy, transfer and notification times), every step 10 ms. The times below are
// worked out by hand from vLLM v0.20.1's EngineCore loop (core.py), its scheduler and
// NixlConnector (shared/spec/cluster-routing.md §7.1, §7.3).

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "core/v1/scheduler.h"
#include "sim/engine/simulator.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {

constexpr SimTimeNs kMs = 1'000'000;
constexpr SimTimeNs kUs = 1'000;

std::string scenario(bool async) {
  return std::string(
             "name: pd\nseed: 1\nengine: {profile: vllm-0.20, mode: timed}\n"
             "model: {name: tiny, model_type: llama, num_hidden_layers: 2, num_attention_heads: 4, "
             "num_key_value_heads: 2, head_dim: 64, hidden_size: 256, intermediate_size: 512, "
             "vocab_size: 32000, max_position_embeddings: 16384, torch_dtype: bfloat16}\n"
             "cache: {block_size: 16, num_gpu_blocks_override: 100}\n"
             "scheduler: {max_num_seqs: 8, max_num_batched_tokens: 2048, max_model_len: 4096, "
             "async_scheduling: ") +
         (async ? "true" : "false") +
         "}\n"
         "workload: {num_requests: 1, prompt_tokens: 10, output_tokens: 2}\n"
         "latency: {model: constant, step_time_us: 10000}\n";
}

struct EmptySource : RequestSource {
  std::optional<RequestSpec> next() override { return std::nullopt; }
};

/// A request of `prompt` tokens (content `key`) that generates `outputs` tokens.
RequestSpec spec(std::uint64_t id, SimTimeNs arrival_ns, std::int64_t prompt, std::int32_t outputs,
                 std::int32_t key) {
  RequestSpec r;
  r.id = id;
  r.arrival_ns = arrival_ns;
  for (std::int64_t i = 0; i < prompt; ++i)
    r.prompt.push_back(static_cast<std::int32_t>(1000 * key + i));
  r.output_tokens = outputs;
  r.max_tokens = outputs;
  r.ignore_eos = true;
  r.output_seed = 77 + id;
  return r;
}

/// What one replica did: the steps that ran (who was scheduled, from which computed count), the
/// tokens each request got and when, the finished requests, the empty steps.
struct Recorder : StepObserver {
  struct Sched {
    std::uint64_t id;
    std::int64_t num_tokens, num_computed;
  };
  struct Step {
    SimTimeNs start_ns, end_ns;
    std::vector<Sched> scheduled;
  };
  std::vector<Step> steps;
  std::map<std::uint64_t, std::vector<std::pair<std::int32_t, SimTimeNs>>> tokens;
  std::vector<RequestRecord> done;
  std::vector<SimTimeNs> empty_steps;  // their end times
  void on_step_begin(const StepView& v) override {
    Step s{v.start_ns, v.end_ns, {}};
    for (const ScheduledRequest& r : v.out->scheduled)
      s.scheduled.push_back({v.request_id_of_index[static_cast<std::size_t>(r.request->index())],
                             r.num_tokens, r.num_computed_tokens});
    steps.push_back(s);
  }
  void on_step(const StepView& v) override {
    for (const RequestOutput& o : v.outputs)
      tokens[v.request_id_of_index[static_cast<std::size_t>(o.request->index())]].push_back(
          {o.token, v.end_ns});
  }
  void on_empty_step(const StepView& v) override { empty_steps.push_back(v.end_ns); }
  void on_request_done(const RequestRecord& r) override { done.push_back(r); }
  /// The first step that scheduled request `id` (nullptr: none).
  const Step* first_with(std::uint64_t id) const {
    for (const Step& s : steps)
      for (const Sched& r : s.scheduled)
        if (r.id == id) return &s;
    return nullptr;
  }
  const RequestRecord* record(std::uint64_t id) const {
    for (const RequestRecord& r : done)
      if (r.request_id == id) return &r;
    return nullptr;
  }
};

/// A P/D pair and the cluster around it: the proxy sends P's result to D `proxy_ns` after P
/// finished; a read of n blocks takes `transfer_ns`; D's notification reaches P `notify_ns`
/// after the read ended (never when `drop_notifications`).
struct Cluster : PdHooks {
  explicit Cluster(const Scenario& s)
      : p(s, none_p, kvsim::test::constant_ms(10)), d(s, none_d, kvsim::test::constant_ms(10)) {
    p.set_pd_role(PdRole::kPrefill, this, "engine-P");
    d.set_pd_role(PdRole::kDecode, this, "engine-D");
    p.attach(&rp);
    d.attach(&rd);
    p.set_check_invariants(true);
    d.set_check_invariants(true);
    p.begin();
    d.begin();
  }
  EmptySource none_p, none_d;
  Simulator p, d;
  Recorder rp, rd;
  SimTimeNs proxy_ns = 1 * kMs, transfer_ns = 2500 * kUs, notify_ns = 500 * kUs;
  bool drop_notifications = false;
  SimTimeNs d_client_timeout_ns = -1;  // D's copy of a request: its client's timeout (-1: as sent)
  std::map<std::uint64_t, RequestSpec> originals;
  struct Read {
    std::uint64_t id;
    std::int64_t blocks;
    std::string engine;
    SimTimeNs start_ns;
  };
  struct Note {
    std::uint64_t id;
    std::string engine, request;
    SimTimeNs sent_ns;
  };
  std::vector<PdPrefillResult> prefills;
  std::vector<Read> reads;
  std::vector<Note> notes;

  /// The client's request goes to P first (the toy proxy's max_tokens 1), then to D.
  void submit(const RequestSpec& s) {
    originals[s.id] = s;
    PdTransferParams params;
    params.do_remote_decode = true;
    p.inject_pd_arrival(s, params);
  }
  void on_prefill_done(const PdPrefillResult& r) override {
    prefills.push_back(r);
    if (!r.returned_params) return;
    RequestSpec s = originals.at(r.request_id);
    s.arrival_ns = r.finish_ns + proxy_ns;
    if (d_client_timeout_ns >= 0) s.client_timeout_ns = d_client_timeout_ns;
    d.inject_pd_arrival(std::move(s), r.params);
  }
  void on_read_start(std::uint64_t id, std::int64_t n, const std::string& engine,
                     SimTimeNs t) override {
    reads.push_back({id, n, engine, t});
    d.pd_endpoint()->read_done(id, t + transfer_ns);
  }
  void on_read_notify(std::uint64_t id, const std::string& engine, const std::string& request,
                      SimTimeNs t) override {
    notes.push_back({id, engine, request, t});
    if (!drop_notifications) p.pd_endpoint()->notify(request, t + notify_ns);
  }
  /// Handles every event of both replicas before `t` in time order (P first at a tie).
  void run_until(SimTimeNs t) {
    for (;;) {
      const SimTimeNs tp = p.next_event_ns(), td = d.next_event_ns();
      if (std::min(tp, td) >= t) return;
      if (tp <= td)
        p.advance_to(tp + 1);
      else
        d.advance_to(td + 1);
    }
  }
  const Scheduler& sp() const { return dynamic_cast<const Scheduler&>(p.engine()); }
  const Scheduler& sd() const { return dynamic_cast<const Scheduler&>(d.engine()); }
};

/// The tokens and their count a single aggregated engine gives `specs`.
std::map<std::uint64_t, std::vector<std::int32_t>> aggregated_tokens(
    const Scenario& s, const std::vector<RequestSpec>& specs) {
  EmptySource none;
  Simulator sim(s, none, kvsim::test::constant_ms(10));
  Recorder rec;
  sim.attach(&rec);
  sim.begin();
  for (const RequestSpec& r : specs) sim.inject_arrival(r);
  sim.advance_to(Simulator::kNeverNs);
  sim.finish();
  std::map<std::uint64_t, std::vector<std::int32_t>> out;
  for (const auto& [id, toks] : rec.tokens)
    for (const auto& t : toks) out[id].push_back(t.first);
  return out;
}

}  // namespace

TEST_CASE("P/D, synchronous loop: P holds, D waits, reads, promotes and recomputes", "[sim][pd]") {
  const Scenario s = kvsim::test::parse_text(scenario(false));
  Cluster c(s);
  const std::int64_t free0 = c.p.engine().pool_stats().num_free_blocks;
  c.submit(spec(0, 0, 40, 5, 1));  // 40 prompt tokens: 3 blocks of 16

  // P: the prefill step 0-10 ms samples P's one token; the request finishes LENGTH_CAPPED at
  // 10 ms and returns its 3 blocks; P holds them (still cached).
  c.run_until(10 * kMs + 1);
  REQUIRE(c.prefills.size() == 1);
  const PdPrefillResult& pr = c.prefills[0];
  CHECK(pr.request_id == 0);
  CHECK(pr.returned_params);
  CHECK(pr.delay_free);
  CHECK(pr.finish_ns == 10 * kMs);
  CHECK(pr.params.do_remote_prefill);
  CHECK(pr.params.remote_block_ids.size() == 3);
  CHECK(pr.params.remote_engine_id == "engine-P");
  CHECK(pr.params.remote_request_id == PdEndpoint::request_name(0));
  CHECK(c.sp().held().size() == 1);
  CHECK(c.p.engine().pool_stats().num_free_blocks == free0 - 3);
  REQUIRE(c.rp.record(0) != nullptr);
  CHECK(c.rp.record(0)->output_tokens == 1);
  // P's next step (the finished id flushed, nothing scheduled) registered the expiry
  // (10 ms + 480 s), then P went idle: no more events.
  REQUIRE(c.p.pd_endpoint()->worker().reqs_to_send().size() == 1);
  CHECK(c.p.pd_endpoint()->worker().reqs_to_send()[0].second == Approx(480.01));
  CHECK(c.rp.empty_steps == std::vector<SimTimeNs>{10 * kMs});
  CHECK(c.p.next_event_ns() == Simulator::kNeverNs);

  // D: arrives at 11 ms; its schedule() allocates the 3 blocks (no local hit) and parks it in
  // WAITING_FOR_REMOTE_KVS; that step (nothing to run) starts the read at 11 ms.
  c.run_until(11 * kMs + 1);
  REQUIRE(c.reads.size() == 1);
  CHECK(c.reads[0].id == 0);
  CHECK(c.reads[0].blocks == 3);
  CHECK(c.reads[0].engine == "engine-P");
  CHECK(c.reads[0].start_ns == 11 * kMs);
  // While it waits (read done at 13.5 ms): a waiting request with its blocks, no running slot,
  // no step with a forward pass; D polls every 1 ms (empty steps at 11, 12, 13 ms).
  c.run_until(13 * kMs + 600 * kUs);
  CHECK(c.sd().num_waiting() == 1);
  CHECK(c.sd().running().empty());
  REQUIRE(c.sd().skipped_waiting().size() == 1);
  CHECK(c.sd().skipped_waiting().front()->status == RequestStatus::kWaitingForRemoteKvs);
  CHECK(c.sd().skipped_waiting().front()->kv_groups[0].blocks.size() == 3);
  CHECK(c.rd.steps.empty());
  CHECK(c.rd.empty_steps == std::vector<SimTimeNs>{11 * kMs, 12 * kMs, 13 * kMs});
  // The read ended at 13.5 ms: D's notification left then, for P's request id.
  REQUIRE(c.notes.size() == 1);
  CHECK(c.notes[0].sent_ns == 13 * kMs + 500 * kUs);
  CHECK(c.notes[0].request == PdEndpoint::request_name(0));
  CHECK(c.notes[0].engine == "engine-P");
  // get_finished of the 14 ms step sees it; the request waits for the next schedule().
  c.run_until(14 * kMs + 1);
  CHECK(c.sd().finished_recving_pending().size() == 1);
  CHECK(c.sd().num_waiting() == 1);
  CHECK(c.rd.steps.empty());
  // That step ran no forward pass: EngineCore sleeps 1 ms; schedule() at 15 ms promotes it and
  // recomputes the last prompt token (39 computed, 1 scheduled): the first token at 25 ms.
  c.run_until(100 * kMs);
  REQUIRE(!c.rd.steps.empty());
  const Recorder::Step& first = c.rd.steps[0];
  CHECK(first.start_ns == 15 * kMs);
  REQUIRE(first.scheduled.size() == 1);
  CHECK(first.scheduled[0].num_tokens == 1);
  CHECK(first.scheduled[0].num_computed == 39);
  REQUIRE(c.rd.tokens[0].size() == 5);
  CHECK(c.rd.tokens[0][0].second == 25 * kMs);
  REQUIRE(c.rd.record(0) != nullptr);
  CHECK(c.rd.record(0)->first_token_ns == 25 * kMs);
  CHECK(c.rd.record(0)->finish_ns == 65 * kMs);
  CHECK(c.rd.record(0)->output_tokens == 5);

  // P is idle: the notification (at 14 ms) waits; P still holds the blocks.
  CHECK(c.sp().held().size() == 1);
  CHECK(c.p.pd_endpoint()->stats().notifications_received == 0);
  // A new request on P at 200 ms: its step ends at 210 ms, where get_finished sees the
  // notification and the blocks are freed (not before).
  c.p.inject_arrival(spec(7, 200 * kMs, 20, 1, 2));
  c.run_until(210 * kMs);
  CHECK(c.sp().held().size() == 1);
  c.run_until(210 * kMs + 1);
  CHECK(c.sp().held().empty());
  CHECK(c.p.pd_endpoint()->stats().freed_by_notification == 1);
  CHECK(c.p.pd_endpoint()->stats().expired == 0);
  CHECK(c.p.pd_endpoint()->num_parked() == 0);
  c.run_until(Simulator::kNeverNs);
  c.p.finish();
  c.d.finish();
}

TEST_CASE("P/D: a busy P frees at its first step end after the notification", "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = kvsim::test::parse_text(scenario(async));
    Cluster c(s);
    c.transfer_ns = 3 * kMs;
    // A long request keeps P stepping every 10 ms from 0 ms; the P/D request arrives at 0 too
    // and finishes at 10 ms.
    c.p.inject_arrival(spec(9, 0, 16, 60, 3));
    c.submit(spec(0, 0, 40, 3, 1));
    c.run_until(20 * kMs);
    REQUIRE(c.prefills.size() == 1);
    CHECK(c.prefills[0].finish_ns == 10 * kMs);
    // D: arrives at 11 ms, reads 11-14 ms; the notification reaches P at 14.5 ms, inside P's
    // step 10-20 ms, whose end sees it.
    REQUIRE(c.notes.size() == 1);
    CHECK(c.notes[0].sent_ns == 14 * kMs);
    CHECK(c.sp().held().size() == 1);
    c.run_until(20 * kMs + 1);
    CHECK(c.sp().held().empty());
    CHECK(c.p.pd_endpoint()->stats().freed_by_notification == 1);
    c.run_until(Simulator::kNeverNs);
    CHECK(c.rp.tokens[9].size() == 60);
    CHECK(c.rd.tokens[0].size() == 3);
  }
}

TEST_CASE("P/D, async scheduling: the promoting schedule() is one step later", "[sim][pd]") {
  // D runs a long request (10 ms steps) when the P/D request comes: the read starts when D starts
  // executing the batch that allocated its blocks, and the schedule() after the update that saw
  // the read promotes it.
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = kvsim::test::parse_text(scenario(async));
    Cluster c(s);
    c.transfer_ns = 5 * kMs;
    c.d.inject_arrival(spec(9, 0, 16, 100, 3));
    c.submit(spec(0, 0, 40, 4, 1));
    c.run_until(300 * kMs);
    REQUIRE(c.reads.size() == 1);
    const Recorder::Step* promoted = c.rd.first_with(0);
    REQUIRE(promoted != nullptr);
    REQUIRE(c.rd.tokens[0].size() == 4);
    if (!async) {
      // D arrives at 11 ms (step 10-20 in flight); schedule() at 20 ms allocates, the step
      // 20-30 starts the read (done 25 ms), its end sees it, schedule() at 30 ms promotes.
      CHECK(c.reads[0].start_ns == 20 * kMs);
      CHECK(promoted->start_ns == 30 * kMs);
      CHECK(promoted->end_ns == 40 * kMs);
      CHECK(c.rd.tokens[0][0].second == 40 * kMs);
    } else {
      // Batches: B1 10-20, B2 (scheduled 10) 20-30; at 20 ms update(B1), then B3 scheduled with
      // the allocation; it runs 30-40 and starts the read at 30 ms (done 35); B4 was scheduled
      // at 30 ms before the update of B3 (at 40 ms) saw the read: B5, scheduled at 40 ms,
      // promotes; it runs 50-60 ms.
      CHECK(c.reads[0].start_ns == 30 * kMs);
      CHECK(promoted->start_ns == 40 * kMs);
      CHECK(promoted->end_ns == 60 * kMs);
      CHECK(c.rd.tokens[0][0].second == 60 * kMs);
    }
    REQUIRE(promoted->scheduled.size() == 2);
    for (const Recorder::Sched& r : promoted->scheduled)
      if (r.id == 0) {
        CHECK(r.num_tokens == 1);
        CHECK(r.num_computed == 39);
      }
  }
}

TEST_CASE("P/D, async scheduling with an idle D: polling, promotion, first token", "[sim][pd]") {
  const Scenario s = kvsim::test::parse_text(scenario(true));
  Cluster c(s);
  c.submit(spec(0, 0, 40, 5, 1));
  c.run_until(12 * kMs + 500 * kUs);
  // P: batch 0-10 ms; the async batch behind it scheduled nothing (max_tokens 1); finished at 10.
  REQUIRE(c.prefills.size() == 1);
  CHECK(c.prefills[0].finish_ns == 10 * kMs);
  REQUIRE(c.reads.size() == 1);
  CHECK(c.reads[0].start_ns == 11 * kMs);
  CHECK(c.sd().num_waiting() == 1);
  CHECK(c.sd().running().empty());
  c.run_until(200 * kMs);
  // Seen at 14 ms (the empty batch of the 14 ms iteration), 1 ms sleep, promoted at 15 ms: the
  // first token at 25 ms, then one token every 10 ms.
  const Recorder::Step* promoted = c.rd.first_with(0);
  REQUIRE(promoted != nullptr);
  CHECK(promoted->start_ns == 15 * kMs);
  REQUIRE(c.rd.tokens[0].size() == 5);
  CHECK(c.rd.tokens[0][0].second == 25 * kMs);
  CHECK(c.rd.tokens[0][4].second == 65 * kMs);
  CHECK(c.rd.empty_steps.size() >= 4);
  CHECK(c.rd.empty_steps[0] == 11 * kMs);
  c.run_until(Simulator::kNeverNs);
  c.d.finish();
}

TEST_CASE("P/D: without a notification P frees at its first step end 480 s on", "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = kvsim::test::parse_text(scenario(async));
    Cluster c(s);
    c.drop_notifications = true;
    c.submit(spec(0, 0, 40, 2, 1));
    // Two later requests wake P: at 479 s (its steps end before the expiry, 480.01 s) and at
    // 480.005 s (its step ends at 480.015 s, after it).
    c.p.inject_arrival(spec(5, 479'000 * kMs, 20, 1, 4));
    c.p.inject_arrival(spec(6, 480'005 * kMs, 20, 1, 5));
    c.run_until(479'500 * kMs);
    CHECK(c.sp().held().size() == 1);
    CHECK(c.p.pd_endpoint()->stats().expired == 0);
    c.run_until(480'015 * kMs);
    CHECK(c.sp().held().size() == 1);
    c.run_until(480'015 * kMs + 1);
    CHECK(c.sp().held().empty());
    CHECK(c.p.pd_endpoint()->stats().expired == 1);
    CHECK(c.p.pd_endpoint()->stats().freed_by_notification == 0);
    // D got its tokens all the same.
    CHECK(c.rd.tokens[0].size() == 2);
  }
}

TEST_CASE("P/D: a request aborted while waiting for its read keeps its blocks", "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = kvsim::test::parse_text(scenario(async));
    Cluster c(s);
    c.transfer_ns = 20 * kMs;             // read 11-31 ms
    c.d_client_timeout_ns = 4'500 * kUs;  // D's client gives up at 15.5 ms (D polls at 15, 16)
    c.submit(spec(0, 0, 40, 5, 1));
    const std::int64_t free0 = c.d.engine().pool_stats().num_free_blocks;
    c.run_until(15'700 * kUs);
    // The abort waits for D's next iteration (EngineCore sleeps); the row is written at 15.5 ms.
    REQUIRE(c.rd.record(0) != nullptr);
    CHECK(c.rd.record(0)->reason == FinishReason::kAbort);
    CHECK(c.rd.record(0)->finish_ns == 15'500 * kUs);
    CHECK(c.sd().num_waiting() == 1);
    c.run_until(16 * kMs + 1);
    // Aborted at 16 ms: out of the queues, its 3 blocks held until the read ends.
    CHECK(c.sd().num_waiting() == 0);
    CHECK(c.sd().held().size() == 1);
    CHECK(c.d.engine().pool_stats().num_free_blocks == free0 - 3);
    // D has nothing unfinished: it stops stepping; the read ends at 31 ms (P is notified then).
    c.run_until(40 * kMs);
    REQUIRE(c.notes.size() == 1);
    CHECK(c.notes[0].sent_ns == 31 * kMs);
    CHECK(c.sd().held().size() == 1);
    CHECK(c.d.next_event_ns() == Simulator::kNeverNs);
    // D's next step (a new request at 50 ms, 50-60 ms) sees the read in get_finished and frees.
    c.d.inject_arrival(spec(8, 50 * kMs, 20, 1, 6));
    c.run_until(60 * kMs);
    CHECK(c.sd().held().size() == 1);
    c.run_until(60 * kMs + 1);
    CHECK(c.sd().held().empty());
    CHECK(c.d.engine().pool_stats().num_free_blocks == free0);
    // P frees when it steps again (the notification came at 31.5 ms).
    CHECK(c.sp().held().size() == 1);
    c.run_until(Simulator::kNeverNs);
    c.d.finish();
  }
}

TEST_CASE("P/D: a request aborted before its allocation only notifies P", "[sim][pd]") {
  const Scenario s = kvsim::test::parse_text(scenario(false));
  Cluster c(s);
  // D's pool is full of a long request's blocks when the P/D request comes: it waits unallocated.
  c.d.inject_arrival(spec(9, 0, 16 * 90, 5, 3));
  RequestSpec r = spec(0, 0, 40 * 16, 5, 1);  // 40 blocks: no room on D beside the long one
  r.client_timeout_ns = 15 * kMs;
  c.submit(r);
  // D: it arrives at 11 ms; its client gives up at 26 ms, during the step 20-30 ms; the abort
  // at 30 ms puts a read of no blocks into the next step's metadata, started at 30 ms.
  c.run_until(200 * kMs);
  CHECK(c.reads.empty());
  REQUIRE(c.notes.size() == 1);
  CHECK(c.notes[0].id == 0);
  CHECK(c.notes[0].sent_ns == 30 * kMs);
  CHECK(c.d.pd_endpoint()->stats().notify_only == 1);
  CHECK(c.sd().held().empty());
}

TEST_CASE("P/D with instant transfers gives D's requests the aggregated engine's tokens",
          "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = kvsim::test::parse_text(scenario(async));
    std::vector<RequestSpec> specs = {spec(0, 0, 40, 5, 1), spec(1, 3 * kMs, 70, 12, 2),
                                      spec(2, 5 * kMs, 17, 1, 3), spec(3, 40 * kMs, 33, 30, 4)};
    // One stops at EOS before its max_tokens (its 4th token), one has no max_tokens.
    specs[1].ignore_eos = false;
    specs[1].eos_token_id = 2;
    specs[1].output_tokens = 4;
    specs[3].max_tokens.reset();
    specs[3].ignore_eos = false;
    specs[3].eos_token_id = 2;
    const auto expected = aggregated_tokens(s, specs);
    REQUIRE(expected.at(1).size() == 4);
    REQUIRE(expected.at(3).size() == 30);
    Cluster c(s);
    c.proxy_ns = c.transfer_ns = c.notify_ns = 0;
    for (const RequestSpec& r : specs) c.submit(r);
    c.run_until(Simulator::kNeverNs);
    c.p.finish();
    c.d.finish();
    std::map<std::uint64_t, std::vector<std::int32_t>> got;
    for (const auto& [id, toks] : c.rd.tokens)
      for (const auto& t : toks) got[id].push_back(t.first);
    CHECK(got == expected);
    CHECK(c.prefills.size() == 4);
    // The last request's notification came after P's last step: P still holds its blocks.
    CHECK(c.sp().held().size() == 1);
  }
}

TEST_CASE("P/D: blocks P holds are hit on P and blocks D read are cached on D", "[sim][pd]") {
  const Scenario s = kvsim::test::parse_text(scenario(false));
  Cluster c(s);
  c.drop_notifications = true;  // P holds request 0's blocks all along
  c.submit(spec(0, 0, 40, 3, 1));
  c.submit(spec(1, 100 * kMs, 40, 3, 1));  // the same prompt, later
  c.run_until(Simulator::kNeverNs);
  REQUIRE(c.reads.size() == 2);
  CHECK(c.reads[0].blocks == 3);
  // P: request 1 hits the 2 full blocks P holds for request 0 (hits stop before the last token).
  REQUIRE(c.rp.record(1) != nullptr);
  CHECK(c.rp.record(1)->first_lookup_hit_tokens == 32);
  CHECK(c.prefills[1].params.remote_block_ids.size() == 3);
  CHECK(c.prefills[1].params.remote_block_ids[0] == c.prefills[0].params.remote_block_ids[0]);
  // D: request 0's read blocks were cached at its promotion: request 1 hits 32 tokens locally and
  // reads only its last block.
  CHECK(c.reads[1].blocks == 1);
  CHECK(c.d.engine().pool_stats().num_free_blocks == c.d.engine().pool_stats().num_blocks - 1);
  CHECK(c.rd.tokens[1].size() == 3);
}

TEST_CASE("P/D: a request aborted before D's scheduler saw it still notifies P", "[sim][pd]") {
  for (const bool async : {false, true}) {
    CAPTURE(async);
    const Scenario s = kvsim::test::parse_text(scenario(async));
    Cluster c(s);
    c.d.inject_arrival(spec(9, 0, 16, 20, 3));  // D steps every 10 ms from 0
    c.d_client_timeout_ns = 4 * kMs;            // D's copy arrives at 11 ms, aborted at 15 ms
    c.submit(spec(0, 0, 40, 5, 1));
    c.run_until(200 * kMs);
    REQUIRE(c.rd.record(0) != nullptr);
    CHECK(c.rd.record(0)->reason == FinishReason::kAbort);
    CHECK(c.reads.empty());
    // vLLM adds and aborts it at D's next iteration (20 ms); the read of no blocks is in the
    // metadata of the step scheduled then, which starts at 20 ms (async: at 30 ms, behind the
    // batch in flight).
    REQUIRE(c.notes.size() == 1);
    CHECK(c.notes[0].request == PdEndpoint::request_name(0));
    CHECK(c.notes[0].sent_ns == (async ? 30 : 20) * kMs);
    CHECK(c.d.pd_endpoint()->stats().notify_only == 1);
  }
}
