#pragma once
// run_scenario: one scenario's run folder from start to end: the request source, the latency
// model, the simulator, its observers (metrics, writers) and the files they write. The top of
// sim/: it wires the rooms below it together.

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "sim/engine/simulator.h"
#include "sim/metrics/metrics.h"

namespace kvsim {

/// How run_scenario runs.
struct RunOptions {
  bool check_invariants = false;
  std::function<void(const SimProgress&)> progress;  // empty: no progress reports
  std::uint64_t progress_every_events = 1 << 15;
  StepTimeFn step_time;                                   // empty: the scenario's latency model
  /// false: every step runs on its own whatever engine.fast_forward says (a step_time that does
  /// more than time the batch -- the validation harness's kernels -- must see every step).
  bool fast_forward = true;
  const volatile std::sig_atomic_t* interrupt = nullptr;  // see Simulator::set_interrupt_flag
};

/// What run_scenario produced.
struct RunResult {
  std::filesystem::path folder;  // the committed run folder
  std::string summary_json;      // the text of summary.json
  std::int64_t num_steps = 0;
  std::int64_t fast_forward_steps = 0;  // of num_steps, advanced in fast-forward runs
  std::int64_t requests_done = 0;
  SimTimeNs end_ns = 0;
  /// One line each (no trailing newline), for the user: an overloaded run (sim/OUTPUTS.md).
  std::vector<std::string> warnings;
};

/// Runs `scenario` into `<out_dir>/<name>/` (written as `<name>.tmp-<pid>` and renamed when
/// complete; removed on any error): summary.json, requests.csv, steps.csv, config.resolved.yaml,
/// and trace.json / metrics.prom when the scenario asks. Reads no scenario file again (the
/// Scenario holds everything parsed); opens and streams the trace of a trace workload. Throws
/// ConfigError (a trace that cannot be opened, a bad trace row), RunError (a request that can
/// never fit) or std::runtime_error (I/O).
RunResult run_scenario(const Scenario& scenario, const std::filesystem::path& out_dir,
                       const RunOptions& options = {});

/// run_scenario of a cluster (scenario.cluster.enabled(): N replicas behind a router,
/// sim/cluster/): the single run's files, cluster-wide, plus routing.csv, replicas/<r>/steps.csv,
/// requests.csv's `replica` column and summary.json's cluster keys (sim/OUTPUTS.md).
/// run_scenario calls it for such a scenario.
RunResult run_cluster(const Scenario& scenario, const std::filesystem::path& out_dir,
                      const RunOptions& options = {});

/// The KV cache groups of an engine of several (vLLM v0.20 with a hybrid model) as the pool sizing
/// grouped the model's layers, in the engine's order; empty for an engine of one group.
std::vector<KVGroupLabel> kv_group_labels(const Scenario& scenario);

/// summary.json's leading keys (name, seed, profile, mode, block_size, num_gpu_blocks,
/// enable_prefix_caching), pre-rendered for MetricsCollector::summary_json.
std::string summary_header(const Scenario& scenario);

}  // namespace kvsim
