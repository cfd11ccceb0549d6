#pragma once
// CPU backend: paged attention (decode and prefill/append) and the KV write, fp32 math.
// Reads the pool only through the view's block tables; shares no code with the dense reference.

#include <cstdint>

#include "kernels/paged_kv.h"

namespace kvsim::kernels {

/// vLLM's reshape_and_cache: stores key/value `[num_tokens, num_kv_heads, head_size]` (the view's
/// dtype, host memory) into pool slots `slot_mapping[num_tokens]` (slot = block_id * block_size
/// + offset; a negative slot is skipped). O(num_tokens * Hkv * D). Block tables are not used.
void cpu_write_kv(const paged_kv_view& kv, const void* key, const void* value,
                  const std::int64_t* slot_mapping, std::int64_t num_tokens);

/// Paged attention over host memory. `q` and `out` are `[num_q_tokens, num_q_heads, head_size]`
/// in the view's dtype; with `queries.q_indptr == nullptr` there is one query row per sequence
/// (decode). Query i of a q_len chunk attends to keys 0 .. i + seq_len - q_len (bottom-right
/// causal); a row with no visible key (seq_len 0) gets 0. Online softmax in fp32 (exp2).
/// Preconditions (checked, std::invalid_argument): q_len <= seq_len, G = Hq / Hkv integral.
/// O(sum over rows of visible_len * Hq * D).
void cpu_paged_attention(const paged_kv_view& kv, const attention_queries& queries, const void* q,
                         void* out);

}  // namespace kvsim::kernels
