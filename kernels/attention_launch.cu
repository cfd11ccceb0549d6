// Public CUDA launchers: dtype switch over the per-dtype instantiations (decode_f16/bf16.cu).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention_cuda.h"
#include "kernels/decode_dispatch.h"

namespace kvsim::kernels {
namespace {

cudaError_t PagedAttentionByDtype(const paged_kv_view& kv, const void* q, void* out,
                                  std::int32_t num_q_heads, float scale,
                                  const attention_work_view& work,
                                  const attention_split_workspace& workspace, cudaStream_t stream) {
  switch (kv.dtype) {
    case DType::kF16:
      return detail::PagedAttentionRun<__half>(kv, q, out, num_q_heads, scale, work, workspace, stream);
    case DType::kBF16:
      return detail::PagedAttentionRun<__nv_bfloat16>(kv, q, out, num_q_heads, scale, work,
                                                      workspace, stream);
    case DType::kF32: break;
  }
  return cudaErrorInvalidValue;  // fp32 pools are CPU-only
}

}  // namespace

cudaError_t PagedAttentionDecode(const paged_kv_view& kv, const void* q, void* out,
                                 std::int32_t num_q_heads, float scale,
                                 const attention_work_view& work,
                                 const attention_split_workspace& workspace, cudaStream_t stream) {
  if (work.num_rows != kv.num_seqs) return cudaErrorInvalidValue;  // one row per sequence
  return PagedAttentionByDtype(kv, q, out, num_q_heads, scale, work, workspace, stream);
}

cudaError_t PagedAttentionPrefill(const paged_kv_view& kv, const void* q, void* out,
                                  std::int32_t num_q_heads, float scale,
                                  const attention_work_view& work,
                                  const attention_split_workspace& workspace, cudaStream_t stream) {
  return PagedAttentionByDtype(kv, q, out, num_q_heads, scale, work, workspace, stream);
}

cudaError_t PagedAttentionMaxResidentCtas(DType dtype, std::int32_t head_size,
                                          std::int32_t block_size, std::int32_t group_size,
                                          std::int64_t* max_ctas) {
  switch (dtype) {
    case DType::kF16:
      return detail::PagedAttentionMaxCtas<__half>(head_size, block_size, group_size, max_ctas);
    case DType::kBF16:
      return detail::PagedAttentionMaxCtas<__nv_bfloat16>(head_size, block_size, group_size, max_ctas);
    case DType::kF32: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvsim::kernels
