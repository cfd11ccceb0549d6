// Mamba prefix-caching modes chosen as vLLM v0.20.1 chooses them (sim/config/mamba_cache.h): the
// choice for every combination of prefix caching, --mamba-cache-mode, speculative decoding and a
// model that does or does not support mamba prefix caching; the three settings vLLM refuses with
// 'align'; and what the choice does to a scenario of Qwen3-Next (prefix caching off by default,
// 'align' when on) and to a model whose architecture supports 'all': block sizes and
// num_gpu_blocks against vLLM's formulas worked by hand, config.resolved.yaml, the engine's KV
// cache groups, a run, and `kvsim kv-size`.

#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/common/engine_config.h"
#include "core/engine_factory.h"
#include "sim/config/mamba_cache.h"
#include "sim/config/scenario.h"
#include "sim/run/run_scenario.h"
#include "sim_test_util.h"

using namespace kvsim;
using kvsim::test::parse_text;
using kvsim::test::scenario_error;
using kvsim::test::TempDir;
namespace fs = std::filesystem;

namespace {

const std::string kQwen3Next =
    std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen3-next-80b-a3b.json";
constexpr std::int64_t k20GiB = std::int64_t{20} << 30;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Qwen3-Next-80B-A3B on one GPU, by hand from its config.json: a full-attention token is K and V
// of 2 KV heads of 256 in bf16; a gated-delta-net state is the conv state (kernel 4 - 1, conv dim
// 2 * 16 * 128 + 32 * 128) plus the recurrent state (32 value heads, 128 x 128), in bf16.
constexpr std::int64_t kAttnTokenBytes = 2 * 2 * 256 * 2;  // 2,048
constexpr std::int64_t kStateBytes = (3 * (2 * 16 * 128 + 32 * 128) + 32 * 128 * 128) * 2;
constexpr std::int64_t kGroupSize = 12;  // 36 GDN layers in 3 groups of 12, 12 full-attention

/// A Qwen3-Next scenario of the vllm-0.20 profile with 20 GiB of KV cache on one GPU, `cache`
/// and `scheduler` added to its sections (YAML flow-mapping bodies).
std::string scenario(const std::string& cache = "", const std::string& scheduler = "",
                     const std::string& model = "") {
  return "name: m\n"
         "engine: {profile: vllm-0.20}\n"
         "model: {config: " +
         kQwen3Next + (model.empty() ? "" : ", " + model) +
         "}\n"
         "cache: {kv_cache_memory_bytes: " +
         std::to_string(k20GiB) + (cache.empty() ? "" : ", " + cache) +
         "}\n"
         "scheduler: {max_model_len: 32768, max_num_batched_tokens: 8192" +
         (scheduler.empty() ? "" : ", " + scheduler) +
         "}\n"
         "workload: {num_requests: 4, prompt_tokens: 100, output_tokens: 4}\n";
}

const KVCacheGroup* group_of(const Scenario& s, KVSpecKind kind) {
  for (const KVCacheGroup& g : s.plan->layout->groups)
    if (g.spec.kind == kind) return &g;
  return nullptr;
}

YAML::Node resolved(const Scenario& s) { return YAML::Load(resolved_yaml(s)); }

MambaCacheChoice choose(bool supports, std::optional<bool> prefix, MambaCacheMode mode,
                        bool spec = false) {
  MambaModelFacts f;
  f.has_mamba_layers = true;
  f.supports_mamba_prefix_caching = supports;
  f.architecture = supports ? "JambaForCausalLM" : "Qwen3NextForCausalLM";
  return choose_mamba_cache_mode(f, MambaCacheRequest{prefix, mode, spec});
}

}  // namespace

TEST_CASE("the architectures whose vLLM class declares SupportsMambaPrefixCaching", "[sim]") {
  for (const char* a : {"JambaForCausalLM", "NemotronHForCausalLM", "BambaForCausalLM",
                        "FalconH1ForCausalLM", "GraniteMoeHybridForCausalLM", "Zamba2ForCausalLM",
                        "MambaForCausalLM", "Mamba2ForCausalLM", "FalconMambaForCausalLM"}) {
    INFO(a);
    CHECK(supports_mamba_prefix_caching(a));
  }
  for (const char* a : {"Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                        "KimiLinearForCausalLM", "Lfm2ForCausalLM", "LlamaForCausalLM", ""}) {
    INFO(a);
    CHECK_FALSE(supports_mamba_prefix_caching(a));
  }
  const ModelConfig m = load_model_config_file(kQwen3Next);
  CHECK(m.architecture() == "Qwen3NextForCausalLM");
  CHECK_FALSE(m.supports_mamba_prefix_caching());
  CHECK(has_mamba_layers(m));
  CHECK_FALSE(has_mamba_layers(
      load_model_config_file(std::string(KVSIM_SOURCE_DIR) + "/scenarios/models/qwen3-8b.json")));
}

TEST_CASE("vLLM v0.20.1's choice of mamba cache mode (MambaModelConfig)", "[sim]") {
  using M = MambaCacheMode;
  // Prefix caching: off by default for a model with mamba layers; then always 'none'.
  MambaCacheChoice c = choose(true, std::nullopt, M::kNone);
  CHECK_FALSE(c.enable_prefix_caching);
  CHECK(c.mode == M::kNone);
  CHECK(c.log.empty());
  c = choose(false, false, M::kAlign);
  CHECK(c.mode == M::kNone);
  REQUIRE(c.log.size() == 1);
  CHECK(c.log[0] == "warning: Mamba cache mode is set to 'none' when prefix caching is disabled");
  // On, mode left at 'none': 'all' where the class supports it, else 'align'.
  c = choose(true, true, M::kNone);
  CHECK(c.enable_prefix_caching);
  CHECK(c.mode == M::kAll);
  REQUIRE(c.log.size() == 2);
  CHECK(c.log[0] ==
        "warning: Mamba cache mode is set to 'all' for JambaForCausalLM by default when prefix "
        "caching is enabled");
  CHECK(c.log[1].starts_with("info: Warning: Prefix caching in Mamba cache 'all' mode"));
  c = choose(false, true, M::kNone);
  CHECK(c.mode == M::kAlign);
  CHECK(c.log[0] ==
        "warning: Mamba cache mode is set to 'align' for Qwen3NextForCausalLM by default when "
        "prefix caching is enabled");
  // Speculative decoding: 'align' for a supporting model; an unsupported one gets 'align' anyway.
  c = choose(true, true, M::kNone, true);
  CHECK(c.mode == M::kAlign);
  CHECK(c.log[0].find("when prefix caching and speculative decoding are enabled") !=
        std::string::npos);
  c = choose(false, true, M::kNone, true);
  CHECK(c.mode == M::kAlign);
  CHECK(c.log[0].find("speculative") == std::string::npos);
  // Asked for: kept, except 'all' without support, which falls back to 'align'.
  CHECK(choose(true, true, M::kAll).mode == M::kAll);
  CHECK(choose(true, true, M::kAlign).mode == M::kAlign);
  CHECK(choose(true, true, M::kAlign, true).log.size() == 1);  // no default chosen
  c = choose(false, true, M::kAll);
  CHECK(c.mode == M::kAlign);
  CHECK(c.log[0].find("falling back to 'align' mode") != std::string::npos);
  // A model without mamba layers: prefix caching on by default, the mode untouched, no log.
  MambaModelFacts dense;
  c = choose_mamba_cache_mode(dense, MambaCacheRequest{std::nullopt, M::kAlign, false});
  CHECK(c.enable_prefix_caching);
  CHECK(c.mode == M::kAlign);
  CHECK(c.log.empty());
}

TEST_CASE("vLLM v0.20.1 refuses three settings with mamba cache mode 'align'", "[sim]") {
  MambaAlignLimits ok{544, 544, 0, true};
  CHECK_FALSE(check_mamba_align(MambaCacheMode::kAlign, ok));  // block == budget is allowed
  MambaAlignLimits l = ok;
  l.enable_chunked_prefill = false;
  auto bad = check_mamba_align(MambaCacheMode::kAlign, l);
  REQUIRE(bad);
  CHECK(bad->key == "enable_chunked_prefill");
  CHECK(bad->message.starts_with(
      "AssertionError: Chunked prefill is required for mamba cache mode 'align'."));
  CHECK_FALSE(check_mamba_align(MambaCacheMode::kAll, l));  // only 'align' is checked
  CHECK_FALSE(check_mamba_align(MambaCacheMode::kNone, l));
  l = ok;
  l.max_num_batched_tokens = 543;
  bad = check_mamba_align(MambaCacheMode::kAlign, l);
  REQUIRE(bad);
  CHECK(bad->key == "max_num_batched_tokens");
  CHECK(
      bad->message.starts_with("AssertionError: In Mamba cache align mode, block_size (544) "
                               "must be <= max_num_batched_tokens (543)."));
  l = ok;
  l.long_prefill_token_threshold = 543;
  bad = check_mamba_align(MambaCacheMode::kAlign, l);
  REQUIRE(bad);
  CHECK(bad->key == "long_prefill_token_threshold");
  CHECK(bad->message.find("(543) must be >= block_size (544)") != std::string::npos);
  l.long_prefill_token_threshold = 544;
  CHECK_FALSE(check_mamba_align(MambaCacheMode::kAlign, l));
  l = ok;  // without mamba layers only the block-size checks apply (validate_block_size)
  l.enable_chunked_prefill = false;
  l.has_mamba_layers = false;
  CHECK_FALSE(check_mamba_align(MambaCacheMode::kAlign, l));
  l.max_num_batched_tokens = 543;
  CHECK(check_mamba_align(MambaCacheMode::kAlign, l)->key == "max_num_batched_tokens");
  // vLLM's order: chunked prefill (checked when the config is built) before the block size.
  l = ok;
  l.enable_chunked_prefill = false;
  l.max_num_batched_tokens = 1;
  CHECK(check_mamba_align(MambaCacheMode::kAlign, l)->key == "enable_chunked_prefill");
}

TEST_CASE("Qwen3-Next: prefix caching off by default and mamba mode 'none', as vLLM starts it",
          "[sim]") {
  const Scenario s = parse_text(scenario());
  CHECK_FALSE(s.cache.enable_prefix_caching);
  CHECK(s.cache.mamba_cache_mode == MambaCacheMode::kNone);
  // vLLM: attention block 16 * ceil_div(state, 16 * token) = 544; a mamba block of max_model_len.
  const std::int64_t bs = 16 * ceil_div(kStateBytes, 16 * kAttnTokenBytes);
  CHECK(bs == 544);
  CHECK(group_of(s, KVSpecKind::kFull)->spec.block_size == bs);
  CHECK(group_of(s, KVSpecKind::kMamba)->spec.block_size == 32768);
  CHECK(s.num_gpu_blocks == k20GiB / (bs * kAttnTokenBytes) / kGroupSize);
  CHECK(s.num_gpu_blocks == 1606);
  const YAML::Node r = resolved(s);
  CHECK(r["cache"]["enable_prefix_caching"].as<bool>() == false);
  CHECK(r["cache"]["mamba_cache_mode"].as<std::string>() == "none");
  CHECK(r["model"]["architectures"][0].as<std::string>() == "Qwen3NextForCausalLM");
  const KVCacheConfig c = s.kv_cache_config();
  CHECK_FALSE(c.enable_caching);
  for (const KVGroupSpec& g : c.kv_cache_groups)
    if (g.kind == KVGroupKind::kMamba) CHECK(g.mamba_cache_mode == MambaGroupMode::kNone);
  // Asking for 'align' without prefix caching: vLLM sets it back to 'none'.
  CHECK(parse_text(scenario("mamba_cache_mode: align")).cache.mamba_cache_mode ==
        MambaCacheMode::kNone);
}

TEST_CASE("Qwen3-Next with prefix caching: mode 'align', mamba blocks of the attention block",
          "[sim]") {
  for (const char* mode : {"", "mamba_cache_mode: all", "mamba_cache_mode: align"}) {
    // 'all' is not supported by Qwen3NextForCausalLM: vLLM falls back to 'align'.
    INFO("asked: " << mode);
    const std::string cache = std::string("enable_prefix_caching: true") +
                              (*mode != '\0' ? std::string(", ") + mode : "");
    const Scenario s = parse_text(scenario(cache));
    CHECK(s.cache.enable_prefix_caching);
    CHECK(s.cache.mamba_cache_mode == MambaCacheMode::kAlign);
    const std::int64_t bs = 544;
    CHECK(group_of(s, KVSpecKind::kFull)->spec.block_size == bs);
    const KVCacheGroup* mamba = group_of(s, KVSpecKind::kMamba);
    CHECK(mamba->spec.block_size == bs);
    CHECK(mamba->page_size_bytes == bs * kAttnTokenBytes);  // the state padded to the page
    CHECK(mamba->max_blocks_per_request == 2);              // 'align': 2 (+ speculative)
    CHECK(s.num_gpu_blocks == k20GiB / (bs * kAttnTokenBytes) / kGroupSize);
    const KVPoolLayout& L = *s.plan->layout;
    CHECK(L.engine_block_size == bs);
    CHECK(L.hash_block_size == bs);
    // One request: ceil_div(32768, 544) full blocks + 2 per mamba group, in pages of 12 layers.
    CHECK(L.max_memory_usage_bytes_per_request ==
          (ceil_div(32768, bs) + 3 * 2) * kGroupSize * bs * kAttnTokenBytes);
    const YAML::Node r = resolved(s);
    CHECK(r["cache"]["mamba_cache_mode"].as<std::string>() == "align");
    CHECK(r["cache"]["enable_prefix_caching"].as<bool>() == true);
    const KVCacheConfig c = s.kv_cache_config();
    CHECK(c.enable_caching);
    CHECK(c.block_size == bs);
    int mamba_groups = 0;
    for (const KVGroupSpec& g : c.kv_cache_groups)
      if (g.kind == KVGroupKind::kMamba) {
        ++mamba_groups;
        CHECK(g.mamba_align());
        CHECK(g.block_size == bs);
      }
    CHECK(mamba_groups == 3);
    // The resolved file loads back to the same choice.
    const Scenario again = parse_scenario(r, "again.yaml");
    CHECK(again.cache.mamba_cache_mode == MambaCacheMode::kAlign);
    CHECK(again.num_gpu_blocks == s.num_gpu_blocks);
  }
}

TEST_CASE("a hybrid architecture that supports mamba prefix caching gets 'all', chunk-aligned",
          "[sim]") {
  // Qwen3-Next's layers under an architecture whose class declares SupportsMambaPrefixCaching:
  // vLLM picks 'all' and raises the attention block to a multiple of lcm(mamba chunk size, 16)
  // holding one state (platforms/interface.py:585-595); the mamba block is that size.
  const std::string nemotron = "architectures: [NemotronHForCausalLM]";
  const std::int64_t state_tokens = ceil_div(kStateBytes, kAttnTokenBytes);  // 536
  for (const auto& [chunk_field, chunk] : {std::pair<std::string, std::int64_t>{"", 2048},
                                           {", mamba_chunk_size: 256", 256},
                                           {", chunk_size: 128", 128}}) {
    INFO("chunk " << chunk);
    const Scenario s =
        parse_text(scenario("enable_prefix_caching: true", "", nemotron + chunk_field));
    CHECK(s.cache.mamba_cache_mode == MambaCacheMode::kAll);
    const std::int64_t bs = chunk * ceil_div(state_tokens, chunk);  // lcm(chunk, 16) = chunk
    CHECK(group_of(s, KVSpecKind::kFull)->spec.block_size == bs);
    const KVCacheGroup* mamba = group_of(s, KVSpecKind::kMamba);
    CHECK(mamba->spec.block_size == bs);
    CHECK(mamba->max_blocks_per_request == ceil_div(32768, bs));  // 'all': like full attention
    CHECK(s.num_gpu_blocks == k20GiB / (bs * kAttnTokenBytes) / kGroupSize);
    for (const KVGroupSpec& g : s.kv_cache_config().kv_cache_groups)
      if (g.kind == KVGroupKind::kMamba) CHECK(g.mamba_cache_mode == MambaGroupMode::kAll);
    CHECK(resolved(s)["cache"]["mamba_cache_mode"].as<std::string>() == "all");
  }
  CHECK(parse_text(scenario("enable_prefix_caching: true", "", nemotron)).num_gpu_blocks == 426);
  // Without prefix caching it is 'none' and the alignment of 'none' (block 544) again.
  const Scenario off = parse_text(scenario("", "", nemotron));
  CHECK(off.cache.mamba_cache_mode == MambaCacheMode::kNone);
  CHECK(group_of(off, KVSpecKind::kFull)->spec.block_size == 544);
  // --mamba-cache-mode align is kept for a supporting model.
  CHECK(parse_text(scenario("enable_prefix_caching: true, mamba_cache_mode: align", "", nemotron))
            .cache.mamba_cache_mode == MambaCacheMode::kAlign);
}

TEST_CASE("the three 'align' refusals are one line at the scheduler key, naming vLLM's rule",
          "[sim]") {
  const std::string on = "enable_prefix_caching: true";
  CHECK(scenario_error(scenario(on, "long_prefill_token_threshold: 0")).empty());
  std::string text = scenario(on);
  text.replace(text.find("max_num_batched_tokens: 8192"), 28, "max_num_batched_tokens: 512");
  std::string e = scenario_error(text);
  CHECK(e.starts_with("s.yaml:5:"));
  CHECK(e.find("scheduler.max_num_batched_tokens: vLLM v0.20.1 refuses mamba_cache_mode 'align' "
               "(Qwen3NextForCausalLM): AssertionError: In Mamba cache align mode, block_size "
               "(544) must be <= max_num_batched_tokens (512).") != std::string::npos);
  CHECK(e.find('\n') == std::string::npos);
  e = scenario_error(scenario(on, "long_prefill_token_threshold: 256"));
  CHECK(e.starts_with("s.yaml:5:"));
  CHECK(e.find("long_prefill_token_threshold (256) must be >= block_size (544)") !=
        std::string::npos);
  e = scenario_error(scenario(on, "enable_chunked_prefill: false"));
  CHECK(e.starts_with("s.yaml:5:"));
  CHECK(e.find("Chunked prefill is required for mamba cache mode 'align'") != std::string::npos);
  // Given by --set: the flag is named.
  const TempDir tmp("mamba-align-set");
  kvsim::test::write_file(tmp.path / "s.yaml", scenario(on));
  e = kvsim::test::error_of([&] {
    (void)load_scenario((tmp.path / "s.yaml").string(),
                        {"scheduler.long_prefill_token_threshold=100"});
  });
  CHECK(e.starts_with("--set scheduler.long_prefill_token_threshold=100: "));
  // A model without mamba layers keeps an asked 'align', and vLLM checks its block size too.
  const std::string dense = "engine: {profile: vllm-0.20}\nmodel: {config: " +
                            std::string(KVSIM_SOURCE_DIR) +
                            "/scenarios/models/qwen3-8b.json}\ncache: {block_size: 16, "
                            "num_gpu_blocks_override: 1000, mamba_cache_mode: align}\n"
                            "scheduler: {max_model_len: 4096, max_num_batched_tokens: 8}\n"
                            "workload: {num_requests: 1, prompt_tokens: 4, output_tokens: 1}\n";
  e = scenario_error(dense);
  CHECK(e.starts_with("s.yaml:4:"));
  CHECK(e.find("(Qwen3ForCausalLM): AssertionError: In Mamba cache align mode, block_size (16) "
               "must be <= max_num_batched_tokens (8).") != std::string::npos);
  // Not refused: prefix caching off ('none'), or a threshold of at least a block.
  CHECK(scenario_error(scenario("", "long_prefill_token_threshold: 256")).empty());
  CHECK(scenario_error(scenario(on, "long_prefill_token_threshold: 544")).empty());
}

TEST_CASE("Qwen3-Next in 'align' mode runs with prefix hits and the invariant walk", "[sim]") {
  const TempDir tmp("mamba-align-run");
  std::string yaml = scenario("enable_prefix_caching: true");
  yaml.replace(yaml.find("workload:"), std::string::npos,
               "workload: {num_requests: 12, arrival: {process: poisson, rate_per_s: 4}, "
               "system_prompts: {count: 1, tokens: 1700}, prompt_tokens: 200, "
               "output_tokens: 8}\n");
  const Scenario s = parse_text(yaml);
  RunOptions opt;
  opt.step_time = kvsim::test::constant_ms(20);
  opt.check_invariants = true;
  const RunResult r = run_scenario(s, tmp.path / "run", opt);
  const nlohmann::json summary = nlohmann::json::parse(r.summary_json);
  CHECK(summary["completed"].get<std::int64_t>() == 12);
  // 1,900-token prompts: at most 3 blocks of 544 from the shared prompt each.
  CHECK(summary["prefix_cache_hits"].get<std::int64_t>() > 0);
  CHECK(summary["prefix_cache_hits"].get<std::int64_t>() % 544 == 0);
}

namespace {

struct CliRun {
  int status = -1;
  std::string out, err;
};

CliRun kv_size(const std::string& args, const TempDir& tmp) {
  const fs::path out = tmp.path / "out", err = tmp.path / "err";
  const std::string cmd =
      kvsim::test::kvsim_exe() + " kv-size " + args + " > " + out.string() + " 2> " + err.string();
  const int rc = std::system(cmd.c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, kvsim::test::slurp(out), kvsim::test::slurp(err)};
}

}  // namespace

TEST_CASE("kv-size shows the chosen mamba mode and refuses align's block budget at the flag",
          "[sim]") {
  const TempDir tmp("kv-size-mamba");
  const std::string base = "--profile vllm-0.20 --model " + kQwen3Next +
                           " --kv-cache-memory-bytes " + std::to_string(k20GiB) +
                           " --max-model-len 32768 --max-num-batched-tokens 8192";
  CliRun r = kv_size(base + " --json", tmp);
  REQUIRE(r.status == 0);
  nlohmann::json j = nlohmann::json::parse(r.out);
  CHECK(j["mamba_cache_mode"] == "none");
  CHECK(j["num_blocks"] == 1606);
  r = kv_size(base + " --json --enable-prefix-caching", tmp);
  REQUIRE(r.status == 0);
  j = nlohmann::json::parse(r.out);
  CHECK(j["mamba_cache_mode"] == "align");
  CHECK(j["engine_block_size"] == 544);
  CHECK(j["hash_block_size"] == 544);
  CHECK(j["num_blocks"] == 1606);
  CHECK(j["log"][0] ==
        "warning: Mamba cache mode is set to 'align' for Qwen3NextForCausalLM by default when "
        "prefix caching is enabled");
  for (const auto& g : j["groups"]) CHECK(g["spec"]["block_size"] == 544);
  r = kv_size(base + " --enable-prefix-caching --mamba-cache-mode all", tmp);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("mamba_cache_mode     align (prefix caching on)\n") != std::string::npos);
  CHECK(r.out.find("falling back to 'align' mode") != std::string::npos);
  r = kv_size(base + " --enable-prefix-caching=false --mamba-cache-mode align", tmp);
  REQUIRE(r.status == 0);
  CHECK(r.out.find("mamba_cache_mode     none (prefix caching off)\n") != std::string::npos);
  r = kv_size(base + " --enable-prefix-caching --max-num-batched-tokens 512", tmp);
  CHECK(r.status == 2);
  CHECK(r.out.empty());
  CHECK(std::count(r.err.begin(), r.err.end(), '\n') == 1);
  CHECK(r.err.find("--max-num-batched-tokens: vLLM v0.20.1 refuses mamba_cache_mode 'align': "
                   "AssertionError: In Mamba cache align mode, block_size (544) must be <= "
                   "max_num_batched_tokens (512).") != std::string::npos);
  r = kv_size(base + " --mamba-cache-mode some", tmp);
  CHECK(r.status == 2);
  CHECK(r.err.find("--mamba-cache-mode: expected none, align or all, got 'some'") !=
        std::string::npos);
}
