#pragma once
// The scheduler's per-call scratch structures (vLLM's SchedulingBudget and the partial outputs of
// _schedule_prefills/_running/_swapped). Private to core/v0's scheduler sources.

#include <cstdint>
#include <vector>

#include "core/v0/scheduler.h"

namespace kvsim::v0 {

/// SchedulingBudget. Its request-id sets are marks on the groups (budget_tokens_mark /
/// budget_seqs_mark == this budget's mark <=> the id is in the set).
struct Scheduler::Budget {
  std::int64_t token_budget = 0;
  std::int64_t max_num_seqs = 0;
  std::uint64_t mark = 0;
  std::int64_t num_cached_tokens = 0;
  std::int64_t num_batched_tokens = 0;
  std::int64_t num_curr_seqs = 0;

  bool can_schedule(std::int64_t num_new_tokens, std::int64_t num_new_seqs) const {
    vllm_assert(num_new_tokens >= 0, "assert num_new_tokens >= 0");
    vllm_assert(num_new_seqs != 0, "assert num_new_seqs != 0");
    return num_batched_tokens + num_new_tokens <= token_budget &&
           num_curr_seqs + num_new_seqs <= max_num_seqs;
  }
  std::int64_t remaining_token_budget() const { return token_budget - num_batched_tokens; }
  void add_num_batched_tokens(SequenceGroup& g, std::int64_t n, std::int64_t cached = 0) {
    if (g.budget_tokens_mark == mark) return;
    vllm_assert(cached >= 0, "assert num_cached_tokens >= 0");
    vllm_assert(n >= 0, "assert num_batched_tokens >= 0");
    g.budget_tokens_mark = mark;
    num_batched_tokens += n;
    num_cached_tokens += cached;
  }
  void subtract_num_batched_tokens(SequenceGroup& g, std::int64_t n) {
    if (g.budget_tokens_mark != mark) return;
    g.budget_tokens_mark = 0;
    num_batched_tokens -= n;
  }
  void add_num_seqs(SequenceGroup& g, std::int64_t n) {
    if (g.budget_seqs_mark == mark) return;
    g.budget_seqs_mark = mark;
    num_curr_seqs += n;
  }
  void subtract_num_seqs(SequenceGroup& g, std::int64_t n) {
    if (g.budget_seqs_mark != mark) return;
    g.budget_seqs_mark = 0;
    num_curr_seqs -= n;
  }
};

/// A ScheduledSequenceGroup before schedule()'s metadata pass.
struct GroupChunk {
  SequenceGroup* group;
  std::int64_t chunk;
  std::int64_t cached;
};

struct Scheduler::PrefillOutputs {
  std::vector<GroupChunk> seq_groups;
  std::vector<SequenceGroup*> ignored;
  void clear() {
    seq_groups.clear();
    ignored.clear();
  }
};

struct Scheduler::RunningOutputs {
  std::vector<GroupChunk> decode_seq_groups;
  std::vector<GroupChunk> prefill_seq_groups;
  std::vector<SequenceGroup*> preempted;
  std::vector<SequenceGroup*> swapped_out;
  std::vector<BlockIdPair> blocks_to_swap_out;
  std::vector<BlockIdPair> blocks_to_copy;
  void clear() {
    decode_seq_groups.clear();
    prefill_seq_groups.clear();
    preempted.clear();
    swapped_out.clear();
    blocks_to_swap_out.clear();
    blocks_to_copy.clear();
  }
};

struct Scheduler::SwappedOutputs {
  std::vector<GroupChunk> decode_seq_groups;
  std::vector<GroupChunk> prefill_seq_groups;
  std::vector<BlockIdPair> blocks_to_swap_in;
  std::vector<BlockIdPair> blocks_to_copy;
  std::vector<SequenceGroup*> infeasible;
  void clear() {
    decode_seq_groups.clear();
    prefill_seq_groups.clear();
    blocks_to_swap_in.clear();
    blocks_to_copy.clear();
    infeasible.clear();
  }
};

}  // namespace kvsim::v0
