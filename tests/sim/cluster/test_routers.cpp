// The routers' decision rules (shared/spec/cluster-routing.md §2, §6.2), on hand-made loads
// with hand-computed answers: the cursor, ties to the lowest index, the first drawn on equal
// loads, the spec's splitmix64 chain.

#include <catch2/catch.hpp>
#include <cstdint>
#include <vector>

#include "sim/cluster/cluster_simulator.h"
#include "sim/cluster/router.h"

using namespace kvsim;

namespace {

__extension__ typedef unsigned __int128 U128;  // GCC/Clang

std::vector<ReplicaLoad> loads_of(std::initializer_list<std::int64_t> in_flight) {
  std::vector<ReplicaLoad> v;
  for (std::int64_t x : in_flight) v.push_back(ReplicaLoad{x, 0, x});
  return v;
}

RouteInput nth(std::int64_t i) {
  RouteInput in;
  in.index = i;
  return in;
}

}  // namespace

TEST_CASE("round_robin sends the k-th request to (k + start) mod N", "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kRoundRobin;
  c.start = 1;
  auto r = make_router(c, 3);
  const auto loads = loads_of({0, 0, 0});
  const int expect[] = {1, 2, 0, 1, 2, 0, 1};
  for (int k = 0; k < 7; ++k) {
    const RouteDecision d = r->route(nth(k), loads);
    CHECK(d.replica == expect[k]);
    CHECK(d.branch == "round_robin");
    CHECK_FALSE(d.has_score);
  }
}

TEST_CASE("least_requests takes the fewest in flight, ties to the lowest index", "[sim]") {
  auto r = make_router(RouterConfig{RouterPolicy::kLeastRequests}, 4);
  REQUIRE(r->tracks_in_flight());
  // The loads as the cluster reports them: every count that changed, before the decision.
  const auto route = [](Router& rt, std::initializer_list<std::int64_t> in_flight) {
    const std::vector<ReplicaLoad> loads = loads_of(in_flight);
    for (std::size_t i = 0; i < loads.size(); ++i)
      rt.on_in_flight(static_cast<std::int32_t>(i), loads[i].in_flight);
    return rt.route(nth(0), loads);
  };
  RouteDecision d = route(*r, {2, 1, 1, 3});
  CHECK(d.replica == 1);
  CHECK(d.score == 1);
  CHECK(d.runner_up == 2);  // the tie's other member
  CHECK(d.runner_up_score == 1);
  d = route(*r, {0, 0, 0, 0});
  CHECK(d.replica == 0);
  CHECK(d.runner_up == 1);
  d = route(*r, {5, 4, 3, 0});
  CHECK(d.replica == 3);
  CHECK(d.runner_up == 2);
  CHECK(d.runner_up_score == 3);
  d = route(*r, {1, 9, 2, 1});  // the runner-up in the winner's own half
  CHECK(d.replica == 0);
  CHECK(d.runner_up == 3);
  CHECK(d.runner_up_score == 1);
  auto one = make_router(RouterConfig{RouterPolicy::kLeastRequests}, 1);
  d = route(*one, {7});
  CHECK(d.replica == 0);
  CHECK(d.score == 7);
  CHECK(d.runner_up == -1);
  // Against the scan over random counts, 5 to 70 replicas (padding leaves included).
  std::uint64_t x = 88172645463325252ULL;
  const auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  for (std::int32_t n : {5, 8, 33, 64, 70}) {
    auto t = make_router(RouterConfig{RouterPolicy::kLeastRequests}, n);
    std::vector<ReplicaLoad> loads(static_cast<std::size_t>(n));
    for (int step = 0; step < 2000; ++step) {
      const auto r0 = static_cast<std::int32_t>(next() % static_cast<std::uint64_t>(n));
      loads[static_cast<std::size_t>(r0)].in_flight = static_cast<std::int64_t>(next() % 6);
      t->on_in_flight(r0, loads[static_cast<std::size_t>(r0)].in_flight);
      std::int32_t best = 0, second = -1;
      for (std::int32_t i = 1; i < n; ++i) {
        const auto li = loads[static_cast<std::size_t>(i)].in_flight;
        if (li < loads[static_cast<std::size_t>(best)].in_flight) {
          second = best;
          best = i;
        } else if (second < 0 || li < loads[static_cast<std::size_t>(second)].in_flight) {
          second = i;
        }
      }
      const RouteDecision e = t->route(nth(0), loads);
      REQUIRE(e.replica == best);
      REQUIRE(e.runner_up == second);
    }
  }
}

TEST_CASE("power_of_two sends to the less loaded of two distinct draws, the first on a tie",
          "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kPowerOfTwo;
  c.seed = 11;
  // With two replicas both are always drawn: the less loaded one wins whatever the draw.
  auto r = make_router(c, 2);
  for (int i = 0; i < 50; ++i) {
    RouteDecision d = r->route(nth(i), loads_of({5, 3}));
    CHECK(d.replica == 1);
    CHECK(d.branch == "less_loaded");
    CHECK(d.runner_up == 0);
    CHECK(d.score == 3);
    CHECK(d.runner_up_score == 5);
    d = r->route(nth(i), loads_of({3, 5}));
    CHECK(d.replica == 0);
  }
  // Equal loads: the first drawn, a = uniform_below(stream, 2); the second is the other one.
  RngStream rng = make_stream(11, "router.power_of_two");
  auto tie = make_router(c, 2);
  int zeros = 0;
  for (int i = 0; i < 400; ++i) {
    const std::uint64_t a = uniform_below(rng, 2);
    (void)uniform_below(rng, 1);  // b's draw
    const RouteDecision d = tie->route(nth(i), loads_of({4, 4}));
    REQUIRE(d.replica == static_cast<std::int32_t>(a));
    CHECK(d.runner_up == 1 - d.replica);
    CHECK(d.branch == "tie_first_drawn");
    zeros += d.replica == 0;
  }
  CHECK(zeros > 150);  // both orders happen
  CHECK(zeros < 250);
  // Eight replicas: the pair is distinct; the chosen is never more loaded than the runner-up.
  auto eight = make_router(c, 8);
  const auto loads = loads_of({7, 6, 5, 4, 3, 2, 1, 0});
  for (int i = 0; i < 200; ++i) {
    const RouteDecision d = eight->route(nth(i), loads);
    REQUIRE(d.runner_up != d.replica);
    CHECK(d.replica > d.runner_up);  // lower load = higher index here
  }
  // One replica: no draw.
  CHECK(make_router(c, 1)->route(nth(0), loads_of({9})).replica == 0);
}

TEST_CASE("random draws uniformly from the router's seeded stream", "[sim]") {
  RouterConfig c;
  c.policy = RouterPolicy::kRandom;
  c.seed = 3;
  auto a = make_router(c, 8), b = make_router(c, 8);
  c.seed = 4;
  auto other = make_router(c, 8);
  const auto loads = loads_of({0, 0, 0, 0, 0, 0, 0, 0});
  std::vector<int> count(8, 0);
  int same_as_other = 0;
  RngStream rng = make_stream(3, "router.random");
  for (int i = 0; i < 8000; ++i) {
    const std::int32_t x = a->route(nth(i), loads).replica;
    REQUIRE(x == b->route(nth(i), loads).replica);
    REQUIRE(x == static_cast<std::int32_t>(uniform_below(rng, 8)));
    same_as_other += x == other->route(nth(i), loads).replica;
    ++count[static_cast<std::size_t>(x)];
  }
  for (int n : count) CHECK((n > 900 && n < 1100));
  CHECK(same_as_other < 1200);  // another seed, another sequence (1/8 agree by chance)
}

TEST_CASE("uniform_below is Lemire's exact multiply-shift", "[sim]") {
  RngStream rng(42), copy(42);
  for (std::uint64_t n : {1ULL, 2ULL, 3ULL, 7ULL, 1000ULL}) {
    for (int i = 0; i < 100; ++i) {
      const std::uint64_t x = copy();
      const auto expect =
          static_cast<std::uint64_t>((static_cast<U128>(x) * n) >> 64);
      const auto low = static_cast<std::uint64_t>(static_cast<U128>(x) * n);
      if (low < n) {  // a possible rejection: resynchronise and skip the comparison
        rng = copy;
        continue;
      }
      CHECK(uniform_below(rng, n) == expect);
    }
  }
}

TEST_CASE("prefix_hash chains splitmix64 over the first k block ids, replica h mod N", "[sim]") {
  // h = splitmix64(splitmix64(0 ^ 1) ^ 2) = 0xbcd9dbb49673066b; mod 8 = 3, mod 3 = 0.
  const std::uint64_t ids[] = {1, 2, 3};
  CHECK(prefix_hash_of(std::span<const std::uint64_t>(ids, 2)) == 0xbcd9dbb49673066bULL);
  RouterConfig c;
  c.policy = RouterPolicy::kPrefixHash;
  c.k = 2;
  auto r = make_router(c, 8);
  CHECK(r->block_ids_needed() == 2);
  RouteInput in;
  in.block_ids = std::span<const std::uint64_t>(ids, 2);  // the cluster passes k ids
  CHECK(r->route(in, loads_of({0, 0, 0, 0, 0, 0, 0, 0})).replica == 3);
  CHECK(make_router(c, 3)->route(in, loads_of({0, 0, 0})).replica == 0);
  // Fewer ids than k: hash those. splitmix64(0 ^ 7) = 0x63cbe1e459320dd7; mod 5 = 2.
  const std::uint64_t one[] = {7};
  in.block_ids = one;
  CHECK(make_router(c, 5)->route(in, loads_of({0, 0, 0, 0, 0})).replica == 2);
}

TEST_CASE("block ids are equal exactly for equal leading content", "[sim]") {
  std::vector<std::int32_t> a(40), b(40);
  for (int i = 0; i < 40; ++i) a[static_cast<std::size_t>(i)] = b[static_cast<std::size_t>(i)] = i;
  b[20] = 999;  // block 1 (tokens 16..31) differs
  std::vector<std::uint64_t> ia, ib;
  ClusterSimulator::block_ids(a, 16, 10, ia);
  ClusterSimulator::block_ids(b, 16, 10, ib);
  REQUIRE(ia.size() == 3);  // two full blocks and a partial one
  REQUIRE(ib.size() == 3);
  CHECK(ia[0] == ib[0]);
  CHECK(ia[1] != ib[1]);
  CHECK(ia[2] != ib[2]);  // chained: a difference carries on
  ClusterSimulator::block_ids(a, 16, 2, ib);
  CHECK(ib.size() == 2);
  CHECK(ib[1] == ia[1]);
}
