// Randomized robustness of the command-line layer: random argument lists (known flags, near
// misses, '=' forms, values, '-', '--', mutated tokens) must either parse or throw one ConfigError
// line ending "(kvsim fuzz --help)"; any other exception (or a crash) is a bug. Fixed seeds; the
// failing arguments are printed.

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "sim/common/errors.h"
#include "sim/common/rng.h"
#include "sim/workload/samplers.h"

namespace {

using kvsim::ConfigError;
using kvsim::RngStream;
using kvsim::uniform_int;
namespace cli = kvsim::cli;

// No 'h': a generated -h/--help would print the help (parse() then returns false, also fine).
constexpr std::string_view kAlphabet = "-=.,:0123456789eE+ abcdjkloqstvxyz_/'\"";
const std::vector<std::string> kTokens = {"--jobs",   "-j",      "--emit-jobs",
                                          "--output", "-o",      "--set",
                                          "--seed",   "--quiet", "-q",
                                          "--job",    "-jq",     "-qj",
                                          "-qo",      "--",      "-",
                                          "s.yaml",   "t.yaml",  "3",
                                          "0",        "-1",      "4e3",
                                          "2.5",      "",        "=",
                                          "--=",      "a.b=c",   "--sample-prob",
                                          "0.5",      "nan",     "1e309",
                                          "-9",       "--z",     "---x",
                                          "-oout",    "-j0",     "--set=a=b"};

std::string random_token(RngStream& r) {
  std::string t = kTokens[static_cast<std::size_t>(
      uniform_int(r, 0, static_cast<std::int64_t>(kTokens.size()) - 1))];
  switch (uniform_int(r, 0, 3)) {
    case 0:  // --flag=value
      if (t.starts_with("--")) t += "=" + kTokens[static_cast<std::size_t>(uniform_int(r, 0, 20))];
      break;
    case 1:  // one mutated character
      if (!t.empty()) {
        t[static_cast<std::size_t>(uniform_int(r, 0, static_cast<std::int64_t>(t.size()) - 1))] =
            kAlphabet[static_cast<std::size_t>(
                uniform_int(r, 0, static_cast<std::int64_t>(kAlphabet.size()) - 1))];
      }
      break;
    default:
      break;
  }
  return t;
}

}  // namespace

TEST_CASE("random command lines parse or give one ConfigError line", "[cli][fuzz]") {
  for (std::uint64_t seed = 1; seed <= 4000; ++seed) {
    RngStream r = kvsim::make_stream(seed, "cli-fuzz");
    cli::Args args;
    const std::int64_t n = uniform_int(r, 0, 8);
    for (std::int64_t i = 0; i < n; ++i) args.push_back(random_token(r));
    std::string shown;
    for (const std::string& a : args) shown += " [" + a + "]";
    INFO("seed " << seed << ", arguments:" << shown);

    cli::CommandLine cl("fuzz", "SCENARIO.yaml [options]");
    cli::ScenarioArgs in;
    std::int64_t jobs = 1;
    std::optional<std::string> emit;
    std::optional<double> prob;
    cli::add_scenario_args(cl, in);
    cl.options()("jobs,j", cli::integer(&jobs, 1, 4096, "N"), "processes")(
        "emit-jobs", cli::text(&emit, "FILE"), "commands")(
        "sample-prob", cli::number(&prob, 0.0, 1.0, "P"), "probability");
    try {
      if (cl.parse(args)) {
        CHECK(jobs >= 1);
        CHECK(jobs <= 4096);
        CHECK(cl.given("SCENARIO.yaml"));
        if (prob) CHECK((*prob >= 0 && *prob <= 1));
      }
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find('\n') == std::string::npos);
      CHECK(what.ends_with("(kvsim fuzz --help)"));
    } catch (const std::exception& e) {
      FAIL("not a ConfigError: " << e.what());
    }
  }
}
