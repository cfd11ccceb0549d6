#pragma once
// Paged attention on tensor cores for grouped queries (kernels.md §7.2, "Math path"): the G query
// heads of one KV head are the M = 16 rows of mma.sync.m16n8k16 (rows >= G are zero), so Q·K^T
// and P·V run as 16-bit MMAs with fp32 accumulation. Same work items, grid (num_items, Hkv),
// outputs and split partials (lse base 2) as PagedAttentionKernel; the host dispatch picks it for
// 4 <= G <= 16 (resolve_attention_path), and it can be forced for any G <= 16.
//
// CTA: kWarps warps (2; 1 for head size 256). A K/V tile of 16 x kWarps tokens goes global ->
// shared with 16-byte cp.async, two stages deep (kv_tile.cuh); warp w owns tokens
// [16w, 16w + 16) of every tile and keeps its own online softmax (running max m and sum l of the
// two rows it holds, fp32, exp2 with log2(e) folded into the scale) and its O accumulator
// (16 x HEAD_DIM fp32 in registers). The warps' states are merged through shared memory at the
// end, as PagedAttentionKernel merges its token streams.
//
// Fragment layouts relied on (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point
// type"). g = lane / 4, t = lane % 4; a 32-bit register holds two 16-bit elements, the one with
// the lower index in the low half:
//   A (16 x 16, .row)   reg0 = A[g][2t, 2t+1]     reg1 = A[g+8][2t, 2t+1]
//                       reg2 = A[g][2t+8, 2t+9]   reg3 = A[g+8][2t+8, 2t+9]
//   B (16 x 8, .col)    reg0 = B[2t, 2t+1][g]     reg1 = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32)  c0, c1 = C[g][2t, 2t+1]   c2, c3 = C[g+8][2t, 2t+1]
// S = Q K^T (one m16n8k16 per 16 dims x 8 tokens): A = Q[head][dim]; B[k = dim][n = token] =
//   K[token][dim], so each B register is one aligned 32-bit shared load of two adjacent dims of
//   one K row. A thread thus holds S of rows g and g+8 for tokens 2t, 2t+1 of each 8-token tile.
// O += P V (one m16n8k16 per 16 tokens x 8 dims): the C fragments of the two 8-token S tiles are
//   exactly the A fragment of P over those 16 tokens (reg0 = tile 0 c0,c1; reg1 = tile 0 c2,c3;
//   reg2 = tile 1 c0,c1; reg3 = tile 1 c2,c3), so P never leaves registers. B[k = token][n = dim]
//   = V[token][dim] pairs two tokens of one dim: two 16-bit shared loads packed into a register.
// Shared rows are padded to HEAD_DIM + 8 elements ((HEAD_DIM + 8) / 2 words, = 4 mod 32 banks):
// the 8 rows of a 32-bit fragment load then hit distinct banks, so do the 4 token pairs of a V
// load, and every row start stays 16-byte aligned for cp.async.
//
// Precision: Q, K, V enter the MMAs exactly; S and O accumulate in fp32. P (in [0, 1]) is split
// into a 16-bit part and a 16-bit remainder, each multiplied by V, so P·V carries >= 16 mantissa
// bits: a plain 16-bit P would add an error as large as the output's own rounding, which the
// FA3-style baseline rule against an fp32-math reference (kernels.md §8) does not allow. The
// extra MMA per step is cheap: decode needs ~1-3% of the tensor-core rate.

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_vec.cuh"
#include "kernels/decode_common.cuh"
#include "kernels/decode_dispatch.h"
#include "kernels/kv_tile.cuh"

namespace kvsim::kernels {

/// Warps per CTA of PagedAttentionMmaKernel: 2, or 1 for head size 256, so that a CTA needs
/// < 48 KB of shared memory (about 5 CTAs per H100 SM) and the O accumulator of a thread stays at
/// HEAD_DIM / 2 <= 64 registers (128 for head size 256).
template <int HEAD_DIM>
constexpr int MmaWarps() {
  return HEAD_DIM == 256 ? 1 : 2;
}

/// Shared-memory row stride of the tensor-core kernel (elements): HEAD_DIM plus 16 bytes of pad.
template <int HEAD_DIM>
constexpr int MmaRowStride() {
  return HEAD_DIM + 8;
}

/// Dynamic shared memory of PagedAttentionMmaKernel: Q `[16, stride]` plus two stages of K and V
/// `[16 * kWarps, stride]`; the end-of-kernel merge area reuses the K/V stages.
template <typename T, int HEAD_DIM>
constexpr int MmaSmemBytes() {
  return (16 + 4 * 16 * MmaWarps<HEAD_DIM>()) * MmaRowStride<HEAD_DIM>() *
         static_cast<int>(sizeof(T));
}

namespace detail {

/// D = A B + D for one m16n8k16 tile, 16-bit inputs (T = __half or __nv_bfloat16), fp32 D.
template <typename T>
__device__ __forceinline__ void Mma16816(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Rounds (lo, hi) to T and packs them (lo in the low half) into `main`; packs the rounding
/// remainders (x - float(T(x))) the same way into `rest`.
template <typename T>
__device__ __forceinline__ void SplitPack(float lo, float hi, std::uint32_t& main,
                                          std::uint32_t& rest) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 m = __floats2half2_rn(lo, hi);
    const float2 mf = __half22float2(m);
    const __half2 r = __floats2half2_rn(lo - mf.x, hi - mf.y);
    main = *reinterpret_cast<const std::uint32_t*>(&m);
    rest = *reinterpret_cast<const std::uint32_t*>(&r);
  } else {
    const __nv_bfloat162 m = __floats2bfloat162_rn(lo, hi);
    const float2 mf = __bfloat1622float2(m);
    const __nv_bfloat162 r = __floats2bfloat162_rn(lo - mf.x, hi - mf.y);
    main = *reinterpret_cast<const std::uint32_t*>(&m);
    rest = *reinterpret_cast<const std::uint32_t*>(&r);
  }
}

/// Two adjacent 16-bit elements at `p` (4-byte aligned) as one register, p[0] in the low half.
template <typename T>
__device__ __forceinline__ std::uint32_t LoadPair(const T* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}

}  // namespace detail

/// Attention of one (work item, KV head) on tensor cores; see the file comment. Writes `out`
/// directly when the item is its row's only one, otherwise the fp32 partial (o, lse base 2).
/// Requires G = num_q_heads / num_kv_heads <= 16 (checked by the launcher).
template <typename T, int HEAD_DIM, int BLOCK_SIZE>
__global__ void __launch_bounds__(MmaWarps<HEAD_DIM>() * 32)
    PagedAttentionMmaKernel(const paged_kv_view kv,
                            const T* __restrict__ q,  // [num_rows, num_q_heads, HEAD_DIM]
                            T* __restrict__ out,      // [num_rows, num_q_heads, HEAD_DIM]
                            const int num_q_heads, const float scale_log2,
                            const attention_work_view work,
                            float* __restrict__ o_part,      // [num_items, num_q_heads, HEAD_DIM]
                            float* __restrict__ lse_part) {  // [num_items, num_q_heads]
  constexpr int kWarps = MmaWarps<HEAD_DIM>();
  constexpr int kThreads = 32 * kWarps;
  constexpr int kTile = 16 * kWarps;                 // tokens per shared-memory stage
  constexpr int kStride = MmaRowStride<HEAD_DIM>();  // elements per shared row
  constexpr int kVecs = HEAD_DIM / 8;                // 16-byte vectors per head row
  constexpr int kDimTiles = HEAD_DIM / 8;            // n8 tiles of O
  constexpr int kDimSteps = HEAD_DIM / 16;           // k16 steps of S = Q K^T
  static_assert(
      kWarps * 16 * (HEAD_DIM + 2) * 4 <= 4 * kTile * kStride * static_cast<int>(sizeof(T)),
      "the merge area must fit in the K/V stages");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem_q = reinterpret_cast<T*>(smem_raw);  // [16, kStride]; rows >= G are zero
  T* smem_k = smem_q + 16 * kStride;           // [2, kTile, kStride]
  T* smem_v = smem_k + 2 * kTile * kStride;    // [2, kTile, kStride]

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;  // fragment row (and row + 8)
  const int t = lane % 4;  // fragment column pair
  const int item = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int group = num_q_heads / kv.num_kv_heads;
  const int row = work.item_row[item];
  const int seq = work.item_seq[item];
  const int kv_begin = work.item_kv_begin[item];
  const int kv_end = work.item_kv_end[item];

  // Q of the group's heads; the loop's first __syncthreads orders these stores before any read.
  for (int i = tid; i < 16 * kVecs; i += kThreads) {
    const int r = i / kVecs;
    const int c = i % kVecs;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < group)
      v = *reinterpret_cast<const uint4*>(
          q + (static_cast<std::int64_t>(row) * num_q_heads + kv_head * group + r) * HEAD_DIM +
          c * 8);
    *reinterpret_cast<uint4*>(smem_q + r * kStride + c * 8) = v;
  }

  float o[kDimTiles][4];  // O fragments: [n8 tile][c0..c3], rows g and g + 8
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY};  // running max of rows g, g + 8 (log2 units)
  float l[2] = {0.0f, 0.0f};            // this thread's share of the running sums (its 4 columns)

  const int num_tiles = (kv_end - kv_begin + kTile - 1) / kTile;
  auto load_tile = [&](int tile, int stage) {
    detail::LoadKvTileAsync<T, HEAD_DIM, BLOCK_SIZE, kTile, kStride>(
        kv, seq, kv_head, kv_begin + tile * kTile, kv_end, smem_k + stage * kTile * kStride,
        smem_v + stage * kTile * kStride, tid, kThreads);
  };
  if (num_tiles > 0) load_tile(0, 0);
  for (int tile = 0; tile < num_tiles; ++tile) {
    if (tile + 1 < num_tiles) {
      load_tile(tile + 1, (tile + 1) & 1);
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();
    const int stage = tile & 1;
    const int warp_start = kv_begin + tile * kTile + warp * 16;  // this warp's first token
    if (warp_start < kv_end) {  // warp-uniform: the shuffles and MMAs below stay converged
      const T* ks = smem_k + (stage * kTile + warp * 16) * kStride;  // [16, kStride]
      const T* vs = smem_v + (stage * kTile + warp * 16) * kStride;  // [16, kStride]

      float s[2][4];  // S fragments of tokens 0-7 and 8-15 of the warp's 16
#pragma unroll
      for (int j = 0; j < 2; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < kDimSteps; ++kk) {
        const T* qa = smem_q + g * kStride + kk * 16 + 2 * t;
        const std::uint32_t a[4] = {detail::LoadPair(qa), detail::LoadPair(qa + 8 * kStride),
                                    detail::LoadPair(qa + 8),
                                    detail::LoadPair(qa + 8 * kStride + 8)};
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const T* kb = ks + (j * 8 + g) * kStride + kk * 16 + 2 * t;
          detail::Mma16816<T>(s[j], a, detail::LoadPair(kb), detail::LoadPair(kb + 8));
        }
      }

      // Online softmax. s[j][i] is row g (i < 2) or g + 8 (i >= 2), token 8j + 2t + (i & 1).
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const bool valid = warp_start + j * 8 + 2 * t + (i & 1) < kv_end;
          s[j][i] = valid ? s[j][i] * scale_log2 : -INFINITY;
          tile_max[i / 2] = fmaxf(tile_max[i / 2], s[j][i]);
        }
      }
      float base[2];  // exponent base: the new max, or 0 while a row has seen no key (no inf - inf)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        const float m_new = fmaxf(m[r], tile_max[r]);
        base[r] = m_new == -INFINITY ? 0.0f : m_new;
        const float correction = exp2f(m[r] - base[r]);  // m = -inf: 0 (l and o are 0 anyway)
        l[r] *= correction;
#pragma unroll
        for (int n = 0; n < kDimTiles; ++n) {
          o[n][2 * r] *= correction;
          o[n][2 * r + 1] *= correction;
        }
        m[r] = m_new;
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          s[j][i] = exp2f(s[j][i] - base[i / 2]);  // masked: exp2(-inf) = 0
          l[i / 2] += s[j][i];
        }
      }
      std::uint32_t p_main[4];
      std::uint32_t p_rest[4];
      detail::SplitPack<T>(s[0][0], s[0][1], p_main[0], p_rest[0]);
      detail::SplitPack<T>(s[0][2], s[0][3], p_main[1], p_rest[1]);
      detail::SplitPack<T>(s[1][0], s[1][1], p_main[2], p_rest[2]);
      detail::SplitPack<T>(s[1][2], s[1][3], p_main[3], p_rest[3]);

      // Masked tokens have P = 0 and, being zero-filled by the tile copy, V = 0: no NaN can enter.
      const std::uint16_t* v16 = reinterpret_cast<const std::uint16_t*>(vs);
#pragma unroll
      for (int n = 0; n < kDimTiles; ++n) {
        const int col = n * 8 + g;
        const std::uint32_t b0 =
            static_cast<std::uint32_t>(v16[(2 * t) * kStride + col]) |
            (static_cast<std::uint32_t>(v16[(2 * t + 1) * kStride + col]) << 16);
        const std::uint32_t b1 =
            static_cast<std::uint32_t>(v16[(2 * t + 8) * kStride + col]) |
            (static_cast<std::uint32_t>(v16[(2 * t + 9) * kStride + col]) << 16);
        detail::Mma16816<T>(o[n], p_main, b0, b1);
        detail::Mma16816<T>(o[n], p_rest, b0, b1);
      }
    }
    __syncthreads();  // the next iteration's copy overwrites the other stage
  }

  // Full row sums: the 4 threads of a quad hold disjoint columns of the same rows.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
  // Merge the warps' states. No copy is in flight and every warp is past the loop's last
  // __syncthreads, so the K/V stages are free.
  float* smem_o = reinterpret_cast<float*>(smem_k);  // [kWarps, 16, HEAD_DIM]
  float* smem_ml = smem_o + kWarps * 16 * HEAD_DIM;  // [kWarps, 16, 2] (m, l)
#pragma unroll
  for (int n = 0; n < kDimTiles; ++n) {
    float* lo_row = smem_o + (warp * 16 + g) * HEAD_DIM + n * 8 + 2 * t;
    lo_row[0] = o[n][0];
    lo_row[1] = o[n][1];
    lo_row[8 * HEAD_DIM] = o[n][2];
    lo_row[8 * HEAD_DIM + 1] = o[n][3];
  }
  if (t == 0) {
    smem_ml[(warp * 16 + g) * 2] = m[0];
    smem_ml[(warp * 16 + g) * 2 + 1] = l[0];
    smem_ml[(warp * 16 + g + 8) * 2] = m[1];
    smem_ml[(warp * 16 + g + 8) * 2 + 1] = l[1];
  }
  __syncthreads();

  const int items_of_row = work.row_item_indptr[row + 1] - work.row_item_indptr[row];
  for (int u = tid; u < group * kVecs; u += kThreads) {  // one 8-wide slice of one head each
    const int r = u / kVecs;
    const int c = u % kVecs;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, smem_ml[(w * 16 + r) * 2]);
    float l_all = 0.0f;
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
    if (m_all != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float weight = exp2f(smem_ml[(w * 16 + r) * 2] - m_all);  // empty warp: 0
        l_all = fmaf(smem_ml[(w * 16 + r) * 2 + 1], weight, l_all);
#pragma unroll
        for (int i = 0; i < 8; ++i)
          acc[i] = fmaf(smem_o[(w * 16 + r) * HEAD_DIM + c * 8 + i], weight, acc[i]);
      }
    }
    detail::StoreItemOutput<T, HEAD_DIM>(acc, m_all, l_all, items_of_row, row, item,
                                         kv_head * group + r, c, num_q_heads, out, o_part,
                                         lse_part);
  }
}

namespace detail {

/// PagedAttentionMmaKernel's CTA: kWarps warps and MmaSmemBytes, whatever G (<= 16).
template <typename T, int HEAD_DIM, int BLOCK_SIZE>
struct MmaLaunch {
  static attention_kernel_launch<T> get(int /*group*/) {
    return {PagedAttentionMmaKernel<T, HEAD_DIM, BLOCK_SIZE>, dim3(32 * MmaWarps<HEAD_DIM>()),
            MmaSmemBytes<T, HEAD_DIM>()};
  }
};

template <typename T>
cudaError_t PagedAttentionMmaRun(const paged_kv_view& kv, const void* q, void* out,
                                 std::int32_t num_q_heads, float scale,
                                 const attention_work_view& work,
                                 const attention_split_workspace& workspace, cudaStream_t stream) {
  if (num_q_heads / kv.num_kv_heads > kMaxTensorCoreGroup) return cudaErrorInvalidValue;
  return RunAttentionKernel<T, MmaLaunch>(kv, q, out, num_q_heads, scale, work, workspace, stream);
}

template <typename T>
cudaError_t PagedAttentionMmaMaxCtas(std::int32_t head_size, std::int32_t block_size,
                                     std::int64_t* max_ctas) {
  // Any G gives the same CTA (MmaLaunch); the largest is the one the kernel is checked for.
  return AttentionKernelMaxCtas<T, MmaLaunch>(head_size, block_size, kMaxTensorCoreGroup, max_ctas);
}

}  // namespace detail
}  // namespace kvsim::kernels
