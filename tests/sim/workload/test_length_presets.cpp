// workload.lengths: (prompt, output) pairs drawn jointly from a CSV, and the shipped presets of
// scenarios/lengths/ (the PagedAttention paper's ShareGPT and Alpaca mean lengths, within OPT's
// 2,048-token context). Bad files and bad combinations are one-line errors.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "sim/workload/synthetic_workload.h"
#include "sim/workload/workload.h"
#include "sim/workload/workload_config.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::error_of;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const fs::path kLengths = fs::path(KVSIM_SOURCE_DIR) / "scenarios/lengths";

std::unique_ptr<RequestSource> source(const std::string& yaml, std::uint64_t seed = 1) {
  return make_request_source(
      parse_workload_config(YAML::Load(yaml), YamlContext{"s.yaml", "workload"}), seed, 32000);
}

std::vector<std::pair<std::int64_t, std::int64_t>> pairs_of(RequestSource& src) {
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  while (auto r = src.next()) out.emplace_back(r->num_prompt_tokens(), r->output_tokens);
  return out;
}

}  // namespace

TEST_CASE("each request draws one row of a lengths file: prompt and output stay paired", "[sim]") {
  TempDir dir("lengths");
  const fs::path f = dir.path / "pairs.csv";
  kvsim::test::write_file(f, "prompt_tokens,output_tokens,note\n10,1,a\n200,30,b\n\n3000,7,c\n");
  const std::string yaml = "{num_requests: 600, lengths: " + f.string() + "}";
  const auto pairs = pairs_of(*source(yaml));
  REQUIRE(pairs.size() == 600);
  std::set<std::pair<std::int64_t, std::int64_t>> seen(pairs.begin(), pairs.end());
  CHECK(seen == std::set<std::pair<std::int64_t, std::int64_t>>{{10, 1}, {200, 30}, {3000, 7}});
  // Same seed, same draws; the resolved section names the file and reads back the same.
  const YAML::Node resolved = workload_config_yaml(
      parse_workload_config(YAML::Load(yaml), YamlContext{"s.yaml", "workload"}));
  CHECK(resolved["lengths"].as<std::string>() == f.string());
  CHECK_FALSE(resolved["prompt_tokens"].IsDefined());
  const auto again = pairs_of(*make_request_source(
      parse_workload_config(resolved, YamlContext{"r.yaml", "workload"}), 1, 32000));
  CHECK(again == pairs);
  CHECK(pairs_of(*source(yaml, 2)) != pairs);
}

TEST_CASE("the shipped presets have the paper's mean lengths and fit OPT's context", "[sim]") {
  for (const auto& [name, prompt_mean, output_mean, prompt_max] :
       {std::tuple{"sharegpt-like.csv", 161.31, 337.99, 1024},
        std::tuple{"alpaca-like.csv", 19.31, 58.45, 1024}}) {
    INFO(name);
    const LengthTable t = LengthTable::from_csv((kLengths / name).string());
    REQUIRE(t.prompt_tokens.size() == 10000);
    double p = 0, o = 0;
    std::int64_t longest = 0;
    for (std::size_t i = 0; i < t.prompt_tokens.size(); ++i) {
      p += static_cast<double>(t.prompt_tokens[i]);
      o += static_cast<double>(t.output_tokens[i]);
      CHECK(t.prompt_tokens[i] <= prompt_max);
      CHECK(t.prompt_tokens[i] + t.output_tokens[i] <= 2048);
      longest = std::max(longest, t.prompt_tokens[i] + t.output_tokens[i]);
    }
    CHECK(p / 10000 == Approx(prompt_mean).margin(0.005));
    CHECK(o / 10000 == Approx(output_mean).margin(0.005));
    CHECK(longest > 1000);  // a heavy tail, not a constant
  }
}

TEST_CASE("bad lengths files and combinations are refused with the file and place", "[sim]") {
  TempDir dir("lengths-bad");
  const fs::path f = dir.path / "l.csv";
  kvsim::test::write_file(f, "prompt_tokens,output_tokens\n10,1\n");
  CHECK(error_of([&] { (void)source("{lengths: " + f.string() + ", prompt_tokens: 5}"); })
            .find("workload.prompt_tokens: give either lengths or prompt_tokens and output_tokens, "
                  "not both") != std::string::npos);
  CHECK(error_of([&] {
          (void)source("{lengths: " + (dir.path / "nope.csv").string() + "}");
        }).find("workload.lengths: no such file") != std::string::npos);
  CHECK(error_of([&] {
          (void)source("{lengths: " + f.string() + ", trace: {format: csv}}");
        }).find("cannot be combined with workload.trace") != std::string::npos);
  CHECK(error_of([&] {
          (void)source("{num_requests: 3}");
        }).find("missing required key 'prompt_tokens' in workload (or give lengths: FILE)") !=
        std::string::npos);
  kvsim::test::write_file(f, "prompt_tokens,output_tokens\n10,1\n5,0\n");
  CHECK(error_of([&] { (void)source("{lengths: " + f.string() + "}"); }) ==
        f.string() + ": data row 2: output_tokens must be a whole number in [1, 10000000], got 0");
  kvsim::test::write_file(f, "prompt_tokens,output_tokens\n10.5,1\n");
  CHECK(error_of([&] {
          (void)source("{lengths: " + f.string() + "}");
        }).find("data row 1: prompt_tokens must be a whole number") != std::string::npos);
  kvsim::test::write_file(f, "prompt,output_tokens\n10,1\n");
  CHECK(error_of([&] {
          (void)source("{lengths: " + f.string() + "}");
        }).find("no column 'prompt_tokens'") != std::string::npos);
  kvsim::test::write_file(f, "prompt_tokens,output_tokens\n");
  CHECK(error_of([&] { (void)source("{lengths: " + f.string() + "}"); }).find("no data rows") !=
        std::string::npos);
}

TEST_CASE("mutated lengths files and sections parse or fail with a ConfigError, nothing else",
          "[sim]") {
  TempDir dir("lengths-fuzz");
  const fs::path f = dir.path / "l.csv";
  const std::string good = "prompt_tokens,output_tokens\n10,1\n200,30\n3000,7\n";
  const std::string section = "{num_requests: 5, arrival: {process: constant, rate_per_s: 2}, ";
  constexpr std::string_view kAlphabet = "{}[]:,-\"' \n\t#0123456789.eE+abc_";
  std::mt19937_64 rng(5);
  std::int64_t parsed = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string csv = good, yaml = section + "lengths: " + f.string() + "}";
    std::string& target = i % 2 ? csv : yaml;
    for (int e = 0, n = 1 + static_cast<int>(rng() % 4); e < n; ++e) {
      const std::size_t pos = rng() % target.size();
      const char c = kAlphabet[rng() % kAlphabet.size()];
      switch (rng() % 3) {
        case 0:
          target[pos] = c;
          break;
        case 1:
          target.insert(pos, 1, c);
          break;
        default:
          target.erase(pos, 1);
      }
    }
    kvsim::test::write_file(f, csv);
    INFO("csv:\n" << csv << "\nyaml:\n" << yaml);
    try {
      const YAML::Node node = YAML::Load(yaml);
      auto src = make_request_source(parse_workload_config(node, YamlContext{"s.yaml", "workload"}),
                                     1, 32000);
      while (auto r = src->next()) REQUIRE(r->output_tokens >= 1);
      ++parsed;
    } catch (const ConfigError&) {
      ++refused;
    } catch (const YAML::Exception&) {
      ++refused;  // the YAML text itself (the scenario loader turns these into ConfigErrors)
    }
  }
  CHECK(parsed > 50);  // some mutations keep the input valid
  CHECK(refused > 1000);
}
