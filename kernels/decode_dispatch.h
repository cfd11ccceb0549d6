#pragma once
// Per-dtype entry points of the paged attention kernels, called by the public launchers
// (attention_launch.cu) after they have checked the arguments and chosen the path. The
// CUDA-core kernel is instantiated for __half in decode_f16.cu and for __nv_bfloat16 in
// decode_bf16.cu, the tensor-core kernel in decode_mma_f16.cu and decode_mma_bf16.cu (one TU
// each, compiled in parallel).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/attention_cuda.h"

namespace kvsim::kernels::detail {

/// PagedAttentionKernel (+ merge when split). Preconditions: the launcher's argument checks.
template <typename T>
cudaError_t PagedAttentionRun(const paged_kv_view& kv, const void* q, void* out,
                              std::int32_t num_q_heads, float scale,
                              const attention_work_view& work,
                              const attention_split_workspace& workspace, cudaStream_t stream);

template <typename T>
cudaError_t PagedAttentionMaxCtas(std::int32_t head_size, std::int32_t block_size,
                                  std::int32_t group, std::int64_t* max_ctas);

/// PagedAttentionMmaKernel (+ merge when split); cudaErrorInvalidValue for G > 16.
template <typename T>
cudaError_t PagedAttentionMmaRun(const paged_kv_view& kv, const void* q, void* out,
                                 std::int32_t num_q_heads, float scale,
                                 const attention_work_view& work,
                                 const attention_split_workspace& workspace, cudaStream_t stream);

template <typename T>
cudaError_t PagedAttentionMmaMaxCtas(std::int32_t head_size, std::int32_t block_size,
                                     std::int64_t* max_ctas);

}  // namespace kvsim::kernels::detail
