// model_layer_specs: a ModelConfig's layers as vLLM v0.20.1's model classes build them (the
// table in sim/config/layer_specs.h).
#include <fmt/format.h>

#include <numeric>
#include <set>

#include "sim/config/layer_specs.h"
#include "sim/config/model_config.h"

namespace kvsim {

namespace {

using nlohmann::json;

std::string layer_name(const ModelConfig& m, std::int64_t i, bool mamba) {
  const std::string prefix = m.attention.multimodal  ? "language_model.model.layers."
                             : m.model_type == "opt" ? "model.decoder.layers."
                                                     : "model.layers.";
  if (mamba) return fmt::format("{}{}.linear_attn", prefix, i);
  return fmt::format("{}{}.{}.attn", prefix, i, m.model_type == "gpt_oss" ? "attn" : "self_attn");
}

// Qwen3-Next's gated delta net state (mamba_utils.py gated_delta_net_state_shape): the conv
// state (kernel - 1, conv_dim / tp) and the recurrent state (v_heads / tp, head_v, head_k).
LayerKVSpec gdn_spec(const ModelConfig& m, const KVLayerOptions& o) {
  const AttentionLayout& a = m.attention;
  const std::int64_t tp = o.tensor_parallel_size;
  const std::int64_t conv_dim = 2 * a.linear_num_key_heads * a.linear_key_head_dim +
                                a.linear_num_value_heads * a.linear_value_head_dim;
  if (conv_dim % tp != 0 || a.linear_num_value_heads % tp != 0)
    throw ConfigError(fmt::format(
        "{}: tensor_parallel_size {} does not divide the linear-attention state (conv dim {}, {} "
        "value heads)",
        m.name, tp, conv_dim, a.linear_num_value_heads));
  const auto element = kv_cache_element("auto", m.dtype).value();
  LayerKVSpec s;
  s.kind = KVSpecKind::kMamba;
  s.block_size = o.max_model_len;  // "none": one state per request; align_hybrid_block_size
                                   // sets the other modes' sizes
  s.head_size = s.head_size_v = 0;
  s.shapes = {{a.linear_conv_kernel_dim - 1, conv_dim / tp},
              {a.linear_num_value_heads / tp, a.linear_value_head_dim, a.linear_key_head_dim}};
  s.dtypes = {element.first, element.first};
  s.mamba_type = "gdn_attention";
  return s;
}

// Platform._align_hybrid_block_size (platforms/interface.py:502-625): raise the attention block
// size until its page holds one mamba state -- a multiple of the kernel alignment, or with
// mamba_cache_mode 'all' a multiple of lcm(mamba chunk size, alignment) -- and pad the state page
// to the attention page. The mamba block: max_model_len ('none'), the attention block ('align'),
// the chunk-aligned size ('all').
void align_hybrid_block_size(std::vector<NamedLayerSpec>& layers, std::int64_t block_size,
                             MambaCacheMode mode, std::int64_t mamba_chunk_size) {
  const LayerKVSpec* attention = nullptr;
  const LayerKVSpec* mamba = nullptr;
  for (const NamedLayerSpec& l : layers)
    (l.spec.kind == KVSpecKind::kMamba ? mamba : attention) = &l.spec;
  if (!attention || !mamba) return;
  LayerKVSpec one = *attention;
  one.block_size = 1;
  const std::int64_t per_token = page_size_bytes(one), state = page_size_bytes(*mamba);
  const std::int64_t align = std::max<std::int64_t>(16, block_size);  // FlashAttention: 16
  std::int64_t attn_block = 0;
  if (mode == MambaCacheMode::kAll) {
    const std::int64_t chunk = std::lcm(mamba_chunk_size, align);
    attn_block = chunk * cdiv(cdiv(state, per_token), chunk);
  } else {
    attn_block = align * cdiv(state, align * per_token);
  }
  const std::int64_t bs = std::max(block_size, attn_block);
  const std::int64_t mamba_block = mode == MambaCacheMode::kAll     ? attn_block
                                   : mode == MambaCacheMode::kAlign ? bs
                                                                    : mamba->block_size;
  for (NamedLayerSpec& l : layers) {
    if (l.spec.kind != KVSpecKind::kMamba) {
      l.spec.block_size = bs;
      continue;
    }
    l.spec.block_size = mamba_block;
    if (bs * per_token != state) l.spec.page_size_padded = bs * per_token;
  }
}

std::vector<NamedLayerSpec> explicit_layer_specs(const ModelConfig& m, const KVLayerOptions& o,
                                                 const std::pair<std::string, std::int64_t>& el) {
  LayerKVSpec defaults;
  defaults.block_size = o.block_size;
  defaults.dtype = el.first;
  defaults.dtype_bytes = el.second;
  defaults.kv_quant_mode = kv_quant_mode_of(o.kv_cache_dtype);
  // The list was checked when the config was read; only the defaults differ here.
  const detail::ErrorAt err = [&m](std::string_view, const std::string& message) {
    return ConfigError(m.name + ": " + message);
  };
  std::vector<NamedLayerSpec> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < m.attention.explicit_layers.size(); ++i) {
    const json& l = m.attention.explicit_layers[i];
    LayerKVSpec s = parse_layer_spec(l, defaults, "layers", err);
    if (s.kind == KVSpecKind::kMLA && !l.contains("cache_dtype_str"))
      s.cache_dtype_str = o.kv_cache_dtype;
    if (s.kind == KVSpecKind::kMamba && !l.contains("block_size"))  // one state per request,
      s.block_size = o.mamba_cache_mode == MambaCacheMode::kNone    // else the attention block
                         ? o.max_model_len
                         : o.block_size;
    std::string name =
        l.contains("name") && l["name"].is_string()
            ? l["name"].get<std::string>()
            : layer_name(m, static_cast<std::int64_t>(i), s.kind == KVSpecKind::kMamba);
    if (!names.insert(name).second)
      throw err("name", fmt::format("layers: the layer name '{}' appears twice", name));
    out.push_back({std::move(name), std::move(s)});
  }
  return out;
}

}  // namespace

std::vector<NamedLayerSpec> model_layer_specs(const ModelConfig& m, const KVLayerOptions& o) {
  const auto el = kv_cache_element(o.kv_cache_dtype, m.dtype);
  if (!el) throw ConfigError(fmt::format("unknown kv_cache_dtype '{}'", o.kv_cache_dtype));
  std::vector<NamedLayerSpec> out;
  if (!m.attention.explicit_layers.empty()) {
    out = explicit_layer_specs(m, o, *el);
  } else {
    const AttentionLayout& a = m.attention;
    const std::string& type = m.model_type;
    const std::int64_t tp = o.tensor_parallel_size;
    std::int64_t heads = std::max<std::int64_t>(1, m.num_key_value_heads / tp);
    if (type == "gpt_oss") {
      heads = m.num_key_value_heads / tp;  // gpt_oss.py divides without replicating
      if (heads == 0)
        throw ConfigError(
            fmt::format("{}: gpt-oss cannot split its {} KV heads over "
                        "tensor_parallel_size {}",
                        m.name, m.num_key_value_heads, tp));
    }
    const bool interleaved =
        std::set<std::string>(a.layer_types.begin(), a.layer_types.end()).size() > 1;
    if (type == "qwen2" && interleaved)
      throw ConfigError(fmt::format(
          "{}: vLLM's qwen2 refuses a sliding window on some layers only (max_window_layers < "
          "num_hidden_layers)",
          m.name));
    // CacheConfig.sliding_window: the model's window, unless layer kinds are interleaved.
    const std::int64_t model_window = interleaved ? 0 : m.sliding_window.value_or(0);
    const std::int64_t config_window = a.config_sliding_window.value_or(0);
    const auto is = [&](std::int64_t i, std::string_view t) {
      return !a.layer_types.empty() && a.layer_types[static_cast<std::size_t>(i)] == t;
    };
    for (std::int64_t i = 0; i < m.num_hidden_layers; ++i) {
      if (type == "qwen3_next" && is(i, "linear_attention")) {
        out.push_back({layer_name(m, i, true), gdn_spec(m, o)});
        continue;
      }
      LayerKVSpec s;
      s.block_size = o.block_size;
      s.num_kv_heads = m.mla ? 1 : heads;
      s.head_size = s.head_size_v = m.kv_head_size();
      s.dtype = el->first;
      s.dtype_bytes = el->second;
      s.kv_quant_mode = kv_quant_mode_of(o.kv_cache_dtype);
      std::int64_t window = 0;  // per_layer_sliding_window, else the model's
      if (type == "gpt_oss")
        window = i % 2 == 0 ? config_window : 0;
      else if (type.starts_with("gemma3") || type == "llama" || type == "mistral" ||
               type == "mixtral" || type.empty())
        window = is(i, "sliding_attention") ? config_window : 0;
      if (window == 0) window = model_window;
      if (m.mla) {
        s.kind = KVSpecKind::kMLA;
        s.cache_dtype_str = o.kv_cache_dtype;
      } else if (type.starts_with("llama4") && a.attention_chunk_size > 0 &&
                 a.no_rope_layers[static_cast<std::size_t>(i)] != 0) {
        s.kind = KVSpecKind::kChunkedLocal;
        s.attention_chunk_size = a.attention_chunk_size;
      } else if (window > 0) {
        s.kind = KVSpecKind::kSlidingWindow;
        s.sliding_window = window;
      }
      out.push_back({layer_name(m, i, false), std::move(s)});
    }
    if (o.rules == KVSizingRules::kV020Hybrid)
      align_hybrid_block_size(out, o.block_size, o.mamba_cache_mode, m.mamba_chunk_size);
  }
  return out;
}

}  // namespace kvsim
