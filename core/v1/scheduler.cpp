#include "core/v1/scheduler.h"

#include <algorithm>
#include <limits>

#include "core/common/assert.h"

namespace kvsim {

Scheduler::Scheduler(const SchedulerConfig& config, const KVCacheConfig& kv_config, Profile profile,
                     BlockHashTable::BucketHashFn hash_fn)
    : config_(config), profile_(profile), kv_(kv_config, v1_policy(profile), hash_fn) {
  KVSIM_ASSERT(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0);
  KVSIM_ASSERT(config.long_prefill_token_threshold >= 0 && config.num_lookahead_tokens >= 0);
  KVSIM_ASSERT(config.num_lookahead_tokens == 0 || kv_.policy().lookahead_slots,
               "this release has no lookahead slots");
  // At most max_num_seqs requests finish in one step (aborts aside): no growth on the hot path.
  const auto seqs = static_cast<std::size_t>(std::min<std::int64_t>(config.max_num_seqs, 1 << 16));
  finished_ids_.reserve(seqs);
  next_running_.reserve(seqs);
}

void Scheduler::add_request(Request& request) {
  request.status = RequestStatus::kWaiting;
  waiting_.push_back(&request);
}

void Scheduler::preempt_last(SchedulerOutput& out) {
  Request* victim = running_.back();
  running_.pop_back();
  kv_.free(*victim);
  victim->status = RequestStatus::kPreempted;
  victim->num_computed_tokens = 0;
  ++victim->num_preemptions;
  waiting_.push_front(victim);
  out.preempted.push_back(victim);
  ++stats_.num_preemptions;
}

namespace {
// Fills the entry in place: a temporary built field by field and then copied with wide loads
// stalls on store-to-load forwarding, once per scheduled request and step.
void add_scheduled(SchedulerOutput& out, Request& req, std::int64_t num_tokens,
                   std::int64_t num_computed, std::int32_t num_new_blocks,
                   ScheduledRequest::Kind kind) {
  ScheduledRequest& s = out.scheduled.emplace_back();
  s.request = &req;
  s.num_tokens = num_tokens;
  s.num_computed_tokens = num_computed;
  s.num_new_blocks = num_new_blocks;
  s.kind = kind;
}
}  // namespace

void Scheduler::schedule(SchedulerOutput& out) {
  out.scheduled.clear();
  out.preempted.clear();
  out.finished.assign(finished_ids_.begin(), finished_ids_.end());
  finished_ids_.clear();
  out.prefix_queries_tokens = out.prefix_hits_tokens = 0;
  if (scheduled_unconsumed_)  // a schedule() without update(): its counts do not carry over
    for (Request* r : running_) r->num_scheduled_tokens = 0;
  scheduled_unconsumed_ = true;
  const V1Policy& policy = kv_.policy();
  const std::int64_t bs = kv_.block_size();
  const std::int64_t lookahead = config_.num_lookahead_tokens;
  // v0.8.5: a chunk is at most long_prefill_token_threshold tokens (when > 0).
  const std::int64_t max_chunk =
      policy.long_prefill_token_threshold && config_.long_prefill_token_threshold > 0
          ? config_.long_prefill_token_threshold
          : std::numeric_limits<std::int64_t>::max();
  std::int64_t budget = config_.max_num_batched_tokens;

  // 1. Running requests, in priority order; victims come from the back of the list.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Request& req = *running_[i];
    std::int64_t n = std::min({req.num_tokens() - req.num_computed_tokens, max_chunk, budget});
    if (policy.running_chunk_capped_by_max_model_len)
      n = std::min(n, config_.max_model_len - req.num_computed_tokens);
    if (n <= 0) {
      // v0.8.5 skips it (`continue`): all its tokens are scheduled already, awaiting their
      // update. (n < 0 only for a prompt longer than max_model_len, which vLLM refuses.)
      KVSIM_ASSERT(policy.advance_computed_in_schedule, "a running request has nothing to compute");
      ++i;
      continue;
    }
    AllocResult res;
    bool scheduled = true;
    while (true) {
      res = kv_.allocate_slots(req, n, {}, lookahead);
      if (res.status != AllocStatus::kNoFreeBlocks) break;
      const bool self = running_.back() == &req;
      preempt_last(out);
      if (self) {
        scheduled = false;
        break;
      }
    }
    if (!scheduled) break;
    KVSIM_ASSERT(res.ok(), "allocate_slots failed for a running request");
    req.num_scheduled_tokens = n;
    add_scheduled(out, req, n, req.num_computed_tokens, res.num_new_blocks,
                  ScheduledRequest::Kind::kRunning);
    budget -= n;
    ++i;
  }

  // 2. Waiting requests (FCFS), only when nothing was preempted in this step.
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0) {
      if (static_cast<std::int64_t>(running_.size()) >= config_.max_num_seqs) break;
      Request& req = *waiting_.front();
      std::int64_t num_computed = kv_.get_computed_blocks(req, hits_);
      std::int64_t n = req.num_tokens() - num_computed;
      if (n == 0 && !policy.last_block_excluded_from_lookup) {
        // v0.7.2: every block hit: recompute the whole last block (allocate_slots needs
        // block-aligned computed tokens). From v0.8.3 the lookup never hits the last block.
        num_computed -= bs;
        n = bs;
        hits_.pop_back();
      }
      stats_.prefix_queries_tokens += req.num_tokens();
      stats_.prefix_hits_tokens += num_computed;
      out.prefix_queries_tokens += req.num_tokens();
      out.prefix_hits_tokens += num_computed;
      n = std::min({n, max_chunk, budget});
      KVSIM_ASSERT(n > 0, "a waiting request has nothing to compute");
      const AllocResult res = kv_.allocate_slots(req, n, hits_, lookahead);
      if (res.status == AllocStatus::kNoFreeBlocks) break;
      KVSIM_ASSERT(res.ok(), "allocate_slots failed for a waiting request");
      waiting_.pop_front();
      running_.push_back(&req);
      const auto kind = req.status == RequestStatus::kPreempted ? ScheduledRequest::Kind::kResumed
                                                                : ScheduledRequest::Kind::kNew;
      req.status = RequestStatus::kRunning;
      req.num_computed_tokens = num_computed;
      req.num_scheduled_tokens = n;
      add_scheduled(out, req, n, num_computed, res.num_new_blocks, kind);
      budget -= n;
    }
  }

  out.total_num_scheduled_tokens = config_.max_num_batched_tokens - budget;
  out.num_common_prefix_blocks =
      running_.empty() ? 0
                       : kv_.get_num_common_prefix_blocks(
                             *running_.front(), static_cast<std::int64_t>(running_.size()));
  // v0.8.3+: the scheduled tokens count as computed from now on (out keeps the counts before).
  if (policy.advance_computed_in_schedule)
    for (const ScheduledRequest& s : out.scheduled) s.request->num_computed_tokens += s.num_tokens;
  ++stats_.num_steps;
}

bool Scheduler::check_stop(Request& req) {
  if (req.num_tokens() >= config_.max_model_len ||
      req.num_output_tokens() >= req.limits.max_tokens) {
    finish(req, RequestStatus::kFinishedLengthCapped);
    return true;
  }
  const Token last = req.all_token_ids().back();
  if (!req.limits.ignore_eos && req.limits.eos_token_id && last == *req.limits.eos_token_id) {
    finish(req, RequestStatus::kFinishedStopped);
    return true;
  }
  const auto& stops = req.limits.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), last) != stops.end()) {
    req.stop_reason = last;
    finish(req, RequestStatus::kFinishedStopped);
    return true;
  }
  return false;
}

void Scheduler::finish(Request& req, RequestStatus status) {
  req.status = status;
  kv_.free(req);
  kv_.release_request(req);
  finished_ids_.push_back(req.index());
}

void Scheduler::update_from_output(std::vector<RequestOutput>& outputs) {
  scheduled_unconsumed_ = false;
  outputs.clear();
  next_running_.clear();
  const bool advance_in_schedule = kv_.policy().advance_computed_in_schedule;
  for (Request* r : running_) {
    Request& req = *r;
    const std::int64_t n = req.num_scheduled_tokens;
    req.num_scheduled_tokens = 0;
    if (!advance_in_schedule) req.num_computed_tokens += n;
    KVSIM_ASSERT(req.num_computed_tokens <= req.num_tokens());
    if (n > 0 && req.num_computed_tokens == req.num_tokens()) {
      req.append_output_token(req.sampled_token);
      const bool stopped = check_stop(req);
      outputs.push_back({&req, req.sampled_token, stopped});
      if (stopped) continue;
    }
    next_running_.push_back(&req);
  }
  running_.swap(next_running_);
}

bool Scheduler::abort_request(Request& req) {
  if (is_finished(req.status)) return false;
  if (req.status == RequestStatus::kRunning) {
    auto it = std::find(running_.begin(), running_.end(), &req);
    if (it == running_.end()) return false;
    running_.erase(it);
  } else {
    std::size_t i = 0;
    while (i < waiting_.size() && waiting_[i] != &req) ++i;
    if (i == waiting_.size()) return false;
    waiting_.erase_at(i);
  }
  req.num_scheduled_tokens = 0;
  finish(req, RequestStatus::kFinishedAborted);
  return true;
}

std::string Scheduler::find_violation() const {
  std::vector<const Request*> live;
  live.reserve(running_.size() + waiting_.size());
  for (const Request* r : running_) {
    KVSIM_CHECK(r->status == RequestStatus::kRunning, "a running request is not RUNNING");
    live.push_back(r);
  }
  for (const Request* r : waiting_) {
    KVSIM_CHECK(r->status == RequestStatus::kWaiting || r->status == RequestStatus::kPreempted ||
                    r->status == RequestStatus::kRunning,
                "a waiting request has a finished status");
    KVSIM_CHECK(r->blocks.empty(), "a waiting request holds blocks");
    KVSIM_CHECK(r->num_computed_tokens == 0, "a waiting request has computed tokens");
    live.push_back(r);
  }
  std::vector<const Request*> sorted = live;
  std::sort(sorted.begin(), sorted.end());
  KVSIM_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
              "a request is queued twice");
  KVSIM_CHECK(static_cast<std::int64_t>(running_.size()) <= config_.max_num_seqs,
              "more running requests than max_num_seqs");
  return kv_.find_violation(live);
}

std::int64_t Scheduler::cache_only_request(Request& req) {
  const std::int64_t bs = kv_.block_size();
  std::int64_t computed = kv_.get_computed_blocks(req, hits_);
  std::int64_t todo = req.num_tokens() - computed;
  if (todo == 0 && !kv_.policy().last_block_excluded_from_lookup) {
    // v0.7.2's scheduler full-hit rule: recompute the last block
    computed -= bs;
    todo = bs;
    hits_.pop_back();
  }
  AllocResult res = kv_.allocate_slots(req, todo, hits_);
  if (res.status == AllocStatus::kNoFreeBlocks) {
    // Larger than the pool: allocate the longest prefix that fits beside its hits.
    std::int64_t evictable_hits = 0;
    for (BlockId b : hits_)
      if (kv_.pool().block(b).ref_cnt == 0) ++evictable_hits;
    const std::int64_t fit = (kv_.pool().num_free_blocks() - evictable_hits) * bs;
    const std::int64_t part = std::min(todo, fit);
    if (part > 0) res = kv_.allocate_slots(req, part, hits_);
    KVSIM_ASSERT(part <= 0 || res.ok(), "cache_only: partial allocation failed");
  } else {
    KVSIM_ASSERT(res.ok(), "cache_only: allocate_slots failed");
  }
  kv_.free(req);
  kv_.release_request(req);
  return computed;
}

void Scheduler::reserve_request(Request& req, std::int64_t max_total_tokens) {
  const auto max_blocks = static_cast<std::size_t>(
      cdiv(max_total_tokens + config_.num_lookahead_tokens, kv_.block_size()) +
      kv_.num_preallocate_blocks());
  req.blocks.reserve(max_blocks);
  req.block_hashes.reserve(max_blocks);
}

KVPoolStats Scheduler::pool_stats() const {
  const BlockPool& pool = kv_.pool();
  KVPoolStats s;
  s.block_size = kv_.block_size();
  s.num_blocks = pool.num_blocks();
  s.num_free_blocks = pool.num_free_blocks();
  s.usage = kv_.usage();
  s.evictions = pool.stats().evictions;
  s.blocks_allocated = pool.stats().blocks_allocated;
  return s;
}

void Scheduler::cached_blocks(std::vector<BlockId>& out) const {
  const BlockPool& pool = kv_.pool();
  out.clear();
  for (const KVCacheBlock& blk : pool.free_queue())
    if (blk.block_hash != kNoHash) out.push_back(pool.id_of(blk));
  for (std::int32_t b = 0; b < pool.num_blocks(); ++b)
    if (pool.block(BlockId{b}).ref_cnt > 0 && pool.block(BlockId{b}).block_hash != kNoHash)
      out.push_back(BlockId{b});
}

KVBreakdown Scheduler::kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const {
  const BlockPool& pool = kv_.pool();
  const std::int64_t bs = kv_.block_size();
  if (stamp_.size() < static_cast<std::size_t>(pool.num_blocks()))
    stamp_.assign(static_cast<std::size_t>(pool.num_blocks()), 0);
  if (++epoch_ == 0) {  // wrapped: clear the stamps once every 2^32 calls
    std::fill(stamp_.begin(), stamp_.end(), 0);
    epoch_ = 1;
  }
  KVBreakdown b;
  std::int64_t used_blocks = 0, used_hashed = 0;
  const bool caching = pool.enable_caching();
  const BlockId null = pool.null_block();
  if (null != kNoBlock) {  // reserved, counted as used, never filled
    b.internal_fragmentation += bs;
    ++used_blocks;
  }
  // Counts a shared block (ref_cnt > 1: full and computed) once over all tables.
  const auto count_shared = [&](BlockId blk) {
    std::uint32_t& st = stamp_[static_cast<std::size_t>(to_int(blk))];
    if (st == epoch_) return;
    st = epoch_;
    b.token_states += bs;
    ++used_blocks;
    ++used_hashed;
  };
  const bool window = kv_.specialized_manager().skips_blocks();
  for (const Request* r : running_) {
    const auto nb = static_cast<std::int64_t>(r->blocks.size());
    const std::int64_t idx = r->index();
    const std::int64_t fin = idx >= 0 && static_cast<std::size_t>(idx) < final_kv_tokens.size()
                                 ? final_kv_tokens[static_cast<std::size_t>(idx)]
                                 : r->num_tokens();
    if (window) {
      // Sliding window: null entries (positions that left the window) hold nothing, and a hit
      // run may share blocks anywhere in the table: block by block.
      for (std::int64_t k = 0; k < nb; ++k) {
        const BlockId blk = r->blocks[static_cast<std::size_t>(k)];
        if (blk == null) continue;
        if (pool.block(blk).ref_cnt > 1) {
          count_shared(blk);
          continue;
        }
        const std::int64_t c = std::clamp<std::int64_t>(r->num_computed_tokens - k * bs, 0, bs);
        const std::int64_t f = std::clamp<std::int64_t>(fin - k * bs, c, bs);
        b.token_states += c;
        b.reservation += f - c;
        b.internal_fragmentation += bs - f;
        ++used_blocks;
        used_hashed += pool.block(blk).block_hash != kNoHash;
      }
      continue;
    }
    // Shared blocks (ref_cnt > 1) are a prefix of the table, full and computed: count each once.
    std::int64_t ks = 0;
    while (ks < nb && pool.block(r->blocks[static_cast<std::size_t>(ks)]).ref_cnt > 1) {
      count_shared(r->blocks[static_cast<std::size_t>(ks)]);
      ++ks;
    }
    const std::int64_t base = ks * bs;
    const std::int64_t own = (nb - ks) * bs;
    const std::int64_t c = std::clamp<std::int64_t>(r->num_computed_tokens - base, 0, own);
    const std::int64_t f = std::clamp<std::int64_t>(fin - base, c, own);
    b.token_states += c;
    b.reservation += f - c;
    b.internal_fragmentation += own - f;
    used_blocks += nb - ks;
    if (caching)
      used_hashed += std::max<std::int64_t>(0, std::min(r->num_computed_tokens / bs, nb) - ks);
  }
  const std::int64_t num_free = pool.num_free_blocks();
  KVSIM_ASSERT(used_blocks == pool.num_blocks() - num_free,
               "KV breakdown: blocks in running tables disagree with the free count");
  const std::int64_t cached_free_blocks = caching ? pool.num_cached_blocks() - used_hashed : 0;
  b.cached_free = cached_free_blocks * bs;
  b.free = (num_free - cached_free_blocks) * bs;
  b.external_fragmentation = 0;
  return b;
}

}  // namespace kvsim
