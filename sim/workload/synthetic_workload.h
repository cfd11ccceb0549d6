#pragma once
// The synthetic request generator.
//
// workload:
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
//                               emits EOS (finish reason "stop", see RequestSpec::max_tokens)
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
//     {turns: DIST, think_time_s: DIST, user_tokens: DIST}
//   ignore_eos: true, eos_token_id: (none)
// DIST is a sim/workload/distribution.h form. System prompt and template lengths are drawn once, at
// start. share is the fraction of requests that use a prefix at all. prefix_group of a request is
// (sp + 1) * (F + 1) + (fs + 1) - 1 with sp / fs its system prompt / template index (-1 none) and
// F the template count: the system prompt index when there are no templates, and -1 for none.
//
// A follow-up turn's output length is a fresh draw of output_tokens (with `lengths`: the output
// of a fresh row).
// Random streams (sim/rng.h): workload.arrivals, workload.lengths, workload.prefix_choice,
// workload.prefix_lengths, workload.sessions; each follow-up turn draws from its own generator
// keyed by (session, turn), so a session's content does not depend on when the engine finishes it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/common/rng.h"
#include "sim/workload/distribution.h"
#include "sim/workload/workload.h"

namespace kvsim {

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

/// A pool of shared prefixes (system prompts or few-shot templates).
struct PrefixPoolConfig {
  std::int64_t count = 0;
  std::int64_t examples = 1;  // few-shot: examples per template (system prompts: 1)
  Distribution tokens = Distribution::fixed(0);  // per prompt, or per example
  double zipf_s = 0.0;                           // popularity: 0 = uniform
  double share = 1.0;
};

struct SessionConfig {
  Distribution turns = Distribution::fixed(1);
  Distribution think_time_s = Distribution::fixed(0);
  Distribution user_tokens = Distribution::fixed(1);
};

/// `lengths:` -- (prompt, output) pairs drawn jointly, one row per request.
struct LengthTable {
  std::string file;                                        // as resolved
  std::vector<std::int64_t> prompt_tokens, output_tokens;  // one entry per data row, >= 1
  /// Reads the CSV at `path` (columns prompt_tokens and output_tokens, whole numbers >= 1);
  /// ConfigError naming the file and row on a bad one.
  static LengthTable from_csv(const std::string& path);
  /// A row, uniformly (one uniform_int draw).
  std::size_t draw_row(RngStream& rng) const;
};

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
  bool ignore_eos = true;
  std::optional<std::int32_t> eos_token_id;
};

/// Reads the synthetic keys of `workload:` (the caller has checked the key set).
[[nodiscard]] SyntheticWorkloadConfig parse_synthetic_workload(const YAML::Node& workload,
                                                               const YamlContext& ctx);
/// The resolved `workload:` section: every key parse_synthetic_workload reads, with the value it
/// used (the arrival keys of its process, distributions in Distribution::to_yaml form); an absent
/// duration_s, prefix pool, sessions or eos_token_id stays absent. Parsing it gives `c` back.
[[nodiscard]] YAML::Node synthetic_workload_yaml(const SyntheticWorkloadConfig& c);

class SyntheticSource final : public RequestSource {
 public:
  SyntheticSource(SyntheticWorkloadConfig config, std::uint64_t seed, std::int32_t vocab_size);
  std::optional<RequestSpec> next() override;
  std::optional<RequestSpec> on_finished(const RequestSpec& done, SimTimeNs finish_ns,
                                         std::span<const std::int32_t> outputs) override;

 private:
  struct Prefix {
    std::vector<std::int64_t> segment_tokens;  // one entry per example (1 for a system prompt)
  };
  std::optional<SimTimeNs> next_arrival();
  std::int64_t choose(const PrefixPoolConfig& pool, const std::optional<ZipfSampler>& zipf);
  void defer_prefix(RequestSpec& r, std::string_view kind, std::int64_t index,
                    const Prefix& prefix) const;

  SyntheticWorkloadConfig config_;
  std::uint64_t seed_;
  std::int32_t vocab_size_;
  RngStream arrivals_, lengths_, prefix_choice_, sessions_rng_;
  std::optional<ZipfSampler> system_zipf_, few_shot_zipf_;
  std::vector<Prefix> system_prompts_, templates_;
  std::int64_t emitted_ = 0;  // open-loop requests so far
  std::uint64_t next_id_ = 0;
  SimTimeNs clock_ns_ = 0;                                        // last open-loop arrival
  std::unordered_map<std::int64_t, std::int32_t> session_turns_;  // live sessions -> total turns
};

}  // namespace kvsim
