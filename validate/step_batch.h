#pragma once
// Internal to validate/: one step's batch as the harness sees it (its own copy of the block
// tables and the content keys of every context position) and the host-side shadow of the pool,
// shared by the harness and the planted faults (faults.cpp).

#include <cstdint>
#include <span>
#include <vector>

#include "core/common/request.h"
#include "core/engine_api.h"

namespace kvsim::validate::detail {

/// One scheduled request of the step being processed.
struct SeqWork {
  const Request* request = nullptr;
  std::uint64_t request_id = 0;
  ScheduledRequest::Kind kind = ScheduledRequest::Kind::kRunning;
  std::int64_t computed = 0;            // num_computed_tokens before the step
  std::int64_t num_tokens = 0;          // scheduled this step (query rows)
  std::int64_t context = 0;             // computed + num_tokens
  std::int64_t table_first = 0;         // index of table[0] in the request's block table
  std::vector<std::int32_t> table;      // block ids covering [table_first * bs, context) (faults
                                        // applied); table_first is 0 when the step is checked
  std::span<const std::uint64_t> keys;  // content keys of positions [0, context) (a cache entry)
};

struct StepBatch {
  std::int64_t block_size = 0;
  std::vector<SeqWork> seqs;  // [0, num_seqs): this step's batch (entries reused across steps)
  std::size_t num_seqs = 0;
  std::vector<std::uint64_t> shadow;  // [num_slots] key last written into each slot, 0 = never
  // vLLM V0's block moves of the step, [pairs, 2] flat as the backend takes them (faults applied).
  std::vector<std::int64_t> swap_in;   // (swap block, pool block)
  std::vector<std::int64_t> swap_out;  // (pool block, swap block)
  std::vector<std::int64_t> copies;    // (src, dst) pool blocks

  std::int64_t num_slots() const { return static_cast<std::int64_t>(shadow.size()); }
  /// The pool slot of position `p` of `s` through its (possibly faulted) table.
  /// Precondition: p >= s.table_first * block_size.
  std::int64_t slot_of(const SeqWork& s, std::int64_t p) const {
    return std::int64_t{s.table[static_cast<std::size_t>(p / block_size - s.table_first)]} *
               block_size +
           p % block_size;
  }
};

// Planted faults (FaultInjection in harness.h). Each returns false when this step's batch offers
// no place where the fault changes what some request reads; the harness then tries the next step.

/// A writer's first block in its write range replaced by a full block another request reads.
bool plant_shared_in_use(StepBatch& batch);
/// A request admitted with hits reads its last hit block from a cached block of another prefix.
bool plant_wrong_prefix_hit(StepBatch& batch, const EngineCore& engine);
/// A request's first table entry with one bit of its id flipped (to a written block).
bool plant_corrupt_table(StepBatch& batch);
/// Two full entries of a request's table swapped.
bool plant_permuted_table(StepBatch& batch);
/// A swap-in pair's pool block replaced by a block no move of the step names and no request of
/// the batch reads: the request then reads what its own block held before.
bool plant_wrong_swap_in(StepBatch& batch);
/// A copy-on-write pair's destination replaced likewise.
bool plant_wrong_copy_dst(StepBatch& batch);

}  // namespace kvsim::validate::detail
