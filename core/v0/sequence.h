#pragma once
// Sequence and SequenceGroup: vLLM V0's vllm/sequence.py as the block manager and the scheduler
// read it (tokens, computed count and stage, status; a group's sequences, sampling parameters,
// arrival time and priority), plus the engine's StopChecker (vllm/engine/output_processor/
// stop_checker.py) without stop strings (no tokenizer).
//
// A sequence owns its tokens, or borrows those of a kvsim Request (the engine's one-sequence
// groups: the prompt is not copied, generated tokens are appended to the Request).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/common/request.h"
#include "core/common/types.h"
#include "core/v0/v0_types.h"

namespace kvsim::v0 {

class SequenceGroup;

/// The SamplingParams fields the V0 engine reads (n is used at admission only).
struct SamplingParams {
  std::int64_t n = 1;
  std::int64_t max_tokens = 16;
  std::int64_t min_tokens = 0;
  bool ignore_eos = false;
  std::vector<Token> stop_token_ids;
};

class Sequence {
 public:
  /// Re-initializes the sequence (objects are pooled): WAITING, PREFILL, nothing computed.
  /// `request` non-null: the tokens are the Request's (prompt and any output it holds).
  void reset(SeqId id, std::span<const Token> prompt, Request* request = nullptr);
  /// Sequence.fork: a deep copy of `parent` (tokens, status, computed count, stage, stop state)
  /// with id `id` and its own token storage -- or, when `request` is given, the tokens of that
  /// Request, which must equal the parent's (the engine's forks: the child's tokens live in the
  /// caller's Request). The slot and group are left to the caller.
  void copy_from(const Sequence& parent, SeqId id, Request* request = nullptr);

  std::span<const Token> tokens() const {
    return request_ ? std::span<const Token>(request_->all_token_ids())
                    : std::span<const Token>(own_);
  }
  std::int64_t get_len() const { return static_cast<std::int64_t>(tokens().size()); }
  std::int64_t prompt_len() const { return prompt_len_; }
  std::int64_t output_len() const { return get_len() - prompt_len_; }
  /// get_last_token_id (IndexError for an empty sequence).
  Token last_token() const;
  /// append_token_id: one generated token (the stage does not change).
  void append_token_id(Token t) {
    if (request_)
      request_->append_output_token(t);
    else
      own_.push_back(t);
  }

  std::int64_t num_computed_tokens() const { return num_computed_; }
  /// update_num_computed_tokens: adds n; AssertionError past the length; DECODE once all are
  /// computed.
  void update_num_computed_tokens(std::int64_t n);
  /// reset_state_for_recompute: nothing computed, PREFILL stage (output tokens are kept).
  void reset_state_for_recompute() {
    num_computed_ = 0;
    prefill_ = true;
  }
  bool is_prefill() const { return prefill_; }
  bool is_finished() const { return v0::is_finished(status); }
  Request* request() const { return request_; }

  SeqId seq_id = -1;
  SeqSlot slot = kNoSlot;  // the BlockManager's slot (set by whoever registers the sequence)
  SeqStatus status = SeqStatus::kWaiting;
  std::optional<Token> eos_token_id;
  std::optional<Token> stop_reason;
  SequenceGroup* group = nullptr;
  std::int32_t num_table_blocks_seen = 0;  // engine bookkeeping: table size at its last step

 private:
  std::vector<Token> own_;
  Request* request_ = nullptr;
  std::int64_t prompt_len_ = 0;
  std::int64_t num_computed_ = 0;
  bool prefill_ = true;
};

class SequenceGroup {
 public:
  /// Re-initializes a pooled group with no sequences.
  void reset(std::string_view request_id, Request* request, SamplingParams params,
             double arrival_time, std::int64_t priority);
  /// Adds a sequence at construction (is_single_seq is decided by the construction size).
  void add_initial(Sequence* seq);
  /// v0.6.3's SequenceGroup.add (the op protocol's forks): the group is multi-sequence from now.
  void add(Sequence* seq);

  Sequence* first_seq() const { return seqs_.front(); }
  const std::vector<Sequence*>& seqs() const { return seqs_; }
  bool is_single_seq() const { return is_single_seq_; }

  /// get_seqs(status) as a callback walk, in sequence order.
  template <class F>
  void for_each_seq(SeqStatus s, F&& f) const {
    for (Sequence* q : seqs_)
      if (q->status == s) f(*q);
  }
  std::int64_t num_seqs(SeqStatus s) const;
  /// The first sequence with status `s`, or nullptr.
  Sequence* first_with(SeqStatus s) const;
  /// get_max_num_running_seqs: 1/0 for a single-sequence group, else the unfinished count;
  /// fork_seats while the group has fewer sequences (v0.6.3's rule for groups that will fork).
  std::int64_t get_max_num_running_seqs() const;
  bool is_finished() const;
  bool is_prefill() const { return first_seq()->is_prefill(); }
  /// update_num_computed_tokens on every unfinished sequence.
  void update_num_computed_tokens(std::int64_t n);

  std::string request_id;
  Request* request = nullptr;  // the kvsim request behind an engine group (nullptr in replay)
  SamplingParams params;
  double arrival_time = 0;
  std::int64_t priority = 0;
  // SchedulingBudget's per-request-id sets, as the schedule() call that last added the group.
  std::uint64_t budget_tokens_mark = 0;
  std::uint64_t budget_seqs_mark = 0;
  std::uint64_t mark = 0;  // scratch for callers (queue diffs)
  /// Engine forks (EngineCore::add_forking_request): the Requests that fork from the first
  /// sequence at its first sampled token (emptied then), and the seats the group holds until it
  /// has forked -- v0.6.3's get_max_num_running_seqs, which counted sampling_params.n while the
  /// group had fewer sequences (0: no forks to come).
  std::vector<Request*> pending_forks;
  std::int64_t fork_seats = 0;

 private:
  std::vector<Sequence*> seqs_;
  bool is_single_seq_ = true;
};

/// StopChecker's decision for a sequence of `len` tokens, `output_len` of them generated, whose
/// last token is `last`: kRunning when it goes on; stop_token when a stop_token_id stopped it
/// (the stop_reason). The one place the stop rules are written (maybe_stop_sequence, the
/// fast-forward horizon).
struct StopVerdict {
  SeqStatus status = SeqStatus::kRunning;
  bool stop_token = false;
};
StopVerdict stop_verdict(const SamplingParams& params, std::optional<Token> eos_token_id,
                         std::int64_t len, std::int64_t output_len, Token last,
                         std::int64_t max_model_len);

/// StopChecker.maybe_stop_sequence after a token was appended (new_char_count = 0): the
/// min_tokens gate, EOS, stop_token_ids (stop_reason), length > max_model_len, max_tokens.
void maybe_stop_sequence(Sequence& seq, const SamplingParams& params, std::int64_t max_model_len);

}  // namespace kvsim::v0
