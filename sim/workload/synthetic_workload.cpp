#include "sim/workload/synthetic_workload.h"

#include <algorithm>
#include <limits>

namespace kvsim {

namespace {

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

SyntheticSource::SyntheticSource(SyntheticWorkloadConfig config, PerRequestConfig per_request,
                                 std::uint64_t seed, std::int32_t vocab_size)
    : config_(std::move(config)),
      per_request_(per_request),
      seed_(seed),
      vocab_size_(vocab_size),
      arrivals_(make_stream(seed, "workload.arrivals")),
      lengths_(make_stream(seed, "workload.lengths")),
      prefix_choice_(make_stream(seed, "workload.prefix_choice")),
      sessions_rng_(make_stream(seed, "workload.sessions")),
      stop_at_eos_(make_stream(seed, "workload.stop_at_eos")) {
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
  r.ignore_eos = config_.stop_at_eos_fraction
                     ? !(uniform01(stop_at_eos_) < *config_.stop_at_eos_fraction)
                     : per_request_.ignore_eos;
  r.eos_token_id = per_request_.eos_token_id;
  if (per_request_.client_timeout_s)
    r.client_timeout_ns = seconds_to_ns(*per_request_.client_timeout_s);
  std::int64_t user_tokens;
  if (config_.lengths) {
    const std::size_t row = config_.lengths->draw_row(lengths_);
    user_tokens = config_.lengths->prompt_tokens[row];
    r.output_tokens = to_i32(config_.lengths->output_tokens[row]);
  } else {
    user_tokens = config_.prompt_tokens.sample_int(lengths_);
    r.output_tokens = to_i32(config_.output_tokens.sample_int(lengths_));
  }
  set_default_max_tokens(r);
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
  r.client_timeout_ns = done.client_timeout_ns;
  const double think_s = config_.sessions->think_time_s.sample(rng);
  const std::int64_t user_tokens = config_.sessions->user_tokens.sample_int(rng);
  r.output_tokens = config_.lengths
                        ? to_i32(config_.lengths->output_tokens[config_.lengths->draw_row(rng)])
                        : to_i32(config_.output_tokens.sample_int(rng));
  set_default_max_tokens(r);
  r.arrival_ns = add_time_saturating(finish_ns, seconds_to_ns(think_s));
  r.prompt.reserve(done.prompt.size() + outputs.size() + static_cast<std::size_t>(user_tokens));
  r.prompt = done.prompt;
  r.prompt.insert(r.prompt.end(), outputs.begin(), outputs.end());
  append_pseudo_tokens(r.prompt, turn_key(seed_, "session_user", r.session, turn), user_tokens,
                       vocab_size_);
  r.output_seed = turn_key(seed_, "session_output", r.session, turn);
  return r;
}

void SyntheticSource::on_dropped(const RequestSpec& done) {
  if (done.session >= 0) session_turns_.erase(done.session);
}

}  // namespace kvsim
