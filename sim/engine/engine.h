#pragma once
// Engine: the simulation clock and the event queue (SimGrid's s4u::Engine / ns-3's Simulator
// vocabulary). Events are ordered by (time_ns, priority, seq_no): earlier time first, then lower
// priority value, then the order in which they were scheduled (seq_no is a monotone counter), so
// ties are broken the same way on every machine. The engine knows nothing of requests: an event
// carries a kind and an integer payload that the owner dispatches.

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/common/assert.h"
#include "sim/common/sim_types.h"

namespace kvsim {

/// What an event means to the simulator that scheduled it.
enum class EventKind : std::uint8_t {
  kStepEnd,       // the batch in flight finishes
  kArrival,       // a request arrives (payload: the simulator's pending-arrival slot)
  kScheduleStep,  // try to start a step (after everything else at the same instant)
  kUser,          // tests and extensions
  kClientAbort,   // a client gives up on its request (payload: the simulator's slot and generation)
};

/// Priorities used by the simulator at equal times: a step's end is handled first (its tokens are
/// delivered and the requests it finished are done), then client aborts, then arrivals, and the
/// next step is scheduled after all of them.
inline constexpr std::int32_t kPriorityStepEnd = 0;
inline constexpr std::int32_t kPriorityClientAbort = 1;
inline constexpr std::int32_t kPriorityArrival = 2;
inline constexpr std::int32_t kPriorityScheduleStep = 3;

struct Event {
  SimTimeNs time_ns = 0;
  std::int32_t priority = 0;
  EventKind kind = EventKind::kUser;
  std::uint64_t seq_no = 0;
  std::int64_t payload = 0;
};

/// The (time, priority, seq_no) order: true when `a` must run before `b`.
constexpr bool event_before(const Event& a, const Event& b) {
  if (a.time_ns != b.time_ns) return a.time_ns < b.time_ns;
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.seq_no < b.seq_no;
}

class Engine {
 public:
  /// Current simulated time in ns; only advanced by next(). Starts at 0.
  SimTimeNs now() const { return now_ns_; }

  /// Queues an event at `time_ns` (>= now(); an earlier time is a programmer error). Returns its
  /// seq_no. O(log n); allocates only when the queue grows past its high-water mark.
  std::uint64_t schedule(SimTimeNs time_ns, std::int32_t priority, EventKind kind,
                         std::int64_t payload = 0);

  /// Pops the first event and advances the clock to its time; nullopt when the queue is empty.
  /// O(log n).
  std::optional<Event> next();

  /// Runs `handler(const Event&)` on every event in order until the queue drains or the handler
  /// returns false. Returns the number of events handled.
  template <class Handler>
  std::uint64_t run(Handler&& handler) {
    std::uint64_t n = 0;
    while (auto ev = next()) {
      ++n;
      if (!handler(*ev)) break;
    }
    return n;
  }

  /// Like run(), but stops before the first event later than `limit_ns` (it stays queued) and
  /// then advances the clock to `limit_ns`.
  template <class Handler>
  std::uint64_t run_until(SimTimeNs limit_ns, Handler&& handler) {
    std::uint64_t n = 0;
    while (!heap_.empty() && heap_.front().time_ns <= limit_ns) {
      auto ev = next();
      ++n;
      if (!handler(*ev)) return n;
    }
    if (limit_ns > now_ns_) now_ns_ = limit_ns;
    return n;
  }

  /// Moves the clock to `t_ns` without an event (a fast-forward that ran steps itself): at least
  /// now() and not past the first queued event.
  void advance_clock(SimTimeNs t_ns) {
    KVSIM_ASSERT(t_ns >= now_ns_ && (heap_.empty() || heap_.front().time_ns >= t_ns),
                 "the clock would pass a queued event");
    now_ns_ = t_ns;
  }
  bool empty() const { return heap_.empty(); }
  /// Whether an event of `kind` is queued. O(n).
  bool contains_kind(EventKind kind) const {
    for (const Event& e : heap_)
      if (e.kind == kind) return true;
    return false;
  }
  std::size_t size() const { return heap_.size(); }
  /// Every queued event, in no particular order.
  std::span<const Event> queued() const { return heap_; }
  /// The first queued event (precondition: !empty()).
  const Event& peek() const { return heap_.front(); }
  /// Events popped so far.
  std::uint64_t num_events_handled() const { return handled_; }

 private:
  std::vector<Event> heap_;  // binary min-heap in event_before order
  SimTimeNs now_ns_ = 0;
  std::uint64_t next_seq_ = 0;
  std::uint64_t handled_ = 0;
};

}  // namespace kvsim
