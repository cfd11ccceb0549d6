#pragma once
// Request sources: the synthetic generator and the trace readers behind one interface. Sources are
// lazy: they hold only what the next request needs (and, for multi-turn sessions, the turn counts
// of live sessions), so memory is bounded by live requests, never by trace length. A request's
// prompt tokens exist only while the scheduler may look at it (RequestSpec::deferred): a waiting
// queue thousands deep holds segments, not tokens.
//
// Token ids are pseudo-random and deterministic: token j of a content stream keyed by k is
// pseudo_token(k, j, vocab): x = splitmix64(k + (j / 2) * 0x9e3779b97f4a7c15), then the low (j
// even) or high (j odd) 32 bits of x scaled to [0, vocab) by a multiply-high. Keys: each request's
// own text, each system prompt, each few-shot template, each trace prefix group and each Mooncake
// hash id have their own, so equal content gives equal tokens and different content (practically)
// never shares a block.
//
// Scenario keys of `workload:`: sim/workload/workload_config.h.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "sim/common/sim_types.h"
#include "sim/workload/workload_config.h"

namespace kvsim {

/// `count` tokens of the content stream `key` (tokens [0, count), see pseudo_token).
struct PromptSegment {
  std::uint64_t key = 0;
  std::int64_t count = 0;
};

struct RequestSpec {
  std::uint64_t id = 0;  // dense 0,1,2,... in creation order
  SimTimeNs arrival_ns = 0;
  // The prompt's token ids: `prompt`, then the content-stream segments of `deferred` (tokens in
  // [0, deferred_vocab)). The trace readers and the synthetic generator defer their prompts, so
  // that a request waiting behind a long queue holds a few segments, not its tokens: call
  // materialize_prompt() before reading the tokens. (A follow-up turn's prompt is eager.)
  std::vector<std::int32_t> prompt;
  std::vector<PromptSegment> deferred;
  std::int32_t deferred_vocab = 0;
  std::int64_t deferred_tokens = 0;  // sum of the deferred segments' counts
  // What the client asks for (the fields of vLLM's SamplingParams that end a request) and what
  // the model does. The request ends at the first of: the client's max_tokens, max_model_len (the
  // server's rule: sim/engine/server_admission.h), and -- when it stops at EOS -- its generated
  // token number output_tokens, which is the EOS token. vLLM checks the length limits before EOS,
  // so an EOS on the last token they allow ends it with "length". The sources follow the
  // benchmarks (set_default_max_tokens): a request that ignores EOS sends max_tokens =
  // output_tokens; one that stops at EOS sends none unless its trace row gives one.
  std::optional<std::int32_t> max_tokens;  // the client's max_tokens (>= 1); nullopt: not sent
  std::int32_t output_tokens = 1;          // where the model emits EOS (>= 1)
  bool ignore_eos = true;
  std::optional<std::int32_t> eos_token_id;
  SimTimeNs client_timeout_ns = -1;  // the client aborts it this long after arrival; -1: never
  std::uint64_t output_seed = 0;     // generated tokens: output_token(output_seed, i, ...)
  std::int64_t session = -1;         // multi-turn session id, -1 none
  std::int32_t turn = 0;             // 0-based turn within the session
  std::int32_t prefix_group = -1;    // system prompt / few-shot template index, -1 none

  /// The prompt's length, deferred tokens included.
  std::int64_t num_prompt_tokens() const {
    return static_cast<std::int64_t>(prompt.size()) + deferred_tokens;
  }
  /// True when EOS ends the request: it does not ignore EOS and has an eos_token_id.
  bool stops_at_eos() const { return !ignore_eos && eos_token_id.has_value(); }
  /// Appends the deferred segments to `prompt`, with room for `output_room_tokens` tokens after
  /// them (the request decodes into the same buffer).
  void materialize_prompt(std::int64_t output_room_tokens = 0);
  /// Appends `count` tokens of stream `key` to the deferred segments.
  void defer_tokens(std::uint64_t key, std::int64_t count, std::int32_t vocab_size);
};

/// The benchmarks' max_tokens for `r` (its output_tokens, ignore_eos and eos_token_id set): none
/// when it stops at EOS (EOS ends it), output_tokens otherwise.
void set_default_max_tokens(RequestSpec& r);

/// Token i (0-based) that a request with this output_seed generates: deterministic, in
/// [0, vocab_size), never `avoid` (the EOS token; -1 for none) when vocab_size > 1.
[[nodiscard]] std::int32_t output_token(std::uint64_t output_seed, std::int64_t i,
                                        std::int32_t vocab_size, std::int32_t avoid = -1);

/// Writes output_token(output_seed, i, vocab_size, avoid) for i in [0, count) to dst (vectorized).
void fill_output_tokens(std::int32_t* dst, std::uint64_t output_seed, std::int64_t count,
                        std::int32_t vocab_size, std::int32_t avoid = -1);

/// Token j of the content stream keyed by `key`, in [0, vocab_size). Precondition: vocab_size >= 1.
[[nodiscard]] std::int32_t pseudo_token(std::uint64_t key, std::int64_t j, std::int32_t vocab_size);

/// Appends tokens [0, count) of content stream `key` to `out`.
void append_pseudo_tokens(std::vector<std::int32_t>& out, std::uint64_t key, std::int64_t count,
                          std::int32_t vocab_size);

/// The key of a content stream: mixes the scenario seed, a kind tag ("user", "system", ...) and
/// an index.
[[nodiscard]] std::uint64_t content_key(std::uint64_t seed, std::string_view kind,
                                        std::uint64_t index);

class RequestSource {
 public:
  virtual ~RequestSource() = default;
  /// Next open-loop request in nondecreasing arrival order, or nullopt when the open-loop stream is
  /// exhausted.
  virtual std::optional<RequestSpec> next() = 0;
  /// The engine calls this when a request finishes at finish_ns with the tokens it generated; a
  /// multi-turn session returns its next turn (prompt = previous prompt + these outputs + new user
  /// text, arrival = finish + think time).
  virtual std::optional<RequestSpec> on_finished(const RequestSpec& done, SimTimeNs finish_ns,
                                                 std::span<const std::int32_t> outputs) {
    (void)done;
    (void)finish_ns;
    (void)outputs;
    return std::nullopt;
  }
  /// The engine calls this instead of on_finished when a request is refused at its arrival or
  /// aborted by its client: a multi-turn session ends there.
  virtual void on_dropped(const RequestSpec& done) { (void)done; }
};

/// Builds the request source of a parsed `workload:` section (sim/workload/workload_config.h):
/// a trace reader (which opens its file) or the synthetic generator, with the scenario's seed and
/// the model's vocab size (>= 1; ConfigError otherwise).
[[nodiscard]] std::unique_ptr<RequestSource> make_request_source(const WorkloadConfig& workload,
                                                                 std::uint64_t seed,
                                                                 std::int32_t vocab_size);

}  // namespace kvsim
