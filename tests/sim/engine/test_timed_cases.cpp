// The timed acceptance cases: what vLLM's own engine loop produced on a simulated clock
// (tests/cases/timed-vllm-*/; each folder's README says how, and how to compare). Every case of
// every folder in kTimedCaseFolders is its own test (one ctest each, named by folder and case):
// kvsim runs the case's scenario, and requests.csv must equal expected/requests.csv as text, row
// order included, and summary.json must hold expected/summary.json's value for every one of its
// keys. A later profile adds its folder to the table.

#include <algorithm>
#include <catch2/catch.hpp>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;

using kvsim::test::lines_of;

namespace {

/// The case folders under tests/cases that kvsim must reproduce, with the cases each holds at
/// least.
struct CaseFolder {
  const char* name;
  std::size_t min_cases;
};
constexpr CaseFolder kTimedCaseFolders[] = {
    {"timed-vllm-0.7.2", 6},
    {"timed-vllm-0.8.5.post1", 6},
    {"timed-vllm-0.20.1", 6},
    {"timed-vllm-0.20.1-offload", 3},
};

/// Runs the case in `dir` and compares its outputs with dir/expected.
void check_case(const fs::path& dir) {
  const fs::path expected = dir / "expected";
  REQUIRE(fs::exists(expected / "requests.csv"));
  REQUIRE(fs::exists(expected / "summary.json"));
  kvsim::test::TempDir tmp("timed-case-" + dir.filename().string());
  const kvsim::Scenario s = kvsim::load_scenario((dir / "scenario.yaml").string(), {});
  const kvsim::RunResult r = kvsim::run_scenario(s, tmp.path);

  const std::string want_csv = kvsim::test::slurp(expected / "requests.csv");
  const std::string got_csv = kvsim::test::slurp(r.folder / "requests.csv");
  if (got_csv != want_csv) {
    const auto want = lines_of(want_csv), got = lines_of(got_csv);
    std::size_t i = 0;
    while (i < want.size() && i < got.size() && want[i] == got[i]) ++i;
    INFO("requests.csv: " << got.size() << " lines, expected " << want.size()
                          << "; first difference at line " << i + 1
                          << "\n  got:      " << (i < got.size() ? got[i] : "(none)")
                          << "\n  expected: " << (i < want.size() ? want[i] : "(none)"));
    FAIL("requests.csv differs from " << (expected / "requests.csv").string());
  }

  const nlohmann::json want = nlohmann::json::parse(kvsim::test::slurp(expected / "summary.json"));
  const nlohmann::json got = nlohmann::json::parse(r.summary_json);
  REQUIRE(want.is_object());
  CHECK(want.size() >= 10);
  for (auto it = want.begin(); it != want.end(); ++it) {
    INFO("summary.json key " << it.key());
    REQUIRE(got.contains(it.key()));
    if (!it.value().is_object()) {
      CHECK(got.at(it.key()) == it.value());
      continue;
    }
    // An object (kv_offload): every key it gives (kvsim may write more).
    const nlohmann::json& sub = got.at(it.key());
    for (auto jt = it.value().begin(); jt != it.value().end(); ++jt) {
      INFO("summary.json key " << it.key() << "." << jt.key());
      REQUIRE(sub.contains(jt.key()));
      CHECK(sub.at(jt.key()) == jt.value());
    }
  }
}

/// The case folders (those holding a scenario.yaml) of tests/cases/`folder`, by name.
std::vector<fs::path> cases_of(const char* folder) {
  std::vector<fs::path> cases;
  const fs::path root = fs::path(KVSIM_CASES_DIR) / folder;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec))
    if (fs::exists(e.path() / "scenario.yaml")) cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  return cases;
}

class CaseTest final : public Catch::ITestInvoker {
 public:
  explicit CaseTest(fs::path dir) : dir_(std::move(dir)) {}
  void invoke() const override { check_case(dir_); }

 private:
  fs::path dir_;
};

/// A folder with no cases (missing, emptied) fails instead of passing with nothing run.
class FolderTest final : public Catch::ITestInvoker {
 public:
  explicit FolderTest(const CaseFolder& folder) : folder_(folder) {}
  void invoke() const override {
    INFO("tests/cases/" << folder_.name);
    CHECK(cases_of(folder_.name).size() >= folder_.min_cases);
  }

 private:
  CaseFolder folder_;
};

/// Registers one Catch2 test per case at start-up (catch_discover_tests makes each a ctest).
struct RegisterCases {
  std::deque<std::string> names;  // Catch2 copies them; kept for the lifetime of the program
  RegisterCases() {
    for (const CaseFolder& folder : kTimedCaseFolders) {
      add(new FolderTest(folder),
          std::string("timed case folder ") + folder.name + " holds its cases");
      for (const fs::path& dir : cases_of(folder.name))
        add(new CaseTest(dir),
            std::string("timed case ") + folder.name + "/" + dir.filename().string());
    }
  }
  void add(Catch::ITestInvoker* test, std::string name) {
    names.push_back(std::move(name));
    Catch::AutoReg(test, CATCH_INTERNAL_LINEINFO, Catch::StringRef(),
                   Catch::NameAndTags{names.back(), "[sim][timed]"});
  }
};

const RegisterCases kRegistered;

}  // namespace
