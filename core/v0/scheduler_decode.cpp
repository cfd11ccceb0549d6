// Fast-forward of pure decode steps for the V0 scheduler (core/engine_api.h: decode_horizon,
// advance_decode): k engine steps of the running batch at once, with the state k schedule() /
// update_from_output() pairs leave.
//
// In such a step (default or chunked-prefill policy, FCFS, nothing swapped) every running group
// is one DECODE sequence: _schedule_prefills looks at the waiting head and leaves it (or finds no
// one), _schedule_running appends one slot to each table in running order, the metadata pass
// records the access time and the cached prefix of each, the touched blocks become computed, and
// the update appends each sequence's next output. Only a few appends per block do something a
// later step can see: the one that needs a new block (allocation: free list or eviction) and,
// with prefix caching, the one that fills a block (its content hash, promotion or
// deduplication). Those are replayed here in (step, running position) order on the table as that
// step finds it, so ids, hashes and evictions come out as the step loop's; the slots in between
// are appended with the next replayed append (same block, nothing allocated or promoted) or at
// the end. The last step's metadata pass is done on the final state; the earlier ones are
// overwritten by it (access time, cached prefix) or repeat what the replayed appends did (the
// hashes of filled blocks). The clock ticks once per step, as the engine's schedule() ticks it.

#include <algorithm>

#include "core/common/assert.h"
#include "core/v0/scheduler.h"
#include "core/v0/scheduler_internal.h"

namespace kvsim::v0 {

std::int64_t Scheduler::steps_to_stop(const SequenceGroup& g, std::int64_t max_steps) const {
  const Sequence& q = *g.first_seq();
  const Request& r = *g.request;
  const SamplingParams& p = g.params;
  const std::int64_t len = q.get_len();
  const std::int64_t out = q.output_len();
  const std::int64_t mml = config_.max_model_len;
  if ((p.ignore_eos || !q.eos_token_id) && p.stop_token_ids.empty() && p.min_tokens == 0) {
    // Only the lengths: step j leaves len + j tokens (stop past max_model_len) and out + j
    // outputs (stop at exactly max_tokens).
    std::int64_t j = mml - len + 1;
    if (p.max_tokens - out >= 1) j = std::min(j, p.max_tokens - out);
    return std::min(std::max<std::int64_t>(j, 1), max_steps + 1);
  }
  const auto planned = static_cast<std::int64_t>(r.planned_outputs.size());
  const std::int64_t o0 = r.num_output_tokens();
  for (std::int64_t j = 1; j <= max_steps; ++j) {
    const std::int64_t i = o0 + j - 1;  // the output step j appends (Request::next_sampled_token)
    const Token last =
        i < planned ? r.planned_outputs[static_cast<std::size_t>(i)] : r.sampled_token;
    if (stop_verdict(p, q.eos_token_id, len + j, out + j, last, mml).status != SeqStatus::kRunning)
      return j;
  }
  return max_steps + 1;
}

std::int64_t Scheduler::next_decode_event(const Sequence& seq) const {
  const std::int64_t bs = config_.block_size;
  const std::int64_t full = bm_.num_full_slots(seq);
  // The table's end: the slot there needs a new block (ensure_num_empty_slots).
  std::int64_t next = std::max(full, static_cast<std::int64_t>(bm_.block_table(seq).size()) * bs);
  // The last slot of the partial block: it fills (content hash, promotion).
  if (config_.enable_prefix_caching) next = std::min(next, full + (bs - 1 - full % bs));
  return next;
}

namespace {

/// Blocks a table of `full` filled slots and `cap` slots allocates in steps 1 .. j (step j
/// appends slot full + j - 1; each slot from cap on that starts a block needs one).
std::int64_t allocs_through(std::int64_t full, std::int64_t cap, std::int64_t bs, std::int64_t j) {
  const std::int64_t last = full + j - 1;
  return last < cap ? 0 : (last - cap) / bs + 1;
}

}  // namespace

std::int64_t Scheduler::steps_head_stays_later(std::int64_t threshold,
                                               std::int64_t max_steps) const {
  // The default policy looks at the head before step j's appends, the chunked one after them.
  const std::int64_t lag = config_.enable_chunked_prefill ? 0 : 1;
  const std::int64_t bs = config_.block_size;
  const std::int64_t free0 = bm_.num_free_gpu_blocks();
  if (!config_.enable_prefix_caching) {
    // The free count only falls (nothing frees a block in the run): LATER at step 1 is LATER
    // throughout.
    std::int64_t allocs = 0;
    if (lag == 0)
      for (const SequenceGroup* g : running_) {
        const Sequence& q = *g->first_seq();
        allocs += allocs_through(bm_.num_full_slots(q),
                                 static_cast<std::int64_t>(bm_.block_table(q).size()) * bs, bs, 1);
      }
    return free0 - allocs < threshold ? max_steps : 0;
  }
  // Caching: a promoted block may equal a cached one and free its own id (deduplication), so
  // each fill counts as a possible +1 (the bound is exact when none deduplicates).
  std::vector<std::int64_t>& delta = horizon_free_delta_;
  delta.assign(static_cast<std::size_t>(max_steps) + 1, 0);
  const std::int64_t last_step = max_steps - lag;  // the last step whose appends matter
  for (const SequenceGroup* g : running_) {
    const Sequence& q = *g->first_seq();
    const std::int64_t full = bm_.num_full_slots(q);
    const std::int64_t cap = static_cast<std::int64_t>(bm_.block_table(q).size()) * bs;
    for (std::int64_t j = cap - full + 1; j <= last_step; j += bs)
      --delta[static_cast<std::size_t>(j)];
    for (std::int64_t j = bs - full % bs; j <= last_step; j += bs)
      ++delta[static_cast<std::size_t>(j)];
  }
  std::int64_t change = 0;
  for (std::int64_t j = 1; j <= max_steps; ++j) {
    if (j - lag >= 1) change += delta[static_cast<std::size_t>(j - lag)];
    if (free0 + change >= threshold) return j - 1;
  }
  return max_steps;
}

std::int64_t Scheduler::decode_horizon(std::int64_t max_steps) const {
  // Not: the priority policy (it re-sorts and may preempt each step), a delay gate with requests
  // waiting, anything swapped (swap-ins), groups of several sequences or still to fork.
  if (max_steps < 1 || running_.empty() || !swapped_.empty() ||
      config_.policy == SchedulingPolicy::kPriority ||
      (config_.delay_factor > 0 && !waiting_.empty()))
    return 0;
  const bool chunked = config_.enable_chunked_prefill;
  const bool caching = config_.enable_prefix_caching;
  const std::int64_t bs = config_.block_size;
  const std::int64_t max_tokens = config_.max_num_batched_tokens;
  const auto n = static_cast<std::int64_t>(running_.size());
  if (n > config_.max_num_seqs) return 0;
  // Every running group gets its token: the default policy adds them unchecked (its step asserts
  // the total), the chunked one caps each by the remaining budget (in whole blocks when caching).
  if (chunked) {
    if (caching && max_tokens % bs != 0) return 0;  // the step raises
    if (max_tokens - (n - 1) < (caching ? bs : 1)) return 0;
  } else if (n > max_tokens) {
    return 0;
  }
  std::int64_t k = max_steps;
  for (const SequenceGroup* g : running_) {
    if (!g->is_single_seq() || !g->pending_forks.empty() || g->request == nullptr ||
        g->get_max_num_running_seqs() != 1)
      return 0;
    const Sequence& q = *g->first_seq();
    if (q.status != SeqStatus::kRunning || q.is_prefill() || q.request() != g->request ||
        !bm_.has_table(q) || g->request->num_scheduled_tokens != 0)
      return 0;
    const std::int64_t len = q.get_len();
    if (q.num_computed_tokens() != len - 1 || bm_.num_full_slots(q) != len - 1) return 0;
    // No step of the run finishes it (the one that does runs on its own).
    k = std::min(k, steps_to_stop(*g, k) - 1);
    if (k <= 0) return 0;
  }
  // No append preempts: each needs one free block (get_num_blocks_touched_by_append_slots of one
  // token is 1) and the free count falls by at most one per allocation before it. The binding
  // turn is the run's last; fits() does not grow with the steps.
  const std::int64_t free0 = bm_.num_free_gpu_blocks();
  const SequenceGroup& last_group = *running_.back();
  const auto fits = [&](std::int64_t steps) {
    std::int64_t allocs = 0;
    for (const SequenceGroup* g : running_) {
      const Sequence& q = *g->first_seq();
      allocs +=
          allocs_through(bm_.num_full_slots(q),
                         static_cast<std::int64_t>(bm_.block_table(q).size()) * bs, bs, steps);
    }
    const Sequence& q = *last_group.first_seq();
    const std::int64_t slot = bm_.num_full_slots(q) + steps - 1;
    const std::int64_t cap = static_cast<std::int64_t>(bm_.block_table(q).size()) * bs;
    const bool last_allocates = slot >= cap && (slot - cap) % bs == 0;
    return free0 - allocs + (last_allocates ? 1 : 0) >= 1;
  };
  if (!fits(k)) {
    std::int64_t lo = 0, hi = k;  // fits(lo) (or lo == 0), !fits(hi)
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      (fits(mid) ? lo : hi) = mid;
    }
    k = lo;
    if (k <= 0) return 0;
  }
  if (waiting_.empty()) return k;
  // _schedule_prefills must leave the head where it is. Everything it reads is fixed during the
  // run but can_allocate's free count: the head's tokens and its recorded cached count, the
  // budget after the running groups (default: their seats; chunked: their seats and tokens).
  const SequenceGroup& head = *waiting_.front();
  if (head.num_seqs(SeqStatus::kWaiting) != 1) return 0;
  const Sequence& hs = *head.first_with(SeqStatus::kWaiting);
  Budget budget{max_tokens, config_.max_num_seqs, 0};
  budget.num_curr_seqs = n;
  budget.num_batched_tokens = chunked ? n : 0;
  bool recorded = true;
  std::int64_t uncached = 0, cached = 0;
  count_new_tokens(
      head, SeqStatus::kWaiting, chunked, budget,
      [&](const Sequence& s) {
        const std::optional<std::int64_t> c = bm_.recorded_cached_tokens(s);
        recorded = recorded && c.has_value();
        return c.value_or(0);
      },
      uncached, cached);
  if (!recorded) return 0;  // the step computes it
  const std::int64_t num_new_tokens = uncached + cached;
  if (!chunked && num_new_tokens != hs.get_len()) return 0;  // the step asserts
  if (num_new_tokens > prompt_limit()) return 0;             // ignored
  const std::int64_t required = (hs.get_len() + bs - 1) / bs;
  if (bm_.num_gpu_blocks() - required < bm_.watermark_blocks()) return 0;  // NEVER: ignored
  const std::int64_t seats = head.get_max_num_running_seqs();
  if (seats == 0) return 0;
  if (budget.num_batched_tokens >= max_tokens || uncached == 0 ||
      !budget.can_schedule(uncached, seats))
    return k;  // the budget keeps it out whatever the pool holds
  return steps_head_stays_later(required + bm_.watermark_blocks(), k);
}

void Scheduler::advance_decode(std::int64_t k, std::span<KVPoolStats> pool_after) {
  // (The caller asked decode_horizon(k) first: not asked again here.)
  KVSIM_ASSERT(k >= 1 && static_cast<std::int64_t>(pool_after.size()) >= k);
  recycle_retired();  // the run's first schedule() recycles what the last update retired
  // The k schedule() calls' clock ticks, budgets and _passed_delay calls (one each: no prompt
  // is scheduled in the run).
  const double first_now = now_ + 1;
  now_ += static_cast<double>(k);
  budget_mark_ += static_cast<std::uint64_t>(k);
  if (prev_prompt_) last_prompt_latency_ = first_now - prev_time_;
  prev_time_ = now_;
  prev_prompt_ = false;

  const std::size_t n = running_.size();
  decode_base_.resize(n);
  decode_seqs_.resize(n);
  decode_due_.reset(k, n);
  for (std::size_t p = 0; p < n; ++p) {
    Sequence& q = *running_[p]->first_seq();
    decode_seqs_[p] = &q;
    decode_base_[p] = bm_.num_full_slots(q);
    // Step j appends slot base + j - 1.
    const std::int64_t step = next_decode_event(q) - decode_base_[p] + 1;
    if (step <= k) decode_due_.due_at(step, p);
  }
  // Step j's append of a sequence: the tokens its schedule() sees (base + j), the table caught
  // up to them; returns the blocks it allocated.
  const auto append_through = [&](std::size_t p, std::int64_t step) {
    Sequence& q = *decode_seqs_[p];
    Request& r = *q.request();
    const std::int64_t len = decode_base_[p] + step;
    if (r.num_tokens() < len) r.append_next_outputs(len - r.num_tokens());
    const std::size_t before = bm_.block_table(q).size();
    bm_.append_slots(q, 0, decode_cows_);
    KVSIM_ASSERT(decode_cows_.empty(), "a fast-forwarded decode append copied a block");
    return static_cast<std::int64_t>(bm_.block_table(q).size() - before);
  };
  const KVPoolStats before = pool_stats();
  // The running tables' blocks (KVPoolStats::num_table_blocks), kept as the appends allocate.
  std::int64_t table_blocks = before.num_table_blocks;
  decode_due_.replay(
      k, before, pool_after,
      [&](std::int64_t step, std::size_t pos) {
        KVSIM_ASSERT(bm_.num_free_gpu_blocks() >= 1, "a fast-forwarded decode step would preempt");
        table_blocks += append_through(pos, step);
        const std::int64_t next = next_decode_event(*decode_seqs_[pos]) - decode_base_[pos] + 1;
        KVSIM_ASSERT(next > step, "a decode append due again in its own step");
        if (next <= k) decode_due_.due_at(next, pos);
      },
      [&](std::int64_t step) {
        if (step < k) bm_.mark_blocks_as_computed();  // the last step's waits for its metadata pass
        KVPoolStats s = gpu_pool_stats();
        s.num_table_blocks = table_blocks;
        return s;
      });
  // The last step's metadata pass, on the tables as its appends left them.
  for (std::size_t p = 0; p < n; ++p) {
    const std::int64_t allocated = append_through(p, k);
    KVSIM_ASSERT(allocated == 0, "a fast-forwarded decode append was not replayed");
    Sequence& q = *decode_seqs_[p];
    bm_.access_all_blocks_in_seq(q, now_);
    bm_.get_num_cached_tokens(q);
  }
  bm_.mark_blocks_as_computed();
  // The k-th update, and what the engine's schedule() / update_from_output() leave.
  for (std::size_t p = 0; p < n; ++p) {
    SequenceGroup& g = *running_[p];
    Sequence& q = *decode_seqs_[p];
    Request& r = *q.request();
    r.append_next_outputs(1);
    g.update_num_computed_tokens(k);
    r.num_computed_tokens = q.num_computed_tokens();
    r.num_scheduled_tokens = 0;
    q.num_table_blocks_seen = static_cast<std::int32_t>(bm_.block_table(q).size());
    g.budget_tokens_mark = g.budget_seqs_mark = budget_mark_;
  }
  finished_ids_.clear();  // the run's first schedule() cleared them
  finished_request_indices_.clear();
  swap_victim_ = nullptr;
}

}  // namespace kvsim::v0
