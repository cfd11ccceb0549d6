// The engine step after schedule() (spec §6): LLMEngine._process_model_outputs on the sync path
// with SingleStepOutputProcessor -- v0.7.2's, which appends to a group's first sequence, extended
// to multi-sequence groups and forks the way v0.6.3's processor did it (ops-format-v0.md,
// `update` and `forks`).

#include "core/common/assert.h"
#include "core/v0/scheduler.h"

namespace kvsim::v0 {

void Scheduler::process_model_outputs(SampleSource& samples, StepOutputs& out) {
  out.outputs.clear();
  out.finished.clear();
  bool finished_now = false;
  for (const ScheduledSeqGroup& s : out_.scheduled) {
    SequenceGroup& g = *s.group;
    if (g.is_finished()) continue;
    g.update_num_computed_tokens(s.token_chunk_size);
    if (s.do_sample) process_group(g, samples, out);
    if (g.is_finished()) {
      out.finished.push_back(&g);
      finished_now = true;
    }
  }
  if (finished_now) free_finished_seq_groups();
}

void Scheduler::process_group(SequenceGroup& g, SampleSource& samples, StepOutputs& out) {
  // The sampling sequences: v0.7.2's first_seq of a one-sequence group; the RUNNING ones of a
  // group that forked.
  step_parents_.clear();
  if (g.is_single_seq()) {
    step_parents_.push_back(g.first_seq());
  } else {
    for (Sequence* q : g.seqs())
      if (q->status == SeqStatus::kRunning) step_parents_.push_back(q);
  }
  step_pairs_.clear();
  for (Sequence* parent : step_parents_) {
    step_forks_.clear();
    samples.forks(g, *parent, step_forks_);
    for (const SampleSource::Fork& f : step_forks_) {
      Sequence& child = create_seq(f.child_id, {}, nullptr);
      const SeqSlot slot = child.slot;
      child.copy_from(*parent, child.seq_id, f.request);
      child.slot = slot;
      child.append_token_id(f.token);
      step_pairs_.emplace_back(&child, parent);
    }
    parent->append_token_id(samples.token(g, *parent));
    step_pairs_.emplace_back(parent, parent);
  }
  for (auto& [seq, parent] : step_pairs_)
    maybe_stop_sequence(*seq, g.params, config_.max_model_len);
  for (auto& [seq, parent] : step_pairs_) {
    if (seq == parent) continue;
    g.add(seq);
    if (!seq->is_finished()) fork_seq(*parent, *seq);
  }
  for (auto& [seq, parent] : step_pairs_)
    if (seq == parent && seq->is_finished()) free_seq(*seq);
  for (auto& [seq, parent] : step_pairs_)
    out.outputs.push_back({&g, seq, seq == parent ? nullptr : parent, seq->last_token()});
}

}  // namespace kvsim::v0
