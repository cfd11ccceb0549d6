// What a scenario gets when it names nothing: the release people deploy (vllm-0.20) with what
// `vllm serve` picks for it on the scenario's GPU (gpu_memory_utilization, max_num_seqs,
// max_num_batched_tokens); the older releases keep their own defaults. GPUs named as people write
// them (H100, H200, A100, a count as H100x8).

#include <catch2/catch.hpp>
#include <string>

#include "core/engine_factory.h"
#include "sim/config/hardware.h"
#include "sim/config/scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;

namespace {

const std::string kModels = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/";

std::string scenario(const std::string& engine, const std::string& hardware) {
  return "name: d\n" + engine + "model: {config: " + kModels +
         "llama-3.1-8b.json}\n"
         "hardware: " +
         hardware +
         "\n"
         "scheduler: {max_model_len: 8192}\n"
         "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";
}

}  // namespace

TEST_CASE("a scenario without engine.profile runs vllm-0.20 with v0.20.1's own defaults",
          "[sim]") {
  const Scenario s = parse_text(scenario("", "{gpu: H100}"));
  CHECK(s.engine.profile == Profile::kVllm020);
  CHECK(profile_name(kDefaultProfile) == std::string("vllm-0.20"));
  // v0.20.1: async scheduling and the full-sequence admission check on, 0.92 of the GPU, and
  // vllm serve's budget on a >= 70 GiB GPU that is not an A100.
  CHECK(s.scheduler.async_scheduling);
  CHECK(s.scheduler.scheduler_reserve_full_isl);
  CHECK(s.cache.sizing.gpu_memory_utilization == 0.92);
  CHECK(s.scheduler.max_num_seqs == 1024);
  CHECK(s.scheduler.max_num_batched_tokens == 8192);
  const std::string y = resolved_yaml(s);
  CHECK_THAT(y, Catch::Contains("profile: vllm-0.20"));
  CHECK_THAT(y, Catch::Contains("gpu_memory_utilization: 0.92"));
  CHECK_THAT(y, Catch::Contains("max_num_seqs: 1024"));
  // The pool is v0.20.1's: 0.92 of 81,559 MiB less weights and the 2 GiB reserve, in pages of
  // 32 layers x 16 tokens x 8 KV heads x 128 x 2 (K, V) x 2 bytes.
  const std::int64_t usable = static_cast<std::int64_t>(0.92 * (std::int64_t{81559} << 20));
  const std::int64_t avail = usable - s.model->weight_bytes() - (std::int64_t{2} << 30);
  CHECK(s.num_gpu_blocks == avail / (32 * 16 * 8 * 128 * 2 * 2));
}

TEST_CASE("vllm serve's defaults depend on the GPU and older releases keep theirs", "[sim]") {
  // A100 (any size) and GPUs under 70 GiB: 256 sequences, 2,048 tokens (arg_utils.py:2205-2227).
  for (const char* gpu : {"A100-80GB", "A100", "L40S"}) {
    INFO(gpu);
    const Scenario s = parse_text(scenario("", std::string("{gpu: ") + gpu + "}"));
    CHECK(s.scheduler.max_num_seqs == 256);
    CHECK(s.scheduler.max_num_batched_tokens == 2048);
    CHECK(s.cache.sizing.gpu_memory_utilization == 0.92);
  }
  const Scenario h200 = parse_text(scenario("", "{gpu: H200}"));
  CHECK(h200.scheduler.max_num_seqs == 1024);
  // An H100 whose memory is overridden below 70 GiB is a small GPU to vLLM.
  const Scenario small = parse_text(scenario("", "{gpu: H100, gpu_memory_bytes: 68719476736}"));
  CHECK(small.scheduler.max_num_batched_tokens == 2048);
  for (const char* profile : {"vllm-0.7.2", "vllm-0.8.5", "vllm-0.7.2-v0", "orca-oracle"}) {
    INFO(profile);
    const Scenario s = parse_text(
        scenario(std::string("engine: {profile: ") + profile + "}\n", "{gpu: H100}"));
    CHECK(s.cache.sizing.gpu_memory_utilization == 0.9);
    CHECK(s.scheduler.max_num_seqs == 256);
    CHECK(s.scheduler.max_num_batched_tokens == 8192);
    CHECK_FALSE(s.scheduler.async_scheduling);
  }
  // Given keys win over every default.
  const Scenario given = parse_text(scenario("", "{gpu: H100}"),
                                    {"scheduler.max_num_seqs=7", "cache.gpu_memory_utilization=0.5",
                                     "scheduler.async_scheduling=false"});
  CHECK(given.scheduler.max_num_seqs == 7);
  CHECK(given.cache.sizing.gpu_memory_utilization == 0.5);
  CHECK_FALSE(given.scheduler.async_scheduling);
}

TEST_CASE("GPUs are named as people name them, with a count", "[sim]") {
  CHECK(gpu_preset("H100").name == "H100-80GB");
  CHECK(gpu_preset("h100-sxm").name == "H100-80GB");
  CHECK(gpu_preset("H100 SXM5").name == "H100-80GB");
  CHECK(gpu_preset("h100_80gb").name == "H100-80GB");
  CHECK(gpu_preset("H100-PCIe").name == "H100-PCIe");
  CHECK(gpu_preset("H200").name == "H200-141GB");
  CHECK(gpu_preset("A100").name == "A100-40GB");
  CHECK(gpu_preset("A100-80GB").name == "A100-80GB");
  CHECK(gpu_preset("a100-sxm4-80gb").name == "A100-80GB");
  CHECK_THROWS_WITH(gpu_preset("H101"), Catch::Contains("unknown GPU 'H101'"));

  const auto count = [](const char* text) { return parse_gpu_with_count(text).count; };
  CHECK(count("H100") == std::nullopt);
  CHECK(count("H100x8") == 8);
  CHECK(count("8xH100") == 8);
  CHECK(count("H200:4") == 4);
  CHECK(count("A100-80GBx2") == 2);
  CHECK(count("L4x1") == 1);
  CHECK(parse_gpu_with_count("8xA100").gpu.name == "A100-40GB");
  CHECK(parse_gpu_with_count("H100-80GBx8").gpu.name == "H100-80GB");
  CHECK_THROWS_WITH(parse_gpu_with_count("H100x0"), Catch::Contains("outside [1, 1024]"));
  CHECK_THROWS_WITH(parse_gpu_with_count("H100x2048"), Catch::Contains("outside [1, 1024]"));
  CHECK_THROWS_WITH(parse_gpu_with_count("H10x8"), Catch::Contains("unknown GPU 'H10'"));

  // In a scenario the count is the tensor-parallel size; given twice it must agree.
  const Scenario tp = parse_text(scenario("", "{gpu: H100x2}"));
  CHECK(tp.hardware.tensor_parallel_size == 2);
  CHECK(tp.hardware.gpu.name == "H100-80GB");
  CHECK_THAT(resolved_yaml(tp), Catch::Contains("tensor_parallel_size: 2"));
  CHECK(parse_text(scenario("", "{gpu: H100x2, tensor_parallel_size: 2}"))
            .hardware.tensor_parallel_size == 2);
  CHECK(scenario_error(scenario("", "{gpu: H100x2, tensor_parallel_size: 4}")) ==
        "s.yaml:3:47: hardware.tensor_parallel_size: 4 but gpu 'H100x2' says 2 GPUs; give the "
        "count once");
  CHECK_THAT(scenario_error(scenario("", "{gpu: H100x0}")),
             Catch::StartsWith("s.yaml:3:17: hardware.gpu: GPU 'H100x0': the count 0 is outside"));
}
