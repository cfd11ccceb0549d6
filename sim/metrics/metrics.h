#pragma once
// MetricsCollector: the StepObserver that turns a run into the numbers of sim/OUTPUTS.md --
// per-step records (steps.csv), per-request records (requests.csv, through a sink), the KV memory
// breakdown at recorded steps and the summary statistics (summary.json, metrics.prom).
// Memory is bounded: latency statistics keep exact samples up to QuantileSketch::kExactLimit and a
// fixed log-linear histogram beyond.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sim/engine/observer.h"
#include "sim/engine/offload_tier.h"
#include "sim/metrics/overload.h"

namespace kvsim {

__extension__ typedef __int128 Int128;  // exact moment sums (GCC/Clang)

/// Streaming mean / std / percentiles of non-negative integer ns values. Exact (numpy's linear
/// interpolation) while count <= kExactLimit; afterwards percentiles come from a log-linear
/// histogram with 1/1024 relative resolution (the bucket's midpoint). Mean and std come from exact
/// integer sums. add() is O(1) and allocates only while the exact samples grow.
class QuantileSketch {
 public:
  static constexpr std::size_t kExactLimit = std::size_t{1} << 18;
  /// Adds `n` samples of `value_ns`.
  void add(std::int64_t value_ns, std::int64_t n = 1);
  std::int64_t count() const { return count_; }
  double mean() const;
  /// Population standard deviation (numpy's np.std), 0 when empty.
  double stddev() const;
  /// Percentile p in [0, 100], 0 when empty. Sorts the exact samples on first use after an add.
  double percentile(double p);

 private:
  static std::size_t bucket_of(std::int64_t v);
  static double bucket_mid(std::size_t b);
  std::int64_t count_ = 0;
  Int128 sum_ = 0, sum_sq_ = 0;
  std::vector<std::int64_t> exact_;
  bool sorted_ = true;
  std::vector<std::int64_t> hist_;  // allocated when the exact limit is passed
};

/// A Prometheus histogram with fixed upper bounds (le), in the unit of its observations.
struct PromHistogram {
  std::vector<double> bounds;
  std::vector<std::int64_t> counts;  // one per bound, plus +Inf
  double sum = 0;
  std::int64_t count = 0;
  void init(std::vector<double> b) {
    bounds = std::move(b);
    counts.assign(bounds.size() + 1, 0);
  }
  /// Records `n` observations of `v`.
  void observe(double v, std::int64_t n = 1);
};

/// One recorded step (a steps.csv row): every steps_every-th step and the last one. Counters are
/// summed since the previous recorded row, so the rows add up to the run's totals.
struct StepRecord {
  std::int64_t step = -1;  // -1: no step
  SimTimeNs time_ns = 0;   // step start
  SimTimeNs duration_ns = 0;
  std::int64_t num_running = 0, num_waiting = 0, num_scheduled = 0;
  std::int64_t prefill_tokens = 0, decode_tokens = 0, batch_tokens = 0;
  double kv_cache_usage_perc = 0;
  std::int64_t num_free_blocks = 0;
  KVBreakdown slots;
  std::int64_t prefix_queries = 0, prefix_hits = 0, preemptions = 0, evictions = 0,
               blocks_allocated = 0;
  // vLLM V0 only (MetricsCollector::enable_v0): gauges at the row's step, then counters summed
  // since the previous row.
  std::int64_t num_swapped = 0;
  double cpu_cache_usage_perc = 0;
  std::int64_t blocks_without_sharing = 0, blocks_used = 0;
  std::int64_t swapped_in_blocks = 0, swapped_out_blocks = 0, cow_copies = 0, preemptions_swap = 0,
               preemptions_recompute = 0;
  // Several KV cache groups (MetricsCollector::enable_kv_groups): each group's share of the pool
  // at the row's step (valid until the next record).
  std::span<const KVGroupShare> groups;
  // The CPU tier (MetricsCollector::enable_offload): its blocks in use at the row's step, then
  // counters summed since the previous row (empty steps' included).
  std::int64_t cpu_tier_blocks_used = 0;
  std::int64_t cpu_tier_hit_tokens = 0, cpu_tier_loaded_blocks = 0, cpu_tier_stored_blocks = 0,
               cpu_tier_evicted_blocks = 0, bytes_gpu_to_cpu = 0, bytes_cpu_to_gpu = 0;
};

/// What a run's KV cache group is (summary.json names it so).
struct KVGroupLabel {
  std::string kind;                // full_attention, mla, sliding_window, chunked_local, mamba
  std::int64_t window_tokens = 0;  // sliding_window / chunked_local: the window or chunk
  std::int64_t num_layers = 0;     // the layers sharing the group's block table
  std::int64_t block_size = 0;     // tokens per block of the group
};

/// Receives recorded steps and finished requests (the CSV writers).
class RecordSink {
 public:
  virtual ~RecordSink() = default;
  virtual void on_step_record(const StepRecord&) {}
  virtual void on_request_record(const RequestRecord&) {}
};

class MetricsCollector : public StepObserver {
 public:
  /// `final_kv_tokens` is owned by the simulator (indexed by Request::index()); `steps_every`
  /// selects recorded steps; `sink` (may be null) receives records.
  MetricsCollector(const std::vector<std::int64_t>* final_kv_tokens, std::int64_t steps_every,
                   std::int64_t max_model_len, RecordSink* sink);

  void on_step(const StepView& v) override;
  /// Fast-forward runs (not with the CPU tier, whose counters move per step).
  bool takes_decode_runs() const override { return offload_ == nullptr; }
  /// The next recorded step (steps_every): its row needs the engine as that step leaves it.
  std::int64_t next_step_needed(std::int64_t step) const override;
  void on_decode_run(const DecodeRun& run) override;
  void on_request_done(const RequestRecord& r) override;
  void on_simulation_end(SimTimeNs end_ns, const EngineCore& e) override;

  void on_lookup(std::int64_t query_tokens, std::int64_t hit_tokens) override;
  void on_empty_step(const StepView& v) override;
  /// A cluster run's end, for a collector fed by every replica (sim/cluster/): the pool counters
  /// (evictions, blocks allocated) and the final queue lengths are summed over `engines`, the
  /// final KV usage is their mean; the figures over recorded rows (the KV breakdown, the KV cache
  /// groups' usage and breakdown) are over every row of `replicas`, the replicas' own collectors
  /// (this one records none). Used instead of on_simulation_end.
  void on_cluster_end(std::span<const EngineCore* const> engines,
                      std::span<const MetricsCollector* const> replicas);

  /// summary.json text (pretty, fixed precision, deterministic). `header` holds the leading keys
  /// (name, seed, profile, mode, block_size, num_gpu_blocks, enable_prefix_caching) pre-rendered.
  std::string summary_json(const std::string& header);
  /// Keep the Prometheus histograms (off by default: they cost a search per generated token).
  void enable_prometheus(bool on) { prom_ = on; }
  /// vLLM V0's figures (swaps, copy-on-write, the CPU pool, the swapped queue, preemptions by
  /// mode, KV memory saved by sharing) in the records, summary and Prometheus text; `page_bytes`
  /// is one block over all layers (0 without a model: no byte counts).
  void enable_v0(std::int64_t page_bytes) {
    v0_ = true;
    page_bytes_ = page_bytes;
  }
  /// Each KV cache group's share of the pool at recorded steps (StepRecord::groups, steps.csv's
  /// g<k>_* columns) and its means in summary.json (`kv_cache_groups`): for an engine of several
  /// groups (vLLM v0.20 with a hybrid model), one label per group in the engine's order.
  void enable_kv_groups(std::vector<KVGroupLabel> labels);
  /// The CPU tier's figures (`stats`: the tier's running totals, which must outlive the
  /// collector): steps.csv's cpu_tier columns, summary.json's empty_steps and kv_offload, and
  /// vLLM's connector series in the Prometheus text.
  void enable_offload(const OffloadTierStats* stats) { offload_ = stats; }
  /// metrics.prom text with vLLM's metric names; `model_name` labels the series.
  std::string prometheus_text(const std::string& model_name);
  /// The number of requests completed so far (for progress).
  std::int64_t completed() const { return completed_; }
  std::int64_t rejected() const { return rejected_; }
  std::int64_t aborted() const { return aborted_; }
  /// Whether the run so far is overloaded (sim/metrics/overload.h), with its rates.
  OverloadDetector::Verdict overload() const { return overload_.verdict(); }
  std::int64_t num_steps() const { return num_steps_; }

 private:
  const std::vector<std::int64_t>* final_kv_tokens_;
  std::int64_t steps_every_;
  RecordSink* sink_;
  bool prom_ = false;

  // Requests.
  std::int64_t completed_ = 0, rejected_ = 0, aborted_ = 0;
  std::int64_t aborted_output_tokens_ = 0;  // delivered before the aborts
  OverloadDetector overload_;
  std::int64_t total_input_ = 0, total_output_ = 0;
  std::int64_t first_lookup_hits_ = 0, first_lookup_prompt_ = 0;
  SimTimeNs first_arrival_ns_ = -1, last_finish_ns_ = -1;
  QuantileSketch ttft_, tpot_, itl_, e2el_, queue_;
  PromHistogram h_ttft_, h_tpot_, h_e2e_, h_prompt_, h_gen_, h_queue_;

  // Steps.
  std::int64_t num_steps_ = 0;
  double sum_usage_ = 0, max_usage_ = 0;
  double sum_running_ = 0, sum_waiting_ = 0, sum_batch_size_ = 0, sum_batch_tokens_ = 0;
  std::int64_t max_batch_size_ = 0;
  std::int64_t num_recorded_ = 0;
  std::array<double, 6> sum_breakdown_frac_{};
  // KV cache groups (enable_kv_groups): labels, the shares at the latest recorded step, and sums
  // over recorded steps of each group's usage and breakdown fractions.
  struct GroupSums {
    double usage = 0, max_usage = 0;
    std::array<double, 4> frac{};  // token_states, reservation, internal_fragmentation, cached_free
  };
  std::vector<KVGroupLabel> group_labels_;
  std::vector<KVGroupShare> group_shares_;
  std::vector<GroupSums> group_sums_;
  void summary_groups(std::string& o) const;
  std::int64_t last_running_ = 0, last_waiting_ = 0;
  double last_usage_ = 0;

  // Counters (totals) and the state at the previous recorded step (for per-row deltas).
  std::int64_t prefix_queries_ = 0, prefix_hits_ = 0, num_preemptions_ = 0;
  std::int64_t num_evictions_ = 0, num_blocks_allocated_ = 0;
  StepRecord pending_;  // the latest step not yet recorded (step -1: none), with
                        // counters summed since the previous recorded row
  void record_pending(const EngineCore& e);
  /// One step's figures (on_step's, or a decode run's).
  struct StepTotals {
    std::int64_t step = 0;
    SimTimeNs start_ns = 0, end_ns = 0;
    std::int64_t num_running = 0, num_waiting = 0, batch = 0, batch_tokens = 0;
    std::int64_t prefill_tokens = 0, decode_tokens = 0;
    std::int64_t prefix_queries = 0, prefix_hits = 0, preemptions = 0;
  };
  /// The step's sums and counters (the pool after the step).
  void count_step(const StepTotals& t, const KVPoolStats& pool);
  /// The inter-token latencies of outputs at `end_ns` whose previous tokens came at
  /// `prev_token_ns` (-1: a first token).
  void add_itl(SimTimeNs end_ns, std::span<const SimTimeNs> prev_token_ns);
  /// The step as the latest not yet recorded.
  void set_pending(const StepTotals& t, const KVPoolStats& pool);

  // vLLM V0 (enable_v0).
  bool v0_ = false;
  std::int64_t page_bytes_ = 0;
  std::int64_t ignored_ = 0;
  std::int64_t swapped_in_ = 0, swapped_out_ = 0, cow_copies_ = 0;
  std::int64_t preemptions_swap_ = 0, preemptions_recompute_ = 0;
  std::int64_t num_cpu_blocks_ = 0, max_swapped_ = 0, last_swapped_ = 0;
  double sum_swapped_ = 0, sum_cpu_usage_ = 0, max_cpu_usage_ = 0, last_cpu_usage_ = 0;
  double sum_table_blocks_ = 0, sum_used_blocks_ = 0;
  /// One step's V0 figures: its block moves and preemptions by mode (V0Moves), the swapped queue
  /// after it and the pool after it.
  struct V0Moves {
    std::int64_t swapped_in = 0, swapped_out = 0, copies = 0, by_swap = 0, by_recompute = 0;
  };
  void on_step_v0(const V0Moves& m, std::int64_t num_swapped, const KVPoolStats& pool);
  void summary_v0(std::string& o) const;
  // The CPU tier (enable_offload): its totals, and their values at the previous on_step.
  const OffloadTierStats* offload_ = nullptr;
  OffloadTierStats offload_seen_;
  void take_offload_deltas();
  void summary_offload(std::string& o) const;
  void prometheus_offload(std::string& o, const std::string& label) const;
};

}  // namespace kvsim
