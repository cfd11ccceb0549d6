// The vLLM V0 protocol (ops-format-v0.md): every tests/cases/vllm-0.7.2-v0 trace replayed through
// V0Replayer with the invariant walk after every op must equal vLLM's own output line for line;
// engine death after a vLLM error; protocol errors; random mutations never crash the replay.

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "replay/mutate_line.h"
#include "replay/replay_test_util.h"
#include "sim/replay/v0_replayer.h"
#include "sim_test_util.h"

namespace fs = std::filesystem;
using kvsim::test::compare_lines;
using kvsim::test::lines_of;
using kvsim::test::read_lines;
using nlohmann::json;

namespace {

const fs::path kV0Cases = fs::path(KVSIM_CASES_DIR) / "vllm-0.7.2-v0";

std::vector<std::string> run(kvsim::V0Replayer& r, const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) r.process_line(l, out);
  return lines_of(out);
}

bool is_error(const std::string& line) { return json::parse(line).contains("error"); }

}  // namespace

TEST_CASE("every vLLM v0.7.2 V0 acceptance case replays line for line", "[sim][cases]") {
  std::vector<fs::path> traces;
  for (const auto& e : fs::directory_iterator(kV0Cases)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".jsonl" && name.find(".expected.") == std::string::npos)
      traces.push_back(e.path());
  }
  std::sort(traces.begin(), traces.end());
  REQUIRE(traces.size() == 33);
  for (const fs::path& t : traces) {
    fs::path expected = t;
    expected.replace_extension(".expected.jsonl");
    INFO(t.filename().string());
    kvsim::V0Replayer r(kvsim::ReplayOptions{/*check_invariants=*/true});
    CHECK(compare_lines(run(r, read_lines(t)), read_lines(expected)) == "");
  }
}

TEST_CASE("a planted wrong V0 answer is caught by the comparison", "[sim][cases]") {
  std::vector<std::string> want = read_lines(kV0Cases / "edge_naive_lifo_free_list.expected.jsonl");
  bool planted = false;
  for (std::string& line : want) {
    const auto pos = line.find("\"free_list\":[2,1,0,5]");
    if (pos != std::string::npos && !planted) {
      line.replace(pos, 21, "\"free_list\":[0,1,2,5]");  // FIFO instead of LIFO
      planted = true;
    }
  }
  REQUIRE(planted);
  kvsim::V0Replayer r;
  CHECK(compare_lines(run(r, read_lines(kV0Cases / "edge_naive_lifo_free_list.jsonl")), want) !=
        "");
}

TEST_CASE("after a vLLM error in sched mode every op but an init or a comment fails", "[sim]") {
  kvsim::V0Replayer r(kvsim::ReplayOptions{true});
  const auto out = run(
      r,
      {
          R"({"op":"sched_init","block_size":4,"num_gpu_blocks":4,"num_cpu_blocks":0,"max_num_seqs":4,"max_num_batched_tokens":64,"max_model_len":64,"preemption_mode":"swap"})",
          R"({"op":"add_seq_group","id":"a","prompt":[0,1,2,3,4,5],"max_tokens":30})",
          R"({"op":"add_seq_group","id":"b","prompt":[6,7,8,9,10,11],"max_tokens":30})",
          R"({"op":"schedule"})",
          R"({"op":"update"})",
          R"({"op":"schedule"})",  // b must swap out: no CPU blocks -> RuntimeError
          R"({"op":"comment","x":1})",
          R"({"op":"snapshot"})",
          R"({"op":"get_num_free_blocks"})",
          R"({"op":"sched_init","block_size":4,"num_gpu_blocks":4,"num_cpu_blocks":0,"max_num_seqs":4,"max_num_batched_tokens":8,"max_model_len":64})",
          R"({"op":"snapshot"})",  // the failed init left the engine dead too
          R"({"op":"bm_init","block_size":4,"num_gpu_blocks":4,"num_cpu_blocks":0})",
          R"({"op":"snapshot","brief":true})",
      });
  REQUIRE(out.size() == 13);
  const std::vector<bool> want = {false, false, false, false, false, true, false,
                                  true,  true,  true,  true,  false, false};
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO(i << ": " << out[i]);
    CHECK(is_error(out[i]) == want[i]);
  }
  CHECK(json::parse(out[5])["error"].get<std::string>().rfind("RuntimeError", 0) == 0);
}

TEST_CASE("V0 protocol errors answer one error line and change nothing", "[sim]") {
  kvsim::V0Replayer r(kvsim::ReplayOptions{true});
  const auto out =
      run(r, {
                 R"({"op":"allocate","id":"a"})",  // before any init
                 R"({"op":"bm_init","block_size":2,"num_gpu_blocks":6,"num_cpu_blocks":2})",
                 R"({"op":"add_seq_group","id":"a","prompt":[1,2,3]})",
                 R"({"op":"add_seq_group","id":"a","prompt":[1]})",                // id exists
                 R"({"op":"add_seq_group","id":"b","prompt":[1],"seq_ids":[0]})",  // seq id exists
                 R"({"op":"add_seq_group","id":"c","prompt":[1],"n":0})",  // vLLM ValueError
                 R"({"op":"allocate","id":"zzz"})",                        // unknown
                 R"({"op":"schedule"})",                                   // other mode
                 R"({"op":"set_status","seq":0,"status":"bogus"})",
                 R"({"op":"frobnicate"})",
                 R"({"op":"allocate","id":"a"})",
                 R"({"op":"get_block_table","seq":0})",
             });
  REQUIRE(out.size() == 12);
  const std::vector<bool> want = {true, false, false, true, true,  true,
                                  true, true,  true,  true, false, false};
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO(i << ": " << out[i]);
    CHECK(is_error(out[i]) == want[i]);
  }
  CHECK(json::parse(out.back()) == json::parse(R"({"table":[0,1]})"));
}

TEST_CASE("randomly mutated V0 traces never crash and answer one line per op", "[sim]") {
  std::vector<std::string> corpus;
  for (const char* name :
       {"gen_bm_seed11.jsonl", "gen_sched_seed11.jsonl", "edge_swap_cpu_full_runtime_error.jsonl",
        "bt_test_cow_caching_True.jsonl"}) {
    const std::vector<std::string> lines = read_lines(kV0Cases / name);
    corpus.insert(corpus.end(), lines.begin(), lines.end());
  }
  REQUIRE(corpus.size() > 3000);
  std::mt19937_64 rng(2024);
  for (int round = 0; round < 12; ++round) {
    kvsim::V0Replayer r(kvsim::ReplayOptions{true});
    std::string out;
    std::int64_t answered = 0;
    for (std::size_t i = 0; i < corpus.size(); i += 1 + rng() % 3) {
      const std::string line = kvsim::test::mutate_line(corpus[i], rng);
      const std::size_t before = std::count(out.begin(), out.end(), '\n');
      const bool a = r.process_line(line, out);
      REQUIRE(std::count(out.begin(), out.end(), '\n') - before == (a ? 1u : 0u));
      answered += a;
    }
    std::size_t start = 0;
    std::int64_t lines = 0;
    for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1, ++lines)
      REQUIRE_NOTHROW(json::parse(out.substr(start, nl - start)));
    CHECK(lines == answered);
  }
}

TEST_CASE("kvsim replay --profile vllm-0.7.2-v0 reproduces the random sched case", "[sim][cases]") {
  const kvsim::test::TempDir dir("replay-v0-cli");
  const fs::path out = dir.path / "out.jsonl";
  const std::string cmd = kvsim::test::kvsim_exe() + " replay --profile vllm-0.7.2-v0 " +
                          (kV0Cases / "gen_sched_seed11.jsonl").string() + " > " + out.string() +
                          " 2>/dev/null";
  REQUIRE(std::system(cmd.c_str()) == 0);
  CHECK(compare_lines(read_lines(out), read_lines(kV0Cases / "gen_sched_seed11.expected.jsonl")) ==
        "");
  const std::string bad = kvsim::test::kvsim_exe() + " replay --profile vllm-9 " +
                          (kV0Cases / "gen_sched_seed11.jsonl").string() + " > /dev/null 2>&1";
  CHECK(WEXITSTATUS(std::system(bad.c_str())) == 2);
}
