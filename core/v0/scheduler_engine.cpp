// The V0 Scheduler as an EngineCore: a kvsim Request is one sequence group with one sequence
// (n == 1; parallel sampling fans out into independent requests, as vLLM v0.7.2 does), whose
// tokens live in the Request. The engine clock the LRU evictor sees is the step count.

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

/// The simulator's sampled tokens: Request::sampled_token for every sampling sequence, no forks.
class RequestSamples final : public SampleSource {
 public:
  Token token(const SequenceGroup& g, const Sequence& /*seq*/) override {
    return g.request->sampled_token;
  }
};

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
  const auto i = static_cast<std::size_t>(request.index());
  KVSIM_ASSERT(request.index() >= 0, "a V0 request needs a non-negative index");
  if (i >= group_by_request_.size())
    group_by_request_.resize(std::max(i + 1, 2 * group_by_request_.size()), nullptr);
  group_by_request_[i] = &g;
}

void Scheduler::refresh_running_requests() {
  running_requests_.clear();
  for (const SequenceGroup* g : running_) running_requests_.push_back(g->request);
}

void Scheduler::schedule(SchedulerOutput& out) {
  now_ += 1;
  out.scheduled.clear();
  out.preempted.clear();
  out.finished.assign(finished_request_indices_.begin(), finished_request_indices_.end());
  finished_request_indices_.clear();
  finished_ids_.clear();
  out.prefix_queries_tokens = out.prefix_hits_tokens = 0;
  out.num_common_prefix_blocks = 0;
  out.ignored.clear();
  const SchedulerOutputs& so = schedule();
  for (const ScheduledSeqGroup& s : so.scheduled) {
    SequenceGroup& g = *s.group;
    Sequence& seq = *g.first_seq();
    Request& r = *g.request;
    ScheduledRequest& sr = out.scheduled.emplace_back();
    sr.request = &r;
    sr.num_tokens = s.token_chunk_size;
    sr.num_computed_tokens = seq.num_computed_tokens();
    const auto blocks = static_cast<std::int32_t>(bm_.block_table(seq).size());
    if (s.source == ScheduledSeqGroup::Source::kRunning) {
      sr.kind = ScheduledRequest::Kind::kRunning;
      sr.num_new_blocks = std::max(0, blocks - seq.num_table_blocks_seen);
    } else {
      const bool resumed = s.source == ScheduledSeqGroup::Source::kSwapped || r.num_preemptions > 0;
      sr.kind = resumed ? ScheduledRequest::Kind::kResumed : ScheduledRequest::Kind::kNew;
      sr.num_new_blocks = blocks;
    }
    seq.num_table_blocks_seen = blocks;
    if (s.source == ScheduledSeqGroup::Source::kWaiting && seq.num_computed_tokens() == 0) {
      out.prefix_queries_tokens += seq.get_len();
      out.prefix_hits_tokens += s.num_cached_tokens;
    }
    r.status = RequestStatus::kRunning;
    r.num_scheduled_tokens = s.token_chunk_size;
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
    Request& r = *g->request;
    r.status = RequestStatus::kPreempted;
    ++r.num_preemptions;
    out.preempted.push_back(&r);
  }
  out.num_swapped_out = static_cast<std::int32_t>(so.swapped_out.size());
  for (SequenceGroup* g : so.ignored) {
    Request& r = *g->request;
    r.status = RequestStatus::kFinishedLengthCapped;
    out.ignored.push_back(&r);
    group_by_request_[static_cast<std::size_t>(r.index())] = nullptr;
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
    Request& r = *o.group->request;
    outputs.push_back({&r, o.token, o.group->is_finished()});
  }
  for (const ScheduledSeqGroup& s : out_.scheduled) {
    Request& r = *s.group->request;
    r.num_scheduled_tokens = 0;
    r.num_computed_tokens = s.group->first_seq()->num_computed_tokens();
  }
  for (SequenceGroup* g : step_out_.finished) {
    Request& r = *g->request;
    const Sequence& seq = *g->first_seq();
    r.status = request_status(seq.status);
    r.stop_reason = seq.stop_reason;
    group_by_request_[static_cast<std::size_t>(r.index())] = nullptr;
    retire_group(*g);
  }
  refresh_running_requests();
}

bool Scheduler::abort_request(Request& request) {
  SequenceGroup* g = group_of(request);
  if (!g || !abort_group(*g)) return false;
  request.status = RequestStatus::kFinishedAborted;
  request.num_scheduled_tokens = 0;
  group_by_request_[static_cast<std::size_t>(request.index())] = nullptr;
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
  const SequenceGroup* g = group_of(request);
  if (!g || !bm_.has_table(*g->first_seq())) return {};
  return bm_.block_table(*g->first_seq());
}

}  // namespace kvsim::v0
