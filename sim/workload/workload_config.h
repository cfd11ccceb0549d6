#pragma once
// The scenario's `workload:` section as typed structs: parsed and validated once, when the
// scenario loads (parse_workload_config), written back whole for config.resolved.yaml
// (workload_config_yaml). A new key is added in three places here: its struct member, its line in
// the parser and its line in the writer (and in the key table of its map).
//
// workload: (synthetic, see sim/workload/synthetic_workload.h for what the generator does)
//   num_requests: 1000          open-loop requests (with sessions: sessions; follow-up turns extra)
//   duration_s: 600             optional: no arrival after this time
//   arrival:                    default {process: poisson, rate_per_s: 10}
//     {process: poisson, rate_per_s: R}
//     {process: gamma, rate_per_s: R, cv: C}          gamma inter-arrival gaps, mean 1/R
//     {process: constant, rate_per_s: R}              one every 1/R s
//     {process: bursts, burst_size: N, interval_s: T, spacing_s: 0}   N at once every T s
//     {process: timestamps, times_s: [0, 0.5, ...]}   given times (num_requests defaults to count)
//     {process: all_at_once}                           every request at t = 0 (offline batch)
//   prompt_tokens: DIST         the request's own text (after any shared prefix), >= 1
//   output_tokens: DIST         output length, >= 1: max_tokens with ignore_eos (the benchmarks'
//                               way); with ignore_eos false and an eos_token_id, where the model
//                               emits EOS (finish reason "stop", see RequestSpec::output_tokens)
//   lengths: FILE               instead of prompt_tokens and output_tokens: a CSV whose columns
//                               prompt_tokens and output_tokens give (prompt, output) pairs; each
//                               request draws one row, uniformly with replacement, so the two
//                               lengths keep their joint distribution (scenarios/lengths/ ships
//                               the PagedAttention paper's ShareGPT- and Alpaca-like presets)
//   system_prompts:             optional shared prefix, prepended first
//     {count: 8, tokens: DIST, popularity: {zipf: 1.1} | uniform, share: 1.0}
//   few_shot:                   optional shared template after the system prompt
//     {count: 4, examples: 5, example_tokens: DIST, popularity: ..., share: 1.0}
//   sessions:                   optional multi-turn conversations
//     {turns: DIST, think_time_s: DIST (default 0), user_tokens: DIST}
//   ignore_eos: true, eos_token_id: (none)      per request, for both kinds of workload
//   stop_at_eos_fraction: F     optional, instead of ignore_eos: each request stops at EOS with
//                               probability F (stream workload.stop_at_eos), else ignores it and
//                               sends max_tokens (a follow-up turn keeps its session's choice);
//                               F > 0 needs eos_token_id
//   client_timeout_s: T         optional, for both kinds of workload: a request not finished T s
//                               after its arrival is aborted (its client closes the connection)
//   n: 1                        parallel sampling: each request asks for n samples (vLLM's
//                               SamplingParams.n), each generating the request's output length
//                               with tokens of its own; requests.csv has a row per sample,
//                               request_id = the request's id * n + the sample's index
//   parallel_sampling: fanout   fanout: n independent requests of the same prompt, queued in
//                               sample order (what vLLM v0.7.2's V0 engine does, and v0.8.5's
//                               V1; kvsim fans out under vllm-0.7.2 too, whose V1 ignored n) |
//                               fork: one sequence group whose n - 1 children fork from the
//                               first sample after the prompt, sharing its blocks with
//                               copy-on-write (V0 engines before v0.7; vllm-0.7.2-v0 only)
// DIST is a sim/workload/distribution.h form.
//
// workload: (trace, see sim/workload/trace_readers.h for the formats)
//   trace:
//     format: azure | mooncake | csv | jsonl
//     path: FILE                 relative to the scenario's folder, else to the working directory
//     time_scale: 1.0            arrival = (timestamp offset) * time_scale (0.5 = twice as fast)
//     max_requests: N            optional cap (workload.num_requests caps too)
//     hash_block_tokens: 512     mooncake: prompt tokens named by one hash id
//     prefix_tokens: 0           csv/jsonl: leading tokens shared by rows of the same prefix_group
//                                (a prefix_tokens column overrides it per row)
//   num_requests, ignore_eos, eos_token_id, client_timeout_s (a row may give its own max_tokens,
//   ignore_eos and eos_token_id: sim/workload/trace_readers.h)
// A trace gives its own arrivals and lengths: the synthetic keys beside `trace:` are errors.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sim/common/rng.h"
#include "sim/common/yaml_util.h"
#include "sim/workload/distribution.h"

namespace kvsim {

/// `workload.arrival`: when open-loop requests arrive.
struct ArrivalConfig {
  enum class Process { kPoisson, kGamma, kConstant, kBursts, kTimestamps, kAllAtOnce };
  Process process = Process::kPoisson;
  double rate_per_s = 10.0;
  double cv = 1.0;
  std::int64_t burst_size = 1;
  double interval_s = 1.0;
  double spacing_s = 0.0;
  std::vector<double> times_s;
};

/// A pool of shared prefixes (`workload.system_prompts` or `workload.few_shot`).
struct PrefixPoolConfig {
  std::int64_t count = 0;
  std::int64_t examples = 1;  // few-shot: examples per template (system prompts: 1)
  Distribution tokens = Distribution::fixed(0);  // per prompt, or per example
  double zipf_s = 0.0;                           // popularity: 0 = uniform
  double share = 1.0;
};

/// `workload.sessions`: multi-turn conversations.
struct SessionConfig {
  Distribution turns = Distribution::fixed(1);
  Distribution think_time_s = Distribution::fixed(0);
  Distribution user_tokens = Distribution::fixed(1);
};

/// `workload.lengths:` -- (prompt, output) pairs drawn jointly, one row per request. Read once,
/// when the scenario loads.
struct LengthTable {
  std::string file;                                        // as resolved
  std::vector<std::int64_t> prompt_tokens, output_tokens;  // one entry per data row, >= 1
  /// Reads the CSV at `path` (columns prompt_tokens and output_tokens, whole numbers >= 1);
  /// ConfigError naming the file and row on a bad one.
  static LengthTable from_csv(const std::string& path);
  /// A row, uniformly (one uniform_int draw).
  std::size_t draw_row(RngStream& rng) const;
};

/// The synthetic generator's keys of `workload:`.
struct SyntheticWorkloadConfig {
  std::int64_t num_requests = 1000;
  std::optional<double> duration_s;
  ArrivalConfig arrival;
  Distribution prompt_tokens = Distribution::fixed(1);
  Distribution output_tokens = Distribution::fixed(1);
  std::shared_ptr<const LengthTable> lengths;  // set: replaces prompt_tokens and output_tokens
  std::optional<PrefixPoolConfig> system_prompts;
  std::optional<PrefixPoolConfig> few_shot;
  std::optional<SessionConfig> sessions;
  std::optional<double> stop_at_eos_fraction;  // given: replaces per_request.ignore_eos
};

/// `workload.trace` (with workload.num_requests folded into max_requests).
struct TraceConfig {
  enum class Format { kAzure, kMooncake, kCsv, kJsonl };
  Format format = Format::kAzure;
  std::string path;   // as resolved
  SourceLoc path_at;  // where the scenario names it (the reader opens it when the run starts)
  double time_scale = 1.0;
  std::optional<std::int64_t> max_requests;
  std::int64_t hash_block_tokens = 512;
  std::int64_t prefix_tokens = 0;
};

/// The keys of `workload:` that apply to every request, whichever the source.
struct PerRequestConfig {
  enum class ParallelSampling : std::uint8_t { kFanout, kFork };
  bool ignore_eos = true;
  std::optional<std::int32_t> eos_token_id;
  std::optional<double> client_timeout_s;  // absent: clients wait for ever
  std::int64_t n = 1;  // samples per request
  ParallelSampling parallel_sampling = ParallelSampling::kFanout;
};

/// The scenario's `workload:` section: a synthetic generator or a trace, and the per-request keys.
struct WorkloadConfig {
  std::variant<SyntheticWorkloadConfig, TraceConfig> source;
  PerRequestConfig per_request;

  /// The trace config, or nullptr for a synthetic workload.
  [[nodiscard]] const TraceConfig* trace() const { return std::get_if<TraceConfig>(&source); }
  /// The synthetic config, or nullptr for a trace.
  [[nodiscard]] const SyntheticWorkloadConfig* synthetic() const {
    return std::get_if<SyntheticWorkloadConfig>(&source);
  }
};

/// The keys `workload:` accepts (synthetic and trace together).
inline constexpr std::string_view kWorkloadKeys[] = {
    // the synthetic generator (num_requests also caps a trace)
    "num_requests", "duration_s", "arrival", "prompt_tokens", "output_tokens", "lengths",
    "system_prompts", "few_shot", "sessions", "stop_at_eos_fraction",
    // trace
    "trace",
    // every request
    "ignore_eos", "eos_token_id", "client_timeout_s", "n", "parallel_sampling"};
/// The keys of `workload.trace`.
inline constexpr std::string_view kTraceKeys[] = {
    "format", "path", "time_scale", "max_requests", "hash_block_tokens", "prefix_tokens"};
/// The keys of `workload.system_prompts` and `workload.few_shot`.
inline constexpr std::string_view kSystemPromptsKeys[] = {"count", "tokens", "popularity", "share"};
inline constexpr std::string_view kFewShotKeys[] = {"count", "examples", "example_tokens",
                                                    "popularity", "share"};
/// The keys of `workload.sessions`.
inline constexpr std::string_view kSessionKeys[] = {"turns", "think_time_s", "user_tokens"};
/// The keys of `workload.arrival` for `process` (`process` itself first).
[[nodiscard]] std::span<const std::string_view> arrival_keys(ArrivalConfig::Process process);
/// The name of a trace format as `format:` writes it.
[[nodiscard]] std::string_view trace_format_name(TraceConfig::Format format);

/// Reads and validates `workload:` (required): every key, every distribution (an empirical CSV is
/// read here, once), the trace file's existence. A `trace:` key selects a trace. Throws
/// ConfigError at the offending key.
[[nodiscard]] WorkloadConfig parse_workload_config(const YAML::Node& workload,
                                                   const YamlContext& ctx);

/// The resolved `workload:` section: every key the source reads, with the value it uses (null for
/// an absent optional: duration_s, system_prompts, few_shot, sessions, eos_token_id,
/// stop_at_eos_fraction, client_timeout_s, trace.max_requests; ignore_eos is null when
/// stop_at_eos_fraction replaces it). The arrival keys are those of its process, distributions are
/// in Distribution::to_yaml form, a trace has hash_block_tokens (mooncake) or prefix_tokens (csv,
/// jsonl) and its cap in max_requests. Parsing it gives `c` back.
[[nodiscard]] YAML::Node workload_config_yaml(const WorkloadConfig& c);

}  // namespace kvsim
