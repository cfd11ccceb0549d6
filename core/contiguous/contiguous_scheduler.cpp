#include "core/contiguous/contiguous_scheduler.h"

#include <algorithm>
#include <bit>

#include "core/common/assert.h"

namespace kvsim {

ContiguousPolicy contiguous_policy(Profile p) {
  ContiguousPolicy c;
  switch (p) {
    case Profile::kOrcaMax:
      c.reservation = ContiguousPolicy::Reservation::kMaxModelLen;
      return c;
    case Profile::kOrcaPow2:
      c.reservation = ContiguousPolicy::Reservation::kPow2;
      return c;
    case Profile::kOrcaOracle:
      c.reservation = ContiguousPolicy::Reservation::kOracle;
      return c;
    default:
      break;
  }
  KVSIM_ASSERT(false, "contiguous_policy: not a contiguous profile");
  return c;
}

ContiguousScheduler::ContiguousScheduler(Profile profile, ContiguousPolicy policy,
                                         const SchedulerConfig& config,
                                         const KVCacheConfig& kv_config)
    : profile_(profile),
      policy_(policy),
      config_(config),
      alloc_(make_slot_allocator(
          std::int64_t{kv_config.num_gpu_blocks} * kv_config.block_size, policy.fit,
          static_cast<std::size_t>(std::min<std::int64_t>(config.max_num_seqs, 1 << 16)) + 2)) {
  KVSIM_ASSERT(config.max_num_seqs > 0 && config.max_num_batched_tokens > 0 &&
               config.max_model_len > 0);
  // At most max_num_seqs run (and finish in one step): no growth on the hot path.
  const auto seqs = static_cast<std::size_t>(std::min<std::int64_t>(config.max_num_seqs, 1 << 16));
  running_.reserve(seqs);
  extents_.reserve(seqs);
  next_running_.reserve(seqs);
  next_extents_.reserve(seqs);
  finished_ids_.reserve(seqs);
}

std::int64_t ContiguousScheduler::reservation_slots(std::int64_t final_num_tokens) const {
  const std::int64_t kv_slots = final_num_tokens - 1;  // the last sampled token is never fed
  switch (policy_.reservation) {
    case ContiguousPolicy::Reservation::kMaxModelLen:
      return config_.max_model_len;
    case ContiguousPolicy::Reservation::kPow2:
      return std::min<std::int64_t>(
          static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(kv_slots))),
          config_.max_model_len);
    case ContiguousPolicy::Reservation::kOracle:
      return kv_slots;
  }
  return kv_slots;
}

std::int64_t ContiguousScheduler::reservation_of(const Request& r) const {
  return reservation_slots(r.oracle_final_num_tokens);
}

const char* ContiguousScheduler::admission_error(std::int64_t prompt_tokens,
                                                 std::int64_t final_num_tokens) const {
  if (prompt_tokens < 1 || final_num_tokens <= prompt_tokens)
    return "a request needs a prompt and at least one output token";
  if (final_num_tokens > config_.max_model_len) return "prompt + outputs exceed max_model_len";
  if (prompt_tokens > config_.max_num_batched_tokens)
    return "the prompt is longer than max_num_batched_tokens (a contiguous engine prefills a "
           "whole prompt in one step)";
  const std::int64_t slots = reservation_slots(final_num_tokens);
  if (slots > alloc_->capacity()) return "its reservation is larger than the whole KV pool";
  // Under buddy the region is a power of two, and the pool's largest block is the largest one
  // below its capacity: a rounded-up region that does not fit it does not fit the pool.
  if (alloc_->granted_length(slots) > alloc_->max_allocatable())
    return "its reservation, rounded up to a power of two, is larger than the whole KV pool";
  return nullptr;
}

void ContiguousScheduler::add_request(Request& request) {
  KVSIM_ASSERT(policy_.reservation == ContiguousPolicy::Reservation::kMaxModelLen ||
                   request.oracle_final_num_tokens > request.num_tokens(),
               "a pow2/oracle reservation needs Request::oracle_final_num_tokens");
  KVSIM_ASSERT(admission_error(request.num_tokens(), request.oracle_final_num_tokens > 0
                                                         ? request.oracle_final_num_tokens
                                                         : request.num_tokens() + 1) == nullptr,
               "a request this engine can never admit (check admission_error first)");
  request.status = RequestStatus::kWaiting;
  waiting_.push_back(&request);
}

void ContiguousScheduler::schedule(SchedulerOutput& out) {
  out.begin_step(finished_ids_);
  finished_ids_.clear();
  if (scheduled_unconsumed_)  // a schedule() without update(): its counts do not carry over
    for (Request* r : running_) r->num_scheduled_tokens = 0;
  scheduled_unconsumed_ = true;
  std::int64_t budget = config_.max_num_batched_tokens;

  // 1. Running requests decode (their prompts were prefilled whole at admission).
  for (std::size_t i = 0; i < running_.size(); ++i) {
    Request& req = *running_[i];
    const std::int64_t n = req.num_tokens() - req.num_computed_tokens;
    KVSIM_ASSERT(n > 0, "a running request has nothing to compute");
    if (n > budget) break;
    KVSIM_ASSERT(req.num_computed_tokens + n <= extents_[i].length,
                 "a request outgrew its reservation (a wrong oracle length?)");
    req.num_scheduled_tokens = n;
    out.add_scheduled(req, n, req.num_computed_tokens, 0, ScheduledRequest::Kind::kRunning);
    budget -= n;
  }

  // 2. FCFS admissions: the whole prompt in this step, the whole reservation now.
  while (!waiting_.empty() && static_cast<std::int64_t>(running_.size()) < config_.max_num_seqs) {
    Request& req = *waiting_.front();
    const std::int64_t n = req.num_tokens();
    if (n > budget) break;
    const std::int64_t slots = reservation_of(req);
    const std::optional<std::int64_t> offset = alloc_->allocate(slots);
    if (!offset) break;
    const std::int64_t granted = alloc_->granted_length(slots);
    waiting_.pop_front();
    running_.push_back(&req);
    extents_.push_back({*offset, granted});
    slots_reserved_total_ += granted;
    req.status = RequestStatus::kRunning;
    req.num_computed_tokens = 0;
    req.num_scheduled_tokens = n;
    out.add_scheduled(req, n, 0, 0, ScheduledRequest::Kind::kNew);
    budget -= n;
  }
  out.total_num_scheduled_tokens = config_.max_num_batched_tokens - budget;
}

bool ContiguousScheduler::stops(const Request& req, std::int64_t num_tokens,
                                std::int64_t num_outputs, Token last) const {
  // vLLM's order: the length caps, then EOS, then the stop tokens.
  if (num_tokens >= config_.max_model_len || num_outputs >= req.limits.max_tokens) return true;
  if (!req.limits.ignore_eos && req.limits.eos_token_id && last == *req.limits.eos_token_id)
    return true;
  const auto& stops = req.limits.stop_token_ids;
  return std::find(stops.begin(), stops.end(), last) != stops.end();
}

bool ContiguousScheduler::check_stop(Request& req) {
  const Token last = req.all_token_ids().back();
  if (!stops(req, req.num_tokens(), req.num_output_tokens(), last)) return false;
  if (req.num_tokens() >= config_.max_model_len ||
      req.num_output_tokens() >= req.limits.max_tokens) {
    finish(req, RequestStatus::kFinishedLengthCapped);
    return true;
  }
  const bool eos =
      !req.limits.ignore_eos && req.limits.eos_token_id && last == *req.limits.eos_token_id;
  if (!eos) req.stop_reason = last;
  finish(req, RequestStatus::kFinishedStopped);
  return true;
}

void ContiguousScheduler::finish(Request& req, RequestStatus status) {
  req.status = status;
  finished_ids_.push_back(req.index());
}

void ContiguousScheduler::update_from_output(std::vector<RequestOutput>& outputs) {
  scheduled_unconsumed_ = false;
  outputs.clear();
  next_running_.clear();
  next_extents_.clear();
  for (std::size_t i = 0; i < running_.size(); ++i) {
    Request& req = *running_[i];
    const Extent ext = extents_[i];
    const std::int64_t n = req.num_scheduled_tokens;
    req.num_scheduled_tokens = 0;
    req.num_computed_tokens += n;
    KVSIM_ASSERT(req.num_computed_tokens <= req.num_tokens() &&
                 req.num_computed_tokens <= ext.length);
    if (n > 0 && req.num_computed_tokens == req.num_tokens()) {
      const Token token = req.next_sampled_token();
      req.append_output_token(token);
      const bool stopped = check_stop(req);
      outputs.push_back({&req, token, stopped});
      if (stopped) {
        alloc_->free(ext.offset, ext.length);
        continue;
      }
    }
    next_running_.push_back(&req);
    next_extents_.push_back(ext);
  }
  running_.swap(next_running_);
  extents_.swap(next_extents_);
}

std::int64_t ContiguousScheduler::decode_horizon(std::int64_t max_steps) const {
  const auto n = static_cast<std::int64_t>(running_.size());
  if (scheduled_unconsumed_ || n == 0 || n > config_.max_num_batched_tokens) return 0;
  if (!waiting_.empty() && n < config_.max_num_seqs) {
    const Request& head = *waiting_.front();
    if (head.num_tokens() <= config_.max_num_batched_tokens - n &&
        reservation_of(head) <= alloc_->largest_allocatable())
      return 0;  // the waiting loop would admit it
  }
  std::int64_t k = max_steps;
  for (const Request* r : running_) {
    const std::int64_t t0 = r->num_tokens();
    const std::int64_t o0 = r->num_output_tokens();
    if (r->num_computed_tokens != t0 - 1 || o0 == 0) return 0;
    // No step of the run stops it (the one that does runs on its own): step j appends output
    // o0 + j - 1 and leaves t0 + j tokens.
    const SamplingLimits& lim = r->limits;
    if ((lim.ignore_eos || !lim.eos_token_id) && lim.stop_token_ids.empty()) {
      k = std::min(k, std::min(config_.max_model_len - t0, lim.max_tokens - o0) - 1);
      if (k <= 0) return 0;
      continue;
    }
    const auto planned = static_cast<std::int64_t>(r->planned_outputs.size());
    for (std::int64_t j = 1; j <= k; ++j) {
      const std::int64_t i = o0 + j - 1;
      const Token last =
          i < planned ? r->planned_outputs[static_cast<std::size_t>(i)] : r->sampled_token;
      if (stops(*r, t0 + j, o0 + j, last)) {
        k = j - 1;
        break;
      }
    }
    if (k <= 0) return 0;
  }
  return k;
}

void ContiguousScheduler::advance_decode(std::int64_t k, std::span<KVPoolStats> pool_after) {
  KVSIM_ASSERT(k >= 1 && static_cast<std::int64_t>(pool_after.size()) >= k);
  for (Request* r : running_) {
    r->append_next_outputs(k);
    r->num_computed_tokens = r->num_tokens() - 1;
  }
  const KVPoolStats stats = pool_stats();
  std::fill(pool_after.begin(), pool_after.begin() + k, stats);
  finished_ids_.clear();  // the run's first schedule() listed them
}

bool ContiguousScheduler::abort_request(Request& req) {
  if (is_finished(req.status)) return false;
  if (req.status == RequestStatus::kRunning) {
    const auto it = std::find(running_.begin(), running_.end(), &req);
    if (it == running_.end()) return false;
    const auto i = it - running_.begin();
    const Extent ext = extents_[static_cast<std::size_t>(i)];
    running_.erase(it);
    extents_.erase(extents_.begin() + i);
    alloc_->free(ext.offset, ext.length);
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

std::int64_t ContiguousScheduler::cache_only_request(Request&) { return 0; }

KVPoolStats ContiguousScheduler::pool_stats() const {
  KVPoolStats s;
  s.block_size = 1;
  s.num_blocks = alloc_->capacity();
  s.num_free_blocks = alloc_->num_free_slots();
  s.usage = alloc_->capacity() > 0 ? static_cast<double>(alloc_->num_reserved_slots()) /
                                         static_cast<double>(alloc_->capacity())
                                   : 0.0;
  s.evictions = 0;
  s.blocks_allocated = slots_reserved_total_;
  return s;
}

bool ContiguousScheduler::free_slots_are_external() const {
  const Request* head = first_waiting();
  return head != nullptr && static_cast<std::int64_t>(running_.size()) < config_.max_num_seqs &&
         alloc_->num_free_slots() > 0 && reservation_of(*head) > alloc_->largest_allocatable();
}

KVBreakdown ContiguousScheduler::kv_breakdown(std::span<const std::int64_t> final_kv_tokens) const {
  KVBreakdown b;
  for (std::size_t i = 0; i < running_.size(); ++i) {
    const Request& r = *running_[i];
    const std::int64_t own = extents_[i].length;
    const std::int64_t c = std::clamp<std::int64_t>(r.num_computed_tokens, 0, own);
    const std::int64_t idx = r.index();
    const std::int64_t fin = idx >= 0 && static_cast<std::size_t>(idx) < final_kv_tokens.size()
                                 ? final_kv_tokens[static_cast<std::size_t>(idx)]
                                 : r.num_tokens();
    const std::int64_t f = std::clamp<std::int64_t>(fin, c, own);
    b.token_states += c;
    b.reservation += f - c;
    b.internal_fragmentation += own - f;
  }
  KVSIM_ASSERT(
      b.token_states + b.reservation + b.internal_fragmentation == alloc_->num_reserved_slots(),
      "KV breakdown: running extents disagree with the reserved-slot count");
  if (free_slots_are_external())
    b.external_fragmentation = alloc_->num_free_slots();
  else
    b.free = alloc_->num_free_slots();
  return b;
}

std::string ContiguousScheduler::find_violation() const {
  if (std::string v = alloc_->find_violation(); !v.empty()) return v;
  KVSIM_CHECK(extents_.size() == running_.size(), "running requests and extents out of step");
  std::vector<const Request*> live;
  live.reserve(running_.size() + waiting_.size());
  std::vector<Extent> tiles;
  tiles.reserve(running_.size() + 64);
  alloc_->append_free_regions(tiles);
  for (std::size_t i = 0; i < running_.size(); ++i) {
    const Request* r = running_[i];
    KVSIM_CHECK(r->status == RequestStatus::kRunning, "a running request is not RUNNING");
    KVSIM_CHECK(extents_[i].length >= 1, "a running request holds an empty extent");
    KVSIM_CHECK(r->num_computed_tokens <= extents_[i].length,
                "a running request has more K/V than its reservation holds");
    live.push_back(r);
    tiles.push_back(extents_[i]);
  }
  for (const Request* r : waiting_) {
    KVSIM_CHECK(r->status == RequestStatus::kWaiting, "a waiting request is not WAITING");
    KVSIM_CHECK(r->num_computed_tokens == 0, "a waiting request has computed tokens");
    live.push_back(r);
  }
  std::sort(live.begin(), live.end());
  KVSIM_CHECK(std::adjacent_find(live.begin(), live.end()) == live.end(),
              "a request is queued twice");
  KVSIM_CHECK(static_cast<std::int64_t>(running_.size()) <= config_.max_num_seqs,
              "more running requests than max_num_seqs");
  // Reservations and holes must tile [0, capacity): an overlap is a slot given twice, a gap a
  // slot neither reserved nor free (a reservation lost without being freed).
  std::sort(tiles.begin(), tiles.end(),
            [](const Extent& a, const Extent& b) { return a.offset < b.offset; });
  std::int64_t at = 0;
  for (const Extent& t : tiles) {
    KVSIM_CHECK(t.offset >= at, "two extents overlap (a slot reserved twice or reserved and free)");
    KVSIM_CHECK(t.offset == at, "slots neither reserved nor free (a reservation never freed)");
    at = t.end();
  }
  KVSIM_CHECK(at == alloc_->capacity(),
              at > alloc_->capacity()
                  ? "an extent runs past the pool"
                  : "slots neither reserved nor free (a reservation never freed)");
  for (std::size_t i = 0; i < running_.size(); ++i)
    KVSIM_CHECK(extents_[i].length == alloc_->granted_length(reservation_of(*running_[i])),
                "a running request's extent is not the region granted for its reservation");
  return {};
}

}  // namespace kvsim
