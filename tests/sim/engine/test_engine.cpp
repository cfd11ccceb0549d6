// Engine: the (time, priority, seq_no) event order, the clock, run_until.

#include <catch2/catch.hpp>
#include <vector>

#include "sim/engine/engine.h"

using namespace kvsim;

TEST_CASE("events run in time order whatever order they were scheduled in", "[sim]") {
  Engine e;
  e.schedule(30, 0, EventKind::kUser, 3);
  e.schedule(10, 0, EventKind::kUser, 1);
  e.schedule(20, 0, EventKind::kUser, 2);
  std::vector<std::int64_t> seen;
  std::vector<SimTimeNs> times;
  e.run([&](const Event& ev) {
    seen.push_back(ev.payload);
    times.push_back(e.now());
    return true;
  });
  CHECK(seen == std::vector<std::int64_t>{1, 2, 3});
  CHECK(times == std::vector<SimTimeNs>{10, 20, 30});
  CHECK(e.now() == 30);
  CHECK(e.empty());
}

TEST_CASE("events at the same time run by priority then by scheduling order", "[sim]") {
  Engine e;
  e.schedule(5, kPriorityScheduleStep, EventKind::kScheduleStep, 0);
  e.schedule(5, kPriorityArrival, EventKind::kArrival, 1);
  e.schedule(5, kPriorityStepEnd, EventKind::kStepEnd, 2);
  e.schedule(5, kPriorityArrival, EventKind::kArrival, 3);
  e.schedule(5, kPriorityArrival, EventKind::kArrival, 4);
  std::vector<std::int64_t> seen;
  e.run([&](const Event& ev) {
    seen.push_back(ev.payload);
    return true;
  });
  CHECK(seen == std::vector<std::int64_t>{2, 1, 3, 4, 0});
}

TEST_CASE("sequence numbers are monotone and break ties of many equal events", "[sim]") {
  Engine e;
  std::vector<std::uint64_t> seqs;
  for (int i = 0; i < 1000; ++i) seqs.push_back(e.schedule(7, 1, EventKind::kUser, i));
  for (std::size_t i = 1; i < seqs.size(); ++i) REQUIRE(seqs[i] == seqs[i - 1] + 1);
  std::int64_t expect = 0;
  while (auto ev = e.next()) REQUIRE(ev->payload == expect++);
  CHECK(expect == 1000);
}

TEST_CASE("an event scheduled from a handler at the current time runs after its equals", "[sim]") {
  Engine e;
  e.schedule(1, 0, EventKind::kUser, 0);
  e.schedule(1, 1, EventKind::kUser, 1);
  std::vector<std::int64_t> seen;
  e.run([&](const Event& ev) {
    seen.push_back(ev.payload);
    if (ev.payload == 0) e.schedule(e.now(), 1, EventKind::kUser, 2);
    return true;
  });
  CHECK(seen == std::vector<std::int64_t>{0, 1, 2});
}

TEST_CASE("run_until stops before later events and advances the clock to the limit", "[sim]") {
  Engine e;
  e.schedule(10, 0, EventKind::kUser, 1);
  e.schedule(50, 0, EventKind::kUser, 2);
  int n = 0;
  e.run_until(20, [&](const Event&) {
    ++n;
    return true;
  });
  CHECK(n == 1);
  CHECK(e.now() == 20);
  CHECK(e.size() == 1);
  CHECK(e.peek().time_ns == 50);
}

TEST_CASE("event_before orders by time then priority then sequence number", "[sim]") {
  CHECK(event_before(Event{1, 9, EventKind::kUser, 9, 0}, Event{2, 0, EventKind::kUser, 0, 0}));
  CHECK(event_before(Event{1, 0, EventKind::kUser, 9, 0}, Event{1, 1, EventKind::kUser, 0, 0}));
  CHECK(event_before(Event{1, 1, EventKind::kUser, 3, 0}, Event{1, 1, EventKind::kUser, 4, 0}));
  CHECK_FALSE(
      event_before(Event{1, 1, EventKind::kUser, 4, 0}, Event{1, 1, EventKind::kUser, 4, 0}));
}
