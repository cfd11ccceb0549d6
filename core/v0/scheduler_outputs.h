#pragma once
// The results of the V0 scheduler's two calls: SchedulerOutputs of schedule() (vLLM's
// SchedulerOutputs plus what schedule() computes per group: do_sample, computed_block_nums) and
// StepOutputs of the engine step. Reused across calls: vectors keep their capacity.

#include <cstdint>
#include <vector>

#include "core/common/types.h"
#include "core/v0/sequence.h"
#include "core/v0/v0_types.h"

namespace kvsim::v0 {

/// One scheduled group, in vLLM's output order.
struct ScheduledSeqGroup {
  enum class Source : std::uint8_t { kWaiting, kRunning, kSwapped };
  SequenceGroup* group = nullptr;
  std::int64_t token_chunk_size = 0;
  std::int64_t num_cached_tokens = 0;  // prefix-cache hits inside the chunk (admissions)
  Source source = Source::kRunning;    // the queue it was scheduled from
  bool is_prompt = false;
  bool do_sample = true;
  std::uint32_t computed_begin = 0;  // its computed_block_nums: [begin, end) of the flat list
  std::uint32_t computed_end = 0;
};

struct SchedulerOutputs {
  std::vector<ScheduledSeqGroup> scheduled;
  std::int64_t num_prefill_groups = 0;
  std::int64_t num_batched_tokens = 0;          // uncached + cached tokens of the budget
  std::vector<BlockIdPair> blocks_to_swap_in;   // [cpu physical, gpu]
  std::vector<BlockIdPair> blocks_to_swap_out;  // [gpu, cpu physical]
  std::vector<BlockIdPair> blocks_to_copy;      // [src, dst] GPU ids
  std::vector<SequenceGroup*> ignored;          // FINISHED_IGNORED, left the queues
  std::int64_t preempted = 0;                   // vLLM's count (recomputed + swapped out)
  std::vector<SequenceGroup*> recomputed;       // preempted by recompute (now waiting)
  std::vector<SequenceGroup*> swapped_out;      // preempted by swap (now swapped)
  std::vector<BlockId> computed_block_nums;     // flat; see ScheduledSeqGroup
};

/// One appended token of the engine step.
struct SampleOutput {
  SequenceGroup* group = nullptr;
  Sequence* seq = nullptr;
  Sequence* parent = nullptr;  // non-null for a child forked in this step
  Token token = 0;
};

struct StepOutputs {
  std::vector<SampleOutput> outputs;     // per group: each parent's children, then the parent
  std::vector<SequenceGroup*> finished;  // groups finished in this step, in output order
};

}  // namespace kvsim::v0
