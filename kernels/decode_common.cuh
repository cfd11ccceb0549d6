#pragma once
// What the CUDA-core (decode.cuh) and tensor-core (decode_mma.cuh) attention kernels share past
// their main loops: the store of a work item's output or split partial, the split-KV merge kernel
// that reads those partials (kernels.md §7.4), and the host launch and occupancy query. Both
// kernels have the same parameters and grid (work item, KV head), so one launcher serves both;
// each kernel only says how its CTA is shaped (an attention_kernel_launch).

#include <cmath>
#include <cstdint>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_vec.cuh"

namespace kvsim::kernels {
namespace detail {

/// The end of a work item for one 8-wide slice (`slice`, in 16-byte vectors) of one query head's
/// row: acc / l goes to `out` in T when the item is its row's only one, otherwise to `o_part` in
/// fp32, with lse = m + log2(l) (base 2, as PagedAttentionMergeKernel reads it) written once per
/// head, from slice 0. acc, m and l are the item's merged fp32 online-softmax state (m, log2
/// units).
template <typename T, int HEAD_DIM>
__device__ __forceinline__ void StoreItemOutput(const float (&acc)[8], float m, float l,
                                                int items_of_row, int row, int item, int head,
                                                int slice, int num_q_heads, T* out, float* o_part,
                                                float* lse_part) {
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;  // no visible key: output 0, lse -inf
  float o[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) o[i] = acc[i] * inv_l;
  if (items_of_row == 1) {
    *reinterpret_cast<uint4*>(
        out + (static_cast<std::int64_t>(row) * num_q_heads + head) * HEAD_DIM + slice * 8) =
        Vec8<T>::from_float(o);
  } else {
    float* dst =
        o_part + (static_cast<std::int64_t>(item) * num_q_heads + head) * HEAD_DIM + slice * 8;
    reinterpret_cast<float4*>(dst)[0] = make_float4(o[0], o[1], o[2], o[3]);
    reinterpret_cast<float4*>(dst)[1] = make_float4(o[4], o[5], o[6], o[7]);
    if (slice == 0)
      lse_part[static_cast<std::int64_t>(item) * num_q_heads + head] =
          l > 0.0f ? m + log2f(l) : -INFINITY;
  }
}

}  // namespace detail

/// Merges the split partials of each (row, query head): out = sum_j w_j o_j / sum_j w_j with
/// w_j = 2^(lse_j - max lse), fp32. Rows with a single item were written by the main kernel.
/// Grid (num_rows, num_q_heads), threads stride over the head dimension.
template <typename T>
__global__ void PagedAttentionMergeKernel(
    const float* __restrict__ o_part,                  // [num_items, Hq, D]
    const float* __restrict__ lse_part,                // [num_items, Hq]
    const std::int32_t* __restrict__ row_item_indptr,  // [num_rows + 1]
    T* __restrict__ out,                               // [num_rows, Hq, D]
    const int num_q_heads, const int head_dim) {
  const int row = blockIdx.x;
  const int head = blockIdx.y;
  const int begin = row_item_indptr[row];
  const int end = row_item_indptr[row + 1];
  if (end - begin <= 1) return;
  float m_all = -INFINITY;
  for (int j = begin; j < end; ++j)
    m_all = fmaxf(m_all, lse_part[static_cast<std::int64_t>(j) * num_q_heads + head]);
  for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
    float num = 0.0f;
    float den = 0.0f;
    if (m_all != -INFINITY) {
      for (int j = begin; j < end; ++j) {
        const float w = exp2f(lse_part[static_cast<std::int64_t>(j) * num_q_heads + head] - m_all);
        den += w;
        num = fmaf(w, o_part[(static_cast<std::int64_t>(j) * num_q_heads + head) * head_dim + d],
                   num);
      }
    }
    out[(static_cast<std::int64_t>(row) * num_q_heads + head) * head_dim + d] =
        detail::Vec8<T>::from_float1(den > 0.0f ? num / den : 0.0f);
  }
}

namespace detail {

/// Launches PagedAttentionMergeKernel when the plan splits a row (work.max_items_per_row > 1);
/// otherwise the attention kernel already wrote `out`.
template <typename T>
cudaError_t LaunchMergeIfSplit(const attention_work_view& work,
                               const attention_split_workspace& workspace, void* out,
                               int num_q_heads, int head_dim, cudaStream_t stream) {
  if (work.max_items_per_row <= 1) return cudaSuccess;
  PagedAttentionMergeKernel<T>
      <<<dim3(static_cast<unsigned>(work.num_rows), static_cast<unsigned>(num_q_heads)), 64, 0,
         stream>>>(workspace.o_part, workspace.lse_part, work.row_item_indptr, static_cast<T*>(out),
                   num_q_heads, head_dim);
  return cudaGetLastError();
}

/// Multiprocessors of the current device.
inline cudaError_t CurrentDeviceSmCount(int* num_sms) {
  int device = 0;
  const cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(num_sms, cudaDevAttrMultiProcessorCount, device);
}

/// The parameters of PagedAttentionKernel and PagedAttentionMmaKernel.
template <typename T>
using attention_kernel_fn = void (*)(paged_kv_view, const T*, T*, int, float, attention_work_view,
                                     float*, float*);

/// One instantiation of an attention kernel and its CTA. Each kernel describes it once, in a
/// `LaunchOf<T, HEAD_DIM, BLOCK_SIZE>::get(group)`, so that the launch and the occupancy query
/// (which sizes the split plan's wave) cannot disagree.
template <typename T>
struct attention_kernel_launch {
  attention_kernel_fn<T> kernel;
  dim3 block;
  int smem_bytes;  // dynamic; < 48 KB for every CTA launched, so no opt-in attribute is set
  int num_threads() const {
    return static_cast<int>(block.x) * static_cast<int>(block.y) * static_cast<int>(block.z);
  }
};

/// Launches the kernel LaunchOf describes over grid (work items, KV heads), then the merge kernel
/// when the plan splits a row. Preconditions: the launcher's argument checks.
template <typename T, template <typename, int, int> class LaunchOf>
cudaError_t RunAttentionKernel(const paged_kv_view& kv, const void* q, void* out,
                               std::int32_t num_q_heads, float scale,
                               const attention_work_view& work,
                               const attention_split_workspace& workspace, cudaStream_t stream) {
  const int group = num_q_heads / kv.num_kv_heads;
  const float scale_log2 = scale * 1.4426950408889634f;
  DISPATCH_HEAD_DIM(
      kv.head_size, HEAD_DIM, {DISPATCH_BLOCK_SIZE(kv.block_size, BLOCK_SIZE, {
        const attention_kernel_launch<T> launch = LaunchOf<T, HEAD_DIM, BLOCK_SIZE>::get(group);
        if (launch.num_threads() > 1024) return cudaErrorInvalidConfiguration;
        const dim3 grid(static_cast<unsigned>(work.num_items),
                        static_cast<unsigned>(kv.num_kv_heads));
        launch.kernel<<<grid, launch.block, launch.smem_bytes, stream>>>(
            kv, static_cast<const T*>(q), static_cast<T*>(out), num_q_heads, scale_log2, work,
            workspace.o_part, workspace.lse_part);
        const cudaError_t err = cudaGetLastError();
        if (err != cudaSuccess) return err;
        return LaunchMergeIfSplit<T>(work, workspace, out, num_q_heads, HEAD_DIM, stream);
      })})
  return cudaSuccess;
}

/// CTAs of the kernel LaunchOf describes resident at once on the current device: occupancy per SM
/// (at least 1) x SMs.
template <typename T, template <typename, int, int> class LaunchOf>
cudaError_t AttentionKernelMaxCtas(std::int32_t head_size, std::int32_t block_size,
                                   std::int32_t group, std::int64_t* max_ctas) {
  int num_sms = 0;
  cudaError_t err = CurrentDeviceSmCount(&num_sms);
  if (err != cudaSuccess) return err;
  DISPATCH_HEAD_DIM(head_size, HEAD_DIM, {DISPATCH_BLOCK_SIZE(block_size, BLOCK_SIZE, {
                      const attention_kernel_launch<T> launch =
                          LaunchOf<T, HEAD_DIM, BLOCK_SIZE>::get(group);
                      int per_sm = 0;
                      err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
                          &per_sm, launch.kernel, launch.num_threads(),
                          static_cast<std::size_t>(launch.smem_bytes));
                      *max_ctas = static_cast<std::int64_t>(per_sm > 0 ? per_sm : 1) * num_sms;
                      return err;
                    })})
  return cudaSuccess;
}

}  // namespace detail
}  // namespace kvsim::kernels
