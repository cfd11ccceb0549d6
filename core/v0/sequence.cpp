#include "core/v0/sequence.h"

#include <algorithm>

#include "core/common/assert.h"

namespace kvsim::v0 {

// ---- Sequence -------------------------------------------------------------------------------

void Sequence::reset(SeqId id, std::span<const Token> prompt, Request* request) {
  seq_id = id;
  slot = kNoSlot;
  status = SeqStatus::kWaiting;
  eos_token_id.reset();
  stop_reason.reset();
  group = nullptr;
  num_table_blocks_seen = 0;
  request_ = request;
  own_.clear();
  if (request) {
    prompt_len_ = request->num_prompt_tokens();
  } else {
    own_.assign(prompt.begin(), prompt.end());
    prompt_len_ = static_cast<std::int64_t>(prompt.size());
  }
  num_computed_ = 0;
  prefill_ = true;
}

void Sequence::copy_from(const Sequence& parent, SeqId id, Request* request) {
  const std::span<const Token> t = parent.tokens();
  if (request) {
    KVSIM_ASSERT(request->num_tokens() == static_cast<std::int64_t>(t.size()),
                 "a forked Request must hold its parent's tokens");
    own_.clear();
  } else {
    own_.assign(t.begin(), t.end());
  }
  request_ = request;
  prompt_len_ = parent.prompt_len_;
  num_computed_ = parent.num_computed_;
  prefill_ = parent.prefill_;
  seq_id = id;
  slot = kNoSlot;
  status = parent.status;
  eos_token_id = parent.eos_token_id;
  stop_reason = parent.stop_reason;
  group = nullptr;
  num_table_blocks_seen = parent.num_table_blocks_seen;
}

Token Sequence::last_token() const {
  const std::span<const Token> t = tokens();
  if (t.empty()) raise("IndexError", "array index out of range");
  return t.back();
}

void Sequence::update_num_computed_tokens(std::int64_t n) {
  num_computed_ += n;
  vllm_assert(num_computed_ <= get_len(), "assert self._num_computed_tokens <= self.get_len()");
  if (get_len() - num_computed_ == 0) prefill_ = false;
}

// ---- SequenceGroup --------------------------------------------------------------------------

void SequenceGroup::reset(std::string_view id, Request* req, SamplingParams p, double arrival,
                          std::int64_t prio) {
  request_id.assign(id);
  request = req;
  params = std::move(p);
  arrival_time = arrival;
  priority = prio;
  budget_tokens_mark = budget_seqs_mark = mark = 0;
  pending_forks.clear();
  fork_seats = 0;
  seqs_.clear();
  is_single_seq_ = true;
}

void SequenceGroup::add_initial(Sequence* seq) {
  seqs_.push_back(seq);
  seq->group = this;
  is_single_seq_ = seqs_.size() == 1;
}

void SequenceGroup::add(Sequence* seq) {
  seqs_.push_back(seq);
  seq->group = this;
  is_single_seq_ = false;
}

std::int64_t SequenceGroup::num_seqs(SeqStatus s) const {
  std::int64_t n = 0;
  for (const Sequence* q : seqs_) n += q->status == s ? 1 : 0;
  return n;
}

Sequence* SequenceGroup::first_with(SeqStatus s) const {
  for (Sequence* q : seqs_)
    if (q->status == s) return q;
  return nullptr;
}

std::int64_t SequenceGroup::get_max_num_running_seqs() const {
  if (fork_seats > static_cast<std::int64_t>(seqs_.size())) return fork_seats;
  if (is_single_seq_) return first_seq()->is_finished() ? 0 : 1;
  std::int64_t n = 0;
  for (const Sequence* q : seqs_) n += q->is_finished() ? 0 : 1;
  return n;
}

bool SequenceGroup::is_finished() const {
  if (is_single_seq_) return first_seq()->is_finished();
  return std::all_of(seqs_.begin(), seqs_.end(),
                     [](const Sequence* q) { return q->is_finished(); });
}

void SequenceGroup::update_num_computed_tokens(std::int64_t n) {
  for (Sequence* q : seqs_)
    if (!q->is_finished()) q->update_num_computed_tokens(n);
}

// ---- StopChecker ----------------------------------------------------------------------------

StopVerdict stop_verdict(const SamplingParams& params, std::optional<Token> eos_token_id,
                         std::int64_t len, std::int64_t output_len, Token last,
                         std::int64_t max_model_len) {
  if (output_len < params.min_tokens) return {};
  if (!params.ignore_eos && eos_token_id && last == *eos_token_id)
    return {SeqStatus::kFinishedStopped, false};
  if (std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(), last) !=
      params.stop_token_ids.end())
    return {SeqStatus::kFinishedStopped, true};
  if (len > max_model_len) return {SeqStatus::kFinishedLengthCapped, false};
  if (output_len == params.max_tokens) return {SeqStatus::kFinishedLengthCapped, false};
  return {};
}

void maybe_stop_sequence(Sequence& seq, const SamplingParams& params, std::int64_t max_model_len) {
  if (seq.output_len() < params.min_tokens) return;  // before last_token(): no IndexError here
  const Token last = seq.last_token();
  const StopVerdict v =
      stop_verdict(params, seq.eos_token_id, seq.get_len(), seq.output_len(), last, max_model_len);
  if (v.status == SeqStatus::kRunning) return;
  seq.status = v.status;
  if (v.stop_token) seq.stop_reason = last;
}

}  // namespace kvsim::v0
