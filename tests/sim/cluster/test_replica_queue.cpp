// ReplicaQueue (the timed loop's choice of the next replica) against the scan it replaced: the
// smallest (time, priority), the lowest index at a tie, idle replicas (kNever) never chosen.

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "sim/cluster/replica_queue.h"

using namespace kvsim;

namespace {

struct Scan {
  std::int32_t best = -1;
  SimTimeNs time = ReplicaQueue::kNever;
  std::int32_t priority = 0;
};

// The O(N) scan of cluster_timed.cpp before the queue, over keys (t, p) per replica.
Scan scan(const std::vector<SimTimeNs>& t, const std::vector<std::int32_t>& p) {
  Scan s;
  for (std::size_t r = 0; r < t.size(); ++r) {
    if (t[r] == ReplicaQueue::kNever || t[r] > s.time) continue;
    if (t[r] < s.time || p[r] < s.priority) {
      s.best = static_cast<std::int32_t>(r);
      s.time = t[r];
      s.priority = p[r];
    }
  }
  return s;
}

}  // namespace

TEST_CASE("ReplicaQueue picks what the scan picks: (time, priority), lowest index at a tie",
          "[sim]") {
  std::mt19937_64 rng(20261128);
  for (const std::int32_t n : {1, 2, 3, 5, 8, 16, 17, 64, 100}) {
    ReplicaQueue q(n);
    REQUIRE(q.top_time() == ReplicaQueue::kNever);
    std::vector<SimTimeNs> t(static_cast<std::size_t>(n), ReplicaQueue::kNever);
    std::vector<std::int32_t> p(static_cast<std::size_t>(n), 0);
    std::int64_t ties = 0;
    for (int step = 0; step < 20000; ++step) {
      const auto r = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(n));
      // Few distinct times and priorities, so that ties are frequent; idle one time in five.
      const bool idle = rng() % 5 == 0;
      const SimTimeNs tr = idle ? ReplicaQueue::kNever : static_cast<SimTimeNs>(rng() % 4);
      const auto pr = static_cast<std::int32_t>(rng() % 3);
      t[static_cast<std::size_t>(r)] = tr;
      p[static_cast<std::size_t>(r)] = idle ? 0 : pr;
      q.set(r, tr, pr);
      const Scan s = scan(t, p);
      if (s.best < 0) {
        REQUIRE(q.top_time() == ReplicaQueue::kNever);
        continue;
      }
      INFO("n " << n << " step " << step);
      REQUIRE(q.top() == s.best);
      REQUIRE(q.top_time() == s.time);
      REQUIRE(q.top_priority() == s.priority);
      for (std::int32_t o = 0; o < s.best; ++o)
        if (t[static_cast<std::size_t>(o)] == s.time && p[static_cast<std::size_t>(o)] > s.priority)
          ++ties;
    }
    if (n > 1) CHECK(ties > 0);  // the draw exercised equal times at different priorities
  }
}

TEST_CASE("ReplicaQueue gives equal keys to the lowest index and never puts an idle replica first",
          "[sim]") {
  ReplicaQueue q(5);
  q.set(3, 100, 1);
  q.set(1, 100, 1);
  q.set(4, 100, 1);
  CHECK(q.top() == 1);
  q.set(4, 100, 0);  // a lower priority at the same time wins
  CHECK(q.top() == 4);
  CHECK(q.top_priority() == 0);
  q.set(2, 99, 5);  // an earlier time wins whatever its priority
  CHECK(q.top() == 2);
  CHECK(q.top_time() == 99);
  q.set(2, ReplicaQueue::kNever, 0);
  q.set(4, ReplicaQueue::kNever, 0);
  CHECK(q.top() == 1);
  q.set(1, ReplicaQueue::kNever, 0);
  CHECK(q.top() == 3);
  q.set(3, ReplicaQueue::kNever, 0);
  CHECK(q.top_time() == ReplicaQueue::kNever);
  q.set(0, 7, 2);
  CHECK(q.top() == 0);
  CHECK(q.top_time() == 7);
}
