#include "sim/config/hardware.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>

#include "sim/config/mamba_cache.h"

namespace kvsim {

namespace {

constexpr std::int64_t MiB(std::int64_t n) { return n << 20; }

// Memory: nvidia-smi totals. Compute: NVIDIA datasheets, dense BF16 tensor-core peak (half the
// "with sparsity" figure). Bandwidth: datasheet peak. Host link: the datasheets' PCIe figure is
// both directions together (H100 SXM5, H100 PCIe, H200: "PCIe Gen5: 128GB/s"; A100: "PCIe
// Gen4: 64GB/s"; L40S, L4, A10: "PCIe Gen4 x16: 64GB/s"), so one direction is half of it.
const std::array<GpuPreset, 8>& presets() {
  static const std::array<GpuPreset, 8> kPresets = {{
      {"H100-80GB", MiB(81559), 989.4e12, 3.35e12, 64e9},   // H100 SXM5 80GB HBM3
      {"H100-PCIe", MiB(81559), 756.0e12, 2.0e12, 64e9},    // H100 PCIe 80GB HBM2e
      {"H200-141GB", MiB(143771), 989.4e12, 4.8e12, 64e9},  // H200 SXM 141GB HBM3e
      {"A100-80GB", MiB(81920), 312.0e12, 2.039e12, 32e9},  // A100 SXM4 80GB HBM2e
      {"A100-40GB", MiB(40960), 312.0e12, 1.555e12, 32e9},  // A100 SXM4 40GB HBM2
      {"L40S", MiB(46068), 362.05e12, 864.0e9, 32e9},       // L40S 48GB GDDR6
      {"L4", MiB(23034), 121.0e12, 300.0e9, 32e9},          // L4 24GB GDDR6
      {"A10G", MiB(23028), 70.0e12, 600.0e9, 32e9},         // A10G 24GB GDDR6 (AWS g5)
  }};
  return kPresets;
}

std::string gib(std::int64_t bytes) {
  return fmt::format("{:.2f} GiB",
                     static_cast<double>(bytes) / static_cast<double>(std::int64_t{1} << 30));
}

}  // namespace

std::span<const GpuPreset> gpu_presets() { return presets(); }

namespace {

/// Lower case without '-', '_' and spaces: "H100-80GB", "h100_80gb" and "H100 80GB" are one name.
std::string gpu_key(std::string_view name) {
  std::string k;
  for (unsigned char c : name)
    if (c != '-' && c != '_' && c != ' ') k += static_cast<char>(std::tolower(c));
  return k;
}

/// Spellings of a preset besides its name (compared as gpu_key). H100 alone means the SXM5 part,
/// as in every cloud's instance list; A100 alone means the 40 GB part, as AWS (p4d), GCP (a2) and
/// SkyPilot name it.
struct GpuAlias {
  std::string_view alias;
  std::string_view preset;
};
constexpr GpuAlias kGpuAliases[] = {
    {"h100", "H100-80GB"},          {"h100sxm", "H100-80GB"},     {"h100sxm5", "H100-80GB"},
    {"h100sxm80gb", "H100-80GB"},   {"h100sxm580gb", "H100-80GB"}, {"h100pcie80gb", "H100-PCIe"},
    {"h200", "H200-141GB"},         {"h200sxm", "H200-141GB"},    {"h200sxm141gb", "H200-141GB"},
    {"a100", "A100-40GB"},          {"a100sxm4", "A100-40GB"},    {"a100sxm440gb", "A100-40GB"},
    {"a100sxm80gb", "A100-80GB"},   {"a100sxm480gb", "A100-80GB"}, {"l40s48gb", "L40S"},
    {"l424gb", "L4"},               {"a10g24gb", "A10G"},
};

}  // namespace

const GpuPreset* find_gpu_preset(std::string_view name) {
  const std::string key = gpu_key(name);
  for (const GpuAlias& a : kGpuAliases)
    if (key == a.alias) return find_gpu_preset(a.preset);
  for (const GpuPreset& p : presets())
    if (gpu_key(p.name) == key) return &p;
  return nullptr;
}

GpuPreset gpu_preset(std::string_view name) {
  if (const GpuPreset* p = find_gpu_preset(name)) return *p;
  std::vector<std::string_view> names;
  for (const GpuPreset& p : presets()) names.push_back(p.name);
  std::string msg = fmt::format("unknown GPU '{}'", name);
  if (auto s = did_you_mean(name, names)) msg += fmt::format(" (did you mean '{}'?)", *s);
  std::string all;
  for (auto n : names) all += (all.empty() ? "" : ", ") + std::string(n);
  throw ConfigError(msg + " (known: " + all + "; H100, H200 and A100 name the SXM parts, a count "
                    "as H100x8)");
}

GpuWithCount parse_gpu_with_count(std::string_view text) {
  const auto digits = [](std::string_view d) {
    return !d.empty() && std::ranges::all_of(d, [](unsigned char c) { return std::isdigit(c); });
  };
  const auto count_of = [&](std::string_view d) -> std::int64_t {
    std::int64_t n = 0;
    for (char c : d) {
      n = n * 10 + (c - '0');
      if (n > 1024) break;
    }
    if (n < 1 || n > 1024)
      throw ConfigError(fmt::format("GPU '{}': the count {} is outside [1, 1024]", text, d));
    return n;
  };
  // The whole text first: a preset's own name never has a count.
  if (const GpuPreset* p = find_gpu_preset(text)) return {*p, std::nullopt};
  const std::size_t colon = text.rfind(':');
  if (colon != std::string_view::npos && digits(text.substr(colon + 1)))
    return {gpu_preset(text.substr(0, colon)), count_of(text.substr(colon + 1))};
  const std::size_t last_x = text.find_last_of("xX*");
  if (last_x != std::string_view::npos && last_x > 0 && digits(text.substr(last_x + 1)))
    return {gpu_preset(text.substr(0, last_x)), count_of(text.substr(last_x + 1))};
  const std::size_t first_x = text.find_first_of("xX*");
  if (first_x != std::string_view::npos && digits(text.substr(0, first_x)))
    return {gpu_preset(text.substr(first_x + 1)), count_of(text.substr(0, first_x))};
  return {gpu_preset(text), std::nullopt};
}

HardwareConfig load_hardware(const YAML::Node& hardware, const YamlContext& ctx) {
  check_keys(hardware, std::span<const std::string_view>(kHardwareKeys), ctx);
  HardwareConfig hw;
  const std::string name = get_string(hardware, "gpu", ctx, std::string(kDefaultGpu));
  GpuWithCount g;
  try {
    g = parse_gpu_with_count(name);
  } catch (const ConfigError& e) {
    throw yaml_error(hardware["gpu"], ctx.child("gpu"),
                     fmt::format("{}: {}", ctx.child("gpu").path, e.what()));
  }
  hw.gpu = std::move(g.gpu);
  hw.tensor_parallel_size =
      get_int(hardware, "tensor_parallel_size", ctx, g.count.value_or(1), 1, 1024);
  if (g.count && *g.count != hw.tensor_parallel_size)
    throw yaml_error(hardware["tensor_parallel_size"], ctx.child("tensor_parallel_size"),
                     fmt::format("{}: {} but gpu '{}' says {} GPUs; give the count once",
                                 ctx.child("tensor_parallel_size").path, hw.tensor_parallel_size,
                                 name, *g.count));
  hw.gpu.memory_bytes =
      get_int(hardware, "gpu_memory_bytes", ctx, hw.gpu.memory_bytes, 1, std::int64_t{1} << 50);
  hw.gpu.peak_flops_per_s =
      get_double(hardware, "peak_flops_per_s", ctx, hw.gpu.peak_flops_per_s, 1.0);
  hw.gpu.hbm_bytes_per_s =
      get_double(hardware, "hbm_bytes_per_s", ctx, hw.gpu.hbm_bytes_per_s, 1.0);
  hw.gpu.host_link_bytes_per_s =
      get_double(hardware, "host_link_bytes_per_s", ctx, hw.gpu.host_link_bytes_per_s, 1.0);
  hw.host_link_latency_us = get_double(hardware, "host_link_latency_us", ctx, 0.0, 0.0, 1e9);
  return hw;
}

CacheSizingConfig load_cache_sizing(const YAML::Node& cache, const YamlContext& ctx,
                                    double default_gpu_memory_utilization) {
  require_map(cache, ctx);
  CacheSizingConfig c;
  c.block_size = get_int(cache, "block_size", ctx, 16, 1, 1 << 16);
  c.gpu_memory_utilization = get_double(cache, "gpu_memory_utilization", ctx,
                                        default_gpu_memory_utilization, 1e-6, 1.0);
  c.kv_cache_memory_bytes =
      get_optional_int(cache, "kv_cache_memory_bytes", ctx, 1, std::int64_t{1} << 60);
  c.num_gpu_blocks_override = get_optional_int(cache, "num_gpu_blocks_override", ctx, 1);
  c.activation_reserve_bytes = get_int(cache, "activation_reserve_bytes", ctx,
                                       kDefaultActivationReserveBytes, 0, std::int64_t{1} << 50);
  c.cache_dtype =
      get_choice(cache, "cache_dtype", ctx, "auto",
                 {"auto", "bfloat16", "float16", "float32", "fp8", "fp8_e4m3", "fp8_e5m2"});
  return c;
}

YAML::Node hardware_yaml(const HardwareConfig& hw) {
  YAML::Node n(YAML::NodeType::Map);
  n["gpu"] = hw.gpu.name;
  n["tensor_parallel_size"] = hw.tensor_parallel_size;
  n["gpu_memory_bytes"] = hw.gpu.memory_bytes;
  n["peak_flops_per_s"] = number_node(hw.gpu.peak_flops_per_s);
  n["hbm_bytes_per_s"] = number_node(hw.gpu.hbm_bytes_per_s);
  n["host_link_bytes_per_s"] = number_node(hw.gpu.host_link_bytes_per_s);
  if (hw.host_link_latency_us != 0) n["host_link_latency_us"] = number_node(hw.host_link_latency_us);
  return n;
}

YAML::Node cache_sizing_yaml(const CacheSizingConfig& c) {
  YAML::Node n(YAML::NodeType::Map);
  n["block_size"] = c.block_size;
  n["gpu_memory_utilization"] = number_node(c.gpu_memory_utilization);
  n["kv_cache_memory_bytes"] = optional_node(c.kv_cache_memory_bytes);
  n["num_gpu_blocks_override"] = optional_node(c.num_gpu_blocks_override);
  n["activation_reserve_bytes"] = c.activation_reserve_bytes;
  n["cache_dtype"] = c.cache_dtype;
  return n;
}

MemoryBudget memory_budget(const ModelConfig& model, const HardwareConfig& hardware,
                           const CacheSizingConfig& cache, const std::string& file) {
  const std::string prefix = file.empty() ? "" : file + ": ";
  MemoryBudget b;
  b.total_bytes = hardware.gpu.memory_bytes;
  b.usable_bytes = static_cast<std::int64_t>(
      std::floor(static_cast<double>(b.total_bytes) * cache.gpu_memory_utilization));
  b.weight_bytes = model.weight_bytes() / hardware.tensor_parallel_size;
  b.activation_reserve_bytes = cache.activation_reserve_bytes;
  if (cache.kv_cache_memory_bytes) {
    b.available_kv_bytes = *cache.kv_cache_memory_bytes;
  } else {
    b.available_kv_bytes = b.usable_bytes - b.weight_bytes - b.activation_reserve_bytes;
    if (b.available_kv_bytes <= 0 && !cache.num_gpu_blocks_override)
      throw ConfigError(fmt::format(
          "{}model does not fit: needs {} more. {} on {} x{} has {} usable (gpu_memory_utilization "
          "{}) for {} of weights per GPU + {} activation reserve; raise tensor_parallel_size or "
          "gpu_memory_utilization, or pick a larger GPU",
          prefix, gib(-b.available_kv_bytes), model.name, hardware.gpu.name,
          hardware.tensor_parallel_size, gib(b.usable_bytes), cache.gpu_memory_utilization,
          gib(b.weight_bytes), gib(b.activation_reserve_bytes)));
  }
  return b;
}

KVCachePlan plan_kv_cache(const ModelConfig& model, const HardwareConfig& hardware,
                          const CacheSizingConfig& cache, const std::string& file) {
  const std::string prefix = file.empty() ? "" : file + ": ";
  const std::int64_t kv_dtype_bytes =
      cache.cache_dtype == "auto" ? 0 : dtype_bytes_of(cache.cache_dtype).value_or(0);
  KVCachePlan plan;
  plan.spec = model.kv_cache_spec(cache.block_size, hardware.tensor_parallel_size, kv_dtype_bytes);
  plan.budget = memory_budget(model, hardware, cache, file);
  const MemoryBudget& b = plan.budget;
  if (cache.num_gpu_blocks_override) {
    if (*cache.num_gpu_blocks_override >
        (std::int64_t{1} << 62) / plan.spec.page_bytes_all_layers())
      throw ConfigError(
          fmt::format("{}num_gpu_blocks_override {} blocks of {} B is more memory than "
                      "kvsim can count",
                      prefix, *cache.num_gpu_blocks_override, plan.spec.page_bytes_all_layers()));
    plan.sizing = size_kv_cache_blocks(plan.spec, *cache.num_gpu_blocks_override);
  } else {
    plan.sizing = size_kv_cache(plan.spec, b.available_kv_bytes);
    if (plan.sizing.num_gpu_blocks == 0)
      throw ConfigError(
          fmt::format("{}no KV cache block fits: {} available, one block needs {} "
                      "(page {} B x {} layers)",
                      prefix, gib(b.available_kv_bytes), gib(plan.spec.page_bytes_all_layers()),
                      plan.spec.page_bytes_per_layer(), plan.spec.num_layers));
  }
  return plan;
}

KVSizingInput kv_sizing_input(const ModelConfig& model, const HardwareConfig& hw,
                              const CacheSizingConfig& cache, const PoolRequest& request,
                              KVSizingRules rules, std::int64_t available_kv_bytes) {
  KVLayerOptions o;
  o.tensor_parallel_size = hw.tensor_parallel_size;
  o.block_size = cache.block_size;
  o.kv_cache_dtype = cache.cache_dtype;
  o.max_model_len = request.max_model_len;
  o.rules = rules;
  const MambaCacheChoice mamba = choose_mamba_cache_mode(model, request, rules);
  o.mamba_cache_mode = mamba.mode;
  KVSizingInput in;
  in.layers = model_layer_specs(model, o);
  in.tensor_parallel_size = hw.tensor_parallel_size;
  in.available_memory_bytes = {available_kv_bytes};
  in.max_model_len = request.max_model_len;
  in.auto_fit_max_model_len = request.auto_fit_max_model_len;
  in.max_num_batched_tokens = request.max_num_batched_tokens;
  in.num_gpu_blocks_override = cache.num_gpu_blocks_override;
  in.override_check_warns = request.override_check_warns;
  in.disable_hybrid_kv_cache_manager =
      request.disable_hybrid_kv_cache_manager.value_or(hybrid_manager_off_by_default(model));
  in.enable_prefix_caching = mamba.enable_prefix_caching;
  in.mamba_cache_mode = mamba.mode;
  return in;
}

KVCachePlan plan_kv_pool(const ModelConfig& model, const HardwareConfig& hardware,
                         const CacheSizingConfig& cache, const PoolRequest& request,
                         KVSizingRules rules, const std::string& file) {
  const std::string prefix = file.empty() ? "" : file + ": ";
  KVCachePlan plan;
  plan.budget = memory_budget(model, hardware, cache, file);
  const std::int64_t kv_dtype_bytes =
      cache.cache_dtype == "auto" ? 0 : dtype_bytes_of(cache.cache_dtype).value_or(0);
  plan.spec = model.kv_cache_spec(cache.block_size, hardware.tensor_parallel_size, kv_dtype_bytes);
  KVSizingInput in =
      kv_sizing_input(model, hardware, cache, request, rules, plan.budget.available_kv_bytes);
  KVSizingResult r = size_kv_pool(in, rules);
  plan.log = choose_mamba_cache_mode(model, request, rules).log;  // logged at config time
  plan.log.insert(plan.log.end(), r.log.begin(), r.log.end());
  if (r.error)
    throw ConfigError(fmt::format("{}vLLM {} refuses to start: {}: {}", prefix,
                                  kv_sizing_release(rules), r.error->type, r.error->message));
  plan.layers = std::move(in.layers);
  plan.layout = std::move(r.layout);
  const KVPoolLayout& L = *plan.layout;
  plan.sizing.num_gpu_blocks = L.num_blocks;
  plan.sizing.page_bytes_per_layer = L.groups.empty() ? 0 : L.groups.front().page_size_bytes;
  plan.sizing.num_token_slots = L.num_blocks * L.engine_block_size;
  for (const KVCacheTensor& t : L.tensors) plan.sizing.total_kv_bytes += t.size_bytes;
  plan.sizing.layer_tensor_bytes = L.tensors.empty() ? 0 : L.tensors.front().size_bytes;
  plan.sizing.bytes_per_token = plan.spec.bytes_per_token();
  return plan;
}

}  // namespace kvsim
