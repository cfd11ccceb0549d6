// run_cluster: a cluster scenario's run folder (sim/cluster/'s ClusterSimulator, its observers and
// the files they write; sim/OUTPUTS.md, "Cluster runs").
#include <fmt/format.h>

#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "sim/cluster/cluster_simulator.h"
#include "sim/engine/offload_tier.h"
#include "sim/metrics/cluster_outputs.h"
#include "sim/metrics/metrics.h"
#include "sim/metrics/transfers_csv.h"
#include "sim/metrics/writers.h"
#include "sim/run/run_scenario.h"

namespace kvsim {
namespace {

/// Cluster-wide CPU tier figures: the replicas' sums (each replica has a tier of its own; the
/// page size is every replica's).
void add_tier(OffloadTierStats& sum, const OffloadTierStats& t) {
  sum.num_cpu_blocks += t.num_cpu_blocks;
  sum.page_bytes = t.page_bytes;
  sum.load_jobs += t.load_jobs;
  sum.load_gpu_blocks += t.load_gpu_blocks;
  sum.store_jobs += t.store_jobs;
  sum.store_gpu_blocks += t.store_gpu_blocks;
  sum.flushed_store_jobs += t.flushed_store_jobs;
  sum.flush_wait_ns += t.flush_wait_ns;
  sum.cpu_evicted_blocks += t.cpu_evicted_blocks;
  sum.cpu_hit_queries += t.cpu_hit_queries;
  sum.cpu_hit_tokens += t.cpu_hit_tokens;
  sum.cpu_hit_requests += t.cpu_hit_requests;
  sum.finished_sending += t.finished_sending;
  sum.finished_recving += t.finished_recving;
  sum.bytes_gpu_to_cpu += t.bytes_gpu_to_cpu;
  sum.bytes_cpu_to_gpu += t.bytes_cpu_to_gpu;
  sum.transfer_ns_gpu_to_cpu += t.transfer_ns_gpu_to_cpu;
  sum.transfer_ns_cpu_to_gpu += t.transfer_ns_cpu_to_gpu;
  sum.empty_steps += t.empty_steps;
  sum.polling_steps += t.polling_steps;
  sum.cpu_blocks_used += t.cpu_blocks_used;
}

}  // namespace

RunResult run_cluster(const Scenario& scenario, const std::filesystem::path& out_dir,
                      const RunOptions& options) {
  std::unique_ptr<RequestSource> source =
      make_request_source(scenario.workload, scenario.seed, scenario_vocab_size(scenario));
  RunFolder folder(out_dir, scenario.name);
  write_text_file(folder.file("config.resolved.yaml"), resolved_yaml(scenario));
  const bool v0 = profile_info(scenario.engine.profile).family == EngineFamily::kV0;

  const bool timed = scenario.engine.mode == EngineConfig::Mode::kTimed;
  // Each replica's latency model: the caller's, else the scenario's (one model, shared), else its
  // override group's (its own GPU under cluster.overrides: one model per group).
  StepTimeFn base = options.step_time;
  if (!base && timed) base = make_step_time(scenario);
  std::vector<StepTimeFn> step_times(static_cast<std::size_t>(scenario.cluster.replicas), base);
  if (!options.step_time && timed)
    for (const ReplicaOverride& o : scenario.cluster.overrides) {
      const StepTimeFn group = make_step_time(*o.scenario);
      for (const std::int64_t r : o.replicas) step_times[static_cast<std::size_t>(r)] = group;
    }
  ClusterSimulator cluster(scenario, *source, std::move(step_times));
  const std::int32_t n = cluster.num_replicas();
  // Cluster-wide: every request of every replica (requests.csv with its replica; steps.csv has
  // no cluster-wide steps: each replica's are in replicas/<r>/steps.csv).
  const std::vector<KVGroupLabel> groups = kv_group_labels(scenario);
  const auto num_groups = static_cast<std::int32_t>(groups.size());
  const bool tier = cluster.replica(0).offload_tier() != nullptr;
  CsvRecordWriter csv(folder.file("requests.csv"), folder.file("steps.csv"), v0, num_groups,
                      cluster.current_replica(), tier);
  if (const PdRequestColumns* pd = cluster.current_pd_columns()) csv.set_pd_columns(pd);
  // Cluster-wide figures over every replica's steps (sums, and means over all steps); no step rows
  // (steps_every past any step number): each replica's are in replicas/<r>/steps.csv.
  MetricsCollector metrics(&cluster.replica(0).final_kv_tokens(),
                           std::numeric_limits<std::int64_t>::max(),
                           scenario.scheduler.max_model_len, &csv);
  if (v0) metrics.enable_v0(scenario.plan ? scenario.plan->spec.page_bytes_all_layers() : 0);
  if (!groups.empty()) metrics.enable_kv_groups(groups);
  OffloadTierStats tier_sum;  // filled at the end: the replicas' sums
  if (tier) metrics.enable_offload(&tier_sum);
  cluster.attach_cluster(&metrics);
  // Per replica: its steps and its figures.
  std::vector<std::unique_ptr<CsvRecordWriter>> replica_csv;
  std::vector<std::unique_ptr<MetricsCollector>> replica_metrics;
  std::vector<std::unique_ptr<ReplicaStats>> stats;
  for (std::int32_t r = 0; r < n; ++r) {
    const std::filesystem::path dir = folder.file("replicas") / std::to_string(r);
    std::filesystem::create_directories(dir);
    replica_csv.push_back(std::make_unique<CsvRecordWriter>(
        std::filesystem::path{}, dir / "steps.csv", v0, num_groups, nullptr, tier));
    replica_metrics.push_back(std::make_unique<MetricsCollector>(
        &cluster.replica(r).final_kv_tokens(), scenario.outputs.steps_every,
        scenario.scheduler.max_model_len, replica_csv.back().get()));
    replica_metrics.back()->enable_prometheus(scenario.outputs.metrics_prom);  // metrics.prom
    if (v0) replica_metrics.back()->enable_v0(0);
    if (!groups.empty()) replica_metrics.back()->enable_kv_groups(groups);
    if (const OffloadTier* t = cluster.replica(r).offload_tier())
      replica_metrics.back()->enable_offload(&t->stats());
    stats.push_back(std::make_unique<ReplicaStats>());
    cluster.attach_replica(r, replica_metrics.back().get());
    cluster.attach_replica(r, stats.back().get());
  }
  RoutingCsvWriter routing(folder.file("routing.csv"));
  cluster.set_routing_writer(&routing);
  cluster.set_interrupt_flag(options.interrupt);
  cluster.set_check_invariants(options.check_invariants);
  cluster.run();

  const std::vector<const EngineCore*> engines = cluster.engines();
  if (tier)
    for (std::int32_t r = 0; r < n; ++r)
      add_tier(tier_sum, cluster.replica(r).offload_tier()->stats());
  std::vector<const MetricsCollector*> replica_figures;
  for (const auto& m : replica_metrics) replica_figures.push_back(m.get());
  metrics.on_cluster_end(engines, replica_figures);
  csv.close();
  routing.close();
  for (auto& c : replica_csv) c->close();
  std::vector<const ReplicaStats*> views;
  for (std::int32_t r = 0; r < n; ++r) {
    ReplicaStats& s = *stats[static_cast<std::size_t>(r)];
    const ReplicaLoad& load = cluster.loads()[static_cast<std::size_t>(r)];
    s.requests_routed = load.routed;
    const Scenario& rs = ClusterSimulator::replica_scenario(scenario, r);
    s.gpu = rs.hardware.gpu.name;
    s.num_gpu_blocks = rs.num_gpu_blocks;
    s.prompt_tokens_routed = load.prompt_tokens_routed;
    s.num_evictions = engines[static_cast<std::size_t>(r)]->pool_stats().evictions;
    s.role = replica_role_name(cluster.role(r));
    views.push_back(&s);
  }
  RunResult result;
  const std::string summary = metrics.summary_json(summary_header(scenario));
  std::string keys = cluster_summary_keys(views, router_policy_name(scenario.cluster.router.policy),
                                          cluster.decisions_by_branch(),
                                          timed ? static_cast<double>(cluster.now()) / 1e9 : 0.0);
  if (const DpLockstep* ls = cluster.lockstep()) {
    // vllm_dp over an MoE model: the replicas' forward passes in lockstep (spec §3.2).
    std::string dummies, waits;
    for (std::int32_t r = 0; r < n; ++r) {
      dummies += fmt::format("{}{}", r ? ", " : "", cluster.replica(r).num_dummy_steps());
      waits += fmt::format("{}{:.9f}", r ? ", " : "", static_cast<double>(ls->wait_ns(r)) / 1e9);
    }
    keys += fmt::format(
        "  \"dp_lockstep\": {{\"waves\": {}, \"forward_passes\": {}, \"dummy_batch_s\": {:.9f}, "
        "\"dummy_batches\": [{}], \"barrier_wait_s\": [{}]}},\n",
        ls->waves(), ls->forwards(), static_cast<double>(cluster.replica(0).dummy_step_ns()) / 1e9,
        dummies, waits);
  }
  keys += cluster.pd_summary_keys();
  if (scenario.cluster.disaggregated())  // transfers.csv: one row per KV read, in completion order
    write_transfers_csv(folder.file("transfers.csv"), cluster.transfers());
  result.summary_json = insert_summary_keys(summary, keys);
  write_text_file(folder.file("summary.json"), result.summary_json);
  if (scenario.outputs.metrics_prom) {
    const std::string model = scenario.model ? scenario.model->name : scenario.name;
    // One series per replica, labelled engine="<r>" (spec §10).
    std::vector<std::string> texts;
    for (std::int32_t r = 0; r < n; ++r)
      texts.push_back(replica_metrics[static_cast<std::size_t>(r)]->prometheus_text(model) +
                      cluster.pd_prometheus(r, model));
    write_text_file(folder.file("metrics.prom"), prometheus_by_engine(texts, model));
  }
  folder.commit();
  result.folder = folder.final_path();
  result.requests_done = cluster.requests_done();
  result.end_ns = cluster.now();
  for (std::int32_t r = 0; r < n; ++r) {
    result.num_steps += cluster.replica(r).num_steps();
    result.fast_forward_steps += cluster.replica(r).num_fast_forward_steps();
  }
  return result;
}

}  // namespace kvsim
