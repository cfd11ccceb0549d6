// engine.contiguous_fit: the three placements of the contiguous profiles parse, are written to
// config.resolved.yaml and read back; a bad value is a one-line error with its position.

#include <catch2/catch.hpp>
#include <string>

#include "sim/config/scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;

namespace {

const std::string kModelPath = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-13b.json";

std::string with_engine(const std::string& engine) {
  return "name: fit\n"
         "engine: " +
         engine +
         "\n"
         "model: {config: " +
         kModelPath +
         "}\n"
         "hardware: {gpu: A100-40GB}\n"
         "cache: {block_size: 16, enable_prefix_caching: false}\n"
         "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";
}

}  // namespace

TEST_CASE("engine.contiguous_fit takes first_fit, best_fit or buddy and writes it back", "[sim]") {
  const struct {
    const char* name;
    FitPolicy fit;
  } cases[] = {{"first_fit", FitPolicy::kFirstFit},
               {"best_fit", FitPolicy::kBestFit},
               {"buddy", FitPolicy::kBuddy}};
  for (const auto& c : cases) {
    INFO(c.name);
    const Scenario s = parse_text(
        with_engine(std::string("{profile: orca-oracle, contiguous_fit: ") + c.name + "}"));
    CHECK(s.engine.contiguous_fit == c.fit);
    CHECK(s.engine_params().contiguous_fit == c.fit);
    CHECK(fit_policy_name(c.fit) == c.name);
    const std::string text = resolved_yaml(s);
    CHECK(text.find(std::string("contiguous_fit: ") + c.name) != std::string::npos);
    CHECK(resolved_yaml(parse_scenario(load_yaml_string(text, "r.yaml"), "r.yaml")) == text);
  }
  // Absent: first fit, written as such.
  const Scenario d = parse_text(with_engine("{profile: orca-pow2}"));
  CHECK(d.engine.contiguous_fit == FitPolicy::kFirstFit);
  CHECK(resolved_yaml(d).find("contiguous_fit: first_fit") != std::string::npos);
  // --set reaches it too.
  CHECK(parse_text(with_engine("{profile: orca-max}"), {"engine.contiguous_fit=buddy"})
            .engine.contiguous_fit == FitPolicy::kBuddy);
}

TEST_CASE("a bad engine.contiguous_fit is an error at its position, with a suggestion", "[sim]") {
  CHECK(scenario_error(with_engine("{profile: orca-oracle, contiguous_fit: budy}")) ==
        "s.yaml:2:48: engine.contiguous_fit: unknown value 'budy' (did you mean 'buddy'?) "
        "(allowed: first_fit, best_fit, buddy)");
  CHECK_THAT(scenario_error(with_engine("{profile: orca-oracle, contiguous_fit: worst_fit}")),
             Catch::StartsWith("s.yaml:2:48: engine.contiguous_fit: unknown value 'worst_fit'") &&
                 Catch::EndsWith("(allowed: first_fit, best_fit, buddy)"));
}
