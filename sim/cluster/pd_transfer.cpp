#include "sim/cluster/pd_transfer.h"

#include <algorithm>

#include "core/common/assert.h"
#include "sim/config/scenario.h"

namespace kvsim {

std::int64_t pd_block_bytes(const Scenario& s) {
  if (!s.plan) return 0;
  std::int64_t per_rank = 0;
  if (s.plan->layout) {
    for (const KVCacheGroup& g : s.plan->layout->groups)
      per_rank += g.uniform_type_layers.empty()
                      ? static_cast<std::int64_t>(g.layer_names.size()) * g.page_size_bytes
                      : g.page_size_bytes;
  } else {
    per_rank = s.plan->spec.page_bytes_all_layers();
  }
  return per_rank * s.hardware.tensor_parallel_size;
}

namespace {

using I128 = detail::PdInt128;

/// a/b < c/d for positive b, d.
bool less_frac(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
  return static_cast<I128>(a) * d < static_cast<I128>(c) * b;
}

bool by_end_then_id(const PdTransferRecord& a, const PdTransferRecord& b) {
  return a.end_ns != b.end_ns ? a.end_ns < b.end_ns : a.id < b.id;
}

}  // namespace

PdTransferModel::PdTransferModel(const PdConfig& config, std::vector<std::int32_t> tp)
    : gpu_bytes_per_s_(config.gpu_bytes_per_s()),
      setup_ns_(config.setup_ns),
      handshake_ns_(config.handshake_ns),
      shared_nic_(config.shared_nic),
      tp_(std::move(tp)) {
  for (std::int32_t t : tp_) KVSIM_ASSERT(t >= 1, "a replica's tp must be >= 1");
  state_.nic_out.assign(tp_.size(), 0);
  state_.nic_in.assign(tp_.size(), 0);
}

void PdTransferModel::start(std::uint64_t id, std::int32_t p, std::int32_t d, std::int64_t blocks,
                            std::int64_t bytes, SimTimeNs now) {
  KVSIM_ASSERT(now >= state_.now_ns, "a read started before the model's time");
  const auto n = static_cast<std::int32_t>(tp_.size());
  KVSIM_ASSERT(p >= 0 && p < n && d >= 0 && d < n && p != d, "a read's replicas");
  KVSIM_ASSERT(bytes >= 0 && blocks >= 0, "a read's size");
  advance(state_, now);
  for (const Read& r : state_.reads) KVSIM_ASSERT(r.rec.id != id, "the read is in flight");
  Read r;
  r.rec.id = id;
  r.rec.prefill_replica = p;
  r.rec.decode_replica = d;
  r.rec.blocks = blocks;
  r.rec.bytes = bytes;
  r.rec.start_ns = now;
  SimTimeNs begin = now;
  const auto [it, first] = handshake_end_.try_emplace({p, d}, now + handshake_ns_);
  r.rec.handshake = first;
  begin = std::max(now, it->second);
  r.rec.move_ns = begin + setup_ns_;
  r.rec.end_ns = kNever;
  state_.reads.push_back(r);
  if (r.rec.move_ns == now) step_instant(state_, now);
}

SimTimeNs PdTransferModel::next_instant(const State& s) {
  SimTimeNs t = kNever;
  for (const Read& r : s.reads) t = std::min(t, r.moving ? r.rec.end_ns : r.rec.move_ns);
  return t;
}

SimTimeNs PdTransferModel::next_event_ns() const {
  if (!state_.done.empty()) return state_.now_ns;
  return next_instant(state_);
}

SimTimeNs PdTransferModel::next_completion_ns() const {
  SimTimeNs t = kNever;
  for (const PdTransferRecord& r : state_.done) t = std::min(t, r.end_ns);
  if (t != kNever) return t;
  scratch_ = state_;
  while (scratch_.done.empty()) {
    const SimTimeNs x = next_instant(scratch_);
    if (x == kNever) return kNever;
    step_instant(scratch_, x);
  }
  for (const PdTransferRecord& r : scratch_.done) t = std::min(t, r.end_ns);
  return t;
}

void PdTransferModel::pop_completions(SimTimeNs t, std::vector<PdTransferRecord>& out,
                                      std::int32_t decode) {
  KVSIM_ASSERT(t >= state_.now_ns, "popped before the model's time");
  advance(state_, t);
  std::sort(state_.done.begin(), state_.done.end(), by_end_then_id);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < state_.done.size(); ++i) {
    if (decode < 0 || state_.done[i].decode_replica == decode)
      out.push_back(state_.done[i]);
    else
      state_.done[kept++] = state_.done[i];
  }
  state_.done.resize(kept);
}

void PdTransferModel::advance(State& s, SimTimeNs t) const {
  for (SimTimeNs x = next_instant(s); x <= t; x = next_instant(s)) step_instant(s, x);
  s.now_ns = std::max(s.now_ns, t);
}

void PdTransferModel::step_instant(State& s, SimTimeNs t) const {
  s.now_ns = t;
  bool changed = false;
  // Ends first: a read ending at t and one starting to move at t never share.
  for (Read& r : s.reads) {
    if (!r.moving || r.rec.end_ns > t) continue;
    KVSIM_ASSERT(r.rec.end_ns == t, "a read's end was passed");
    --s.nic_out[static_cast<std::size_t>(r.rec.prefill_replica)];
    --s.nic_in[static_cast<std::size_t>(r.rec.decode_replica)];
    s.done.push_back(r.rec);
    r.moving = false;
    r.rec.end_ns = -1;  // marks it for removal below
    changed = true;
  }
  for (Read& r : s.reads) {
    if (r.moving || r.rec.end_ns == -1 || r.rec.move_ns > t) continue;
    if (r.rec.bytes == 0) {  // a notification only
      r.rec.end_ns = t;
      s.done.push_back(r.rec);
      r.rec.end_ns = -1;
      continue;
    }
    r.moving = true;
    r.remaining_nb = static_cast<I128>(r.rec.bytes) * 1'000'000'000;
    r.since_ns = t;
    r.rate_num = 0;  // not rated yet
    ++s.nic_out[static_cast<std::size_t>(r.rec.prefill_replica)];
    ++s.nic_in[static_cast<std::size_t>(r.rec.decode_replica)];
    changed = true;
  }
  std::erase_if(s.reads, [](const Read& r) { return !r.moving && r.rec.end_ns == -1; });
  if (changed) rerate(s, t);
}

void PdTransferModel::rerate(State& s, SimTimeNs t) const {
  for (Read& r : s.reads) {
    if (!r.moving) continue;
    const auto p = static_cast<std::size_t>(r.rec.prefill_replica);
    const auto d = static_cast<std::size_t>(r.rec.decode_replica);
    std::int64_t on_link = 0;
    for (const Read& o : s.reads)
      if (o.moving && o.rec.prefill_replica == r.rec.prefill_replica &&
          o.rec.decode_replica == r.rec.decode_replica)
        ++on_link;
    // The smallest fair share of the resources the read uses.
    std::int64_t num = gpu_bytes_per_s_ * std::min(tp_[p], tp_[d]);
    std::int64_t den = on_link;
    if (shared_nic_) {
      const std::int64_t caps[2] = {gpu_bytes_per_s_ * tp_[p], gpu_bytes_per_s_ * tp_[d]};
      const std::int64_t users[2] = {s.nic_out[p], s.nic_in[d]};
      for (int k = 0; k < 2; ++k)
        if (less_frac(caps[k], users[k], num, den)) {
          num = caps[k];
          den = users[k];
        }
    }
    r.rec.concurrent = std::max(r.rec.concurrent, static_cast<std::int32_t>(on_link));
    if (r.rate_num > 0 &&
        static_cast<I128>(num) * r.rate_den == static_cast<I128>(r.rate_num) * den)
      continue;  // the same rate: its end stands
    if (r.rate_num > 0) {
      const I128 moved = static_cast<I128>(t - r.since_ns) * r.rate_num / r.rate_den;
      r.remaining_nb = std::max<I128>(0, r.remaining_nb - moved);
    }
    r.since_ns = t;
    r.rate_num = num;
    r.rate_den = den;
    const I128 left_ns = (r.remaining_nb * den + num - 1) / num;  // rounded up
    KVSIM_ASSERT(left_ns < static_cast<I128>(kNever - t), "a read would never end");
    r.rec.end_ns = t + static_cast<SimTimeNs>(left_ns);
  }
}

}  // namespace kvsim
