// Fast-forward of pure decode steps for the V1 scheduler (core/engine_api.h: decode_horizon,
// advance_decode): k steps of the running batch at once, with the state k schedule() /
// update_from_output() pairs leave. Every release, with one KV cache group of full attention
// and no connector; v0.20 on its synchronous loop (its async steps in flight are not taken).
//
// In such a step every running request is scheduled for one token and calls
// allocate_slots(request, 1, {}, lookahead), which returns at once (nothing allocated, cached or
// counted) except at a few token counts per block: when the table needs a block and when a block
// fills (KVCacheManager::next_decode_event; v0.20's loop asks NoOpAllocation first). Those calls
// are replayed here, in (step, running position) order, on the request as it stands at that step --
// its computed tokens and the tokens it holds then -- so blocks, hashes and evictions come out with
// the step loop's ids and order; every other call is skipped. The update then appends each
// request's next planned output; the horizon guarantees that none of them stops it, so the appends
// of the k steps are done at the end.

#include <algorithm>

#include "core/common/assert.h"
#include "core/v1/scheduler.h"

namespace kvsim {

std::int64_t Scheduler::steps_to_stop(const Request& r, std::int64_t max_steps) const {
  const std::int64_t t0 = r.num_tokens();
  const std::int64_t o0 = r.num_output_tokens();
  const SamplingLimits& lim = r.limits;
  if ((lim.ignore_eos || !lim.eos_token_id) && lim.stop_token_ids.empty()) {
    // Only the length limits can stop it: at the first j where one is reached (v0.20: and
    // min_tokens outputs are there).
    std::int64_t j = std::min(config_.max_model_len - t0, lim.max_tokens - o0);
    if (kv_.policy().stop_tokens_before_length) j = std::max(j, lim.min_tokens - o0);
    return std::min(std::max<std::int64_t>(j, 1), max_steps + 1);
  }
  const auto planned = static_cast<std::int64_t>(r.planned_outputs.size());
  for (std::int64_t j = 1; j <= max_steps; ++j) {
    const std::int64_t k = o0 + j - 1;  // the output step j appends (Request::next_sampled_token)
    const Token last =
        k < planned ? r.planned_outputs[static_cast<std::size_t>(k)] : r.sampled_token;
    if (stop_check(r.limits, t0 + j, o0 + j, last).stop) return j;
  }
  return max_steps + 1;
}

const KVGroupTable* Scheduler::decode_table(const Request& r) const {
  return kv_.coordinator() != nullptr ? &r.kv_groups[0] : nullptr;
}

std::int64_t Scheduler::next_decode_candidate(const Request& r) const {
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  if (kv_.coordinator() == nullptr) return kv_.next_decode_event(r, lookahead);
  // v0.20's running loop calls the allocator when NoOpAllocation::fits fails: when the table
  // cannot hold min(c + 1 + lookahead, max_model_len) slots, or (caching) c + 1 reaches the
  // block after the cached ones. A candidate, tested again with fits() when reached.
  const KVGroupTable& t = r.kv_groups[0];
  const std::int64_t bs = kv_.block_size();
  const std::int64_t c = r.num_computed_tokens;
  std::int64_t next = std::max(c, static_cast<std::int64_t>(t.blocks.size()) * bs - lookahead);
  if (kv_.config().enable_caching)
    next = std::min(next, std::max(c, (t.num_cached_block + 1) * bs - 1));
  return next;
}

std::int64_t Scheduler::decode_horizon(std::int64_t max_steps) const {
  // Not: anything that moves blocks outside the decode path of allocate_slots step by step (a
  // window, several KV cache groups, a connector), v0.20's async steps in flight.
  const bool v020 = kv_.policy().outputs_in_scheduling_order;
  if (connector_ != nullptr || scheduled_unconsumed_) return 0;
  if (v020) {
    if (config_.async_scheduling || inflight_count_ != 0 || !kv_.no_op_allocation().enabled)
      return 0;
  } else if (kv_.coordinator() != nullptr || kv_.specialized_manager().skips_blocks()) {
    return 0;
  }
  const std::int64_t max_budget = v020 && config_.max_num_scheduled_tokens > 0
                                      ? config_.max_num_scheduled_tokens
                                      : config_.max_num_batched_tokens;
  const auto num_running = static_cast<std::int64_t>(running_.size());
  if (num_running == 0 || num_running > max_budget) return 0;
  // The waiting loop must look at nothing: no request waits, or the seats or the budget are
  // taken by the running batch (its loop then breaks before any lookup).
  if (!waiting_.empty() && num_running < config_.max_num_seqs && num_running < max_budget) return 0;
  const std::int64_t bs = kv_.block_size();
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  const std::int64_t table_tokens = kv_.max_num_blocks_per_req() * bs;
  std::int64_t k = max_steps;
  for (const Request* r : running_) {
    if (r->status != RequestStatus::kRunning || r->num_scheduled_tokens != 0 ||
        r->num_output_tokens() == 0 || r->num_computed_tokens != r->num_tokens() - 1 ||
        r->num_output_placeholders != 0)
      return 0;
    // The table never reaches the per-request maximum (allocate_slots' kBeyondMaxBlocks).
    k = std::min(k, table_tokens - lookahead - r->num_computed_tokens);
    // No step of the run finishes the request (the one that does runs on its own).
    k = std::min(k, steps_to_stop(*r, k) - 1);
    if (k <= 0) return 0;
  }
  // No allocation fails: each request allocates at most the blocks its k tokens need, plus the
  // preallocation once per allocation, out of the free blocks at the start.
  const std::int64_t per_block = 1 + kv_.num_preallocate_blocks();
  const std::int64_t free_blocks = kv_.pool().num_free_blocks();
  const auto blocks_needed = [&](std::int64_t steps) {
    std::int64_t total = 0;
    for (const Request* r : running_) {
      const KVGroupTable* t = decode_table(*r);
      const auto table = static_cast<std::int64_t>(t ? t->blocks.size() : r->blocks.size());
      total += std::max<std::int64_t>(
          0, (r->num_computed_tokens + steps + lookahead + bs - 1) / bs - table);
    }
    return total * per_block;
  };
  if (blocks_needed(k) <= free_blocks) return k;
  std::int64_t lo = 0, hi = k;  // blocks_needed(lo) fits, blocks_needed(hi) does not
  while (hi - lo > 1) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (blocks_needed(mid) <= free_blocks ? lo : hi) = mid;
  }
  return lo;
}

void Scheduler::advance_decode(std::int64_t k, std::span<KVPoolStats> pool_after) {
  // (The caller asked decode_horizon(k) first: not asked again here.)
  KVSIM_ASSERT(k >= 1 && static_cast<std::int64_t>(pool_after.size()) >= k);
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  const KVCacheManager::NoOpAllocation no_op = kv_.no_op_allocation();
  const std::size_t n = running_.size();
  decode_base_.resize(n);
  decode_due_.reset(k, n);
  for (std::size_t p = 0; p < n; ++p) {
    const Request& r = *running_[p];
    decode_base_[p] = r.num_computed_tokens;
    // The step whose allocate_slots sees num_computed_tokens c is step c - base + 1.
    const std::int64_t step = next_decode_candidate(r) - r.num_computed_tokens + 1;
    if (step <= k) decode_due_.due_at(step, p);
  }
  // Each step's calls in running order (a later step's are listed while these run).
  decode_due_.replay(
      k, pool_stats(), pool_after,
      [&](std::int64_t step, std::size_t pos) {
        Request& r = *running_[pos];
        // The request as the step finds it: step - 1 tokens computed and appended since the
        // start.
        const std::int64_t computed = decode_base_[pos] + step - 1;
        r.num_computed_tokens = computed;
        if (r.num_tokens() < computed + 1) r.append_next_outputs(computed + 1 - r.num_tokens());
        if (const KVGroupTable* t = decode_table(r)) {
          // v0.20's running loop: the allocator only when NoOpAllocation says it does something.
          const std::int64_t end = computed + 1;
          if (!no_op.fits(*t, end, std::min(end + lookahead, config_.max_model_len), r.num_tokens(),
                          false)) {
            const AllocStatus st = kv_.coordinator()->allocate_slots_running(r, 1, lookahead);
            KVSIM_ASSERT(st == AllocStatus::kOk, "a fast-forwarded decode step failed to allocate");
          }
        } else {
          const AllocResult res = kv_.allocate_slots(r, 1, {}, lookahead);
          KVSIM_ASSERT(res.ok(), "a fast-forwarded decode step failed to allocate");
        }
        r.num_computed_tokens = computed + 1;  // after the step
        const std::int64_t next = next_decode_candidate(r) - decode_base_[pos] + 1;
        KVSIM_ASSERT(next > step, "a decode allocation due again in its own step");
        if (next <= k) decode_due_.due_at(next, pos);
      },
      [&](std::int64_t) { return pool_stats(); });  // after the step's allocations
  for (std::size_t p = 0; p < n; ++p) {
    Request& r = *running_[p];
    r.num_computed_tokens = decode_base_[p] + k;
    r.append_next_outputs(r.num_computed_tokens + 1 - r.num_tokens());
  }
  finished_ids_.clear();  // the run's first schedule() listed them
  stats_.num_steps += k;
  if (!inflight_.empty())  // v0.20: each step went through the ring (its slot is unobservable)
    inflight_head_ = (inflight_head_ + static_cast<std::size_t>(k)) % inflight_.size();
  step_error_ = "";
}

}  // namespace kvsim
