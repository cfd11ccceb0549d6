// Simulator's outside interface (begin, advance_to, inject_arrival, finish): the one a cluster
// drives each replica through. A run advanced in chunks of any size, or fed its arrivals from
// outside, is the run itself, event for event.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "sim/engine/simulator.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";

std::string timed(const std::string& profile) {
  return "name: t\nseed: 5\nengine: {profile: " + profile + ", mode: timed}\nmodel: {config: " +
         kModel +
         "}\ncache: {block_size: 16, num_gpu_blocks_override: 300}\n"
         "scheduler: {max_num_seqs: 8, max_num_batched_tokens: 512}\n"
         "workload: {num_requests: 80, arrival: {process: poisson, rate_per_s: 40},\n"
         "  system_prompts: {count: 3, tokens: 64},\n"
         "  prompt_tokens: {uniform: {min: 20, max: 300}}, output_tokens: {uniform: {min: 1, "
         "max: 60}}}\n";
}

/// Every request record and step (times, sizes) of a run, in order.
struct Recorder : StepObserver {
  std::vector<std::int64_t> log;
  void on_step(const StepView& v) override {
    log.insert(log.end(), {1, v.step, v.start_ns, v.end_ns, v.prefill_tokens, v.decode_tokens,
                           v.num_waiting});
  }
  void on_request_done(const RequestRecord& r) override {
    log.insert(log.end(), {2, static_cast<std::int64_t>(r.request_id), r.arrival_ns,
                           r.first_token_ns, r.finish_ns, r.output_tokens,
                           r.first_lookup_hit_tokens, r.num_preemptions});
  }
};

std::vector<std::int64_t> whole_run(const Scenario& s) {
  auto src = make_request_source(s.workload, s.seed, 32000);
  Simulator sim(s, *src, kvsim::test::constant_ms(3));
  Recorder rec;
  sim.attach(&rec);
  sim.run();
  return rec.log;
}

/// The source's requests, all of them.
std::vector<RequestSpec> drain(const Scenario& s) {
  auto src = make_request_source(s.workload, s.seed, 32000);
  std::vector<RequestSpec> v;
  while (auto r = src->next()) v.push_back(std::move(*r));
  return v;
}

struct EmptySource : RequestSource {
  std::optional<RequestSpec> next() override { return std::nullopt; }
};

}  // namespace

TEST_CASE("a run advanced in chunks is the run", "[sim]") {
  for (const char* profile : {"vllm-0.7.2", "vllm-0.20"}) {
    const Scenario s = kvsim::test::parse_text(timed(profile));
    const std::vector<std::int64_t> whole = whole_run(s);
    REQUIRE(whole.size() > 100);
    for (SimTimeNs chunk_ns : {SimTimeNs{999'983}, SimTimeNs{2'999'999}, SimTimeNs{3'000'000},
                               SimTimeNs{70'000'000}}) {
      auto src = make_request_source(s.workload, s.seed, 32000);
      Simulator sim(s, *src, kvsim::test::constant_ms(3));
      Recorder rec;
      sim.attach(&rec);
      sim.begin();
      SimTimeNs t = 0;
      std::uint64_t handled = 0;
      while (sim.next_event_ns() != Simulator::kNeverNs) {
        t += chunk_ns;
        handled += sim.advance_to(t);
        // Nothing at or after t was handled.
        CHECK((sim.next_event_ns() == Simulator::kNeverNs || sim.next_event_ns() >= t));
      }
      sim.finish();
      CHECK(handled > 0);
      CHECK(rec.log == whole);
    }
  }
}

TEST_CASE("arrivals injected from outside at their instants are the run's own", "[sim]") {
  const Scenario s = kvsim::test::parse_text(timed("vllm-0.7.2"));
  const std::vector<std::int64_t> whole = whole_run(s);
  EmptySource none;
  Simulator sim(s, none, kvsim::test::constant_ms(3));
  Recorder rec;
  sim.attach(&rec);
  sim.begin();
  // A cluster brings the replica up to each arrival's instant, then hands it the request.
  for (RequestSpec& r : drain(s)) {
    sim.advance_to(r.arrival_ns);
    sim.inject_arrival(std::move(r));
  }
  sim.advance_to(Simulator::kNeverNs);
  sim.finish();
  CHECK(rec.log == whole);
}
