#include "core/common/kv_cache_spec.h"

#include <algorithm>
#include <cstdint>

#include "core/common/assert.h"

namespace kvsim {

std::int64_t sat_mul(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return INT64_MAX;
  return r;
}

std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return INT64_MAX;
  return r;
}

std::int64_t torch_dtype_bytes(std::string_view name) {
  if (name.starts_with("torch.")) name.remove_prefix(6);
  if (name == "float32" || name == "float") return 4;
  if (name == "float64" || name == "double") return 8;
  if (name == "bfloat16" || name == "float16" || name == "half") return 2;
  if (name == "uint8" || name == "int8" || name == "float8_e4m3fn" || name == "float8_e5m2")
    return 1;
  return 0;
}

KVQuantMode kv_quant_mode_of(std::string_view d) {
  if (d == "int8_per_token_head") return KVQuantMode::kInt8PerTokenHead;
  if (d == "fp8_per_token_head") return KVQuantMode::kFp8PerTokenHead;
  if (d == "nvfp4") return KVQuantMode::kNvfp4;
  if (d.starts_with("fp8")) return KVQuantMode::kFp8PerTensor;
  return KVQuantMode::kNone;
}

const char* kv_quant_mode_name(KVQuantMode m) {
  switch (m) {
    case KVQuantMode::kNone:
      return "NONE";
    case KVQuantMode::kFp8PerTensor:
      return "FP8_PER_TENSOR";
    case KVQuantMode::kInt8PerTokenHead:
      return "INT8_PER_TOKEN_HEAD";
    case KVQuantMode::kFp8PerTokenHead:
      return "FP8_PER_TOKEN_HEAD";
    case KVQuantMode::kNvfp4:
      return "NVFP4";
  }
  return "NONE";
}

const char* spec_class_name(KVSpecKind k) {
  switch (k) {
    case KVSpecKind::kFull:
      return "FullAttentionSpec";
    case KVSpecKind::kSlidingWindow:
      return "SlidingWindowSpec";
    case KVSpecKind::kChunkedLocal:
      return "ChunkedLocalAttentionSpec";
    case KVSpecKind::kMLA:
      return "MLAAttentionSpec";
    case KVSpecKind::kMamba:
      return "MambaSpec";
  }
  return "?";
}

std::int64_t real_page_size_bytes(const LayerKVSpec& s) {
  const std::int64_t bs = s.block_size, heads = s.num_kv_heads, el = s.dtype_bytes;
  switch (s.kind) {
    case KVSpecKind::kFull:
      if (s.kv_quant_mode == KVQuantMode::kNvfp4) {
        // fp4 data (2 values per byte) + one fp8 scale per 16 elements, for K and for V.
        const std::int64_t last =
            s.head_size / 2 + s.head_size / 16 + s.head_size_v / 2 + s.head_size_v / 16;
        return bs * heads * last * el;
      }
      return bs * heads * (s.head_size + s.head_size_v) * el;
    case KVSpecKind::kSlidingWindow:
      return bs * heads * (s.head_size + s.head_size_v) * el;
    case KVSpecKind::kChunkedLocal:
      return 2 * bs * heads * s.head_size * el;
    case KVSpecKind::kMLA:
      if (s.cache_dtype_str == "fp8_ds_mla") return bs * 656;  // 512 fp8 + 4 scales + 64 rope
      return bs * heads * s.head_size * el;
    case KVSpecKind::kMamba: {
      KVSIM_ASSERT(s.shapes.size() == s.dtypes.size());
      std::int64_t bytes = 0;
      for (std::size_t i = 0; i < s.shapes.size(); ++i) {
        std::int64_t n = torch_dtype_bytes(s.dtypes[i]);
        for (const std::int64_t d : s.shapes[i]) n *= d;
        bytes += n;
      }
      return bytes;
    }
  }
  return 0;
}

std::int64_t page_size_bytes(const LayerKVSpec& s) {
  std::int64_t real = real_page_size_bytes(s);
  if (is_attention(s.kind) && (s.kv_quant_mode == KVQuantMode::kInt8PerTokenHead ||
                               s.kv_quant_mode == KVQuantMode::kFp8PerTokenHead))
    real += 2 * s.block_size * s.num_kv_heads * 4;  // one float32 scale per token, head, K/V
  if (s.page_size_padded > 0) {
    KVSIM_ASSERT(s.page_size_padded >= real);
    return s.page_size_padded;
  }
  return real;
}

std::int64_t max_blocks_per_request(const LayerKVSpec& s, const RequestLimits& r) {
  switch (s.kind) {
    case KVSpecKind::kFull:
    case KVSpecKind::kMLA:
      return cdiv(r.max_model_len, s.block_size);
    case KVSpecKind::kSlidingWindow:
      // The last window - 1 computed tokens plus one chunk, never more than max_model_len; +1
      // because the window need not start at a block boundary.
      return cdiv(std::min(s.sliding_window - 1 + r.max_num_batched_tokens, r.max_model_len),
                  s.block_size) +
             1;
    case KVSpecKind::kChunkedLocal:
      return cdiv(std::min(s.attention_chunk_size + r.max_num_batched_tokens, r.max_model_len),
                  s.block_size);
    case KVSpecKind::kMamba:
      switch (r.mamba_cache_mode) {
        case MambaCacheMode::kAll:
          return cdiv(r.max_model_len, s.block_size);
        case MambaCacheMode::kAlign:
          return 2 + s.num_speculative_blocks;
        case MambaCacheMode::kNone:
          return 1 + s.num_speculative_blocks;
      }
  }
  return 0;
}

std::int64_t max_memory_usage_bytes(const LayerKVSpec& s, const RequestLimits& r) {
  return sat_mul(max_blocks_per_request(s, r), page_size_bytes(s));
}

}  // namespace kvsim
