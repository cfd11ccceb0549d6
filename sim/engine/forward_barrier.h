#pragma once
// ForwardBarrier: the forward passes of several engines that meet at a barrier -- vLLM's
// data-parallel ranks of an MoE model (DPEngineCoreProc, vllm/v1/engine/core.py:1731-1793 @
// v0.20.1; shared/spec/cluster-routing.md §3.2). Their expert layers exchange tokens across the
// ranks in every forward pass, so the k-th forward pass of every rank ends together, as late as
// the slowest rank's, and a rank with nothing to run takes part with a dummy batch while any rank
// has work (a "wave").
//
// A Simulator with a barrier (Simulator::set_forward_barrier) launches each forward pass through
// on_launch and does not know when it ends: the barrier sets it (Simulator::set_forward_end)
// once every rank has launched its pass of that index. After each of its steps ends (outputs
// applied), the rank reports whether it still has unfinished requests (on_forward_done): every
// 32 forward passes the ranks all-reduce that flag and the wave stops when none has any.

#include <cstdint>

#include "sim/engine/engine.h"

namespace kvsim {

class ForwardBarrier {
 public:
  virtual ~ForwardBarrier() = default;
  /// Rank `rank` launches its next forward pass at `ready_ns` (its schedule time), `duration_ns`
  /// long on its own (a dummy batch's when it has nothing to run).
  virtual void on_launch(std::int32_t rank, SimTimeNs ready_ns, SimTimeNs duration_ns) = 0;
  /// Rank `rank`'s oldest forward pass has ended and its outputs are applied; `unfinished`:
  /// its scheduler still has unfinished requests.
  virtual void on_forward_done(std::int32_t rank, bool unfinished) = 0;
  /// Whether the ranks are in a wave: an idle rank then runs a dummy batch.
  virtual bool wave_running() const = 0;
};

}  // namespace kvsim
