#pragma once
// StepBuckets: the fast-forward's event lists (core/v1/scheduler_decode.cpp,
// core/v0/scheduler_decode.cpp). Each running position has at most one pending step at which its
// decode does something (allocates, fills a block); a run of k steps takes, for each step in
// order, the positions due then in running order -- the step loop's order of allocator calls --
// with O(1) per entry plus the sort of each step's few positions, and no allocation once the
// vectors have grown.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace kvsim {

class StepBuckets {
 public:
  /// Empties the lists for steps 1 .. k of `n` positions.
  void reset(std::int64_t k, std::size_t n) {
    head_.assign(static_cast<std::size_t>(k) + 1, -1);
    link_.resize(n);
  }
  /// Position `p` is due at `step` (1 <= step <= k; p has no other pending step).
  void due_at(std::int64_t step, std::size_t p) {
    link_[p] = head_[static_cast<std::size_t>(step)];
    head_[static_cast<std::size_t>(step)] = static_cast<std::int64_t>(p);
  }
  /// The positions due at `step`, in running order (empty if none); valid until the next call.
  /// Positions made due at a later step while these are handled go to that step's list.
  std::span<const std::int64_t> take(std::int64_t step) {
    due_.clear();
    for (std::int64_t p = head_[static_cast<std::size_t>(step)]; p >= 0;
         p = link_[static_cast<std::size_t>(p)])
      due_.push_back(p);
    std::sort(due_.begin(), due_.end());
    return due_;
  }

 private:
  std::vector<std::int64_t> head_;  // by step: the last position made due then, or -1
  std::vector<std::int64_t> link_;  // by position: the one made due at its step before it
  std::vector<std::int64_t> due_;
};

}  // namespace kvsim
