#pragma once
// llm_d: the llm-d / GIE endpoint picker (spec §4.1-4.3) for one scheduling profile: every scorer
// scores each candidate in [0, 1]; total_i = sum over scorers, in the fixed order below, of
// weight_s * clamp(score_s,i, 0, 1); the max-score picker shuffles the candidates uniformly
// (Fisher-Yates from the top, kvsim's stream: the distribution of GIE's PCG shuffle, not its
// numbers), stable-sorts them by total, highest first, and takes the first: ties are broken
// uniformly at random. Scorers (order of summation):
//   queue           (q_max - q_i) / (q_max - q_min); 1 for all when q_max = q_min
//   kv_usage        1 - kv_usage_i
//   prefix          matched_blocks_i / total_blocks (approximate index); 0 without a full block
//   precise_prefix  (raw_i - min) / (max - min) over the endpoints with an entry, 1 for all when
//                   max = min, 0 without an entry (raw = longest leading run from KV events)
//   load_aware      0.5 if q_i = 0, else 0.5 (1 - min(q_i, 128) / 128)
//   active_request  1 if c_i <= idle_threshold, else (c_max - c_i) / c_max * max_busy_score
// A weight of 0 leaves a scorer out.

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sim/cluster/replica_view.h"

namespace kvsim {

struct LlmDWeights {
  double queue = 0, kv_usage = 0, prefix = 0, precise_prefix = 0, load_aware = 0,
         active_request = 0;
};
/// GIE's built-in default (no config file): queue 2, kv-cache-utilization 2, prefix-cache 3.
inline constexpr LlmDWeights kGieDefaultWeights{2, 2, 3, 0, 0, 0};
/// llm-d v0.8.0 deploy/config/epp-config.yaml: prefix-cache-scorer 2.
inline constexpr LlmDWeights kLlmDEppWeights{0, 0, 2, 0, 0, 0};
/// llm-d v0.8.0 epp-precise-prefix-cache-config.yaml: precise 2, kv-cache-utilization 1, queue 1.
inline constexpr LlmDWeights kLlmDPreciseWeights{1, 1, 0, 2, 0, 0};
/// llm-d v0.8.0 epp-estimate-prefix-cache-config.yaml: prefix-cache 1, load-aware 1.
inline constexpr LlmDWeights kLlmDEstimateWeights{0, 0, 1, 0, 1, 0};

/// Endpoint i's inputs.
struct LlmDEndpoint {
  std::int64_t num_waiting = 0;     // scraped vllm:num_requests_waiting
  double kv_usage = 0;              // scraped vllm:kv_cache_usage_perc
  std::int64_t matched_blocks = 0;  // approximate prefix index
  std::int64_t precise_raw = -1;    // precise index's longest run; -1: no entry
  std::int64_t active = 0;          // router-local active requests
};

struct LlmDParams {
  LlmDWeights weights = kGieDefaultWeights;
  std::int64_t idle_threshold = 0;
  double max_busy_score = 1.0;
};

class LlmDPicker {
 public:
  LlmDPicker(LlmDParams params, std::uint64_t seed);
  /// One decision for a prompt of `total_blocks` full blocks. O(N); allocates nothing once
  /// warm. score = the chosen total, runner-up the next in the sorted order; matched_blocks the
  /// chosen endpoint's approximate match; branch "score" or "tie_random" (several at the top).
  RouteDecision pick(std::span<const LlmDEndpoint> endpoints, std::int64_t total_blocks);
  /// The totals of the last pick, by endpoint.
  std::span<const double> totals() const { return totals_; }

 private:
  LlmDParams params_;
  RngStream rng_;
  std::vector<double> totals_;
  std::vector<std::int32_t> order_;
};

}  // namespace kvsim
