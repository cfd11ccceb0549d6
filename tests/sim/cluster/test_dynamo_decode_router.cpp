// dynamo_kv's decode stage in P/D (shared/spec/cluster-routing.md §5.5): overlap weight 0,
// assume_kv_reuse false (every request books fresh block hashes: no dedup against the worker's
// active ones), track_prefill_tokens false (no prefill tokens booked). cost_w = new_blocks_w +
// active_blocks_w with new_blocks_w = the request's full blocks; ties by the smaller tree of the
// decode workers' KV events. Hand-computed decisions; the booking switches one at a time.

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "sim/cluster/dynamo_kv.h"
#include "sim/cluster/kv_block_index.h"
#include "sim/cluster/router.h"

using namespace kvsim;

namespace {

KvEvent stored(std::uint64_t h) { return {KvEvent::Kind::kStored, 0, h}; }

std::vector<ReplicaLoad> loads(std::size_t n) { return std::vector<ReplicaLoad>(n); }

/// A request of `tokens` prompt tokens (block size 4) whose full blocks are `hashes`.
RouteInput request(std::int64_t tokens, const std::vector<std::uint64_t>& hashes,
                   const KvBlockIndex& idx, std::uint64_t id) {
  RouteInput in;
  in.prompt_tokens = tokens;
  in.prompt_blocks = (tokens + 3) / 4;
  in.content_hashes = hashes;
  in.kv_index = &idx;
  in.request_id = id;
  return in;
}

}  // namespace

TEST_CASE("dynamo decode router: a request's blocks are new everywhere, active blocks summed",
          "[sim]") {
  // Block size 4, two decode workers; worker 1's tree holds 5 unrelated blocks, worker 0's none.
  KvBlockIndex idx(2, KvBlockIndex::Removal::kDrop);
  idx.apply(1, std::vector<KvEvent>{stored(90), stored(91), stored(92), stored(93), stored(94)});
  auto r = make_dynamo_decode_router(2, 1, 4, 1);
  REQUIRE(r->kv_index_removal() == KvBlockIndex::Removal::kDrop);  // the tree sizes
  REQUIRE(r->books_requests());
  // A: 12 tokens, blocks {1, 2, 3}: both cost 3 new + 0 active = 3; the smaller tree: worker 0.
  RouteDecision d = r->route(request(12, {1, 2, 3}, idx, 1), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.branch == "tie_tree_size");
  CHECK(d.score == 3.0);
  // B: 16 tokens {1, 2, 3, 4}: w0 4 new (no dedup against A's 1, 2, 3) + 3 active = 7; w1 4 + 0.
  d = r->route(request(16, {1, 2, 3, 4}, idx, 2), loads(2));
  CHECK(d.replica == 1);
  CHECK(d.branch == "cost");
  CHECK(d.score == 4.0);
  CHECK(d.runner_up == 0);
  CHECK(d.runner_up_score == 7.0);
  // C: 8 tokens {1, 2}: w0 2 + 3 = 5; w1 2 + 4 = 6.
  d = r->route(request(8, {1, 2}, idx, 3), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.score == 5.0);
  CHECK(d.runner_up_score == 6.0);
  // D, A's blocks again: w0 holds A {1, 2, 3} and C {1, 2}: 5 active (3 distinct hashes with
  // reuse): 3 + 5 = 8; w1 3 + 4 = 7.
  d = r->route(request(12, {1, 2, 3}, idx, 4), loads(2));
  CHECK(d.replica == 1);
  CHECK(d.score == 7.0);
  CHECK(d.runner_up_score == 8.0);
  // A's first token releases nothing (no prefill tokens), its end its 3 blocks: w0 2 active,
  // w1 B + D = 7. E, 12 tokens {5, 6, 7}: w0 3 + 2 = 5; w1 3 + 7 = 10.
  r->on_first_token(0, 1);
  r->on_finished(0, 1);
  d = r->route(request(12, {5, 6, 7}, idx, 5), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.score == 5.0);
  CHECK(d.runner_up_score == 10.0);
  // Everything ends: all costs are the request's blocks again, the tie to the smaller tree.
  const auto end = [&](std::int32_t w, std::uint64_t id) {
    r->on_first_token(w, id);
    r->on_finished(w, id);
  };
  end(1, 2);
  end(0, 3);
  end(1, 4);
  end(0, 5);
  d = r->route(request(12, {1, 2, 3}, idx, 6), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.branch == "tie_tree_size");
  CHECK(d.score == 3.0);
}

TEST_CASE("dynamo decode router: the overlap is ignored, only the full blocks count", "[sim]") {
  // Worker 0 caches the whole request (overlap 3, tree 3), worker 1 nothing (tree 0).
  KvBlockIndex idx(2, KvBlockIndex::Removal::kDrop);
  idx.apply(0, std::vector<KvEvent>{stored(1), stored(2), stored(3)});
  // The aggregated router takes the cache: w0 (14 - 12) / 4 + 3 = 3.5 against w1 14 / 4 + 3.
  auto agg = make_dynamo_router(2, DynamoParams{}, true, 1, 4, 1);
  RouteDecision d = agg->route(request(14, {1, 2, 3}, idx, 1), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.score == 3.5);
  // The decode stage: 3 full blocks (the partial fourth is not one) on both: a tie, and the
  // smaller tree is the worker without the cache.
  auto r = make_dynamo_decode_router(2, 1, 4, 1);
  d = r->route(request(14, {1, 2, 3}, idx, 1), loads(2));
  CHECK(d.replica == 1);
  CHECK(d.branch == "tie_tree_size");
  CHECK(d.score == 3.0);
  CHECK(d.runner_up_score == 3.0);
  CHECK(d.matched_blocks == 0);  // what the chosen worker holds, as Dynamo reports it
  // A prompt shorter than a block books none: w1 still 0 + 3 = 3 against w0 0 + 0.
  d = r->route(request(3, {}, idx, 2), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.score == 0.0);
  CHECK(d.runner_up_score == 3.0);
}

TEST_CASE("dynamo booking switches: no prefill tokens, no reuse, each alone", "[sim]") {
  // Weight 1 so the prefill tokens show. Block size 4, no KV events (overlap 0, trees 0).
  KvBlockIndex idx(2, KvBlockIndex::Removal::kDrop);
  const std::vector<std::uint64_t> blocks{1, 2, 3};
  SECTION("track_prefill_tokens false: the request's own isl counts, no booked tokens") {
    DynamoTracking t;
    t.prefill_tokens = false;
    auto r = make_dynamo_policy_router(2, DynamoParams{}, t, 1, 4, 1);
    RouteDecision d = r->route(request(12, blocks, idx, 1), loads(2));
    CHECK(d.score == 12.0 / 4 + 3);
    // Again: on w, 12 / 4 + (0 new + 3 active) = 6; the other 3 + 3 = 6 too (with tokens
    // booked, w would cost (12 + 12) / 4 + 3 = 9): a tie, equal trees.
    d = r->route(request(12, blocks, idx, 2), loads(2));
    CHECK(d.branch == "tie_random");
    CHECK(d.score == 6.0);
    CHECK(d.runner_up_score == 6.0);
  }
  SECTION("assume_kv_reuse false alone: prefill tokens booked, blocks not shared") {
    DynamoTracking t;
    t.assume_kv_reuse = false;
    auto r = make_dynamo_policy_router(2, DynamoParams{}, t, 1, 4, 1);
    RouteDecision d = r->route(request(12, blocks, idx, 1), loads(2));
    const std::int32_t w = d.replica;
    // On w: (12 + 12) / 4 + (3 new + 3 active) = 12; the other 3 + 3 = 6.
    d = r->route(request(12, blocks, idx, 2), loads(2));
    CHECK(d.replica == 1 - w);
    CHECK(d.score == 6.0);
    CHECK(d.runner_up_score == 12.0);
    // The first request's first token releases its 12 tokens: w costs 3 + 6 = 9; the other
    // (12 + 12) / 4 + 6 = 12.
    r->on_first_token(w, 1);
    d = r->route(request(12, blocks, idx, 3), loads(2));
    CHECK(d.replica == w);
    CHECK(d.score == 9.0);
    CHECK(d.runner_up_score == 12.0);
  }
  SECTION("the defaults dedup: the same blocks again are not new") {
    auto r = make_dynamo_policy_router(2, DynamoParams{}, DynamoTracking{}, 1, 4, 1);
    RouteDecision d = r->route(request(12, blocks, idx, 1), loads(2));
    const std::int32_t w = d.replica;
    // On w: (12 + 12) / 4 + (0 new + 3 active) = 9; the other 6.
    d = r->route(request(12, blocks, idx, 2), loads(2));
    CHECK(d.replica == 1 - w);
    CHECK(d.runner_up_score == 9.0);
  }
}

TEST_CASE("dynamo decode router: a request of n samples is released by its last end", "[sim]") {
  KvBlockIndex idx(2, KvBlockIndex::Removal::kDrop);
  idx.apply(1, std::vector<KvEvent>{stored(90)});  // worker 1's tree is the larger
  auto r = make_dynamo_decode_router(2, 1, 4, 2);
  RouteDecision d = r->route(request(8, {1, 2}, idx, 7), loads(2));
  CHECK(d.replica == 0);  // tie at 2, smaller tree
  r->on_first_token(0, 7);
  r->on_finished(0, 7);  // one sample of two: w0 keeps 2 active: 2 + 2 = 4 against 2
  d = r->route(request(8, {1, 2}, idx, 8), loads(2));
  CHECK(d.replica == 1);
  CHECK(d.runner_up_score == 4.0);
  r->on_finished(0, 7);  // the last sample: w0 back to 0 active: 2 against w1's 2 + 2
  d = r->route(request(8, {3, 4}, idx, 9), loads(2));
  CHECK(d.replica == 0);
  CHECK(d.score == 2.0);
  CHECK(d.runner_up_score == 4.0);
}

TEST_CASE("dynamo decode router: equal costs and trees draw from the decode stream", "[sim]") {
  KvBlockIndex flat(3, KvBlockIndex::Removal::kDrop);
  auto r = make_dynamo_decode_router(3, 11, 4, 1);
  RngStream rng = make_stream(11, "router.dynamo_kv.decode");
  for (std::uint64_t id = 0; id < 200; ++id) {
    const RouteDecision d = r->route(request(8, {1, 2}, flat, id), loads(3));
    REQUIRE(d.branch == "tie_random");
    REQUIRE(d.replica == static_cast<std::int32_t>(uniform_below(rng, 3)));
    r->on_finished(d.replica, id);  // all equal again for the next one
  }
}
