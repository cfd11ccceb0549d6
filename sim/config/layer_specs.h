#pragma once
// Per-layer KV cache specs (core/common/kv_cache_spec.h) from a Hugging Face config.json, as
// vLLM v0.20.1's model classes build their attention layers (see the shared spec
// vllm-0.20-kv-sizing.md, sections 2-3):
//   llama, mistral, mixtral   full attention; a window on the layers `layer_types` marks
//                             "sliding_attention", or on every layer when the config has a
//                             sliding_window and no mixed layer_types (Mistral v0.1)
//   qwen2, qwen3, qwen3_moe   full attention; use_sliding_window: false (the default) means no
//                             window; with it, the window applies to every layer (qwen2 refuses
//                             max_window_layers < num_hidden_layers, qwen3 then has none)
//   opt                       full attention
//   gemma3, gemma3_text       a window on the "sliding_attention" layers; layer_types from
//                             sliding_window_pattern (default 6: layer i is full iff
//                             (i + 1) % 6 == 0); transformers' text defaults fill text_config
//   gpt_oss                   a window on even layer indices; KV heads total / tp
//   deepseek_v2, deepseek_v3  MLA: one latent head of kv_lora_rank + qk_rope_head_dim
//   llama4, llama4_text       chunked local attention (attention_chunk_size) on the rope layers,
//                             full attention on the no-rope ones (no_rope_layers[i] == 0; default
//                             from no_rope_layer_interval 4)
//   qwen3_next                gated delta net (mamba) state on the linear-attention layers, full
//                             attention on every full_attention_interval-th (default 4)
//   (no model_type)           as llama (an inline YAML model)
// KV heads per worker: max(1, num_key_value_heads / tp). A config may instead list its layers in
// `layers:` (per worker, as vLLM reports them): see parse_layer_list.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/common/kv_cache_spec.h"
#include "core/common/kv_pool_sizing.h"
#include "sim/config/model_json.h"

namespace kvsim {

struct ModelConfig;

/// The config.json fields that decide each layer's KV spec (ModelConfig::attention).
struct AttentionLayout {
  bool multimodal = false;  // the text model sits in text_config (layer names "language_model.")
  std::vector<std::string> layer_types;  // one per layer when the config gives or implies them
  std::optional<std::int64_t> config_sliding_window;  // the window layers with one get
  std::int64_t attention_chunk_size = 0;              // Llama 4
  std::vector<std::int64_t> no_rope_layers;           // Llama 4: 0 = no rope (full attention)
  // Qwen3-Next gated delta net.
  std::int64_t linear_conv_kernel_dim = 0, linear_key_head_dim = 0, linear_value_head_dim = 0;
  std::int64_t linear_num_key_heads = 0, linear_num_value_heads = 0;
  // An explicit `layers:` list replaces everything above (checked when the config is read).
  std::vector<nlohmann::json> explicit_layers;
};

/// The model types whose layers kvsim derives, comma-separated (for messages).
[[nodiscard]] const char* supported_model_types();

/// Reads the fields above from the effective config object (text_config overlaid) into
/// `m.attention`, and checks model_type and the lengths of layer lists. `m`'s scalar fields
/// (layers, heads, window, ...) must already be read.
void parse_attention_layout(const nlohmann::json& e, bool multimodal, const detail::ErrorAt& err,
                            ModelConfig& m);

/// How the engine is configured, as far as the layer specs depend on it.
struct KVLayerOptions {
  std::int64_t tensor_parallel_size = 1;
  std::int64_t block_size = 16;
  std::string kv_cache_dtype = "auto";               // vLLM's --kv-cache-dtype
  std::int64_t max_model_len = 8192;                 // mamba block size (mamba_cache_mode "none")
  KVSizingRules rules = KVSizingRules::kV020Hybrid;  // v0.20 aligns hybrid block sizes
  MambaCacheMode mamba_cache_mode = MambaCacheMode::kNone;  // as chosen (sim/config/mamba_cache.h)
};

/// The KV cache specs of every layer on one worker, in model order, named as vLLM names them.
/// For a model with mamba layers (v0.20 rules), the attention block size is raised until an
/// attention page holds a mamba state, and the state page is padded to it
/// (Platform._align_hybrid_block_size, kernel block alignment 16); with mamba_cache_mode 'all'
/// the raised size is a multiple of lcm(the model's mamba_chunk_size, the alignment). A mamba
/// block holds max_model_len tokens in mode 'none', the attention block size in 'align', that
/// raised size in 'all' (an explicit `layers:` list: the block_size it gives, else the attention
/// block size). Throws ConfigError on a combination vLLM refuses (gpt-oss with more workers than
/// KV heads, an indivisible state).
[[nodiscard]] std::vector<NamedLayerSpec> model_layer_specs(const ModelConfig& m,
                                                            const KVLayerOptions& o);

/// True when the model has mamba layers (Qwen3-Next's linear attention, or `mamba` entries of an
/// explicit list): vLLM's is_hybrid or attention-free mamba models.
[[nodiscard]] bool has_mamba_layers(const ModelConfig& m);

/// True when the model mixes sliding-window and full-attention layers (gpt-oss, Gemma 3): a
/// release with one KV cache type (vLLM v0.8.5's unify_hybrid_kv_cache_specs) then treats every
/// layer as full attention.
[[nodiscard]] bool mixes_sliding_and_full(const AttentionLayout& a);

/// True when vLLM switches the hybrid KV cache manager off by default for this model (it has
/// chunked local attention: config/vllm.py:1266).
[[nodiscard]] bool hybrid_manager_off_by_default(const ModelConfig& m);

/// The cache element of --kv-cache-dtype `d` for a model of dtype `model_dtype`: torch dtype name
/// and bytes ("auto" -> the model's; fp8* -> uint8; float32 models -> bfloat16). nullopt when
/// vLLM v0.20.1 does not know `d`.
[[nodiscard]] std::optional<std::pair<std::string, std::int64_t>> kv_cache_element(
    std::string_view d, const std::string& model_dtype);

/// One layer of an explicit list (the `layers` of a kv-size case or a model section): type
/// (full | sliding_window | chunked_local | mla | mamba), num_kv_heads, head_size, dtype,
/// sliding_window, attention_chunk_size, cache_dtype_str, kv_cache_dtype, shapes, dtypes,
/// block_size, page_size_padded, mamba_type, num_speculative_blocks; `defaults` supplies what a
/// layer leaves out (block_size, dtype). Throws ConfigError naming `where`.
[[nodiscard]] LayerKVSpec parse_layer_spec(const nlohmann::json& layer, const LayerKVSpec& defaults,
                                           const std::string& where, const detail::ErrorAt& err);

}  // namespace kvsim
