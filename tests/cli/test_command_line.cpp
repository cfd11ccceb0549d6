// The shared command-line layer (cli/cli_args.h) in-process: both value syntaxes, repeated and
// repeatable flags, positionals, and the one-line ConfigError of each kind of bad input.

#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/cli_args.h"
#include "sim/common/errors.h"

namespace {

using kvsim::ConfigError;
using kvsim::cli::Args;
using kvsim::cli::CommandLine;
namespace cli = kvsim::cli;

/// A command shaped like `kvsim sweep`: SCENARIO.yaml, the scenario flags, --jobs, --emit-jobs.
struct Sweepish {
  CommandLine cl{"sweep", "SCENARIO.yaml [options]"};
  cli::ScenarioArgs in;
  std::int64_t jobs = 4;
  std::optional<std::string> emit;
  std::optional<double> prob;
  Sweepish() {
    cli::add_scenario_args(cl, in);
    cl.options()                                                       //
        ("jobs,j", cli::integer(&jobs, 1, 4096, "N"), "processes")     //
        ("emit-jobs", cli::text(&emit, "FILE"), "write the commands")  //
        ("sample-prob", cli::number(&prob, 0.0, 1.0, "P"), "a probability");
  }
};

/// The message of the ConfigError parsing `args` throws ("" when none).
std::string error_of(const Args& args) {
  Sweepish s;
  try {
    (void)s.cl.parse(args);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a flag takes its value as --flag value or --flag=value, short forms too", "[cli]") {
  for (const Args& args :
       {Args{"s.yaml", "--jobs", "3", "--output", "out", "--seed", "11", "--emit-jobs", "j.txt"},
        Args{"--jobs=3", "--output=out", "s.yaml", "--seed=11", "--emit-jobs=j.txt"},
        Args{"-j", "3", "-o", "out", "--seed", "11", "s.yaml", "--emit-jobs", "j.txt"},
        Args{"-j3", "-oout", "--seed=11", "--emit-jobs=j.txt", "--", "s.yaml"}}) {
    Sweepish s;
    INFO(args.size() << " args, first " << args.front());
    REQUIRE(s.cl.parse(args));
    CHECK(s.in.path == "s.yaml");
    CHECK(s.jobs == 3);
    CHECK(s.in.out_dir == "out");
    CHECK(s.in.seed == std::optional<std::uint64_t>(11));
    CHECK(s.emit == std::optional<std::string>("j.txt"));
    CHECK_FALSE(s.in.quiet);
    CHECK(s.cl.given("jobs"));
    CHECK(s.cl.given("SCENARIO.yaml"));
    CHECK_FALSE(s.cl.given("quiet"));
  }
}

TEST_CASE("absent flags keep their defaults, a value flag given twice keeps the last", "[cli]") {
  Sweepish s;
  REQUIRE(s.cl.parse({"s.yaml"}));
  CHECK(s.in.out_dir == "results");
  CHECK(s.jobs == 4);
  CHECK_FALSE(s.in.seed);
  CHECK_FALSE(s.emit);
  CHECK(s.in.sets.empty());

  Sweepish t;
  REQUIRE(
      t.cl.parse({"s.yaml", "-o", "a", "--output=b", "-q", "--quiet", "--jobs", "2", "-j", "5"}));
  CHECK(t.in.out_dir == "b");
  CHECK(t.jobs == 5);
  CHECK(t.in.quiet);
}

TEST_CASE("the repeatable --set keeps every value in order, '=' inside included", "[cli]") {
  Sweepish s;
  REQUIRE(s.cl.parse({"--set", "cache.block_size=32", "s.yaml", "--set=name=x=y", "--set",
                      "workload.prompt_tokens={uniform: {min: 1, max: 2}}"}));
  CHECK(s.in.sets ==
        std::vector<std::string>{"cache.block_size=32", "name=x=y",
                                 "workload.prompt_tokens={uniform: {min: 1, max: 2}}"});
}

TEST_CASE("a value that starts with '-' is taken unless it is a known flag", "[cli]") {
  CHECK(error_of({"s.yaml", "--seed", "-1"}) ==
        "--seed: expected a non-negative integer, got '-1' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "-o", "-q"}) == "--output needs a value (kvsim sweep --help)");
  Sweepish s;
  REQUIRE(s.cl.parse({"s.yaml", "-o", "-dir"}));
  CHECK(s.in.out_dir == "-dir");
}

TEST_CASE("a misspelt or abbreviated flag is unknown, with a did-you-mean from the options",
          "[cli]") {
  CHECK(error_of({"s.yaml", "--job", "3"}) ==
        "unknown option '--job' (did you mean '--jobs'?) (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--emit-job=x"}) ==
        "unknown option '--emit-job' (did you mean '--emit-jobs'?) (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--ouptut", "x"}) ==
        "unknown option '--ouptut' (did you mean '--output'?) (kvsim sweep --help)");
  // Nothing close: the options are listed.
  CHECK(error_of({"s.yaml", "--zzzzzzzz"}) ==
        "unknown option '--zzzzzzzz' (allowed: --help, --output, --set, --seed, --quiet, --jobs, "
        "--emit-jobs, --sample-prob) (kvsim sweep --help)");
  // A prefix of a real flag is not guessed.
  CHECK(error_of({"s.yaml", "--emit", "x"}).starts_with("unknown option '--emit'"));
  CHECK(error_of({"s.yaml", "-x"}).starts_with("unknown option '-x'"));
}

TEST_CASE("a missing value, a bad number, a stray positional: one line each", "[cli]") {
  CHECK(error_of({"s.yaml", "--jobs"}) == "--jobs needs a value (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--set"}) == "--set needs a value (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--emit-jobs="}) ==
        "--emit-jobs: no value after '=' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--jobs", "x"}) ==
        "--jobs: expected an integer in [1, 4096], got 'x' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "-j", "0"}) ==
        "--jobs: expected an integer in [1, 4096], got '0' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--jobs=2.5"}) ==
        "--jobs: expected an integer in [1, 4096], got '2.5' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--seed", "abc"}) ==
        "--seed: expected a non-negative integer, got 'abc' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--sample-prob", "1.5"}) ==
        "--sample-prob: expected a number in [0, 1], got '1.5' (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "--quiet=yes"}) == "--quiet takes no value (kvsim sweep --help)");
  CHECK(error_of({"s.yaml", "t.yaml"}) == "unexpected argument 't.yaml' (kvsim sweep --help)");
  CHECK(error_of({}) == "missing SCENARIO.yaml (kvsim sweep --help)");
  for (const Args& a : {Args{"s.yaml", "--jobs"}, Args{"s.yaml", "--nope"}, Args{"a", "b"}})
    CHECK(error_of(a).find('\n') == std::string::npos);
}

TEST_CASE("the accepted inputs still parse: the numbers at the edges of their ranges", "[cli]") {
  Sweepish s;
  REQUIRE(s.cl.parse(
      {"s.yaml", "--jobs", "4096", "--seed", "18446744073709551615", "--sample-prob", "1"}));
  CHECK(s.jobs == 4096);
  CHECK(s.in.seed == std::optional<std::uint64_t>(18446744073709551615ull));
  CHECK(s.prob == std::optional<double>(1.0));
  CHECK(error_of({"s.yaml", "--seed", "18446744073709551616"}).starts_with("--seed: expected"));
}

TEST_CASE("--help prints the usage line and the generated option list, and parse() says so",
          "[cli]") {
  Sweepish s;
  CHECK_FALSE(s.cl.parse({"--help"}));  // no SCENARIO.yaml needed
  Sweepish t;
  CHECK_FALSE(t.cl.parse({"s.yaml", "-h"}));
  const std::string help = s.cl.help();
  CHECK(help.starts_with("usage: kvsim sweep SCENARIO.yaml [options]\n"));
  for (const char* f :
       {"-h [ --help ]", "-j [ --jobs ] N", "--emit-jobs FILE", "-o [ --output ] DIR",
        "--set KEY.PATH=VALUE", "--seed N", "-q [ --quiet ]"})
    CHECK_THAT(help, Catch::Contains(f));
  CHECK(s.cl.flag_names() == std::vector<std::string>{"--help", "--output", "--set", "--seed",
                                                      "--quiet", "--jobs", "--emit-jobs",
                                                      "--sample-prob"});
}

TEST_CASE("a positional that takes any number, an optional one, and '-' as a value", "[cli]") {
  CommandLine plot("plot", "RUN_DIR... [options]");
  std::vector<std::string> dirs;
  bool q = false;
  plot.positional("RUN_DIR", cli::texts(&dirs, "RUN_DIR"), -1);
  plot.options()("quiet,q", cli::flag(&q), "quiet");
  REQUIRE(plot.parse({"a", "-q", "b", "c"}));
  CHECK(dirs == std::vector<std::string>{"a", "b", "c"});
  CHECK(q);
  CommandLine empty("plot", "RUN_DIR...");
  std::vector<std::string> none;
  empty.positional("RUN_DIR", cli::texts(&none, "RUN_DIR"), -1);
  CHECK_THROWS_WITH(empty.parse({}), "missing RUN_DIR (kvsim plot --help)");

  CommandLine replay("replay", "[FILE|-]");
  std::string file = "-";
  replay.positional("FILE", cli::text(&file, "FILE"), 1, /*required=*/false);
  REQUIRE(replay.parse({}));
  CHECK(file == "-");
  CommandLine replay2("replay", "[FILE|-]");
  std::string file2 = "x";
  replay2.positional("FILE", cli::text(&file2, "FILE"), 1, false);
  REQUIRE(replay2.parse({"-"}));
  CHECK(file2 == "-");
}

TEST_CASE("a checked value: the parser's message is prefixed with the flag", "[cli]") {
  CommandLine c("validate", "SCENARIO.yaml");
  std::optional<std::string> backend;
  c.options()("backend",
              cli::checked<std::string>(&backend, "cpu|cuda",
                                        [](const std::string& s) {
                                          if (s != "cpu" && s != "cuda")
                                            throw ConfigError("unknown kernel backend '" + s +
                                                              "' (allowed: cpu, cuda)");
                                          return s;
                                        }),
              "backend");
  CHECK_THROWS_WITH(c.parse({"--backend", "tpu"}),
                    "--backend: unknown kernel backend 'tpu' (allowed: cpu, cuda) (kvsim validate "
                    "--help)");
  CommandLine d("validate", "SCENARIO.yaml");
  d.options()(
      "backend",
      cli::checked<std::string>(&backend, "cpu|cuda", [](const std::string& s) { return s; }),
      "backend");
  REQUIRE(d.parse({"--backend=cuda"}));
  CHECK(backend == std::optional<std::string>("cuda"));
}
