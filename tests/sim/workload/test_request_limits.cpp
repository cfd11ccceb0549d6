// Per-request limits: the trace rows' max_tokens / ignore_eos / eos_token_id, the synthetic
// generator's stop-at-EOS mix, and client_timeout_s as the sources hand them to the simulator;
// what a run makes of them (a request with its own max_tokens ends at exactly that many tokens);
// impossible values as one-line file:line errors (exit status 2 from kvsim run: tests/cli).

#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim/workload/synthetic_workload.h"
#include "sim/workload/trace_readers.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kModel = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";

std::unique_ptr<RequestSource> source_of(const std::string& workload_yaml,
                                         std::int32_t vocab = 32000) {
  return make_request_source(
      parse_workload_config(YAML::Load(workload_yaml), YamlContext{"s.yaml", "workload"}), 5,
      vocab);
}

std::vector<RequestSpec> drain(RequestSource& src) {
  std::vector<RequestSpec> out;
  while (auto r = src.next()) out.push_back(std::move(*r));
  return out;
}

/// The ConfigError message of reading the whole source ("" when none).
std::string read_error(const std::string& workload_yaml) {
  return kvsim::test::error_of([&] {
    auto src = source_of(workload_yaml);
    drain(*src);
  });
}

std::string trace_yaml(const std::string& format, const fs::path& path,
                       const std::string& extra = "") {
  return "{trace: {format: " + format + ", path: '" + path.string() + "'}" + extra + "}";
}

std::vector<std::vector<std::string>> csv_rows(const fs::path& p) {
  std::istringstream in(kvsim::test::slurp(p));
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> row;
    std::stringstream ss(line);
    for (std::string cell; std::getline(ss, cell, ',');) row.push_back(cell);
    rows.push_back(row);
  }
  return rows;
}

/// Runs a timed scenario over `workload` (1 ms steps, max_model_len 100) into `dir`.
fs::path run_timed(const std::string& workload, const fs::path& dir) {
  // vLLM v0.7.2's OpenAI server rule (the default release, v0.20.1, serves these requests).
  const std::string yaml = "name: limits\nseed: 3\nengine: {profile: vllm-0.7.2}\nmodel: {config: " +
                           kModel +
                           "}\ncache: {block_size: 16, num_gpu_blocks_override: 64}\nscheduler: "
                           "{max_model_len: 100}\nworkload: " +
                           workload + "\n";
  const Scenario s = parse_scenario(load_yaml_string(yaml, "test.yaml"), "test.yaml");
  RunOptions opt;
  opt.step_time = [](const StepView&) { return SimTimeNs{1'000'000}; };
  return run_scenario(s, dir, opt).folder;
}

}  // namespace

TEST_CASE("trace rows override the workload's max_tokens, ignore_eos and eos_token_id", "[sim]") {
  TempDir tmp("row-limits");
  const fs::path jsonl = tmp.path / "t.jsonl";
  kvsim::test::write_file(
      jsonl,
      "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 50}\n"
      "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 50, \"max_tokens\": 7}\n"
      "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 50, \"ignore_eos\": true}\n"
      "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 50, \"eos_token_id\": 9, "
      "\"max_tokens\": null}\n");
  auto js = drain(*source_of(trace_yaml("jsonl", jsonl, ", ignore_eos: false, eos_token_id: 2")));
  REQUIRE(js.size() == 4);
  // The workload stops at EOS: no max_tokens unless the row sends one.
  CHECK_FALSE(js[0].max_tokens.has_value());
  CHECK(js[0].stops_at_eos());
  CHECK(js[0].output_tokens == 50);
  CHECK(js[1].max_tokens == std::optional<std::int32_t>(7));
  CHECK(js[1].stops_at_eos());
  // A row that ignores EOS sends max_tokens = its output length, as the benchmarks do.
  CHECK_FALSE(js[2].stops_at_eos());
  CHECK(js[2].max_tokens == std::optional<std::int32_t>(50));
  CHECK(js[3].eos_token_id == std::optional<std::int32_t>(9));
  CHECK_FALSE(js[3].max_tokens.has_value());

  const fs::path csv = tmp.path / "t.csv";
  kvsim::test::write_file(
      csv,
      "arrival_s,prompt_tokens,output_tokens,max_tokens,ignore_eos,eos_token_id\n"
      "0,10,50,,,\n"
      "0,10,50,12,false,\n"
      "0,10,50,,FALSE,4\n"
      "0,10,50,3,1,\n");
  auto cs = drain(*source_of(trace_yaml("csv", csv, ", eos_token_id: 2")));
  REQUIRE(cs.size() == 4);
  CHECK_FALSE(cs[0].stops_at_eos());  // the workload ignores EOS (the default)
  CHECK(cs[0].max_tokens == std::optional<std::int32_t>(50));
  CHECK(cs[1].stops_at_eos());
  CHECK(cs[1].max_tokens == std::optional<std::int32_t>(12));
  CHECK(cs[2].stops_at_eos());
  CHECK(cs[2].eos_token_id == std::optional<std::int32_t>(4));
  CHECK_FALSE(cs[2].max_tokens.has_value());
  CHECK_FALSE(cs[3].stops_at_eos());
  CHECK(cs[3].max_tokens == std::optional<std::int32_t>(3));

  // Mooncake rows are JSON too.
  const fs::path mc = tmp.path / "m.jsonl";
  kvsim::test::write_file(mc,
                          "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 20, "
                          "\"hash_ids\": [1], \"max_tokens\": 5, \"ignore_eos\": false}\n");
  auto m = drain(*source_of(trace_yaml("mooncake", mc, ", eos_token_id: 2")));
  REQUIRE(m.size() == 1);
  CHECK(m[0].stops_at_eos());
  CHECK(m[0].max_tokens == std::optional<std::int32_t>(5));
}

TEST_CASE("impossible per-request limits are one-line errors naming file:line", "[sim]") {
  TempDir tmp("row-errors");
  struct Bad {
    const char* row;
    const char* message;
  };
  const std::string pre = "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 5, ";
  for (const Bad& b : {
           Bad{"\"max_tokens\": 0}", ":2:59: field 'max_tokens' must be an integer >= 1, got 0"},
           Bad{"\"max_tokens\": -3}", ":2:59: field 'max_tokens' must be an integer >= 1, got -3"},
           Bad{"\"max_tokens\": 2.5}",
               ":2:59: field 'max_tokens' must be an integer >= 1, got 2.5"},
           Bad{"\"max_tokens\": \"7\"}", ":2:59: field 'max_tokens' must be a number, got \"7\""},
           Bad{"\"ignore_eos\": 1}", ":2:59: field 'ignore_eos' must be true or false, got 1"},
           Bad{"\"eos_token_id\": -1}",
               ":2:59: field 'eos_token_id' must be an integer in [0, 32000), got -1"},
           Bad{"\"eos_token_id\": 32000}",
               ":2:59: field 'eos_token_id' must be an integer in [0, 32000), got 32000"},
           Bad{"\"ignore_eos\": false}",
               ":2:1: ignore_eos is false but there is no eos_token_id (give one in the row or "
               "as workload.eos_token_id)"},
       }) {
    const fs::path p = tmp.path / "bad.jsonl";
    kvsim::test::write_file(p, pre + "\"max_tokens\": 4}\n" + pre + b.row + "\n");
    const std::string msg = read_error(trace_yaml("jsonl", p));
    INFO(b.row);
    CHECK(msg == p.string() + b.message);
    CHECK(msg.find('\n') == std::string::npos);
  }
  const fs::path csv = tmp.path / "bad.csv";
  for (const Bad& b : {Bad{"0,10,5,0,", ":3:1: max_tokens: expected an integer >= 1, got '0'"},
                       Bad{"0,10,5,-1,", ":3:1: max_tokens: expected an integer >= 1, got '-1'"},
                       Bad{"0,10,5,1.5,", ":3:1: max_tokens: expected an integer >= 1, got '1.5'"},
                       Bad{"0,10,5,,yes", ":3:1: ignore_eos: expected true or false, got 'yes'"}}) {
    kvsim::test::write_file(csv, std::string("arrival_s,prompt_tokens,output_tokens,max_tokens,"
                                             "ignore_eos\n0,10,5,4,true\n") +
                                     b.row + "\n");
    INFO(b.row);
    CHECK(read_error(trace_yaml("csv", csv, ", eos_token_id: 2")) == csv.string() + b.message);
  }
}

TEST_CASE("a request with its own max_tokens ends at exactly that many tokens", "[sim]") {
  TempDir tmp("row-run");
  const fs::path trace = tmp.path / "t.jsonl";
  // max_model_len 100; the workload stops at EOS (token 2) unless a row says otherwise.
  const std::string p10 = "{\"arrival_s\": 0, \"prompt_tokens\": 10, ";
  kvsim::test::write_file(
      trace,
      p10 + "\"output_tokens\": 50, \"max_tokens\": 7, \"ignore_eos\": true}\n" +  // 0: 7, length
          p10 + "\"output_tokens\": 50, \"max_tokens\": 7}\n" +  // 1: 7 before EOS, length
          p10 + "\"output_tokens\": 7, \"max_tokens\": 50}\n" +  // 2: EOS at 7, stop
          p10 + "\"output_tokens\": 7, \"max_tokens\": 7}\n" +   // 3: both at 7: length
          p10 + "\"output_tokens\": 9}\n" +                      // 4: EOS at 9, stop
          p10 + "\"output_tokens\": 9, \"max_tokens\": 91}\n" +  // 5: 10 + 91 > 100
          "{\"arrival_s\": 0, \"prompt_tokens\": 80, \"output_tokens\": 40}\n" +       // 6: capped
          p10 + "\"output_tokens\": 9, \"max_tokens\": 90, \"ignore_eos\": true}\n");  // 7: 90
  const fs::path run =
      run_timed(trace_yaml("jsonl", trace, ", ignore_eos: false, eos_token_id: 2"), tmp.path);
  std::map<std::string, std::pair<std::string, std::string>> got;  // id -> (outputs, reason)
  for (const auto& row : csv_rows(run / "requests.csv"))
    if (row.size() == 14 && row[0] != "request_id") got[row[0]] = {row[3], row[13]};
  using P = std::pair<std::string, std::string>;
  CHECK(got.size() == 8);
  CHECK(got["0"] == P{"7", "length"});
  CHECK(got["1"] == P{"7", "length"});
  CHECK(got["2"] == P{"7", "stop"});
  CHECK(got["3"] == P{"7", "length"});
  CHECK(got["4"] == P{"9", "stop"});
  CHECK(got["5"].second == "rejected");
  CHECK(got["6"] == P{"20", "length"});
  CHECK(got["7"] == P{"90", "length"});
  const nlohmann::json j = nlohmann::json::parse(kvsim::test::slurp(run / "summary.json"));
  CHECK(j["completed"] == 7);
  CHECK(j["rejected"] == 1);
  CHECK(j["total_output_tokens"] == 7 + 7 + 7 + 7 + 9 + 20 + 90);
}

TEST_CASE("a synthetic workload mixes stop-at-EOS and fixed-length requests", "[sim]") {
  const std::string base =
      "{num_requests: 2000, arrival: {process: poisson, rate_per_s: 50}, prompt_tokens: "
      "{uniform: {min: 5, max: 50}}, output_tokens: {uniform: {min: 1, max: 40}}, eos_token_id: "
      "2";
  const auto mixed = drain(*source_of(base + ", stop_at_eos_fraction: 0.3}"));
  const auto plain = drain(*source_of(base + "}"));
  REQUIRE(mixed.size() == 2000);
  REQUIRE(plain.size() == 2000);
  std::int64_t stops = 0;
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    const RequestSpec& r = mixed[i];
    if (r.stops_at_eos()) {
      ++stops;
      CHECK_FALSE(r.max_tokens.has_value());
    } else {
      CHECK(r.max_tokens == std::optional<std::int32_t>(r.output_tokens));
    }
    // The mix draws from its own stream: everything else is the unmixed workload's.
    CHECK(r.arrival_ns == plain[i].arrival_ns);
    CHECK(r.output_tokens == plain[i].output_tokens);
    CHECK(r.deferred_tokens == plain[i].deferred_tokens);
  }
  CHECK(stops == Approx(600).margin(60));  // binomial(2000, 0.3): sd 20.5
  const auto again = drain(*source_of(base + ", stop_at_eos_fraction: 0.3}"));
  for (std::size_t i = 0; i < again.size(); ++i) CHECK(again[i].ignore_eos == mixed[i].ignore_eos);
  std::int64_t all = 0;
  for (const auto& r : drain(*source_of(base + ", stop_at_eos_fraction: 1}")))
    all += r.stops_at_eos();
  CHECK(all == 2000);

  CHECK_THAT(read_error(base + ", stop_at_eos_fraction: 0.3, ignore_eos: true}"),
             Catch::Contains("workload.stop_at_eos_fraction: cannot be combined with "
                             "workload.ignore_eos"));
  CHECK_THAT(read_error("{num_requests: 3, prompt_tokens: 5, output_tokens: 5, "
                        "stop_at_eos_fraction: 0.5}"),
             Catch::Contains("workload.stop_at_eos_fraction: needs workload.eos_token_id"));
  CHECK_THAT(read_error(base + ", stop_at_eos_fraction: 1.5}"),
             Catch::Contains("stop_at_eos_fraction"));
  CHECK_THAT(read_error("{trace: {format: jsonl, path: x}, stop_at_eos_fraction: 0.5}"),
             Catch::Contains("cannot be combined with workload.trace"));
}

TEST_CASE("a mixed synthetic run ends its requests by stop and by length", "[sim]") {
  TempDir tmp("mix-run");
  const fs::path run = run_timed(
      "{num_requests: 200, arrival: {process: poisson, rate_per_s: 100}, prompt_tokens: 20, "
      "output_tokens: {uniform: {min: 2, max: 30}}, eos_token_id: 2, stop_at_eos_fraction: 0.5}",
      tmp.path);
  std::int64_t stop = 0, length = 0;
  for (const auto& row : csv_rows(run / "requests.csv")) {
    stop += row.back() == "stop";
    length += row.back() == "length";
  }
  CHECK(stop + length == 200);
  CHECK(stop == Approx(100).margin(30));
}

TEST_CASE("client_timeout_s and stop_at_eos_fraction reach the requests and resolve back",
          "[sim]") {
  auto syn = source_of(
      "{num_requests: 3, prompt_tokens: 5, output_tokens: 5, eos_token_id: 2, "
      "stop_at_eos_fraction: 0.25, client_timeout_s: 1.5}");
  for (const auto& r : drain(*syn)) CHECK(r.client_timeout_ns == 1'500'000'000);
  for (const auto& r : drain(*source_of("{num_requests: 3, prompt_tokens: 5, output_tokens: 5}")))
    CHECK(r.client_timeout_ns == -1);
  const YamlContext ctx{"s.yaml", "workload"};
  const YAML::Node w = YAML::Load(
      "{num_requests: 3, prompt_tokens: 5, output_tokens: 5, eos_token_id: 2, "
      "stop_at_eos_fraction: 0.25, client_timeout_s: 1.5}");
  const YAML::Node resolved = workload_config_yaml(parse_workload_config(w, ctx));
  CHECK(resolved["stop_at_eos_fraction"].as<double>() == 0.25);
  CHECK(resolved["client_timeout_s"].as<double>() == 1.5);
  CHECK(resolved["ignore_eos"].IsNull());  // the fraction replaces it
  CHECK(YAML::Dump(workload_config_yaml(parse_workload_config(resolved, ctx))) ==
        YAML::Dump(resolved));

  TempDir tmp("timeout-trace");
  const fs::path p = tmp.path / "t.jsonl";
  kvsim::test::write_file(p, "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 5}\n");
  const YAML::Node t = YAML::Load(trace_yaml("jsonl", p, ", client_timeout_s: 0.25"));
  auto src = make_request_source(parse_workload_config(t, ctx), 1, 32000);
  CHECK(src->next()->client_timeout_ns == 250'000'000);
  CHECK(workload_config_yaml(parse_workload_config(t, ctx))["client_timeout_s"].as<double>() ==
        0.25);
  CHECK_THAT(read_error("{num_requests: 3, prompt_tokens: 5, output_tokens: 5, "
                        "client_timeout_s: 0}"),
             Catch::Contains("client_timeout_s"));
}
