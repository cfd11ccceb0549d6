#include "sim/workload/workload_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <tuple>

#include "core/common/assert.h"
#include "sim/workload/samplers.h"

namespace kvsim {

namespace {

constexpr double kMaxTokens = 10'000'000;  // upper bound of any length draw (10M tokens)
constexpr double kMaxThinkTimeS = 1e9;
constexpr std::int64_t kMaxPromptTokens = 10'000'000;

// The `process:` names, in ArrivalConfig::Process's order, and the keys of each.
constexpr std::string_view kProcessNames[] = {"poisson", "gamma",      "constant",
                                              "bursts",  "timestamps", "all_at_once"};
constexpr std::string_view kRateKeys[] = {"process", "rate_per_s"};
constexpr std::string_view kGammaKeys[] = {"process", "rate_per_s", "cv"};
constexpr std::string_view kBurstKeys[] = {"process", "burst_size", "interval_s", "spacing_s"};
constexpr std::string_view kTimestampKeys[] = {"process", "times_s"};
constexpr std::string_view kAllAtOnceKeys[] = {"process"};
// The `format:` names, in TraceConfig::Format's order.
constexpr std::string_view kFormatNames[] = {"azure", "mooncake", "csv", "jsonl"};
// Synthetic keys a trace workload must not have.
constexpr std::string_view kSyntheticOnlyKeys[] = {
    "arrival",  "prompt_tokens", "output_tokens",       "lengths", "system_prompts", "few_shot",
    "sessions", "duration_s",    "stop_at_eos_fraction"};

// ---- parsing ------------------------------------------------------------------------------------

/// `key` of `map` as a distribution (required).
Distribution required_distribution(const YAML::Node& map, std::string_view key,
                                   const YamlContext& ctx, double lower, double upper,
                                   bool integer) {
  if (!has_key(map, key))
    throw yaml_error(map, ctx, fmt::format("missing required key '{}' in {}", key, ctx.where()));
  return Distribution::parse(map[std::string(key)], ctx.child(key), lower, upper, integer);
}

double parse_popularity(const YAML::Node& pool, const YamlContext& ctx) {
  const YAML::Node p = pool["popularity"];
  if (!p.IsDefined() || p.IsNull()) return 0.0;
  const YamlContext pc = ctx.child("popularity");
  if (p.IsScalar()) {
    if (p.Scalar() == "uniform") return 0.0;
    throw yaml_error(
        p, pc,
        fmt::format("{}: expected 'uniform' or {{zipf: S}}, got {}", pc.path, describe_node(p)));
  }
  check_keys(p, {"zipf"}, pc);
  return get_double(p, "zipf", pc, std::nullopt, 0.0, 100.0);
}

PrefixPoolConfig parse_pool(const YAML::Node& n, const YamlContext& ctx, bool few_shot) {
  if (few_shot)
    check_keys(n, std::span<const std::string_view>(kFewShotKeys), ctx);
  else
    check_keys(n, std::span<const std::string_view>(kSystemPromptsKeys), ctx);
  PrefixPoolConfig p;
  p.count = get_int(n, "count", ctx, std::nullopt, 1, 1'000'000);
  p.tokens =
      required_distribution(n, few_shot ? "example_tokens" : "tokens", ctx, 0, kMaxTokens, true);
  p.examples = few_shot ? get_int(n, "examples", ctx, 1, 1, 10'000) : 1;
  if (p.count * p.examples > 1'000'000)
    throw yaml_error(n, ctx,
                     fmt::format("{}: count x examples = {} prefix segments is more than the "
                                 "1,000,000 supported",
                                 ctx.path, p.count * p.examples));
  p.zipf_s = parse_popularity(n, ctx);
  p.share = get_double(n, "share", ctx, 1.0, 0.0, 1.0);
  return p;
}

SessionConfig parse_sessions(const YAML::Node& s, const YamlContext& ctx) {
  check_keys(s, std::span<const std::string_view>(kSessionKeys), ctx);
  SessionConfig c;
  c.turns = required_distribution(s, "turns", ctx, 1, 1'000'000, true);
  c.think_time_s = has_key(s, "think_time_s")
                       ? Distribution::parse(s["think_time_s"], ctx.child("think_time_s"), 0,
                                             kMaxThinkTimeS, false)
                       : Distribution::fixed(0, 0, kMaxThinkTimeS);
  c.user_tokens = required_distribution(s, "user_tokens", ctx, 1, kMaxTokens, true);
  return c;
}

ArrivalConfig parse_arrival(const YAML::Node& n, const YamlContext& ctx) {
  ArrivalConfig a;
  if (!n.IsDefined() || n.IsNull()) return a;
  require_map(n, ctx);
  using P = ArrivalConfig::Process;
  a.process = static_cast<P>(get_choice_index(n, "process", ctx, "poisson", kProcessNames));
  check_keys(n, arrival_keys(a.process), ctx);
  switch (a.process) {
    case P::kPoisson:
    case P::kConstant:
      a.rate_per_s = get_double(n, "rate_per_s", ctx, std::nullopt, 1e-9, 1e9);
      break;
    case P::kGamma:
      a.rate_per_s = get_double(n, "rate_per_s", ctx, std::nullopt, 1e-9, 1e9);
      a.cv = get_double(n, "cv", ctx, std::nullopt, 1e-3, 100.0);
      break;
    case P::kBursts:
      a.burst_size = get_int(n, "burst_size", ctx, std::nullopt, 1, 100'000'000);
      a.interval_s = get_double(n, "interval_s", ctx, std::nullopt, 0.0, 1e9);
      a.spacing_s = get_double(n, "spacing_s", ctx, 0.0, 0.0, 1e9);
      break;
    case P::kTimestamps:
      a.times_s = get_double_list(n, "times_s", ctx, 0.0, 1e9);
      for (std::size_t i = 1; i < a.times_s.size(); ++i)
        if (a.times_s[i] < a.times_s[i - 1])
          throw yaml_error(
              n["times_s"][i], ctx.child("times_s").element(i),
              fmt::format("{}: times must be nondecreasing, got {} after {}",
                          ctx.child("times_s").element(i).path, a.times_s[i], a.times_s[i - 1]));
      break;
    case P::kAllAtOnce:
      break;
  }
  return a;
}

SyntheticWorkloadConfig parse_synthetic(const YAML::Node& w, const YamlContext& ctx) {
  SyntheticWorkloadConfig c;
  c.arrival = parse_arrival(w["arrival"], ctx.child("arrival"));
  const std::int64_t default_n = c.arrival.process == ArrivalConfig::Process::kTimestamps
                                     ? static_cast<std::int64_t>(c.arrival.times_s.size())
                                     : 1000;
  c.num_requests = get_int(w, "num_requests", ctx, default_n, 0, std::int64_t{1} << 40);
  if (c.arrival.process == ArrivalConfig::Process::kTimestamps)
    c.num_requests =
        std::min<std::int64_t>(c.num_requests, static_cast<std::int64_t>(c.arrival.times_s.size()));
  c.duration_s = get_optional_double(w, "duration_s", ctx, 0.0, 1e9);
  if (has_key(w, "lengths")) {
    for (const char* key : {"prompt_tokens", "output_tokens"})
      if (has_key(w, key))
        throw yaml_error(w[key], ctx.child(key),
                         fmt::format("{}: give either lengths or prompt_tokens and "
                                     "output_tokens, not both",
                                     ctx.child(key).path));
    const YamlContext lc = ctx.child("lengths");
    const std::string path = resolve_input_path(lc, get_string(w, "lengths", ctx, std::nullopt));
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec))
      throw yaml_error(w["lengths"], lc, fmt::format("{}: no such file '{}'", lc.path, path));
    c.lengths = std::make_shared<const LengthTable>(LengthTable::from_csv(path));
  } else {
    for (const char* key : {"prompt_tokens", "output_tokens"})
      if (!has_key(w, key))
        throw yaml_error(w, ctx,
                         fmt::format("missing required key '{}' in {} (or give lengths: FILE)", key,
                                     ctx.where()));
    c.prompt_tokens = required_distribution(w, "prompt_tokens", ctx, 1, kMaxTokens, true);
    c.output_tokens = required_distribution(w, "output_tokens", ctx, 1, kMaxTokens, true);
  }
  if (has_key(w, "system_prompts"))
    c.system_prompts = parse_pool(w["system_prompts"], ctx.child("system_prompts"), false);
  if (has_key(w, "few_shot")) c.few_shot = parse_pool(w["few_shot"], ctx.child("few_shot"), true);
  if (has_key(w, "sessions")) c.sessions = parse_sessions(w["sessions"], ctx.child("sessions"));
  c.stop_at_eos_fraction = get_optional_double(w, "stop_at_eos_fraction", ctx, 0.0, 1.0);
  return c;
}

TraceConfig parse_trace(const YAML::Node& w, const YamlContext& ctx) {
  for (std::string_view k : kSyntheticOnlyKeys) {
    if (has_key(w, k))
      throw yaml_error(w[std::string(k)], ctx.child(k),
                       fmt::format("{}: cannot be combined with workload.trace (a trace gives its "
                                   "own {})",
                                   ctx.child(k).path,
                                   k == "stop_at_eos_fraction"
                                       ? "ignore_eos per row, or workload.ignore_eos for all"
                                       : "arrivals and lengths"));
  }
  const YAML::Node t = w["trace"];
  const YamlContext tc = ctx.child("trace");
  check_keys(t, std::span<const std::string_view>(kTraceKeys), tc);
  TraceConfig c;
  c.format = static_cast<TraceConfig::Format>(
      get_choice_index(t, "format", tc, std::nullopt, kFormatNames));
  const YamlContext pc = tc.child("path");
  c.path = resolve_input_path(tc, get_string(t, "path", tc, std::nullopt));
  c.path_at = source_loc(t["path"], pc);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(c.path, ec))
    throw config_error(c.path_at, fmt::format("{}: no such trace file '{}'", pc.path, c.path));
  if (!std::ifstream(c.path, std::ios::binary))
    throw config_error(c.path_at, fmt::format("{}: cannot read trace file '{}'", pc.path, c.path));
  c.time_scale = get_double(t, "time_scale", tc, 1.0, 0.0, 1e6);
  c.max_requests = get_optional_int(t, "max_requests", tc, 0);
  if (auto n = get_optional_int(w, "num_requests", ctx, 0))
    c.max_requests = c.max_requests ? std::min(*c.max_requests, *n) : *n;
  c.hash_block_tokens = get_int(t, "hash_block_tokens", tc, 512, 1, 1 << 20);
  c.prefix_tokens = get_int(t, "prefix_tokens", tc, 0, 0, kMaxPromptTokens);
  return c;
}

// ---- writing ------------------------------------------------------------------------------------

// The keys parse_arrival reads for the process, in flow style.
YAML::Node arrival_yaml(const ArrivalConfig& a) {
  YAML::Node n(YAML::NodeType::Map);
  n["process"] = std::string(kProcessNames[static_cast<std::size_t>(a.process)]);
  switch (a.process) {
    case ArrivalConfig::Process::kPoisson:
    case ArrivalConfig::Process::kConstant:
      n["rate_per_s"] = number_node(a.rate_per_s);
      break;
    case ArrivalConfig::Process::kGamma:
      n["rate_per_s"] = number_node(a.rate_per_s);
      n["cv"] = number_node(a.cv);
      break;
    case ArrivalConfig::Process::kBursts:
      n["burst_size"] = a.burst_size;
      n["interval_s"] = number_node(a.interval_s);
      n["spacing_s"] = number_node(a.spacing_s);
      break;
    case ArrivalConfig::Process::kTimestamps: {
      YAML::Node times(YAML::NodeType::Sequence);
      for (double t : a.times_s) times.push_back(number_node(t));
      n["times_s"] = times;
      break;
    }
    case ArrivalConfig::Process::kAllAtOnce:
      break;
  }
  n.SetStyle(YAML::EmitterStyle::Flow);
  return n;
}

YAML::Node pool_yaml(const std::optional<PrefixPoolConfig>& pool, bool few_shot) {
  if (!pool) return null_node();
  const PrefixPoolConfig& p = *pool;
  YAML::Node n(YAML::NodeType::Map);
  n["count"] = p.count;
  if (few_shot) n["examples"] = p.examples;
  n[few_shot ? "example_tokens" : "tokens"] = p.tokens.to_yaml();
  if (p.zipf_s == 0.0) {
    n["popularity"] = "uniform";
  } else {
    YAML::Node zipf(YAML::NodeType::Map);
    zipf["zipf"] = number_node(p.zipf_s);
    zipf.SetStyle(YAML::EmitterStyle::Flow);
    n["popularity"] = zipf;
  }
  n["share"] = number_node(p.share);
  return n;
}

YAML::Node sessions_yaml(const std::optional<SessionConfig>& sessions) {
  if (!sessions) return null_node();
  YAML::Node s(YAML::NodeType::Map);
  s["turns"] = sessions->turns.to_yaml();
  s["think_time_s"] = sessions->think_time_s.to_yaml();
  s["user_tokens"] = sessions->user_tokens.to_yaml();
  return s;
}

void write_synthetic(YAML::Node& w, const SyntheticWorkloadConfig& c) {
  w["num_requests"] = c.num_requests;
  w["duration_s"] = optional_node(c.duration_s);
  w["arrival"] = arrival_yaml(c.arrival);
  if (c.lengths) {
    w["lengths"] = c.lengths->file;
  } else {
    w["prompt_tokens"] = c.prompt_tokens.to_yaml();
    w["output_tokens"] = c.output_tokens.to_yaml();
    w["lengths"] = null_node();
  }
  w["system_prompts"] = pool_yaml(c.system_prompts, false);
  w["few_shot"] = pool_yaml(c.few_shot, true);
  w["sessions"] = sessions_yaml(c.sessions);
  w["stop_at_eos_fraction"] = optional_node(c.stop_at_eos_fraction);
}

void write_trace(YAML::Node& w, const TraceConfig& c) {
  YAML::Node t(YAML::NodeType::Map);
  t["format"] = std::string(trace_format_name(c.format));
  t["path"] = c.path;
  t["time_scale"] = number_node(c.time_scale);
  t["max_requests"] = optional_node(c.max_requests);
  if (c.format == TraceConfig::Format::kMooncake) t["hash_block_tokens"] = c.hash_block_tokens;
  if (c.format == TraceConfig::Format::kCsv || c.format == TraceConfig::Format::kJsonl)
    t["prefix_tokens"] = c.prefix_tokens;
  w["trace"] = t;
}

}  // namespace

std::span<const std::string_view> arrival_keys(ArrivalConfig::Process process) {
  using P = ArrivalConfig::Process;
  switch (process) {
    case P::kPoisson:
    case P::kConstant:
      return kRateKeys;
    case P::kGamma:
      return kGammaKeys;
    case P::kBursts:
      return kBurstKeys;
    case P::kTimestamps:
      return kTimestampKeys;
    case P::kAllAtOnce:
      break;
  }
  return kAllAtOnceKeys;
}

std::string_view trace_format_name(TraceConfig::Format format) {
  return kFormatNames[static_cast<std::size_t>(format)];
}

WorkloadConfig parse_workload_config(const YAML::Node& workload, const YamlContext& ctx) {
  if (!workload.IsDefined() || workload.IsNull())
    throw config_error(SourceLoc{ctx.file, 0, 0},
                       "workload: required (a synthetic generator or a trace)");
  check_keys(workload, std::span<const std::string_view>(kWorkloadKeys), ctx);
  WorkloadConfig c;
  if (has_key(workload, "trace"))
    c.source = parse_trace(workload, ctx);
  else
    c.source = parse_synthetic(workload, ctx);
  c.per_request.ignore_eos = get_bool(workload, "ignore_eos", ctx, true);
  if (auto eos = get_optional_int(workload, "eos_token_id", ctx, 0,
                                  std::numeric_limits<std::int32_t>::max()))
    c.per_request.eos_token_id = static_cast<std::int32_t>(*eos);
  // At least a nanosecond: a client gives up after its request arrives.
  c.per_request.client_timeout_s =
      get_optional_double(workload, "client_timeout_s", ctx, 1e-9, 1e9);
  if (const SyntheticWorkloadConfig* syn = c.synthetic(); syn && syn->stop_at_eos_fraction) {
    const YamlContext fc = ctx.child("stop_at_eos_fraction");
    if (has_key(workload, "ignore_eos"))
      throw yaml_error(workload["stop_at_eos_fraction"], fc,
                       fmt::format("{}: cannot be combined with {}.ignore_eos (the fraction says "
                                   "which requests stop at EOS)",
                                   fc.path, ctx.path));
    if (*syn->stop_at_eos_fraction > 0 && !c.per_request.eos_token_id)
      throw yaml_error(workload["stop_at_eos_fraction"], fc,
                       fmt::format("{}: needs {}.eos_token_id (the token that ends a request)",
                                   fc.path, ctx.path));
  }
  c.per_request.n = get_int(workload, "n", ctx, 1, 1, 1024);
  c.per_request.parallel_sampling =
      get_choice(workload, "parallel_sampling", ctx, "fanout", {"fanout", "fork"}) == "fanout"
          ? PerRequestConfig::ParallelSampling::kFanout
          : PerRequestConfig::ParallelSampling::kFork;
  return c;
}

YAML::Node workload_config_yaml(const WorkloadConfig& c) {
  YAML::Node w(YAML::NodeType::Map);
  if (const TraceConfig* t = c.trace())
    write_trace(w, *t);
  else
    write_synthetic(w, *c.synthetic());
  // stop_at_eos_fraction replaces ignore_eos (the parser refuses both).
  const SyntheticWorkloadConfig* syn = c.synthetic();
  if (syn && syn->stop_at_eos_fraction)
    w["ignore_eos"] = null_node();
  else
    w["ignore_eos"] = c.per_request.ignore_eos;
  w["eos_token_id"] = optional_node(c.per_request.eos_token_id);
  w["client_timeout_s"] = optional_node(c.per_request.client_timeout_s);
  w["n"] = c.per_request.n;
  w["parallel_sampling"] =
      c.per_request.parallel_sampling == PerRequestConfig::ParallelSampling::kFanout ? "fanout"
                                                                                     : "fork";
  return w;
}

LengthTable LengthTable::from_csv(const std::string& path) {
  LengthTable t;
  t.file = path;
  const EmpiricalSampler prompts = EmpiricalSampler::from_csv_column(path, "prompt_tokens");
  const EmpiricalSampler outputs = EmpiricalSampler::from_csv_column(path, "output_tokens");
  KVSIM_ASSERT(prompts.values().size() == outputs.values().size());
  for (std::size_t i = 0; i < prompts.values().size(); ++i) {
    for (const auto& [name, v, out] :
         {std::tuple{"prompt_tokens", prompts.values()[i], &t.prompt_tokens},
          std::tuple{"output_tokens", outputs.values()[i], &t.output_tokens}}) {
      if (!(v >= 1 && v <= kMaxTokens && v == std::floor(v)))
        throw ConfigError(
            fmt::format("{}: data row {}: {} must be a whole number in [1, {}], got {}", path,
                        i + 1, name, kMaxTokens, v));
      out->push_back(static_cast<std::int64_t>(v));
    }
  }
  return t;
}

std::size_t LengthTable::draw_row(RngStream& rng) const {
  return static_cast<std::size_t>(
      uniform_int(rng, 0, static_cast<std::int64_t>(prompt_tokens.size()) - 1));
}

}  // namespace kvsim
