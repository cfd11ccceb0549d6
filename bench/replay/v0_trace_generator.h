#pragma once
// A seeded generator of large vLLM V0 scheduler-mode op traces (shared/spec/ops-format-v0.md)
// for the replay benchmark: a stream of arrivals (shared prompt prefixes), schedule
// + update steps with a token rule, and aborts, over a pool small enough to preempt (recompute by
// default, or swap to a CPU pool large enough never to run out). Every op is valid whatever state
// it meets, so the same file replays in kvsim and in vLLM's own V0 code. The swap trace runs
// without prefix caching: with it, vLLM v0.7.2's evictor pops a stale queue entry of a block
// swapped out twice and asserts (kvsim reproduces that AssertionError at the same op).

#include <cstdint>
#include <string>
#include <vector>

#include "sched_op.h"

namespace kvsim::bench {

struct V0SchedTrace {
  std::int32_t block_size = 16, num_gpu_blocks = 0, num_cpu_blocks = 0;
  std::int64_t max_model_len = 0, max_num_seqs = 0, max_num_batched_tokens = 0;
  bool swap = false;  // preemption_mode "swap", no prefix caching (else recompute, caching)
  std::int64_t rule_mul = 0, rule_add = 0, rule_mod = 0;
  std::string text;          // JSON Lines, sched_init first
  std::vector<SchedOp> ops;  // the same ops after the init
};

/// About `num_ops` ops (a whole number of steps).
V0SchedTrace generate_v0_sched_trace(std::uint64_t seed, std::int64_t num_ops, bool swap);

}  // namespace kvsim::bench
