// The routers that read the replicas' caches through their KV events (shared/spec/
// cluster-routing.md §4.3, §5, §8): the index (KvBlockIndex), prefix_ideal / prefix_bounded,
// dynamo_kv's cost with its active sequences, llm_d's precise prefix scorer; hand-computed cases,
// then whole runs: prefix_ideal's predicted hits are the engines' own, KV-event delay.

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/common/block_hash.h"
#include "sim/cluster/dynamo_kv.h"
#include "sim/cluster/kv_block_index.h"
#include "sim/cluster/llm_d.h"
#include "sim/cluster/router.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;

namespace {

KvEvent stored(std::uint64_t h) { return {KvEvent::Kind::kStored, 0, h}; }
KvEvent removed(std::uint64_t h) { return {KvEvent::Kind::kRemoved, 0, h}; }

std::vector<std::int64_t> prefix(const KvBlockIndex& idx, std::vector<std::uint64_t> hashes) {
  std::vector<std::int64_t> m(static_cast<std::size_t>(idx.num_replicas()), -1);
  idx.longest_prefix(hashes, m);
  return m;
}

std::vector<ReplicaLoad> routed(std::initializer_list<std::int64_t> counts) {
  std::vector<ReplicaLoad> v;
  for (std::int64_t x : counts) v.push_back(ReplicaLoad{x, 0, x});
  return v;
}

/// A request of `tokens` prompt tokens whose full blocks are `hashes`, read against `idx`.
RouteInput request(std::int64_t index, std::int64_t tokens,
                   const std::vector<std::uint64_t>& hashes, const KvBlockIndex& idx,
                   std::uint64_t id = 0) {
  RouteInput in;
  in.index = index;
  in.prompt_tokens = tokens;
  in.prompt_blocks = (tokens + 3) / 4;
  in.content_hashes = hashes;
  in.kv_index = &idx;
  in.request_id = id;
  return in;
}

}  // namespace

TEST_CASE("the KV-event index gives each replica's leading run of the prompt's blocks", "[sim]") {
  KvBlockIndex idx(3, KvBlockIndex::Removal::kCount);
  // Replica 0 holds 1,2,3; replica 1 holds 1 and 3 (not 2); replica 2 holds 2 only.
  idx.apply(0, std::vector<KvEvent>{stored(1), stored(2), stored(3)});
  idx.apply(1, std::vector<KvEvent>{stored(1), stored(3)});
  idx.apply(2, std::vector<KvEvent>{stored(2)});
  CHECK(prefix(idx, {1, 2, 3, 4}) == std::vector<std::int64_t>{3, 1, 0});
  CHECK(prefix(idx, {2, 3}) == std::vector<std::int64_t>{2, 0, 1});
  CHECK(prefix(idx, {}) == std::vector<std::int64_t>{0, 0, 0});
  CHECK(idx.num_blocks(0) == 3);
  CHECK(idx.num_blocks(1) == 2);
  CHECK(idx.holds(1, 3));
  CHECK_FALSE(idx.holds(1, 2));
  // A second copy of block 1 on replica 0, then one removal: kCount keeps it (a copy remains).
  idx.apply(0, std::vector<KvEvent>{stored(1), removed(1)});
  CHECK(idx.holds(0, 1));
  CHECK(idx.num_blocks(0) == 3);
  idx.apply(0, std::vector<KvEvent>{removed(1)});
  CHECK_FALSE(idx.holds(0, 1));
  CHECK(prefix(idx, {1, 2, 3}) == std::vector<std::int64_t>{0, 1, 0});
  // Cleared: replica 1 holds nothing; the others keep theirs.
  idx.apply(1, std::vector<KvEvent>{KvEvent{KvEvent::Kind::kAllCleared, 0, 0}});
  CHECK(idx.num_blocks(1) == 0);
  CHECK(prefix(idx, {2, 3}) == std::vector<std::int64_t>{2, 0, 1});
  // Blocks of another KV cache group are not indexed.
  idx.apply(2, std::vector<KvEvent>{KvEvent{KvEvent::Kind::kStored, 1, 3}});
  CHECK_FALSE(idx.holds(2, 3));
}

TEST_CASE("a dropping index forgets a block at its first removal, as vLLM's consumers do",
          "[sim]") {
  KvBlockIndex idx(2, KvBlockIndex::Removal::kDrop);
  idx.apply(0, std::vector<KvEvent>{stored(7), stored(7), removed(7)});
  CHECK_FALSE(idx.holds(0, 7));
  CHECK(idx.num_blocks(0) == 0);
  idx.apply(0, std::vector<KvEvent>{removed(7)});  // the second copy's removal: nothing left
  CHECK(idx.num_blocks(0) == 0);
}

TEST_CASE("a prompt's content hashes are its full blocks' chain, as the engines name them",
          "[sim]") {
  std::vector<Token> prompt(10);
  for (int i = 0; i < 10; ++i) prompt[static_cast<std::size_t>(i)] = 100 + i;
  std::vector<std::uint64_t> h;
  prompt_content_hashes(prompt, 4, 100, h);
  REQUIRE(h.size() == 2);  // the partial third block is not a block of the cache
  BlockHashTable table(4);
  const HashId a = table.intern(kNoHash, std::span<const Token>(prompt).first(4), kExtraNone);
  const HashId b = table.intern(a, std::span<const Token>(prompt).subspan(4, 4), kExtraNone);
  CHECK(h[0] == table.content_hash(a));
  CHECK(h[1] == table.content_hash(b));
  prompt_content_hashes(prompt, 4, 1, h);
  CHECK(h.size() == 1);
  table.release(a);
  table.release(b);
}

TEST_CASE("prefix_ideal: most cached tokens, then fewest routed, then the lowest index", "[sim]") {
  KvBlockIndex idx(3, KvBlockIndex::Removal::kCount);
  idx.apply(1, std::vector<KvEvent>{stored(1), stored(2)});
  idx.apply(2, std::vector<KvEvent>{stored(1), stored(2), stored(3)});
  auto r = make_prefix_ideal_router(3, 4);
  // 13 tokens: 3 full blocks, the lookup covers all 3 (12 <= 13 - 1): replica 2 matches 3.
  RouteDecision d = r->route(request(0, 13, {1, 2, 3}, idx), routed({0, 0, 5}));
  CHECK(d.replica == 2);
  CHECK(d.branch == "prefix");
  CHECK(d.score == 12.0);
  CHECK(d.matched_blocks == 3);
  CHECK(d.runner_up == 1);
  CHECK(d.runner_up_score == 8.0);
  // 12 tokens: the lookup never covers the last token, so at most 2 blocks: replicas 1 and 2
  // tie at 8 tokens; replica 1 has fewer routed.
  d = r->route(request(1, 12, {1, 2, 3}, idx), routed({0, 4, 5}));
  CHECK(d.replica == 1);
  CHECK(d.matched_blocks == 2);
  // Equal routed too: the lower index.
  d = r->route(request(2, 12, {1, 2, 3}, idx), routed({0, 5, 5}));
  CHECK(d.replica == 1);
  // No hit anywhere: fewest routed.
  d = r->route(request(3, 40, {9, 10}, idx), routed({3, 2, 2}));
  CHECK(d.replica == 1);
  CHECK(d.branch == "no_hit");
}

TEST_CASE("prefix_bounded keeps only replicas under ceil((1 + eps) (i + 1) / N)", "[sim]") {
  KvBlockIndex idx(2, KvBlockIndex::Removal::kCount);
  idx.apply(0, std::vector<KvEvent>{stored(1), stored(2)});
  // eps 0, request i = 2 (0-based), N = 2: bound ceil(3 / 2) = 2; replica 0 has 2 routed.
  auto r = make_prefix_bounded_router(2, 4, 0.0);
  RouteDecision d = r->route(request(2, 20, {1, 2}, idx), routed({2, 0}));
  CHECK(d.replica == 1);
  CHECK(d.branch == "bound");
  CHECK(d.matched_blocks == 0);
  CHECK(d.runner_up == -1);  // the only replica under the bound
  // eps 0.5: bound ceil(1.5 * 3 / 2) = ceil(2.25) = 3: replica 0 is eligible again.
  auto loose = make_prefix_bounded_router(2, 4, 0.5);
  d = loose->route(request(2, 20, {1, 2}, idx), routed({2, 0}));
  CHECK(d.replica == 0);
  CHECK(d.branch == "prefix");
  // i = 0 with eps 0: bound ceil(1 / 2) = 1: both are at 0.
  d = r->route(request(0, 20, {1, 2}, idx), routed({0, 0}));
  CHECK(d.replica == 0);
}

TEST_CASE("dynamo_kv: overlap from the index, active blocks and prefill tokens booked", "[sim]") {
  // Block size 4, a 12-token request of blocks {1, 2, 3}; worker 0 holds 1 and 2.
  KvBlockIndex idx(2, KvBlockIndex::Removal::kDrop);
  idx.apply(0, std::vector<KvEvent>{stored(1), stored(2)});
  auto r = make_dynamo_router(2, DynamoParams{}, true, 1, 4, 1);
  const std::vector<std::uint64_t> blocks{1, 2, 3};
  // w0: prefill (12 - 8 + 0) / 4 = 1, decode 3 new + 0 active = 3 -> 4; w1: 3 + 3 = 6.
  RouteDecision d = r->route(request(0, 12, blocks, idx, 10), routed({0, 0}));
  CHECK(d.replica == 0);
  CHECK(d.branch == "cost");
  CHECK(d.score == 4.0);
  CHECK(d.runner_up == 1);
  CHECK(d.runner_up_score == 6.0);
  CHECK(d.matched_blocks == 2);
  // The same request again: w0 has 4 prefill tokens booked and its 3 blocks active, none new:
  // (12 - 8 + 4) / 4 + (0 + 3) = 5; w1: 3 + 3 = 6.
  d = r->route(request(1, 12, blocks, idx, 11), routed({1, 0}));
  CHECK(d.replica == 0);
  CHECK(d.score == 5.0);
  // Request 10's first token releases its 4 prefill tokens; request 11's 4 stay booked:
  // (12 - 8 + 4) / 4 + (0 + 3) = 5.
  r->on_first_token(0, 10);
  d = r->route(request(2, 12, blocks, idx, 12), routed({2, 0}));
  CHECK(d.score == 5.0);
  r->on_first_token(0, 11);
  r->on_first_token(0, 12);
  // All three finished: nothing active on w0: back to 4.
  r->on_finished(0, 10);
  r->on_finished(0, 11);
  r->on_finished(0, 12);
  d = r->route(request(3, 12, blocks, idx, 13), routed({3, 0}));
  CHECK(d.score == 4.0);
}

TEST_CASE("dynamo_kv: equal costs go to the smaller tree, equal trees to a random one", "[sim]") {
  KvBlockIndex idx(3, KvBlockIndex::Removal::kDrop);
  idx.apply(1, std::vector<KvEvent>{stored(50), stored(51)});  // other content: tree size 2
  idx.apply(2, std::vector<KvEvent>{stored(60)});              // tree size 1
  auto r = make_dynamo_router(3, DynamoParams{}, true, 1, 4, 1);
  const std::vector<std::uint64_t> blocks{1, 2};
  RouteDecision d = r->route(request(0, 8, blocks, idx, 1), routed({0, 0, 0}));
  CHECK(d.replica == 0);  // all cost 2 + 2 = 4; tree sizes 0, 2, 1
  CHECK(d.branch == "tie_tree_size");
  // Worker 0 now has 2 booked prefill blocks and 2 active blocks: 4 + 2 = ... more; workers 1
  // and 2 tie at 4 with trees 2 and 1: worker 2.
  d = r->route(request(1, 8, {7, 8}, idx, 2), routed({1, 0, 0}));
  CHECK(d.replica == 2);
  // Equal trees: uniformly random among the tied; both must come up over a few seeds.
  KvBlockIndex flat(2, KvBlockIndex::Removal::kDrop);
  std::map<std::int32_t, int> seen;
  for (std::uint64_t seed = 0; seed < 32; ++seed) {
    auto x = make_dynamo_router(2, DynamoParams{}, true, seed, 4, 1);
    const RouteDecision t = x->route(request(0, 8, blocks, flat, 1), routed({0, 0}));
    CHECK(t.branch == "tie_random");
    ++seen[t.replica];
  }
  CHECK(seen.size() == 2);
}

TEST_CASE("llm_d's precise scorer min-max normalises the pods' runs from KV events", "[sim]") {
  KvBlockIndex idx(3, KvBlockIndex::Removal::kDrop);
  idx.apply(0, std::vector<KvEvent>{stored(1)});
  idx.apply(1, std::vector<KvEvent>{stored(1), stored(2), stored(3)});
  LlmDParams p;
  p.weights = LlmDWeights{0, 0, 0, 2, 0, 0};
  auto r = make_llm_d_router(3, p, 1, 50'000'000, 0, 1000, 4);
  REQUIRE(r->kv_index_removal() == KvBlockIndex::Removal::kDrop);
  // Runs 1, 3 and none: pod 1 scores 2 x (3 - 1) / (3 - 1) = 2, pod 0 0, pod 2 (no entry) 0.
  const RouteDecision d = r->route(request(0, 16, {1, 2, 3, 4}, idx), routed({0, 0, 0}));
  CHECK(d.replica == 1);
  CHECK(d.score == 2.0);
  CHECK(d.runner_up_score == 0.0);
  CHECK(d.matched_blocks == 3);
}

TEST_CASE("the llm_d scorer sets by name are llm-d's sample configs", "[sim]") {
  const std::string timed =
      "name: c\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {config: " KVSIM_SOURCE_DIR
      "/scenarios/models/qwen2-1.5b.json}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 100}\n"
      "workload: {num_requests: 4, prompt_tokens: 64, output_tokens: 4}\n"
      "cluster: {replicas: 2, router: {policy: llm_d, scorers: ";
  const auto weights = [&](const std::string& name) {
    const RouterConfig c = parse_text(timed + name + "}}\n").cluster.router;
    return LlmDWeights{c.w_queue,          c.w_kv_usage,   c.w_prefix,
                       c.w_precise_prefix, c.w_load_aware, c.w_active_request};
  };
  const auto same = [](const LlmDWeights& a, const LlmDWeights& b) {
    return a.queue == b.queue && a.kv_usage == b.kv_usage && a.prefix == b.prefix &&
           a.precise_prefix == b.precise_prefix && a.load_aware == b.load_aware &&
           a.active_request == b.active_request;
  };
  CHECK(same(weights("gie_default"), kGieDefaultWeights));
  CHECK(same(weights("llm_d_epp"), kLlmDEppWeights));
  CHECK(same(weights("llm_d_precise"), kLlmDPreciseWeights));
  CHECK(same(weights("llm_d_estimate"), kLlmDEstimateWeights));
  CHECK(router_reads_kv_events(parse_text(timed + "llm_d_precise}}\n").cluster.router));
  CHECK_FALSE(router_reads_kv_events(parse_text(timed + "gie_default}}\n").cluster.router));
}

TEST_CASE("prefix_ideal's predicted hit is the chosen engine's own first lookup", "[sim]") {
  // The Mooncake synthetic trace, 16-token blocks, pools small enough to evict: for every
  // request, the matched blocks the router read from the index times the block size are the hit
  // tokens the replica's engine then finds (requests.csv), for each V1 release's manager.
  TempDir tmp("kv-ideal");
  const std::string trace = kvsim::test::vendored_trace("mooncake_synthetic.jsonl");
  for (const char* profile : {"vllm-0.7.2", "vllm-0.20"}) {
    for (const char* policy : {"prefix_ideal", "prefix_bounded"}) {
      const std::string text = std::string("name: k\nengine: {profile: ") + profile +
                               ", mode: cache_only}\n"
                               "cache: {block_size: 16, capacity_tokens: 1000000, "
                               "enable_prefix_caching: true, num_preallocate_tokens: 0}\n"
                               "scheduler: {max_model_len: 4000000}\n"
                               "workload: {trace: {format: mooncake, path: " +
                               trace +
                               "}}\n"
                               "cluster: {replicas: 4, router: {policy: " +
                               policy + "}}\n";
      const fs::path out =
          run_scenario(parse_text(text), tmp.path / (std::string(profile) + policy)).folder;
      const auto routing = read_csv(out / "routing.csv");
      const auto requests = read_csv(out / "requests.csv");
      REQUIRE(routing.size() == 3994);
      std::map<std::string, std::int64_t> hits;
      for (std::size_t i = 1; i < requests.size(); ++i)
        hits[requests[i][0]] = std::stoll(requests[i][11]);  // first_lookup_hit_tokens
      REQUIRE(requests[0][11] == "first_lookup_hit_tokens");
      std::int64_t mismatches = 0, hit_requests = 0;
      for (std::size_t i = 1; i < routing.size(); ++i) {
        const std::int64_t matched = std::stoll(routing[i][8]);
        if (matched * 16 != hits.at(routing[i][0])) ++mismatches;
        if (matched > 0) ++hit_requests;
      }
      CHECK(mismatches == 0);
      CHECK(hit_requests > 1000);
      CHECK(read_json(out / "summary.json")["num_evictions"].get<std::int64_t>() > 0);
    }
  }
}

TEST_CASE("KV events reach a timed router after kv_events.delay_ms", "[sim]") {
  // Two customers' long contexts over 2 replicas: with events on time, dynamo_kv sees the cached
  // contexts (decisions with matched blocks); with a delay longer than the run, never.
  TempDir tmp("kv-delay");
  const std::string base =
      "name: d\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {config: " KVSIM_SOURCE_DIR
      "/scenarios/models/qwen2-1.5b.json}\n"
      "hardware: {gpu: H100-80GB}\n"
      "cache: {block_size: 16, capacity_tokens: 200000, enable_prefix_caching: true}\n"
      "workload:\n  num_requests: 60\n  arrival: {process: poisson, rate_per_s: 20}\n"
      "  system_prompts: {count: 2, tokens: 2000, popularity: uniform}\n"
      "  prompt_tokens: 100\n  output_tokens: 20\n"
      "latency: {model: roofline}\n"
      "cluster: {replicas: 2, router: {policy: dynamo_kv, seed: 1, kv_events: {delay_ms: ";
  const auto matched_decisions = [&](const std::string& delay) {
    const fs::path out =
        run_scenario(parse_text(base + delay + "}}}\n"), tmp.path / ("d" + delay)).folder;
    const auto routing = read_csv(out / "routing.csv");
    std::int64_t n = 0;
    for (std::size_t i = 1; i < routing.size(); ++i) n += std::stoll(routing[i][8]) > 0;
    return n;
  };
  CHECK(matched_decisions("0") > 40);
  CHECK(matched_decisions("1000000") == 0);
}
