#include "sim/config/kv_sizing_io.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "sim/common/errors.h"
#include "sim/common/yaml_util.h"
#include "sim/config/layer_specs.h"
#include "sim/config/model_json.h"

namespace kvsim {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view kCaseKeys[] = {"id",
                                          "layers",
                                          "block_size",
                                          "tensor_parallel_size",
                                          "pipeline_parallel_size",
                                          "available_memory_bytes",
                                          "max_model_len",
                                          "auto_fit_max_model_len",
                                          "max_num_batched_tokens",
                                          "num_gpu_blocks_override",
                                          "disable_hybrid_kv_cache_manager",
                                          "enable_prefix_caching",
                                          "mamba_cache_mode",
                                          "meta"};

std::int64_t bounded(const json& obj, std::string_view key, std::int64_t lo, std::int64_t hi,
                     std::optional<std::int64_t> def, const detail::ErrorAt& err) {
  auto v = detail::opt_int(obj, key, err);
  if (!v) {
    if (def) return *def;
    throw err(key, fmt::format("missing field '{}'", key));
  }
  if (*v < lo || *v > hi)
    throw err(key, fmt::format("field '{}' must be in [{}, {}], got {}", key, lo, hi, *v));
  return *v;
}

ordered_json spec_json(const LayerKVSpec& s, const RequestLimits& r) {
  ordered_json j;
  j["type"] = spec_class_name(s.kind);
  j["block_size"] = s.block_size;
  j["page_size_bytes"] = page_size_bytes(s);
  if (s.kind == KVSpecKind::kMamba) {
    j["shapes"] = s.shapes;
    j["dtypes"] = s.dtypes;
    j["mamba_type"] = s.mamba_type;
    if (s.page_size_padded > 0) j["page_size_padded"] = s.page_size_padded;
  } else {
    j["num_kv_heads"] = s.num_kv_heads;
    j["head_size"] = s.head_size;
    j["dtype"] = s.dtype;
    if (s.kv_quant_mode != KVQuantMode::kNone)
      j["kv_quant_mode"] = kv_quant_mode_name(s.kv_quant_mode);
    if (s.sliding_window > 0) j["sliding_window"] = s.sliding_window;
    if (s.attention_chunk_size > 0) j["attention_chunk_size"] = s.attention_chunk_size;
    if (s.kind == KVSpecKind::kMLA) j["cache_dtype_str"] = s.cache_dtype_str;
  }
  j["max_memory_usage_bytes"] = max_memory_usage_bytes(s, r);
  j["max_blocks_per_request"] = max_blocks_per_request(s, r);
  return j;
}

ordered_json group_spec_json(const KVCacheGroup& g, const RequestLimits& r) {
  if (g.uniform_type_layers.empty()) return spec_json(g.spec, r);
  ordered_json j;
  j["type"] = "UniformTypeKVCacheSpecs";
  j["block_size"] = g.spec.block_size;
  j["page_size_bytes"] = g.page_size_bytes;
  ordered_json layers = ordered_json::array();
  std::vector<std::pair<LayerKVSpec, std::int64_t>> distinct;  // first-seen order
  for (const NamedLayerSpec& l : g.uniform_type_layers) {
    auto it = std::find_if(distinct.begin(), distinct.end(),
                           [&](const auto& d) { return d.first == l.spec; });
    if (it == distinct.end())
      distinct.emplace_back(l.spec, 1);
    else
      ++it->second;
  }
  for (const auto& [spec, n] : distinct) {
    ordered_json one = spec_json(spec, r);
    one["num_layers"] = n;
    layers.push_back(std::move(one));
  }
  j["layer_specs"] = std::move(layers);
  j["max_memory_usage_bytes"] = g.max_memory_usage_bytes;
  j["max_blocks_per_request"] = g.max_blocks_per_request;
  return j;
}

ordered_json tensors_json(const std::vector<KVCacheTensor>& tensors, std::int64_t* total) {
  ordered_json a = ordered_json::array();
  *total = 0;
  for (const KVCacheTensor& t : tensors) {
    a.push_back({{"size", t.size_bytes}, {"shared_by", t.shared_by}});
    *total += t.size_bytes;
  }
  return a;
}

}  // namespace

KVSizingCase parse_kv_sizing_case(const std::string& text, const std::string& file,
                                  std::int64_t line) {
  const detail::ErrorAt err = [&text, &file, line](std::string_view key,
                                                   const std::string& message) {
    const std::size_t at =
        key.empty() ? std::string::npos : text.find("\"" + std::string(key) + "\"");
    return ConfigError(file, line, at == std::string::npos ? 1 : static_cast<std::int64_t>(at) + 1,
                       message);
  };
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ConfigError(file, line, static_cast<std::int64_t>(e.byte == 0 ? 1 : e.byte),
                      std::string("JSON ") + e.what());
  }
  if (!j.is_object()) throw err("", "a sizing question must be a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (std::find(std::begin(kCaseKeys), std::end(kCaseKeys), it.key()) != std::end(kCaseKeys))
      continue;
    throw err(it.key(),
              fmt::format("unknown key '{}'{}", it.key(), suggestion_suffix(it.key(), kCaseKeys)));
  }
  KVSizingCase c;
  c.id = detail::opt_string(j, "id", err);
  KVSizingInput& in = c.input;
  const std::int64_t block_size = bounded(j, "block_size", 1, std::int64_t{1} << 34, 16, err);
  in.tensor_parallel_size = bounded(j, "tensor_parallel_size", 1, 1024, 1, err);
  in.pipeline_parallel_size = bounded(j, "pipeline_parallel_size", 1, 1024, 1, err);
  in.max_model_len = bounded(j, "max_model_len", 1, std::int64_t{1} << 34, std::nullopt, err);
  in.max_num_batched_tokens =
      bounded(j, "max_num_batched_tokens", 1, std::int64_t{1} << 34, 8192, err);
  if (detail::field(j, "num_gpu_blocks_override"))
    in.num_gpu_blocks_override =
        bounded(j, "num_gpu_blocks_override", 1, std::int64_t{1} << 31, std::nullopt, err);
  in.auto_fit_max_model_len = detail::opt_bool(j, "auto_fit_max_model_len", err).value_or(false);
  in.disable_hybrid_kv_cache_manager =
      detail::opt_bool(j, "disable_hybrid_kv_cache_manager", err).value_or(false);
  const std::string mode = detail::opt_string(j, "mamba_cache_mode", err).value_or("none");
  if (mode != "none" && mode != "align" && mode != "all")
    throw err("mamba_cache_mode", "field 'mamba_cache_mode' must be none, align or all");
  in.mamba_cache_mode = mode == "all"     ? MambaCacheMode::kAll
                        : mode == "align" ? MambaCacheMode::kAlign
                                          : MambaCacheMode::kNone;

  const json* layers = detail::field(j, "layers");
  if (!layers || !layers->is_array())
    throw err("layers", "field 'layers' must be a list of layer specs");
  if (layers->size() > 65536) throw err("layers", "more than 65536 layers");
  LayerKVSpec defaults;
  defaults.block_size = block_size;
  std::set<std::string> names;
  for (const json& l : *layers) {
    if (!l.is_object()) throw err("layers", "every entry of 'layers' must be an object");
    if (l.contains("repeat") || l.contains("pattern"))
      throw err("layers",
                "a sizing question lists every layer ('repeat'/'pattern' are for model "
                "sections)");
    auto name = detail::opt_string(l, "name", err);
    if (!name) throw err("layers", "every layer needs a 'name'");
    if (!names.insert(*name).second)
      throw err("name", fmt::format("the layer name '{}' appears twice", *name));
    in.layers.push_back({*name, parse_layer_spec(l, defaults, "layers", err)});
  }
  if (static_cast<std::int64_t>(in.layers.size()) < in.pipeline_parallel_size)
    throw err("pipeline_parallel_size",
              "pipeline_parallel_size is larger than the number of layers");
  const bool mamba = std::any_of(in.layers.begin(), in.layers.end(), [](const NamedLayerSpec& l) {
    return l.spec.kind == KVSpecKind::kMamba;
  });
  in.enable_prefix_caching = detail::opt_bool(j, "enable_prefix_caching", err).value_or(!mamba);

  const std::int64_t workers = in.tensor_parallel_size * in.pipeline_parallel_size;
  const json* memory = detail::field(j, "available_memory_bytes");
  constexpr std::int64_t kMemLimit = std::int64_t{1} << 60;
  if (memory && memory->is_array()) {
    auto list = detail::opt_int_list(j, "available_memory_bytes", -kMemLimit, kMemLimit, err);
    if (static_cast<std::int64_t>(list->size()) != workers)
      throw err("available_memory_bytes",
                fmt::format("field 'available_memory_bytes' lists {} workers; tensor x pipeline "
                            "parallel size is {}",
                            list->size(), workers));
    in.available_memory_bytes = *list;
  } else {
    in.available_memory_bytes = {
        bounded(j, "available_memory_bytes", -kMemLimit, kMemLimit, std::nullopt, err)};
  }
  return c;
}

ordered_json kv_sizing_result_json(const KVSizingResult& result,
                                   const std::optional<std::string>& id) {
  ordered_json j;
  if (id) j["id"] = *id;
  if (result.error) {
    j["error"] = result.error->type + ": " + result.error->message;
    j["raised_at"] = result.error->raised_at;
    j["log"] = result.log;
    return j;
  }
  const KVPoolLayout& L = *result.layout;
  const RequestLimits& r = L.limits;
  j["num_blocks"] = L.num_blocks;
  j["num_usable_blocks"] = L.num_blocks - 1;
  j["max_model_len"] = L.max_model_len;
  j["num_groups"] = L.groups.size();
  j["engine_block_size"] = L.engine_block_size;
  j["group_size"] = L.group_size;
  ordered_json groups = ordered_json::array(), scheduler = ordered_json::array();
  for (const KVCacheGroup& g : L.groups) {
    ordered_json one;
    one["layer_names"] = g.layer_names;
    one["num_layers"] = g.layer_names.size();
    one["spec"] = group_spec_json(g, r);
    groups.push_back(std::move(one));
    scheduler.push_back(g.uniform_type_layers.empty()
                            ? group_spec_json(g, r)
                            : spec_json(g.uniform_type_layers.front().spec, r));
  }
  j["groups"] = std::move(groups);
  std::int64_t total = 0;
  j["tensors"] = tensors_json(L.tensors, &total);
  j["total_tensor_bytes"] = total;
  j["scheduler_groups"] = std::move(scheduler);
  j["max_memory_usage_bytes_per_request"] = L.max_memory_usage_bytes_per_request;
  j["max_concurrency"] = L.max_concurrency;
  j["gpu_kv_cache_tokens"] = L.gpu_kv_cache_tokens;
  j["scheduler_block_size"] = L.scheduler_block_size;
  j["hash_block_size"] = L.hash_block_size;
  if (L.stages.size() > 1) {
    ordered_json workers = ordered_json::array();
    for (const WorkerKVConfig& w : L.stages) {
      ordered_json one;
      one["num_blocks"] = w.num_blocks;
      one["tensors"] = tensors_json(w.tensors, &total);
      one["total_tensor_bytes"] = total;
      one["rank"] = w.rank;
      workers.push_back(std::move(one));
    }
    j["workers"] = std::move(workers);
  }
  j["log"] = result.log;
  return j;
}

}  // namespace kvsim
