// kvsim kv-size: the KV cache a model gets on a GPU, sized by a vLLM release's rules (--profile):
// groups, page size, blocks, tokens, concurrency, and vLLM's start-up refusal when one
// max_model_len request does not fit.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "core/common/kv_pool_sizing.h"
#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/config/hardware.h"
#include "sim/config/kv_sizing_io.h"
#include "sim/config/layer_specs.h"
#include "sim/config/mamba_cache.h"
#include "sim/config/model_config.h"
#include "sim/config/scenario_sections.h"

namespace kvsim::cli {

namespace {

constexpr const char* kAbout =
    "The KV cache a model gets on a GPU, sized by a vLLM release's rules. CONFIG is a Hugging Face "
    "config.json, a YAML file with a model: section, or the name of a config shipped in "
    "scenarios/models/ (llama-3.1-8b, gpt-oss-120b, gemma-3-27b-it, ...). --gpu takes a count "
    "(H100x8: the model split over 8 GPUs, as --tensor-parallel-size 8). --profile picks the "
    "release (default vllm-0.20: sliding-window, chunked-local and mamba layers in KV cache groups "
    "sharing one pool; vllm-0.7.2 and vllm-0.8.5: every layer full attention in one pool). vLLM "
    "refuses to start when one max_model_len request (default: the model's derived maximum) does "
    "not fit; kv-size then prints vLLM's error and exits 2. With --json-lines (vllm-0.20) it "
    "reads sizing questions on stdin (the acceptance cases' .input.json objects, one per line) "
    "and writes one answer per line, vLLM's error included.";

constexpr std::string_view kOldKVDtypes[] = {"auto", "bfloat16", "float16", "float32",
                                             "fp8",  "fp8_e4m3", "fp8_e5m2"};
constexpr std::string_view kV020KVDtypes[] = {"auto",
                                              "bfloat16",
                                              "float16",
                                              "fp8",
                                              "fp8_e4m3",
                                              "fp8_e5m2",
                                              "fp8_inc",
                                              "fp8_ds_mla",
                                              "int8_per_token_head",
                                              "fp8_per_token_head",
                                              "nvfp4"};

std::int64_t parse_max_model_len(const std::string& text, const CommandLine& cl) {
  try {
    return as_int(YAML::Node(text), YamlContext{"command line", "--max-model-len"}, 1,
                  std::int64_t{1} << 34);
  } catch (const ConfigError&) {
    throw cl.error(fmt::format("--max-model-len: expected an integer in [1, {}] or auto, got '{}'",
                               std::int64_t{1} << 34, text));
  }
}

ModelConfig load_model_arg(const std::string& arg) {
  namespace fs = std::filesystem;
  std::string path = arg;
  std::error_code ec;
  if (!fs::exists(path, ec) && arg.find('/') == std::string::npos) {
    const fs::path shipped =
        fs::path(KVSIM_PLOTS_DIR) / ".." / "scenarios" / "models" / (arg + ".json");
    if (fs::exists(shipped, ec)) path = shipped.lexically_normal().string();
  }
  const std::string ext = fs::path(path).extension().string();
  if (ext == ".yaml" || ext == ".yml") {
    YAML::Node root = load_yaml_file(path);
    YAML::Node model = root.IsMap() && root["model"] ? root["model"] : root;
    return load_model_config(model,
                             YamlContext{path, root.IsMap() && root["model"] ? "model" : ""});
  }
  return load_model_config_file(path);
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / 1073741824.0);
}

// The acceptance-case interface: questions on stdin, one answer line each. All lines are read and
// checked first, so a malformed line writes nothing.
int run_json_lines(KVSizingRules rules) {
  std::vector<KVSizingCase> cases;
  std::string line;
  for (std::int64_t n = 1; std::getline(std::cin, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    cases.push_back(parse_kv_sizing_case(line, "stdin", n));
  }
  std::string out;
  for (const KVSizingCase& c : cases)
    out += kv_sizing_result_json(size_kv_pool(c.input, rules), c.id).dump() + "\n";
  std::fputs(out.c_str(), stdout);
  return 0;
}

std::string describe_layers(const std::vector<NamedLayerSpec>& layers) {
  std::vector<std::pair<std::string, int>> kinds;  // "sliding_window(128)" -> count
  for (const NamedLayerSpec& l : layers) {
    std::string k = spec_class_name(l.spec.kind);
    k = k.substr(0, k.find("Spec"));
    if (l.spec.sliding_window > 0) k += fmt::format("({})", l.spec.sliding_window);
    if (l.spec.attention_chunk_size > 0) k += fmt::format("({})", l.spec.attention_chunk_size);
    auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& p) { return p.first == k; });
    if (it == kinds.end())
      kinds.emplace_back(k, 1);
    else
      ++it->second;
  }
  std::string s;
  for (const auto& [k, n] : kinds) s += fmt::format("{}{} {}", s.empty() ? "" : " + ", n, k);
  return s;
}

}  // namespace

int kv_size(const Args& args) {
  std::string model_arg, gpu = std::string(kDefaultGpu), cache_dtype = "auto";
  CacheSizingConfig cache;
  HardwareConfig hw;
  bool json_out = false;
  std::string profile = profile_name(kDefaultProfile);
  std::optional<std::string> max_model_len_arg;
  std::int64_t max_num_batched_tokens = 0;
  std::string disable_hma_text;
  std::string prefix_caching_text, mamba_mode_text = "none";
  bool json_lines = false;
  CommandLine cl("kv-size", "--model CONFIG [options] | --json-lines", kAbout);
  // One flag per entry: name, value (target, range, metavar), help. clang-format would align the
  // chain's line comments across the whole table.
  // clang-format off
  cl.options()
      ("model", text(&model_arg, "CONFIG"), "the model's config (required)")
      ("gpu", text(&gpu, "NAME[xN]"),
       "GPU preset, with the count one engine spans (H100x8; default: H100-80GB, one GPU)")
      ("kv-cache-memory-bytes",
       integer(&cache.kv_cache_memory_bytes, 1, std::int64_t{1} << 60, "N"),
       "KV cache bytes per GPU, instead of the GPU's memory budget")
      ("block-size", integer(&cache.block_size, 1, 1 << 16, "B"), "tokens per block (default: 16)")
      ("tensor-parallel-size", integer(&hw.tensor_parallel_size, 1, 1024, "N"),
       "GPUs the model is split over (default: 1)")
      ("gpu-memory-utilization", number(&cache.gpu_memory_utilization, 1e-6, 1.0, "F"),
       "fraction of the GPU's memory vLLM may use (default: vllm-0.20 0.92, earlier 0.9)")
      ("num-gpu-blocks-override",
       integer(&cache.num_gpu_blocks_override, 1, std::int64_t{1} << 31, "N"),
       "the block count, instead of the computed one")
      ("activation-reserve-bytes",
       integer(&cache.activation_reserve_bytes, 0, std::int64_t{1} << 50, "N"),
       "bytes kept for activations (default: 2 GiB)")
      ("kv-cache-dtype", text(&cache_dtype, "DTYPE"),
       "auto (the model's dtype), bfloat16, float16, fp8, ... (the release's list)")
      ("json", flag(&json_out), "print the sizing as JSON")
      ("profile", text(&profile, "NAME"),
       "the release whose sizing rules apply: vllm-0.20 (default), vllm-0.8.5, vllm-0.7.2")
      ("max-model-len", text(&max_model_len_arg, "L|auto"),
       "the longest request (default: the model's derived maximum; auto: the longest that fits, "
       "vllm-0.20)")
      ("max-num-batched-tokens", integer(&max_num_batched_tokens, 1, std::int64_t{1} << 34, "M"),
       "the scheduler's token budget (default: vllm serve's; 8192 on an H100 or H200)")
      ("disable-hybrid-kv-cache-manager",
       po::value<std::string>(&disable_hma_text)->implicit_value("true")->value_name("B"),
       "one pool of every layer as full attention (vllm-0.20; =false: the default hybrid pool)")
      ("enable-prefix-caching",
       po::value<std::string>(&prefix_caching_text)->implicit_value("true")->value_name("B"),
       "prefix caching (vllm-0.20's default: on, off for a model with mamba layers)")
      ("mamba-cache-mode", text(&mamba_mode_text, "MODE"),
       "none (default), align or all; vllm-0.20 chooses all or align with prefix caching on")
      ("json-lines", flag(&json_lines), "answer sizing questions from stdin, one per line");
  // clang-format on
  if (!cl.parse(args)) return 0;
  const bool gpu_given = cl.given("gpu"), util_given = cl.given("gpu-memory-utilization");
  std::optional<bool> disable_hma;
  if (cl.given("disable-hybrid-kv-cache-manager")) {
    if (disable_hma_text != "true" && disable_hma_text != "false")
      throw cl.error(fmt::format(
          "--disable-hybrid-kv-cache-manager: expected true or false, got '{}'", disable_hma_text));
    disable_hma = disable_hma_text == "true";
  }
  std::optional<bool> prefix_caching;
  if (cl.given("enable-prefix-caching")) {
    if (prefix_caching_text != "true" && prefix_caching_text != "false")
      throw cl.error(fmt::format("--enable-prefix-caching: expected true or false, got '{}'",
                                 prefix_caching_text));
    prefix_caching = prefix_caching_text == "true";
  }
  const std::optional<MambaCacheMode> mamba_mode = parse_mamba_cache_mode(mamba_mode_text);
  if (!mamba_mode)
    throw cl.error(
        fmt::format("--mamba-cache-mode: expected none, align or all, got '{}'", mamba_mode_text));
  std::vector<std::string> model_flags;  // flags that make no sense with --json-lines
  for (const std::string& f : cl.flag_names())
    if (f != "--json-lines" && f != "--profile" && cl.given(f.substr(2))) model_flags.push_back(f);
  const auto rules = kv_sizing_rules_for_profile(profile);
  if (!rules)
    throw cl.error(fmt::format("--profile: unknown profile '{}' (known: {})", profile,
                               kv_sizing_profile_names()));
  if (json_lines) {
    if (*rules != KVSizingRules::kV020Hybrid)
      throw ConfigError(
          "kv-size: --json-lines answers in vLLM v0.20.1's format: give --profile "
          "vllm-0.20");
    if (!model_flags.empty())
      throw ConfigError(
          fmt::format("kv-size: --json-lines reads every input from stdin; {} does "
                      "not apply",
                      model_flags.front()));
    return run_json_lines(*rules);
  }
  const bool v020 = *rules == KVSizingRules::kV020Hybrid;
  if (model_arg.empty()) throw cl.error("--model CONFIG is required");
  if (gpu_given && cache.kv_cache_memory_bytes)
    throw ConfigError("kv-size: give --gpu or --kv-cache-memory-bytes, not both");
  const std::span<const std::string_view> dtypes =
      v020 ? std::span<const std::string_view>(kV020KVDtypes)
           : std::span<const std::string_view>(kOldKVDtypes);
  if (std::find(dtypes.begin(), dtypes.end(), cache_dtype) == dtypes.end())
    throw ConfigError(fmt::format("kv-size: --kv-cache-dtype: unknown dtype '{}' for {}{}",
                                  cache_dtype, profile, suggestion_suffix(cache_dtype, dtypes)));
  if (!v020 && (disable_hma || (max_model_len_arg && *max_model_len_arg == "auto")))
    throw ConfigError(
        fmt::format("kv-size: {} needs --profile vllm-0.20",
                    disable_hma ? "--disable-hybrid-kv-cache-manager" : "--max-model-len auto"));
  cache.cache_dtype = cache_dtype;
  GpuWithCount gpus;
  try {
    gpus = parse_gpu_with_count(gpu);
  } catch (const ConfigError& e) {
    throw cl.error(fmt::format("--gpu: {}", e.what()));
  }
  hw.gpu = gpus.gpu;
  if (gpus.count) {
    if (cl.given("tensor-parallel-size") && hw.tensor_parallel_size != *gpus.count)
      throw cl.error(fmt::format("--tensor-parallel-size: {} but --gpu {} says {} GPUs; give the "
                                 "count once",
                                 hw.tensor_parallel_size, gpu, *gpus.count));
    hw.tensor_parallel_size = *gpus.count;
  }
  // What `vllm serve` leaves to the release and the GPU.
  const ServeDefaults defaults = serve_defaults(*find_profile(profile), hw.gpu);
  if (!util_given) cache.gpu_memory_utilization = defaults.gpu_memory_utilization;
  if (!cl.given("max-num-batched-tokens")) max_num_batched_tokens = defaults.max_num_batched_tokens;
  const ModelConfig model = load_model_arg(model_arg);
  PoolRequest request;
  request.max_model_len = model.derived_max_model_len;
  if (max_model_len_arg && *max_model_len_arg == "auto") {
    request.auto_fit_max_model_len = true;
  } else if (max_model_len_arg) {
    request.max_model_len = parse_max_model_len(*max_model_len_arg, cl);
    if (request.max_model_len > model.derived_max_model_len)
      throw ConfigError(fmt::format(
          "kv-size: --max-model-len: User-specified max_model_len ({}) is greater than the "
          "derived max_model_len ({}) of {}",
          request.max_model_len, model.derived_max_model_len, model.name));
  }
  request.max_num_batched_tokens = max_num_batched_tokens;
  request.disable_hybrid_kv_cache_manager = disable_hma;
  request.enable_prefix_caching = prefix_caching;
  request.mamba_cache_mode = *mamba_mode;
  const KVCachePlan plan = plan_kv_pool(model, hw, cache, request, *rules, model_arg);
  const KVPoolLayout& L = *plan.layout;
  const bool mamba = has_mamba_layers(model);
  const MambaCacheMode mode = L.limits.mamba_cache_mode;
  if (const auto bad =
          check_mamba_align(mode, {L.engine_block_size, max_num_batched_tokens, 0, true, mamba}))
    throw cl.error(
        fmt::format("--max-num-batched-tokens: vLLM {} refuses mamba_cache_mode 'align': {}",
                    kv_sizing_release(*rules), bad->message));
  const MemoryBudget& b = plan.budget;
  const KVCacheSpec& s = plan.spec;
  const KVCacheSizing& z = plan.sizing;

  if (json_out) {
    if (v020) {
      KVSizingResult r{plan.layout, std::nullopt, plan.log};
      nlohmann::ordered_json j = kv_sizing_result_json(r, std::nullopt);
      if (mamba) j["mamba_cache_mode"] = mamba_cache_mode_name(mode);
      if (!cache.kv_cache_memory_bytes)
        j["memory_budget"] = {{"gpu", hw.gpu.name},
                              {"tensor_parallel_size", hw.tensor_parallel_size},
                              {"gpu_memory_utilization", cache.gpu_memory_utilization},
                              {"usable_bytes", b.usable_bytes},
                              {"weight_bytes_per_gpu", b.weight_bytes},
                              {"activation_reserve_bytes", b.activation_reserve_bytes},
                              {"available_kv_bytes", b.available_kv_bytes}};
      std::fputs((j.dump(2) + "\n").c_str(), stdout);
      return 0;
    }
    nlohmann::ordered_json j;
    j["model"] = model.name;
    j["num_layers"] = s.num_layers;
    j["num_kv_heads_per_rank"] = s.num_kv_heads;
    j["head_size"] = s.head_size;
    j["dtype_bytes"] = s.dtype_bytes;
    j["mla"] = s.mla;
    j["block_size"] = s.block_size;
    j["tensor_parallel_size"] = hw.tensor_parallel_size;
    j["gpu"] = cache.kv_cache_memory_bytes ? nlohmann::ordered_json(nullptr)
                                           : nlohmann::ordered_json(hw.gpu.name);
    j["num_parameters"] = model.num_parameters;
    j["num_parameters_estimated"] = model.num_parameters_estimated;
    j["weight_bytes_per_gpu"] = b.weight_bytes;
    j["activation_reserve_bytes"] = b.activation_reserve_bytes;
    j["available_kv_bytes"] = b.available_kv_bytes;
    j["page_bytes_per_layer"] = z.page_bytes_per_layer;
    j["bytes_per_token"] = z.bytes_per_token;
    j["num_gpu_blocks"] = z.num_gpu_blocks;
    j["num_token_slots"] = z.num_token_slots;
    j["layer_tensor_bytes"] = z.layer_tensor_bytes;
    j["total_kv_bytes"] = z.total_kv_bytes;
    j["profile"] = profile;
    j["max_model_len"] = L.max_model_len;
    j["max_num_batched_tokens"] = max_num_batched_tokens;
    j["max_memory_usage_bytes_per_request"] = L.max_memory_usage_bytes_per_request;
    j["max_concurrency"] = L.max_concurrency;
    j["gpu_kv_cache_tokens"] = L.gpu_kv_cache_tokens;
    j["log"] = plan.log;
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
    return 0;
  }
  std::string out;
  out += fmt::format(
      "model                {} ({}{} layers, {} KV head{} x {} per rank, {} B/elem{})\n",
      model.name, model.model_type.empty() ? "" : model.model_type + ", ", plan.layers.size(),
      s.num_kv_heads, s.num_kv_heads == 1 ? "" : "s", s.head_size, s.dtype_bytes,
      s.mla ? ", MLA" : "");
  out += fmt::format("layers               {}\n", describe_layers(plan.layers));
  out += fmt::format(
      "parameters           {} ({})\n", with_thousands(model.num_parameters),
      model.num_parameters_estimated ? "estimated from the architecture" : "from config");
  out += fmt::format("weights              {} B ({}, {})\n", with_thousands(model.weight_bytes()),
                     gib(model.weight_bytes()), model.weights.method);
  if (cache.kv_cache_memory_bytes) {
    out += fmt::format("kv_cache_memory      {} B ({})\n",
                       with_thousands(*cache.kv_cache_memory_bytes),
                       gib(*cache.kv_cache_memory_bytes));
  } else {
    out += fmt::format("gpu                  {} x{}: {} total, {} usable at {}\n", hw.gpu.name,
                       hw.tensor_parallel_size, gib(b.total_bytes), gib(b.usable_bytes),
                       cache.gpu_memory_utilization);
    out += fmt::format("weights per gpu      {} B ({})\n", with_thousands(b.weight_bytes),
                       gib(b.weight_bytes));
    out += fmt::format("activation reserve   {} B ({})\n",
                       with_thousands(b.activation_reserve_bytes), gib(b.activation_reserve_bytes));
    out += fmt::format("available for KV     {} B ({})\n", with_thousands(b.available_kv_bytes),
                       gib(b.available_kv_bytes));
  }
  if (!v020) {
    out += fmt::format("page bytes per layer {} (block_size {})\n",
                       with_thousands(z.page_bytes_per_layer), s.block_size);
    out += fmt::format("bytes per token      {}\n", with_thousands(z.bytes_per_token));
    out += fmt::format("num_gpu_blocks       {}\n", with_thousands(z.num_gpu_blocks));
    out += fmt::format("token slots          {}\n", with_thousands(z.num_token_slots));
    out += fmt::format("layer tensor bytes   {} x {} layers = {} ({})\n",
                       with_thousands(z.layer_tensor_bytes), plan.layers.size(),
                       with_thousands(z.total_kv_bytes), gib(z.total_kv_bytes));
  } else {
    out += fmt::format(
        "KV cache groups      {} sharing one block pool, up to {} layers each "
        "(group_size)\n",
        L.groups.size(), L.group_size);
    for (std::size_t i = 0; i < L.groups.size(); ++i) {
      const KVCacheGroup& g = L.groups[i];
      std::string what =
          spec_class_name(g.uniform_type_layers.empty() ? g.spec.kind : KVSpecKind::kFull);
      if (!g.uniform_type_layers.empty()) what = "UniformTypeKVCacheSpecs";
      if (g.spec.sliding_window > 0) what += fmt::format(" window {}", g.spec.sliding_window);
      if (g.spec.attention_chunk_size > 0)
        what += fmt::format(" chunk {}", g.spec.attention_chunk_size);
      out += fmt::format(
          "  group {:<2}           {}: {} layers, block_size {}, page {} B, at "
          "most {} blocks per request\n",
          i, what, g.layer_names.size(), g.spec.block_size, with_thousands(g.page_size_bytes),
          with_thousands(g.max_blocks_per_request));
    }
    std::int64_t total = 0;
    for (const KVCacheTensor& t : L.tensors) total += t.size_bytes;
    out += fmt::format("num_gpu_blocks       {} (block 0 is the null block)\n",
                       with_thousands(L.num_blocks));
    out += fmt::format("tensors              {} x {} B = {} B ({})\n", L.tensors.size(),
                       with_thousands(L.tensors.empty() ? 0 : L.tensors.front().size_bytes),
                       with_thousands(total), gib(total));
  }
  if (mamba)
    out += fmt::format(
        "mamba_cache_mode     {} (prefix caching {})\n", mamba_cache_mode_name(mode),
        choose_mamba_cache_mode(model, request, *rules).enable_prefix_caching ? "on" : "off");
  out += fmt::format("max_model_len        {} (max_num_batched_tokens {})\n",
                     with_thousands(L.max_model_len), with_thousands(max_num_batched_tokens));
  out += fmt::format("one request needs    {} B ({})\n",
                     with_thousands(L.max_memory_usage_bytes_per_request),
                     gib(L.max_memory_usage_bytes_per_request));
  for (const std::string& line : plan.log)
    out += fmt::format("vLLM {}: {}\n", kv_sizing_release(*rules), line);
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace kvsim::cli
