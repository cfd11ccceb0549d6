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
  /// Steps 1 .. k (as reset): at each step with positions due, handle(step, position) for each
  /// in running order (it may make the position due at a later step), then after_step(step),
  /// which returns the figures after that step. after[j - 1] gets the figures after step j:
  /// `before` up to the first step with something due, the last ones returned after that.
  template <class Stats, class Handle, class AfterStep>
  void replay(std::int64_t k, Stats before, std::span<Stats> after, Handle&& handle,
              AfterStep&& after_step) {
    std::int64_t filled = 0;  // steps whose figures are written
    for (std::int64_t step = 1; step <= k; ++step) {
      take(step);
      if (due_.empty()) continue;
      for (; filled < step - 1; ++filled) after[static_cast<std::size_t>(filled)] = before;
      for (const std::int64_t p : due_) handle(step, static_cast<std::size_t>(p));
      before = after_step(step);
    }
    for (; filled < k; ++filled) after[static_cast<std::size_t>(filled)] = before;
  }

 private:
  std::vector<std::int64_t> head_;  // by step: the last position made due then, or -1
  std::vector<std::int64_t> link_;  // by position: the one made due at its step before it
  std::vector<std::int64_t> due_;

  /// The positions due at `step`, in running order, into due_.
  void take(std::int64_t step) {
    due_.clear();
    for (std::int64_t p = head_[static_cast<std::size_t>(step)]; p >= 0;
         p = link_[static_cast<std::size_t>(p)])
      due_.push_back(p);
    std::sort(due_.begin(), due_.end());
  }
};

}  // namespace kvsim
