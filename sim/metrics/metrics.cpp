#include "sim/metrics/metrics.h"

#include "sim/metrics/prom_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "core/common/assert.h"

namespace kvsim {
namespace {

constexpr int kMantissaBits = 10;  // 1024 sub-buckets per power of two
constexpr std::size_t kNumBuckets = std::size_t{64} << kMantissaBits;

double ns_to_ms(double ns) { return ns / 1e6; }

std::vector<double> build_1_2_5(std::int64_t max_value) {
  std::vector<double> out;
  for (std::int64_t m = 1;; m *= 10)
    for (std::int64_t k : {1, 2, 5}) {
      if (k * m > max_value) return out;
      out.push_back(static_cast<double>(k * m));
    }
}

}  // namespace

std::string prom_num(double v) {
  if (std::isinf(v)) return "+Inf";
  return fmt::format("{}", v);
}

void append_prom_scalar(std::string& o, std::string_view name, std::string_view type,
                        std::string_view help, std::string_view label, double v) {
  o += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{{{}}} {}\n", name, help, name, type, name,
                   label, prom_num(v));
}

void append_prom_histogram(std::string& o, std::string_view name, std::string_view help,
                           std::string_view label, const PromHistogram& h) {
  o += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  std::int64_t cum = 0;
  for (std::size_t i = 0; i <= h.bounds.size(); ++i) {
    cum += h.counts[i];
    const std::string le = i < h.bounds.size() ? prom_num(h.bounds[i]) : "+Inf";
    o += fmt::format("{}_bucket{{le=\"{}\",{}}} {}\n", name, le, label, cum);
  }
  o += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, label, prom_num(h.sum), name,
                   label, h.count);
}

// ---- QuantileSketch -------------------------------------------------------------------------

std::size_t QuantileSketch::bucket_of(std::int64_t v) {
  const auto u = static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0));
  if (u < (std::uint64_t{1} << kMantissaBits)) return static_cast<std::size_t>(u);
  const int exp = 63 - std::countl_zero(u);  // >= kMantissaBits
  const int shift = exp - kMantissaBits;
  const std::uint64_t mant = (u >> shift) & ((std::uint64_t{1} << kMantissaBits) - 1);
  return (static_cast<std::size_t>(shift + 1) << kMantissaBits) + static_cast<std::size_t>(mant);
}

double QuantileSketch::bucket_mid(std::size_t b) {
  const std::size_t hi = b >> kMantissaBits;
  const std::size_t mant = b & ((std::size_t{1} << kMantissaBits) - 1);
  if (hi == 0) return static_cast<double>(mant);
  const int shift = static_cast<int>(hi) - 1;
  const double lo =
      std::ldexp(static_cast<double>((std::uint64_t{1} << kMantissaBits) | mant), shift);
  return lo + std::ldexp(0.5, shift);
}

void QuantileSketch::add(std::int64_t v, std::int64_t n) {
  KVSIM_ASSERT(n >= 1);
  count_ += n;
  sum_ += static_cast<Int128>(v) * n;
  sum_sq_ += static_cast<Int128>(v) * v * n;
  if (hist_.empty()) {
    exact_.insert(exact_.end(), static_cast<std::size_t>(n), v);
    sorted_ = false;
    if (exact_.size() > kExactLimit) {
      hist_.assign(kNumBuckets, 0);
      for (std::int64_t e : exact_) ++hist_[bucket_of(e)];
      std::vector<std::int64_t>().swap(exact_);
    }
  } else {
    hist_[bucket_of(v)] += n;
  }
}

double QuantileSketch::mean() const {
  return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) : 0.0;
}

double QuantileSketch::stddev() const {
  if (count_ == 0) return 0.0;
  // n^2 var = n * sum_sq - sum^2, exact in 128-bit integers while it cannot overflow (count
  // below 2^31 and sum_sq below 2^95); beyond that, long double moments.
  const long double n2 = static_cast<long double>(count_) * static_cast<long double>(count_);
  long double var;
  if (count_ < (std::int64_t{1} << 31) && sum_sq_ < (static_cast<Int128>(1) << 95)) {
    const Int128 num = static_cast<Int128>(count_) * sum_sq_ - sum_ * sum_;
    var = static_cast<long double>(num) / n2;
  } else {
    const long double m = static_cast<long double>(sum_) / static_cast<long double>(count_);
    var = static_cast<long double>(sum_sq_) / static_cast<long double>(count_) - m * m;
  }
  return var > 0 ? static_cast<double>(std::sqrt(var)) : 0.0;
}

double QuantileSketch::percentile(double p) {
  if (count_ == 0) return 0.0;
  if (hist_.empty()) {
    if (!sorted_) {
      std::sort(exact_.begin(), exact_.end());
      sorted_ = true;
    }
    const double rank = p / 100.0 * static_cast<double>(exact_.size() - 1);
    const auto lo = static_cast<std::size_t>(std::floor(rank));
    const std::size_t hi = std::min(lo + 1, exact_.size() - 1);
    const double frac = rank - static_cast<double>(lo);
    return static_cast<double>(exact_[lo]) + frac * static_cast<double>(exact_[hi] - exact_[lo]);
  }
  const auto target =
      static_cast<std::int64_t>(std::floor(p / 100.0 * static_cast<double>(count_ - 1)));
  std::int64_t seen = 0;
  for (std::size_t b = 0; b < hist_.size(); ++b) {
    seen += hist_[b];
    if (seen > target) return bucket_mid(b);
  }
  return bucket_mid(hist_.size() - 1);
}

void PromHistogram::observe(double v, std::int64_t n) {
  // The first bound >= v (Prometheus' le). A forward scan: observations mostly fall in the first
  // few of vLLM's buckets, where it beats a binary search's unpredictable branches.
  std::size_t i = 0;
  while (i < bounds.size() && bounds[i] < v) ++i;
  counts[i] += n;
  for (std::int64_t k = 0; k < n; ++k) sum += v;  // the sum n separate observations give
  count += n;
}

// ---- MetricsCollector -----------------------------------------------------------------------

MetricsCollector::MetricsCollector(const std::vector<std::int64_t>* final_kv_tokens,
                                   std::int64_t steps_every, std::int64_t max_model_len,
                                   RecordSink* sink)
    : final_kv_tokens_(final_kv_tokens),
      steps_every_(std::max<std::int64_t>(1, steps_every)),
      sink_(sink) {
  h_ttft_.init(
      {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0});
  h_tpot_.init({0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5});
  h_e2e_.init({1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0});
  h_queue_.init({0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0});
  h_prompt_.init(build_1_2_5(max_model_len));
  h_gen_.init(build_1_2_5(max_model_len));
}

void MetricsCollector::count_step(const StepTotals& t, const KVPoolStats& pool) {
  const double usage = pool.usage;
  ++num_steps_;
  overload_.on_step_end(t.end_ns, t.num_waiting);
  sum_usage_ += usage;
  max_usage_ = std::max(max_usage_, usage);
  sum_running_ += static_cast<double>(t.num_running);
  sum_waiting_ += static_cast<double>(t.num_waiting);
  sum_batch_size_ += static_cast<double>(t.batch);
  sum_batch_tokens_ += static_cast<double>(t.batch_tokens);
  max_batch_size_ = std::max(max_batch_size_, t.batch);

  prefix_queries_ += t.prefix_queries;
  prefix_hits_ += t.prefix_hits;
  num_preemptions_ += t.preemptions;
  pending_.prefix_queries += t.prefix_queries;
  pending_.prefix_hits += t.prefix_hits;
  pending_.preemptions += t.preemptions;
  pending_.evictions += pool.evictions - num_evictions_;
  pending_.blocks_allocated += pool.blocks_allocated - num_blocks_allocated_;
  num_evictions_ = pool.evictions;
  num_blocks_allocated_ = pool.blocks_allocated;
}

void MetricsCollector::add_itl(SimTimeNs end_ns, std::span<const SimTimeNs> prev_token_ns) {
  // Inter-token latencies, one per output that follows an earlier token. Requests that decoded in
  // the previous step share one value, so runs of equal values are added at once.
  SimTimeNs run_prev = -1;
  std::int64_t run = 0;
  const auto add_itl_run = [&] {
    if (run == 0) return;
    itl_.add(end_ns - run_prev, run);
    if (prom_) h_tpot_.observe(static_cast<double>(end_ns - run_prev) / 1e9, run);
  };
  for (const SimTimeNs prev : prev_token_ns) {
    if (prev < 0) continue;
    if (prev != run_prev) {
      add_itl_run();
      run_prev = prev;
      run = 0;
    }
    ++run;
  }
  add_itl_run();
}

void MetricsCollector::set_pending(const StepTotals& t, const KVPoolStats& pool) {
  StepRecord& r = pending_;
  r.step = t.step;
  r.time_ns = t.start_ns;
  r.duration_ns = t.end_ns - t.start_ns;
  r.num_running = t.num_running;
  r.num_waiting = t.num_waiting;
  r.num_scheduled = t.batch;
  r.prefill_tokens = t.prefill_tokens;
  r.decode_tokens = t.decode_tokens;
  r.batch_tokens = t.batch_tokens;
  r.kv_cache_usage_perc = pool.usage;
  r.num_free_blocks = pool.num_free_blocks;
}

void MetricsCollector::on_step(const StepView& v) {
  const EngineCore& eng = *v.engine;
  const KVPoolStats pool = eng.pool_stats();
  const SchedulerOutput& out = *v.out;
  StepTotals t;
  t.step = v.step;
  t.start_ns = v.start_ns;
  t.end_ns = v.end_ns;
  t.num_running = static_cast<std::int64_t>(eng.running().size());
  t.num_waiting = v.num_waiting;
  t.batch = static_cast<std::int64_t>(out.scheduled.size());
  t.batch_tokens = out.total_num_scheduled_tokens;
  t.prefill_tokens = v.prefill_tokens;
  t.decode_tokens = v.decode_tokens;
  t.prefix_queries = out.prefix_queries_tokens;
  t.prefix_hits = out.prefix_hits_tokens;
  t.preemptions = static_cast<std::int64_t>(out.preempted.size());
  count_step(t, pool);
  add_itl(v.end_ns, v.prev_token_ns);
  if (offload_ != nullptr) take_offload_deltas();
  set_pending(t, pool);
  if (v0_) {
    V0Moves m;
    m.swapped_in = static_cast<std::int64_t>(out.blocks_to_swap_in.size());
    m.swapped_out = static_cast<std::int64_t>(out.blocks_to_swap_out.size());
    m.copies = static_cast<std::int64_t>(out.blocks_to_copy.size());
    m.by_swap = out.num_swapped_out;
    m.by_recompute = static_cast<std::int64_t>(out.preempted.size()) - m.by_swap;
    on_step_v0(m, eng.num_swapped(), pool);
  }
  if (v.step % steps_every_ == 0) record_pending(eng);
}

std::int64_t MetricsCollector::next_step_needed(std::int64_t step) const {
  const std::int64_t past = step % steps_every_;  // the next recorded row (no overflow when
  return past == 0 ? step : step - past + steps_every_;  // steps_every is the largest int64)
}

void MetricsCollector::on_decode_run(const DecodeRun& run) {
  // Each step as on_step sees it: the batch runs and decodes one token per request.
  StepTotals t;
  t.num_running = t.batch = t.batch_tokens = t.decode_tokens = run.batch;
  t.num_waiting = run.num_waiting;
  for (std::int64_t j = 0; j < run.num_steps; ++j) {
    const auto i = static_cast<std::size_t>(j);
    t.step = run.first_step + j;
    t.start_ns = run.times[i];
    t.end_ns = run.times[i + 1];
    if (j + 1 == run.num_steps) t.num_waiting = run.last_num_waiting;
    count_step(t, run.pool[i]);
    if (j == 0) {
      add_itl(t.end_ns, run.prev_token_ns);
    } else if (run.batch > 0) {  // every request's previous token came at the previous step's end
      itl_.add(t.end_ns - t.start_ns, run.batch);
      if (prom_) h_tpot_.observe(static_cast<double>(t.end_ns - t.start_ns) / 1e9, run.batch);
    }
    set_pending(t, run.pool[i]);
    // V0: no block moves or preemptions in a decode run; the swapped queue does not change.
    if (v0_) on_step_v0({}, run.engine->num_swapped(), run.pool[i]);
  }
}

void MetricsCollector::enable_kv_groups(std::vector<KVGroupLabel> labels) {
  group_labels_ = std::move(labels);
  group_shares_.assign(group_labels_.size(), KVGroupShare{});
  group_sums_.assign(group_labels_.size(), GroupSums{});
}

void MetricsCollector::record_pending(const EngineCore& e) {
  StepRecord& r = pending_;
  if (group_labels_.empty()) {
    r.slots = e.kv_breakdown(*final_kv_tokens_);
  } else {
    r.slots = e.kv_breakdown_by_group(*final_kv_tokens_, group_shares_);
    r.groups = group_shares_;
  }
  const double total = static_cast<double>(r.slots.total());
  const std::int64_t parts[6] = {
      r.slots.token_states,           r.slots.reservation, r.slots.internal_fragmentation,
      r.slots.external_fragmentation, r.slots.cached_free, r.slots.free};
  for (int k = 0; k < 6; ++k) sum_breakdown_frac_[k] += static_cast<double>(parts[k]) / total;
  if (!group_labels_.empty()) {
    // A group's usage is vLLM v0.20's usage restricted to its blocks: blocks / (num_blocks - 1),
    // the null block excluded; the groups' usages add up to the pool's.
    const double usable = static_cast<double>(e.pool_stats().num_blocks - 1);
    for (std::size_t g = 0; g < group_shares_.size(); ++g) {
      const KVGroupShare& sh = group_shares_[g];
      GroupSums& sum = group_sums_[g];
      const double usage = usable > 0 ? static_cast<double>(sh.blocks) / usable : 0.0;
      sum.usage += usage;
      sum.max_usage = std::max(sum.max_usage, usage);
      const std::int64_t gparts[4] = {sh.token_states, sh.reservation, sh.internal_fragmentation,
                                      sh.cached_free};
      for (int k = 0; k < 4; ++k) sum.frac[k] += static_cast<double>(gparts[k]) / total;
    }
  }
  ++num_recorded_;
  if (sink_) sink_->on_step_record(r);
  pending_ = StepRecord{};
}

void MetricsCollector::on_request_done(const RequestRecord& r) {
  if (first_arrival_ns_ < 0 || r.arrival_ns < first_arrival_ns_) first_arrival_ns_ = r.arrival_ns;
  if (sink_) sink_->on_request_record(r);
  overload_.on_request_done(r);
  if (r.reason == FinishReason::kRejected) {
    ++rejected_;
    return;
  }
  if (r.reason == FinishReason::kAbort) {
    // As vLLM v0.7.2 counts an aborted request (vllm/v1/engine/output_processor.py,
    // v1/metrics/stats.py): its delivered tokens count as generated tokens and its first token's
    // latency is observed, but it is no success, and none of the finished requests' statistics
    // (benchmark_serving's latencies and throughputs, the e2e/queue/length histograms) include it.
    ++aborted_;
    aborted_output_tokens_ += r.output_tokens;
    if (prom_ && r.first_token_ns >= 0)
      h_ttft_.observe(static_cast<double>(r.first_token_ns - r.arrival_ns) / 1e9);
    return;
  }
  if (r.reason == FinishReason::kIgnored) {
    ++ignored_;
    return;
  }
  ++completed_;
  total_input_ += r.prompt_tokens;
  total_output_ += r.output_tokens;
  first_lookup_hits_ += r.first_lookup_hit_tokens;
  first_lookup_prompt_ += r.prompt_tokens;
  last_finish_ns_ = std::max(last_finish_ns_, r.finish_ns);
  if (r.first_token_ns < 0) return;  // cache_only mode: no timing
  const SimTimeNs ttft = r.first_token_ns - r.arrival_ns;
  const SimTimeNs e2e = r.finish_ns - r.arrival_ns;
  ttft_.add(ttft);
  e2el_.add(e2e);
  queue_.add(r.first_scheduled_ns - r.arrival_ns);
  if (r.output_tokens > 1) tpot_.add((e2e - ttft) / (r.output_tokens - 1));
  if (!prom_) return;
  h_ttft_.observe(static_cast<double>(ttft) / 1e9);
  h_e2e_.observe(static_cast<double>(e2e) / 1e9);
  h_queue_.observe(static_cast<double>(r.first_scheduled_ns - r.arrival_ns) / 1e9);
  h_prompt_.observe(static_cast<double>(r.prompt_tokens));
  h_gen_.observe(static_cast<double>(r.output_tokens));
}

void MetricsCollector::on_lookup(std::int64_t prompt_tokens, std::int64_t hit_tokens) {
  prefix_queries_ += prompt_tokens;
  prefix_hits_ += hit_tokens;
}

void MetricsCollector::on_simulation_end(SimTimeNs, const EngineCore& e) {
  // The last step is always recorded, so the rows' counters add up to the run's totals (the CPU
  // tier's too: the idle steps after it count in its row). Nothing changes the cache after the
  // last step's update, so its breakdown is computed now.
  if (offload_ != nullptr && pending_.step >= 0) take_offload_deltas();
  if (pending_.step >= 0) record_pending(e);
  const KVPoolStats pool = e.pool_stats();
  num_evictions_ = pool.evictions;
  num_blocks_allocated_ = pool.blocks_allocated;
  last_running_ = static_cast<std::int64_t>(e.running().size());
  last_waiting_ = e.num_waiting();
  last_usage_ = pool.usage;
  if (v0_) {
    num_cpu_blocks_ = pool.num_cpu_blocks;
    last_swapped_ = e.num_swapped();
    last_cpu_usage_ = pool.num_cpu_blocks > 0
                          ? 1.0 - static_cast<double>(pool.num_free_cpu_blocks) /
                                      static_cast<double>(pool.num_cpu_blocks)
                          : 0.0;
  }
}

void MetricsCollector::on_cluster_end(std::span<const EngineCore* const> engines,
                                      std::span<const MetricsCollector* const> replicas) {
  for (const MetricsCollector* m : replicas) {
    num_recorded_ += m->num_recorded_;
    for (std::size_t k = 0; k < sum_breakdown_frac_.size(); ++k)
      sum_breakdown_frac_[k] += m->sum_breakdown_frac_[k];
    for (std::size_t g = 0; g < group_sums_.size() && g < m->group_sums_.size(); ++g) {
      GroupSums& sum = group_sums_[g];
      const GroupSums& theirs = m->group_sums_[g];
      sum.usage += theirs.usage;
      sum.max_usage = std::max(sum.max_usage, theirs.max_usage);
      for (std::size_t k = 0; k < sum.frac.size(); ++k) sum.frac[k] += theirs.frac[k];
    }
  }
  num_evictions_ = num_blocks_allocated_ = last_running_ = last_waiting_ = 0;
  double usage = 0;
  for (const EngineCore* e : engines) {
    const KVPoolStats pool = e->pool_stats();
    num_evictions_ += pool.evictions;
    num_blocks_allocated_ += pool.blocks_allocated;
    last_running_ += static_cast<std::int64_t>(e->running().size());
    last_waiting_ += e->num_waiting();
    usage += pool.usage;
  }
  last_usage_ = engines.empty() ? 0.0 : usage / static_cast<double>(engines.size());
}

std::string MetricsCollector::summary_json(const std::string& header) {
  std::string o = "{\n" + header;
  auto i64 = [&](const char* k, std::int64_t v) { o += fmt::format("  \"{}\": {},\n", k, v); };
  auto f6 = [&](const char* k, double v) { o += fmt::format("  \"{}\": {:.6f},\n", k, v); };
  auto f9 = [&](const char* k, double v) { o += fmt::format("  \"{}\": {:.9f},\n", k, v); };
  i64("completed", completed_);
  i64("rejected", rejected_);
  i64("aborted", aborted_);
  if (aborted_ > 0) i64("aborted_output_tokens", aborted_output_tokens_);
  if (const OverloadDetector::Verdict ov = overload_.verdict(); ov.overloaded) {
    o += "  \"overloaded\": true,\n";
    f6("arrival_rate_per_s", ov.arrival_rate_per_s);
    f6("completion_rate_per_s", ov.completion_rate_per_s);
    f9("overload_window_start_s", static_cast<double>(ov.window_start_ns) / 1e9);
    f9("overload_window_end_s", static_cast<double>(ov.window_end_ns) / 1e9);
  }
  i64("total_input_tokens", total_input_);
  i64("total_output_tokens", total_output_);
  const double duration_s = completed_ > 0 && last_finish_ns_ > first_arrival_ns_
                                ? static_cast<double>(last_finish_ns_ - first_arrival_ns_) / 1e9
                                : 0.0;
  f6("duration", duration_s);
  const double inv = duration_s > 0 ? 1.0 / duration_s : 0.0;
  f6("request_throughput", static_cast<double>(completed_) * inv);
  f6("output_throughput", static_cast<double>(total_output_) * inv);
  f6("total_token_throughput", static_cast<double>(total_input_ + total_output_) * inv);
  struct Named {
    const char* name;
    QuantileSketch* q;
  };
  for (const Named& n :
       {Named{"ttft", &ttft_}, Named{"tpot", &tpot_}, Named{"itl", &itl_}, Named{"e2el", &e2el_}}) {
    QuantileSketch& q = *n.q;
    f6(fmt::format("mean_{}_ms", n.name).c_str(), ns_to_ms(q.mean()));
    f6(fmt::format("median_{}_ms", n.name).c_str(), ns_to_ms(q.percentile(50)));
    f6(fmt::format("std_{}_ms", n.name).c_str(), ns_to_ms(q.stddev()));
    for (int p : {50, 90, 95, 99})
      f6(fmt::format("p{}_{}_ms", p, n.name).c_str(), ns_to_ms(q.percentile(p)));
  }
  f6("mean_queue_ms", ns_to_ms(queue_.mean()));
  f6("p99_queue_ms", ns_to_ms(queue_.percentile(99)));
  i64("prefix_cache_queries", prefix_queries_);
  i64("prefix_cache_hits", prefix_hits_);
  f9("prefix_cache_hit_rate",
     prefix_queries_ ? static_cast<double>(prefix_hits_) / static_cast<double>(prefix_queries_)
                     : 0.0);
  f9("first_lookup_hit_rate", first_lookup_prompt_ ? static_cast<double>(first_lookup_hits_) /
                                                         static_cast<double>(first_lookup_prompt_)
                                                   : 0.0);
  i64("num_preemptions", num_preemptions_);
  i64("num_evictions", num_evictions_);
  i64("num_blocks_allocated", num_blocks_allocated_);
  i64("num_steps", num_steps_);
  const double steps = num_steps_ ? static_cast<double>(num_steps_) : 1.0;
  f9("mean_kv_cache_usage_perc", sum_usage_ / steps);
  f9("max_kv_cache_usage_perc", max_usage_);
  f6("mean_num_running", sum_running_ / steps);
  f6("mean_num_waiting", sum_waiting_ / steps);
  f6("mean_batch_size", sum_batch_size_ / steps);
  i64("max_batch_size", max_batch_size_);
  f6("mean_batch_tokens", sum_batch_tokens_ / steps);
  if (v0_) summary_v0(o);
  if (offload_ != nullptr) summary_offload(o);
  if (!group_labels_.empty()) summary_groups(o);
  const char* names[6] = {"token_states",           "reservation", "internal_fragmentation",
                          "external_fragmentation", "cached_free", "free"};
  o += "  \"kv_breakdown\": {";
  const double rec = num_recorded_ ? static_cast<double>(num_recorded_) : 1.0;
  for (int k = 0; k < 6; ++k) {
    // No recorded step (cache_only mode): the pool is all free.
    const double frac = num_recorded_ ? sum_breakdown_frac_[k] / rec : (k == 5 ? 1.0 : 0.0);
    o += fmt::format("{}\"{}\": {:.9f}", k ? ", " : "", names[k], frac);
  }
  o += "}\n}\n";
  return o;
}

void MetricsCollector::summary_groups(std::string& o) const {
  const double rec = num_recorded_ ? static_cast<double>(num_recorded_) : 1.0;
  const char* names[4] = {"token_states", "reservation", "internal_fragmentation", "cached_free"};
  o += "  \"kv_cache_groups\": {\n";
  for (std::size_t g = 0; g < group_labels_.size(); ++g) {
    const KVGroupLabel& l = group_labels_[g];
    const GroupSums& sum = group_sums_[g];
    o += fmt::format("    \"g{}\": {{\"kind\": \"{}\", ", g, l.kind);
    if (l.kind == "sliding_window") o += fmt::format("\"sliding_window\": {}, ", l.window_tokens);
    if (l.kind == "chunked_local")
      o += fmt::format("\"attention_chunk_size\": {}, ", l.window_tokens);
    o += fmt::format(
        "\"num_layers\": {}, \"block_size\": {}, \"mean_kv_cache_usage_perc\": {:.9f}, "
        "\"max_kv_cache_usage_perc\": {:.9f}, \"kv_breakdown\": {{",
        l.num_layers, l.block_size, sum.usage / rec, sum.max_usage);
    for (int k = 0; k < 4; ++k)
      o += fmt::format("{}\"{}\": {:.9f}", k ? ", " : "", names[k], sum.frac[k] / rec);
    o += g + 1 < group_labels_.size() ? "}},\n" : "}}\n";
  }
  o += "  },\n";
}

std::string MetricsCollector::prometheus_text(const std::string& model_name) {
  std::string o;
  const std::string label = fmt::format("model_name=\"{}\"", model_name);
  auto scalar = [&](const char* name, const char* type, const char* help, double v) {
    append_prom_scalar(o, name, type, help, label, v);
  };
  auto hist = [&](const char* name, const char* help, const PromHistogram& h) {
    append_prom_histogram(o, name, help, label, h);
  };
  scalar("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
         static_cast<double>(last_running_));
  scalar("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
         static_cast<double>(last_waiting_));
  scalar("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.",
         last_usage_);
  if (v0_) {
    scalar("vllm:num_requests_swapped", "gauge", "Number of requests swapped to CPU.",
           static_cast<double>(last_swapped_));
    scalar("vllm:cpu_cache_usage_perc", "gauge", "CPU KV-cache usage. 1 means 100 percent usage.",
           last_cpu_usage_);
  }
  scalar("vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.", static_cast<double>(num_preemptions_));
  scalar("vllm:prefix_cache_queries_total", "counter",
         "Prefix cache queries, in terms of number of queried tokens.",
         static_cast<double>(prefix_queries_));
  scalar("vllm:prefix_cache_hits_total", "counter",
         "Prefix cache hits, in terms of number of cached tokens.",
         static_cast<double>(prefix_hits_));
  scalar("vllm:request_success_total", "counter", "Count of successfully processed requests.",
         static_cast<double>(completed_));
  if (offload_ != nullptr) prometheus_offload(o, label);
  hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", h_ttft_);
  hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.",
       h_tpot_);
  hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
       h_e2e_);
  hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
       h_queue_);
  hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", h_prompt_);
  hist("vllm:request_generation_tokens", "Number of generation tokens processed.", h_gen_);
  return o;
}

}  // namespace kvsim
