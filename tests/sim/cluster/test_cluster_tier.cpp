// A cluster whose replicas each have a CPU tier (cache.kv_offloading_*): each replica's
// steps.csv carries its tier's columns, and the cluster's summary.json kv_offload is the sum of
// the replicas' (their steps' columns add up to it), the lookups of the replicas' empty steps
// included in the cluster's prefix-cache queries.

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
namespace fs = std::filesystem;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::TempDir;

TEST_CASE("a cluster's CPU tiers add up: replicas' tier columns, the cluster's kv_offload",
          "[sim][offload]") {
  const std::string text =
      "name: t\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\n"
      "model: {name: tiny, model_type: llama, num_hidden_layers: 2, num_attention_heads: 4, "
      "num_key_value_heads: 2, head_dim: 64, hidden_size: 256, intermediate_size: 512, "
      "vocab_size: 32000, max_position_embeddings: 16384, torch_dtype: bfloat16}\n"
      "hardware: {gpu: H100, host_link_bytes_per_s: 32000000000, host_link_latency_us: 10}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 200, kv_offloading_capacity_tokens: "
      "20000}\n"
      "scheduler: {max_num_seqs: 16, max_num_batched_tokens: 1024, max_model_len: 4096, "
      "async_scheduling: false}\n"
      "workload: {num_requests: 120, arrival: {process: poisson, rate_per_s: 80},\n"
      "  system_prompts: {count: 6, tokens: 800}, prompt_tokens: 300, output_tokens: 20}\n"
      "latency: {model: constant, step_time_us: 2000}\n"
      "outputs: {steps_every: 1}\n"
      "cluster: {replicas: 2, router: {policy: round_robin}}\n";
  TempDir tmp("cluster-tier");
  const fs::path out = run_scenario(parse_text(text), tmp.path / "c").folder;
  const nlohmann::json s = read_json(out / "summary.json");
  REQUIRE(s.contains("kv_offload"));
  const nlohmann::json& t = s["kv_offload"];
  const auto header = read_csv(out / "steps.csv")[0];
  std::int64_t stored = 0, to_cpu = 0, to_gpu = 0, queries = 0;
  for (const char* r : {"0", "1"}) {
    const auto steps = read_csv(out / "replicas" / r / "steps.csv");
    REQUIRE(steps[0] == header);  // the cluster-wide header: the tier's columns too
    const auto col = [&](const std::string& name) {
      for (std::size_t c = 0; c < steps[0].size(); ++c)
        if (steps[0][c] == name) return c;
      FAIL("no column " << name);
      return std::size_t{0};
    };
    for (std::size_t i = 1; i < steps.size(); ++i) {
      stored += std::stoll(steps[i][col("cpu_tier_stored_blocks")]);
      to_cpu += std::stoll(steps[i][col("bytes_gpu_to_cpu")]);
      to_gpu += std::stoll(steps[i][col("bytes_cpu_to_gpu")]);
    }
  }
  for (const nlohmann::json& rep : s["replicas"])
    queries += rep["prefix_cache_queries"].get<std::int64_t>();
  CHECK(stored > 0);
  CHECK(to_gpu > 0);  // the tier served hits back
  CHECK(t["store_gpu_blocks"].get<std::int64_t>() == stored);
  CHECK(t["bytes_gpu_to_cpu"].get<std::int64_t>() == to_cpu);
  CHECK(t["bytes_cpu_to_gpu"].get<std::int64_t>() == to_gpu);
  CHECK(t["num_cpu_blocks"].get<std::int64_t>() == 2 * 20000 / 16);  // a tier per replica
  CHECK(s["empty_steps"].get<std::int64_t>() > 0);  // their lookups count (vLLM's stats)
  CHECK(s["prefix_cache_queries"].get<std::int64_t>() == queries);
}
