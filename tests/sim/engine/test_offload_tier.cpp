// The CPU tier in timed runs (cache.kv_offloading_*, sim/engine/offload_tier.h): its size as
// vLLM v0.20.1 computes it, the settings it refuses (one line at the key, exit 2), the transfer
// clock of the worker's jobs, the outputs it adds, and the vLLM defects a run ends on. The
// acceptance cases (tests/cases/timed-vllm-0.20.1-offload) are run by test_timed_cases.cpp.

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "core/offload/offload_worker.h"
#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::read_csv;
using kvsim::test::read_json;
using kvsim::test::scenario_error;

namespace {

const std::string kTinyModel =
    "model: {name: tiny, model_type: llama, num_hidden_layers: 2, num_attention_heads: 4, "
    "num_key_value_heads: 2, head_dim: 64, hidden_size: 256, intermediate_size: 512, "
    "vocab_size: 32000, max_position_embeddings: 16384, torch_dtype: bfloat16}\n";

/// A timed vllm-0.20 scenario on the tiny model (16 KiB per GPU block of 16 tokens) with `cache`
/// and `extra` lines: multi-turn chats whose histories outgrow a 200-block pool.
std::string scenario(const std::string& cache, const std::string& extra = "") {
  return "name: t\nseed: 3\nengine: {profile: vllm-0.20, mode: timed}\n" + kTinyModel +
         "hardware: {gpu: H100, host_link_bytes_per_s: 32000000000, host_link_latency_us: 10}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 200, " +
         cache +
         "}\n"
         "scheduler: {max_num_seqs: 16, max_num_batched_tokens: 1024, max_model_len: 4096, "
         "async_scheduling: false}\n"
         "workload:\n"
         "  num_requests: 60\n"
         "  arrival: {process: poisson, rate_per_s: 40}\n"
         "  system_prompts: {count: 6, tokens: 800}\n"
         "  prompt_tokens: 300\n"
         "  output_tokens: 20\n"
         "latency: {model: constant, step_time_us: 2000}\n" +
         extra;
}

}  // namespace

TEST_CASE("the CPU tier holds int(GiB * 2^30) // (KV bytes per block * workers * factor) blocks",
          "[sim][offload]") {
  // The tiny model's GPU block: 2 (K, V) x 2 layers x 2 heads x 64 x 16 tokens x 2 bytes.
  const Scenario s = parse_text(scenario("kv_offloading_size: 0.03"));
  REQUIRE(s.offload);
  CHECK(s.offload->page_bytes == 16384);
  CHECK(s.offload->num_cpu_blocks == 32212254 / 16384);  // 1966
  CHECK(s.offload->block_size_factor == 1);
  // Offloaded blocks of 32 tokens: two GPU blocks each.
  const Scenario f2 =
      parse_text(scenario("kv_offloading_size: 0.03, kv_offloading_block_size: 32"));
  CHECK(f2.offload->block_size_factor == 2);
  CHECK(f2.offload->num_cpu_blocks == 32212254 / 32768);  // 983
  // Two GPUs: each holds one head (8 KiB per block), and the tier's budget covers both workers.
  const Scenario tp2 =
      parse_text(scenario("kv_offloading_size: 0.03"), {"hardware.tensor_parallel_size=2"});
  CHECK(tp2.offload->page_bytes == 8192);
  CHECK(tp2.offload->num_cpu_blocks == 32212254 / (8192 * 2));
  // A tier in tokens (no model needed): capacity / offloaded block size.
  const Scenario tok =
      parse_text(scenario("kv_offloading_capacity_tokens: 1600, "
                          "kv_offloading_block_size: 32"));
  CHECK(tok.offload->num_cpu_blocks == 50);
  // A budget under one block: a tier of 0 blocks (every store then fails), as vLLM sizes it.
  CHECK(parse_text(scenario("kv_offloading_size: 0.00001")).offload->num_cpu_blocks == 0);
  // The connector turns vLLM's hybrid KV cache manager off; no tier, no offload plan.
  CHECK(s.cache.kv_offloading->eviction_policy == EvictionPolicy::kLru);
  CHECK_FALSE(parse_text(scenario("enable_prefix_caching: true")).offload);
  // config.resolved.yaml keeps the tier's keys (and only a tier's scenario has them).
  const std::string resolved = resolved_yaml(f2);
  CHECK(resolved.find("kv_offloading_block_size: 32") != std::string::npos);
  CHECK(resolved.find("host_link_latency_us: 10") != std::string::npos);
  CHECK(resolved_yaml(parse_text(scenario("enable_prefix_caching: true"))).find("kv_offloading") ==
        std::string::npos);
  const Scenario again = parse_text(resolved);
  CHECK(again.offload->num_cpu_blocks == f2.offload->num_cpu_blocks);
  CHECK(again.hardware.host_link_latency_us == 10);
}

TEST_CASE("bad CPU tier settings are one positioned line", "[sim][offload]") {
  CHECK_THAT(scenario_error(scenario("kv_offloading_block_size: 32")),
             Catch::StartsWith("s.yaml:6:") &&
                 Catch::Contains("cache.kv_offloading_block_size: the CPU tier is off"));
  CHECK_THAT(scenario_error(scenario("kv_offloading_size: 0.1, kv_offloading_block_size: 24")),
             Catch::Contains("24 is not a multiple of cache.block_size 16"));
  CHECK_THAT(scenario_error(scenario("kv_offloading_size: 0.1, kv_offloading_backend: lmcache")),
             Catch::Contains("lmcache (LMCacheConnectorV1) is not modelled"));
  CHECK_THAT(scenario_error(scenario("kv_offloading_size: 0.1, kv_offloading_eviction_policy: "
                                     "lfu")),
             Catch::Contains("kv_offloading_eviction_policy"));
  CHECK_THAT(scenario_error(scenario("kv_offloading_size: 0")),
             Catch::Contains("cache.kv_offloading_size: must be > 0 GiB"));
  CHECK_THAT(scenario_error(scenario("kv_offloading_size: 1, kv_offloading_capacity_tokens: 8")),
             Catch::Contains("not both"));
  // vLLM v0.20.1 refuses the connector with the hybrid KV cache manager on, and says the fix.
  const std::string hma =
      scenario_error(scenario("kv_offloading_size: 0.1, disable_hybrid_kv_cache_manager: false"));
  CHECK_THAT(hma, Catch::StartsWith("s.yaml:6:") &&
                      Catch::Contains("Connector OffloadingConnector does not support HMA") &&
                      Catch::Contains("cache.disable_hybrid_kv_cache_manager: true"));
  CHECK(scenario_error(scenario("kv_offloading_size: 0.1, disable_hybrid_kv_cache_manager: true"))
            .empty());
  // The release and the loop the tier is modelled for.
  CHECK_THAT(scenario_error(scenario("kv_offloading_size: 0.1"),
                            {"engine.profile=vllm-0.7.2", "scheduler.async_scheduling=null"}),
             Catch::Contains("vllm-0.20 only, not vllm-0.7.2"));
  CHECK_THAT(
      scenario_error(scenario("kv_offloading_size: 0.1"), {"scheduler.async_scheduling=true"}),
      Catch::Contains("scheduler.async_scheduling: a timed run with the CPU tier needs "
                      "scheduler.async_scheduling: false"));
  CHECK_THAT(
      scenario_error(scenario("kv_offloading_size: 0.1"), {"hardware.host_link_latency_us=-1"}),
      Catch::Contains("host_link_latency_us"));
}

TEST_CASE("the worker's jobs end on the caller's clock: FIFO per channel, flushes wait",
          "[sim][offload]") {
  Request a(0, std::vector<Token>(64, 1), SamplingLimits{}, {}, 0);
  Request b(1, std::vector<Token>(64, 2), SamplingLimits{}, {}, 0);
  OffloadWorker w;
  OffloadTransfer ta, tb;
  ta.request = &a;
  ta.gpu_block_ids = {1, 2, 3};
  tb.request = &b;
  tb.gpu_block_ids = {4};
  const std::vector<OffloadTransfer> stores = {ta, tb};
  w.prepare_stores(stores);  // deferred: not submitted, not timed
  w.set_end_times([](const OffloadWorker::Job&) { return std::int64_t{1}; });
  CHECK(w.in_flight()[0].end_ns == -1);
  w.submit_deferred();
  std::int64_t channel_free = 100;  // a store channel: 10 ns per block, one after another
  w.set_end_times([&](const OffloadWorker::Job& j) {
    channel_free += 10 * static_cast<std::int64_t>(j.gpu_block_ids.size());
    return channel_free;
  });
  CHECK(w.in_flight()[0].end_ns == 130);
  CHECK(w.in_flight()[1].end_ns == 140);
  Request* flush_b[] = {&b};
  CHECK(w.flush_end(flush_b) == 140);
  w.complete_ended_by(139);  // a's store only
  std::vector<Request*> sending, recving;
  const std::int64_t finished[] = {0, 1};
  w.get_finished(finished, sending, recving);
  REQUIRE(sending.size() == 1);  // a: all its stores done; b waits for its last one
  CHECK(sending[0] == &a);
  CHECK(w.waiting_for_store(b));
  w.complete_ended_by(140);
  w.get_finished({}, sending, recving);
  REQUIRE(sending.size() == 1);
  CHECK(sending[0] == &b);
  CHECK(w.in_flight().empty());
}

TEST_CASE("a timed run with a CPU tier hits it, and its outputs add up", "[sim][offload]") {
  kvsim::test::TempDir tmp("offload-tier-run");
  const RunResult off =
      run_scenario(parse_text(scenario("enable_prefix_caching: true")), tmp.path / "off");
  const RunResult on = run_scenario(parse_text(scenario("kv_offloading_size: 0.02",
                                                        "outputs: {steps_every: 1, "
                                                        "metrics_prom: true}\n")),
                                    tmp.path / "on");
  const nlohmann::json a = nlohmann::json::parse(off.summary_json);
  const nlohmann::json b = nlohmann::json::parse(on.summary_json);
  CHECK(a.at("completed") == 60);
  CHECK(b.at("completed") == 60);
  CHECK_FALSE(a.contains("kv_offload"));
  const nlohmann::json& t = b.at("kv_offload");
  CHECK(t.at("num_cpu_blocks") == 21474836 / 16384);
  // The shared prefixes outgrow the 200-block pool: the tier gives some of them back.
  CHECK(t.at("cpu_hit_tokens").get<std::int64_t>() > 0);
  CHECK(t.at("load_jobs").get<std::int64_t>() > 0);
  CHECK(t.at("bytes_cpu_to_gpu") == t.at("load_gpu_blocks").get<std::int64_t>() * 16384);
  CHECK(t.at("store_gpu_blocks").get<std::int64_t>() > 0);
  // Every finished request that stored was reported, so none holds GPU blocks at the end.
  CHECK(b.at("first_lookup_hit_rate").get<double>() > a.at("first_lookup_hit_rate").get<double>());
  // steps.csv's tier columns (counters since the previous row) add up to the summary's totals.
  const auto rows = read_csv(on.folder / "steps.csv");
  REQUIRE(rows.size() > 2);
  const auto col = [&](const char* name) {
    for (std::size_t i = 0; i < rows[0].size(); ++i)
      if (rows[0][i] == name) return i;
    FAIL("no column " << name);
    return std::size_t{0};
  };
  std::int64_t loaded = 0, stored = 0, up = 0, down = 0, hits = 0;
  for (std::size_t r = 1; r < rows.size(); ++r) {
    loaded += std::stoll(rows[r][col("cpu_tier_loaded_blocks")]);
    stored += std::stoll(rows[r][col("cpu_tier_stored_blocks")]);
    up += std::stoll(rows[r][col("bytes_gpu_to_cpu")]);
    down += std::stoll(rows[r][col("bytes_cpu_to_gpu")]);
    hits += std::stoll(rows[r][col("cpu_tier_hit_tokens")]);
  }
  CHECK(loaded == t.at("load_gpu_blocks"));
  CHECK(stored == t.at("store_gpu_blocks"));
  CHECK(up == t.at("bytes_gpu_to_cpu"));
  CHECK(down == t.at("bytes_cpu_to_gpu"));
  CHECK(hits == t.at("cpu_hit_tokens"));
  CHECK(std::stoll(rows.back()[col("cpu_tier_blocks_used")]) == t.at("cpu_blocks_used_at_end"));
  const std::string prom = kvsim::test::slurp(on.folder / "metrics.prom");
  CHECK(prom.find("vllm:external_prefix_cache_hits_total{model_name=\"tiny\"} " +
                  std::to_string(t.at("cpu_hit_tokens").get<std::int64_t>())) != std::string::npos);
  CHECK(prom.find("vllm:kv_offload_total_bytes_total{model_name=\"tiny\",transfer_type=\"GPU_to_"
                  "CPU\"} ") != std::string::npos);
  // The same scenario and seed give the same bytes.
  const RunResult again = run_scenario(parse_text(scenario("kv_offloading_size: 0.02",
                                                           "outputs: {steps_every: 1, "
                                                           "metrics_prom: true}\n")),
                                       tmp.path / "again");
  CHECK(kvsim::test::slurp(again.folder / "steps.csv") ==
        kvsim::test::slurp(on.folder / "steps.csv"));
  CHECK(again.summary_json == on.summary_json);
}

TEST_CASE("a sliding window with offloaded blocks of two GPU blocks ends on vLLM's assertion",
          "[sim][offload]") {
  // vLLM v0.20.1 defect (semantics §9.2): a request whose GPU prefix hit reaches beyond the
  // window (of one block) starts with null blocks; a hit key the small tier no longer holds is
  // stored again, its null block skipped in the block list but counted in group_sizes, and
  // GPULoadStoreSpec asserts inside schedule().
  std::string text = scenario("kv_offloading_size: 0.001, kv_offloading_block_size: 32");
  text.replace(text.find("torch_dtype"), 0, "sliding_window: 16, ");
  const Scenario s = parse_text(text);
  kvsim::test::TempDir tmp("offload-window");
  try {
    (void)run_scenario(s, tmp.path);
    FAIL("the run did not end on vLLM's assertion");
  } catch (const RunError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("the engine raised out of schedule()") &&
                   Catch::Contains("AssertionError: sum(group_sizes) == len(block_ids)") &&
                   Catch::Contains("kv_offloading_block_size equal to cache.block_size"));
  }
  // With offloaded blocks of one GPU block the same run completes.
  std::string ok = scenario("kv_offloading_size: 0.001");
  ok.replace(ok.find("torch_dtype"), 0, "sliding_window: 16, ");
  const RunResult r = run_scenario(parse_text(ok), tmp.path / "ok");
  CHECK(nlohmann::json::parse(r.summary_json).at("completed") == 60);
}

TEST_CASE("loaded requests that block their own head end the run on vLLM's livelock",
          "[sim][offload]") {
  // vLLM v0.20.1 defect (semantics §9.3). Three 480-token prefixes are stored in the tier, two
  // long prompts evict them from the 100-block GPU pool, then three requests with those prefixes
  // arrive at once: each loads its 30 blocks from the tier, and the head of the waiting loop
  // then needs 33 blocks for the rest of its prompt beside the 90 the loads hold. Nothing runs,
  // nothing frees a block, and vLLM's engine polls forever: kvsim ends the run with that line.
  kvsim::test::TempDir tmp("offload-livelock");
  kvsim::test::write_file(
      tmp.path / "trace.jsonl",
      "{\"arrival_s\":0.0,\"prompt_tokens\":500,\"output_tokens\":2,\"prefix_group\":1,"
      "\"prefix_tokens\":480}\n"
      "{\"arrival_s\":0.1,\"prompt_tokens\":500,\"output_tokens\":2,\"prefix_group\":2,"
      "\"prefix_tokens\":480}\n"
      "{\"arrival_s\":0.2,\"prompt_tokens\":500,\"output_tokens\":2,\"prefix_group\":3,"
      "\"prefix_tokens\":480}\n"
      "{\"arrival_s\":0.3,\"prompt_tokens\":1400,\"output_tokens\":2}\n"
      "{\"arrival_s\":0.4,\"prompt_tokens\":1400,\"output_tokens\":2}\n"
      "{\"arrival_s\":1.0,\"prompt_tokens\":1000,\"output_tokens\":40,\"prefix_group\":1,"
      "\"prefix_tokens\":480}\n"
      "{\"arrival_s\":1.0,\"prompt_tokens\":1000,\"output_tokens\":40,\"prefix_group\":2,"
      "\"prefix_tokens\":480}\n"
      "{\"arrival_s\":1.0,\"prompt_tokens\":1000,\"output_tokens\":40,\"prefix_group\":3,"
      "\"prefix_tokens\":480}\n");
  const std::string text =
      "name: ll\nseed: 1\nengine: {profile: vllm-0.20, mode: timed}\n" + kTinyModel +
      "hardware: {gpu: H100, host_link_bytes_per_s: 32000000000}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 100, kv_offloading_size: 0.02}\n"
      "scheduler: {max_num_seqs: 16, max_num_batched_tokens: 2048, max_model_len: 1600, "
      "async_scheduling: false, scheduler_reserve_full_isl: false}\n"
      "workload:\n  trace: {format: jsonl, path: " +
      (tmp.path / "trace.jsonl").string() + "}\nlatency: {model: constant, step_time_us: 2000}\n";
  try {
    (void)run_scenario(parse_text(text), tmp.path / "out");
    FAIL("the run did not end on the livelock");
  } catch (const RunError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("step 10 at 1.002000 s: no step can make progress: "
                                           "request 5 ") &&
                             Catch::Contains("the 2 requests behind it that loaded from the CPU "
                                             "tier") &&
                             Catch::Contains("vLLM v0.20.1's livelock of loaded requests"));
  }
  // vLLM v0.20's default, a request admitted only when its whole sequence fits, never gets
  // there: the three load and run one after another.
  const RunResult r = run_scenario(parse_text(text, {"scheduler.scheduler_reserve_full_isl=true"}),
                                   tmp.path / "full-isl");
  const auto rows = read_csv(r.folder / "requests.csv");
  REQUIRE(rows.size() == 9);
  for (std::size_t i = 6; i < 9; ++i) {
    INFO(rows[i][0]);
    CHECK(rows[i][11] == "480");  // first_lookup_hit_tokens: the prefix, loaded from the tier
    CHECK(rows[i][13] == "length");
  }
  const nlohmann::json s = nlohmann::json::parse(r.summary_json);
  CHECK(s.at("kv_offload").at("load_jobs") == 3);
  CHECK(s.at("kv_offload").at("load_gpu_blocks") == 90);
  CHECK(s.at("kv_offload").at("finished_recving") == 3);
}
