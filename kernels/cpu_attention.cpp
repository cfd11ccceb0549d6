#include "kernels/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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
float to_f<float>(float x) {
  return x;
}
template <>
float to_f<half_bits>(half_bits x) {
  return half_to_float(x);
}
template <>
float to_f<bf16_bits>(bf16_bits x) {
  return bf16_to_float(x);
}

template <typename T>
T from_f(float x);
template <>
float from_f<float>(float x) {
  return x;
}
template <>
half_bits from_f<half_bits>(float x) {
  return float_to_half(x);
}
template <>
bf16_bits from_f<bf16_bits>(float x) {
  return float_to_bf16(x);
}

void check_view(const paged_kv_view& kv) {
  KVSIM_KERNELS_CHECK(kv.pool != nullptr || kv.block_base != nullptr, "pool is null");
  KVSIM_KERNELS_CHECK(kv.block_size > 0 && kv.num_kv_heads > 0 && kv.head_size > 0, "bad shape");
}

// Four floats as one value (GCC/Clang vector extension: a SIMD register on any target).
typedef float Vec4 __attribute__((vector_size(16)));
inline Vec4 load4(const float* p) {
  Vec4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Keys per tile: scores of a tile are one fixed-length loop per head dimension (vectorized), and
// the online-softmax rescale of the accumulator happens once per tile, not once per key.
constexpr std::int64_t kTile = 32;
// Keys gathered (converted to fp32) at a time for one (sequence, KV head): bounds the scratch to
// 2 * kChunk * head_size floats whatever the context length.
constexpr std::int64_t kChunk = 4096;

/// Scratch of one call: K of a chunk transposed per tile ([tile][dim][kTile]), V of a chunk
/// ([token][dim]), and the online-softmax state of each (query row, head of the group).
struct Scratch {
  std::vector<float> kt, v, q, acc, m, l;
  float scores[kTile];
};

/// Converts K and V of tokens [c0, c1) of sequence `s`, KV head `kvh`, to fp32 through the block
/// table: K transposed per tile (zero past c1), V row-major.
template <typename T>
void gather_chunk(const paged_kv_view& kv, int s, int kvh, std::int64_t c0, std::int64_t c1,
                  Scratch& w) {
  const int d = kv.head_size;
  const std::int64_t n = c1 - c0;
  const std::int64_t tiles = (n + kTile - 1) / kTile;
  w.kt.assign(static_cast<std::size_t>(tiles * kTile * d), 0.0f);
  w.v.resize(static_cast<std::size_t>(n * d));
  const std::int32_t* table =
      kv.block_tables + static_cast<std::int64_t>(s) * kv.max_blocks_per_seq;
  for (std::int64_t t = c0; t < c1; ++t) {
    const std::int64_t block = table[t / kv.block_size];
    const T* krow = kv.element<const T>(0, block, t % kv.block_size, kvh);
    const T* vrow = kv.element<const T>(1, block, t % kv.block_size, kvh);
    const std::int64_t i = t - c0;
    float* kdst = w.kt.data() + (i / kTile) * kTile * d + i % kTile;
    float* vdst = w.v.data() + i * d;
    for (int e = 0; e < d; ++e) {
      kdst[e * kTile] = to_f(krow[e]);
      vdst[e] = to_f(vrow[e]);
    }
  }
}

/// One query head of one row over keys [c0, c1) of the gathered chunk: online softmax in the log2
/// domain, rescaling `acc` once per tile. `qf` is the query times scale * log2(e).
/// A NaN score is never the maximum but makes its exp2 NaN, so a NaN key or value poisons the
/// row's output, as on the GPU; keys at or past c1 are never touched (masked, not multiplied).
void attend_chunk(const float* qf, std::int64_t c0, std::int64_t c1, int d, Scratch& w, float* acc,
                  float& m, float& l) {
  for (std::int64_t t0 = c0; t0 < c1; t0 += kTile) {
    const std::int64_t n = std::min(kTile, c1 - t0);
    const float* kt = w.kt.data() + (t0 - c0) * d;  // tile-aligned: (t0 - c0) % kTile == 0
    float* sc = w.scores;
    {  // the tile's scores in kTile / 4 registers, one independent sum each
      Vec4 s[kTile / 4] = {};
      for (int e = 0; e < d; ++e) {
        const float qe = qf[e];
        const float* ke = kt + e * kTile;
        for (std::int64_t k = 0; k < kTile / 4; ++k) s[k] += qe * load4(ke + 4 * k);
      }
      std::memcpy(sc, s, sizeof s);
    }
    float m_new = m;
    for (std::int64_t j = 0; j < n; ++j) m_new = sc[j] > m_new ? sc[j] : m_new;
    const float correction = std::exp2(m - m_new);  // 0 for the first tile (m = -inf)
    l *= correction;
    for (std::int64_t j = 0; j < n; ++j) {
      sc[j] = std::exp2(sc[j] - m_new);  // the tile's probabilities, in place of its scores
      l += sc[j];
    }
    // acc = acc * correction + P V, 32 (then 4) dimensions at a time in registers that stay there
    // over the tile's keys, one independent sum each (the last d % 4 one by one).
    const float* v = w.v.data() + (t0 - c0) * d;
    int e0 = 0;
    for (; e0 + 32 <= d; e0 += 32) {
      Vec4 a[8];
      for (int k = 0; k < 8; ++k) a[k] = load4(acc + e0 + 4 * k) * correction;
      for (std::int64_t j = 0; j < n; ++j)
        for (int k = 0; k < 8; ++k) a[k] += sc[j] * load4(v + j * d + e0 + 4 * k);
      std::memcpy(acc + e0, a, sizeof a);
    }
    for (; e0 + 4 <= d; e0 += 4) {
      Vec4 a = load4(acc + e0) * correction;
      for (std::int64_t j = 0; j < n; ++j) a += sc[j] * load4(v + j * d + e0);
      std::memcpy(acc + e0, &a, sizeof a);
    }
    for (; e0 < d; ++e0) {
      float a = acc[e0] * correction;
      for (std::int64_t j = 0; j < n; ++j) a += sc[j] * v[j * d + e0];
      acc[e0] = a;
    }
    m = m_new;
  }
}

template <typename T>
void paged_attention_impl(const paged_kv_view& kv, const attention_queries& queries,
                          const T* __restrict q, T* __restrict out) {
  const int hq = queries.num_q_heads;
  const int hkv = kv.num_kv_heads;
  const int d = kv.head_size;
  const int group = hq / hkv;
  const float q_scale = queries.scale * kLog2e;  // scores in the log2 domain, as on the GPU
  Scratch w;
  for (int s = 0; s < kv.num_seqs; ++s) {
    const std::int64_t row_begin = queries.q_indptr ? queries.q_indptr[s] : s;
    const std::int64_t row_end = queries.q_indptr ? queries.q_indptr[s + 1] : s + 1;
    const std::int64_t q_len = row_end - row_begin;
    const std::int64_t kv_len = kv.seq_lens[s];
    KVSIM_KERNELS_CHECK((q_len >= 0 && q_len <= kv_len) || (kv_len == 0 && q_len <= 1),
                        "sequence " + std::to_string(s) + ": q_len " + std::to_string(q_len) +
                            " > seq_len " + std::to_string(kv_len));
    if (q_len == 0) continue;
    // Row r (0-based in the chunk) sees keys [0, kv_len - q_len + r + 1): bottom-right causal.
    const auto visible = [&](std::int64_t r) {
      return std::max<std::int64_t>(0, kv_len - q_len + r + 1);
    };
    const std::int64_t states = q_len * group;  // (row, head of the group), row-major
    for (int kvh = 0; kvh < hkv; ++kvh) {
      w.q.resize(static_cast<std::size_t>(states * d));
      for (std::int64_t r = 0; r < q_len; ++r)
        for (int g = 0; g < group; ++g) {
          const T* qrow = q + ((row_begin + r) * hq + kvh * group + g) * d;
          float* dst = w.q.data() + (r * group + g) * d;
          for (int e = 0; e < d; ++e) dst[e] = to_f(qrow[e]) * q_scale;
        }
      w.acc.assign(static_cast<std::size_t>(states * d), 0.0f);
      w.m.assign(static_cast<std::size_t>(states), -std::numeric_limits<float>::infinity());
      w.l.assign(static_cast<std::size_t>(states), 0.0f);
      for (std::int64_t c0 = 0; c0 < kv_len; c0 += kChunk) {
        const std::int64_t c1 = std::min(kv_len, c0 + kChunk);
        gather_chunk<T>(kv, s, kvh, c0, c1, w);
        // Rows whose visible keys reach into this chunk: visible(r) > c0.
        for (std::int64_t r = std::max<std::int64_t>(0, c0 - (kv_len - q_len)); r < q_len; ++r) {
          const std::int64_t end = std::min(c1, visible(r));
          for (int g = 0; g < group; ++g) {
            const std::int64_t i = r * group + g;
            attend_chunk(w.q.data() + i * d, c0, end, d, w, w.acc.data() + i * d,
                         w.m[static_cast<std::size_t>(i)], w.l[static_cast<std::size_t>(i)]);
          }
        }
      }
      for (std::int64_t r = 0; r < q_len; ++r)
        for (int g = 0; g < group; ++g) {
          const std::int64_t i = r * group + g;
          T* orow = out + ((row_begin + r) * hq + kvh * group + g) * d;
          const bool any = visible(r) > 0;
          const float inv_l = any ? 1.0f / w.l[static_cast<std::size_t>(i)] : 0.0f;
          const float* a = w.acc.data() + i * d;
          for (int e = 0; e < d; ++e) orow[e] = from_f<T>(any ? a[e] * inv_l : 0.0f);
        }
    }
  }
}

template <typename T>
void write_kv_impl(const paged_kv_view& kv, const T* key, const T* value,
                   const std::int64_t* slot_mapping, std::int64_t num_tokens) {
  const std::int64_t num_slots = std::int64_t{kv.num_blocks} * kv.block_size;
  const int d = kv.head_size;
  for (std::int64_t i = 0; i < num_tokens; ++i) {
    const std::int64_t slot = slot_mapping[i];
    if (slot < 0) continue;
    KVSIM_KERNELS_CHECK(slot < num_slots, "slot " + std::to_string(slot) + " out of range");
    const std::int64_t block = slot / kv.block_size;
    const std::int64_t offset = slot % kv.block_size;
    for (int h = 0; h < kv.num_kv_heads; ++h) {
      const std::int64_t src = (i * kv.num_kv_heads + h) * d;
      std::copy(key + src, key + src + d, kv.element<T>(0, block, offset, h));
      std::copy(value + src, value + src + d, kv.element<T>(1, block, offset, h));
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
