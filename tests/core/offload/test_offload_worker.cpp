// The OffloadingConnector's worker bookkeeping (core/offload/offload_worker.h): deferred stores,
// the preemption flush, and get_finished's finished_sending / finished_recving rules
// (shared/spec/vllm-0.20-offload-semantics.md §5).

#include <catch2/catch.hpp>
#include <vector>

#include "core/offload/offload_worker.h"

using kvsim::OffloadTransfer;
using kvsim::OffloadWorker;
using kvsim::Request;

namespace {

Request make_request(std::int64_t index, const char* id) {
  Request r(index, {1, 2, 3, 4}, {});
  r.request_id = id;
  return r;
}

OffloadTransfer transfer(Request& r, std::int64_t gpu, std::int64_t cpu) {
  OffloadTransfer t;
  t.request = &r;
  t.gpu_block_ids = {gpu};
  t.cpu_block_ids = {cpu};
  t.group_size = 1;
  return t;
}

}  // namespace

TEST_CASE("stores are submitted one step late and reported only once their request finished",
          "[core]") {
  Request a = make_request(0, "A");
  OffloadWorker w;
  std::vector<Request*> sending, recving;
  const std::vector<OffloadTransfer> stores = {transfer(a, 1, 0)};
  w.handle_preemptions({});
  w.prepare_stores(stores);
  w.complete_all();  // the store is not submitted yet: nothing finishes
  w.get_finished({}, sending, recving);
  CHECK(w.done().empty());
  REQUIRE(w.find_violation() == "");
  // Next step: submitted, then finished; A still runs: no report.
  w.handle_preemptions({});
  w.complete_all();
  w.get_finished({}, sending, recving);
  CHECK(w.done().size() == 1);
  CHECK(sending.empty());
  // A finishes: all its stores are done, so it is reported at once.
  const std::vector<std::int64_t> finished = {0};
  w.handle_preemptions({});
  w.get_finished(finished, sending, recving);
  CHECK(sending == std::vector<Request*>{&a});
  REQUIRE(w.find_violation() == "");
}

TEST_CASE("a finished request with stores in flight is reported when the last one finishes",
          "[core]") {
  Request a = make_request(0, "A");
  Request b = make_request(1, "B");
  OffloadWorker w;
  std::vector<Request*> sending, recving;
  const std::vector<OffloadTransfer> stores = {transfer(a, 1, 0), transfer(a, 2, 1)};
  w.prepare_stores(stores);
  w.handle_preemptions({});  // both submitted
  const std::vector<std::int64_t> finished = {0, 1};  // B never stored: never reported
  w.get_finished(finished, sending, recving);
  CHECK(sending.empty());
  CHECK(w.waiting_for_store(a));
  const std::vector<OffloadTransfer> loads = {transfer(b, 5, 3)};
  w.start_loads(loads);
  w.complete_loads(b);
  w.complete_stores(a);
  w.get_finished({}, sending, recving);
  CHECK(sending == std::vector<Request*>{&a});
  CHECK(recving == std::vector<Request*>{&b});
  CHECK_FALSE(w.waiting_for_store(a));
  REQUIRE(w.find_violation() == "");
}

TEST_CASE("a preemption flush finishes the request's submitted stores at once", "[core]") {
  Request a = make_request(0, "A");
  OffloadWorker w;
  std::vector<Request*> sending, recving;
  const std::vector<OffloadTransfer> stores = {transfer(a, 1, 0)};
  w.prepare_stores(stores);
  Request* flush[] = {&a};
  w.handle_preemptions(flush);  // submitted, then waited for
  w.get_finished({}, sending, recving);
  REQUIRE(w.done().size() == 1);
  CHECK(w.done()[0].flushed);
  CHECK(sending.empty());  // A did not finish
}
