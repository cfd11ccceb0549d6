// kvsim check: rules, the comparison, baseline files, and the gate failing when a result changes.

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/check/check.h"
#include "sim/common/errors.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;
using kvsim::CheckRule;
using kvsim::CheckStatus;
using kvsim::test::error_of;
using kvsim::test::TempDir;
using kvsim::test::write_file;

namespace {

/// A summary.json as sim/OUTPUTS.md specifies it.
nlohmann::json sample_summary() {
  return nlohmann::json::parse(R"({
    "name": "shared-prefix-chat", "seed": 1, "profile": "vllm-0.7.2", "mode": "timed",
    "block_size": 16, "num_gpu_blocks": 2048, "enable_prefix_caching": true,
    "completed": 200, "rejected": 0, "total_input_tokens": 61234, "total_output_tokens": 50012,
    "duration": 12.5, "request_throughput": 16.0, "output_throughput": 4000.96,
    "total_token_throughput": 8899.68,
    "mean_ttft_ms": 100.0, "median_ttft_ms": 90.0, "std_ttft_ms": 20.0, "p50_ttft_ms": 90.0,
    "p90_ttft_ms": 140.0, "p95_ttft_ms": 160.0, "p99_ttft_ms": 200.0,
    "mean_tpot_ms": 12.0, "p99_tpot_ms": 20.0, "mean_itl_ms": 12.0, "p99_itl_ms": 25.0,
    "mean_e2el_ms": 3100.0, "p99_e2el_ms": 6000.0, "mean_queue_ms": 5.0, "p99_queue_ms": 40.0,
    "prefix_cache_queries": 70000, "prefix_cache_hits": 40000,
    "prefix_cache_hit_rate": 0.5714285714285714, "first_lookup_hit_rate": 0.55,
    "num_preemptions": 3, "num_evictions": 120, "num_blocks_allocated": 9000, "num_steps": 2500,
    "mean_kv_cache_usage_perc": 0.61, "max_kv_cache_usage_perc": 0.98,
    "mean_num_running": 40.5, "mean_num_waiting": 2.25,
    "kv_breakdown": {"token_states": 0.55, "reservation": 0.03, "internal_fragmentation": 0.01,
                     "external_fragmentation": 0.0, "cached_free": 0.2, "free": 0.21}
  })");
}

/// Writes a run folder holding `summary` and returns its path.
fs::path write_run(const fs::path& root, const std::string& name, const nlohmann::json& summary) {
  write_file(root / name / "summary.json", summary.dump(2));
  return root / name;
}

CheckStatus status_of(const kvsim::CheckReport& r, const std::string& metric) {
  for (const auto& row : r.rows) {
    if (row.metric == metric) return row.status;
  }
  FAIL("no row for " << metric);
  return CheckStatus::kSame;
}

kvsim::CheckReport compare(const nlohmann::json& base, const nlohmann::json& cur) {
  return kvsim::compare_metrics(kvsim::metric_set_from_json(base, "base"),
                                kvsim::metric_set_from_json(cur, "cur"));
}

}  // namespace

TEST_CASE(
    "default rules are exact for counters and relative for latencies and absolute for hit rates",
    "[sim]") {
  using K = CheckRule::Kind;
  CHECK(kvsim::default_check_rule("prefix_cache_hits").kind == K::kExact);
  CHECK(kvsim::default_check_rule("num_preemptions").kind == K::kExact);
  CHECK(kvsim::default_check_rule("total_output_tokens").kind == K::kExact);
  CHECK(kvsim::default_check_rule("p99_ttft_ms") == CheckRule{K::kRelative, 0.02});
  CHECK(kvsim::default_check_rule("output_throughput") == CheckRule{K::kRelative, 0.02});
  CHECK(kvsim::default_check_rule("prefix_cache_hit_rate") == CheckRule{K::kAbsolute, 1e-9});
  CHECK(kvsim::default_check_rule("kv_breakdown.free").kind == K::kAbsolute);
  CHECK(kvsim::default_check_rule("mean_batch_size") == CheckRule{K::kAbsolute, 1e-6});
  CHECK(kvsim::default_check_rule("mean_ttft_ms") == CheckRule{K::kRelative, 0.02});
  CHECK(kvsim::default_check_rule("max_batch_size").kind == K::kExact);
  // A KV cache group's step-averaged figures (summary.json kv_cache_groups) are averages too.
  CHECK(kvsim::default_check_rule("kv_cache_groups.g1.kv_breakdown.cached_free") ==
        CheckRule{K::kAbsolute, 1e-6});
  CHECK(kvsim::default_check_rule("kv_cache_groups.g0.mean_kv_cache_usage_perc") ==
        CheckRule{K::kAbsolute, 1e-6});
  CHECK(kvsim::default_check_rule("kv_cache_groups.g0.num_layers").kind == K::kExact);
}

TEST_CASE("rules round-trip through their baseline spelling and bad ones are refused", "[sim]") {
  for (const char* text : {"exact", "ignore", "rel 0.02", "abs 1e-09"}) {
    CHECK(CheckRule::parse(text).to_string() == text);
  }
  CHECK_THROWS_AS(CheckRule::parse("rel"), kvsim::ConfigError);
  CHECK_THROWS_AS(CheckRule::parse("rel -1"), kvsim::ConfigError);
  CHECK_THROWS_AS(CheckRule::parse("approx 3"), kvsim::ConfigError);
  CHECK_THROWS_AS(CheckRule::parse("exact 3"), kvsim::ConfigError);
}

TEST_CASE("identical summaries pass with nothing moved", "[sim]") {
  const auto report = compare(sample_summary(), sample_summary());
  CHECK(report.passed());
  for (const auto& row : report.rows) CHECK(row.status == CheckStatus::kSame);
  CHECK(report.rows.size() == 48);
  CHECK(kvsim::format_check_report(report, false).rfind("PASS", 0) == 0);
}

TEST_CASE("one more prefix cache hit fails the gate", "[sim]") {
  auto cur = sample_summary();
  cur["prefix_cache_hits"] = 40001;
  const auto report = compare(sample_summary(), cur);
  CHECK_FALSE(report.passed());
  CHECK(report.num_failed() == 1);
  CHECK(status_of(report, "prefix_cache_hits") == CheckStatus::kRegression);
  const std::string table = kvsim::format_check_report(report, false);
  CHECK(table.find("prefix_cache_hits") != std::string::npos);
  CHECK(table.find("+1") != std::string::npos);
  CHECK(table.find("FAIL") != std::string::npos);
  CHECK(table.find("REGRESSION") != std::string::npos);
}

TEST_CASE("a changed hit rate or preemption count or scenario name fails", "[sim]") {
  auto cur = sample_summary();
  cur["prefix_cache_hit_rate"] = 0.5714285714285714 + 1e-6;
  cur["num_preemptions"] = 2;
  cur["profile"] = "vllm-0.8.5";
  const auto report = compare(sample_summary(), cur);
  CHECK(report.num_failed() == 3);
}

TEST_CASE("a latency inside its relative tolerance passes and one beyond it fails", "[sim]") {
  auto cur = sample_summary();
  cur["p99_ttft_ms"] = 200.0 * 1.019;
  cur["mean_ttft_ms"] = 100.0 * 0.985;
  auto report = compare(sample_summary(), cur);
  CHECK(report.passed());
  CHECK(status_of(report, "p99_ttft_ms") == CheckStatus::kWithin);
  CHECK(status_of(report, "mean_ttft_ms") == CheckStatus::kWithin);

  cur["p99_ttft_ms"] = 200.0 * 1.021;
  report = compare(sample_summary(), cur);
  CHECK_FALSE(report.passed());
  CHECK(status_of(report, "p99_ttft_ms") == CheckStatus::kRegression);
}

TEST_CASE("a metric missing from the run fails and a new one is only reported", "[sim]") {
  auto cur = sample_summary();
  cur.erase("num_evictions");
  cur["new_metric"] = 7;
  const auto report = compare(sample_summary(), cur);
  CHECK(report.num_failed() == 1);
  CHECK(status_of(report, "num_evictions") == CheckStatus::kMissing);
  CHECK(status_of(report, "new_metric") == CheckStatus::kNew);
}

TEST_CASE("a written baseline reloads and passes against the run it came from", "[sim]") {
  TempDir tmp("check");
  const fs::path run = write_run(tmp.path, "shared-prefix-chat", sample_summary());
  const fs::path baseline = tmp.path / "baselines" / "shared-prefix-chat.yaml";
  const auto current = kvsim::load_metric_set(run);
  kvsim::write_baseline(baseline, current, nullptr);

  const auto loaded = kvsim::load_metric_set(baseline);
  CHECK(loaded.values == current.values);
  CHECK(loaded.header_comment.find("--update-baseline") != std::string::npos);
  CHECK(loaded.rules.at("prefix_cache_hits").kind == CheckRule::Kind::kExact);
  const auto report = kvsim::compare_metrics(loaded, current);
  CHECK(report.passed());
  for (const auto& row : report.rows) CHECK(row.status == CheckStatus::kSame);
}

TEST_CASE("a new baseline names the scenario file that regenerates it", "[sim]") {
  TempDir tmp("check");
  write_file(tmp.path / "scenarios/baselines/x.yaml", "name: regression-tiny-chat\n");
  write_file(tmp.path / "scenarios/regression/a.yaml", "name: other\n");
  write_file(tmp.path / "scenarios/regression/tiny-chat.yaml",
             "# a gate\nname: \"regression-tiny-chat\"  # quoted\nseed: 1\n");
  const fs::path found = kvsim::find_scenario_file(tmp.path / "scenarios", "regression-tiny-chat");
  CHECK(found == tmp.path / "scenarios/regression/tiny-chat.yaml");
  CHECK(kvsim::find_scenario_file(tmp.path / "scenarios", "absent").empty());
  CHECK(kvsim::find_scenario_file(tmp.path / "nowhere", "other").empty());

  auto summary = sample_summary();
  summary["name"] = "regression-tiny-chat";
  const fs::path baseline = tmp.path / "b.yaml";
  kvsim::write_baseline(baseline, kvsim::metric_set_from_json(summary, "s"), nullptr,
                        "scenarios/regression/tiny-chat.yaml");
  const std::string header = kvsim::load_metric_set(baseline).header_comment;
  CHECK(header.find("kvsim run scenarios/regression/tiny-chat.yaml -o /tmp/r") !=
        std::string::npos);
  CHECK(header.find("kvsim check /tmp/r/regression-tiny-chat --baseline") != std::string::npos);
}

TEST_CASE("updating a baseline keeps its hand-edited rules and header", "[sim]") {
  TempDir tmp("check");
  const fs::path baseline = tmp.path / "b.yaml";
  write_file(baseline,
             "# my header: regenerate with kvsim run x.yaml\n"
             "metrics:\n  mean_ttft_ms: 100.0\n  prefix_cache_hits: 40000\n"
             "rules:\n  mean_ttft_ms: rel 0.5\n");
  const auto previous = kvsim::load_metric_set(baseline);
  auto cur = sample_summary();
  cur["mean_ttft_ms"] = 140.0;  // +40%: inside the edited rel 0.5
  CHECK(kvsim::compare_metrics(previous, kvsim::metric_set_from_json(cur, "c")).passed());

  kvsim::write_baseline(baseline, kvsim::metric_set_from_json(cur, "c"), &previous);
  const auto updated = kvsim::load_metric_set(baseline);
  CHECK(updated.header_comment == "# my header: regenerate with kvsim run x.yaml\n");
  CHECK(updated.rules.at("mean_ttft_ms") == CheckRule{CheckRule::Kind::kRelative, 0.5});
  CHECK(updated.values.at("mean_ttft_ms") == 140.0);
  CHECK(updated.values.at("kv_breakdown.token_states") == 0.55);
}

TEST_CASE("two run folders and a summary.json can be compared directly", "[sim]") {
  TempDir tmp("check");
  auto other = sample_summary();
  other["num_evictions"] = 121;
  const fs::path a = write_run(tmp.path, "a", sample_summary());
  const fs::path b = write_run(tmp.path, "b", other);
  const auto from_dir = kvsim::load_metric_set(a);
  const auto from_file = kvsim::load_metric_set(a / "summary.json");
  CHECK(from_dir.values == from_file.values);
  const auto report = kvsim::compare_metrics(from_dir, kvsim::load_metric_set(b));
  CHECK(report.num_failed() == 1);
  CHECK(status_of(report, "num_evictions") == CheckStatus::kRegression);
}

TEST_CASE("a malformed baseline is a ConfigError naming file and line and column", "[sim]") {
  TempDir tmp("check");
  const fs::path bad_yaml = tmp.path / "bad.yaml";
  write_file(bad_yaml, "metrics:\n  completed: 200\n  name: [unclosed\n");
  const std::string yaml_error = error_of([&] { kvsim::load_metric_set(bad_yaml); });
  INFO(yaml_error);
  CHECK(yaml_error.rfind(bad_yaml.string() + ":4:1: malformed YAML", 0) == 0);

  const fs::path bad_rule = tmp.path / "rule.yaml";
  write_file(bad_rule, "metrics:\n  completed: 200\nrules:\n  completed: roughly\n");
  const std::string rule_error = error_of([&] { kvsim::load_metric_set(bad_rule); });
  INFO(rule_error);
  CHECK(rule_error.rfind(bad_rule.string() + ":4:14: rules.completed: bad rule", 0) == 0);

  const fs::path bad_json = tmp.path / "summary.json";
  write_file(bad_json, "{\n  \"completed\": 200,\n  \"rejected\": ,\n}\n");
  const std::string json_error = error_of([&] { kvsim::load_metric_set(bad_json); });
  INFO(json_error);
  CHECK(json_error.rfind(bad_json.string() + ":3:15: malformed JSON", 0) == 0);

  CHECK_THROWS_AS(kvsim::load_metric_set(tmp.path / "absent.yaml"), kvsim::ConfigError);
  CHECK_THROWS_AS(kvsim::load_metric_set(tmp.path), kvsim::ConfigError);  // no summary.json
}

TEST_CASE("kvsim check exits 0 on a match and 1 on a regression and 2 on bad input", "[sim]") {
  const fs::path kvsim_bin = kvsim::test::kvsim_exe();
  TempDir tmp("check");
  auto changed = sample_summary();
  changed["num_preemptions"] = 4;
  const fs::path a = write_run(tmp.path, "a", sample_summary());
  const fs::path b = write_run(tmp.path, "b", changed);
  const fs::path baseline = tmp.path / "a.yaml";
  const auto run = [&](const std::string& args) {
    const std::string cmd =
        kvsim_bin.string() + " check " + args + " > " + (tmp.path / "out.txt").string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  CHECK(run(a.string() + " --baseline " + a.string()) == 0);
  CHECK(run(b.string() + " --baseline " + (a / "summary.json").string()) == 1);
  CHECK(run(a.string() + " --baseline " + baseline.string() + " --update-baseline") == 0);
  CHECK(fs::file_size(baseline) > 0);
  CHECK(run(a.string() + " --baseline " + baseline.string()) == 0);
  CHECK(run(b.string() + " --baseline " + baseline.string()) == 1);
  CHECK(run(a.string() + " --baseline " + (tmp.path / "absent.yaml").string()) == 2);
  CHECK(run(a.string() + " --bogus") == 2);
}
