#include "sim/engine/engine.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {
namespace {
struct After {
  bool operator()(const Event& a, const Event& b) const { return event_before(b, a); }
};
}  // namespace

std::uint64_t Engine::schedule(SimTimeNs time_ns, std::int32_t priority, EventKind kind,
                               std::int64_t payload) {
  KVSIM_ASSERT(time_ns >= now_ns_, "event scheduled in the past");
  const std::uint64_t seq = next_seq_++;
  heap_.push_back(Event{time_ns, priority, kind, seq, payload});
  std::push_heap(heap_.begin(), heap_.end(), After{});
  return seq;
}

std::optional<Event> Engine::next() {
  if (heap_.empty()) return std::nullopt;
  std::pop_heap(heap_.begin(), heap_.end(), After{});
  const Event ev = heap_.back();
  heap_.pop_back();
  now_ns_ = ev.time_ns;
  ++handled_;
  return ev;
}

}  // namespace kvsim
