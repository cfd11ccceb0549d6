#pragma once
// Regression checks of a run's summary metrics against a baseline (`kvsim check`).
//
// A metric set is the flattened scalars of a summary.json (`kv_breakdown.token_states`, ...), read
// from a run folder, a summary.json, or a baseline YAML under scenarios/baselines/ (which also
// carries per-metric rules). compare_metrics() applies one rule per metric and returns a table.

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace kvsim {

/// How one metric may move between a baseline and a run.
struct CheckRule {
  enum class Kind {
    kExact,     // values equal (integers as integers, strings and booleans as text)
    kRelative,  // |current - baseline| <= tolerance * |baseline|
    kAbsolute,  // |current - baseline| <= tolerance
    kIgnore,    // reported, never fails
  };
  Kind kind = Kind::kExact;
  double tolerance = 0.0;  // unused for kExact and kIgnore

  /// The baseline-file spelling: "exact", "rel 0.02", "abs 1e-09", "ignore".
  std::string to_string() const;
  /// Parses to_string()'s spelling; throws ConfigError (without position) on anything else.
  static CheckRule parse(std::string_view text);
  friend bool operator==(const CheckRule&, const CheckRule&) = default;
};

/// The rule a metric gets when its baseline names none: exact for deterministic counters
/// (prefix_cache_hits, num_preemptions, total_*_tokens, ...), rel 2% for `*_ms` latency statistics,
/// `duration` and throughputs, abs 1e-9 for hit rates, abs 1e-6 for step averages
/// (`mean_*` other than `*_ms`, `*_perc`, `kv_breakdown.*` also inside a KV cache group).
CheckRule default_check_rule(std::string_view metric);

/// Scalars by flattened key (nested objects joined with '.'), plus the rules a baseline states.
struct MetricSet {
  std::string source;                            // the file it was read from
  std::map<std::string, nlohmann::json> values;  // scalars only: number, bool, string or null
  std::map<std::string, CheckRule> rules;        // explicit rules (baseline YAML only)
  std::string header_comment;                    // a baseline's leading '#' lines, kept on update

  /// The rule for `metric`: the explicit one if any, else default_check_rule().
  CheckRule rule_for(const std::string& metric) const;
};

/// Reads a run folder (its summary.json), a summary.json, or a baseline YAML (by extension
/// .yaml/.yml). Throws ConfigError for a missing file, malformed JSON/YAML ("file:line:col: ..."),
/// or a bad rule.
MetricSet load_metric_set(const std::filesystem::path& path);

/// Flattens a summary.json object into a MetricSet (nested objects become dotted keys).
MetricSet metric_set_from_json(const nlohmann::json& summary, std::string source);

enum class CheckStatus {
  kSame,        // equal
  kWithin,      // moved, inside the rule's tolerance
  kRegression,  // moved beyond the rule, or changed type
  kMissing,     // in the baseline, absent from the run: fails
  kNew,         // absent from the baseline: reported, does not fail
  kIgnored,     // rule "ignore" and the value moved
};
std::string_view to_string(CheckStatus status);

struct CheckRow {
  std::string metric;
  nlohmann::json baseline;  // null when absent
  nlohmann::json current;   // null when absent
  std::string delta;        // "+3", "-0.41 (-1.2%)", "" when not numeric
  CheckRule rule;
  CheckStatus status = CheckStatus::kSame;
};

struct CheckReport {
  std::vector<CheckRow> rows;  // every metric of either set, sorted by name

  int num_failed() const;  // kRegression + kMissing
  bool passed() const { return num_failed() == 0; }
};

/// Compares `current` against `baseline` with the baseline's rules. Pure; O(n log n).
CheckReport compare_metrics(const MetricSet& baseline, const MetricSet& current);

/// A fixed-width table: metric, baseline, current, delta, rule, status. Only rows that moved,
/// failed, are new or missing unless `all_rows`; ends with a one-line verdict.
std::string format_check_report(const CheckReport& report, bool all_rows);

/// Writes a baseline YAML for `current` to `path`: a header comment (`previous`'s when it has one,
/// else one naming the command that regenerates it from `scenario_path`, default
/// scenarios/NAME.yaml), the metrics, and one rule per metric (`previous`'s explicit rules are
/// kept). Writes to a temporary file and renames it.
void write_baseline(const std::filesystem::path& path, const MetricSet& current,
                    const MetricSet* previous, const std::string& scenario_path = {});

/// The scenario YAML under `root` (recursively, skipping baselines/) whose top-level `name:` is
/// `name`, or an empty path. Files are visited in sorted order; the first match wins.
std::filesystem::path find_scenario_file(const std::filesystem::path& root,
                                         const std::string& name);

}  // namespace kvsim
