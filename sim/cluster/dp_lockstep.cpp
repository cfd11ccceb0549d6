#include "sim/cluster/dp_lockstep.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim {

DpLockstep::DpLockstep(std::span<Simulator* const> ranks)
    : ranks_(ranks.begin(), ranks.end()),
      launched_(ranks.size(), 0),
      done_(ranks.size(), 0),
      own_(ranks.size()),
      wait_ns_(ranks.size(), 0),
      is_touched_(ranks.size(), 0) {
  KVSIM_ASSERT(!ranks_.empty());
  touched_.reserve(ranks_.size());
  scratch_.reserve(ranks_.size());
}

void DpLockstep::touch(std::int32_t r) {
  if (is_touched_[static_cast<std::size_t>(r)]) return;
  is_touched_[static_cast<std::size_t>(r)] = 1;
  touched_.push_back(r);
}

std::span<const std::int32_t> DpLockstep::take_touched() {
  for (const std::int32_t r : touched_) is_touched_[static_cast<std::size_t>(r)] = 0;
  scratch_.swap(touched_);  // valid until the next call
  touched_.clear();
  return scratch_;
}

void DpLockstep::on_launch(std::int32_t rank, SimTimeNs ready_ns, SimTimeNs duration_ns) {
  const auto n = static_cast<std::int32_t>(ranks_.size());
  if (!running_) {
    // A rank got work while all were idle: it starts a wave and wakes the others
    // (DPEngineCoreProc: START_DP_WAVE through the coordinator); they join at once.
    running_ = true;
    ++waves_;
    for (std::int32_t r = 0; r < n; ++r) {
      if (r == rank) continue;
      ranks_[static_cast<std::size_t>(r)]->kick(ready_ns);
      touch(r);
    }
  }
  const std::int64_t k = launched_[static_cast<std::size_t>(rank)]++;
  KVSIM_ASSERT(k < resolved_ + 2 && k >= resolved_, "a rank ran ahead of the barrier");
  Pass& p = pass(k);
  if (p.index != k) p = Pass{k};
  ++p.launched;
  p.ready_ns = std::max(p.ready_ns, ready_ns);
  p.max_duration_ns = std::max(p.max_duration_ns, duration_ns);
  own_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(k % kWindow)] = duration_ns;
  resolve_ready();
}

void DpLockstep::resolve_ready() {
  const auto n = static_cast<std::int32_t>(ranks_.size());
  for (;;) {
    Pass& p = pass(resolved_);
    if (p.index != resolved_ || p.launched < n) return;
    const SimTimeNs start = std::max(last_end_ns_, p.ready_ns);
    const SimTimeNs end = start + p.max_duration_ns;
    const auto slot = static_cast<std::size_t>(resolved_ % kWindow);
    ++resolved_;
    ++forwards_;
    last_end_ns_ = end;
    for (std::int32_t r = 0; r < n; ++r) {
      wait_ns_[static_cast<std::size_t>(r)] += end - start - own_[static_cast<std::size_t>(r)][slot];
      ranks_[static_cast<std::size_t>(r)]->set_forward_end(end);
      touch(r);
    }
  }
}

void DpLockstep::on_forward_done(std::int32_t rank, bool unfinished) {
  const auto n = static_cast<std::int32_t>(ranks_.size());
  const auto r = static_cast<std::size_t>(rank);
  const std::int64_t k = done_[r]++;
  KVSIM_ASSERT(k < resolved_, "a pass ended before the barrier set its end");
  Pass& p = pass(k);
  KVSIM_ASSERT(p.index == k);
  // A rank with a pass still in flight (async scheduling's batch queue) has work left.
  p.any_unfinished |= unfinished || launched_[r] > done_[r];
  if (++p.done < n || (k + 1) % kAllReduceEvery != 0 || p.any_unfinished) return;
  // The all-reduce after pass k found no unfinished request anywhere: the wave ends
  // (core.py:1768-1793); the next work starts a new one, its passes counted from 0.
  running_ = false;
  std::fill(launched_.begin(), launched_.end(), 0);
  std::fill(done_.begin(), done_.end(), 0);
  resolved_ = 0;
  passes_.fill(Pass{});
}

}  // namespace kvsim
