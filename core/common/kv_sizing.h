#pragma once
// The uniform KV cache shape (every layer full attention, as vLLM v0.7.2 sizes it; the latency
// model's bytes per token). Per-layer specs and the sizing rules of each release are in
// kv_cache_spec.h and kv_pool_sizing.h. As vLLM V1 does it (vllm/v1/core/kv_cache_utils.py,
// vllm/v1/kv_cache_interface.py):
//   page bytes per layer = coef * block_size * num_kv_heads * head_size * dtype_bytes
//     coef = 2 (a K and a V page), or 1 for MLA, whose one latent "head" has
//     head_size = kv_lora_rank + qk_rope_head_dim;
//   num_gpu_blocks = available_bytes // page_bytes_per_layer // num_layers   (integer division).
// Tensor parallelism divides the KV heads as vLLM's ModelConfig.get_num_kv_heads does:
// max(1, total_kv_heads // tp), so heads are replicated when tp > total_kv_heads; MLA keeps 1 head.
// Pure arithmetic: no I/O.

#include <cstdint>

namespace kvsim {

/// The shape of one rank's KV cache. All counts are per tensor-parallel rank.
struct KVCacheSpec {
  std::int64_t block_size = 16;   // tokens per block
  std::int64_t num_layers = 0;    // attention layers holding KV
  std::int64_t num_kv_heads = 0;  // KV heads on this rank (1 for MLA)
  std::int64_t head_size = 0;     // elements per head (kv_lora_rank + qk_rope_head_dim for MLA)
  std::int64_t dtype_bytes = 2;   // bytes per element of the KV cache
  bool mla = false;               // MLA: one latent vector per token, no separate V (coef 1)

  /// 2 for K+V, 1 for MLA.
  [[nodiscard]] std::int64_t coef() const { return mla ? 1 : 2; }
  /// Bytes of one block in one layer: coef * block_size * num_kv_heads * head_size * dtype_bytes.
  [[nodiscard]] std::int64_t page_bytes_per_layer() const {
    return coef() * block_size * num_kv_heads * head_size * dtype_bytes;
  }
  /// Bytes of KV one token occupies across all layers on this rank.
  [[nodiscard]] std::int64_t bytes_per_token() const {
    return coef() * num_kv_heads * head_size * dtype_bytes * num_layers;
  }
  /// Bytes of one block across all layers.
  [[nodiscard]] std::int64_t page_bytes_all_layers() const {
    return page_bytes_per_layer() * num_layers;
  }
};

/// KV heads held by one rank: max(1, total_kv_heads / tp) (vLLM's get_num_kv_heads); 1 for MLA.
/// Precondition: total_kv_heads >= 1, tp >= 1.
[[nodiscard]] std::int64_t kv_heads_per_rank(std::int64_t total_kv_heads, std::int64_t tp,
                                             bool mla = false);

/// vLLM V1's block count: available_bytes // page_bytes_per_layer // num_layers (0 when negative).
/// Precondition: spec.page_bytes_per_layer() > 0 and spec.num_layers > 0.
[[nodiscard]] std::int64_t num_gpu_blocks(const KVCacheSpec& spec, std::int64_t available_bytes);

/// The sizing of a pool of blocks.
struct KVCacheSizing {
  std::int64_t page_bytes_per_layer = 0;  // one block in one layer
  std::int64_t bytes_per_token = 0;       // all layers, this rank
  std::int64_t num_gpu_blocks = 0;
  std::int64_t num_token_slots = 0;     // num_gpu_blocks * block_size
  std::int64_t layer_tensor_bytes = 0;  // num_gpu_blocks * page_bytes_per_layer (one per layer)
  std::int64_t total_kv_bytes = 0;      // layer_tensor_bytes * num_layers
};

/// Sizes the pool from `available_bytes` of KV memory on one rank.
[[nodiscard]] KVCacheSizing size_kv_cache(const KVCacheSpec& spec, std::int64_t available_bytes);
/// Sizes the pool from an explicit block count (num_gpu_blocks_override).
[[nodiscard]] KVCacheSizing size_kv_cache_blocks(const KVCacheSpec& spec, std::int64_t num_blocks);

}  // namespace kvsim
