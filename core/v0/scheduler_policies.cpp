// Scheduler policies: _schedule_default, _schedule_chunked_prefill, _schedule_running,
// _schedule_swapped, _schedule_prefills, _schedule_priority_preemption and the token counting of
// vllm/core/scheduler.py (spec §5), transcribed in vLLM's order of operations.

#include <algorithm>

#include "core/common/assert.h"
#include "core/v0/scheduler.h"
#include "core/v0/scheduler_internal.h"

namespace kvsim::v0 {

namespace {
using Source = ScheduledSeqGroup::Source;

void emit(SchedulerOutputs& out, const std::vector<GroupChunk>& groups, Source source) {
  for (const GroupChunk& c : groups) {
    ScheduledSeqGroup& s = out.scheduled.emplace_back();
    s.group = c.group;
    s.token_chunk_size = c.chunk;
    s.num_cached_tokens = c.cached;
    s.source = source;
  }
}

void push_groups(RingDeque<SequenceGroup*>& q, const std::vector<GroupChunk>& groups) {
  for (const GroupChunk& c : groups) q.push_back(c.group);
}

bool priority_less(const SequenceGroup* a, const SequenceGroup* b) {
  if (a->priority != b->priority) return a->priority < b->priority;
  return a->arrival_time < b->arrival_time;
}
}  // namespace

std::int64_t Scheduler::prompt_limit() const {
  if (config_.enable_chunked_prefill) return config_.max_model_len;
  return std::min(config_.max_model_len, config_.max_num_batched_tokens);
}

bool Scheduler::passed_delay(double now) {
  if (prev_prompt_) last_prompt_latency_ = now - prev_time_;
  prev_time_ = now;
  prev_prompt_ = false;
  if (config_.delay_factor > 0 && !waiting_.empty()) {
    double earliest = waiting_.front()->arrival_time;
    for (const SequenceGroup* g : waiting_) earliest = std::min(earliest, g->arrival_time);
    return (now - earliest) > (config_.delay_factor * last_prompt_latency_) || running_.empty();
  }
  return true;
}

void Scheduler::get_num_new_tokens(SequenceGroup& g, SeqStatus status, bool enable_chunking,
                                   const Budget& budget, std::int64_t& uncached,
                                   std::int64_t& cached) {
  count_new_tokens(
      g, status, enable_chunking, budget,
      [&](const Sequence& q) { return bm_.get_num_cached_tokens(q); }, uncached, cached);
}

// ---- queues ---------------------------------------------------------------------------------

void Scheduler::schedule_running(Budget& budget, bool enable_chunking, RunningOutputs& ret) {
  ret.clear();
  while (!running_.empty()) {
    SequenceGroup& g = *running_.front();
    std::int64_t num_running_tokens, unused;
    get_num_new_tokens(g, SeqStatus::kRunning, enable_chunking, budget, num_running_tokens, unused);
    if (num_running_tokens == 0) break;
    running_.pop_front();
    bool scheduled = true;
    while (!bm_.can_append_slots(g, 0)) {
      budget.subtract_num_batched_tokens(g, num_running_tokens);
      budget.subtract_num_seqs(g, g.get_max_num_running_seqs());
      SequenceGroup* victim;
      bool cont = true;
      if (!running_.empty()) {
        victim = running_.back();
        running_.pop_back();
      } else {
        victim = &g;
        cont = false;
      }
      if (preempt(*victim, ret.blocks_to_swap_out) == PreemptionMode::kRecompute)
        ret.preempted.push_back(victim);
      else
        ret.swapped_out.push_back(victim);
      if (!cont) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) continue;
    append_slots(g, ret.blocks_to_copy);
    if (g.is_prefill())
      ret.prefill_seq_groups.push_back({&g, num_running_tokens, 0});
    else
      ret.decode_seq_groups.push_back({&g, 1, 0});
    budget.add_num_batched_tokens(g, num_running_tokens);
    if (enable_chunking) budget.add_num_seqs(g, g.get_max_num_running_seqs());
  }
}

void Scheduler::schedule_swapped(Budget& budget, bool enable_chunking, SwappedOutputs& ret) {
  ret.clear();
  while (!swapped_.empty()) {
    SequenceGroup& g = *swapped_.front();
    const AllocStatus status = bm_.can_swap_in(g, 0);
    if (status == AllocStatus::kLater) break;
    if (status == AllocStatus::kNever) {
      for (Sequence* q : g.seqs()) q->status = SeqStatus::kFinishedIgnored;
      ret.infeasible.push_back(&g);
      swapped_.pop_front();
      continue;
    }
    const std::int64_t num_new_seqs = g.get_max_num_running_seqs();
    std::int64_t uncached, cached;
    get_num_new_tokens(g, SeqStatus::kSwapped, enable_chunking, budget, uncached, cached);
    if (uncached == 0 || !budget.can_schedule(uncached, num_new_seqs)) break;
    swapped_.pop_front();
    swap_in(g, ret.blocks_to_swap_in);
    append_slots(g, ret.blocks_to_copy);
    if (g.is_prefill())
      ret.prefill_seq_groups.push_back({&g, uncached + cached, cached});
    else
      ret.decode_seq_groups.push_back({&g, 1, 0});
    budget.add_num_batched_tokens(g, uncached, cached);
    budget.add_num_seqs(g, num_new_seqs);
  }
}

void Scheduler::schedule_prefills(Budget& budget, bool enable_chunking, PrefillOutputs& ret) {
  ret.clear();
  while (passed_delay(now_) && !waiting_.empty()) {
    SequenceGroup& g = *waiting_.front();
    vllm_assert(g.num_seqs(SeqStatus::kWaiting) == 1,
                "Waiting sequence group should have only one prompt sequence.");
    const Sequence& seq = *g.first_with(SeqStatus::kWaiting);
    std::int64_t uncached, cached;
    get_num_new_tokens(g, SeqStatus::kWaiting, enable_chunking, budget, uncached, cached);
    const std::int64_t num_new_tokens = uncached + cached;
    if (!enable_chunking)
      vllm_assert(num_new_tokens == seq.get_len(), "assert num_new_tokens == num_prompt_tokens");
    bool ignore = num_new_tokens > prompt_limit();
    if (!ignore) {
      const AllocStatus can = bm_.can_allocate(g, 0);
      if (can == AllocStatus::kLater) break;
      ignore = can == AllocStatus::kNever;
    }
    if (ignore) {
      for (Sequence* q : g.seqs())
        if (q->status == SeqStatus::kWaiting) q->status = SeqStatus::kFinishedIgnored;
      ret.ignored.push_back(&g);
      waiting_.pop_front();
      continue;
    }
    if (budget.num_batched_tokens >= config_.max_num_batched_tokens) break;
    const std::int64_t num_new_seqs = g.get_max_num_running_seqs();
    if (uncached == 0 || !budget.can_schedule(uncached, num_new_seqs)) break;
    waiting_.pop_front();
    allocate_and_set_running(g);
    ret.seq_groups.push_back({&g, num_new_tokens, cached});
    budget.add_num_batched_tokens(g, uncached, cached);
    budget.add_num_seqs(g, num_new_seqs);
  }
  if (!ret.seq_groups.empty()) prev_prompt_ = true;
}

void Scheduler::schedule_priority_preemption(Budget& budget) {
  scratch_groups_.clear();
  for (SequenceGroup* g : running_) scratch_groups_.push_back(g);
  std::stable_sort(scratch_groups_.begin(), scratch_groups_.end(), priority_less);
  running_.clear();
  for (SequenceGroup* g : scratch_groups_) running_.push_back(g);
  std::vector<BlockIdPair>& discarded = running_out_->blocks_to_swap_out;  // vLLM drops these
  discarded.clear();
  if (!waiting_.empty()) {
    SequenceGroup& g = *waiting_.front();
    waiting_.pop_front();
    const std::int64_t num_new_seqs = g.get_max_num_running_seqs();
    std::int64_t uncached, unused;
    get_num_new_tokens(g, SeqStatus::kWaiting, false, budget, uncached, unused);
    while (!running_.empty() && priority_less(&g, running_.back())) {
      const AllocStatus can = bm_.can_allocate(g, 0);
      if (uncached > 0 && can == AllocStatus::kOk && budget.can_schedule(uncached, num_new_seqs))
        break;
      SequenceGroup& v = *running_.back();
      running_.pop_back();
      std::int64_t v_uncached, v_unused;
      get_num_new_tokens(v, SeqStatus::kRunning, false, budget, v_uncached, v_unused);
      budget.subtract_num_batched_tokens(v, v_uncached);
      budget.subtract_num_seqs(v, v.get_max_num_running_seqs());
      preempt(v, discarded);
      waiting_.push_front(&v);
    }
    waiting_.push_front(&g);
  }
  scratch_groups_.clear();
  for (SequenceGroup* g : waiting_) scratch_groups_.push_back(g);
  std::stable_sort(scratch_groups_.begin(), scratch_groups_.end(), priority_less);
  waiting_.clear();
  for (SequenceGroup* g : scratch_groups_) waiting_.push_back(g);
}

// ---- the two policies -----------------------------------------------------------------------

/// The parts of SchedulerOutputs both policies fill alike (vLLM builds them the same way at the
/// end of _schedule_default and _schedule_chunked_prefill): tokens, block moves, ignored groups,
/// preemptions.
void Scheduler::finish_outputs(const Budget& budget, const PrefillOutputs& prefills,
                               const RunningOutputs& running, const SwappedOutputs& swapped,
                               SchedulerOutputs& out) {
  out.num_batched_tokens = budget.num_batched_tokens + budget.num_cached_tokens;
  out.blocks_to_swap_in = swapped.blocks_to_swap_in;
  out.blocks_to_swap_out = running.blocks_to_swap_out;
  out.blocks_to_copy = running.blocks_to_copy;
  out.blocks_to_copy.insert(out.blocks_to_copy.end(), swapped.blocks_to_copy.begin(),
                            swapped.blocks_to_copy.end());
  out.ignored = prefills.ignored;
  out.ignored.insert(out.ignored.end(), swapped.infeasible.begin(), swapped.infeasible.end());
  out.preempted = static_cast<std::int64_t>(running.preempted.size() + running.swapped_out.size());
  out.recomputed = running.preempted;
  out.swapped_out = running.swapped_out;
}

void Scheduler::schedule_default(SchedulerOutputs& out) {
  Budget budget{config_.max_num_batched_tokens, config_.max_num_seqs, budget_mark_};
  for (SequenceGroup* g : running_) budget.add_num_seqs(*g, g->get_max_num_running_seqs());
  PrefillOutputs& prefills = *prefills_;
  RunningOutputs& running = *running_out_;
  SwappedOutputs& swapped = *swapped_in_;
  prefills.clear();
  running.clear();
  swapped.clear();
  if (swapped_.empty()) schedule_prefills(budget, false, prefills);
  if (prefills.seq_groups.empty() && config_.policy == SchedulingPolicy::kPriority)
    schedule_priority_preemption(budget);
  if (prefills.seq_groups.empty()) {
    schedule_running(budget, false, running);
    if (running.preempted.empty() && running.swapped_out.empty())
      schedule_swapped(budget, false, swapped);
  }
  vllm_assert(budget.num_batched_tokens <= config_.max_num_batched_tokens,
              "assert budget.num_batched_tokens <= max_num_batched_tokens");
  vllm_assert(budget.num_curr_seqs <= config_.max_num_seqs,
              "assert budget.num_curr_seqs <= max_num_seqs");
  for (SequenceGroup* g : running.preempted) waiting_.push_front(g);  // extendleft
  push_groups(running_, prefills.seq_groups);
  push_groups(running_, running.decode_seq_groups);
  push_groups(running_, swapped.decode_seq_groups);
  for (SequenceGroup* g : running.swapped_out) swapped_.push_back(g);
  vllm_assert(running.prefill_seq_groups.empty(),
              "assert len(running_scheduled.prefill_seq_groups) == 0");
  vllm_assert(swapped.prefill_seq_groups.empty(), "assert len(swapped_in.prefill_seq_groups) == 0");

  out.scheduled.clear();
  emit(out, prefills.seq_groups, Source::kWaiting);
  emit(out, running.decode_seq_groups, Source::kRunning);
  emit(out, swapped.decode_seq_groups, Source::kSwapped);
  out.num_prefill_groups = static_cast<std::int64_t>(prefills.seq_groups.size());
  finish_outputs(budget, prefills, running, swapped, out);
}

void Scheduler::schedule_chunked_prefill(SchedulerOutputs& out) {
  Budget budget{config_.max_num_batched_tokens, config_.max_num_seqs, budget_mark_};
  PrefillOutputs& prefills = *prefills_;
  RunningOutputs& running = *running_out_;
  SwappedOutputs& swapped = *swapped_in_;
  prefills.clear();
  running.clear();
  swapped.clear();
  schedule_running(budget, true, running);
  if (running.preempted.empty() && running.swapped_out.empty())
    schedule_swapped(budget, false, swapped);
  schedule_prefills(budget, true, prefills);
  vllm_assert(budget.num_batched_tokens <= config_.max_num_batched_tokens,
              "assert budget.num_batched_tokens <= max_num_batched_tokens");
  vllm_assert(budget.num_curr_seqs <= config_.max_num_seqs,
              "assert budget.num_curr_seqs <= max_num_seqs");
  for (SequenceGroup* g : running.preempted) waiting_.push_front(g);  // extendleft
  push_groups(running_, swapped.decode_seq_groups);
  push_groups(running_, swapped.prefill_seq_groups);
  push_groups(running_, running.decode_seq_groups);
  push_groups(running_, running.prefill_seq_groups);
  push_groups(running_, prefills.seq_groups);
  for (SequenceGroup* g : running.swapped_out) swapped_.push_back(g);

  out.scheduled.clear();
  emit(out, prefills.seq_groups, Source::kWaiting);
  emit(out, running.prefill_seq_groups, Source::kRunning);
  emit(out, swapped.prefill_seq_groups, Source::kSwapped);
  emit(out, running.decode_seq_groups, Source::kRunning);
  emit(out, swapped.decode_seq_groups, Source::kSwapped);
  out.num_prefill_groups =
      static_cast<std::int64_t>(prefills.seq_groups.size() + swapped.prefill_seq_groups.size() +
                                running.prefill_seq_groups.size());
  finish_outputs(budget, prefills, running, swapped, out);
}

}  // namespace kvsim::v0
