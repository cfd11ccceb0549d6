#pragma once
// ReplicaQueue: which of N replicas has the first next event, in the timed loop's order (time,
// priority, index): a tournament tree over the replicas' keys. set() re-keys one replica in
// O(log N); top() is O(1). All storage is sized at construction: nothing is allocated after it.
//
// A replica keyed kNever (idle) is never the answer while another is not; when all are idle,
// top_time() is kNever. Ties go to the lowest index, as a scan in index order that keeps the
// first of equal keys would pick.

#include <cstdint>
#include <limits>
#include <vector>

#include "core/common/assert.h"
#include "sim/common/sim_types.h"

namespace kvsim {

class ReplicaQueue {
 public:
  static constexpr SimTimeNs kNever = std::numeric_limits<SimTimeNs>::max();

  /// n >= 1 replicas, all idle.
  explicit ReplicaQueue(std::int32_t n) : n_(n) {
    KVSIM_ASSERT(n >= 1);
    while (leaves_ < n) leaves_ *= 2;
    keys_.assign(static_cast<std::size_t>(leaves_), Key{kNever, 0});
    // Node i (1-based heap layout) holds the winner of its subtree; leaf of replica r is
    // leaves_ + r. Padding leaves (r >= n) are idle and lose every tie by their index.
    win_.assign(static_cast<std::size_t>(2 * leaves_), 0);
    for (std::int32_t r = 0; r < leaves_; ++r) win_[static_cast<std::size_t>(leaves_ + r)] = r;
    for (std::int32_t i = leaves_ - 1; i >= 1; --i) win_[idx(i)] = winner(2 * i, 2 * i + 1);
  }

  std::int32_t size() const { return n_; }

  /// Replica r's next event is at (t, priority); t = kNever: none.
  void set(std::int32_t r, SimTimeNs t, std::int32_t priority) {
    KVSIM_ASSERT(r >= 0 && r < n_);
    const Key k{t, t == kNever ? 0 : priority};
    keys_[static_cast<std::size_t>(r)] = k;
    // Up from r's leaf: the winner below (cur) meets the sibling subtree's winner, unchanged.
    std::int32_t cur = r;
    Key ck = k;
    for (std::int32_t i = leaves_ + r; i > 1; i /= 2) {
      const std::int32_t s = win_[idx(i ^ 1)];
      const Key& ks = keys_[static_cast<std::size_t>(s)];
      // A left sibling (i odd) holds the lower indices: it wins a tie.
      if (ks.time < ck.time ||
          (ks.time == ck.time &&
           (ks.priority < ck.priority || (ks.priority == ck.priority && (i & 1) != 0)))) {
        cur = s;
        ck = ks;
      }
      std::int32_t& w = win_[idx(i / 2)];
      if (w == cur && cur != r) break;  // unchanged here, so unchanged above
      w = cur;
    }
  }

  /// The replica with the smallest (time, priority, index); valid when top_time() != kNever.
  std::int32_t top() const { return win_[1]; }
  SimTimeNs top_time() const { return keys_[static_cast<std::size_t>(win_[1])].time; }
  std::int32_t top_priority() const { return keys_[static_cast<std::size_t>(win_[1])].priority; }

 private:
  struct Key {
    SimTimeNs time;
    std::int32_t priority;
  };
  static std::size_t idx(std::int32_t i) { return static_cast<std::size_t>(i); }
  // The winner of nodes a and b (a's replicas all have lower indices than b's).
  std::int32_t winner(std::int32_t a, std::int32_t b) const {
    const std::int32_t ra = win_[idx(a)];
    const std::int32_t rb = win_[idx(b)];
    const Key& ka = keys_[static_cast<std::size_t>(ra)];
    const Key& kb = keys_[static_cast<std::size_t>(rb)];
    if (kb.time < ka.time || (kb.time == ka.time && kb.priority < ka.priority)) return rb;
    return ra;
  }

  std::int32_t n_;
  std::int32_t leaves_ = 1;
  std::vector<Key> keys_;          // by replica (padding included)
  std::vector<std::int32_t> win_;  // by node, 1-based; [0] unused
};

}  // namespace kvsim
