// Scheduler: construction, pools, schedule()'s metadata pass, preemption, swap-in, abort.

#include "core/v0/scheduler.h"

#include <algorithm>

#include "core/common/assert.h"
#include "core/v0/scheduler_internal.h"

namespace kvsim::v0 {

namespace {
V0Config checked(const V0Config& c) {
  if (std::string e = v0_config_error(c); !e.empty()) raise("ValueError", e);
  return c;
}
}  // namespace

Scheduler::Scheduler(const V0Config& config)
    : config_(checked(config)),
      bm_(config.block_size, config.num_gpu_blocks, config.num_cpu_blocks, config.watermark,
          config.enable_prefix_caching),
      prefills_(std::make_unique<PrefillOutputs>()),
      running_out_(std::make_unique<RunningOutputs>()),
      swapped_in_(std::make_unique<SwappedOutputs>()) {}

Scheduler::~Scheduler() = default;

// ---- objects --------------------------------------------------------------------------------

SeqId Scheduler::take_seq_id(SeqId explicit_id) {
  if (explicit_id < 0) return next_seq_id_++;
  next_seq_id_ = std::max(next_seq_id_, explicit_id + 1);
  return explicit_id;
}

SequenceGroup& Scheduler::create_group(std::string_view request_id, Request* request,
                                       SamplingParams params, double arrival_time,
                                       std::int64_t priority) {
  SequenceGroup* g;
  if (free_groups_.empty()) {
    g = group_pool_.emplace_back(std::make_unique<SequenceGroup>()).get();
  } else {
    g = free_groups_.back();
    free_groups_.pop_back();
  }
  g->reset(request_id, request, std::move(params), arrival_time, priority);
  return *g;
}

Sequence& Scheduler::create_seq(SeqId id, std::span<const Token> prompt, Request* request) {
  Sequence* s;
  if (free_seqs_.empty()) {
    s = seq_pool_.emplace_back(std::make_unique<Sequence>()).get();
  } else {
    s = free_seqs_.back();
    free_seqs_.pop_back();
  }
  s->reset(take_seq_id(id), prompt, request);
  s->slot = bm_.acquire_slot(s->seq_id);
  return *s;
}

void Scheduler::retire_group(SequenceGroup& g) { retired_.push_back(&g); }

void Scheduler::recycle_retired() {
  for (SequenceGroup* g : retired_) {
    for (Sequence* s : g->seqs()) {
      if (g->request) bm_.forget_tracking(*s);  // engine ids are never reused
      bm_.release_slot(s->slot);
      s->slot = kNoSlot;
      free_seqs_.push_back(s);
    }
    g->reset("", nullptr, {}, 0, 0);
    free_groups_.push_back(g);
  }
  retired_.clear();
}

void Scheduler::take_finished_request_ids(std::vector<std::string>& out) {
  out.swap(finished_ids_);
  finished_ids_.clear();
}

// ---- schedule() -----------------------------------------------------------------------------

const SchedulerOutputs& Scheduler::schedule() {
  recycle_retired();
  ++budget_mark_;
  if (config_.enable_chunked_prefill)
    schedule_chunked_prefill(out_);
  else
    schedule_default(out_);
  vllm_assert(out_.blocks_to_swap_in.empty() || out_.blocks_to_swap_out.empty(),
              "assert not (self.blocks_to_swap_in and self.blocks_to_swap_out)");
  const double now = now_;
  out_.computed_block_nums.clear();
  for (ScheduledSeqGroup& s : out_.scheduled) {
    SequenceGroup& g = *s.group;
    scratch_seqs_.clear();
    g.for_each_seq(SeqStatus::kRunning, [&](Sequence& q) {
      bm_.block_table(q);  // KeyError without a table, as vLLM's get_block_table
      bm_.access_all_blocks_in_seq(q, now);
      scratch_seqs_.push_back(&q);
    });
    s.computed_begin = static_cast<std::uint32_t>(out_.computed_block_nums.size());
    if (config_.enable_prefix_caching) {
      bm_.get_common_computed_block_ids(scratch_seqs_, scratch_blocks_);
      out_.computed_block_nums.insert(out_.computed_block_nums.end(), scratch_blocks_.begin(),
                                      scratch_blocks_.end());
    }
    s.computed_end = static_cast<std::uint32_t>(out_.computed_block_nums.size());
    s.do_sample = true;
    s.is_prompt = g.is_prefill();
    if (s.is_prompt) {
      vllm_assert(g.seqs().size() == 1, "assert len(seqs) == 1");
      const Sequence& q = *g.first_seq();
      if (s.token_chunk_size + q.num_computed_tokens() < q.get_len()) s.do_sample = false;
    }
  }
  for (std::size_t i = 0; i < out_.scheduled.size(); ++i) bm_.mark_blocks_as_computed();
  return out_;
}

// ---- helpers of the policies ----------------------------------------------------------------

void Scheduler::allocate_and_set_running(SequenceGroup& g) {
  bm_.allocate(g);
  for (Sequence* q : g.seqs())
    if (q->status == SeqStatus::kWaiting) q->status = SeqStatus::kRunning;
}

void Scheduler::append_slots(SequenceGroup& g, std::vector<BlockIdPair>& blocks_to_copy) {
  // No lookahead slots: no multi-step, no speculative decoding.
  for (Sequence* q : g.seqs())
    if (q->status == SeqStatus::kRunning) bm_.append_slots(*q, 0, blocks_to_copy);
}

void Scheduler::swap_in(SequenceGroup& g, std::vector<BlockIdPair>& blocks_to_swap_in) {
  bm_.swap_in(g, blocks_to_swap_in);
  for (Sequence* q : g.seqs())
    if (q->status == SeqStatus::kSwapped) q->status = SeqStatus::kRunning;
}

PreemptionMode Scheduler::preempt(SequenceGroup& g, std::vector<BlockIdPair>& blocks_to_swap_out) {
  PreemptionMode mode;
  if (!config_.preemption_mode)
    mode = g.get_max_num_running_seqs() == 1 ? PreemptionMode::kRecompute : PreemptionMode::kSwap;
  else
    mode = *config_.preemption_mode;
  ++num_cumulative_preemption_;
  if (mode == PreemptionMode::kSwap && !bm_.can_swap_out(g)) {
    // vLLM raises here (below); the non-vLLM policy recomputes a victim it can recompute.
    if (config_.on_swap_space_exhausted == SwapSpaceExhausted::kRecompute &&
        g.num_seqs(SeqStatus::kRunning) == 1)
      mode = PreemptionMode::kRecompute;
    else
      swap_victim_ = &g;
  }
  if (mode == PreemptionMode::kRecompute) {
    vllm_assert(g.num_seqs(SeqStatus::kRunning) == 1, "assert len(seqs) == 1");
    for (Sequence* q : g.seqs()) {
      if (q->status != SeqStatus::kRunning) continue;
      q->status = SeqStatus::kWaiting;
      bm_.free(*q);
      q->reset_state_for_recompute();
    }
  } else {
    if (!bm_.can_swap_out(g))
      raise("RuntimeError",
            "Aborted due to the lack of CPU swap space. Please increase the swap space to avoid "
            "this error.");
    bm_.swap_out(g, blocks_to_swap_out);
    for (Sequence* q : g.seqs())
      if (q->status == SeqStatus::kRunning) q->status = SeqStatus::kSwapped;
  }
  return mode;
}

// ---- abort ----------------------------------------------------------------------------------

bool Scheduler::abort_group(SequenceGroup& g) {
  for (RingDeque<SequenceGroup*>* q : {&waiting_, &running_, &swapped_}) {
    std::size_t i = 0;
    while (i < q->size() && (*q)[i] != &g) ++i;
    if (i == q->size()) continue;
    q->erase_at(i);
    finished_ids_.push_back(g.request_id);
    if (g.request) finished_request_indices_.push_back(g.request->index());
    for (Sequence* s : g.seqs()) {
      if (s->is_finished()) continue;
      s->status = SeqStatus::kFinishedAborted;
      bm_.free(*s);
    }
    return true;
  }
  return false;
}

void Scheduler::free_finished_seq_groups() {
  scratch_groups_.clear();
  for (SequenceGroup* g : running_) {
    if (g->is_finished()) {
      finished_ids_.push_back(g->request_id);
      if (g->request) finished_request_indices_.push_back(g->request->index());
    }
    for (Sequence* s : g->seqs())
      if (s->is_finished()) bm_.free(*s);
    if (!g->is_finished()) scratch_groups_.push_back(g);
  }
  running_.clear();
  for (SequenceGroup* g : scratch_groups_) running_.push_back(g);
}

}  // namespace kvsim::v0
