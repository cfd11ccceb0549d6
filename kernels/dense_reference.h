#pragma once
// Dense attention reference (Eigen): contiguous per-sequence Q/K/V, no paging, no online softmax.
// Deliberately shares no code with the paged fast paths.

#include <cstdint>
#include <vector>

namespace kvsim::kernels {

/// One sequence's contiguous operands, upcast to float (exact for fp16/bf16 inputs).
struct dense_sequence {
  const float* q = nullptr;  // [q_len, num_q_heads, head_size]
  const float* k = nullptr;  // [kv_len, num_kv_heads, head_size]
  const float* v = nullptr;  // [kv_len, num_kv_heads, head_size]
  std::int32_t q_len = 0;    // the last q_len of the kv_len tokens (bottom-right causal)
  std::int32_t kv_len = 0;
};

/// Attention of one sequence in `Scalar` (float or double) precision: S = scale * Q K^T per head,
/// bottom-right causal mask (query i sees keys <= i + kv_len - q_len), two-pass softmax, O = P V,
/// GQA with kv_head = q_head / (num_q_heads / num_kv_heads). Rows with no visible key give 0.
/// Returns `[q_len, num_q_heads, head_size]` as float.
template <typename Scalar>
std::vector<float> dense_attention_reference(const dense_sequence& seq, int num_q_heads,
                                             int num_kv_heads, int head_size, float scale);

extern template std::vector<float> dense_attention_reference<float>(const dense_sequence&, int,
                                                                    int, int, float);
extern template std::vector<float> dense_attention_reference<double>(const dense_sequence&, int,
                                                                     int, int, float);

}  // namespace kvsim::kernels
