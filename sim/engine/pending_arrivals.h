#pragma once
// Requests whose arrival event is scheduled but has not happened yet. Each is held in a slot that
// the arrival event carries as its payload; a slot is reused once its request has arrived, so a
// trace of any length holds only the arrivals in flight. No allocation once warm.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "sim/workload/workload.h"

namespace kvsim {

class PendingArrivals {
 public:
  /// Holds `spec` until take(); returns its slot. `open_loop`: it came from the source's next()
  /// (its arrival pulls the next one), else it is a follow-up turn of a session; `tag` is the
  /// caller's (a cluster's kind of event). O(1) amortised.
  std::int64_t put(RequestSpec spec, bool open_loop, std::uint8_t tag = 0) {
    std::int64_t slot;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
      specs_[index(slot)] = std::move(spec);
      open_loop_[index(slot)] = open_loop;
      tag_[index(slot)] = tag;
    } else {
      slot = static_cast<std::int64_t>(specs_.size());
      specs_.push_back(std::move(spec));
      open_loop_.push_back(open_loop);
      tag_.push_back(tag);
    }
    return slot;
  }
  [[nodiscard]] const RequestSpec& at(std::int64_t slot) const { return specs_[index(slot)]; }
  [[nodiscard]] bool open_loop(std::int64_t slot) const { return open_loop_[index(slot)]; }
  [[nodiscard]] std::uint8_t tag(std::int64_t slot) const { return tag_[index(slot)]; }
  /// The request of `slot`, whose slot becomes free.
  RequestSpec take(std::int64_t slot) {
    RequestSpec spec = std::move(specs_[index(slot)]);
    free_.push_back(slot);
    return spec;
  }

 private:
  static std::size_t index(std::int64_t slot) { return static_cast<std::size_t>(slot); }
  std::vector<RequestSpec> specs_;
  std::vector<bool> open_loop_;
  std::vector<std::uint8_t> tag_;
  std::vector<std::int64_t> free_;
};

}  // namespace kvsim
