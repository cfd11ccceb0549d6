// Client aborts (RequestSpec::client_timeout_ns, workload.client_timeout_s): the abort instant,
// the tokens delivered before it, the blocks the scheduler frees, how an abort interacts with the
// step in flight and with a step ending at the same instant, aborts of waiting requests, and the
// session a dropped turn ends.

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/engine/simulator.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;

namespace {

constexpr SimTimeNs kMs = 1'000'000;
const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";

/// A source of given requests, which remembers what the simulator dropped.
struct ListSource final : RequestSource {
  std::vector<RequestSpec> specs;
  std::size_t next_index = 0;
  std::vector<std::uint64_t> dropped;
  std::optional<RequestSpec> next() override {
    if (next_index == specs.size()) return std::nullopt;
    return specs[next_index++];
  }
  void on_dropped(const RequestSpec& done) override { dropped.push_back(done.id); }
};

/// A request of `prompt` distinct tokens that generates `max_tokens` (ignoring EOS) and whose
/// client gives up `timeout_ms` after its arrival (< 0: never).
RequestSpec request(std::uint64_t id, SimTimeNs arrival_ms, std::int64_t prompt,
                    std::int32_t max_tokens, SimTimeNs timeout_ms) {
  RequestSpec r;
  r.id = id;
  r.arrival_ns = arrival_ms * kMs;
  append_pseudo_tokens(r.prompt, content_key(11, "user", id), prompt, 32000);
  r.output_tokens = max_tokens;
  r.max_tokens = max_tokens;
  r.output_seed = content_key(11, "output", id);
  r.client_timeout_ns = timeout_ms < 0 ? -1 : timeout_ms * kMs;
  return r;
}

/// vllm-0.7.2 without preallocation (the other profiles have no such setting), or `profile`.
Scenario scenario(std::int64_t num_blocks, std::int64_t max_num_seqs = 8,
                  const std::string& profile = "vllm-0.7.2") {
  const std::string yaml =
      "name: abort\nengine: {profile: " + profile + "}\nmodel: {config: " + kModel +
      "}\ncache: {block_size: 16, num_gpu_blocks_override: " + std::to_string(num_blocks) +
      (profile == "vllm-0.7.2" ? ", num_preallocate_tokens: 0" : "") +
      "}\nscheduler: {max_model_len: 2048, max_num_seqs: " + std::to_string(max_num_seqs) +
      "}\nworkload: {num_requests: 1, prompt_tokens: 1, output_tokens: 1}\n";
  return parse_scenario(load_yaml_string(yaml, "abort.yaml"), "abort.yaml");
}

/// Records every request row and, at every step end, the pool's free blocks, each running
/// request's blocks, and which request ids the next batch holds.
struct Recorder final : StepObserver {
  std::map<std::uint64_t, RequestRecord> rows;
  std::vector<std::uint64_t> row_order;
  struct Step {
    SimTimeNs start_ns = 0, end_ns = 0;
    std::int64_t free_blocks = 0;
    std::map<std::uint64_t, std::int64_t> blocks;  // running request id -> blocks
    std::vector<std::uint64_t> batch, delivered;
  };
  std::vector<Step> steps;
  void on_step_begin(const StepView& v) override {
    Step s;
    s.start_ns = v.start_ns;
    for (const ScheduledRequest& sr : v.out->scheduled)
      s.batch.push_back(v.request_id_of_index[static_cast<std::size_t>(sr.request->index())]);
    steps.push_back(s);
  }
  void on_step(const StepView& v) override {
    Step& s = steps.back();
    s.end_ns = v.end_ns;
    s.free_blocks = v.engine->pool_stats().num_free_blocks;
    for (const Request* r : v.engine->running())
      s.blocks[v.request_id_of_index[static_cast<std::size_t>(r->index())]] =
          static_cast<std::int64_t>(v.engine->block_table(*r).size());
    for (const RequestOutput& o : v.outputs)
      s.delivered.push_back(v.request_id_of_index[static_cast<std::size_t>(o.request->index())]);
  }
  void on_request_done(const RequestRecord& r) override {
    rows[r.request_id] = r;
    row_order.push_back(r.request_id);
  }
  const Step& step_ending_at(SimTimeNs t) const {
    for (const Step& s : steps)
      if (s.end_ns == t) return s;
    FAIL("no step ends at " << t);
    return steps.front();
  }
};

/// Runs the source's requests with 10 ms steps and the invariant walk after every step.
void run(const Scenario& s, ListSource& source, Recorder& rec) {
  Simulator sim(s, source, [](const StepView&) { return 10 * kMs; });
  sim.set_check_invariants(true);
  sim.attach(&rec);
  // vllm-0.8.5's null block is never free.
  const std::int64_t free_at_start = sim.engine().pool_stats().num_free_blocks;
  sim.run();
  // Everything is free at the end: nothing leaked, aborted requests included.
  CHECK(sim.engine().pool_stats().num_free_blocks == free_at_start);
  CHECK(sim.engine().num_unfinished_requests() == 0);
}

}  // namespace

TEST_CASE("an abort during a step frees exactly its blocks before the next schedule", "[sim]") {
  const Scenario s = scenario(64);
  ListSource src;
  // A: 64-token prompt, 100 tokens, client gone at 105 ms (during the step 100-110 ms).
  // B: 32-token prompt, 30 tokens, no timeout.
  src.specs = {request(0, 0, 64, 100, 105), request(1, 0, 32, 30, -1)};
  Recorder rec;
  run(s, src, rec);

  const RequestRecord& a = rec.rows.at(0);
  CHECK(a.reason == FinishReason::kAbort);
  CHECK(a.finish_ns == 105 * kMs);
  CHECK(a.first_token_ns == 10 * kMs);
  CHECK(a.output_tokens == 10);  // tokens at 10, 20, ..., 100 ms; the 110 ms one is not delivered
  const RequestRecord& b = rec.rows.at(1);
  CHECK(b.reason == FinishReason::kLength);
  CHECK(b.output_tokens == 30);
  CHECK(rec.row_order == std::vector<std::uint64_t>{0, 1});
  CHECK(src.dropped == std::vector<std::uint64_t>{0});

  // The step 100-110 ms still computes A (its blocks are held at its end); its token is dropped.
  const Recorder::Step& during = rec.step_ending_at(110 * kMs);
  CHECK(during.batch == std::vector<std::uint64_t>{0, 1});
  CHECK(during.delivered == std::vector<std::uint64_t>{1});
  // A then holds 64 + 10 computed tokens after 74 scheduled: 5 blocks of 16.
  REQUIRE(during.blocks.count(0) == 1);
  const std::int64_t a_blocks = during.blocks.at(0);
  CHECK(a_blocks == 5);
  // The next schedule (at 110 ms) no longer has A, and the pool got exactly A's blocks back.
  const Recorder::Step& after = rec.step_ending_at(120 * kMs);
  CHECK(after.start_ns == 110 * kMs);
  CHECK(after.batch == std::vector<std::uint64_t>{1});
  CHECK(after.blocks.count(0) == 0);
  const std::int64_t b_growth = after.blocks.at(1) - during.blocks.at(1);
  CHECK(after.free_blocks == during.free_blocks + a_blocks - b_growth);
  CHECK(after.free_blocks == 64 - after.blocks.at(1));
}

TEST_CASE(
    "under every profile an abort during a step takes the request out of the next schedule "
    "and gives back its blocks",
    "[sim]") {
  for (const ProfileInfo& p : profiles()) {
    INFO(p.name);
    // 300 blocks of 16: room for two orca-max reservations of max_model_len (2,048) slots.
    const Scenario s = scenario(300, 8, p.name);
    ListSource src;
    src.specs = {request(0, 0, 64, 100, 105), request(1, 0, 32, 30, -1)};
    Recorder rec;
    run(s, src, rec);  // the invariant walk after every step; nothing left at the end
    const RequestRecord& a = rec.rows.at(0);
    CHECK(a.reason == FinishReason::kAbort);
    CHECK(a.finish_ns == 105 * kMs);
    std::int64_t delivered = 0;
    for (const Recorder::Step& st : rec.steps) {
      delivered += std::count(st.delivered.begin(), st.delivered.end(), 0);
      if (st.start_ns >= 105 * kMs) CHECK(std::count(st.batch.begin(), st.batch.end(), 0) == 0);
    }
    CHECK(a.output_tokens == delivered);
    CHECK(a.output_tokens >= 1);
    CHECK(rec.rows.at(1).reason == FinishReason::kLength);
    CHECK(rec.rows.at(1).output_tokens == 30);
    CHECK(src.dropped == std::vector<std::uint64_t>{0});
    // The step in flight at 105 ms computed A but delivered nothing to it; the next one starts
    // without A, with A's blocks back in the pool (paged families: their block tables).
    const Recorder::Step* during = nullptr;
    for (const Recorder::Step& st : rec.steps)
      if (st.start_ns < 105 * kMs && st.end_ns > 105 * kMs) during = &st;
    REQUIRE(during != nullptr);
    CHECK(std::count(during->batch.begin(), during->batch.end(), 0) == 1);
    CHECK(std::count(during->delivered.begin(), during->delivered.end(), 0) == 0);
    if (is_paged(p.family)) {
      const Recorder::Step& after = rec.step_ending_at(during->end_ns + 10 * kMs);
      REQUIRE(during->blocks.count(0) == 1);
      CHECK(after.blocks.count(0) == 0);
      CHECK(after.free_blocks - during->free_blocks ==
            during->blocks.at(0) - (after.blocks.at(1) - during->blocks.at(1)));
    }
  }
}

TEST_CASE("at an abort's instant the step ending then comes first", "[sim]") {
  const Scenario s = scenario(64);
  ListSource src;
  // Steps end at 10, 20, ... ms. A finishes at 50 ms (5 tokens) as its client gives up: finished,
  // not aborted. C gets its 5th token at 50 ms, then is aborted with 5 tokens.
  src.specs = {request(0, 0, 16, 5, 50), request(1, 0, 16, 6, 50), request(2, 0, 16, 8, -1)};
  Recorder rec;
  run(s, src, rec);
  CHECK(rec.rows.at(0).reason == FinishReason::kLength);
  CHECK(rec.rows.at(0).output_tokens == 5);
  CHECK(rec.rows.at(0).finish_ns == 50 * kMs);
  CHECK(rec.rows.at(1).reason == FinishReason::kAbort);
  CHECK(rec.rows.at(1).output_tokens == 5);
  CHECK(rec.rows.at(1).finish_ns == 50 * kMs);
  CHECK(rec.rows.at(2).output_tokens == 8);
  const Recorder::Step& at50 = rec.step_ending_at(50 * kMs);
  CHECK(at50.delivered == std::vector<std::uint64_t>{0, 1, 2});
  // The schedule at 50 ms already runs without both.
  CHECK(rec.step_ending_at(60 * kMs).batch == std::vector<std::uint64_t>{2});
  CHECK(src.dropped == std::vector<std::uint64_t>{1});
}

TEST_CASE("a request the step in flight finishes is still reported aborted by its client",
          "[sim]") {
  const Scenario s = scenario(64);
  ListSource src;
  // A's 11th and last token comes at 110 ms, 5 ms after its client left.
  src.specs = {request(0, 0, 16, 11, 105), request(1, 0, 16, 20, -1)};
  Recorder rec;
  run(s, src, rec);
  CHECK(rec.rows.at(0).reason == FinishReason::kAbort);
  CHECK(rec.rows.at(0).output_tokens == 10);
  CHECK(rec.rows.at(0).finish_ns == 105 * kMs);
  CHECK(rec.row_order.size() == 2);  // one row for A, not a second one at 110 ms
  CHECK(rec.step_ending_at(120 * kMs).batch == std::vector<std::uint64_t>{1});
}

TEST_CASE("waiting requests are aborted from either part of the waiting queue", "[sim]") {
  // 10 blocks: R0 (100 + 50 tokens) holds 7 to 10 of them; R1 (100-token prompt) waits in the
  // scheduler's queue for memory; with max_num_seqs 2, R2 waits behind it in the simulator's.
  const Scenario s = scenario(10, 2);
  ListSource src;
  src.specs = {request(0, 0, 100, 50, -1), request(1, 1, 100, 5, 40), request(2, 2, 20, 5, 30)};
  Recorder rec;
  run(s, src, rec);
  for (std::uint64_t id : {1, 2}) {
    const RequestRecord& r = rec.rows.at(id);
    INFO("request " << id);
    CHECK(r.reason == FinishReason::kAbort);
    CHECK(r.output_tokens == 0);
    CHECK(r.first_scheduled_ns == -1);
    CHECK(r.first_token_ns == -1);
  }
  CHECK(rec.rows.at(1).finish_ns == 41 * kMs);
  CHECK(rec.rows.at(2).finish_ns == 32 * kMs);
  CHECK(rec.row_order == std::vector<std::uint64_t>{2, 1, 0});
  CHECK(rec.rows.at(0).output_tokens == 50);
  for (const Recorder::Step& st : rec.steps) CHECK(st.batch == std::vector<std::uint64_t>{0});
  CHECK(src.dropped == std::vector<std::uint64_t>{2, 1});
}

TEST_CASE("a run with client_timeout_s counts aborts apart from completions", "[sim]") {
  kvsim::test::TempDir tmp("abort-run");
  // 10 requests/s of 30 tokens against max_num_seqs 2 and 10 ms steps (6.7 requests/s): a queue
  // builds up and the later requests time out after 1 s.
  const std::string yaml =
      "name: ab\nseed: 4\nmodel: {config: " + kModel +
      "}\ncache: {block_size: 16, num_gpu_blocks_override: 200}\nscheduler: {max_model_len: 2048, "
      "max_num_seqs: 2}\nworkload: {num_requests: 60, arrival: {process: constant, rate_per_s: "
      "10}, prompt_tokens: 50, output_tokens: 30, client_timeout_s: 1.0}\noutputs: {metrics_prom: "
      "true}\n";
  const Scenario s = parse_scenario(load_yaml_string(yaml, "ab.yaml"), "ab.yaml");
  RunOptions opt;
  opt.step_time = [](const StepView&) { return 10 * kMs; };
  opt.check_invariants = true;
  const RunResult r = run_scenario(s, tmp.path, opt);
  const nlohmann::json j = nlohmann::json::parse(r.summary_json);
  std::int64_t aborted = 0, completed = 0, aborted_tokens = 0, completed_tokens = 0;
  std::istringstream rows(kvsim::test::slurp(r.folder / "requests.csv"));
  std::string line;
  std::getline(rows, line);
  while (std::getline(rows, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string c; std::getline(ss, c, ',');) f.push_back(c);
    if (line.back() == ',') f.push_back("");
    REQUIRE(f.size() == 14);
    if (f[13] == "abort") {
      ++aborted;
      aborted_tokens += std::stoll(f[3]);
      CHECK(f[9] == "1000.000000");  // e2el: the timeout
      CHECK(f[8].empty());           // no TPOT for an aborted request
    } else {
      CHECK(f[13] == "length");
      ++completed;
      completed_tokens += std::stoll(f[3]);
    }
  }
  CHECK(aborted > 5);
  CHECK(completed > 5);
  CHECK(aborted + completed == 60);
  CHECK(j["aborted"] == aborted);
  CHECK(j["aborted_output_tokens"] == aborted_tokens);
  CHECK(j["completed"] == completed);
  CHECK(j["total_output_tokens"] == completed_tokens);
  CHECK(completed_tokens == 30 * completed);
  // metrics.prom: aborted requests are no successes.
  CHECK_THAT(kvsim::test::slurp(r.folder / "metrics.prom"),
             Catch::Contains("vllm:request_success_total{model_name=\"opt-125m\"} " +
                             std::to_string(completed) + "\n"));
}

TEST_CASE("an aborted turn ends its session", "[sim]") {
  kvsim::test::TempDir tmp("abort-session");
  auto rows_of = [&](const std::string& timeout, const std::string& name) {
    const std::string yaml =
        "name: " + name + "\nseed: 4\nmodel: {config: " + kModel +
        "}\ncache: {block_size: 16, num_gpu_blocks_override: 200}\nscheduler: {max_model_len: "
        "2048}\nworkload: {num_requests: 10, arrival: {process: constant, rate_per_s: 10}, "
        "prompt_tokens: 20, output_tokens: 30, sessions: {turns: 3, user_tokens: 10}" +
        timeout + "}\n";
    const Scenario s = parse_scenario(load_yaml_string(yaml, "s.yaml"), "s.yaml");
    RunOptions opt;
    opt.step_time = [](const StepView&) { return 10 * kMs; };
    const std::string csv =
        kvsim::test::slurp(run_scenario(s, tmp.path, opt).folder / "requests.csv");
    return std::count(csv.begin(), csv.end(), '\n') - 1;
  };
  CHECK(rows_of("", "all") == 30);                         // 10 sessions of 3 turns
  CHECK(rows_of(", client_timeout_s: 0.1", "cut") == 10);  // every first turn aborted
}
