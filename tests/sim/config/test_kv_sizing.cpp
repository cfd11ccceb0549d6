#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/kv_sizing.h"
#include "sim/config/hardware.h"
#include "sim/config/model_config.h"
#include "sim/config/scenario.h"
#include "sim_test_util.h"

using namespace kvsim;

namespace {
std::string model_path(const std::string& name) {
  return std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/" + name + ".json";
}
}  // namespace

TEST_CASE("Qwen2-1.5B with 41,318,436,454 available bytes gets 90,067 blocks", "[sim]") {
  const ModelConfig m = load_model_config_file(model_path("qwen2-1.5b"));
  const KVCacheSpec spec = m.kv_cache_spec(16, 1);
  CHECK(spec.num_layers == 28);
  CHECK(spec.num_kv_heads == 2);
  CHECK(spec.head_size == 128);
  CHECK(spec.page_bytes_per_layer() == 16'384);
  const KVCacheSizing s = size_kv_cache(spec, 41'318'436'454);
  CHECK(s.num_gpu_blocks == 90'067);
  CHECK(s.layer_tensor_bytes == 1'475'657'728);
}

TEST_CASE("opt-125m with 21,946,158,284 available bytes gets 37,207 blocks and 595,312 slots",
          "[sim]") {
  const ModelConfig m = load_model_config_file(model_path("opt-125m"));
  const KVCacheSpec spec = m.kv_cache_spec(16, 1);
  CHECK(spec.dtype_bytes == 2);
  CHECK(spec.page_bytes_per_layer() == 49'152);
  const KVCacheSizing s = size_kv_cache(spec, 21'946'158'284);
  CHECK(s.num_gpu_blocks == 37'207);
  CHECK(s.num_token_slots == 595'312);
}

TEST_CASE("a 4-layer model with 4 x 2,510,995,456 bytes gets 153,259 blocks", "[sim]") {
  KVCacheSpec spec{.block_size = 16,
                   .num_layers = 4,
                   .num_kv_heads = 2,
                   .head_size = 128,
                   .dtype_bytes = 2,
                   .mla = false};
  CHECK(num_gpu_blocks(spec, 4 * std::int64_t{2'510'995'456}) == 153'259);
  CHECK(num_gpu_blocks(spec, 0) == 0);
  CHECK(num_gpu_blocks(spec, -5) == 0);
}

TEST_CASE("bytes per token match Llama-3.1-8B, DeepSeek-V3 (MLA) and OPT-13B", "[sim]") {
  CHECK(load_model_config_file(model_path("llama-3.1-8b")).kv_cache_spec(16, 1).bytes_per_token() ==
        131'072);
  const ModelConfig ds = load_model_config_file(model_path("deepseek-v3"));
  CHECK(ds.mla);
  const KVCacheSpec ds_spec = ds.kv_cache_spec(16, 8);
  CHECK(ds_spec.num_kv_heads == 1);
  CHECK(ds_spec.head_size == 576);
  CHECK(ds_spec.bytes_per_token() == 70'272);
  const KVCacheSpec opt = load_model_config_file(model_path("opt-13b")).kv_cache_spec(16, 1);
  CHECK(opt.bytes_per_token() == 819'200);  // ~800 KB (PagedAttention, Table 1)
  const std::int64_t slots = (std::int64_t{12} << 30) / opt.bytes_per_token();
  CHECK(slots == 15'728);  // ~15.7K token slots in 12 GB
}

TEST_CASE("tensor parallelism divides KV heads and replicates them past the head count", "[sim]") {
  CHECK(kv_heads_per_rank(8, 1) == 8);
  CHECK(kv_heads_per_rank(8, 4) == 2);
  CHECK(kv_heads_per_rank(8, 16) == 1);
  CHECK(kv_heads_per_rank(2, 4) == 1);
  CHECK(kv_heads_per_rank(128, 8, true) == 1);
  const ModelConfig m = load_model_config_file(model_path("llama-3.1-70b"));
  CHECK(m.kv_cache_spec(16, 8).bytes_per_token() == 80 * 2 * 1 * 128 * 2);
}

TEST_CASE("the memory budget subtracts weights and reserve and refuses a model that does not fit",
          "[sim]") {
  const ModelConfig m = load_model_config_file(model_path("llama-3.1-8b"));
  HardwareConfig hw{gpu_preset("H100-80GB"), 1};
  CacheSizingConfig cache;
  const KVCachePlan plan = plan_kv_cache(m, hw, cache);
  CHECK(plan.budget.weight_bytes == m.num_parameters * 2);
  CHECK(plan.budget.available_kv_bytes ==
        plan.budget.usable_bytes - plan.budget.weight_bytes - kDefaultActivationReserveBytes);
  CHECK(plan.sizing.num_gpu_blocks == num_gpu_blocks(plan.spec, plan.budget.available_kv_bytes));

  const ModelConfig big = load_model_config_file(model_path("llama-3.1-70b"));
  CHECK_THROWS_WITH(plan_kv_cache(big, hw, cache),
                    Catch::Contains("model does not fit: needs") && Catch::Contains("GiB more"));
  hw.tensor_parallel_size = 4;
  CHECK(plan_kv_cache(big, hw, cache).sizing.num_gpu_blocks > 0);

  cache.num_gpu_blocks_override = 1000;
  CHECK(plan_kv_cache(m, hw, cache).sizing.num_gpu_blocks == 1000);
  cache.num_gpu_blocks_override.reset();
  cache.kv_cache_memory_bytes = 41'318'436'454;
  const ModelConfig qwen = load_model_config_file(model_path("qwen2-1.5b"));
  hw.tensor_parallel_size = 1;
  CHECK(plan_kv_cache(qwen, hw, cache).sizing.num_gpu_blocks == 90'067);
  hw.tensor_parallel_size = 4;  // 2 KV heads over 4 ranks: replicated, 1 head per rank
  CHECK(plan_kv_cache(qwen, hw, cache).sizing.num_gpu_blocks == 41'318'436'454 / 8'192 / 28);
}

TEST_CASE("an unknown GPU name suggests the closest preset", "[sim]") {
  CHECK_THROWS_WITH(gpu_preset("H100-80G"), Catch::Contains("did you mean 'H100-80GB'?"));
  CHECK(gpu_preset("A100-40GB").memory_bytes == std::int64_t{40960} << 20);
  CHECK(gpu_preset("h200-141gb").name == "H200-141GB");
  for (const auto& p : gpu_presets()) {
    CHECK(p.peak_flops_per_s > 0);
    CHECK(p.hbm_bytes_per_s > 0);
  }
}

TEST_CASE("kvsim kv-size prints the sizing as JSON and rejects a bad flag with status 2", "[sim]") {
  const std::string exe = kvsim::test::kvsim_exe();
  const kvsim::test::TempDir tmp("kv-size");
  const auto& dir = tmp.path;
  const std::string out = (dir / "out.json").string(), err = (dir / "err.txt").string();
  const std::string cmd = exe + " kv-size --model " + model_path("qwen2-1.5b") +
                          " --profile vllm-0.7.2 --kv-cache-memory-bytes 41318436454 --json > " +
                          out;
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  CHECK(j["num_gpu_blocks"] == 90'067);
  CHECK(j["page_bytes_per_layer"] == 16'384);
  CHECK(j["layer_tensor_bytes"] == 1'475'657'728);
  CHECK(j["bytes_per_token"] == 28 * 2 * 2 * 128 * 2);
  const int rc = std::system(
      (exe + " kv-size --model " + model_path("qwen2-1.5b") + " --blok-size 8 2> " + err).c_str());
  CHECK(WEXITSTATUS(rc) == 2);
  std::ifstream e(err);
  std::string line;
  std::getline(e, line);
  CHECK(line.find("unknown option '--blok-size' (did you mean '--block-size'?)") !=
        std::string::npos);
  const int rc2 = std::system(
      (exe + " kv-size --model " + model_path("llama-3.1-70b") + " --gpu A100-40GB 2> " + err)
          .c_str());
  CHECK(WEXITSTATUS(rc2) == 2);
}

TEST_CASE("a scenario whose max_model_len cannot fit is refused as vLLM refuses to start",
          "[sim]") {
  const std::string text =
      "engine: {profile: vllm-0.7.2}\nmodel: {config: " + model_path("llama-3.1-8b") +
      "}\ncache: {kv_cache_memory_bytes: 4294967296}\n"
      "scheduler: {max_model_len: 65536}\n"
      "workload: {num_requests: 1, prompt_tokens: 8, output_tokens: 2}\n";
  CHECK(kvsim::test::error_of([&] { (void)parse_scenario(YAML::Load(text), "s.yaml"); }) ==
        "s.yaml: vLLM v0.7.2 refuses to start: ValueError: To serve at least one request with the "
        "models's max seq len (65536), (8.00 GB KV cache is needed, which is larger than the "
        "available KV cache memory (4.00 GB). Try increasing `gpu_memory_utilization` or "
        "decreasing `max_model_len` when initializing the engine.");
  // 32,768 tokens need exactly the 4 GiB: it fits, with the same pool as before.
  YAML::Node root = YAML::Load(text);
  root["scheduler"]["max_model_len"] = 32768;
  const Scenario s = parse_scenario(root, "s.yaml");
  CHECK(s.num_gpu_blocks == 4294967296 / 65'536 / 32);
  REQUIRE(s.plan);
  REQUIRE(s.plan->layout);
  CHECK(s.plan->layout->num_blocks == s.num_gpu_blocks);
}

TEST_CASE("the hybrid scenario parses, with every layer full it gets 9,632 blocks",
          "[sim]") {
  const std::string path =
      std::string(KVSIM_SOURCE_DIR) + "/scenarios/gpt-oss-120b-long-chat.yaml";
  const Scenario s = load_scenario(path, {"engine.profile=vllm-0.7.2"});
  CHECK(s.num_gpu_blocks == 9632);
  CHECK(static_cast<double>(s.plan->budget.weight_bytes) / (1 << 30) ==
        Approx(60.69).epsilon(1e-3));
  // The vllm-0.20 rules on the same model, memory and request shape: twice the blocks.
  PoolRequest req;
  req.max_model_len = s.scheduler.max_model_len;
  const KVCachePlan hybrid =
      plan_kv_pool(*s.model, s.hardware, s.cache.sizing, req, KVSizingRules::kV020Hybrid);
  CHECK(hybrid.layout->num_blocks == 19'265);
  CHECK(hybrid.layout->groups.size() == 2);
  CHECK(hybrid.layout->groups[0].max_blocks_per_request == 521);
}
