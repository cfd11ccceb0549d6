// kvsim kv-size: the KV cache a model gets on a GPU, computed as vLLM V1 does.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/cli_args.h"
#include "cli/commands.h"
#include "sim/common/errors.h"
#include "sim/config/hardware.h"
#include "sim/config/model_config.h"
#include "sim/common/yaml_util.h"

namespace kvsim::cli {

namespace {

constexpr const char* kUsage =
    "usage: kvsim kv-size --model CONFIG [--gpu NAME | --kv-cache-memory-bytes N]\n"
    "                     [--block-size B] [--tensor-parallel-size N] [--gpu-memory-utilization "
    "F]\n"
    "                     [--num-gpu-blocks-override N] [--activation-reserve-bytes N]\n"
    "                     [--kv-cache-dtype auto|bfloat16|float16|float32|fp8] [--json]\n"
    "\n"
    "CONFIG is a Hugging Face config.json, a YAML file with a model: section, or the name of a\n"
    "config shipped in scenarios/models/ (llama-3.1-8b, qwen2-1.5b, deepseek-v3, ...).\n";

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

std::string with_commas(std::int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3)
    s.insert(static_cast<std::size_t>(i), ",");
  return v < 0 ? "-" + s : s;
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / 1073741824.0);
}

}  // namespace

int kv_size(const Args& args) {
  std::string model_arg, gpu = std::string(kDefaultGpu), cache_dtype = "auto";
  CacheSizingConfig cache;
  HardwareConfig hw;
  bool json_out = false, gpu_given = false;
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
                                                "--help"};
  ArgParser cli(args, "kv-size", kFlags);
  while (cli.next()) {
    const std::string& flag = cli.arg();
    if (cli.is("--help", "-h")) {
      std::fputs(kUsage, stdout);
      return 0;
    }
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
      hw.tensor_parallel_size = parse_int_flag(flag, cli.value(), 1);
    else if (cli.is("--gpu-memory-utilization"))
      cache.gpu_memory_utilization = parse_double_flag(flag, cli.value(), 1e-6, 1.0);
    else if (cli.is("--num-gpu-blocks-override"))
      cache.num_gpu_blocks_override = parse_int_flag(flag, cli.value(), 1);
    else if (cli.is("--activation-reserve-bytes"))
      cache.activation_reserve_bytes = parse_int_flag(flag, cli.value(), 0, std::int64_t{1} << 50);
    else if (cli.is("--kv-cache-dtype"))
      cache_dtype = cli.value();
    else
      cli.unknown();
  }
  if (model_arg.empty()) throw ConfigError("kv-size: --model CONFIG is required");
  if (gpu_given && cache.kv_cache_memory_bytes)
    throw ConfigError("kv-size: give --gpu or --kv-cache-memory-bytes, not both");
  if (cache_dtype != "auto" && !dtype_bytes_of(cache_dtype))
    throw ConfigError(
        fmt::format("kv-size: --kv-cache-dtype: unknown dtype '{}' (allowed: auto, "
                    "bfloat16, float16, float32, fp8)",
                    cache_dtype));
  cache.cache_dtype = cache_dtype;
  hw.gpu = gpu_preset(gpu);
  const ModelConfig model = load_model_arg(model_arg);
  const KVCachePlan plan = plan_kv_cache(model, hw, cache);
  const KVCacheSpec& s = plan.spec;
  const KVCacheSizing& z = plan.sizing;

  if (json_out) {
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
    j["weight_bytes_per_gpu"] = plan.budget.weight_bytes;
    j["activation_reserve_bytes"] = plan.budget.activation_reserve_bytes;
    j["available_kv_bytes"] = plan.budget.available_kv_bytes;
    j["page_bytes_per_layer"] = z.page_bytes_per_layer;
    j["bytes_per_token"] = z.bytes_per_token;
    j["num_gpu_blocks"] = z.num_gpu_blocks;
    j["num_token_slots"] = z.num_token_slots;
    j["layer_tensor_bytes"] = z.layer_tensor_bytes;
    j["total_kv_bytes"] = z.total_kv_bytes;
    std::fputs((j.dump(2) + "\n").c_str(), stdout);
    return 0;
  }
  std::string out;
  out += fmt::format(
      "model                {} ({}{} layers, {} KV head{} x {} per rank, {} B/elem{})\n",
      model.name, model.model_type.empty() ? "" : model.model_type + ", ", s.num_layers,
      s.num_kv_heads, s.num_kv_heads == 1 ? "" : "s", s.head_size, s.dtype_bytes,
      s.mla ? ", MLA" : "");
  out += fmt::format(
      "parameters           {} ({})\n", with_commas(model.num_parameters),
      model.num_parameters_estimated ? "estimated from the architecture" : "from config");
  if (cache.kv_cache_memory_bytes) {
    out +=
        fmt::format("kv_cache_memory      {} B ({})\n", with_commas(*cache.kv_cache_memory_bytes),
                    gib(*cache.kv_cache_memory_bytes));
  } else {
    const MemoryBudget& b = plan.budget;
    out += fmt::format("gpu                  {} x{}: {} total, {} usable at {}\n", hw.gpu.name,
                       hw.tensor_parallel_size, gib(b.total_bytes), gib(b.usable_bytes),
                       cache.gpu_memory_utilization);
    out += fmt::format("weights per gpu      {} B ({})\n", with_commas(b.weight_bytes),
                       gib(b.weight_bytes));
    out += fmt::format("activation reserve   {} B ({})\n", with_commas(b.activation_reserve_bytes),
                       gib(b.activation_reserve_bytes));
    out += fmt::format("available for KV     {} B ({})\n", with_commas(b.available_kv_bytes),
                       gib(b.available_kv_bytes));
  }
  out += fmt::format("page bytes per layer {} (block_size {})\n",
                     with_commas(z.page_bytes_per_layer), s.block_size);
  out += fmt::format("bytes per token      {}\n", with_commas(z.bytes_per_token));
  out += fmt::format("num_gpu_blocks       {}\n", with_commas(z.num_gpu_blocks));
  out += fmt::format("token slots          {}\n", with_commas(z.num_token_slots));
  out += fmt::format("layer tensor bytes   {} x {} layers = {} ({})\n",
                     with_commas(z.layer_tensor_bytes), s.num_layers, with_commas(z.total_kv_bytes),
                     gib(z.total_kv_bytes));
  std::fputs(out.c_str(), stdout);
  return 0;
}

}  // namespace kvsim::cli
