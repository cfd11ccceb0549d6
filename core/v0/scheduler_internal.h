#pragma once
// The scheduler's per-call scratch structures (vLLM's SchedulingBudget and the partial outputs of
// _schedule_prefills/_running/_swapped). Private to core/v0's scheduler sources.

#include <algorithm>
#include <cstdint>
#include <string>
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

/// _get_num_new_tokens (spec §5): the group's sequences with `status`, a DECODE one counting 1, a
/// PREFILL one its uncomputed tokens less those cached beyond the computed ones (caching:
/// `cached_of(seq)`, get_num_cached_tokens); at least one uncached token; with chunking, a
/// one-sequence group's share capped by the remaining budget (floored to whole blocks when
/// caching).
template <class CachedOf>
void Scheduler::count_new_tokens(const SequenceGroup& g, SeqStatus status, bool enable_chunking,
                                 const Budget& budget, CachedOf&& cached_of, std::int64_t& uncached,
                                 std::int64_t& cached) const {
  uncached = 0;
  cached = 0;
  std::int64_t num_seqs = 0;
  for (const Sequence* q : g.seqs()) {
    if (q->status != status) continue;
    ++num_seqs;
    if (!q->is_prefill()) {
      uncached += 1;
      continue;
    }
    const std::int64_t computed = q->num_computed_tokens();
    const std::int64_t all_new = q->get_len() - computed;
    if (!config_.enable_prefix_caching) {
      uncached += all_new;
      continue;
    }
    const std::int64_t num_cached = cached_of(*q);
    if (num_cached < computed)
      vllm_assert(
          q->is_prefill() && q->status == SeqStatus::kRunning && config_.enable_chunked_prefill,
          "Number of cached tokens should not be less than the number of computed tokens");
    const std::int64_t cached_seq = std::max<std::int64_t>(0, num_cached - computed);
    uncached += all_new - cached_seq;
    cached += cached_seq;
  }
  if (uncached == 0 && cached > 0) {
    uncached = 1;
    cached -= 1;
  }
  if (enable_chunking && num_seqs == 1) {
    std::int64_t remaining = budget.remaining_token_budget();
    if (config_.enable_prefix_caching) {
      const std::int64_t bs = config_.block_size;
      if (budget.token_budget % bs != 0)
        raise("ValueError",
              "When enabling chunked prefill and prefix caching, max_num_batched_tokens (chunk "
              "size) must be dividable by block size, but got chunk_size (" +
                  std::to_string(budget.token_budget) + ") % block_size (" + std::to_string(bs) +
                  ") = " + std::to_string(budget.token_budget % bs));
      // Python's floor division (the remaining budget is never negative here).
      remaining = remaining >= 0 ? remaining / bs * bs : -((-remaining + bs - 1) / bs) * bs;
    }
    uncached = std::min(uncached, remaining);
  }
}

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
