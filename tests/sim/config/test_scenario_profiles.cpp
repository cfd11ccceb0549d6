// engine.profile and the settings only some releases have: vllm-0.8.5 parses and reaches the
// engine, scheduler.long_prefill_token_threshold (vllm-0.8.5 only; refused with file:line:col for
// vllm-0.7.2), a model's sliding_window reaching KVCacheConfig (and the window vLLM v0.8.5 cannot
// run), the resolved YAML, and a fuzz over these keys that builds the engine of every scenario
// that loads.

#include <catch2/catch.hpp>
#include <string>

#include "core/engine_factory.h"
#include "sim/common/rng.h"
#include "sim/config/scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;

namespace {

const std::string kModels = std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/";

std::string base(const std::string& profile, const std::string& model = "qwen2-1.5b") {
  return "name: p\n"
         "engine: {profile: " +
         profile +
         "}\n"
         "model: {config: " +
         kModels + model +
         ".json}\n"
         "hardware: {gpu: H100-80GB}\n"
         "cache: {block_size: 16, num_gpu_blocks_override: 500}\n"
         "scheduler: {max_num_seqs: 64, long_prefill_token_threshold: 0}\n"
         "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";
}

}  // namespace

TEST_CASE("engine.profile vllm-0.8.5 reaches the engine and the resolved YAML", "[sim]") {
  const Scenario s = parse_text(base("vllm-0.8.5"), {"scheduler.long_prefill_token_threshold=256"});
  CHECK(s.engine.profile == Profile::kVllm085);
  CHECK(s.scheduler.long_prefill_token_threshold == 256);
  const EngineParams p = s.engine_params();
  CHECK(p.profile == Profile::kVllm085);
  CHECK(p.scheduler.long_prefill_token_threshold == 256);
  CHECK(make_engine(p)->profile() == Profile::kVllm085);
  const std::string y = resolved_yaml(s);
  CHECK_THAT(y, Catch::Contains("profile: vllm-0.8.5"));
  CHECK_THAT(y, Catch::Contains("long_prefill_token_threshold: 256"));
  // Resolving is a fixed point.
  CHECK(resolved_yaml(parse_text(y)) == y);
  // 0 (vLLM's default: off) is written too, and every profile accepts it.
  const std::string y072 = resolved_yaml(parse_text(base("vllm-0.7.2")));
  CHECK_THAT(y072, Catch::Contains("long_prefill_token_threshold: 0"));
  CHECK(resolved_yaml(parse_text(y072)) == y072);
  CHECK_THAT(scenario_error(base("vllm-0.8.4")), Catch::Contains("did you mean 'vllm-0.8.5'"));
}

TEST_CASE("vllm-0.7.2 refuses long_prefill_token_threshold at its line and column", "[sim]") {
  const std::string e =
      scenario_error(base("vllm-0.7.2"), {"scheduler.long_prefill_token_threshold=8"});
  CHECK_THAT(e, Catch::Contains("scheduler.long_prefill_token_threshold"));
  CHECK_THAT(e, Catch::Contains("vllm-0.7.2 (vLLM's release) has no such setting"));
  const std::string text =
      "name: p\n"
      "model: {config: " +
      kModels +
      "qwen2-1.5b.json}\n"
      "cache: {num_gpu_blocks_override: 500}\n"
      "scheduler:\n"
      "  long_prefill_token_threshold: 64\n"
      "workload: {num_requests: 10, prompt_tokens: 100, output_tokens: 10}\n";
  // No profile: the default, vllm-0.20, has the setting. Its start-up check would refuse 500
  // blocks for the model's 131,072-token requests; a pool given by num_gpu_blocks_override is
  // taken as given, with that refusal as a warning. vllm-0.7.2 refuses the setting at its line
  // and column.
  CHECK_THAT(scenario_error(text), Catch::Equals(""));
  {
    const Scenario s = kvsim::test::parse_text(text);
    REQUIRE(s.plan);
    bool warned = false;
    for (const std::string& line : s.plan->log)
      warned = warned || line.find("warning: kvsim: vLLM v0.20.1 would refuse to start with this "
                                   "pool: ValueError: To serve at least one request") == 0;
    CHECK(warned);
    CHECK(s.num_gpu_blocks == 500);
  }
  // Sized from memory, the refusal stands (vLLM v0.20.1's own start-up).
  CHECK_THAT(scenario_error(text, {"cache.num_gpu_blocks_override=null",
                                   "cache.kv_cache_memory_bytes=100000000"}),
             Catch::Contains("vLLM v0.20.1 refuses to start"));
  CHECK_THAT(scenario_error(text, {"engine.profile=vllm-0.7.2"}), Catch::StartsWith("s.yaml:5:33:"));
  CHECK_THAT(scenario_error(text, {"engine.profile=vllm-0.8.5"}), Catch::Equals(""));
  CHECK_THAT(scenario_error(base("vllm-0.8.5"), {"scheduler.long_prefill_token_threshold=-1"}),
             Catch::Contains("long_prefill_token_threshold"));
  CHECK_THAT(scenario_error(base("vllm-0.8.5"), {"scheduler.long_prefil_token_threshold=1"}),
             Catch::Contains("did you mean 'long_prefill_token_threshold'"));
}

TEST_CASE("a model's sliding window reaches the KV cache config", "[sim]") {
  const Scenario m = parse_text(base("vllm-0.8.5", "mistral-7b"));
  CHECK(m.kv_cache_config().sliding_window == 4096);
  CHECK(parse_text(base("vllm-0.8.5")).kv_cache_config().sliding_window == 0);  // qwen2: off
  // A window no longer than a block: vLLM v0.8.5 would fail an assertion; v0.7.2 ignores it.
  const std::string tiny =
      "name: p\nengine: {profile: vllm-0.8.5}\n"
      "model: {num_hidden_layers: 2, num_attention_heads: 4, "
      "hidden_size: 256, vocab_size: 1000, sliding_window: 16}\n"
      "cache: {block_size: 16, num_gpu_blocks_override: 100}\n"
      "workload: {num_requests: 1, prompt_tokens: 10, output_tokens: 2}\n";
  CHECK_THAT(scenario_error(tiny), Catch::Contains("cache.block_size: 16 is not shorter than the "
                                                   "model's sliding_window (16)"));
  CHECK(scenario_error(tiny, {"cache.block_size=8"}).empty());
  CHECK(scenario_error(tiny, {"cache.enable_prefix_caching=false"}).empty());
  CHECK(scenario_error(tiny, {"engine.profile=vllm-0.7.2"}).empty());
}

TEST_CASE("random profile, threshold and window settings load or raise ConfigError", "[sim]") {
  const std::vector<std::pair<std::string, std::vector<std::string>>> axes = {
      {"engine.profile",
       {"vllm-0.7.2", "vllm-0.8.5", "vllm-0.20", "vllm-0.8", "''", "1", "vllm-0.7.2-v0"}},
      {"scheduler.long_prefill_token_threshold", {"0", "1", "16", "-3", "abc", "1e12"}},
      {"model.sliding_window", {"1", "15", "16", "17", "4096", "0", "-1", "~"}},
      {"cache.block_size", {"1", "16", "32", "0"}},
      {"cache.enable_prefix_caching", {"true", "false", "2"}},
      {"scheduler.max_num_batched_tokens", {"1", "64", "8192"}},
  };
  const std::string text =
      "name: p\n"
      "model: {num_hidden_layers: 2, num_attention_heads: 4, hidden_size: 256, vocab_size: "
      "1000}\n"
      "cache: {num_gpu_blocks_override: 64}\n"
      "scheduler: {max_model_len: 1024}\n"  // one such request fits the pool (v0.20 checks)
      "workload: {num_requests: 4, prompt_tokens: 40, output_tokens: 4}\n";
  // The keys of one release, each drawn one time in four (any other profile refuses most of their
  // values): vLLM v0.20's scheduler keys, and V0's.
  const std::vector<std::pair<std::string, std::vector<std::string>>> release_axes = {
      {"scheduler.async_scheduling", {"true", "false", "1", "yes"}},
      {"scheduler.scheduler_reserve_full_isl", {"true", "false", "~"}},
      {"scheduler.preemption_mode", {"swap", "recompute", "~", "swapp"}},
      {"scheduler.enable_chunked_prefill", {"true", "false", "~"}},
      {"scheduler.scheduling_policy", {"fcfs", "priority"}},
      {"cache.swap_space", {"4", "0", "0.25", "-1"}},
      {"workload.parallel_sampling", {"fanout", "fork"}},
      {"workload.n", {"1", "2", "0"}},
  };
  RngStream rng = make_stream(4242, "fuzz.profiles");
  int ok = 0, rejected = 0, v085 = 0, v020 = 0, v0 = 0;
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<std::string> sets;
    for (const auto& [key, values] : axes)
      if (rng() % 2) sets.push_back(key + "=" + values[rng() % values.size()]);
    for (const auto& [key, values] : release_axes)
      if (rng() % 4 == 0) sets.push_back(key + "=" + values[rng() % values.size()]);
    INFO("seed 4242 iteration " << iter << ": " << (sets.empty() ? "" : sets[0]));
    try {
      const Scenario s = parse_text(text, sets);
      // Whatever loads builds an engine without tripping an assertion.
      const auto engine = make_engine(s.engine_params());
      CHECK(engine->profile() == s.engine.profile);
      v085 += s.engine.profile == Profile::kVllm085;
      v020 += s.engine.profile == Profile::kVllm020;
      v0 += s.engine.profile == Profile::kVllm072V0;
      ++ok;
    } catch (const ConfigError&) {
      ++rejected;
    }
  }
  CHECK(ok > 50);
  CHECK(rejected > 50);
  CHECK(v085 > 10);
  CHECK(v020 > 5);
  CHECK(v0 > 5);
}

TEST_CASE("vllm-0.20's scheduler keys: on by default, refused by the older releases", "[sim]") {
  // (A pool of 500 blocks holds one request of 4096 tokens: vLLM v0.20's start-up check.)
  const std::string len = "scheduler.max_model_len=4096";
  const Scenario s = parse_text(base("vllm-0.20"), {len});
  CHECK(s.scheduler.async_scheduling);  // vLLM v0.20.1's engine defaults
  CHECK(s.scheduler.scheduler_reserve_full_isl);
  const std::string y = resolved_yaml(s);
  CHECK_THAT(y, Catch::Contains("async_scheduling: true"));
  CHECK_THAT(y, Catch::Contains("scheduler_reserve_full_isl: true"));
  CHECK(resolved_yaml(parse_text(y)) == y);
  const Scenario off = parse_text(
      base("vllm-0.20"),
      {len, "scheduler.async_scheduling=false", "scheduler.scheduler_reserve_full_isl=false"});
  CHECK_FALSE(off.engine_params().scheduler.async_scheduling);
  CHECK_FALSE(off.engine_params().scheduler.scheduler_reserve_full_isl);
  // The older releases have neither key: absent from their resolved YAML, refused at the key.
  for (const char* p : {"vllm-0.7.2", "vllm-0.8.5"}) {
    INFO(p);
    const std::string old = resolved_yaml(parse_text(base(p)));
    CHECK_THAT(old, !Catch::Contains("async_scheduling"));
    CHECK_THAT(old, !Catch::Contains("scheduler_reserve_full_isl"));
    for (const char* key : {"scheduler.async_scheduling", "scheduler.scheduler_reserve_full_isl"}) {
      const std::string e = scenario_error(base(p), {std::string(key) + "=false"});
      CHECK_THAT(e, Catch::Contains(std::string(key) + ": " + p + " (vLLM's release) has no such"));
    }
  }
  CHECK_THAT(scenario_error(base("vllm-0.20"), {len, "scheduler.async_scheduling=maybe"}),
             Catch::Contains("async_scheduling"));
  CHECK_THAT(scenario_error(base("vllm-0.20"), {len, "scheduler.async_schedulng=true"}),
             Catch::Contains("did you mean 'async_scheduling'"));
}

TEST_CASE("vllm-0.20 runs a hybrid model with one KV cache group per attention type", "[sim]") {
  // gpt-oss: alternating sliding-window (128) and full-attention layers, sliding window first.
  const std::string len = "scheduler.max_model_len=2048";
  const Scenario s = parse_text(base("vllm-0.20", "gpt-oss-20b"), {len});
  const KVCacheConfig c = s.kv_cache_config();
  REQUIRE(c.kv_cache_groups.size() == 2);
  CHECK(c.kv_cache_groups[0].kind == KVGroupKind::kSlidingWindow);
  CHECK(c.kv_cache_groups[0].sliding_window == 128);
  CHECK(c.kv_cache_groups[1].kind == KVGroupKind::kFullAttention);
  const auto engine = make_engine(s.engine_params());
  CHECK(engine->num_kv_cache_groups() == 2);
  // A one-type model keeps one group; the older releases manage one table whatever the model.
  CHECK(parse_text(base("vllm-0.20"), {len}).kv_cache_config().kv_cache_groups.size() == 1);
  CHECK(parse_text(base("vllm-0.8.5", "gpt-oss-20b")).kv_cache_config().kv_cache_groups.empty());
  CHECK(make_engine(parse_text(base("vllm-0.8.5", "gpt-oss-20b")).engine_params())
            ->num_kv_cache_groups() == 1);
}

TEST_CASE("a model mixing sliding-window and full layers is all full attention before v0.9",
          "[sim]") {
  // vLLM v0.8.5.post1's unify_hybrid_kv_cache_specs turns gpt-oss's sliding-window layers into
  // full attention (one KV cache type per pool); v0.20 gives them their own group; a window on
  // every layer (Mistral-7B v0.1) stays a window under v0.8.5.
  const std::vector<std::string> len = {"scheduler.max_model_len=2048"};
  CHECK(parse_text(base("vllm-0.8.5", "gpt-oss-20b"), len).kv_cache_config().sliding_window == 0);
  CHECK(parse_text(base("vllm-0.8.5", "gemma-3-27b-it"), len).kv_cache_config().sliding_window ==
        0);
  const KVCacheConfig hybrid = parse_text(base("vllm-0.20", "gpt-oss-20b"), len).kv_cache_config();
  REQUIRE(hybrid.kv_cache_groups.size() == 2);
  CHECK(hybrid.kv_cache_groups[0].sliding_window == 128);
  CHECK(parse_text(base("vllm-0.8.5", "mistral-7b"), len).kv_cache_config().sliding_window == 4096);
}
