#include "sim/workload/synthetic_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <tuple>

#include "core/common/assert.h"

namespace kvsim {

namespace {

constexpr double kMaxTokens = 10'000'000;  // upper bound of any length draw (10M tokens)
constexpr double kMaxThinkTimeS = 1e9;
// The `process:` names, in ArrivalConfig::Process's order.
constexpr std::string_view kProcessNames[] = {"poisson", "gamma", "constant", "bursts",
                                              "timestamps", "all_at_once"};

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
    check_keys(n, {"count", "examples", "example_tokens", "popularity", "share"}, ctx);
  else
    check_keys(n, {"count", "tokens", "popularity", "share"}, ctx);
  PrefixPoolConfig p;
  p.count = get_int(n, "count", ctx, std::nullopt, 1, 1'000'000);
  const char* tokens_key = few_shot ? "example_tokens" : "tokens";
  if (!has_key(n, tokens_key))
    throw yaml_error(n, ctx,
                     fmt::format("missing required key '{}' in {}", tokens_key, ctx.where()));
  p.tokens = Distribution::parse(n[tokens_key], ctx.child(tokens_key), 0, kMaxTokens, true);
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

ArrivalConfig parse_arrival(const YAML::Node& n, const YamlContext& ctx) {
  ArrivalConfig a;
  if (!n.IsDefined() || n.IsNull()) return a;
  require_map(n, ctx);
  using P = ArrivalConfig::Process;
  a.process = static_cast<P>(get_choice_index(n, "process", ctx, "poisson", kProcessNames));
  switch (a.process) {
    case P::kPoisson:
    case P::kConstant:
      check_keys(n, {"process", "rate_per_s"}, ctx);
      a.rate_per_s = get_double(n, "rate_per_s", ctx, std::nullopt, 1e-9, 1e9);
      break;
    case P::kGamma:
      check_keys(n, {"process", "rate_per_s", "cv"}, ctx);
      a.rate_per_s = get_double(n, "rate_per_s", ctx, std::nullopt, 1e-9, 1e9);
      a.cv = get_double(n, "cv", ctx, std::nullopt, 1e-3, 100.0);
      break;
    case P::kBursts:
      check_keys(n, {"process", "burst_size", "interval_s", "spacing_s"}, ctx);
      a.burst_size = get_int(n, "burst_size", ctx, std::nullopt, 1, 100'000'000);
      a.interval_s = get_double(n, "interval_s", ctx, std::nullopt, 0.0, 1e9);
      a.spacing_s = get_double(n, "spacing_s", ctx, 0.0, 0.0, 1e9);
      break;
    case P::kTimestamps:
      check_keys(n, {"process", "times_s"}, ctx);
      a.times_s = get_double_list(n, "times_s", ctx, 0.0, 1e9);
      for (std::size_t i = 1; i < a.times_s.size(); ++i)
        if (a.times_s[i] < a.times_s[i - 1])
          throw yaml_error(
              n["times_s"][i], ctx.child("times_s").element(i),
              fmt::format("{}: times must be nondecreasing, got {} after {}",
                          ctx.child("times_s").element(i).path, a.times_s[i], a.times_s[i - 1]));
      break;
    case P::kAllAtOnce:
      check_keys(n, {"process"}, ctx);
      break;
  }
  return a;
}


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

YAML::Node pool_yaml(const PrefixPoolConfig& p, bool few_shot) {
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

// A generator for one follow-up turn of one session (independent of engine finish order).
RngStream turn_stream(std::uint64_t seed, std::int64_t session, std::int32_t turn) {
  return RngStream(splitmix64(stream_seed(seed, "workload.turns") ^
                              splitmix64(static_cast<std::uint64_t>(session) * 0x100000001b3ULL +
                                         static_cast<std::uint64_t>(turn))));
}

std::uint64_t turn_key(std::uint64_t seed, std::string_view kind, std::int64_t session,
                       std::int32_t turn) {
  return content_key(
      seed, kind, (static_cast<std::uint64_t>(session) << 20) ^ static_cast<std::uint64_t>(turn));
}

std::int32_t to_i32(std::int64_t v) {
  return static_cast<std::int32_t>(
      std::clamp<std::int64_t>(v, 1, std::numeric_limits<std::int32_t>::max()));
}

}  // namespace

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

SyntheticWorkloadConfig parse_synthetic_workload(const YAML::Node& w, const YamlContext& ctx) {
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
    c.prompt_tokens =
        Distribution::parse(w["prompt_tokens"], ctx.child("prompt_tokens"), 1, kMaxTokens, true);
    c.output_tokens =
        Distribution::parse(w["output_tokens"], ctx.child("output_tokens"), 1, kMaxTokens, true);
  }
  if (has_key(w, "system_prompts"))
    c.system_prompts = parse_pool(w["system_prompts"], ctx.child("system_prompts"), false);
  if (has_key(w, "few_shot")) c.few_shot = parse_pool(w["few_shot"], ctx.child("few_shot"), true);
  if (has_key(w, "sessions")) {
    const YAML::Node s = w["sessions"];
    const YamlContext sc = ctx.child("sessions");
    check_keys(s, {"turns", "think_time_s", "user_tokens"}, sc);
    SessionConfig sess;
    if (!has_key(s, "turns")) throw yaml_error(s, sc, "missing required key 'turns' in " + sc.path);
    sess.turns = Distribution::parse(s["turns"], sc.child("turns"), 1, 1'000'000, true);
    sess.think_time_s = has_key(s, "think_time_s")
                            ? Distribution::parse(s["think_time_s"], sc.child("think_time_s"), 0,
                                                  kMaxThinkTimeS, false)
                            : Distribution::fixed(0, 0, kMaxThinkTimeS);
    if (!has_key(s, "user_tokens"))
      throw yaml_error(s, sc, "missing required key 'user_tokens' in " + sc.path);
    sess.user_tokens =
        Distribution::parse(s["user_tokens"], sc.child("user_tokens"), 1, kMaxTokens, true);
    c.sessions = std::move(sess);
  }
  c.ignore_eos = get_bool(w, "ignore_eos", ctx, true);
  if (auto eos =
          get_optional_int(w, "eos_token_id", ctx, 0, std::numeric_limits<std::int32_t>::max()))
    c.eos_token_id = static_cast<std::int32_t>(*eos);
  return c;
}

YAML::Node synthetic_workload_yaml(const SyntheticWorkloadConfig& c) {
  YAML::Node w(YAML::NodeType::Map);
  w["num_requests"] = c.num_requests;
  if (c.duration_s) w["duration_s"] = number_node(*c.duration_s);
  w["arrival"] = arrival_yaml(c.arrival);
  if (c.lengths) {
    w["lengths"] = c.lengths->file;
  } else {
    w["prompt_tokens"] = c.prompt_tokens.to_yaml();
    w["output_tokens"] = c.output_tokens.to_yaml();
  }
  if (c.system_prompts) w["system_prompts"] = pool_yaml(*c.system_prompts, false);
  if (c.few_shot) w["few_shot"] = pool_yaml(*c.few_shot, true);
  if (c.sessions) {
    YAML::Node s(YAML::NodeType::Map);
    s["turns"] = c.sessions->turns.to_yaml();
    s["think_time_s"] = c.sessions->think_time_s.to_yaml();
    s["user_tokens"] = c.sessions->user_tokens.to_yaml();
    w["sessions"] = s;
  }
  w["ignore_eos"] = c.ignore_eos;
  if (c.eos_token_id) w["eos_token_id"] = *c.eos_token_id;
  return w;
}

SyntheticSource::SyntheticSource(SyntheticWorkloadConfig config, std::uint64_t seed,
                                 std::int32_t vocab_size)
    : config_(std::move(config)),
      seed_(seed),
      vocab_size_(vocab_size),
      arrivals_(make_stream(seed, "workload.arrivals")),
      lengths_(make_stream(seed, "workload.lengths")),
      prefix_choice_(make_stream(seed, "workload.prefix_choice")),
      sessions_rng_(make_stream(seed, "workload.sessions")) {
  RngStream prefix_lengths = make_stream(seed, "workload.prefix_lengths");
  auto build = [&](const std::optional<PrefixPoolConfig>& pool, std::vector<Prefix>& out,
                   std::optional<ZipfSampler>& zipf) {
    if (!pool) return;
    for (std::int64_t i = 0; i < pool->count; ++i) {
      Prefix p;
      for (std::int64_t e = 0; e < pool->examples; ++e)
        p.segment_tokens.push_back(pool->tokens.sample_int(prefix_lengths));
      out.push_back(std::move(p));
    }
    zipf.emplace(pool->count, pool->zipf_s);
  };
  build(config_.system_prompts, system_prompts_, system_zipf_);
  build(config_.few_shot, templates_, few_shot_zipf_);
}

std::optional<SimTimeNs> SyntheticSource::next_arrival() {
  if (emitted_ >= config_.num_requests) return std::nullopt;
  const ArrivalConfig& a = config_.arrival;
  SimTimeNs t = clock_ns_;
  switch (a.process) {
    case ArrivalConfig::Process::kPoisson:
      t = add_time_saturating(t, seconds_to_ns(exponential(arrivals_, a.rate_per_s)));
      break;
    case ArrivalConfig::Process::kGamma:
      t = add_time_saturating(t, seconds_to_ns(gamma_mean_cv(arrivals_, 1.0 / a.rate_per_s, a.cv)));
      break;
    case ArrivalConfig::Process::kConstant:
      // Computed from the index, not accumulated, so rounding never drifts.
      t = seconds_to_ns(static_cast<double>(emitted_) / a.rate_per_s);
      break;
    case ArrivalConfig::Process::kBursts: {
      const std::int64_t burst = emitted_ / a.burst_size, within = emitted_ % a.burst_size;
      t = seconds_to_ns(static_cast<double>(burst) * a.interval_s +
                        static_cast<double>(within) * a.spacing_s);
      t = std::max(t, clock_ns_);
      break;
    }
    case ArrivalConfig::Process::kTimestamps:
      t = seconds_to_ns(a.times_s[static_cast<std::size_t>(emitted_)]);
      break;
    case ArrivalConfig::Process::kAllAtOnce:
      t = 0;
      break;
  }
  if (config_.duration_s && t > seconds_to_ns(*config_.duration_s)) return std::nullopt;
  clock_ns_ = t;
  return t;
}

std::int64_t SyntheticSource::choose(const PrefixPoolConfig& pool,
                                     const std::optional<ZipfSampler>& zipf) {
  // Two draws always, so the stream position does not depend on the outcome.
  const double u = uniform01(prefix_choice_);
  const std::int64_t k = (*zipf)(prefix_choice_)-1;
  return u < pool.share ? k : -1;
}

void SyntheticSource::defer_prefix(RequestSpec& r, std::string_view kind, std::int64_t index,
                                   const Prefix& prefix) const {
  for (std::size_t e = 0; e < prefix.segment_tokens.size(); ++e) {
    const std::uint64_t key =
        content_key(seed_, kind, (static_cast<std::uint64_t>(index) << 20) ^ e);
    r.defer_tokens(key, prefix.segment_tokens[e], vocab_size_);
  }
}

std::optional<RequestSpec> SyntheticSource::next() {
  const auto arrival = next_arrival();
  if (!arrival) return std::nullopt;
  RequestSpec r;
  r.id = next_id_++;
  r.arrival_ns = *arrival;
  r.ignore_eos = config_.ignore_eos;
  r.eos_token_id = config_.eos_token_id;
  std::int64_t user_tokens;
  if (config_.lengths) {
    const std::size_t row = config_.lengths->draw_row(lengths_);
    user_tokens = config_.lengths->prompt_tokens[row];
    r.max_tokens = to_i32(config_.lengths->output_tokens[row]);
  } else {
    user_tokens = config_.prompt_tokens.sample_int(lengths_);
    r.max_tokens = to_i32(config_.output_tokens.sample_int(lengths_));
  }
  std::int64_t sp = -1, fs = -1;
  if (config_.system_prompts) sp = choose(*config_.system_prompts, system_zipf_);
  if (config_.few_shot) fs = choose(*config_.few_shot, few_shot_zipf_);
  const std::int64_t f = config_.few_shot ? config_.few_shot->count : 0;
  if (sp >= 0 || fs >= 0)
    r.prefix_group = static_cast<std::int32_t>((sp + 1) * (f + 1) + (fs + 1) - 1);
  // The prompt is deferred (segments, see RequestSpec): its tokens are made when the request
  // reaches the part of the waiting queue the scheduler looks at.
  if (sp >= 0) defer_prefix(r, "system", sp, system_prompts_[static_cast<std::size_t>(sp)]);
  if (fs >= 0) defer_prefix(r, "few_shot", fs, templates_[static_cast<std::size_t>(fs)]);
  if (config_.sessions) {
    r.session = emitted_;
    r.turn = 0;
    const std::int64_t turns = config_.sessions->turns.sample_int(sessions_rng_);
    if (turns > 1) session_turns_[r.session] = static_cast<std::int32_t>(turns);
    r.defer_tokens(turn_key(seed_, "session_user", r.session, 0), user_tokens, vocab_size_);
    r.output_seed = turn_key(seed_, "session_output", r.session, 0);
  } else {
    r.defer_tokens(content_key(seed_, "user", r.id), user_tokens, vocab_size_);
    r.output_seed = content_key(seed_, "output", r.id);
  }
  ++emitted_;
  return r;
}

std::optional<RequestSpec> SyntheticSource::on_finished(const RequestSpec& done,
                                                        SimTimeNs finish_ns,
                                                        std::span<const std::int32_t> outputs) {
  if (done.session < 0 || !config_.sessions) return std::nullopt;
  auto it = session_turns_.find(done.session);
  if (it == session_turns_.end()) return std::nullopt;
  const std::int32_t turn = done.turn + 1;
  if (turn >= it->second) {
    session_turns_.erase(it);
    return std::nullopt;
  }
  RngStream rng = turn_stream(seed_, done.session, turn);
  RequestSpec r;
  r.id = next_id_++;
  r.session = done.session;
  r.turn = turn;
  r.prefix_group = done.prefix_group;
  r.ignore_eos = done.ignore_eos;
  r.eos_token_id = done.eos_token_id;
  const double think_s = config_.sessions->think_time_s.sample(rng);
  const std::int64_t user_tokens = config_.sessions->user_tokens.sample_int(rng);
  r.max_tokens = config_.lengths
                     ? to_i32(config_.lengths->output_tokens[config_.lengths->draw_row(rng)])
                     : to_i32(config_.output_tokens.sample_int(rng));
  r.arrival_ns = add_time_saturating(finish_ns, seconds_to_ns(think_s));
  r.prompt.reserve(done.prompt.size() + outputs.size() + static_cast<std::size_t>(user_tokens));
  r.prompt = done.prompt;
  r.prompt.insert(r.prompt.end(), outputs.begin(), outputs.end());
  append_pseudo_tokens(r.prompt, turn_key(seed_, "session_user", r.session, turn), user_tokens,
                       vocab_size_);
  r.output_seed = turn_key(seed_, "session_output", r.session, turn);
  return r;
}

}  // namespace kvsim
