// Every kvsim command through the binary: --help exits 0 and lists the command's options, and bad
// input of each kind (flags, trace rows' per-request fields) exits 2 with exactly one line on
// stderr.

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_test_util.h"

namespace {

using kvsim::test::lines_of;
using kvsim::test::run_kvsim;
using kvsim::test::TempDir;

struct HelpCase {
  std::string command;
  std::vector<std::string> flags;  // as the generated list shows them
};

const std::vector<HelpCase> kHelp = {
    {"run",
     {"-o [ --output ] DIR", "--set KEY.PATH=VALUE", "--seed N", "-q [ --quiet ]",
      "--check-invariants"}},
    {"sweep",
     {"-o [ --output ] DIR", "--set KEY.PATH=VALUE", "--seed N", "-q [ --quiet ]",
      "-j [ --jobs ] N", "--emit-jobs FILE"}},
    {"merge", {"--into SWEEP_DIR", "-o [ --output ] FILE"}},
    {"replay", {"--check-invariants"}},
    {"kv-size",
     {"--model CONFIG", "--gpu NAME", "--kv-cache-memory-bytes N", "--block-size B",
      "--tensor-parallel-size N", "--gpu-memory-utilization F", "--num-gpu-blocks-override N",
      "--activation-reserve-bytes N", "--kv-cache-dtype DTYPE", "--json"}},
    {"calibrate", {"-o [ --output ] FILE"}},
    {"validate",
     {"-o [ --output ] DIR", "--set KEY.PATH=VALUE", "--seed N", "-q [ --quiet ]",
      "--backend cpu|cuda", "--sample-every N", "--sample-prob P", "--dtype bf16|fp16",
      "--repeats N", "--warmup N", "--export-calibration FILE"}},
    {"plot",
     {"-o [ --out ] OUT_DIR", "--format LIST", "--max-points N", "--heatmap-keys ROWS,COLS",
      "--per-run", "-q [ --quiet ]"}},
    {"check", {"--baseline FILE", "--update-baseline", "--scenario YAML", "--all"}},
};

}  // namespace

TEST_CASE("kvsim COMMAND --help exits 0 with the usage line and every option of the command",
          "[cli]") {
  TempDir tmp("help");
  for (const HelpCase& h : kHelp) {
    for (const char* flag : {"--help", "-h"}) {
      INFO("kvsim " << h.command << " " << flag);
      const auto o = run_kvsim({h.command, flag}, tmp.path);
      CHECK(o.status == 0);
      CHECK(o.err.empty());
      CHECK(o.out.starts_with("usage: kvsim " + h.command + " "));
      CHECK_THAT(o.out, Catch::Contains("-h [ --help ]"));
      for (const std::string& f : h.flags) CHECK_THAT(o.out, Catch::Contains(f));
    }
  }
  const auto top = run_kvsim({"--help"}, tmp.path);
  CHECK(top.status == 0);
  for (const HelpCase& h : kHelp) CHECK_THAT(top.out, Catch::Contains("  " + h.command + " "));
}

TEST_CASE("bad command lines exit 2 with one line on stderr that names the problem", "[cli]") {
  TempDir tmp("bad");
  const std::string scenario =
      std::string(KVSIM_SOURCE_DIR) + "/scenarios/regression/tiny-chat.yaml";
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen2-1.5b.json";
  struct Bad {
    std::vector<std::string> args;
    std::string message;  // the whole line after "kvsim <command>: error: "
  };
  const std::vector<Bad> cases = {
      // did-you-mean on a misspelt flag, in several commands
      {{"run", scenario, "--check-invariant"},
       "unknown option '--check-invariant' (did you mean '--check-invariants'?) (kvsim run "
       "--help)"},
      {{"sweep", scenario, "--jbos", "2"},
       "unknown option '--jbos' (did you mean '--jobs'?) (kvsim sweep --help)"},
      {{"validate", scenario, "--sample-evry=3"},
       "unknown option '--sample-evry' (did you mean '--sample-every'?) (kvsim validate --help)"},
      {{"kv-size", "--model", model, "--blok-size", "8"},
       "unknown option '--blok-size' (did you mean '--block-size'?) (kvsim kv-size --help)"},
      {{"check", "a", "--basline", "b"},
       "unknown option '--basline' (did you mean '--baseline'?) (kvsim check --help)"},
      {{"plot", "a", "--max-point", "20"},
       "unknown option '--max-point' (did you mean '--max-points'?) (kvsim plot --help)"},
      // a missing value
      {{"run", scenario, "--seed"}, "--seed needs a value (kvsim run --help)"},
      {{"merge", "d", "-o"}, "--output needs a value (kvsim merge --help)"},
      {{"kv-size", "--model"}, "--model needs a value (kvsim kv-size --help)"},
      // a bad number names the flag
      {{"run", scenario, "--seed", "x1"},
       "--seed: expected a non-negative integer, got 'x1' (kvsim run --help)"},
      {{"sweep", scenario, "--jobs=many"},
       "--jobs: expected an integer in [1, 4096], got 'many' (kvsim sweep --help)"},
      {{"kv-size", "--model", model, "--block-size", "0"},
       "--block-size: expected an integer in [1, 65536], got '0' (kvsim kv-size --help)"},
      {{"validate", scenario, "--warmup", "-1"},
       "--warmup: expected an integer >= 0, got '-1' (kvsim validate --help)"},
      {{"kv-size", "--model", model, "--gpu-memory-utilization", "1.5"},
       "--gpu-memory-utilization: expected a number in [1e-06, 1], got '1.5' (kvsim kv-size "
       "--help)"},
      // a stray positional
      {{"run", scenario, "extra.yaml"}, "unexpected argument 'extra.yaml' (kvsim run --help)"},
      {{"replay", "a", "b"}, "unexpected argument 'b' (kvsim replay --help)"},
      {{"calibrate", "m.csv", "n.csv", "-o", "x.yaml"},
       "unexpected argument 'n.csv' (kvsim calibrate --help)"},
      {{"kv-size", "qwen"}, "unexpected argument 'qwen' (kvsim kv-size --help)"},
      // a missing positional or required flag
      {{"run"}, "missing SCENARIO.yaml (kvsim run --help)"},
      {{"check", "a"}, "--baseline FILE is required (kvsim check --help)"},
      {{"calibrate", "m.csv"}, "-o model.yaml is required (kvsim calibrate --help)"},
      {{"plot"}, "missing RUN_DIR (kvsim plot --help)"},
      // a switch given a value
      {{"run", scenario, "--quiet=yes"}, "--quiet takes no value (kvsim run --help)"},
  };
  for (const Bad& b : cases) {
    std::string line;
    for (const std::string& a : b.args) line += " " + a;
    INFO("kvsim" << line);
    const auto o = run_kvsim(b.args, tmp.path);
    CHECK(o.status == 2);
    CHECK(o.out.empty());
    const auto err = lines_of(o.err);
    REQUIRE(err.size() == 1);
    CHECK(err[0] == "kvsim " + b.args[0] + ": error: " + b.message);
  }
  const auto o = run_kvsim({"rnu"}, tmp.path);
  CHECK(o.status == 2);
  CHECK(lines_of(o.err) ==
        std::vector<std::string>{
            "kvsim: error: unknown command 'rnu' (did you mean 'run'?) (kvsim --help)"});
}

TEST_CASE("kvsim run takes --flag=value and --flag value alike", "[cli]") {
  TempDir tmp("syntax");
  const std::string scenario =
      std::string(KVSIM_SOURCE_DIR) + "/scenarios/regression/tiny-chat.yaml";
  const auto a = run_kvsim({"run", scenario, "-o", (tmp.path / "a").string(), "--seed", "5",
                            "--set", "name=x", "--quiet"},
                           tmp.path);
  REQUIRE(a.status == 0);
  const auto b = run_kvsim(
      {"run", "--output=" + (tmp.path / "b").string(), "--seed=5", "--set=name=x", "-q", scenario},
      tmp.path);
  REQUIRE(b.status == 0);
  const std::string sa = kvsim::test::slurp(tmp.path / "a" / "x" / "summary.json");
  CHECK_THAT(sa, Catch::Contains("\"seed\": 5,"));
  CHECK(sa == kvsim::test::slurp(tmp.path / "b" / "x" / "summary.json"));
}

TEST_CASE("kvsim run: a bad per-request field exits 2 with one line naming file:line:col",
          "[cli]") {
  TempDir tmp("per-request");
  const std::string model = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/opt-125m.json";
  const std::string row = "{\"arrival_s\": 0, \"prompt_tokens\": 10, \"output_tokens\": 5";
  struct Bad {
    std::string file, text, format;
    std::vector<std::string> sets;
    std::string message;  // after "kvsim run: error: "
  };
  const std::string jsonl = (tmp.path / "t.jsonl").string();
  const std::string csv = (tmp.path / "t.csv").string();
  const std::string csv_head = "arrival_s,prompt_tokens,output_tokens,max_tokens,ignore_eos\n";
  const std::vector<Bad> cases = {
      {jsonl,
       row + "}\n" + row + ", \"max_tokens\": 0}\n",
       "jsonl",
       {},
       jsonl + ":2:59: field 'max_tokens' must be an integer >= 1, got 0"},
      {jsonl,
       row + ", \"max_tokens\": 2.5}\n",
       "jsonl",
       {},
       jsonl + ":1:59: field 'max_tokens' must be an integer >= 1, got 2.5"},
      {jsonl,
       row + ", \"eos_token_id\": -4}\n",
       "jsonl",
       {},
       jsonl + ":1:59: field 'eos_token_id' must be an integer in [0, 50272), got -4"},
      {jsonl,
       row + ", \"ignore_eos\": false}\n",
       "jsonl",
       {},
       jsonl + ":1:1: ignore_eos is false but there is no eos_token_id (give one in the row or as "
               "workload.eos_token_id)"},
      {csv,
       csv_head + "0,10,5,4,true\n0,10,5,-1,\n",
       "csv",
       {},
       csv + ":3:1: max_tokens: expected an integer >= 1, got '-1'"},
      {csv,
       csv_head + "0,10,5,,maybe\n",
       "csv",
       {},
       csv + ":2:1: ignore_eos: expected true or false, got 'maybe'"},
      {jsonl,
       row + "}\n",
       "jsonl",
       {"workload.client_timeout_s=-1"},
       "--set workload.client_timeout_s=-1: workload.client_timeout_s: -1 is out of range (must "
       "be in [1e-09, 1000000000])"},
  };
  const auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  };
  for (const Bad& b : cases) {
    INFO(b.text);
    write(b.file, b.text);
    const std::string scenario = (tmp.path / "s.yaml").string();
    // vLLM v0.7.2's rules: 64 blocks hold no max_model_len (2,048) request under v0.20.1's check.
    write(scenario, "name: bad\nengine: {profile: vllm-0.7.2}\nmodel: {config: " + model +
                        "}\ncache: {num_gpu_blocks_override: 64}\nworkload: "
                        "{trace: {format: " +
                        b.format + ", path: " + b.file + "}}\n");
    std::vector<std::string> args = {"run", scenario, "-o", (tmp.path / "out").string(), "-q"};
    for (const std::string& s : b.sets) {
      args.push_back("--set");
      args.push_back(s);
    }
    const auto o = run_kvsim(args, tmp.path);
    CHECK(o.status == 2);
    CHECK(o.out.empty());
    CHECK(lines_of(o.err) == std::vector<std::string>{"kvsim run: error: " + b.message});
    CHECK_FALSE(std::filesystem::exists(tmp.path / "out" / "bad"));  // nothing half-written
  }
}
