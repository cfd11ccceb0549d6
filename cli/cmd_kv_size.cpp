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
#include "sim/common/yaml_util.h"
#include "sim/config/hardware.h"
#include "sim/config/model_config.h"

namespace kvsim::cli {

namespace {

constexpr const char* kAbout =
    "The KV cache a model gets on a GPU, computed as vLLM V1 does. CONFIG is a Hugging Face "
    "config.json, a YAML file with a model: section, or the name of a config shipped in "
    "scenarios/models/ (llama-3.1-8b, qwen2-1.5b, deepseek-v3, ...).";

std::string parse_cache_dtype(const std::string& text) {
  if (text != "auto" && !dtype_bytes_of(text))
    throw BadValue(
        fmt::format("unknown dtype '{}' (allowed: auto, bfloat16, float16, float32, fp8)", text));
  return text;
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
  bool json_out = false;
  CommandLine cl("kv-size", "--model CONFIG [options]", kAbout);
  // One flag per entry: name, value (target, range, metavar), help. clang-format would align the
  // chain's line comments across the whole table.
  // clang-format off
  cl.options()
      ("model", text(&model_arg, "CONFIG"), "the model's config (required)")
      ("gpu", text(&gpu, "NAME"), "GPU preset (default: H100-80GB)")
      ("kv-cache-memory-bytes",
       integer(&cache.kv_cache_memory_bytes, 1, std::int64_t{1} << 60, "N"),
       "KV cache bytes per GPU, instead of the GPU's memory budget")
      ("block-size", integer(&cache.block_size, 1, 1 << 16, "B"), "tokens per block (default: 16)")
      ("tensor-parallel-size", integer(&hw.tensor_parallel_size, 1, kIntMax, "N"),
       "GPUs the model is split over (default: 1)")
      ("gpu-memory-utilization", number(&cache.gpu_memory_utilization, 1e-6, 1.0, "F"),
       "fraction of the GPU's memory vLLM may use (default: 0.9)")
      ("num-gpu-blocks-override", integer(&cache.num_gpu_blocks_override, 1, kIntMax, "N"),
       "the block count, instead of the computed one")
      ("activation-reserve-bytes",
       integer(&cache.activation_reserve_bytes, 0, std::int64_t{1} << 50, "N"),
       "bytes kept for activations (default: 2 GiB)")
      ("kv-cache-dtype", checked<std::string>(&cache_dtype, "DTYPE", parse_cache_dtype),
       "auto|bfloat16|float16|float32|fp8 (default: auto, the model's dtype)")
      ("json", flag(&json_out), "print the sizing as JSON");
  // clang-format on
  if (!cl.parse(args)) return 0;
  if (model_arg.empty()) throw cl.error("--model CONFIG is required");
  if (cl.given("gpu") && cache.kv_cache_memory_bytes)
    throw ConfigError("kv-size: give --gpu or --kv-cache-memory-bytes, not both");
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
