// The acceptance cases: every tests/cases/vllm-0.7.2/*.jsonl trace replayed through V1Replayer
// (with the invariant walk after every op) must equal vLLM's own expected output line for line,
// under the structural comparison of the cases' README.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/replay/v1_replayer.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const fs::path kCasesDir = fs::path(KVSIM_CASES_DIR) / "vllm-0.7.2";

/// Structural equality: key order irrelevant, list order significant, floats within 1e-9, any
/// {"error": ...} equals any other error object.
bool same(const json& a, const json& b) {
  if (a.is_object() && b.is_object() && a.contains("error") && b.contains("error")) return true;
  if (a.is_number() && b.is_number()) {
    if (a.is_number_float() || b.is_number_float())
      return std::abs(a.get<double>() - b.get<double>()) <= 1e-9;
    return a.get<std::int64_t>() == b.get<std::int64_t>();
  }
  if (a.type() != b.type()) return false;
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it)
      if (!b.contains(it.key()) || !same(it.value(), b.at(it.key()))) return false;
    return true;
  }
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (!same(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

/// Replays `trace` and returns the first mismatching line ("" when all agree).
std::string replay_and_compare(const fs::path& trace, const fs::path& expected) {
  kvsim::V1Replayer replayer(kvsim::ReplayOptions{/*check_invariants=*/true});
  std::string out;
  for (const std::string& line : read_lines(trace)) replayer.process_line(line, out);
  std::vector<std::string> got;
  std::istringstream ss(out);
  for (std::string line; std::getline(ss, line);) got.push_back(line);
  const std::vector<std::string> want = read_lines(expected);
  if (got.size() != want.size())
    return "line count " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!same(json::parse(got[i]), json::parse(want[i])))
      return "line " + std::to_string(i + 1) + ": got " + got[i] + "\nexpected " + want[i];
  return {};
}

std::vector<fs::path> case_traces() {
  std::vector<fs::path> traces;
  for (const auto& e : fs::directory_iterator(kCasesDir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".jsonl" && name.find(".expected.") == std::string::npos)
      traces.push_back(e.path());
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

}  // namespace

TEST_CASE("every vLLM v0.7.2 acceptance case replays line for line", "[sim][cases]") {
  const auto traces = case_traces();
  REQUIRE(traces.size() >= 29);
  for (const fs::path& t : traces) {
    fs::path expected = t;
    expected.replace_extension(".expected.jsonl");
    INFO(t.filename().string());
    REQUIRE(fs::exists(expected));
    CHECK(replay_and_compare(t, expected) == "");
  }
}

TEST_CASE("the structural comparison rejects a planted wrong result", "[sim][cases]") {
  CHECK(same(json::parse(R"({"a":[1,2],"b":0.5})"),
             json::parse(R"({"b":0.5000000000001,"a":[1,2]})")));
  CHECK_FALSE(same(json::parse(R"({"blocks":[1,2]})"), json::parse(R"({"blocks":[2,1]})")));
  CHECK_FALSE(same(json::parse(R"({"ok":true})"), json::parse(R"({"ok":1})")));
  CHECK(same(json::parse(R"({"error":"x"})"), json::parse(R"({"error":"y"})")));
  // A replay whose expected output was altered (a wrong prefix hit) must fail.
  const fs::path trace = kCasesDir / "test_prefill.jsonl";
  const kvsim::test::TempDir dir("replay-planted");
  const fs::path tmp = dir.path / "planted.expected.jsonl";
  std::vector<std::string> want = read_lines(kCasesDir / "test_prefill.expected.jsonl");
  bool planted = false;
  for (std::string& line : want) {
    const auto pos = line.find("\"num_computed_tokens\":48");
    if (pos != std::string::npos && !planted) {
      line.replace(pos, 24, "\"num_computed_tokens\":32");
      planted = true;
    }
  }
  REQUIRE(planted);
  {
    std::ofstream o(tmp);
    for (const auto& l : want) o << l << '\n';
  }
  CHECK(replay_and_compare(trace, tmp) != "");
}

TEST_CASE("kvsim replay on the command line reproduces a generated sched case", "[sim][cases]") {
  const fs::path kvsim = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir dir("replay-cli");
  const fs::path out = dir.path / "out.jsonl";
  const std::string cmd = kvsim.string() + " replay " +
                          (kCasesDir / "gen_sched_seed1.jsonl").string() + " > " + out.string();
  REQUIRE(std::system(cmd.c_str()) == 0);
  const auto got = read_lines(out);
  const auto want = read_lines(kCasesDir / "gen_sched_seed1.expected.jsonl");
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    REQUIRE(same(json::parse(got[i]), json::parse(want[i])));
}
