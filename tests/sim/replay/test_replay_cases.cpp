// The acceptance cases: every trace of a profile's case folder (tests/cases/vllm-0.7.2/ for
// vllm-0.7.2, tests/cases/vllm-0.8.5.post1/ for vllm-0.8.5, tests/cases/vllm-0.20.1/ and
// tests/cases/vllm-0.20.1-mamba-align/ for vllm-0.20) replayed through that profile's
// V1Replayer (with the invariant walk after every op) must equal vLLM's own expected output
// line for line, under the structural comparison of the cases' README. KVSIM_REPLAY_CASE=FOLDER/NAME runs one case (tests/sim/CMakeLists.txt registers
// one ctest per case that way); without it the test runs them all.

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "replay/replay_test_util.h"
#include "sim/replay/v1_replayer.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;
using kvsim::test::compare_lines;
using kvsim::test::lines_of;
using kvsim::test::read_lines;
using kvsim::test::same_json;
using nlohmann::json;

namespace {

/// One row per V1 profile: the release whose own code produced the folder's expected outputs.
struct CaseFolder {
  kvsim::Profile profile;
  const char* folder;
  std::size_t min_cases;  // the folder's README lists this many
};
constexpr CaseFolder kCaseFolders[] = {
    {kvsim::Profile::kVllm072, "vllm-0.7.2", 29},
    {kvsim::Profile::kVllm085, "vllm-0.8.5.post1", 29},
    {kvsim::Profile::kVllm020, "vllm-0.20.1", 59},
    {kvsim::Profile::kVllm020, "vllm-0.20.1-mamba-align", 3},
    {kvsim::Profile::kVllm020, "vllm-0.20.1-offload", 42},
    {kvsim::Profile::kVllm020, "vllm-0.20.1-offload-diff", 3},
    {kvsim::Profile::kVllm020, "vllm-0.20.1-pd", 29},
    {kvsim::Profile::kVllm020, "vllm-0.20.1-pd-diff", 2},
};

fs::path cases_dir(const char* folder) { return fs::path(KVSIM_CASES_DIR) / folder; }
const fs::path kCasesDir = cases_dir("vllm-0.7.2");

/// Replays `trace` under `profile` and returns the first mismatching line ("" when all agree).
std::string replay_and_compare(kvsim::Profile profile, const fs::path& trace,
                               const fs::path& expected, bool check_invariants = true) {
  kvsim::V1Replayer replayer(profile, kvsim::ReplayOptions{check_invariants});
  std::string out;
  for (const std::string& line : read_lines(trace)) replayer.process_line(line, out);
  return compare_lines(lines_of(out), read_lines(expected));
}

std::vector<fs::path> case_traces(const fs::path& dir) {
  std::vector<fs::path> traces;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".jsonl" && name.find(".expected.") == std::string::npos)
      traces.push_back(e.path());
  }
  std::sort(traces.begin(), traces.end());
  return traces;
}

}  // namespace

TEST_CASE("every acceptance case of every V1 profile replays line for line", "[sim][cases]") {
  const char* one = std::getenv("KVSIM_REPLAY_CASE");  // FOLDER/NAME, or every case
  std::size_t ran = 0, listed = 0;
  for (const CaseFolder& f : kCaseFolders) {
    listed += f.min_cases;
    INFO(kvsim::profile_name(f.profile) << " on " << f.folder);
    const auto traces = case_traces(cases_dir(f.folder));
    REQUIRE(traces.size() >= f.min_cases);
    for (const fs::path& t : traces) {
      if (one && std::string(f.folder) + "/" + t.stem().string() != one) continue;
      ++ran;
      fs::path expected = t;
      expected.replace_extension(".expected.jsonl");
      INFO(t.filename().string());
      REQUIRE(fs::exists(expected));
      CHECK(replay_and_compare(f.profile, t, expected) == "");
    }
  }
  CHECK(ran >= (one ? 1u : listed));  // a named case must exist
}

TEST_CASE("each release's cases tell the two profiles apart", "[sim][cases]") {
  // A case whose outputs differ between the releases fails under the other profile: the table
  // cannot pass with one profile's behaviour for both folders. (No invariant walk: a kvm trace
  // names the hit blocks the other release chose, which can leave a state no release reaches.)
  const auto run = [](kvsim::Profile p, const char* folder, const char* name) {
    const fs::path trace = cases_dir(folder) / (std::string(name) + ".jsonl");
    return replay_and_compare(p, trace, cases_dir(folder) / (std::string(name) + ".expected.jsonl"),
                              /*check_invariants=*/false);
  };
  for (const char* name : {"test_prefill", "gen_sched_seed1", "gen_kvm_seed1"}) {
    INFO(name);
    CHECK(run(kvsim::Profile::kVllm085, "vllm-0.7.2", name) != "");
    CHECK(run(kvsim::Profile::kVllm072, "vllm-0.8.5.post1", name) != "");
    // The same traces with v0.20.1's answers: the older releases fail them, and vllm-0.20 fails
    // theirs.
    CHECK(run(kvsim::Profile::kVllm085, "vllm-0.20.1", name) != "");
    CHECK(run(kvsim::Profile::kVllm020, "vllm-0.8.5.post1", name) != "");
    CHECK(run(kvsim::Profile::kVllm020, "vllm-0.7.2", name) != "");
  }
  // v0.20.1's own features: a grouped init is refused by the older releases, and the flat ones
  // answer differently (stop order, reserve_full_isl, cached order).
  for (const char* name : {"v20_edge_sched_stop_order", "v20_edge_sched_reserve_full_isl",
                           "v20_edge_sched_cached_order_running_then_resumed",
                           "v20_edge_hybrid_sw_first_group_order", "gen_v20_sched_seed11"}) {
    INFO(name);
    CHECK(run(kvsim::Profile::kVllm085, "vllm-0.20.1", name) != "");
  }
}

TEST_CASE("the structural comparison rejects a planted wrong result", "[sim][cases]") {
  CHECK(same_json(json::parse(R"({"a":[1,2],"b":0.5})"),
                  json::parse(R"({"b":0.5000000000001,"a":[1,2]})")));
  CHECK_FALSE(same_json(json::parse(R"({"blocks":[1,2]})"), json::parse(R"({"blocks":[2,1]})")));
  CHECK_FALSE(same_json(json::parse(R"({"ok":true})"), json::parse(R"({"ok":1})")));
  CHECK(same_json(json::parse(R"({"error":"x"})"), json::parse(R"({"error":"y"})")));
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
  CHECK(replay_and_compare(kvsim::Profile::kVllm072, trace, tmp) != "");
}

TEST_CASE("kvsim replay on the command line reproduces a generated sched case", "[sim][cases]") {
  const fs::path kvsim = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir dir("replay-cli");
  const fs::path out = dir.path / "out.jsonl";
  // No --profile: the default, vllm-0.20; then each profile by name.
  const std::pair<const char*, const char*> runs[] = {{"", "vllm-0.20.1"},
                                                      {" --profile vllm-0.7.2", "vllm-0.7.2"},
                                                      {" --profile=vllm-0.8.5", "vllm-0.8.5.post1"},
                                                      {" --profile vllm-0.20", "vllm-0.20.1"}};
  for (const auto& [flag, folder] : runs) {
    INFO("flag '" << flag << "'");
    const std::string cmd = kvsim.string() + " replay" + flag + " " +
                            (cases_dir(folder) / "gen_sched_seed1.jsonl").string() + " > " +
                            out.string();
    REQUIRE(std::system(cmd.c_str()) == 0);
    const auto got = read_lines(out);
    const auto want = read_lines(cases_dir(folder) / "gen_sched_seed1.expected.jsonl");
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i)
      REQUIRE(same_json(json::parse(got[i]), json::parse(want[i])));
  }
}

TEST_CASE("kvsim replay refuses an unknown profile with a suggestion, exit 2", "[sim][cases]") {
  const fs::path kvsim = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir dir("replay-profile");
  const fs::path err = dir.path / "err.txt";
  const std::string cmd = kvsim.string() + " replay --profile vllm-0.8.4 " +
                          (kCasesDir / "test_prefill.jsonl").string() + " > /dev/null 2> " +
                          err.string();
  const int status = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  const std::string msg = kvsim::test::slurp(err);
  CHECK(msg.find("--profile: unknown profile 'vllm-0.8.4'") != std::string::npos);
  CHECK(msg.find("did you mean 'vllm-0.8.5'") != std::string::npos);
}
