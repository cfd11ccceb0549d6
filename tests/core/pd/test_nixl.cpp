// P/D disaggregation (core/pd): vLLM v0.20.1's NixlConnector scheduler role plugged into the
// vllm-0.20 scheduler, and the worker bookkeeping. Hand-made lifecycles with exact values (which
// blocks are read, when the request is promoted, the last-token rule, the delayed free on P, the
// expiry boundary), written from nixl/scheduler.py, nixl/worker.py and scheduler.py at v0.20.1.

#include <catch2/catch.hpp>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/pd/nixl_connector.h"
#include "core/pd/nixl_worker.h"
#include "core/v1/scheduler.h"

using kvsim::BlockId;
using kvsim::NixlConnector;
using kvsim::NixlStepMeta;
using kvsim::NixlWorkerSim;
using kvsim::PdParams;
using kvsim::Request;
using kvsim::RequestStatus;
using kvsim::Scheduler;

namespace {

std::vector<std::int32_t> ids(std::span<const BlockId> blocks) {
  std::vector<std::int32_t> v;
  for (const BlockId b : blocks) v.push_back(kvsim::to_int(b));
  return v;
}

/// One engine: the vllm-0.20 scheduler with a NixlConnector and the worker, driven like the
/// replay drives them (the worker runs a step's metadata at its update).
struct Engine {
  explicit Engine(bool async = false, double timeout_s = 480) : connector({timeout_s, 0}) {
    kvsim::SchedulerConfig sc;
    sc.max_num_seqs = 16;
    sc.max_num_batched_tokens = 64;
    sc.max_model_len = 1000;
    sc.scheduler_reserve_full_isl = true;
    sc.async_scheduling = async;
    kvsim::KVCacheConfig kc;
    kc.block_size = 16;
    kc.num_gpu_blocks = 100;
    kc.max_model_len = 1000;
    sched = std::make_unique<Scheduler>(sc, kc, kvsim::Profile::kVllm020);
    sched->kv_cache_manager().coordinator()->hash_without_caching();
    sched->set_connector(&connector);
  }
  Request& add(std::int64_t prompt_len, PdParams params, std::int64_t max_tokens = 16,
               std::int64_t first_token = 0) {
    std::vector<kvsim::Token> prompt(static_cast<std::size_t>(prompt_len));
    std::iota(prompt.begin(), prompt.end(), first_token);
    kvsim::SamplingLimits lim;
    lim.max_tokens = max_tokens;
    auto& r = requests.emplace_back(std::make_unique<Request>(
        static_cast<std::int64_t>(requests.size()), std::move(prompt), lim));
    r->request_id = "r" + std::to_string(r->index());
    r->arrival_time = static_cast<double>(r->index());
    connector.set_params(*r, params);
    sched->add_request(*r);
    return *r;
  }
  void schedule() {
    sched->schedule(out);
    REQUIRE(std::string(sched->step_error()) == "");
    metas.push_back(connector.meta());
  }
  /// The worker runs the oldest step, the named reads finish and notifications arrive, then
  /// update_from_output.
  void update(std::vector<std::string> reads_done = {}, std::vector<std::string> notified = {}) {
    std::vector<const kvsim::NixlRecv*> started, notify_only;
    worker.start_load_kv(metas.front(), started, notify_only);
    metas.erase(metas.begin());
    for (const auto& id : reads_done) worker.complete_read(id);
    for (const auto& id : notified) worker.notify(id);
    worker.get_finished(connector.now(), sending, recving, expired);
    sending_req.clear();
    recving_req.clear();
    for (const auto& id : sending) sending_req.push_back(find(id));
    for (const auto& id : recving) recving_req.push_back(find(id));
    sched->set_connector_output({sending_req, recving_req});
    sched->update_from_output(outputs);
    REQUIRE(std::string(sched->step_error()) == "");
    REQUIRE(sched->find_violation() == "");
    REQUIRE(worker.find_violation() == "");
  }
  Request* find(const std::string& id) {
    for (auto& r : requests)
      if (r->request_id == id) return r.get();
    FAIL("no request " << id);
    return nullptr;
  }
  NixlConnector connector;
  NixlWorkerSim worker;
  std::unique_ptr<Scheduler> sched;
  std::vector<std::unique_ptr<Request>> requests;
  kvsim::SchedulerOutput out;
  std::vector<kvsim::RequestOutput> outputs;
  std::vector<NixlStepMeta> metas;
  std::vector<std::string> sending, recving, expired;
  std::vector<Request*> sending_req, recving_req;
};

PdParams remote_prefill() {
  return {.present = true,
          .do_remote_prefill = true,
          .do_remote_decode = false,
          .remote_block_ids = true,
          .remote_keys = true,
          .remote_meta = true};
}
PdParams remote_decode() { return {.present = true, .do_remote_decode = true}; }

}  // namespace

TEST_CASE("D: a remote prefill reads its new blocks and is promoted after the read", "[core]") {
  Engine e;
  Request& r = e.add(40, remote_prefill());
  e.schedule();  // allocated for the whole prompt, no tokens, WAITING_FOR_REMOTE_KVS
  CHECK(e.out.scheduled.empty());
  CHECK(r.status == RequestStatus::kWaitingForRemoteKvs);
  CHECK(r.num_computed_tokens == 40);
  REQUIRE(e.connector.lookups().size() == 1);
  CHECK(e.connector.lookups()[0].external == 40);
  CHECK(e.connector.lookups()[0].load_async);
  REQUIRE(e.connector.meta().reqs_to_recv.size() == 1);
  CHECK(ids(e.connector.meta().reqs_to_recv[0].local_block_ids) ==
        std::vector<std::int32_t>{1, 2, 3});
  CHECK(!e.connector.params(r).do_remote_prefill);  // one transfer per request
  e.update();                                       // the read starts, nothing finished
  CHECK(e.worker.recving() == std::vector<std::string>{"r0"});
  e.schedule();  // still waiting
  CHECK(r.status == RequestStatus::kWaitingForRemoteKvs);
  CHECK(e.sched->promoted().empty());
  e.update({"r0"});  // finished in this step: promoted by the next schedule
  CHECK(e.recving == std::vector<std::string>{"r0"});
  CHECK(r.status == RequestStatus::kWaitingForRemoteKvs);
  e.schedule();
  REQUIRE(e.sched->promoted().size() == 1);
  // Full blocks 0 and 1 got their hashes; the last prompt token is recomputed.
  CHECK(e.sched->promoted()[0].first_cached == 0);
  CHECK(e.sched->promoted()[0].end_cached == 2);
  CHECK(e.sched->promoted()[0].num_computed_tokens == 39);
  REQUIRE(e.out.scheduled.size() == 1);
  CHECK(e.out.scheduled[0].num_tokens == 1);
  CHECK(e.out.scheduled[0].kind == kvsim::ScheduledRequest::Kind::kNew);
}

TEST_CASE("D: local prefix hits shrink the read to the unhashed blocks", "[core]") {
  Engine e;
  Request& local = e.add(53, {}, 1);
  e.schedule();
  e.update();  // finished: its 3 full blocks stay cached
  Request& r = e.add(68, remote_prefill());
  e.schedule();
  REQUIRE(e.connector.lookups().size() == 1);
  CHECK(e.connector.lookups()[0].local == 48);
  CHECK(e.connector.lookups()[0].external == 20);
  REQUIRE(e.connector.meta().reqs_to_recv.size() == 1);
  CHECK(ids(e.connector.meta().reqs_to_recv[0].local_block_ids) == std::vector<std::int32_t>{5, 6});
  CHECK(ids(r.kv_groups[0].blocks) == std::vector<std::int32_t>{1, 2, 3, 5, 6});
  (void)local;
}

TEST_CASE("D: a read finished in the update of the step that started it promotes next step",
          "[core]") {
  for (const bool async : {false, true}) {
    INFO("async " << async);
    Engine e(async);
    Request& r = e.add(20, remote_prefill());
    e.schedule();
    if (async) e.schedule();  // the batch queue: the next step is scheduled before the update
    e.update({"r0"});
    CHECK(r.status == RequestStatus::kWaitingForRemoteKvs);  // not one step early
    CHECK(e.sched->finished_recving_pending().size() == 1);
    e.schedule();  // the first schedule after that update (async: one step later than sync)
    CHECK(r.status == RequestStatus::kRunning);
    CHECK(r.num_computed_tokens == 20);  // 19 + the one token scheduled
  }
}

TEST_CASE("D: an abort while reading holds the blocks until the read is reported", "[core]") {
  Engine e;
  Request& r = e.add(48, remote_prefill());
  e.schedule();
  e.update();
  REQUIRE(e.sched->abort_request(r));
  REQUIRE(e.sched->held().size() == 1);
  CHECK(e.sched->kv_cache_manager().pool().num_free_blocks() == 99 - 3);
  e.schedule();
  e.update({"r0"});
  CHECK(e.sched->held().empty());
  CHECK(e.sched->kv_cache_manager().pool().num_free_blocks() == 99);
}

TEST_CASE("D: an abort before allocation only notifies P", "[core]") {
  Engine e;
  Request& r = e.add(48, remote_prefill());
  REQUIRE(e.sched->abort_request(r));
  e.schedule();
  REQUIRE(e.connector.meta().reqs_to_recv.size() == 1);
  CHECK(e.connector.meta().reqs_to_recv[0].notify_only);
  std::vector<const kvsim::NixlRecv*> started, notify_only;
  e.worker.start_load_kv(e.metas.front(), started, notify_only);
  CHECK(started.empty());
  CHECK(notify_only.size() == 1);
  CHECK(e.worker.recving().empty());
}

TEST_CASE("P: a length-capped request holds its blocks until D's notification", "[core]") {
  Engine e(false, 30);
  e.connector.set_now(1.0);
  Request& p = e.add(32, remote_decode(), 1);
  e.schedule();
  CHECK(e.connector.meta().reqs_in_batch == std::vector<std::string>{"r0"});
  e.connector.set_now(1.5);
  e.update();
  REQUIRE(e.outputs.size() == 1);
  CHECK(p.status == RequestStatus::kFinishedLengthCapped);
  REQUIRE(e.connector.finishes().size() == 1);
  CHECK(e.connector.finishes()[0].delay_free);
  CHECK(e.connector.finishes()[0].returned_params);
  CHECK(ids(e.connector.finishes()[0].block_ids) == std::vector<std::int32_t>{1, 2});
  CHECK(e.sched->held().size() == 1);
  e.schedule();  // the expiry goes to the worker
  REQUIRE(e.connector.meta().reqs_to_send.size() == 1);
  CHECK(e.connector.meta().reqs_to_send[0].second == 31.5);
  e.update({}, {"r0"});
  CHECK(e.sending == std::vector<std::string>{"r0"});
  CHECK(e.expired.empty());
  CHECK(e.sched->held().empty());
  // Its blocks stay cached: a later request hits them.
  CHECK(e.sched->kv_cache_manager().pool().num_cached_blocks() == 2);
}

TEST_CASE("P: the expiry frees at now >= expiry, not before", "[core]") {
  Engine e(false, 30);
  e.connector.set_now(1.5);
  e.add(32, remote_decode(), 1);
  e.schedule();
  e.update();
  e.schedule();
  e.connector.set_now(31.499999);
  e.update();
  CHECK(e.expired.empty());
  CHECK(e.sched->held().size() == 1);
  e.schedule();
  e.connector.set_now(31.5);
  e.update();
  CHECK(e.expired == std::vector<std::string>{"r0"});
  CHECK(e.sending == std::vector<std::string>{"r0"});
  CHECK(e.sched->held().empty());
  // A late notification is not tracked any more.
  CHECK(!e.worker.notify("r0"));
}

TEST_CASE("P: a stop on the first token or an abort frees at once", "[core]") {
  Engine e;
  Request& p = e.add(32, remote_decode(), 4);
  e.schedule();
  p.sampled_token = 7;
  p.limits.stop_token_ids = {7};
  e.update();
  CHECK(p.status == RequestStatus::kFinishedStopped);
  REQUIRE(e.connector.finishes().size() == 1);
  CHECK(!e.connector.finishes()[0].delay_free);
  CHECK(!e.connector.finishes()[0].returned_params);
  CHECK(e.sched->held().empty());
  e.schedule();
  CHECK(e.connector.meta().reqs_not_processed == std::vector<std::string>{"r0"});
}
