#include "sim/config/scenario.h"

#include <fmt/format.h>

#include <filesystem>

#include "sim/engine/latency_model.h"
#include "sim/workload/workload.h"

namespace kvsim {
namespace {

constexpr std::string_view kTopKeys[] = {"name",     "seed",     "engine",    "model",
                                         "hardware", "cache",    "scheduler", "workload",
                                         "latency",  "validate", "outputs",   "sweep"};
constexpr std::int64_t kMaxGpuBlocks = std::int64_t{1} << 28;

std::vector<std::string_view> cache_keys() {
  std::vector<std::string_view> keys(std::begin(kCacheSizingKeys), std::end(kCacheSizingKeys));
  keys.insert(keys.end(), {"enable_prefix_caching", "num_preallocate_tokens", "capacity_tokens"});
  return keys;
}

std::string flow_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << node;
  return e.c_str();
}

/// engine.profile: one of the profiles of core/engine_api.h (did-you-mean and the valid names on
/// a typo).
Profile get_profile(const YAML::Node& engine, const YamlContext& ctx) {
  std::vector<std::string_view> names;
  for (const ProfileInfo& p : profiles()) names.emplace_back(p.name);
  const std::size_t i = get_choice_index(engine, "profile", ctx, profile_name(Profile::kVllm072),
                                         names);
  return profiles()[i].profile;
}

}  // namespace

const char* mode_name(EngineConfig::Mode m) {
  return m == EngineConfig::Mode::kTimed ? "timed" : "cache_only";
}

KVCacheConfig Scenario::kv_cache_config() const {
  KVCacheConfig c;
  c.block_size = static_cast<std::int32_t>(cache.sizing.block_size);
  c.num_gpu_blocks = static_cast<std::int32_t>(num_gpu_blocks);
  c.max_model_len = scheduler.max_model_len;
  c.enable_caching = cache.enable_prefix_caching;
  c.num_preallocate_tokens = cache.num_preallocate_tokens;
  return c;
}

EngineParams Scenario::engine_params() const {
  EngineParams p;
  p.profile = engine.profile;
  p.scheduler = scheduler;
  p.cache = kv_cache_config();
  return p;
}

void apply_set(YAML::Node& root, std::string_view assignment) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw ConfigError(fmt::format("--set '{}': expected section.key=value", assignment));
  const std::string key(assignment.substr(0, eq));
  const std::string value(assignment.substr(eq + 1));
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = key.find('.', start);
    parts.push_back(key.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (parts.back().empty())
      throw ConfigError(
          fmt::format("--set '{}': empty component in key path '{}'", assignment, key));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  // sweep keys are dotted paths themselves: sweep.cache.block_size is the key 'cache.block_size'.
  if (parts.size() > 2 && parts[0] == "sweep") {
    std::string rest = parts[1];
    for (std::size_t i = 2; i < parts.size(); ++i) rest += "." + parts[i];
    parts = {"sweep", rest};
  }
  const YAML::Node parsed = load_yaml_string(value, "--set " + key);
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  if (!root.IsMap()) throw ConfigError("--set: the scenario's top level is not a mapping");
  YAML::Node cur;
  cur.reset(root);
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node child = cur[parts[i]];
    if (!child.IsDefined() || child.IsNull()) {
      cur[parts[i]] = YAML::Node(YAML::NodeType::Map);
      child = cur[parts[i]];
    } else if (!child.IsMap()) {
      throw ConfigError(fmt::format("--set '{}': '{}' is not a mapping (it is {})", assignment,
                                    parts[i], describe_node(child)));
    }
    YAML::Node next;
    next.reset(child);
    cur.reset(next);
  }
  cur[parts.back()] = parsed;
}

Scenario parse_scenario(const YAML::Node& root_in, const std::string& file) {
  Scenario s;
  s.file = file;
  s.root = root_in;  // shared, not cloned: a clone loses the marks that errors point at
  const YAML::Node& root = s.root;
  const YamlContext top{file, ""};
  if (!root.IsDefined() || root.IsNull())
    throw ConfigError(file + ": the scenario is empty (expected a mapping with a workload)");
  check_keys(root, std::span<const std::string_view>(kTopKeys), top);

  s.name = get_string(root, "name", top, std::filesystem::path(file).stem().string());
  if (s.name.empty() || s.name.find('/') != std::string::npos || s.name == "." || s.name == "..")
    throw yaml_error(root["name"], top.child("name"),
                     fmt::format("name: must be a non-empty folder name, got '{}'", s.name));
  s.seed = static_cast<std::uint64_t>(get_int(root, "seed", top, 0, 0));

  const YAML::Node engine = root["engine"];
  const YamlContext ectx = top.child("engine");
  check_keys(engine, {"profile", "mode"}, ectx);
  s.engine.profile = get_profile(engine, ectx);
  s.engine.mode = get_choice(engine, "mode", ectx, "timed", {"timed", "cache_only"}) == "timed"
                      ? EngineConfig::Mode::kTimed
                      : EngineConfig::Mode::kCacheOnly;
  const bool timed = s.engine.mode == EngineConfig::Mode::kTimed;

  if (has_key(root, "model")) s.model = load_model_config(root["model"], top.child("model"));
  s.hardware = load_hardware(root["hardware"], top.child("hardware"));

  const YAML::Node cache = root["cache"];
  const YamlContext cctx = top.child("cache");
  const std::vector<std::string_view> ckeys = cache_keys();
  check_keys(cache, std::span<const std::string_view>(ckeys), cctx);
  s.cache.sizing = load_cache_sizing(cache, cctx);
  s.cache.enable_prefix_caching = get_bool(cache, "enable_prefix_caching", cctx, true);
  s.cache.num_preallocate_tokens =
      get_int(cache, "num_preallocate_tokens", cctx, timed ? 64 : 0, 0, 1 << 24);
  s.cache.capacity_tokens = get_optional_int(cache, "capacity_tokens", cctx, 1);
  const std::int64_t bs = s.cache.sizing.block_size;
  if (s.cache.capacity_tokens) {
    if (s.cache.sizing.num_gpu_blocks_override)
      throw yaml_error(cache["capacity_tokens"], cctx.child("capacity_tokens"),
                       "cache.capacity_tokens: give either capacity_tokens or "
                       "num_gpu_blocks_override, not both");
    if (*s.cache.capacity_tokens < bs)
      throw yaml_error(cache["capacity_tokens"], cctx.child("capacity_tokens"),
                       fmt::format("cache.capacity_tokens: {} is less than one block ({} tokens)",
                                   *s.cache.capacity_tokens, bs));
  }
  CacheSizingConfig sizing = s.cache.sizing;
  if (s.cache.capacity_tokens) sizing.num_gpu_blocks_override = *s.cache.capacity_tokens / bs;
  if (s.model) {
    s.plan = plan_kv_cache(*s.model, s.hardware, sizing, file);
    s.num_gpu_blocks = s.plan->sizing.num_gpu_blocks;
  } else if (sizing.num_gpu_blocks_override) {
    s.num_gpu_blocks = *sizing.num_gpu_blocks_override;
  } else {
    throw ConfigError(file +
                      ": cache: the pool size needs a model (model.config) or "
                      "cache.num_gpu_blocks_override or cache.capacity_tokens");
  }
  if (s.num_gpu_blocks < 1 || s.num_gpu_blocks > kMaxGpuBlocks)
    throw ConfigError(fmt::format("{}: cache: {} blocks is outside the supported range [1, {}]",
                                  file, s.num_gpu_blocks, kMaxGpuBlocks));

  const YAML::Node sched = root["scheduler"];
  const YamlContext sctx = top.child("scheduler");
  check_keys(sched, {"max_num_seqs", "max_num_batched_tokens", "max_model_len"}, sctx);
  s.scheduler.max_num_seqs = get_int(sched, "max_num_seqs", sctx, 256, 1, 1 << 20);
  s.scheduler.max_num_batched_tokens =
      get_int(sched, "max_num_batched_tokens", sctx, 8192, 1, std::int64_t{1} << 30);
  const std::int64_t derived_len =
      s.model && s.model->max_position_embeddings > 0 ? s.model->max_position_embeddings : 8192;
  s.scheduler.max_model_len =
      get_int(sched, "max_model_len", sctx, derived_len, 1, std::int64_t{1} << 30);
  if (s.model && s.model->max_position_embeddings > 0 &&
      s.scheduler.max_model_len > s.model->max_position_embeddings)
    throw yaml_error(sched["max_model_len"], sctx.child("max_model_len"),
                     fmt::format("scheduler.max_model_len: {} is greater than the model's "
                                 "max_position_embeddings ({}), as vLLM refuses",
                                 s.scheduler.max_model_len, s.model->max_position_embeddings));
  if (s.model) {  // the release's pool and its start-up check that one max_model_len request fits
    const KVSizingRules rules = kv_sizing_rules_for_profile(profile_name(s.engine.profile))
                                    .value_or(KVSizingRules::kV072Uniform);
    PoolRequest request;
    request.max_model_len = s.scheduler.max_model_len;
    request.max_num_batched_tokens = s.scheduler.max_num_batched_tokens;
    s.plan = plan_kv_pool(*s.model, s.hardware, sizing, request, rules, file);
    s.num_gpu_blocks = s.plan->sizing.num_gpu_blocks;  // the same as above for uniform rules
    if (s.num_gpu_blocks > kMaxGpuBlocks)
      throw ConfigError(fmt::format("{}: cache: {} blocks is outside the supported range [1, {}]",
                                    file, s.num_gpu_blocks, kMaxGpuBlocks));
  }

  if (!has_key(root, "workload"))
    throw ConfigError(file + ": workload: required (a synthetic generator or a trace)");
  s.workload = root["workload"];
  require_map(s.workload, top.child("workload"));
  if (has_key(root, "latency")) {
    s.latency = root["latency"];
    require_map(s.latency, top.child("latency"));
  }
  if (timed && !s.model)
    throw ConfigError(file + ": model: required in timed mode (the latency model needs it)");

  const YAML::Node val = root["validate"];
  const YamlContext vctx = top.child("validate");
  check_keys(val, {"backend", "sample_every_steps", "sample_prob", "dtype"}, vctx);
  s.validate.backend = get_choice(val, "backend", vctx, "cpu", {"cpu", "cuda"});
  s.validate.sample_every_steps = get_int(val, "sample_every_steps", vctx, 0, 0);
  s.validate.sample_prob = get_double(val, "sample_prob", vctx, 0.0, 0.0, 1.0);
  s.validate.dtype =
      get_choice(val, "dtype", vctx, "auto", {"auto", "float32", "float16", "bfloat16"});

  const YAML::Node out = root["outputs"];
  const YamlContext octx = top.child("outputs");
  check_keys(out, {"trace_json", "metrics_prom", "steps_every"}, octx);
  s.outputs.trace_json = get_bool(out, "trace_json", octx, false);
  s.outputs.metrics_prom = get_bool(out, "metrics_prom", octx, false);
  s.outputs.steps_every = get_int(out, "steps_every", octx, 10, 1, std::int64_t{1} << 40);

  const YAML::Node sweep = root["sweep"];
  const YamlContext wctx = top.child("sweep");
  require_map(sweep, wctx);
  if (sweep.IsDefined() && sweep.IsMap()) {
    for (auto it = sweep.begin(); it != sweep.end(); ++it) {
      const std::string key = it->first.Scalar();
      const YamlContext kctx = wctx.child(key);
      const std::string section = key.substr(0, key.find('.'));
      std::vector<std::string_view> sweepable(std::begin(kTopKeys), std::end(kTopKeys));
      sweepable.pop_back();  // a sweep cannot sweep itself
      if (std::find(sweepable.begin(), sweepable.end(), section) == sweepable.end())
        throw yaml_error(it->first, kctx,
                         fmt::format("sweep: '{}' is not a key of the scenario{}", key,
                                     suggestion_suffix(section, sweepable)));
      if (!it->second.IsSequence() || it->second.size() == 0)
        throw yaml_error(it->second, kctx,
                         fmt::format("sweep.{}: expected a non-empty list of values, got {}", key,
                                     describe_node(it->second)));
      SweepAxis axis{key, {}};
      // NOTE: yaml-cpp's it->second lives in a temporary proxy: copy the node before iterating.
      const YAML::Node values = it->second;
      for (const auto& v : values) axis.values.push_back(v);
      s.sweep.push_back(std::move(axis));
    }
  }
  return s;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& sets,
                       std::optional<std::uint64_t> seed) {
  YAML::Node root = load_yaml_file(path);
  for (const std::string& a : sets) apply_set(root, a);
  if (seed) {
    if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
    root["seed"] = *seed;
  }
  return parse_scenario(root, path);
}

std::string resolved_yaml(const Scenario& s) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << s.name;
  e << YAML::Key << "seed" << YAML::Value << s.seed;
  e << YAML::Key << "engine" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "profile" << YAML::Value << profile_name(s.engine.profile);
  e << YAML::Key << "mode" << YAML::Value << mode_name(s.engine.mode);
  e << YAML::EndMap;
  // File paths (here and in the workload and latency sections) are written as resolved from the
  // scenario's folder, so that the resolved file runs from the same working directory wherever
  // it is stored.
  const YamlContext top = s.ctx();
  if (has_key(s.root, "model")) {
    YAML::Node model = YAML::Clone(s.root["model"]);
    if (model.IsMap() && model["config"].IsScalar())
      model["config"] = resolve_input_path(top.child("model"), model["config"].Scalar());
    e << YAML::Key << "model" << YAML::Value << model;
  }
  e << YAML::Key << "hardware" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "gpu" << YAML::Value << s.hardware.gpu.name;
  e << YAML::Key << "tensor_parallel_size" << YAML::Value << s.hardware.tensor_parallel_size;
  e << YAML::Key << "gpu_memory_bytes" << YAML::Value << s.hardware.gpu.memory_bytes;
  e << YAML::Key << "peak_flops_per_s" << YAML::Value
    << number_text(s.hardware.gpu.peak_flops_per_s);
  e << YAML::Key << "hbm_bytes_per_s" << YAML::Value << number_text(s.hardware.gpu.hbm_bytes_per_s);
  e << YAML::EndMap;
  const CacheSizingConfig& z = s.cache.sizing;
  e << YAML::Key << "cache" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "block_size" << YAML::Value << z.block_size;
  e << YAML::Key << "gpu_memory_utilization" << YAML::Value
    << number_text(z.gpu_memory_utilization);
  if (z.kv_cache_memory_bytes)
    e << YAML::Key << "kv_cache_memory_bytes" << YAML::Value << *z.kv_cache_memory_bytes;
  if (z.num_gpu_blocks_override)
    e << YAML::Key << "num_gpu_blocks_override" << YAML::Value << *z.num_gpu_blocks_override;
  if (s.cache.capacity_tokens)
    e << YAML::Key << "capacity_tokens" << YAML::Value << *s.cache.capacity_tokens;
  e << YAML::Key << "activation_reserve_bytes" << YAML::Value << z.activation_reserve_bytes;
  e << YAML::Key << "cache_dtype" << YAML::Value << z.cache_dtype;
  e << YAML::Key << "enable_prefix_caching" << YAML::Value << s.cache.enable_prefix_caching;
  e << YAML::Key << "num_preallocate_tokens" << YAML::Value << s.cache.num_preallocate_tokens;
  e << YAML::EndMap;
  e << YAML::Key << "scheduler" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "max_num_seqs" << YAML::Value << s.scheduler.max_num_seqs;
  e << YAML::Key << "max_num_batched_tokens" << YAML::Value << s.scheduler.max_num_batched_tokens;
  e << YAML::Key << "max_model_len" << YAML::Value << s.scheduler.max_model_len;
  e << YAML::EndMap;
  e << YAML::Key << "workload" << YAML::Value
    << resolved_workload_yaml(s.workload, s.ctx().child("workload"));
  if (s.engine.mode == EngineConfig::Mode::kTimed)
    e << YAML::Key << "latency" << YAML::Value
      << latency_config_yaml(parse_latency_config(s.latency, top.child("latency")));
  e << YAML::Key << "validate" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "backend" << YAML::Value << s.validate.backend;
  e << YAML::Key << "sample_every_steps" << YAML::Value << s.validate.sample_every_steps;
  e << YAML::Key << "sample_prob" << YAML::Value << number_text(s.validate.sample_prob);
  e << YAML::Key << "dtype" << YAML::Value << s.validate.dtype;
  e << YAML::EndMap;
  e << YAML::Key << "outputs" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "trace_json" << YAML::Value << s.outputs.trace_json;
  e << YAML::Key << "metrics_prom" << YAML::Value << s.outputs.metrics_prom;
  e << YAML::Key << "steps_every" << YAML::Value << s.outputs.steps_every;
  e << YAML::EndMap;
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

std::vector<std::vector<std::pair<std::string, std::string>>> sweep_points(const Scenario& s) {
  std::vector<std::vector<std::pair<std::string, std::string>>> points(1);
  for (const SweepAxis& axis : s.sweep) {
    std::vector<std::vector<std::pair<std::string, std::string>>> next;
    for (const auto& p : points)
      for (const YAML::Node& v : axis.values) {
        auto q = p;
        q.emplace_back(axis.key, flow_text(v));
        next.push_back(std::move(q));
      }
    points.swap(next);
  }
  if (s.sweep.empty()) points.clear();
  return points;
}

std::string sweep_point_name(const std::vector<std::pair<std::string, std::string>>& p) {
  std::string name;
  for (const auto& [k, v] : p) {
    if (!name.empty()) name += ',';
    name += k + "=";
    for (char c : v) name += (c == '/' || c == ' ' || c == '\\') ? '_' : c;
  }
  return name;
}

}  // namespace kvsim
