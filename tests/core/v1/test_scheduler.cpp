#include <catch2/catch.hpp>
#include <memory>

#include "core/v1/scheduler.h"
#include "test_util.h"

using namespace kvsim;
using namespace kvsim::test;

namespace {

struct Harness {
  Scheduler sched;
  std::vector<std::unique_ptr<Request>> reqs;
  SchedulerOutput out;
  std::vector<RequestOutput> outputs;

  Harness(std::int64_t max_seqs, std::int64_t budget, std::int32_t bs, std::int32_t blocks,
          std::int64_t max_len = 1024, std::int64_t prealloc = 0)
      : sched(SchedulerConfig{max_seqs, budget, max_len},
              KVCacheConfig{bs, blocks, max_len, true, prealloc}) {}

  Request& add(std::vector<Token> prompt, std::int64_t max_tokens = 16) {
    reqs.push_back(std::make_unique<Request>(
        make_request(static_cast<std::int64_t>(reqs.size()), std::move(prompt), max_tokens)));
    sched.add_request(*reqs.back());
    return *reqs.back();
  }
  void step(Token sampled = 0) {
    sched.schedule(out);
    for (Request* r : sched.running()) r->sampled_token = sampled;
    sched.update_from_output(outputs);
    REQUIRE(sched.find_violation().empty());
  }
  std::int64_t scheduled_tokens(const Request& r) const {
    for (const auto& s : out.scheduled)
      if (s.request == &r) return s.num_tokens;
    return 0;
  }
};

}  // namespace

TEST_CASE("the token budget chunks a long prefill across steps", "[core]") {
  Harness h(8, 10, 4, 64);
  Request& r = h.add(iota_tokens(25));
  h.step();
  CHECK(h.scheduled_tokens(r) == 10);
  CHECK(r.num_computed_tokens == 10);
  CHECK(r.num_output_tokens() == 0);  // a partial prefill samples nothing
  h.step();
  h.step();
  CHECK(h.scheduled_tokens(r) == 5);
  CHECK(r.num_output_tokens() == 1);
}

TEST_CASE("running requests are scheduled before waiting ones, within max_num_seqs", "[core]") {
  Harness h(2, 100, 4, 64);
  Request& a = h.add(iota_tokens(4, 0));
  h.step();
  Request& b = h.add(iota_tokens(4, 10));
  Request& c = h.add(iota_tokens(4, 20));
  h.step();
  REQUIRE(h.out.scheduled.size() == 2);
  CHECK(h.out.scheduled[0].request == &a);
  CHECK(h.out.scheduled[1].request == &b);
  CHECK(h.sched.waiting().front() == &c);
}

TEST_CASE("a full prompt hit recomputes its whole last block", "[core]") {
  Harness h(8, 100, 4, 64);
  h.add(iota_tokens(8));
  h.step();
  Request& b = h.add(iota_tokens(8));
  h.sched.schedule(h.out);
  REQUIRE(h.out.scheduled.size() == 2);
  const ScheduledRequest& s = h.out.scheduled[1];
  CHECK(s.request == &b);
  CHECK(s.num_computed_tokens == 4);
  CHECK(s.num_tokens == 4);
  CHECK(h.out.prefix_hits_tokens == 4);
  CHECK(h.out.prefix_queries_tokens == 8);
}

TEST_CASE("memory pressure preempts the last running request and admits nobody that step",
          "[core]") {
  // 4 blocks of 4 tokens. a and b each hold 2 blocks; a's next token needs a third.
  Harness h(8, 100, 4, 4);
  Request& a = h.add(iota_tokens(8, 0), 100);
  Request& b = h.add(iota_tokens(8, 100), 100);
  h.step();
  REQUIRE(h.sched.running().size() == 2);
  Request& c = h.add(iota_tokens(4, 200));
  h.sched.schedule(h.out);
  REQUIRE(h.out.preempted.size() == 1);
  CHECK(h.out.preempted[0] == &b);
  CHECK(b.status == RequestStatus::kPreempted);
  CHECK(b.num_computed_tokens == 0);
  CHECK(h.sched.waiting().front() == &b);  // pushed to the front, ahead of c
  CHECK(h.out.scheduled.size() == 1);      // c is not admitted in a preempting step
  CHECK(std::vector<Request*>(h.sched.running().begin(), h.sched.running().end()) ==
        std::vector<Request*>{&a});
  CHECK(c.status == RequestStatus::kWaiting);
  CHECK(h.sched.stats().num_preemptions == 1);
  CHECK(h.sched.find_violation().empty());
}

TEST_CASE("a request that cannot fit even alone preempts itself", "[core]") {
  Harness h(8, 100, 4, 2);
  Request& a = h.add(iota_tokens(8), 100);
  h.step();  // uses both blocks, samples a token: now needs a third block
  h.sched.schedule(h.out);
  CHECK(h.out.scheduled.empty());
  REQUIRE(h.out.preempted.size() == 1);
  CHECK(h.out.preempted[0] == &a);
  CHECK(h.sched.running().empty());
}

TEST_CASE("stop checks run in vLLM's order: length, then EOS, then stop tokens", "[core]") {
  Harness h(8, 100, 4, 64, /*max_len=*/1024);
  SECTION("max_tokens wins over an EOS token") {
    Request& r = h.add(iota_tokens(4), 1);
    r.limits.eos_token_id = 7;
    h.step(7);
    CHECK(r.status == RequestStatus::kFinishedLengthCapped);
  }
  SECTION("EOS stops with no stop_reason") {
    Request& r = h.add(iota_tokens(4), 5);
    r.limits.eos_token_id = 7;
    r.limits.stop_token_ids = {7};
    h.step(7);
    CHECK(r.status == RequestStatus::kFinishedStopped);
    CHECK_FALSE(r.stop_reason.has_value());
  }
  SECTION("ignore_eos skips EOS but a stop token still stops, with its reason") {
    Request& r = h.add(iota_tokens(4), 5);
    r.limits.eos_token_id = 7;
    r.limits.ignore_eos = true;
    h.step(7);
    CHECK(r.status == RequestStatus::kRunning);
    r.limits.stop_token_ids = {9};
    h.step(9);
    CHECK(r.status == RequestStatus::kFinishedStopped);
    CHECK(r.stop_reason == 9);
  }
  SECTION("max_model_len caps the length") {
    Harness g(8, 100, 4, 64, /*max_len=*/5);
    Request& r = g.add(iota_tokens(4), 100);
    g.step();
    CHECK(r.status == RequestStatus::kFinishedLengthCapped);
  }
}

TEST_CASE("finished and aborted requests free their blocks and are reported once", "[core]") {
  Harness h(8, 100, 4, 16);
  Request& a = h.add(iota_tokens(4, 0), 1);
  Request& b = h.add(iota_tokens(4, 50), 100);
  Request& c = h.add(iota_tokens(4, 90), 100);
  h.step();
  CHECK(a.status == RequestStatus::kFinishedLengthCapped);
  CHECK(h.sched.abort_request(b));
  CHECK(b.blocks.empty());
  CHECK_FALSE(h.sched.abort_request(b));  // already finished: ignored
  h.sched.schedule(h.out);
  CHECK(h.out.finished == std::vector<std::int64_t>{a.index(), b.index()});
  CHECK(h.out.scheduled.size() == 1);
  CHECK(h.out.scheduled[0].request == &c);
  h.sched.update_from_output(h.outputs);
  h.sched.schedule(h.out);
  CHECK(h.out.finished.empty());
}

TEST_CASE("the scheduler invariant walk catches a waiting request that holds blocks", "[core]") {
  Harness h(8, 100, 4, 16);
  Request& a = h.add(iota_tokens(8), 100);
  Request& b = h.add(iota_tokens(4, 40), 100);
  h.step();
  REQUIRE(h.sched.find_violation().empty());
  REQUIRE(h.sched.abort_request(b));
  // Plant: a running request marked as waiting.
  a.status = RequestStatus::kWaiting;
  CHECK_FALSE(h.sched.find_violation().empty());
  a.status = RequestStatus::kRunning;
  CHECK(h.sched.find_violation().empty());
}

TEST_CASE("V1 engines append the planned outputs in order and sampled_token after them", "[core]") {
  for (const Profile profile : {Profile::kVllm072, Profile::kVllm085, Profile::kVllm020}) {
    INFO(profile_info(profile).name);
    SchedulerConfig sc{4, 512, 1024};
    sc.async_scheduling = profile == Profile::kVllm020;  // two steps in flight, no writes between
    Scheduler sched(sc, KVCacheConfig{4, 64, 1024, true, 0}, profile);
    SamplingLimits lim;
    lim.max_tokens = 5;
    lim.ignore_eos = true;
    Request r(0, iota_tokens(6), lim);
    const std::vector<Token> plan = {501, 502, 503};
    r.planned_outputs = plan;
    r.sampled_token = 900;  // what the plan does not cover
    sched.add_request(r);
    SchedulerOutput out;
    std::vector<RequestOutput> outs;
    std::vector<Token> got;
    for (int k = 0; k < 12 && !is_finished(r.status); ++k) {
      sched.schedule(out);
      if (sc.async_scheduling && sched.num_steps_in_flight() < 2) continue;  // a full queue
      sched.update_from_output(outs);
      for (const RequestOutput& o : outs) got.push_back(o.token);
    }
    while (sched.num_steps_in_flight() > 0) {
      sched.update_from_output(outs);
      for (const RequestOutput& o : outs) got.push_back(o.token);
    }
    CHECK(got == std::vector<Token>{501, 502, 503, 900, 900});
    CHECK(std::vector<Token>(r.all_token_ids().begin() + 6, r.all_token_ids().end()) == got);
  }
}
