#pragma once
// A cluster run's own outputs (sim/OUTPUTS.md, "Cluster runs"; shared/spec/cluster-routing.md
// §10): routing.csv (one row per routing decision), the per-replica figures of summary.json
// (ReplicaStats, an observer on one replica) and the cluster keys summary.json adds.

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "sim/engine/observer.h"
#include "sim/metrics/writers.h"

namespace kvsim {

/// One routing decision (a routing.csv row).
struct RoutingRecord {
  std::uint64_t request_id = 0;
  SimTimeNs time_ns = 0;
  std::string_view stage = "route";  // route | prefill | decode
  std::int32_t replica = 0;
  std::string_view branch;
  bool has_score = false;  // score, runner_up_score: empty without
  double score = 0;
  std::int32_t runner_up = -1;  // empty when -1
  double runner_up_score = 0;
  std::int64_t matched_blocks = -1;  // empty when -1
  std::int64_t prompt_blocks = 0;
  SimTimeNs view_age_ns = -1;  // empty when -1 (a router that reads no polled state)
};

/// routing.csv, streamed:
/// request_id,time_s,stage,replica,branch,score,runner_up,runner_up_score,matched_blocks,
/// prompt_blocks,view_age_ms. Scores with 6 decimals. No allocation per row once warm.
class RoutingCsvWriter {
 public:
  explicit RoutingCsvWriter(const std::filesystem::path& path);
  void write(const RoutingRecord& r);
  void close() { file_.close(); }

 private:
  OutFile file_;
  std::string line_;
};

/// The figures of one replica for summary.json's `replicas` (spec §10): an observer attached to
/// that replica's simulator only.
class ReplicaStats : public StepObserver {
 public:
  void on_step(const StepView& v) override;
  void on_empty_step(const StepView& v) override;
  void on_request_done(const RequestRecord& r) override;
  void on_lookup(std::int64_t query_tokens, std::int64_t hit_tokens) override;

  std::int64_t requests_routed = 0, prompt_tokens_routed = 0;  // set by the cluster
  std::string_view role = "mixed";  // set by the cluster: mixed | prefill | decode
  std::string gpu;                 // set by the cluster: the replica's GPU preset
  std::int64_t num_gpu_blocks = 0;  // set by the cluster: its pool
  std::int64_t prefix_cache_queries = 0, prefix_cache_hits = 0;
  std::int64_t first_lookup_hits = 0, first_lookup_prompt = 0;  // served requests
  std::int64_t num_preemptions = 0;
  std::int64_t num_evictions = 0;  // set at the end from the pool
  std::int64_t num_steps = 0;
  double sum_usage = 0, max_usage = 0, sum_running = 0, sum_waiting = 0;
  SimTimeNs busy_ns = 0;  // time with a step in flight

 private:
  SimTimeNs last_end_ns_ = 0;
};

/// The cluster keys of summary.json, each line "  \"key\": value,\n" in the spec's order, for the
/// replicas' stats, the policy name, the decisions per branch (a sorted map: deterministic) and
/// the run's duration (busy_fraction's denominator; 0 in cache_only mode).
[[nodiscard]] std::string cluster_summary_keys(std::span<const ReplicaStats* const> replicas,
                                               std::string_view policy,
                                               const std::map<std::string, std::int64_t>& branches,
                                               double duration_s);

/// A cluster's metrics.prom (spec §10): the texts each replica's MetricsCollector::prometheus_text
/// writes (`engine_texts[r]`, all with the same families and buckets), merged family by family:
/// each family's HELP and TYPE once, then its series of every replica in replica order, labelled
/// `engine="<r>"` after `model_name` (vLLM's per-engine labels, vllm/v1/metrics/loggers.py).
[[nodiscard]] std::string prometheus_by_engine(std::span<const std::string> engine_texts,
                                               const std::string& model_name);

/// Inserts `keys` (lines as cluster_summary_keys writes them) before the closing brace of
/// summary.json text `summary` (MetricsCollector::summary_json's).
[[nodiscard]] std::string insert_summary_keys(const std::string& summary, const std::string& keys);

}  // namespace kvsim
