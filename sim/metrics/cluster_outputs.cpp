#include "sim/metrics/cluster_outputs.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <vector>

#include "core/common/assert.h"
#include "sim/metrics/writers.h"

namespace kvsim {
namespace {

void append_f6(std::string& out, double v) {
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 6);
  out.append(buf, res.ptr);
}

/// Integer ns as seconds with 9 decimals (exact).
void append_ns_as(std::string& out, std::int64_t ns, std::int64_t unit_ns, int decimals) {
  if (ns < 0) {
    out += '-';
    ns = -ns;
  }
  append_int(out, ns / unit_ns);
  out += '.';
  std::int64_t frac = ns % unit_ns;
  std::int64_t scale = unit_ns;
  for (int i = 0; i < decimals; ++i) {
    scale /= 10;
    out += static_cast<char>('0' + (scale ? frac / scale % 10 : 0));
  }
}

/// max / mean of `v` (1.0 when the mean is 0: all equal).
double imbalance(const std::vector<double>& v) {
  if (v.empty()) return 1.0;
  double sum = 0, mx = 0;
  for (double x : v) {
    sum += x;
    mx = std::max(mx, x);
  }
  const double mean = sum / static_cast<double>(v.size());
  return mean > 0 ? mx / mean : 1.0;
}

}  // namespace

RoutingCsvWriter::RoutingCsvWriter(const std::filesystem::path& path) : file_(path) {
  file_.write(
      "request_id,time_s,stage,replica,branch,score,runner_up,runner_up_score,matched_blocks,"
      "prompt_blocks,view_age_ms\n");
  line_.reserve(256);
}

void RoutingCsvWriter::write(const RoutingRecord& r) {
  std::string& l = line_;
  l.clear();
  append_int(l, r.request_id);
  l += ',';
  append_ns_as(l, r.time_ns, 1'000'000'000, 9);
  l += ',';
  l += r.stage;
  l += ',';
  append_int(l, r.replica);
  l += ',';
  l += r.branch;
  l += ',';
  if (r.has_score) append_f6(l, r.score);
  l += ',';
  if (r.runner_up >= 0) append_int(l, r.runner_up);
  l += ',';
  if (r.has_score && r.runner_up >= 0) append_f6(l, r.runner_up_score);
  l += ',';
  if (r.matched_blocks >= 0) append_int(l, r.matched_blocks);
  l += ',';
  append_int(l, r.prompt_blocks);
  l += ',';
  if (r.view_age_ns >= 0) append_ns_as(l, r.view_age_ns, 1'000'000, 6);
  l += '\n';
  file_.write(l);
}

void ReplicaStats::on_step(const StepView& v) {
  ++num_steps;
  const double usage = v.engine ? v.engine->pool_stats().usage : 0.0;
  sum_usage += usage;
  max_usage = std::max(max_usage, usage);
  sum_running += v.engine ? static_cast<double>(v.engine->running().size()) : 0.0;
  sum_waiting += static_cast<double>(v.num_waiting);
  // The union of the steps' spans: under async scheduling a batch is scheduled while the one
  // before it still runs (their spans overlap).
  if (v.end_ns > last_end_ns_) {
    busy_ns += v.end_ns - std::max(v.start_ns, last_end_ns_);
    last_end_ns_ = v.end_ns;
  }
  if (v.out != nullptr) {  // timed runs: the lookups of the step's schedule()
    prefix_cache_queries += v.out->prefix_queries_tokens;
    prefix_cache_hits += v.out->prefix_hits_tokens;
  }
}

void ReplicaStats::on_empty_step(const StepView& v) {
  // vLLM counts the lookups of a step that then scheduled nothing too (CPU tier runs).
  prefix_cache_queries += v.out->prefix_queries_tokens;
  prefix_cache_hits += v.out->prefix_hits_tokens;
}

void ReplicaStats::on_request_done(const RequestRecord& r) {
  num_preemptions += r.num_preemptions;
  if (r.reason == FinishReason::kRejected) return;
  first_lookup_hits += r.first_lookup_hit_tokens;
  first_lookup_prompt += r.prompt_tokens;
}

void ReplicaStats::on_lookup(std::int64_t query_tokens, std::int64_t hit_tokens) {
  prefix_cache_queries += query_tokens;
  prefix_cache_hits += hit_tokens;
}

std::string cluster_summary_keys(std::span<const ReplicaStats* const> replicas,
                                 std::string_view policy,
                                 const std::map<std::string, std::int64_t>& branches,
                                 double duration_s) {
  const auto rate = [](std::int64_t num, std::int64_t den) {
    return den > 0 ? static_cast<double>(num) / static_cast<double>(den) : 0.0;
  };
  std::string o;
  o += fmt::format("  \"num_replicas\": {},\n", replicas.size());
  o += fmt::format("  \"router_policy\": \"{}\",\n", policy);
  std::vector<double> routed, tokens, busy, hit;
  o += "  \"replicas\": [\n";
  for (std::size_t r = 0; r < replicas.size(); ++r) {
    const ReplicaStats& s = *replicas[r];
    const double steps = s.num_steps ? static_cast<double>(s.num_steps) : 1.0;
    const double busy_fraction =
        duration_s > 0 ? static_cast<double>(s.busy_ns) / 1e9 / duration_s : 0.0;
    const double flhr = rate(s.first_lookup_hits, s.first_lookup_prompt);
    o += fmt::format(
        "    {{\"replica\": {}, \"role\": \"{}\", \"gpu\": {}, \"num_gpu_blocks\": {}, "
        "\"requests_routed\": {}, "
        "\"prompt_tokens_routed\": {}, \"prefix_cache_queries\": {}, \"prefix_cache_hits\": {}, "
        "\"prefix_cache_hit_rate\": {:.9f}, \"first_lookup_hit_rate\": {:.9f}, "
        "\"num_preemptions\": {}, \"num_evictions\": {}, \"mean_kv_cache_usage_perc\": {:.9f}, "
        "\"max_kv_cache_usage_perc\": {:.9f}, \"mean_num_running\": {:.6f}, "
        "\"mean_num_waiting\": {:.6f}, \"busy_fraction\": {:.9f}}}{}\n",
        r, s.role, nlohmann::json(s.gpu).dump(), s.num_gpu_blocks, s.requests_routed, s.prompt_tokens_routed, s.prefix_cache_queries, s.prefix_cache_hits,
        rate(s.prefix_cache_hits, s.prefix_cache_queries), flhr, s.num_preemptions,
        s.num_evictions, s.sum_usage / steps, s.max_usage, s.sum_running / steps,
        s.sum_waiting / steps, busy_fraction, r + 1 < replicas.size() ? "," : "");
    routed.push_back(static_cast<double>(s.requests_routed));
    tokens.push_back(static_cast<double>(s.prompt_tokens_routed));
    busy.push_back(busy_fraction);
    hit.push_back(flhr);
  }
  o += "  ],\n";
  o += fmt::format("  \"load_imbalance_requests\": {:.6f},\n", imbalance(routed));
  o += fmt::format("  \"load_imbalance_prompt_tokens\": {:.6f},\n", imbalance(tokens));
  o += fmt::format("  \"load_imbalance_busy\": {:.6f},\n", imbalance(busy));
  const auto [lo, hi] = hit.empty() ? std::pair{0.0, 0.0}
                                    : std::pair{*std::min_element(hit.begin(), hit.end()),
                                                *std::max_element(hit.begin(), hit.end())};
  o += fmt::format("  \"replica_hit_rate_min\": {:.9f},\n", lo);
  o += fmt::format("  \"replica_hit_rate_max\": {:.9f},\n", hi);
  o += "  \"router_decisions_by_branch\": {";
  bool first = true;
  for (const auto& [name, count] : branches) {
    o += fmt::format("{}\"{}\": {}", first ? "" : ", ", name, count);
    first = false;
  }
  o += "},\n";
  return o;
}

std::string prometheus_by_engine(std::span<const std::string> engine_texts,
                                 const std::string& model_name) {
  // Each text as its families: a family is its "# " lines, then its series.
  struct Family {
    std::string head, series;
  };
  const auto families_of = [](const std::string& text) {
    std::vector<Family> out;
    std::size_t pos = 0;
    while (pos < text.size()) {
      std::size_t end = text.find('\n', pos);
      end = end == std::string::npos ? text.size() : end + 1;
      const std::string_view line(text.data() + pos, end - pos);
      if (line.starts_with("# ")) {
        if (out.empty() || !out.back().series.empty()) out.emplace_back();
        out.back().head += line;
      } else {
        KVSIM_ASSERT(!out.empty(), "a Prometheus series before its family's HELP");
        out.back().series += line;
      }
      pos = end;
    }
    return out;
  };
  std::vector<std::vector<Family>> per;
  for (const std::string& t : engine_texts) per.push_back(families_of(t));
  const std::string label = "model_name=\"" + model_name + "\"";
  std::string o;
  for (std::size_t f = 0; !per.empty() && f < per[0].size(); ++f) {
    o += per[0][f].head;
    for (std::size_t r = 0; r < per.size(); ++r) {
      KVSIM_ASSERT(per[r].size() == per[0].size() && per[r][f].head == per[0][f].head,
                   "replicas' Prometheus families differ");
      const std::string with = label + ",engine=\"" + std::to_string(r) + "\"";
      const std::string& s = per[r][f].series;
      std::size_t at = 0;
      for (std::size_t hit; (hit = s.find(label, at)) != std::string::npos;
           at = hit + label.size()) {
        o.append(s, at, hit - at);
        o += with;
      }
      o.append(s, at, std::string::npos);
    }
  }
  return o;
}

std::string insert_summary_keys(const std::string& summary, const std::string& keys) {
  // summary ends with "  \"kv_breakdown\": {...}\n}\n": the keys go after the last entry.
  const std::size_t end = summary.rfind("\n}\n");
  KVSIM_ASSERT(end != std::string::npos && end + 3 == summary.size(), "summary.json's end");
  std::string k = keys;
  KVSIM_ASSERT(k.size() >= 2 && k.compare(k.size() - 2, 2, ",\n") == 0);
  k.resize(k.size() - 2);  // the last key's comma
  return summary.substr(0, end) + ",\n" + k + "\n}\n";
}

}  // namespace kvsim
