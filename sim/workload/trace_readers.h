#pragma once
// Streaming trace readers: one row is read per next(), so memory never grows with the trace.
//
// workload:
//   trace:
//     format: azure | mooncake | csv | jsonl
//     path: FILE                 relative to the scenario's folder, else to the working directory
//     time_scale: 1.0            arrival = (timestamp offset) * time_scale (0.5 = twice as fast)
//     max_requests: N            optional cap (workload.num_requests caps too)
//     hash_block_tokens: 512     mooncake: prompt tokens named by one hash id
//     prefix_tokens: 0           csv/jsonl: leading tokens shared by rows of the same prefix_group
//                                (a prefix_tokens column overrides it per row)
//   ignore_eos / eos_token_id / client_timeout_s as for synthetic workloads.
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

namespace kvsim {

struct TraceConfig {
  enum class Format { kAzure, kMooncake, kCsv, kJsonl };
  Format format = Format::kAzure;
  std::string path;
  double time_scale = 1.0;
  std::optional<std::int64_t> max_requests;
  std::int64_t hash_block_tokens = 512;
  std::int64_t prefix_tokens = 0;
  bool ignore_eos = true;
  std::optional<std::int32_t> eos_token_id;
  std::optional<double> client_timeout_s;
};

/// Reads `workload.trace` (and the workload-level caps); checks that the file can be opened.
[[nodiscard]] TraceConfig parse_trace_config(const YAML::Node& workload, const YamlContext& ctx);
/// The resolved `workload:` section: trace {format, path (as resolved), time_scale, max_requests
/// (workload.num_requests folded in; absent when uncapped), hash_block_tokens (mooncake),
/// prefix_tokens (csv, jsonl)}, ignore_eos, and eos_token_id and client_timeout_s (when set).
/// Parsing it gives `c` back.
[[nodiscard]] YAML::Node trace_workload_yaml(const TraceConfig& c);

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
  /// Opens the trace (ConfigError when it cannot) and reads its header if it has one.
  TraceSource(TraceConfig config, std::uint64_t seed, std::int32_t vocab_size);
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
