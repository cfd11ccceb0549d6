#pragma once
// The model facts the simulator needs, read from a Hugging Face config.json or an inline YAML
// block.
//
// Fields read (HF names; a multimodal config's `text_config` object is read in preference to the
// top level): num_hidden_layers, num_attention_heads, num_key_value_heads (default: attention
// heads), head_dim (default: hidden_size / num_attention_heads), hidden_size, intermediate_size (or
// OPT's ffn_dim), vocab_size, max_position_embeddings, torch_dtype or dtype, tie_word_embeddings,
// sliding_window (ignored when use_sliding_window is false), model_type, architectures (vLLM's
// model class: whether it supports mamba prefix caching), mamba_chunk_size or chunk_size, MLA
// (kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, q_lora_rank), MoE
// (n_routed_experts or num_local_experts or num_experts, num_experts_per_tok,
// moe_intermediate_size, n_shared_experts, first_k_dense_replace, shared_expert_intermediate_size),
// quantization_config (sim/config/weights.h), num_parameters, rope_scaling (the derived maximum
// length), and what decides each layer's KV spec (layer_types, sliding_window_pattern,
// attention_chunk_size, no_rope_layers, linear attention, or an explicit `layers` list:
// sim/config/layer_specs.h). Gemma 3's text_config gets transformers' defaults for the fields it
// leaves out (the public 27B config has no vocab_size).
//
// Parameter count, when no num_parameters field is given (biases and norms are left out; they are
// well under 0.1% of every model above 100M parameters):
// clang-format off
//   embeddings  = vocab * hidden * (tied ? 1 : 2)  (+ max_position_embeddings * hidden, OPT/GPT-2)
//   attention   = hidden * (H + 2 * Hkv) * d + H * d * hidden            per layer (MHA/GQA)
//               = hidden * q_lora + q_lora * H * (nope + rope)           per layer (MLA; without
//                 + hidden * (kv_lora + rope) + kv_lora * H * (nope + v)   q_lora: hidden * H *
//                 + H * v * hidden                                         (nope + rope))
//   mlp         = (gated ? 3 : 2) * hidden * intermediate                per dense layer
//   moe         = (experts + shared) * 3 * hidden * moe_intermediate + hidden * experts
//                                                                        per MoE layer (a shared
//                 expert of shared_expert_intermediate_size counts 3 * hidden * that instead;
//                 llama4 has one shared expert of moe_intermediate)
// clang-format on
// gated MLP (gate, up, down) for every model_type except opt, gpt2, gpt_neox, gptj, bloom, falcon,
// phi; override with `gated_mlp`. MoE layers are all layers after the first first_k_dense_replace.
// Active parameters count only num_experts_per_tok routed experts (plus shared ones) per MoE layer.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/kv_sizing.h"
#include "sim/common/yaml_util.h"
#include "sim/config/layer_specs.h"
#include "sim/config/weights.h"

namespace kvsim {

struct ModelConfig {
  std::string name;         // the file's stem, or `name` from YAML
  std::string config_file;  // the config.json read (resolved path); empty for an inline model
  std::string model_type;   // "llama", "qwen2", "opt", "deepseek_v3", ...
  /// config.json's `architectures`: vLLM's model class is the first (model_config.architecture).
  std::vector<std::string> architectures;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // total, before tensor parallelism
  std::int64_t head_dim = 0;             // per attention head (MLA: qk_nope + qk_rope)
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;  // dense MLP width
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  std::string dtype = "bfloat16";  // activations and (by default) the KV cache
  std::int64_t dtype_bytes = 2;
  double weight_bytes_per_param = 2;  // per expert (or, dense, linear-layer) parameter: weights
  WeightFormat weights;               // the checkpoint format (sim/config/weights.h)
  bool tie_word_embeddings = false;
  bool gated_mlp = true;
  std::optional<std::int64_t> sliding_window;  // the model-level window (none unless
                                               // use_sliding_window for Qwen)
  std::int64_t derived_max_model_len = 0;  // vLLM's default max_model_len (rope scaling applied)
  AttentionLayout attention;               // per-layer attention (sim/config/layer_specs.h)
  /// vLLM's get_mamba_chunk_size (config/model.py:1331): mamba_chunk_size, else chunk_size, else
  /// 2048. Aligns the block sizes of mamba_cache_mode 'all'.
  std::int64_t mamba_chunk_size = 2048;
  // MLA (DeepSeek-V2/V3): one latent KV "head" of kv_lora_rank + qk_rope_head_dim per token.
  bool mla = false;
  std::int64_t kv_lora_rank = 0, qk_rope_head_dim = 0, qk_nope_head_dim = 0, v_head_dim = 0;
  std::int64_t q_lora_rank = 0;
  // Mixture of experts (0 experts: dense).
  std::int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  std::int64_t num_shared_experts = 0, first_k_dense_replace = 0;
  std::int64_t shared_expert_intermediate_size = 0;  // Qwen-MoE style shared expert width
  std::int64_t num_parameters = 0;                   // total (what the weights occupy)
  std::int64_t num_active_parameters = 0;            // used per token (MoE: top-k experts only)
  bool num_parameters_estimated = true;              // false when the config gave num_parameters

  /// vLLM's model_config.architecture: the first of `architectures` ("" when none is given).
  [[nodiscard]] std::string architecture() const;
  /// True when that architecture's vLLM class declares SupportsMambaPrefixCaching
  /// (sim/config/mamba_cache.h; false without an architecture).
  [[nodiscard]] bool supports_mamba_prefix_caching() const;
  /// Elements per KV head: kv_lora_rank + qk_rope_head_dim for MLA, else head_dim.
  [[nodiscard]] std::int64_t kv_head_size() const;
  /// The per-rank KV cache shape at this block size and tensor parallelism. kv_dtype_bytes = 0
  /// means the model's dtype (vLLM's cache_dtype "auto").
  [[nodiscard]] KVCacheSpec kv_cache_spec(std::int64_t block_size, std::int64_t tp,
                                          std::int64_t kv_dtype_bytes = 0) const;
  /// Bytes of weights in total (all ranks), by the format's formula (sim/config/weights.h).
  [[nodiscard]] std::int64_t weight_bytes() const;
};

/// Bytes of one element of a dtype name (bfloat16, float16, half, float32, float, fp8, fp8_e4m3,
/// fp8_e5m2, float8_e4m3fn, ...); nullopt when unknown. Also accepts the "torch." prefix.
[[nodiscard]] std::optional<std::int64_t> dtype_bytes_of(std::string_view dtype);

/// Estimated (total, active) parameter counts by the formula in this header's comment.
[[nodiscard]] std::pair<std::int64_t, std::int64_t> estimate_num_parameters(const ModelConfig& m);

/// Parses config.json text; `file` names it in messages (JSON syntax errors give file:line:col).
[[nodiscard]] ModelConfig parse_model_config_json(const std::string& text, const std::string& file);
/// Reads a config.json file.
[[nodiscard]] ModelConfig load_model_config_file(const std::string& path);
/// Reads the scenario's `model:` section: {config: PATH} and/or inline HF fields (inline fields
/// override the file's), plus `name`, `gated_mlp`. A config file that does not exist is an error
/// at the `config:` key naming the path.
[[nodiscard]] ModelConfig load_model_config(const YAML::Node& model, const YamlContext& ctx);
/// The resolved `model:` section: `config` (the file read, null for none), `name`, and every field
/// the simulator uses as inline fields with the value used (null for an absent sliding_window, and
/// for num_parameters when it is estimated); load_model_config of it gives `m` back.
[[nodiscard]] YAML::Node model_config_yaml(const ModelConfig& m);

}  // namespace kvsim
