#pragma once
// DpLockstep: the forward barrier of vLLM v0.20.1's data-parallel ranks of an MoE model
// (router vllm_dp with moe, spec cluster-routing.md §3.2; sim/engine/forward_barrier.h).
//
// Model (stated; the NCCL collectives themselves are hardware): forward pass k of every rank runs
// from S_k = max(E_{k-1}, the latest rank's launch of pass k) to E_k = S_k + max over the ranks of
// their own pass's duration (a dummy batch's for a rank with nothing to run). exact (vLLM's code):
// a wave starts when any rank gets work while all are idle, and every other rank then runs dummy
// batches; every 32 passes of a wave the ranks all-reduce whether any still has unfinished
// requests (the flag as each rank's scheduler holds it after the pass's outputs) and the wave
// ends when none has (core.py:1750-1793: `_has_global_unfinished_reqs`, step_counter % 32);
// arrivals between passes join a rank's next iteration. Under async scheduling a rank may launch
// pass k+1 before pass k ends (its batch queue); the 32-pass all-reduce then counts passes, not
// the busy loop's iterations (a model).
//
// Nothing is allocated after construction: at most 2 passes per rank are unresolved.

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "sim/engine/forward_barrier.h"
#include "sim/engine/simulator.h"

namespace kvsim {

class DpLockstep final : public ForwardBarrier {
 public:
  /// The ranks, in order (the barrier calls set_forward_end and kick on them).
  explicit DpLockstep(std::span<Simulator* const> ranks);

  void on_launch(std::int32_t rank, SimTimeNs ready_ns, SimTimeNs duration_ns) override;
  void on_forward_done(std::int32_t rank, bool unfinished) override;
  bool wave_running() const override { return running_; }

  /// The ranks whose next event the barrier changed since the last call (a forward end set, a
  /// kick), each once; the caller re-keys them.
  std::span<const std::int32_t> take_touched();

  std::int64_t waves() const { return waves_; }
  std::int64_t forwards() const { return forwards_; }
  /// Rank r's time spent waiting at the barrier: sum over its passes of E_k - S_k - its own
  /// duration.
  SimTimeNs wait_ns(std::int32_t r) const { return wait_ns_[static_cast<std::size_t>(r)]; }

 private:
  static constexpr std::int32_t kWindow = 4;  // unresolved passes (a ring)
  static constexpr std::int64_t kAllReduceEvery = 32;
  struct Pass {
    std::int64_t index = -1;  // the pass of the wave this record holds
    std::int32_t launched = 0;
    std::int32_t done = 0;
    bool any_unfinished = false;
    SimTimeNs ready_ns = 0;
    SimTimeNs max_duration_ns = 0;
  };
  Pass& pass(std::int64_t k) { return passes_[static_cast<std::size_t>(k % kWindow)]; }
  void touch(std::int32_t r);
  void resolve_ready();

  std::vector<Simulator*> ranks_;
  std::vector<std::int64_t> launched_;  // per rank: passes launched in this wave
  std::vector<std::int64_t> done_;      // per rank: passes ended in this wave
  std::vector<std::array<SimTimeNs, kWindow>> own_;  // per rank: its passes' own durations
  std::vector<SimTimeNs> wait_ns_;
  std::array<Pass, kWindow> passes_{};
  std::int64_t resolved_ = 0;  // passes of this wave whose end is set
  SimTimeNs last_end_ns_ = 0;  // E of the last resolved pass
  bool running_ = false;
  std::int64_t waves_ = 0;
  std::int64_t forwards_ = 0;
  std::vector<std::int32_t> touched_, scratch_;
  std::vector<char> is_touched_;
};

}  // namespace kvsim
