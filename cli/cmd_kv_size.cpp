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
#include "sim/config/model_config.h"

namespace kvsim::cli {

namespace {

constexpr const char* kUsage =
    "usage: kvsim kv-size --model CONFIG [--gpu NAME | --kv-cache-memory-bytes N]\n"
    "                     [--block-size B] [--tensor-parallel-size N] [--gpu-memory-utilization "
    "F]\n"
    "                     [--num-gpu-blocks-override N] [--activation-reserve-bytes N]\n"
    "                     [--kv-cache-dtype auto|bfloat16|float16|float32|fp8|...] [--json]\n"
    "                     [--profile vllm-0.7.2|vllm-0.8.5|vllm-0.20] [--max-model-len L|auto]\n"
    "                     [--max-num-batched-tokens M] [--disable-hybrid-kv-cache-manager[=B]]\n"
    "       kvsim kv-size --profile vllm-0.20 --json-lines < QUESTIONS.jsonl\n"
    "\n"
    "CONFIG is a Hugging Face config.json, a YAML file with a model: section, or the name of a\n"
    "config shipped in scenarios/models/ (llama-3.1-8b, gpt-oss-120b, gemma-3-27b-it, ...).\n"
    "--profile picks the release whose sizing rules apply (default vllm-0.7.2: every layer full\n"
    "attention in one pool; vllm-0.20: sliding-window, chunked-local and mamba layers in KV cache\n"
    "groups sharing one pool). vLLM refuses to start when one max_model_len request (default: the\n"
    "model's derived maximum) does not fit; kv-size then prints vLLM's error and exits 2.\n"
    "--json-lines reads sizing questions (the acceptance cases' .input.json objects, one per "
    "line)\n"
    "and writes one answer per line, vLLM's error included.\n";

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

std::int64_t parse_int_flag(std::string_view flag, const std::string& v, std::int64_t min,
                            std::int64_t max = kIntMax) {
  YAML::Node n(v);
  try {
    return as_int(n, YamlContext{"command line", std::string(flag)}, min, max);
  } catch (const ConfigError&) {
    throw ConfigError(
        fmt::format("{}: expected an integer in [{}, {}], got '{}'", flag, min, max, v));
  }
}

double parse_double_flag(std::string_view flag, const std::string& v, double min, double max) {
  YAML::Node n(v);
  try {
    return as_double(n, YamlContext{"command line", std::string(flag)}, min, max);
  } catch (const ConfigError&) {
    throw ConfigError(
        fmt::format("{}: expected a number in [{}, {}], got '{}'", flag, min, max, v));
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
  bool json_out = false, gpu_given = false, util_given = false;
  // ---- flags of issue #19 (sizing by release; one block, to re-declare in an options
  // description): --profile, --max-model-len, --max-num-batched-tokens,
  // --disable-hybrid-kv-cache-manager[=true|false], --json-lines
  std::string profile = "vllm-0.7.2";
  std::optional<std::string> max_model_len_arg;
  std::int64_t max_num_batched_tokens = 8192;
  std::optional<bool> disable_hma;
  bool json_lines = false;
  // ---- end of the issue #19 flags
  static constexpr std::string_view kFlags[] = {"--model",
                                                "--gpu",
                                                "--kv-cache-memory-bytes",
                                                "--block-size",
                                                "--tensor-parallel-size",
                                                "--gpu-memory-utilization",
                                                "--num-gpu-blocks-override",
                                                "--activation-reserve-bytes",
                                                "--kv-cache-dtype",
                                                "--json",
                                                "--help",
                                                "--profile",
                                                "--max-model-len",
                                                "--max-num-batched-tokens",
                                                "--disable-hybrid-kv-cache-manager",
                                                "--json-lines"};
  ArgParser cli(args, "kv-size", kFlags);
  std::vector<std::string> model_flags;  // flags that make no sense with --json-lines
  while (cli.next()) {
    const std::string& flag = cli.arg();
    if (cli.is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (!cli.is("--json-lines") && !cli.is("--profile")) model_flags.push_back(flag);
    if (cli.is("--json"))
      json_out = true;
    else if (cli.is("--model"))
      model_arg = cli.value();
    else if (cli.is("--gpu"))
      gpu = cli.value(), gpu_given = true;
    else if (cli.is("--kv-cache-memory-bytes"))
      cache.kv_cache_memory_bytes = parse_int_flag(flag, cli.value(), 1, std::int64_t{1} << 60);
    else if (cli.is("--block-size"))
      cache.block_size = parse_int_flag(flag, cli.value(), 1, 1 << 16);
    else if (cli.is("--tensor-parallel-size"))
      hw.tensor_parallel_size = parse_int_flag(flag, cli.value(), 1, 1024);
    else if (cli.is("--gpu-memory-utilization"))
      cache.gpu_memory_utilization = parse_double_flag(flag, cli.value(), 1e-6, 1.0),
      util_given = true;
    else if (cli.is("--num-gpu-blocks-override"))
      cache.num_gpu_blocks_override = parse_int_flag(flag, cli.value(), 1, std::int64_t{1} << 31);
    else if (cli.is("--activation-reserve-bytes"))
      cache.activation_reserve_bytes = parse_int_flag(flag, cli.value(), 0, std::int64_t{1} << 50);
    else if (cli.is("--kv-cache-dtype"))
      cache_dtype = cli.value();
    // ---- issue #19 flags
    else if (cli.is("--profile"))
      profile = cli.value();
    else if (cli.is("--max-model-len"))
      max_model_len_arg = cli.value();
    else if (cli.is("--max-num-batched-tokens"))
      max_num_batched_tokens = parse_int_flag(flag, cli.value(), 1, std::int64_t{1} << 34);
    else if (cli.is("--disable-hybrid-kv-cache-manager")) {
      const std::string v = cli.inline_value().value_or("true");
      if (v != "true" && v != "false")
        throw ConfigError(fmt::format("{}: expected true or false, got '{}'", flag, v));
      disable_hma = v == "true";
    } else if (cli.is("--json-lines"))
      json_lines = true;
    // ---- end of the issue #19 flags
    else
      cli.unknown();
  }
  const auto rules = kv_sizing_rules_for_profile(profile);
  if (!rules)
    throw ConfigError(fmt::format("kv-size: --profile: unknown profile '{}' (known: {})", profile,
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
  if (model_arg.empty()) throw ConfigError("kv-size: --model CONFIG is required");
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
  if (v020 && !util_given) cache.gpu_memory_utilization = 0.92;  // vLLM v0.20's default
  cache.cache_dtype = cache_dtype;
  hw.gpu = gpu_preset(gpu);
  const ModelConfig model = load_model_arg(model_arg);
  PoolRequest request;
  request.max_model_len = model.derived_max_model_len;
  if (max_model_len_arg && *max_model_len_arg == "auto") {
    request.auto_fit_max_model_len = true;
  } else if (max_model_len_arg) {
    request.max_model_len =
        parse_int_flag("--max-model-len", *max_model_len_arg, 1, std::int64_t{1} << 34);
    if (request.max_model_len > model.derived_max_model_len)
      throw ConfigError(fmt::format(
          "kv-size: --max-model-len: User-specified max_model_len ({}) is greater than the "
          "derived max_model_len ({}) of {}",
          request.max_model_len, model.derived_max_model_len, model.name));
  }
  request.max_num_batched_tokens = max_num_batched_tokens;
  request.disable_hybrid_kv_cache_manager = disable_hma;
  const KVCachePlan plan = plan_kv_pool(model, hw, cache, request, *rules, model_arg);
  const KVPoolLayout& L = *plan.layout;
  const MemoryBudget& b = plan.budget;
  const KVCacheSpec& s = plan.spec;
  const KVCacheSizing& z = plan.sizing;

  if (json_out) {
    if (v020) {
      KVSizingResult r{plan.layout, std::nullopt, plan.log};
      nlohmann::ordered_json j = kv_sizing_result_json(r, std::nullopt);
      if (!cache.kv_cache_memory_bytes)
        j["memory_budget"] = {{"gpu", hw.gpu.name},
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
