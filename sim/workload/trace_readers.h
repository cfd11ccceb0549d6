#pragma once
// Streaming trace readers: one row is read per next(), so memory never grows with the trace.
//
// The `workload.trace` keys: sim/workload/workload_config.h.
//
// Formats:
//   azure     CSV TIMESTAMP,ContextTokens,GeneratedTokens; TIMESTAMP like 2023-11-16
//             18:15:46.6805900; arrivals relative to the first row.
//   mooncake  JSONL {"timestamp": ms, "input_length", "output_length", "hash_ids": [...]}; hash
//             id h gives hash_block_tokens pseudo-tokens keyed by h alone (independent of the
//             seed), the last block cut to input_length - hash_block_tokens * (n - 1); arrivals
//             relative to the first row.
//   csv       header with arrival_s, prompt_tokens, output_tokens[, prefix_group][, prefix_tokens]
//             [, max_tokens][, ignore_eos][, eos_token_id]
//   jsonl     {"arrival_s", "prompt_tokens", "output_tokens"[, "prefix_group"][, "prefix_tokens"]
//             [, "max_tokens"][, "ignore_eos"][, "eos_token_id"]}
//             arrival_s is used as given (not shifted to the first row).
// Per-request limits (csv, jsonl and mooncake rows; an empty CSV cell or a JSON null is absent):
// `ignore_eos` (true/false; CSV also 1/0) and `eos_token_id` (in [0, vocab)) override the
// workload's; `max_tokens` (>= 1) is what the client sends. Without it the request sends
// max_tokens = its output length when it ignores EOS, and none when it stops at EOS (the model
// emits EOS as its output-length-th token; RequestSpec). A row that sets ignore_eos false needs an
// eos_token_id (its own or the workload's).
// An output length of 0 becomes 1 (vLLM requires max_tokens >= 1). A row that does not parse, a
// prompt of 0 tokens, an impossible limit (max_tokens of 0, negative or not an integer; a negative
// eos_token_id) or an arrival earlier than the previous row's is a ConfigError "file:line:col".

#include <cstdint>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/workload/workload.h"
#include "sim/workload/workload_config.h"

namespace kvsim {

/// One trace row before token synthesis.
struct TraceRow {
  std::int64_t timestamp_ns = 0;  // raw, before shifting and scaling
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  std::int32_t prefix_group = -1;
  std::int64_t prefix_tokens = -1;  // -1: the config's default
  std::vector<std::int64_t> hash_ids;
  // Per-request limits; absent: the workload's (see the format notes above).
  std::optional<std::int32_t> max_tokens;
  std::optional<bool> ignore_eos;
  std::optional<std::int32_t> eos_token_id;
};

class TraceSource final : public RequestSource {
 public:
  /// Opens the trace (ConfigError at config.path_at when it cannot) and reads its header if it
  /// has one; each request gets `per_request`'s keys.
  TraceSource(TraceConfig config, PerRequestConfig per_request, std::uint64_t seed,
              std::int32_t vocab_size);
  std::optional<RequestSpec> next() override;

 private:
  std::optional<TraceRow> read_row();
  TraceRow parse_azure(const std::string& line);
  TraceRow parse_generic_csv(const std::string& line);
  TraceRow parse_json_row(const std::string& line);
  /// The optional per-request columns of a generic CSV row into `r`.
  void parse_csv_limits(TraceRow& r);
  [[noreturn]] void fail(std::int64_t col, const std::string& message) const;

  TraceConfig config_;
  PerRequestConfig per_request_;
  std::uint64_t seed_;
  std::int32_t vocab_size_;
  std::ifstream in_;
  std::int64_t line_no_ = 0;
  std::int64_t emitted_ = 0;
  std::optional<std::int64_t> first_timestamp_ns_;
  SimTimeNs last_arrival_ns_ = 0;
  std::vector<std::string> fields_;
  // CSV column indexes (generic CSV header; Azure header).
  std::size_t col_time_ = 0, col_prompt_ = 1, col_output_ = 2;
  std::optional<std::size_t> col_group_, col_prefix_tokens_;
  std::optional<std::size_t> col_max_tokens_, col_ignore_eos_, col_eos_;
};

}  // namespace kvsim
