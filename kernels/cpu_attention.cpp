#include "kernels/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/check.h"

namespace kvsim::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

template <typename T>
float to_f(T x);
template <>
float to_f<float>(float x) { return x; }
template <>
float to_f<half_bits>(half_bits x) { return half_to_float(x); }
template <>
float to_f<bf16_bits>(bf16_bits x) { return bf16_to_float(x); }

template <typename T>
T from_f(float x);
template <>
float from_f<float>(float x) { return x; }
template <>
half_bits from_f<half_bits>(float x) { return float_to_half(x); }
template <>
bf16_bits from_f<bf16_bits>(float x) { return float_to_bf16(x); }

void check_view(const paged_kv_view& kv) {
  KVSIM_KERNELS_CHECK(kv.pool != nullptr, "pool is null");
  KVSIM_KERNELS_CHECK(kv.block_size > 0 && kv.num_kv_heads > 0 && kv.head_size > 0, "bad shape");
}

template <typename T>
void paged_attention_impl(const paged_kv_view& kv, const attention_queries& queries,
                          const T* __restrict q, T* __restrict out) {
  const int hq = queries.num_q_heads;
  const int hkv = kv.num_kv_heads;
  const int d = kv.head_size;
  const int group = hq / hkv;
  const T* pool = static_cast<const T*>(kv.pool);
  const float q_scale = queries.scale * kLog2e;  // scores in the log2 domain, as on the GPU
  std::vector<float> qf(static_cast<std::size_t>(d));
  std::vector<float> acc(static_cast<std::size_t>(d));
  for (int s = 0; s < kv.num_seqs; ++s) {
    const std::int64_t row_begin = queries.q_indptr ? queries.q_indptr[s] : s;
    const std::int64_t row_end = queries.q_indptr ? queries.q_indptr[s + 1] : s + 1;
    const std::int64_t q_len = row_end - row_begin;
    const std::int64_t kv_len = kv.seq_lens[s];
    KVSIM_KERNELS_CHECK((q_len >= 0 && q_len <= kv_len) || (kv_len == 0 && q_len <= 1),
                        "sequence " + std::to_string(s) + ": q_len " + std::to_string(q_len) +
                            " > seq_len " + std::to_string(kv_len));
    for (std::int64_t row = row_begin; row < row_end; ++row) {
      const std::int64_t visible = std::max<std::int64_t>(0, kv_len - q_len + (row - row_begin) + 1);
      for (int h = 0; h < hq; ++h) {
        const int kvh = h / group;
        const T* qrow = q + (row * hq + h) * d;
        for (int i = 0; i < d; ++i) qf[i] = to_f(qrow[i]) * q_scale;
        std::fill(acc.begin(), acc.end(), 0.0f);
        float m = -std::numeric_limits<float>::infinity();
        float l = 0.0f;
        for (std::int64_t t = 0; t < visible; ++t) {
          const T* krow = pool + kv.offset(0, s, t, kvh);
          const T* vrow = pool + kv.offset(1, s, t, kvh);
          float score = 0.0f;
          for (int i = 0; i < d; ++i) score += qf[i] * to_f(krow[i]);
          const float m_new = std::max(m, score);
          const float correction = std::exp2(m - m_new);
          const float p = std::exp2(score - m_new);
          l = l * correction + p;
          for (int i = 0; i < d; ++i) acc[i] = acc[i] * correction + p * to_f(vrow[i]);
          m = m_new;
        }
        T* orow = out + (row * hq + h) * d;
        const float inv_l = visible > 0 ? 1.0f / l : 0.0f;
        for (int i = 0; i < d; ++i) orow[i] = from_f<T>(visible > 0 ? acc[i] * inv_l : 0.0f);
      }
    }
  }
}

template <typename T>
void write_kv_impl(const paged_kv_view& kv, const T* key, const T* value,
                   const std::int64_t* slot_mapping, std::int64_t num_tokens) {
  T* pool = static_cast<T*>(kv.pool);
  const std::int64_t num_slots = std::int64_t{kv.num_blocks} * kv.block_size;
  const int d = kv.head_size;
  for (std::int64_t i = 0; i < num_tokens; ++i) {
    const std::int64_t slot = slot_mapping[i];
    if (slot < 0) continue;
    KVSIM_KERNELS_CHECK(slot < num_slots, "slot " + std::to_string(slot) + " out of range");
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      const std::int64_t src = (i * kv.num_kv_heads + h) * d;
      std::copy(key + src, key + src + d, pool + kv.slot_offset(0, slot, h));
      std::copy(value + src, value + src + d, pool + kv.slot_offset(1, slot, h));
    }
  }
}

}  // namespace

void cpu_write_kv(const paged_kv_view& kv, const void* key, const void* value,
                  const std::int64_t* slot_mapping, std::int64_t num_tokens) {
  check_view(kv);
  switch (kv.dtype) {
    case DType::kF32:
      return write_kv_impl(kv, static_cast<const float*>(key), static_cast<const float*>(value),
                           slot_mapping, num_tokens);
    case DType::kF16:
      return write_kv_impl(kv, static_cast<const half_bits*>(key),
                           static_cast<const half_bits*>(value), slot_mapping, num_tokens);
    case DType::kBF16:
      return write_kv_impl(kv, static_cast<const bf16_bits*>(key),
                           static_cast<const bf16_bits*>(value), slot_mapping, num_tokens);
  }
}

void cpu_paged_attention(const paged_kv_view& kv, const attention_queries& queries, const void* q,
                         void* out) {
  check_view(kv);
  KVSIM_KERNELS_CHECK(queries.num_q_heads > 0 && queries.num_q_heads % kv.num_kv_heads == 0,
                      "num_q_heads must be a multiple of num_kv_heads");
  switch (kv.dtype) {
    case DType::kF32:
      return paged_attention_impl(kv, queries, static_cast<const float*>(q),
                                  static_cast<float*>(out));
    case DType::kF16:
      return paged_attention_impl(kv, queries, static_cast<const half_bits*>(q),
                                  static_cast<half_bits*>(out));
    case DType::kBF16:
      return paged_attention_impl(kv, queries, static_cast<const bf16_bits*>(q),
                                  static_cast<bf16_bits*>(out));
  }
}

}  // namespace kvsim::kernels
