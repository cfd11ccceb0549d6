#pragma once
// The KV cache format of one attention-like layer, as vLLM v0.20.1 describes it
// (vllm/v1/kv_cache_interface.py): one struct for the spec classes FullAttentionSpec,
// SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec and MambaSpec, told apart by
// `kind`. Pure arithmetic: no I/O.
//
// Page bytes (one block of one layer; `page_size_padded`, when set, replaces the result):
//   Full, SlidingWindow     block_size * kv_heads * (head_size + head_size_v) * dtype_bytes
//   Full with nvfp4         block_size * kv_heads * (h/2 + h/16 + hv/2 + hv/16) * dtype_bytes
//   ChunkedLocal            2 * block_size * kv_heads * head_size * dtype_bytes
//   MLA                     block_size * kv_heads(1) * head_size * dtype_bytes; fp8_ds_mla:
//   block_size * 656 Mamba                   sum over state tensors of prod(shape) * dtype_bytes
//   (no block_size)
//   + 2 * block_size * kv_heads * 4 for the per-token-head quantized caches (attention kinds).
// What one request of max_model_len tokens can hold (max_memory_usage_bytes), in blocks:
//   Full, MLA               cdiv(max_model_len, block_size)
//   SlidingWindow           cdiv(min(window - 1 + max_num_batched_tokens, max_model_len),
//   block_size) + 1 ChunkedLocal            cdiv(min(chunk + max_num_batched_tokens,
//   max_model_len), block_size) Mamba                   1 (+ speculative blocks; "align": 2 + ...;
//   "all": like Full)
// The sliding-window and chunked-local counts are also the managers' per-request admission caps.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/types.h"

namespace kvsim {

/// Which vLLM spec class a layer has.
enum class KVSpecKind : std::uint8_t { kFull, kSlidingWindow, kChunkedLocal, kMLA, kMamba };

/// vLLM's KVQuantMode (kv_cache_interface.py get_kv_quant_mode), from the --kv-cache-dtype string.
enum class KVQuantMode : std::uint8_t {
  kNone,
  kFp8PerTensor,
  kInt8PerTokenHead,
  kFp8PerTokenHead,
  kNvfp4
};

/// vLLM's --mamba-cache-mode: how many state blocks a request keeps.
enum class MambaCacheMode : std::uint8_t { kNone, kAlign, kAll };

/// One layer's KV cache format. Fields a kind does not use stay at their defaults, so two specs
/// compare equal exactly when vLLM's dataclasses do.
struct LayerKVSpec {
  KVSpecKind kind = KVSpecKind::kFull;
  std::int64_t block_size = 16;  // tokens per block (Mamba: max_model_len without prefix caching)
  // Attention kinds.
  std::int64_t num_kv_heads = 0;   // on one worker (MLA: 1)
  std::int64_t head_size = 0;      // MLA: kv_lora_rank + qk_rope_head_dim
  std::int64_t head_size_v = 0;    // Full and SlidingWindow: equals head_size
  std::string dtype = "bfloat16";  // torch dtype name of a cache element ("uint8" for fp8 caches)
  std::int64_t dtype_bytes = 2;
  KVQuantMode kv_quant_mode = KVQuantMode::kNone;
  std::int64_t sliding_window = 0;        // SlidingWindow; Full after unification (0: none)
  std::int64_t attention_chunk_size = 0;  // ChunkedLocal; Full after unification (0: none)
  std::string cache_dtype_str;            // MLA: the --kv-cache-dtype string ("auto", ...)
  // Mamba.
  std::vector<std::vector<std::int64_t>> shapes;  // one shape per state tensor
  std::vector<std::string> dtypes;                // torch dtype name per state tensor
  std::string mamba_type;                         // "mamba2", "gdn_attention", ...
  std::int64_t num_speculative_blocks = 0;
  // Any kind.
  std::int64_t page_size_padded = 0;  // 0: no padding

  bool operator==(const LayerKVSpec&) const = default;
};

/// A spec with the layer it belongs to (vLLM's dict[layer_name, KVCacheSpec] entries, in order).
struct NamedLayerSpec {
  std::string name;
  LayerKVSpec spec;
};

/// Bytes of one element of a torch dtype name (float32, float, float16, half, bfloat16, uint8,
/// int8, float8_e4m3fn, float8_e5m2, float64); 0 when unknown.
[[nodiscard]] std::int64_t torch_dtype_bytes(std::string_view name);
/// The quantization mode vLLM derives from a --kv-cache-dtype string.
[[nodiscard]] KVQuantMode kv_quant_mode_of(std::string_view cache_dtype);
/// vLLM's enum member name: "NONE", "FP8_PER_TENSOR", "INT8_PER_TOKEN_HEAD", ...
[[nodiscard]] const char* kv_quant_mode_name(KVQuantMode m);
/// vLLM's class name of a spec: "FullAttentionSpec", "SlidingWindowSpec", ...
[[nodiscard]] const char* spec_class_name(KVSpecKind k);
/// True for the attention kinds (everything but Mamba).
[[nodiscard]] inline bool is_attention(KVSpecKind k) { return k != KVSpecKind::kMamba; }

/// Bytes of one block of this layer before padding. O(state tensors).
[[nodiscard]] std::int64_t real_page_size_bytes(const LayerKVSpec& s);
/// Bytes of one block of this layer: the padded size when set, else the real size plus the
/// per-token-head scale bytes of the attention kinds.
[[nodiscard]] std::int64_t page_size_bytes(const LayerKVSpec& s);

/// The request-shape limits a spec's need depends on.
struct RequestLimits {
  std::int64_t max_model_len = 8192;
  std::int64_t max_num_batched_tokens = 8192;
  MambaCacheMode mamba_cache_mode = MambaCacheMode::kNone;
};

/// Blocks of this layer one request can hold at most (the per-request admission cap).
[[nodiscard]] std::int64_t max_blocks_per_request(const LayerKVSpec& s, const RequestLimits& r);
/// vLLM's max_memory_usage_bytes: max_blocks_per_request * page_size_bytes.
[[nodiscard]] std::int64_t max_memory_usage_bytes(const LayerKVSpec& s, const RequestLimits& r);

/// a * b and a + b for non-negative operands, saturating at INT64_MAX (sizes of absurd inputs
/// must compare as "too large", not wrap).
[[nodiscard]] std::int64_t sat_mul(std::int64_t a, std::int64_t b);
[[nodiscard]] std::int64_t sat_add(std::int64_t a, std::int64_t b);
/// ceil(a / b) for a >= 0, b > 0, without overflow at INT64_MAX (a saturated size).
[[nodiscard]] constexpr std::int64_t sat_cdiv(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

}  // namespace kvsim
