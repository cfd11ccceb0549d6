// Regression checks: loading metric sets, per-metric rules, the comparison table, baseline files.

#include "sim/check/check.h"

#include <fmt/format.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>

#include "sim/common/errors.h"
#include "sim/common/text_file.h"

namespace kvsim {
namespace {

void flatten_json(const nlohmann::json& j, const std::string& prefix, MetricSet& out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it->is_object()) {
      flatten_json(*it, key, out);
    } else if (!it->is_array()) {  // arrays are not summary scalars: skipped
      out.values[key] = *it;
    }
  }
}

/// A YAML scalar as the JSON value summary.json would have held.
nlohmann::json yaml_scalar_to_json(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (text == "null" || text == "~" || text.empty()) return nullptr;
  if (text == "true") return true;
  if (text == "false") return false;
  std::int64_t i = 0;
  if (YAML::convert<std::int64_t>::decode(node, i)) return i;
  double d = 0;
  if (YAML::convert<double>::decode(node, d)) return d;
  return text;
}

void flatten_yaml(const YAML::Node& node, const std::string& prefix, MetricSet& out,
                  const std::string& file) {
  for (const auto& kv : node) {
    const std::string key =
        prefix.empty() ? kv.first.as<std::string>() : prefix + "." + kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    if (v.IsMap()) {
      flatten_yaml(v, key, out, file);
    } else if (v.IsScalar() || v.IsNull()) {
      out.values[key] = v.IsNull() ? nlohmann::json(nullptr) : yaml_scalar_to_json(v);
    } else {
      throw ConfigError(file, v.Mark().line + 1, v.Mark().column + 1,
                        "metrics." + key + ": expected a number, string or boolean");
    }
  }
}

MetricSet load_json_summary(const std::filesystem::path& path) {
  const std::string text = read_text_file(path.string());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    const auto [line, col] = line_col_of(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string msg = e.what();
    if (const auto p = msg.find("syntax error"); p != std::string::npos) msg = msg.substr(p);
    throw ConfigError(path.string(), line, col, "malformed JSON: " + msg);
  }
  if (!j.is_object()) throw ConfigError(path.string(), 1, 1, "expected a JSON object (a summary)");
  return metric_set_from_json(j, path.string());
}

MetricSet load_yaml_baseline(const std::filesystem::path& path) {
  const std::string file = path.string();
  const std::string text = read_text_file(path.string());
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(file, e.mark.line + 1, e.mark.column + 1, "malformed YAML: " + e.msg);
  }
  if (!root.IsMap()) {
    throw ConfigError(file, root.Mark().line + 1, root.Mark().column + 1,
                      "a baseline is a mapping with keys 'metrics' and 'rules'");
  }
  MetricSet out;
  out.source = file;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line) && line.starts_with("#");) {
    out.header_comment += line + "\n";
  }
  for (const auto& kv : root) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const auto pos = [&](const YAML::Node& n) {
      return std::make_pair(std::int64_t{n.Mark().line + 1}, std::int64_t{n.Mark().column + 1});
    };
    if (key == "metrics") {
      if (!v.IsMap()) {
        throw ConfigError(file, pos(v).first, pos(v).second, "'metrics' must be a mapping");
      }
      flatten_yaml(v, "", out, file);
    } else if (key == "rules") {
      if (v.IsNull()) continue;
      if (!v.IsMap()) {
        throw ConfigError(file, pos(v).first, pos(v).second, "'rules' must be a mapping");
      }
      for (const auto& r : v) {
        if (!r.second.IsScalar()) {
          throw ConfigError(file, pos(r.second).first, pos(r.second).second,
                            "rules." + r.first.as<std::string>() +
                                ": expected 'exact', 'rel X', 'abs X' or 'ignore'");
        }
        try {
          out.rules[r.first.as<std::string>()] = CheckRule::parse(r.second.Scalar());
        } catch (const ConfigError& e) {
          throw ConfigError(file, pos(r.second).first, pos(r.second).second,
                            "rules." + r.first.as<std::string>() + ": " + e.what());
        }
      }
    } else {
      throw ConfigError(file, pos(kv.first).first, pos(kv.first).second,
                        "unknown key '" + key + "' (allowed: metrics, rules)");
    }
  }
  if (!root["metrics"]) throw ConfigError(file, 1, 1, "missing 'metrics'");
  return out;
}

/// A cell of the table: numbers as JSON writes them (shortest round trip), strings bare.
std::string cell(const nlohmann::json& j) {
  if (j.is_null()) return "-";
  if (j.is_string()) return j.get<std::string>();
  return j.dump();
}

std::string format_delta(const nlohmann::json& b, const nlohmann::json& c) {
  if (!b.is_number() || !c.is_number()) return "";
  std::string out;
  if (b.is_number_integer() && c.is_number_integer()) {
    const std::int64_t d = c.get<std::int64_t>() - b.get<std::int64_t>();
    out = fmt::format("{:+d}", d);
  } else {
    out = fmt::format("{:+.4g}", c.get<double>() - b.get<double>());
  }
  const double bd = b.get<double>(), cd = c.get<double>();
  if (bd != 0.0 && cd != bd) {
    const double pct = 100.0 * (cd - bd) / std::fabs(bd);
    out += std::fabs(pct) < 1000.0
               ? fmt::format(" ({:+.3g}%)", pct)
               : fmt::format(" ({}{:.0f}%)", pct < 0 ? "-" : "+", std::fabs(pct));
  }
  return out;
}

/// Whether `c` is acceptable against `b` under `rule` (both present).
bool within(const CheckRule& rule, const nlohmann::json& b, const nlohmann::json& c) {
  if (rule.kind == CheckRule::Kind::kIgnore) return true;
  if (!b.is_number() || !c.is_number()) return b == c;
  if (b.is_number_integer() && c.is_number_integer()) {
    if (b.get<std::int64_t>() == c.get<std::int64_t>()) return true;
  }
  const double bd = b.get<double>(), cd = c.get<double>();
  if (std::isnan(bd) || std::isnan(cd)) return std::isnan(bd) && std::isnan(cd);
  const double diff = std::fabs(cd - bd);
  switch (rule.kind) {
    case CheckRule::Kind::kExact:
      return diff == 0.0;
    case CheckRule::Kind::kRelative:
      return diff <= rule.tolerance * std::fabs(bd) + 1e-12;
    case CheckRule::Kind::kAbsolute:
      return diff <= rule.tolerance;
    case CheckRule::Kind::kIgnore:
      return true;
  }
  return false;
}

}  // namespace

std::string CheckRule::to_string() const {
  switch (kind) {
    case Kind::kExact:
      return "exact";
    case Kind::kRelative:
      return fmt::format("rel {}", tolerance);
    case Kind::kAbsolute:
      return fmt::format("abs {}", tolerance);
    case Kind::kIgnore:
      return "ignore";
  }
  return "exact";
}

CheckRule CheckRule::parse(std::string_view text) {
  std::istringstream in{std::string(text)};
  std::string word;
  in >> word;
  if (word == "exact" || word == "ignore") {
    std::string rest;
    if (!(in >> rest)) return {word == "exact" ? Kind::kExact : Kind::kIgnore, 0.0};
  } else if (word == "rel" || word == "abs") {
    double tol = -1;
    std::string rest;
    if ((in >> tol) && tol >= 0 && !(in >> rest)) {
      return {word == "rel" ? Kind::kRelative : Kind::kAbsolute, tol};
    }
  }
  throw ConfigError("bad rule '" + std::string(text) +
                    "' (allowed: exact, rel TOL, abs TOL, ignore; TOL >= 0)");
}

CheckRule default_check_rule(std::string_view m) {
  using K = CheckRule::Kind;
  static const std::set<std::string_view> kExactNames = {"prefix_cache_hits",
                                                         "prefix_cache_queries",
                                                         "num_preemptions",
                                                         "num_evictions",
                                                         "num_blocks_allocated",
                                                         "num_steps",
                                                         "completed",
                                                         "rejected",
                                                         "block_size",
                                                         "num_gpu_blocks",
                                                         "enable_prefix_caching",
                                                         "seed",
                                                         "name",
                                                         "profile",
                                                         "mode"};
  if (kExactNames.count(m) || (m.starts_with("total_") && m.ends_with("_tokens"))) {
    return {K::kExact, 0.0};
  }
  if (m.ends_with("_ms") || m.ends_with("_throughput") || m == "duration") {
    return {K::kRelative, 0.02};
  }
  if (m.ends_with("hit_rate")) return {K::kAbsolute, 1e-9};
  // Step-averaged fractions and counts: deterministic, but averaged in floating point.
  if (m.starts_with("kv_breakdown.") || m.find(".kv_breakdown.") != std::string_view::npos ||
      m.ends_with("_perc") || m.starts_with("mean_")) {
    return {K::kAbsolute, 1e-6};
  }
  return {K::kExact, 0.0};
}

CheckRule MetricSet::rule_for(const std::string& metric) const {
  const auto it = rules.find(metric);
  return it != rules.end() ? it->second : default_check_rule(metric);
}

MetricSet metric_set_from_json(const nlohmann::json& summary, std::string source) {
  MetricSet out;
  out.source = std::move(source);
  flatten_json(summary, "", out);
  return out;
}

MetricSet load_metric_set(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const auto summary = path / "summary.json";
    if (!std::filesystem::exists(summary, ec)) {
      throw ConfigError(path.string() + ": not a run folder (no summary.json)");
    }
    return load_json_summary(summary);
  }
  if (!std::filesystem::exists(path, ec)) throw ConfigError(path.string() + ": no such file");
  const std::string ext = path.extension().string();
  if (ext == ".yaml" || ext == ".yml") return load_yaml_baseline(path);
  if (ext == ".json") return load_json_summary(path);
  throw ConfigError(path.string() +
                    ": expected a run folder, a summary.json or a baseline .yaml/.yml");
}

std::string_view to_string(CheckStatus status) {
  switch (status) {
    case CheckStatus::kSame:
      return "ok";
    case CheckStatus::kWithin:
      return "within";
    case CheckStatus::kRegression:
      return "FAIL";
    case CheckStatus::kMissing:
      return "MISSING";
    case CheckStatus::kNew:
      return "new";
    case CheckStatus::kIgnored:
      return "ignored";
  }
  return "?";
}

int CheckReport::num_failed() const {
  return static_cast<int>(std::count_if(rows.begin(), rows.end(), [](const CheckRow& r) {
    return r.status == CheckStatus::kRegression || r.status == CheckStatus::kMissing;
  }));
}

CheckReport compare_metrics(const MetricSet& baseline, const MetricSet& current) {
  std::set<std::string> names;
  for (const auto& [k, v] : baseline.values) names.insert(k);
  for (const auto& [k, v] : current.values) names.insert(k);
  CheckReport report;
  for (const std::string& name : names) {
    CheckRow row;
    row.metric = name;
    row.rule = baseline.rule_for(name);
    const auto b = baseline.values.find(name);
    const auto c = current.values.find(name);
    const bool has_b = b != baseline.values.end(), has_c = c != current.values.end();
    if (has_b) row.baseline = b->second;
    if (has_c) row.current = c->second;
    if (!has_b) {
      row.status = CheckStatus::kNew;
    } else if (!has_c) {
      row.status =
          row.rule.kind == CheckRule::Kind::kIgnore ? CheckStatus::kIgnored : CheckStatus::kMissing;
    } else {
      row.delta = format_delta(row.baseline, row.current);
      const bool same =
          row.baseline == row.current || (row.baseline.is_number() && row.current.is_number() &&
                                          row.baseline.get<double>() == row.current.get<double>());
      if (same) {
        row.status = CheckStatus::kSame;
        row.delta.clear();
      } else if (row.rule.kind == CheckRule::Kind::kIgnore) {
        row.status = CheckStatus::kIgnored;
      } else {
        row.status = within(row.rule, row.baseline, row.current) ? CheckStatus::kWithin
                                                                 : CheckStatus::kRegression;
      }
    }
    report.rows.push_back(std::move(row));
  }
  return report;
}

std::string format_check_report(const CheckReport& report, bool all_rows) {
  std::vector<const CheckRow*> shown;
  for (const CheckRow& r : report.rows) {
    if (all_rows || r.status != CheckStatus::kSame) shown.push_back(&r);
  }
  std::size_t w[5] = {6, 8, 7, 5, 4};
  for (const CheckRow* r : shown) {
    w[0] = std::max(w[0], r->metric.size());
    w[1] = std::max(w[1], cell(r->baseline).size());
    w[2] = std::max(w[2], cell(r->current).size());
    w[3] = std::max(w[3], r->delta.size());
    w[4] = std::max(w[4], r->rule.to_string().size());
  }
  std::string out;
  if (!shown.empty()) {
    out += fmt::format("{:<{}}  {:>{}}  {:>{}}  {:>{}}  {:<{}}  {}\n", "metric", w[0], "baseline",
                       w[1], "current", w[2], "delta", w[3], "rule", w[4], "status");
    for (const CheckRow* r : shown) {
      out += fmt::format("{:<{}}  {:>{}}  {:>{}}  {:>{}}  {:<{}}  {}\n", r->metric, w[0],
                         cell(r->baseline), w[1], cell(r->current), w[2], r->delta, w[3],
                         r->rule.to_string(), w[4], to_string(r->status));
    }
  }
  int moved = 0;
  for (const CheckRow& r : report.rows) moved += r.status != CheckStatus::kSame ? 1 : 0;
  const int failed = report.num_failed();
  out += fmt::format("{}: {} metrics compared, {} moved, {} failed\n",
                     failed == 0 ? "PASS" : "REGRESSION", report.rows.size(), moved, failed);
  return out;
}

std::filesystem::path find_scenario_file(const std::filesystem::path& root,
                                         const std::string& name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (name.empty() || !fs::is_directory(root, ec)) return {};
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_directory(ec) && it->path().filename() == "baselines") {
      it.disable_recursion_pending();
      continue;
    }
    const std::string ext = it->path().extension().string();
    if ((ext == ".yaml" || ext == ".yml") && it->is_regular_file(ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    std::ifstream in(f);
    for (std::string line; std::getline(in, line);) {
      if (!line.starts_with("name:")) continue;
      std::string v = line.substr(5);
      if (const auto hash = v.find(" #"); hash != std::string::npos) v.erase(hash);
      const auto b = v.find_first_not_of(" \t\"'"), e = v.find_last_not_of(" \t\r\"'");
      if (b != std::string::npos && v.substr(b, e - b + 1) == name) return f;
      break;  // only the top-level name counts
    }
  }
  return {};
}

void write_baseline(const std::filesystem::path& path, const MetricSet& current,
                    const MetricSet* previous, const std::string& scenario_path) {
  std::string header;
  if (previous != nullptr && !previous->header_comment.empty()) {
    header = previous->header_comment;
  } else {
    const auto name_it = current.values.find("name");
    const std::string name = name_it != current.values.end() && name_it->second.is_string()
                                 ? name_it->second.get<std::string>()
                                 : "SCENARIO";
    const std::string scenario =
        scenario_path.empty() ? "scenarios/" + name + ".yaml" : scenario_path;
    header = fmt::format(
        "# kvsim regression baseline for scenario '{0}' (read by `kvsim check`).\n"
        "# Regenerate after an intended change of results:\n"
        "#   kvsim run {2} -o /tmp/r && \\\n"
        "#   kvsim check /tmp/r/{0} --baseline {1} --update-baseline\n"
        "# metrics: the run's summary.json scalars (nested keys joined with '.').\n"
        "# rules: per metric, one of: exact | rel TOL (|cur-base| <= TOL*|base|) | abs TOL | "
        "ignore.\n"
        "#   Edit a rule by hand to loosen or tighten it; --update-baseline keeps edited rules.\n",
        name, path.generic_string(), scenario);
  }
  std::string text = header + "metrics:\n";
  for (const auto& [k, v] : current.values) text += fmt::format("  {}: {}\n", k, v.dump());
  text += "rules:\n";
  for (const auto& [k, v] : current.values) {
    const CheckRule rule = previous != nullptr ? previous->rule_for(k) : current.rule_for(k);
    text += fmt::format("  {}: {}\n", k, rule.to_string());
  }
  std::error_code ec;
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path(), ec);
  const std::filesystem::path tmp =
      path.string() + ".tmp-" + std::to_string(static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ConfigError(path.string() + ": cannot write baseline");
    out << text;
    if (!out.flush()) throw ConfigError(path.string() + ": cannot write baseline");
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    throw ConfigError(path.string() + ": cannot write baseline (" + why + ")");
  }
}

}  // namespace kvsim
