// `kvsim kv-size` of every shipped model config under every profile: 40 GiB of KV memory per
// worker, 8 workers, max_model_len 2048, block 16. Each expectation is written as the formula it
// follows: memory // page // layers-per-block, and requests = blocks // blocks-per-request.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "sim_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::int64_t kMem = std::int64_t{40} << 30;

// One KV page of 16 tokens: K and V of `heads` heads of `head` elements, 2 bytes each.
constexpr std::int64_t page(std::int64_t heads, std::int64_t head) {
  return 2 * 16 * heads * head * 2;
}

struct Expect {
  const char* model;
  const char* profile;
  std::int64_t num_blocks;          // 0: vLLM refuses
  std::int64_t blocks_per_request;  // the max_model_len request (all groups)
  const char* error = "";
};

// Per-request blocks at max_model_len 2048: 128 for every full group; a sliding group holds
// cdiv(min(window - 1 + 8192, 2048), 16) + 1 = 129.
const Expect kExpect[] = {
    // Full attention everywhere: the same pool under every profile.
    {"llama-3.1-8b", "vllm-0.7.2", kMem / page(1, 128) / 32, 128},
    {"llama-3.1-8b", "vllm-0.8.5", kMem / page(1, 128) / 32, 128},
    {"llama-3.1-8b", "vllm-0.20", kMem / page(1, 128) / 32, 128},
    {"llama-3.1-70b", "vllm-0.7.2", kMem / page(1, 128) / 80, 128},
    {"llama-3.1-70b", "vllm-0.20", kMem / page(1, 128) / 80, 128},
    {"qwen2-1.5b", "vllm-0.7.2", kMem / page(1, 128) / 28, 128},  // 2 heads, replicated
    {"qwen2-1.5b", "vllm-0.8.5", kMem / page(1, 128) / 28, 128},
    {"qwen2-1.5b", "vllm-0.20", kMem / page(1, 128) / 28, 128},
    {"qwen2.5-7b", "vllm-0.20", kMem / page(1, 128) / 28, 128},
    {"qwen3-8b", "vllm-0.7.2", kMem / page(1, 128) / 36, 128},
    {"qwen3-8b", "vllm-0.20", kMem / page(1, 128) / 36, 128},
    {"qwen3-32b", "vllm-0.20", kMem / page(1, 128) / 64, 128},
    {"qwen3-30b-a3b", "vllm-0.8.5", kMem / page(1, 128) / 48, 128},
    {"qwen3-30b-a3b", "vllm-0.20", kMem / page(1, 128) / 48, 128},
    {"opt-125m", "vllm-0.7.2", kMem / page(1, 64) / 12, 128},  // 12 heads / 8 = 1
    {"opt-125m", "vllm-0.20", kMem / page(1, 64) / 12, 128},
    {"opt-13b", "vllm-0.8.5", kMem / page(5, 128) / 40, 128},        // 40 heads / 8
    {"deepseek-v3", "vllm-0.7.2", kMem / (16 * 576 * 2) / 61, 128},  // MLA: one latent
    {"deepseek-v3", "vllm-0.20", kMem / (16 * 576 * 2) / 61, 128},
    // Mistral v0.1: a window on every layer; one group, the need capped by the window + 1.
    {"mistral-7b", "vllm-0.7.2", kMem / page(1, 128) / 32, 128},
    {"mistral-7b", "vllm-0.8.5", kMem / page(1, 128) / 32, 128},
    {"mistral-7b", "vllm-0.20", kMem / page(1, 128) / 32, 129},
    // gpt-oss: 2 groups of 18 (12) layers in v0.20 -> twice the blocks of all-full pools.
    {"gpt-oss-120b", "vllm-0.7.2", kMem / page(1, 64) / 36, 128},
    {"gpt-oss-120b", "vllm-0.8.5", kMem / page(1, 64) / 36, 128},
    {"gpt-oss-120b", "vllm-0.20", kMem / page(1, 64) / 18, 128 + 129},
    {"gpt-oss-20b", "vllm-0.7.2", kMem / page(1, 64) / 24, 128},
    {"gpt-oss-20b", "vllm-0.20", kMem / page(1, 64) / 12, 128 + 129},
    // Gemma 3: 6 sliding groups of up to 10 layers + 1 full group of 10.
    {"gemma-3-27b-it", "vllm-0.7.2", kMem / page(2, 128) / 62, 128},
    {"gemma-3-27b-it", "vllm-0.8.5", kMem / page(2, 128) / 62, 128},
    {"gemma-3-27b-it", "vllm-0.20", kMem / page(2, 128) / 10, 128 + 6 * 129},
    // Llama 4: the hybrid manager is off by default, so every profile pools 48 layers.
    {"llama-4-scout-17b-16e", "vllm-0.7.2", kMem / page(1, 128) / 48, 128},
    {"llama-4-scout-17b-16e", "vllm-0.20", kMem / page(1, 128) / 48, 128},
    // Qwen3-Next: 36 state layers in 3 groups + 12 full; block 144 (TP8: 1,024 B per token,
    // a 137,216 B state); cdiv(2048, 144) = 15 full blocks + 3 states per request.
    {"qwen3-next-80b-a3b", "vllm-0.20", kMem / (144 * 1024) / 12, 15 + 3},
    {"qwen3-next-80b-a3b", "vllm-0.7.2", 0, 0, "NotImplementedError: vLLM v0.7.2 has no KV cache"},
    {"qwen3-next-80b-a3b", "vllm-0.8.5", 0, 0, "NotImplementedError: vLLM v0.8.5 has no KV cache"},
};

}  // namespace

TEST_CASE("kv-size of every shipped model under every profile", "[sim]") {
  const std::string exe = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir tmp("kv-models");
  const fs::path out = tmp.path / "out", err = tmp.path / "err";
  std::set<std::string> models;
  for (const Expect& e : kExpect) {
    INFO(e.model << " " << e.profile);
    models.insert(e.model);
    const std::string cmd = exe + " kv-size --model " + e.model + " --profile " + e.profile +
                            " --kv-cache-memory-bytes " + std::to_string(kMem) +
                            " --tensor-parallel-size 8 --max-model-len 2048 --json > " +
                            out.string() + " 2> " + err.string();
    const int rc = std::system(cmd.c_str());
    if (e.num_blocks == 0) {
      CHECK(WEXITSTATUS(rc) == 2);
      CHECK(kvsim::test::slurp(err).find(e.error) != std::string::npos);
      continue;
    }
    REQUIRE(WEXITSTATUS(rc) == 0);
    const json j = json::parse(kvsim::test::slurp(out));
    const bool v020 = std::string(e.profile) == "vllm-0.20";
    CHECK(j[v020 ? "num_blocks" : "num_gpu_blocks"].get<std::int64_t>() == e.num_blocks);
    CHECK(j["max_concurrency"].get<double>() ==
          Approx(static_cast<double>(e.num_blocks) / static_cast<double>(e.blocks_per_request))
              .epsilon(1e-12));
  }
  // Every shipped config is covered.
  for (const auto& f : fs::directory_iterator(fs::path(KVSIM_SOURCE_DIR) / "scenarios/models"))
    if (f.path().extension() == ".json") CHECK(models.count(f.path().stem().string()) == 1);
}

// With no --profile (vLLM v0.20.1's rules and defaults: gpu_memory_utilization 0.92, a budget of
// 8,192 tokens on an H100 or H200) every shipped config sizes on the GPUs that serve it, named as
// people name them. gpt-oss-120b on one H100: vLLM v0.20.1 reports 19,265 blocks.
TEST_CASE("kv-size of every shipped model with no --profile, on GPUs that serve it", "[sim]") {
  struct Serve {
    const char* model;
    const char* gpu;
    std::int64_t tensor_parallel_size;
    const char* extra = "";
  };
  const Serve kServe[] = {
      {"deepseek-v3", "H200x8", 8},  // 627 GiB of FP8 weights: 8 x H100 fall 7 GiB short
      {"gemma-3-27b-it", "H100", 1},
      {"gpt-oss-120b", "H100", 1},
      {"gpt-oss-20b", "H100", 1},
      {"llama-3.1-70b", "8xA100", 8},
      {"llama-3.1-8b", "H100", 1},
      // 10M tokens of context fit no node: vLLM's --max-model-len auto takes what fits.
      {"llama-4-scout-17b-16e", "H100:4", 4, " --max-model-len auto"},
      {"mistral-7b", "A100", 1},
      {"opt-125m", "L4", 1},
      {"opt-13b", "A100-80GB", 1},
      {"qwen2-1.5b", "L4", 1},
      {"qwen2.5-7b", "H200", 1},
      {"qwen3-30b-a3b", "H100", 1},
      {"qwen3-8b", "h100-sxm", 1},
      {"qwen3-32b", "H100x2", 2},  // llm-d's setting (scenarios/cluster-llm-d-prefix.yaml)
      {"qwen3-next-80b-a3b", "H100x4", 4},
  };
  const std::string exe = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir tmp("kv-serve");
  const fs::path out = tmp.path / "out", err = tmp.path / "err";
  std::set<std::string> models;
  for (const Serve& s : kServe) {
    INFO(s.model << " on " << s.gpu);
    models.insert(s.model);
    const std::string cmd = exe + " kv-size --model " + s.model + " --gpu " + s.gpu + s.extra +
                            " --json > " + out.string() + " 2> " + err.string();
    REQUIRE(WEXITSTATUS(std::system(cmd.c_str())) == 0);
    const json j = json::parse(kvsim::test::slurp(out));
    CHECK(j["memory_budget"]["gpu_memory_utilization"].get<double>() == 0.92);
    CHECK(j["memory_budget"]["tensor_parallel_size"].get<std::int64_t>() ==
          s.tensor_parallel_size);
    CHECK(j["num_blocks"].get<std::int64_t>() > 0);
    CHECK(j["max_concurrency"].get<double>() >= 1.0);
    if (std::string(s.model) == "gpt-oss-120b") {
      CHECK(j["num_blocks"].get<std::int64_t>() == 19265);
      CHECK(j["memory_budget"]["gpu"].get<std::string>() == "H100-80GB");
    }
  }
  for (const auto& f : fs::directory_iterator(fs::path(KVSIM_SOURCE_DIR) / "scenarios/models"))
    if (f.path().extension() == ".json") CHECK(models.count(f.path().stem().string()) == 1);
  // One GPU too few is vLLM's refusal (exit 2), the count written twice must agree.
  for (const char* bad : {"--model deepseek-v3 --gpu H100x8",
                          "--model llama-3.1-8b --gpu H100x2 --tensor-parallel-size 4",
                          "--model llama-3.1-8b --gpu H100x0"}) {
    INFO(bad);
    const std::string cmd = exe + " kv-size " + bad + " > " + out.string() + " 2> " + err.string();
    CHECK(WEXITSTATUS(std::system(cmd.c_str())) == 2);
  }
  CHECK_THAT(kvsim::test::slurp(err), Catch::Contains("--gpu: GPU 'H100x0': the count 0"));
}
