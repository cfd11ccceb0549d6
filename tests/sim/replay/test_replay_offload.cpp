// The CPU offloading tier's op protocol (shared/spec/ops-format-offload.md) under random damage:
// mutated lines of the offload acceptance traces (offm and sched mode), replayed by the vllm-0.20
// profile with the invariant walk after every op (the tier's, the connector's and the worker's
// included), never crash and always answer one JSON line per op.

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "replay/mutate_line.h"
#include "sim/replay/v1_replayer.h"

namespace fs = std::filesystem;

namespace {

std::vector<std::string> offload_corpus() {
  const fs::path dir = fs::path(KVSIM_CASES_DIR) / "vllm-0.20.1-offload";
  std::vector<std::string> corpus;
  if (!fs::exists(dir)) return corpus;
  std::vector<fs::path> traces;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".jsonl" && name.find(".expected.") == std::string::npos)
      traces.push_back(e.path());
  }
  std::sort(traces.begin(), traces.end());
  for (const fs::path& t : traces) {
    std::ifstream in(t);
    for (std::string line; std::getline(in, line);) corpus.push_back(line);
  }
  return corpus;
}

}  // namespace

TEST_CASE("mutated offload traces never crash and always answer one line per op", "[sim]") {
  const std::vector<std::string> corpus = offload_corpus();
  REQUIRE(corpus.size() > 1000);
  std::mt19937_64 rng(4242);
  for (int round = 0; round < 4; ++round) {
    INFO("round " << round << " (seed 4242)");
    kvsim::V1Replayer r(kvsim::Profile::kVllm020, kvsim::ReplayOptions{true});
    std::string out;
    std::int64_t answered_lines = 0;
    for (std::size_t i = 0; i < corpus.size(); i += 1 + rng() % 2) {
      const std::string line = kvsim::test::mutate_line(corpus[i], rng);
      const std::size_t before = std::count(out.begin(), out.end(), '\n');
      const bool answered = r.process_line(line, out);
      const std::size_t after = std::count(out.begin(), out.end(), '\n');
      REQUIRE(after - before == (answered ? 1u : 0u));
      answered_lines += answered;
    }
    std::size_t start = 0;
    std::int64_t lines = 0;
    for (std::size_t nl; (nl = out.find('\n', start)) != std::string::npos; start = nl + 1, ++lines)
      REQUIRE_NOTHROW(nlohmann::json::parse(out.substr(start, nl - start)));
    CHECK(lines == answered_lines);
  }
}

TEST_CASE("offm ops answer an error outside offm mode and for bad keys", "[sim]") {
  kvsim::V1Replayer r(kvsim::Profile::kVllm020, kvsim::ReplayOptions{true});
  std::string out;
  r.process_line(R"({"op":"offload_lookup","key":1})", out);
  CHECK(out.find("error") != std::string::npos);
  out.clear();
  r.process_line(R"({"op":"offload_init","num_blocks":2,"eviction_policy":"fifo"})", out);
  CHECK(out.find("error") != std::string::npos);
  out.clear();
  r.process_line(R"({"op":"offload_init","num_blocks":2})", out);
  CHECK(out == "{}\n");
  out.clear();
  r.process_line(R"({"op":"offload_prepare_store","keys":[1.5]})", out);
  CHECK(out.find("error") != std::string::npos);
  out.clear();
  // A key is vLLM's str(value): 7 and "7" are one key.
  r.process_line(R"({"op":"offload_prepare_store","keys":[7]})", out);
  r.process_line(R"({"op":"offload_complete_store","keys":["7"]})", out);
  r.process_line(R"({"op":"offload_lookup","key":7})", out);
  CHECK(out.substr(out.rfind('{')) == "{\"hit\":true}\n");
}

TEST_CASE("a sched_init's kv_offload is refused as vLLM v0.20.1 refuses it", "[sim]") {
  kvsim::V1Replayer r(kvsim::Profile::kVllm020, kvsim::ReplayOptions{true});
  const std::string base =
      R"({"op":"sched_init","block_size":4,"num_gpu_blocks":16,"max_model_len":64,)"
      R"("max_num_seqs":4,"max_num_batched_tokens":64,"kv_offload":)";
  for (const char* bad : {R"({})", R"({"cpu_bytes_to_use":0})", R"({"num_cpu_blocks":2,"x":1})",
                          R"({"num_cpu_blocks":2,"block_size":6})",
                          R"({"num_cpu_blocks":2,"eviction_policy":"mru"})",
                          R"({"num_cpu_blocks":2,"disable_hybrid_kv_cache_manager":false})"}) {
    INFO(bad);
    std::string out;
    r.process_line(base + bad + "}", out);
    CHECK(out.find("error") != std::string::npos);
  }
  std::string out;
  r.process_line(base + R"({"num_cpu_blocks":2,"block_size":8}})", out);
  CHECK(out == "{}\n");
}
