#include "sim/config/layer_specs.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "sim/common/yaml_util.h"
#include "sim/config/model_config.h"

namespace kvsim {

namespace {

using detail::ErrorAt;
using detail::field;
using nlohmann::json;

constexpr std::string_view kModelTypes[] = {
    "llama",     "mistral",     "mixtral",     "qwen2",       "qwen3",
    "qwen3_moe", "opt",         "gemma3",      "gemma3_text", "gpt_oss",
    "llama4",    "llama4_text", "deepseek_v2", "deepseek_v3", "qwen3_next"};

constexpr std::string_view kLayerTypes[] = {"full_attention", "sliding_attention",
                                            "chunked_attention", "linear_attention"};

constexpr std::string_view kLayerKeys[] = {"name",
                                           "type",
                                           "num_kv_heads",
                                           "head_size",
                                           "dtype",
                                           "sliding_window",
                                           "attention_chunk_size",
                                           "cache_dtype_str",
                                           "kv_cache_dtype",
                                           "shapes",
                                           "dtypes",
                                           "block_size",
                                           "page_size_padded",
                                           "mamba_type",
                                           "num_speculative_blocks",
                                           "repeat",
                                           "pattern"};

constexpr std::string_view kSpecTypes[] = {"full", "sliding_window", "chunked_local", "mla",
                                           "mamba"};

std::string join(std::span<const std::string_view> names) {
  std::string s;
  for (std::string_view n : names) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

bool starts(const std::string& s, std::string_view p) { return s.starts_with(p); }

// Expands `repeat` and `pattern` entries of an explicit layer list, in order.
void expand_layers(const json& list, const ErrorAt& err, std::vector<const json*>& out,
                   int depth = 0) {
  if (!list.is_array() || list.empty())
    throw err("layers", "field 'layers' must be a non-empty list of layer specs");
  for (const json& entry : list) {
    if (!entry.is_object()) throw err("layers", "every entry of 'layers' must be an object");
    const std::int64_t repeat = detail::opt_nonneg(entry, "repeat", 1, err);
    if (repeat < 1 || repeat > 4096)
      throw err("repeat", fmt::format("field 'repeat' must be in [1, 4096], got {}", repeat));
    for (std::int64_t r = 0; r < repeat; ++r) {
      if (const json* pattern = field(entry, "pattern")) {
        if (depth > 4) throw err("pattern", "'pattern' entries nest too deep");
        expand_layers(*pattern, err, out, depth + 1);
      } else {
        out.push_back(&entry);
      }
      if (out.size() > 65536) throw err("layers", "'layers' expands to more than 65536 layers");
    }
  }
}

}  // namespace

const char* supported_model_types() {
  static const std::string names = join(kModelTypes);
  return names.c_str();
}

std::optional<std::pair<std::string, std::int64_t>> kv_cache_element(
    std::string_view d, const std::string& model_dtype) {
  if (d == "auto") {
    std::string_view m = model_dtype;
    if (m.starts_with("torch.")) m.remove_prefix(6);
    if (m == "float16" || m == "fp16" || m == "half") return std::pair{"float16", 2};
    if (dtype_bytes_of(m).value_or(0) == 1) return std::pair{"uint8", 1};
    return std::pair{"bfloat16", 2};  // bfloat16, and float32 downcast
  }
  if (d == "bfloat16") return std::pair{"bfloat16", 2};
  if (d == "float16" || d == "half") return std::pair{"float16", 2};
  if (d == "float32" || d == "float") return std::pair{"float32", 4};
  if (d == "fp8_inc") return std::pair{"float8_e4m3fn", 1};
  if (d == "int8_per_token_head") return std::pair{"int8", 1};
  if (d == "fp8" || d == "fp8_e4m3" || d == "fp8_e5m2" || d == "fp8_per_token_head" ||
      d == "fp8_ds_mla" || d == "nvfp4")
    return std::pair{"uint8", 1};
  return std::nullopt;
}

void parse_attention_layout(const json& e, bool multimodal, const ErrorAt& err, ModelConfig& m) {
  AttentionLayout& a = m.attention;
  a.multimodal = multimodal;
  if (const json* layers = field(e, "layers")) {
    std::vector<const json*> flat;
    expand_layers(*layers, err, flat);
    std::set<std::string> names;
    for (const json* l : flat) {
      (void)parse_layer_spec(*l, LayerKVSpec{}, "layers", err);
      if (auto name = detail::opt_string(*l, "name", err); name && !names.insert(*name).second)
        throw err("name", fmt::format("layers: the layer name '{}' appears twice", *name));
      a.explicit_layers.push_back(*l);
    }
    return;
  }
  const std::string& type = m.model_type;
  if (!type.empty() &&
      std::find(std::begin(kModelTypes), std::end(kModelTypes), type) == std::end(kModelTypes))
    throw err("model_type",
              fmt::format("field 'model_type': kvsim does not know the layers of '{}' (supported: "
                          "{}); describe them with a `layers:` list in the model section "
                          "(sim/config/layer_specs.h)",
                          type, supported_model_types()));
  const std::int64_t n = m.num_hidden_layers;
  if (auto types = detail::opt_string_list(e, "layer_types", err)) {
    if (static_cast<std::int64_t>(types->size()) != n)
      throw err("layer_types", fmt::format("field 'layer_types' has {} entries but "
                                           "num_hidden_layers is {}",
                                           types->size(), n));
    for (const std::string& t : *types)
      if (std::find(std::begin(kLayerTypes), std::end(kLayerTypes), t) == std::end(kLayerTypes))
        throw err("layer_types", fmt::format("field 'layer_types': unknown layer type '{}' "
                                             "(known: {})",
                                             t, join(kLayerTypes)));
    a.layer_types = *types;
  } else if (starts(type, "gemma3")) {
    const std::int64_t pattern = detail::opt_nonneg(e, "sliding_window_pattern", 6, err);
    for (std::int64_t i = 0; i < n; ++i)
      a.layer_types.push_back(pattern > 0 && (i + 1) % pattern == 0 ? "full_attention"
                                                                    : "sliding_attention");
  } else if (type == "qwen3_next") {
    const std::int64_t interval = detail::opt_nonneg(e, "full_attention_interval", 4, err);
    for (std::int64_t i = 0; i < n; ++i)
      a.layer_types.push_back(interval > 0 && (i + 1) % interval == 0 ? "full_attention"
                                                                      : "linear_attention");
  } else if (starts(type, "qwen") && m.sliding_window) {
    const std::int64_t first = detail::opt_nonneg(e, "max_window_layers", 28, err);
    for (std::int64_t i = 0; i < n; ++i)
      a.layer_types.push_back(i >= first ? "sliding_attention" : "full_attention");
  }
  if (field(e, "sliding_window"))
    a.config_sliding_window = detail::opt_nonneg(e, "sliding_window", 0, err);
  a.attention_chunk_size = detail::opt_nonneg(e, "attention_chunk_size", 0, err);
  if (starts(type, "llama4")) {
    auto nope = detail::opt_int_list(e, "no_rope_layers", 0, 1, err);
    if (nope && !nope->empty()) {
      if (static_cast<std::int64_t>(nope->size()) != n)
        throw err("no_rope_layers", fmt::format("field 'no_rope_layers' has {} entries but "
                                                "num_hidden_layers is {}",
                                                nope->size(), n));
      a.no_rope_layers = *nope;
    } else {
      const std::int64_t interval = detail::opt_nonneg(e, "no_rope_layer_interval", 4, err);
      for (std::int64_t i = 0; i < n; ++i)
        a.no_rope_layers.push_back(interval > 0 && (i + 1) % interval == 0 ? 0 : 1);
    }
  }
  if (type == "qwen3_next") {
    a.linear_conv_kernel_dim = detail::req_positive(e, "linear_conv_kernel_dim", err);
    a.linear_key_head_dim = detail::req_positive(e, "linear_key_head_dim", err);
    a.linear_value_head_dim = detail::req_positive(e, "linear_value_head_dim", err);
    a.linear_num_key_heads = detail::req_positive(e, "linear_num_key_heads", err);
    a.linear_num_value_heads = detail::req_positive(e, "linear_num_value_heads", err);
  }
}

bool mixes_sliding_and_full(const AttentionLayout& a) {
  const auto has = [&](std::string_view t) {
    return std::find(a.layer_types.begin(), a.layer_types.end(), t) != a.layer_types.end();
  };
  return has("sliding_attention") && has("full_attention");
}

bool has_mamba_layers(const ModelConfig& m) {
  const AttentionLayout& a = m.attention;
  if (!a.explicit_layers.empty())
    return std::any_of(a.explicit_layers.begin(), a.explicit_layers.end(),
                       [](const json& l) { return l.value("type", "") == "mamba"; });
  return m.model_type == "qwen3_next" && std::find(a.layer_types.begin(), a.layer_types.end(),
                                                   "linear_attention") != a.layer_types.end();
}

bool hybrid_manager_off_by_default(const ModelConfig& m) {
  if (!m.attention.explicit_layers.empty()) {
    for (const json& l : m.attention.explicit_layers)
      if (l.value("type", "") == "chunked_local") return true;
    return false;
  }
  return m.attention.attention_chunk_size > 0;
}

LayerKVSpec parse_layer_spec(const json& l, const LayerKVSpec& defaults, const std::string& where,
                             const ErrorAt& err) {
  for (auto it = l.begin(); it != l.end(); ++it) {
    if (std::find(std::begin(kLayerKeys), std::end(kLayerKeys), it.key()) != std::end(kLayerKeys))
      continue;
    std::string msg = fmt::format("{}: unknown key '{}' in a layer spec", where, it.key());
    if (auto s = did_you_mean(it.key(), kLayerKeys))
      msg += fmt::format(" (did you mean '{}'?)", *s);
    throw err(it.key(), msg);
  }
  const std::string type = detail::opt_string(l, "type", err).value_or("");
  const auto t = std::find(std::begin(kSpecTypes), std::end(kSpecTypes), type);
  if (t == std::end(kSpecTypes))
    throw err("type", fmt::format("{}: a layer's 'type' must be one of {}, got '{}'", where,
                                  join(kSpecTypes), type));
  LayerKVSpec s = defaults;
  s.kind = static_cast<KVSpecKind>(t - std::begin(kSpecTypes));
  s.block_size = detail::opt_nonneg(l, "block_size", defaults.block_size, err);
  if (s.block_size < 1 || s.block_size > (std::int64_t{1} << 34))
    throw err("block_size", fmt::format("{}: 'block_size' must be in [1, 2^34]", where));
  s.page_size_padded = detail::opt_nonneg(l, "page_size_padded", 0, err);
  if (s.page_size_padded > (std::int64_t{1} << 40))
    throw err("page_size_padded", fmt::format("{}: 'page_size_padded' above 2^40", where));
  if (s.kind == KVSpecKind::kMamba) {
    s.num_kv_heads = s.head_size = s.head_size_v = 0;
    s.kv_quant_mode = KVQuantMode::kNone;
    const json* shapes = field(l, "shapes");
    const auto dtypes = detail::opt_string_list(l, "dtypes", err);
    if (!shapes || !shapes->is_array() || shapes->empty() || !dtypes ||
        dtypes->size() != shapes->size())
      throw err("shapes", fmt::format("{}: a mamba layer needs 'shapes' (a list of shapes) and "
                                      "'dtypes' of the same length",
                                      where));
    s.shapes.clear();
    std::int64_t bytes = 0;
    for (std::size_t i = 0; i < shapes->size(); ++i) {
      const json one = json{{"shape", (*shapes)[i]}};
      const auto dims = detail::opt_int_list(one, "shape", 1, 1 << 24, err);
      if (!dims || dims->empty() || dims->size() > 6)
        throw err("shapes", fmt::format("{}: every shape must list 1 to 6 sizes", where));
      const std::int64_t el = torch_dtype_bytes((*dtypes)[i]);
      if (el == 0) throw err("dtypes", fmt::format("{}: unknown dtype '{}'", where, (*dtypes)[i]));
      std::int64_t n = el;
      for (std::int64_t d : *dims) n = sat_mul(n, d);
      bytes = sat_add(bytes, n);
      s.shapes.push_back(*dims);
    }
    if (bytes > (std::int64_t{1} << 40))
      throw err("shapes", fmt::format("{}: a mamba state above 2^40 bytes", where));
    s.dtypes = *dtypes;
    s.mamba_type = detail::opt_string(l, "mamba_type", err).value_or("mamba2");
    s.num_speculative_blocks = detail::opt_nonneg(l, "num_speculative_blocks", 0, err);
    if (s.num_speculative_blocks > 64)
      throw err("num_speculative_blocks", fmt::format("{}: at most 64 speculative blocks", where));
  } else {
    s.num_kv_heads = detail::req_positive(l, "num_kv_heads", err);
    s.head_size = s.head_size_v = detail::opt_nonneg(l, "head_size", 0, err);
    if (s.head_size < 1 || s.head_size > 65536)
      throw err("head_size", fmt::format("{}: 'head_size' must be in [1, 65536]", where));
    if (auto dtype = detail::opt_string(l, "dtype", err)) {
      s.dtype = *dtype;
      s.dtype_bytes = torch_dtype_bytes(*dtype);
      if (s.dtype_bytes == 0)
        throw err("dtype", fmt::format("{}: unknown dtype '{}'", where, *dtype));
    }
    if (auto kv = detail::opt_string(l, "kv_cache_dtype", err))
      s.kv_quant_mode = kv_quant_mode_of(*kv);
    s.cache_dtype_str.clear();
    if (s.kind == KVSpecKind::kMLA)
      s.cache_dtype_str = detail::opt_string(l, "cache_dtype_str", err).value_or("auto");
    if (s.kind == KVSpecKind::kSlidingWindow) {
      s.sliding_window = detail::opt_nonneg(l, "sliding_window", 0, err);
      if (s.sliding_window < 1)
        throw err("sliding_window", fmt::format("{}: a sliding_window layer needs 'sliding_window' "
                                                ">= 1",
                                                where));
    }
    if (s.kind == KVSpecKind::kChunkedLocal) {
      s.attention_chunk_size = detail::opt_nonneg(l, "attention_chunk_size", 0, err);
      if (s.attention_chunk_size < 1)
        throw err("attention_chunk_size", fmt::format("{}: a chunked_local layer needs "
                                                      "'attention_chunk_size' >= 1",
                                                      where));
    }
    if (sat_mul(sat_mul(s.block_size, s.num_kv_heads), s.head_size) > (std::int64_t{1} << 38))
      throw err("num_kv_heads", fmt::format("{}: a page above 2^40 bytes", where));
  }
  LayerKVSpec unpadded = s;
  unpadded.page_size_padded = 0;
  if (s.page_size_padded > 0 && s.page_size_padded < page_size_bytes(unpadded))
    throw err("page_size_padded",
              fmt::format("{}: 'page_size_padded' {} is smaller than the page "
                          "({} B)",
                          where, s.page_size_padded, page_size_bytes(unpadded)));
  return s;
}

}  // namespace kvsim
