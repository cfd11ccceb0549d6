// The V0 Scheduler as an EngineCore: a kvsim Request is one sequence, whose tokens live in the
// Request, and a sequence group is one Request (n == 1; parallel sampling fans out into
// independent requests, as vLLM v0.7.2 does) or, with add_forking_request, a parent Request and
// the children that fork from it (as V0 engines before v0.7 did). The engine clock the LRU
// evictor sees is the step count.

#include <algorithm>

#include "core/common/assert.h"
#include "core/v0/scheduler.h"

namespace kvsim::v0 {

namespace {

RequestStatus request_status(SeqStatus s) {
  switch (s) {
    case SeqStatus::kWaiting:
      return RequestStatus::kWaiting;
    case SeqStatus::kRunning:
      return RequestStatus::kRunning;
    case SeqStatus::kSwapped:
      return RequestStatus::kPreempted;
    case SeqStatus::kFinishedStopped:
      return RequestStatus::kFinishedStopped;
    case SeqStatus::kFinishedLengthCapped:
    case SeqStatus::kFinishedIgnored:  // vLLM's finish reason for IGNORED is "length"
      return RequestStatus::kFinishedLengthCapped;
    case SeqStatus::kFinishedAborted:
      return RequestStatus::kFinishedAborted;
  }
  return RequestStatus::kFinishedAborted;
}

/// The caller's sampled tokens: Request::next_sampled_token() of every sampling sequence; a
/// group's pending children fork from its first sequence at its first sample.
class RequestSamples final : public SampleSource {
 public:
  Token token(const SequenceGroup& /*g*/, const Sequence& seq) override {
    return seq.request()->next_sampled_token();
  }
  void forks(const SequenceGroup& g, const Sequence& parent, std::vector<Fork>& out) override {
    if (!g.is_single_seq() || g.pending_forks.empty() || &parent != g.first_seq()) return;
    for (Request* c : g.pending_forks) out.push_back({-1, c->next_sampled_token(), c});
  }
};

std::string swap_space_message(const char* what, const BlockManager& bm) {
  return std::string(what) + " (the CPU swap space has " + std::to_string(bm.num_cpu_blocks()) +
         " blocks, " + std::to_string(bm.num_free_cpu_blocks()) + " free)";
}

}  // namespace

Profile Scheduler::profile() const { return Profile::kVllm072V0; }

SequenceGroup* Scheduler::group_of(const Request& r) const {
  const auto i = static_cast<std::size_t>(r.index());
  return r.index() >= 0 && i < group_by_request_.size() ? group_by_request_[i] : nullptr;
}

void Scheduler::add_request(Request& request) {
  SamplingParams p;
  p.max_tokens = request.limits.max_tokens;
  p.ignore_eos = request.limits.ignore_eos;
  p.stop_token_ids = request.limits.stop_token_ids;
  SequenceGroup& g = create_group("", &request, std::move(p), now_, 0);
  Sequence& seq = create_seq(-1, {}, &request);
  seq.eos_token_id = request.limits.eos_token_id;
  g.add_initial(&seq);
  add_seq_group(g);
  request.status = RequestStatus::kWaiting;
  KVSIM_ASSERT(request.index() >= 0, "a V0 request needs a non-negative index");
  set_group_of(request, &g);
}

void Scheduler::add_forking_request(Request& parent, std::span<Request* const> children) {
  add_request(parent);
  SequenceGroup& g = *group_of(parent);
  g.pending_forks.assign(children.begin(), children.end());
  g.fork_seats = 1 + static_cast<std::int64_t>(children.size());
  for (Request* c : children) {
    KVSIM_ASSERT(c->index() >= 0 && c->num_tokens() == parent.num_tokens(),
                 "a forking child needs an index and its parent's prompt");
    c->status = RequestStatus::kWaiting;
  }
}

void Scheduler::refresh_running_requests() {
  running_requests_.clear();
  for (const SequenceGroup* g : running_) {
    if (g->is_single_seq()) {
      running_requests_.push_back(g->request);
      continue;
    }
    for (const Sequence* q : g->seqs())
      if (q->status == SeqStatus::kRunning) running_requests_.push_back(q->request());
  }
}

void Scheduler::set_group_of(const Request& r, SequenceGroup* g) {
  const auto i = static_cast<std::size_t>(r.index());
  if (i >= group_by_request_.size())
    group_by_request_.resize(std::max(i + 1, 2 * group_by_request_.size()), nullptr);
  group_by_request_[i] = g;
}

Sequence* Scheduler::seq_of(const Request& r) const {
  const SequenceGroup* g = group_of(r);
  if (!g) return nullptr;
  for (Sequence* q : g->seqs())
    if (q->request() == &r) return q;
  return nullptr;
}

void Scheduler::add_scheduled(const ScheduledSeqGroup& s, Sequence& seq, SchedulerOutput& out) {
  Request& r = *seq.request();
  const auto blocks = static_cast<std::int32_t>(bm_.block_table(seq).size());
  if (s.source == ScheduledSeqGroup::Source::kRunning) {
    out.add_scheduled(r, s.token_chunk_size, seq.num_computed_tokens(),
                      std::max(0, blocks - seq.num_table_blocks_seen),
                      ScheduledRequest::Kind::kRunning);
  } else {
    const bool resumed = s.source == ScheduledSeqGroup::Source::kSwapped || r.num_preemptions > 0;
    out.add_scheduled(r, s.token_chunk_size, seq.num_computed_tokens(), blocks,
                      resumed ? ScheduledRequest::Kind::kResumed : ScheduledRequest::Kind::kNew);
  }
  seq.num_table_blocks_seen = blocks;
  if (s.source == ScheduledSeqGroup::Source::kWaiting && seq.num_computed_tokens() == 0) {
    out.prefix_queries_tokens += seq.get_len();
    out.prefix_hits_tokens += s.num_cached_tokens;
  }
  r.status = RequestStatus::kRunning;
  r.num_scheduled_tokens = s.token_chunk_size;
}

void Scheduler::finish_unforked(SequenceGroup& g, RequestStatus status) {
  for (Request* c : g.pending_forks) {
    c->status = status;
    c->num_scheduled_tokens = 0;
  }
}

void Scheduler::schedule(SchedulerOutput& out) {
  now_ += 1;
  out.begin_step(finished_request_indices_);
  finished_request_indices_.clear();
  finished_ids_.clear();
  swap_victim_ = nullptr;
  const SchedulerOutputs* result = nullptr;
  try {
    result = &schedule();
  } catch (const VllmError& e) {
    // vLLM's engine dies here (spec §0.1): the caller gets the victim and the pool.
    if (!swap_victim_) throw EngineAborted(e.what(), nullptr);
    throw EngineAborted(swap_space_message(e.what(), bm_), swap_victim_->request);
  }
  const SchedulerOutputs& so = *result;
  for (const ScheduledSeqGroup& s : so.scheduled) {
    SequenceGroup& g = *s.group;
    if (g.is_single_seq()) {
      add_scheduled(s, *g.first_seq(), out);
      continue;
    }
    for (Sequence* q : g.seqs())
      if (q->status == SeqStatus::kRunning) add_scheduled(s, *q, out);
  }
  for (SequenceGroup* g : so.recomputed) {
    Request& r = *g->request;
    r.status = RequestStatus::kPreempted;
    r.num_computed_tokens = 0;
    ++r.num_preemptions;
    g->first_seq()->num_table_blocks_seen = 0;
    out.preempted.push_back(&r);
  }
  for (SequenceGroup* g : so.swapped_out) {
    for (Sequence* q : g->seqs()) {
      if (q->status != SeqStatus::kSwapped) continue;
      q->request()->status = RequestStatus::kPreempted;
      ++q->request()->num_preemptions;
    }
    out.preempted.push_back(g->request);  // a group counts once, as vLLM counts preemptions
  }
  out.num_swapped_out = static_cast<std::int32_t>(so.swapped_out.size());
  for (SequenceGroup* g : so.ignored) {
    for (Sequence* q : g->seqs()) {
      if (q->status != SeqStatus::kFinishedIgnored) continue;
      Request& r = *q->request();
      r.status = RequestStatus::kFinishedLengthCapped;
      out.ignored.push_back(&r);
      set_group_of(r, nullptr);
    }
    finish_unforked(*g, RequestStatus::kFinishedLengthCapped);
    out.ignored.insert(out.ignored.end(), g->pending_forks.begin(), g->pending_forks.end());
    retire_group(*g);
  }
  out.blocks_to_swap_in = so.blocks_to_swap_in;
  out.blocks_to_swap_out = so.blocks_to_swap_out;
  out.blocks_to_copy = so.blocks_to_copy;
  out.total_num_scheduled_tokens = so.num_batched_tokens;
  refresh_running_requests();
}

void Scheduler::update_from_output(std::vector<RequestOutput>& outputs) {
  RequestSamples samples;
  process_model_outputs(samples, step_out_);
  outputs.clear();
  for (const SampleOutput& o : step_out_.outputs) {
    Request& r = *o.seq->request();
    if (o.parent) {  // forked in this step: its group has it from now on
      set_group_of(r, o.group);
      o.group->pending_forks.clear();
      r.status = RequestStatus::kRunning;
    }
    outputs.push_back({&r, o.token, o.seq->is_finished()});
    if (o.seq->is_finished()) {
      r.status = request_status(o.seq->status);
      r.stop_reason = o.seq->stop_reason;
      set_group_of(r, nullptr);
    }
  }
  // The sequences of this step: those still running and those that finished in it (a sequence
  // that finished before may belong to a Request the caller has dropped).
  const auto sync = [](const Sequence& q) {
    q.request()->num_scheduled_tokens = 0;
    q.request()->num_computed_tokens = q.num_computed_tokens();
  };
  for (const ScheduledSeqGroup& s : out_.scheduled)
    for (const Sequence* q : s.group->seqs())
      if (q->status == SeqStatus::kRunning) sync(*q);
  for (const SampleOutput& o : step_out_.outputs)
    if (o.seq->is_finished()) sync(*o.seq);
  for (SequenceGroup* g : step_out_.finished) retire_group(*g);
  refresh_running_requests();
}

bool Scheduler::abort_request(Request& request) {
  SequenceGroup* g = group_of(request);
  if (!g || g->request != &request || !abort_group(*g)) return false;
  for (Sequence* q : g->seqs()) {
    if (q->status != SeqStatus::kFinishedAborted) continue;
    q->request()->status = RequestStatus::kFinishedAborted;
    q->request()->num_scheduled_tokens = 0;
    set_group_of(*q->request(), nullptr);
  }
  finish_unforked(*g, RequestStatus::kFinishedAborted);
  retire_group(*g);
  refresh_running_requests();
  return true;
}

std::int64_t Scheduler::cache_only_request(Request& request) {
  // The prefix-cache lookup of an admission (get_num_cached_tokens), then the prompt's blocks
  // allocated as far as the GPU pool holds them, marked computed and freed (they stay cached).
  now_ += 1;  // one tick per lookup: the evictor's LRU order is the order of the lookups
  SequenceGroup& g = create_group("", &request, {}, now_, 0);
  Sequence& seq = create_seq(-1, {}, &request);
  g.add_initial(&seq);
  const std::int64_t hits = bm_.get_num_cached_tokens(seq);
  const std::int64_t fit =
      static_cast<std::int64_t>(bm_.num_free_gpu_blocks()) * config_.block_size;
  const std::int64_t len = std::min(seq.get_len(), fit);
  Sequence* held = &seq;
  if (len < seq.get_len() && len > 0) {
    // A prompt larger than the free pool: its longest prefix that fits, through a shorter copy.
    SequenceGroup& pg = create_group("", &request, {}, now_, 0);
    held = &create_seq(-1, seq.tokens().first(static_cast<std::size_t>(len)), nullptr);
    pg.add_initial(held);
    bm_.get_num_cached_tokens(*held);
    bm_.allocate(pg);
    retire_group(pg);
  } else if (len > 0) {
    bm_.allocate(g);
  }
  if (len > 0) bm_.access_all_blocks_in_seq(*held, now_);
  bm_.mark_blocks_as_computed();
  bm_.free(*held);
  retire_group(g);
  recycle_retired();
  return hits;
}

const Request* Scheduler::first_waiting() const {
  return waiting_.empty() ? nullptr : waiting_.front()->request;
}

std::span<const BlockId> Scheduler::block_table(const Request& request) const {
  const Sequence* seq = seq_of(request);
  if (!seq || !bm_.has_table(*seq)) return {};
  return bm_.block_table(*seq);
}

}  // namespace kvsim::v0
