#pragma once
// Paged attention on CUDA cores (kernels.md §7.2). The output store, the split-KV merge kernel
// (§7.4) and the launch are shared with the tensor-core kernel (decode_common.cuh).
//
// One CTA per (work item, KV head); a work item is one query row and a KV range [begin, end).
// All G query heads of the KV head are served by the same CTA, so each K/V byte crosses HBM once:
//   threadIdx.x  lane along the head dimension (16-byte vectors: D/8 lanes per token row)
//   threadIdx.y  query head within the group (0..G-1)
//   threadIdx.z  token stream: tokens of a tile are split round-robin over blockDim.z
// K/V tiles of kTileTokens tokens go global -> shared with 16-byte cp.async, two stages deep.
// Each (head, stream) keeps an fp32 online softmax (exp2, log2e folded into the scale); the
// streams are merged through shared memory at the end.

#include <cmath>
#include <cstdint>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_vec.cuh"
#include "kernels/decode_common.cuh"
#include "kernels/decode_dispatch.h"
#include "kernels/kv_tile.cuh"

namespace kvsim::kernels {

/// Tokens per shared-memory tile: 4 KB of K plus 4 KB of V per stage.
template <typename T, int HEAD_DIM>
constexpr int DecodeTileTokens() {
  return 4096 / (HEAD_DIM * static_cast<int>(sizeof(T)));
}

/// Block shape (lanes, G, Z) for a head size and group size: Z is the largest power of two with
/// lanes*G*Z <= 128, raised so that lanes*Z is a multiple of 32 (every warp full).
struct decode_block_shape {
  int lanes;
  int group;
  int streams;
  int num_threads() const { return lanes * group * streams; }
};
inline decode_block_shape make_decode_block_shape(int head_dim, int group) {
  const int lanes = head_dim / 8;
  int z = 1;
  while (lanes * group * z * 2 <= 128) z *= 2;
  if (lanes * z < 32) z = 32 / lanes;
  return {lanes, group, z};
}

/// Dynamic shared memory of PagedAttentionKernel: the two K/V stages, or the stream-merge area.
template <typename T, int HEAD_DIM>
inline int decode_smem_bytes(const decode_block_shape& shape) {
  const int tiles =
      2 * 2 * DecodeTileTokens<T, HEAD_DIM>() * HEAD_DIM * static_cast<int>(sizeof(T));
  const int merge = shape.group * shape.streams * (HEAD_DIM + 2) * static_cast<int>(sizeof(float));
  return tiles > merge ? tiles : merge;
}

/// Attention of one (work item, KV head); see the file comment. Writes `out` directly when the
/// item is its row's only one, otherwise the fp32 partial (o, lse base 2) for the merge kernel.
template <typename T, int HEAD_DIM, int BLOCK_SIZE>
__global__ void __launch_bounds__(1024)
    PagedAttentionKernel(const paged_kv_view kv,
                         const T* __restrict__ q,  // [num_rows, num_q_heads, HEAD_DIM]
                         T* __restrict__ out,      // [num_rows, num_q_heads, HEAD_DIM]
                         const int num_q_heads, const float scale_log2,
                         const attention_work_view work,
                         float* __restrict__ o_part,      // [num_items, num_q_heads, HEAD_DIM]
                         float* __restrict__ lse_part) {  // [num_items, num_q_heads]
  using Vec = detail::Vec8<T>;
  constexpr int kLanes = HEAD_DIM / 8;
  constexpr int kTile = DecodeTileTokens<T, HEAD_DIM>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* smem_k = reinterpret_cast<T*>(smem_raw);  // [2, kTile, HEAD_DIM]
  T* smem_v = smem_k + 2 * kTile * HEAD_DIM;   // [2, kTile, HEAD_DIM]

  const int x = threadIdx.x;
  const int g = threadIdx.y;
  const int z = threadIdx.z;
  const int group = blockDim.y;
  const int streams = blockDim.z;
  const int tid = x + kLanes * (g + group * z);
  const int num_threads = kLanes * group * streams;
  const int item = blockIdx.x;
  const int kv_head = blockIdx.y;
  const int row = work.item_row[item];
  const int seq = work.item_seq[item];
  const int kv_begin = work.item_kv_begin[item];
  const int kv_end = work.item_kv_end[item];
  const int head = kv_head * group + g;

  float qf[8];
  {
    const uint4 raw = *reinterpret_cast<const uint4*>(
        q + (static_cast<std::int64_t>(row) * num_q_heads + head) * HEAD_DIM + x * 8);
    Vec::to_float(raw, qf);
#pragma unroll
    for (int i = 0; i < 8; ++i) qf[i] *= scale_log2;
  }

  float m = -INFINITY;
  float l = 0.0f;
  float acc[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) acc[i] = 0.0f;

  const int num_tiles = (kv_end - kv_begin + kTile - 1) / kTile;
  auto load_tile = [&](int tile, int stage) {
    detail::LoadKvTileAsync<T, HEAD_DIM, BLOCK_SIZE, kTile, HEAD_DIM>(
        kv, seq, kv_head, kv_begin + tile * kTile, kv_end, smem_k + stage * kTile * HEAD_DIM,
        smem_v + stage * kTile * HEAD_DIM, tid, num_threads);
  };

  if (num_tiles > 0) load_tile(0, 0);
  const int iters = (kTile + streams - 1) / streams;  // uniform trip count: shuffles stay converged
  for (int tile = 0; tile < num_tiles; ++tile) {
    if (tile + 1 < num_tiles) {
      load_tile(tile + 1, (tile + 1) & 1);
      detail::cp_async_wait<1>();
    } else {
      detail::cp_async_wait<0>();
    }
    __syncthreads();
    const int stage = tile & 1;
    const int tile_start = kv_begin + tile * kTile;
    for (int it = 0; it < iters; ++it) {
      const int j = z + it * streams;
      const bool valid = j < kTile && tile_start + j < kv_end;
      float kf[8];
      if (valid) {
        Vec::to_float(
            *reinterpret_cast<const uint4*>(smem_k + (stage * kTile + j) * HEAD_DIM + x * 8), kf);
      } else {
#pragma unroll
        for (int i = 0; i < 8; ++i) kf[i] = 0.0f;
      }
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s = fmaf(qf[i], kf[i], s);
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, offset);
      if (valid) {  // select, never multiply: masked tokens never touch acc (NaN-safe)
        float vf[8];
        Vec::to_float(
            *reinterpret_cast<const uint4*>(smem_v + (stage * kTile + j) * HEAD_DIM + x * 8), vf);
        const float m_new = fmaxf(m, s);
        const float correction = exp2f(m - m_new);
        const float p = exp2f(s - m_new);
        l = l * correction + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[i] = fmaf(p, vf[i], acc[i] * correction);
        m = m_new;
      }
    }
    __syncthreads();  // the next iteration's load overwrites the other stage
  }

  if (streams > 1) {  // merge the Z token streams of each head through shared memory
    float* smem_o = reinterpret_cast<float*>(smem_raw);    // [G, Z, HEAD_DIM]
    float* smem_ml = smem_o + group * streams * HEAD_DIM;  // [G, Z, 2]
    const int slot = g * streams + z;
#pragma unroll
    for (int i = 0; i < 8; ++i) smem_o[slot * HEAD_DIM + x * 8 + i] = acc[i];
    if (x == 0) {
      smem_ml[slot * 2] = m;
      smem_ml[slot * 2 + 1] = l;
    }
    __syncthreads();
    if (z == 0) {
      float m_all = -INFINITY;
      for (int zz = 0; zz < streams; ++zz) m_all = fmaxf(m_all, smem_ml[(g * streams + zz) * 2]);
      float l_all = 0.0f;
      float o_all[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) o_all[i] = 0.0f;
      if (m_all != -INFINITY) {
        for (int zz = 0; zz < streams; ++zz) {
          const int other = g * streams + zz;
          const float w = exp2f(smem_ml[other * 2] - m_all);  // empty stream: exp2(-inf) = 0
          l_all = fmaf(smem_ml[other * 2 + 1], w, l_all);
#pragma unroll
          for (int i = 0; i < 8; ++i)
            o_all[i] = fmaf(smem_o[other * HEAD_DIM + x * 8 + i], w, o_all[i]);
        }
      }
      m = m_all;
      l = l_all;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = o_all[i];
    }
  }
  if (z != 0) return;

  const int items_of_row = work.row_item_indptr[row + 1] - work.row_item_indptr[row];
  detail::StoreItemOutput<T, HEAD_DIM>(acc, m, l, items_of_row, row, item, head, x, num_q_heads,
                                       out, o_part, lse_part);
}

namespace detail {

/// PagedAttentionKernel's CTA for a group size (decode_block_shape, decode_smem_bytes).
template <typename T, int HEAD_DIM, int BLOCK_SIZE>
struct DecodeLaunch {
  static attention_kernel_launch<T> get(int group) {
    const decode_block_shape shape = make_decode_block_shape(HEAD_DIM, group);
    return {PagedAttentionKernel<T, HEAD_DIM, BLOCK_SIZE>,
            dim3(static_cast<unsigned>(shape.lanes), static_cast<unsigned>(shape.group),
                 static_cast<unsigned>(shape.streams)),
            decode_smem_bytes<T, HEAD_DIM>(shape)};
  }
};

template <typename T>
cudaError_t PagedAttentionRun(const paged_kv_view& kv, const void* q, void* out,
                              std::int32_t num_q_heads, float scale,
                              const attention_work_view& work,
                              const attention_split_workspace& workspace, cudaStream_t stream) {
  return RunAttentionKernel<T, DecodeLaunch>(kv, q, out, num_q_heads, scale, work, workspace,
                                             stream);
}

template <typename T>
cudaError_t PagedAttentionMaxCtas(std::int32_t head_size, std::int32_t block_size,
                                  std::int32_t group, std::int64_t* max_ctas) {
  return AttentionKernelMaxCtas<T, DecodeLaunch>(head_size, block_size, group, max_ctas);
}

}  // namespace detail
}  // namespace kvsim::kernels
