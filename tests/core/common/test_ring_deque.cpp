#include <catch2/catch.hpp>
#include <deque>
#include <random>
#include <vector>

#include "core/common/ring_deque.h"

using kvsim::RingDeque;

TEST_CASE("the ring deque keeps order across wrap-around and growth", "[core]") {
  RingDeque<int> q;
  CHECK(q.empty());
  for (int i = 0; i < 10; ++i) q.push_back(i);
  for (int i = 0; i < 8; ++i) q.pop_front();     // head moves near the end of the ring
  for (int i = 10; i < 40; ++i) q.push_back(i);  // wraps, then grows past 16
  q.push_front(7);
  REQUIRE(q.size() == 33);
  CHECK(q.front() == 7);
  CHECK(q[1] == 8);
  CHECK(q[32] == 39);
  q.erase_at(1);
  CHECK(q[1] == 9);
  std::vector<int> seen(q.begin(), q.end());
  CHECK(seen.size() == 32);
  CHECK(seen.back() == 39);
}

TEST_CASE("the ring deque behaves like std::deque under random use", "[core]") {
  std::mt19937_64 rng(3);
  RingDeque<int> q;
  std::deque<int> ref;
  for (int op = 0; op < 20000; ++op) {
    const auto kind = rng() % 5;
    if (kind == 0) {
      q.push_front(op);
      ref.push_front(op);
    } else if (kind <= 2) {
      q.push_back(op);
      ref.push_back(op);
    } else if (kind == 3 && !ref.empty()) {
      q.pop_front();
      ref.pop_front();
    } else if (!ref.empty()) {
      const std::size_t i = rng() % ref.size();
      q.erase_at(i);
      ref.erase(ref.begin() + static_cast<std::ptrdiff_t>(i));
    }
    REQUIRE(q.size() == ref.size());
    if (!ref.empty()) REQUIRE(q.front() == ref.front());
  }
  CHECK(std::vector<int>(q.begin(), q.end()) == std::vector<int>(ref.begin(), ref.end()));
}
