#pragma once
// The synthetic request generator (its `workload:` keys: sim/workload/workload_config.h).
//
// System prompt and template lengths are drawn once, at start.
// share is the fraction of requests that use a prefix at all. prefix_group of a request is
// (sp + 1) * (F + 1) + (fs + 1) - 1 with sp / fs its system prompt / template index (-1 none) and
// F the template count: the system prompt index when there are no templates, and -1 for none.
//
// Random streams (sim/rng.h): workload.arrivals, workload.lengths, workload.prefix_choice,
// workload.prefix_lengths, workload.sessions, workload.stop_at_eos (with stop_at_eos_fraction:
// whether a session's first request stops at EOS; its follow-up turns keep the choice); each
// follow-up turn draws from its own generator keyed by (session, turn), so a session's content does
// not depend on when the engine finishes it.

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "sim/common/rng.h"
#include "sim/workload/workload.h"
#include "sim/workload/workload_config.h"

namespace kvsim {

class SyntheticSource final : public RequestSource {
 public:
  /// A generator of `config`'s requests, each with `per_request`'s keys. O(prefix segments).
  SyntheticSource(SyntheticWorkloadConfig config, PerRequestConfig per_request, std::uint64_t seed,
                  std::int32_t vocab_size);
  std::optional<RequestSpec> next() override;
  std::optional<RequestSpec> on_finished(const RequestSpec& done, SimTimeNs finish_ns,
                                         std::span<const std::int32_t> outputs) override;
  /// A refused or aborted turn ends its session.
  void on_dropped(const RequestSpec& done) override;

 private:
  struct Prefix {
    std::vector<std::int64_t> segment_tokens;  // one entry per example (1 for a system prompt)
  };
  std::optional<SimTimeNs> next_arrival();
  std::int64_t choose(const PrefixPoolConfig& pool, const std::optional<ZipfSampler>& zipf);
  void defer_prefix(RequestSpec& r, std::string_view kind, std::int64_t index,
                    const Prefix& prefix) const;

  SyntheticWorkloadConfig config_;
  PerRequestConfig per_request_;
  std::uint64_t seed_;
  std::int32_t vocab_size_;
  RngStream arrivals_, lengths_, prefix_choice_, sessions_rng_, stop_at_eos_;
  std::optional<ZipfSampler> system_zipf_, few_shot_zipf_;
  std::vector<Prefix> system_prompts_, templates_;
  std::int64_t emitted_ = 0;  // open-loop requests so far
  std::uint64_t next_id_ = 0;
  SimTimeNs clock_ns_ = 0;                                        // last open-loop arrival
  std::unordered_map<std::int64_t, std::int32_t> session_turns_;  // live sessions -> total turns
};

}  // namespace kvsim
