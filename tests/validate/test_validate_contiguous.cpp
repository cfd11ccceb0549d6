// A contiguous profile has no block tables for a paged kernel to read: validation refuses it with
// one line naming the profile, before anything runs.

#include <catch2/catch.hpp>
#include <string>

#include "sim/config/scenario.h"
#include "validate_test_util.h"

using namespace kvsim;
using namespace kvsim::validate;

TEST_CASE("validation refuses a contiguous profile with a one-line error", "[validate]") {
  for (const char* profile : {"orca-max", "orca-pow2", "orca-oracle"}) {
    INFO(profile);
    const Scenario s = load_scenario(test::kSmall, {std::string("engine.profile=") + profile});
    try {
      ValidationHarness h(s, test::options(kernels::BackendKind::kCpu, kernels::DType::kF32));
      FAIL("no ConfigError");
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      CHECK(msg.find(std::string("engine.profile ") + profile +
                     " keeps one contiguous region per request") != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
  }
  const Scenario paged = load_scenario(test::kSmall, {});
  CHECK_NOTHROW(
      ValidationHarness(paged, test::options(kernels::BackendKind::kCpu, kernels::DType::kF32)));
}
