// run_scenario: a scenario's run folder from start to end (the latency model, the simulator, its
// observers and the files they write), and the default step-time function.
#include "sim/run/run_scenario.h"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "sim/engine/block_moves.h"
#include "sim/engine/latency_model.h"
#include "sim/metrics/metrics.h"
#include "sim/metrics/writers.h"

namespace kvsim {

std::vector<KVGroupLabel> kv_group_labels(const Scenario& scenario) {
  const KVCacheConfig config = scenario.kv_cache_config();
  if (config.kv_cache_groups.size() < 2) return {};
  const KVPoolLayout* layout =
      scenario.plan && scenario.plan->layout ? &*scenario.plan->layout : nullptr;
  std::vector<KVGroupLabel> labels;
  for (std::size_t g = 0; g < config.kv_cache_groups.size(); ++g) {
    const KVGroupSpec& spec = config.kv_cache_groups[g];
    const KVCacheGroup* group = layout && g < layout->groups.size() ? &layout->groups[g] : nullptr;
    KVGroupLabel l;
    switch (spec.kind) {
      case KVGroupKind::kFullAttention:
        l.kind = group && group->spec.kind == KVSpecKind::kMLA ? "mla" : "full_attention";
        break;
      case KVGroupKind::kSlidingWindow:
        l.kind = "sliding_window";
        l.window_tokens = spec.sliding_window;
        break;
      case KVGroupKind::kChunkedLocal:
        l.kind = "chunked_local";
        l.window_tokens = spec.attention_chunk_size;
        break;
      case KVGroupKind::kMamba:
        l.kind = "mamba";
        break;
    }
    l.num_layers = group ? static_cast<std::int64_t>(group->layer_names.size()) : 0;
    l.block_size = spec.block_size;
    labels.push_back(std::move(l));
  }
  return labels;
}

StepTimeFn make_step_time(const Scenario& scenario) {
  if (!scenario.model)
    throw ConfigError(scenario.file +
                      ": model: required in timed mode (the latency model needs it)");
  std::shared_ptr<const LatencyModel> model =
      make_latency_model(scenario.latency, *scenario.model, scenario.hardware.gpu,
                         static_cast<int>(scenario.hardware.tensor_parallel_size));
  const auto batch = [](const StepView& v) {
    BatchFeatures b;
    b.num_seqs = static_cast<std::int64_t>(v.out->scheduled.size());
    b.prefill_tokens = v.prefill_tokens;
    b.decode_tokens = v.decode_tokens;
    b.sum_context_tokens = v.sum_context_tokens;
    b.sum_context_sq = v.sum_context_sq;
    b.num_prefill_seqs = v.num_prefill_seqs;
    b.attention_pairs = v.attention_pairs;
    return b;
  };
  if (profile_info(scenario.engine.profile).family == EngineFamily::kV0 && scenario.plan) {
    // vLLM V0 moves blocks before the forward pass (sim/engine/block_moves.h).
    const BlockMoveCost moves{static_cast<double>(scenario.plan->spec.page_bytes_all_layers()),
                              scenario.hardware.gpu.host_link_bytes_per_s,
                              scenario.hardware.gpu.hbm_bytes_per_s};
    return [model, batch, moves](const StepView& v) {
      return model->step_time_ns(batch(v)) + moves.step_time_ns(*v.out);
    };
  }
  return [model, batch](const StepView& v) { return model->step_time_ns(batch(v)); };
}

std::string summary_header(const Scenario& scenario) {
  return fmt::format(
      "  \"name\": {},\n  \"seed\": {},\n  \"profile\": \"{}\",\n  \"mode\": \"{}\",\n"
      "  \"block_size\": {},\n  \"num_gpu_blocks\": {},\n  \"enable_prefix_caching\": {},\n",
      nlohmann::json(scenario.name).dump(), scenario.seed, profile_name(scenario.engine.profile),
      mode_name(scenario.engine.mode), scenario.cache.sizing.block_size, scenario.num_gpu_blocks,
      scenario.cache.enable_prefix_caching ? "true" : "false");
}

RunResult run_scenario(const Scenario& scenario, const std::filesystem::path& out_dir,
                       const RunOptions& options) {
  if (scenario.cluster.enabled()) return run_cluster(scenario, out_dir, options);
  // Everything that can reject the input happens before the folder exists: the scenario was
  // validated when it loaded; here the trace is opened (and its header read).
  std::unique_ptr<RequestSource> source =
      make_request_source(scenario.workload, scenario.seed, scenario_vocab_size(scenario));
  StepTimeFn step_time = options.step_time;
  if (!step_time && scenario.engine.mode == EngineConfig::Mode::kTimed)
    step_time = make_step_time(scenario);

  RunFolder folder(out_dir, scenario.name);
  write_text_file(folder.file("config.resolved.yaml"), resolved_yaml(scenario));
  const bool v0 = profile_info(scenario.engine.profile).family == EngineFamily::kV0;
  std::vector<KVGroupLabel> groups = kv_group_labels(scenario);
  Simulator sim(scenario, *source, std::move(step_time));
  CsvRecordWriter csv(folder.file("requests.csv"), folder.file("steps.csv"), v0,
                      static_cast<std::int32_t>(groups.size()), nullptr,
                      sim.offload_tier() != nullptr);
  KVSIM_ASSERT(groups.empty() ||
                   static_cast<std::size_t>(sim.engine().num_kv_cache_groups()) == groups.size(),
               "the engine's KV cache groups are the scenario's");
  MetricsCollector metrics(&sim.final_kv_tokens(), scenario.outputs.steps_every,
                           scenario.scheduler.max_model_len, &csv);
  metrics.enable_prometheus(scenario.outputs.metrics_prom);
  if (!groups.empty()) metrics.enable_kv_groups(std::move(groups));
  if (v0) metrics.enable_v0(scenario.plan ? scenario.plan->spec.page_bytes_all_layers() : 0);
  if (const OffloadTier* tier = sim.offload_tier()) metrics.enable_offload(&tier->stats());
  sim.attach(&metrics);
  std::unique_ptr<TraceJsonWriter> trace;
  if (scenario.outputs.trace_json) {
    trace = std::make_unique<TraceJsonWriter>(folder.file("trace.json"));
    sim.attach(trace.get());
  }
  sim.set_check_invariants(options.check_invariants);
  sim.set_fast_forward(scenario.engine.fast_forward && options.fast_forward);
  sim.set_interrupt_flag(options.interrupt);
  if (options.progress) sim.set_progress(options.progress, options.progress_every_events);
  sim.run();

  csv.close();
  if (trace) trace->close();
  const std::string header = summary_header(scenario);
  RunResult result;
  result.summary_json = metrics.summary_json(header);
  write_text_file(folder.file("summary.json"), result.summary_json);
  if (scenario.outputs.metrics_prom) {
    const std::string model = scenario.model ? scenario.model->name : scenario.name;
    write_text_file(folder.file("metrics.prom"), metrics.prometheus_text(model));
  }
  folder.commit();
  result.folder = folder.final_path();
  result.num_steps = sim.num_steps();
  result.fast_forward_steps = sim.num_fast_forward_steps();
  result.requests_done = sim.requests_done();
  result.end_ns = sim.now();
  if (const OverloadDetector::Verdict ov = metrics.overload(); ov.overloaded)
    result.warnings.push_back(overload_warning(scenario.name, ov));
  if (scenario.plan)  // a pool given by num_gpu_blocks_override that vLLM would refuse
    for (const std::string& line : scenario.plan->log)
      if (line.find("would refuse to start") != std::string::npos)
        result.warnings.push_back(fmt::format("{}: {}", scenario.name, line));
  return result;
}

}  // namespace kvsim
