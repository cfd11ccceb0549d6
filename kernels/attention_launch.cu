// Public CUDA launchers: argument checks, the choice of kernel (resolve_attention_path) and the
// dtype switch over the per-dtype instantiations (decode_*.cu).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/attention_cuda.h"
#include "kernels/decode_dispatch.h"

namespace kvsim::kernels {
namespace {

/// The launch preconditions shared by decode and prefill (see attention_cuda.h).
bool paged_attention_args_ok(const paged_kv_view& kv, const void* q, const void* out,
                             int num_q_heads) {
  const auto aligned = [](std::int64_t v) { return v % 8 == 0; };
  return kv.pool != nullptr && kv.block_base == nullptr && q != nullptr && out != nullptr && kv.num_kv_heads > 0 &&
         num_q_heads > 0 && num_q_heads % kv.num_kv_heads == 0 &&
         reinterpret_cast<std::uintptr_t>(kv.pool) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(q) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(out) % 16 == 0 && aligned(kv.stride_kv) &&
         aligned(kv.stride_block) && aligned(kv.stride_token) && aligned(kv.stride_head);
}

template <typename T>
cudaError_t PagedAttentionByPath(AttentionPath path, const paged_kv_view& kv, const void* q,
                                 void* out, std::int32_t num_q_heads, float scale,
                                 const attention_work_view& work,
                                 const attention_split_workspace& workspace, cudaStream_t stream) {
  if (resolve_attention_path(path, num_q_heads / kv.num_kv_heads) == AttentionPath::kTensorCore)
    return detail::PagedAttentionMmaRun<T>(kv, q, out, num_q_heads, scale, work, workspace, stream);
  return detail::PagedAttentionRun<T>(kv, q, out, num_q_heads, scale, work, workspace, stream);
}

// The occupancy query of the kernel PagedAttentionByPath launches for this group size.
template <typename T>
cudaError_t MaxCtasByPath(AttentionPath path, std::int32_t head_size, std::int32_t block_size,
                          std::int32_t group_size, std::int64_t* max_ctas) {
  if (resolve_attention_path(path, group_size) == AttentionPath::kTensorCore)
    return detail::PagedAttentionMmaMaxCtas<T>(head_size, block_size, max_ctas);
  return detail::PagedAttentionMaxCtas<T>(head_size, block_size, group_size, max_ctas);
}

cudaError_t PagedAttentionChecked(const paged_kv_view& kv, const void* q, void* out,
                                  std::int32_t num_q_heads, float scale,
                                  const attention_work_view& work,
                                  const attention_split_workspace& workspace, cudaStream_t stream,
                                  AttentionPath path) {
  if (kv.dtype != DType::kF16 && kv.dtype != DType::kBF16)
    return cudaErrorInvalidValue;  // fp32: CPU only
  if (!paged_attention_args_ok(kv, q, out, num_q_heads)) return cudaErrorInvalidValue;
  if (work.num_items == 0 || work.num_rows == 0) return cudaSuccess;
  if (work.max_items_per_row > 1 && (workspace.o_part == nullptr || workspace.lse_part == nullptr))
    return cudaErrorInvalidValue;
  if (kv.dtype == DType::kF16)
    return PagedAttentionByPath<__half>(path, kv, q, out, num_q_heads, scale, work, workspace,
                                        stream);
  return PagedAttentionByPath<__nv_bfloat16>(path, kv, q, out, num_q_heads, scale, work, workspace,
                                             stream);
}

}  // namespace

cudaError_t PagedAttentionDecode(const paged_kv_view& kv, const void* q, void* out,
                                 std::int32_t num_q_heads, float scale,
                                 const attention_work_view& work,
                                 const attention_split_workspace& workspace, cudaStream_t stream,
                                 AttentionPath path) {
  if (work.num_rows != kv.num_seqs) return cudaErrorInvalidValue;  // one row per sequence
  return PagedAttentionChecked(kv, q, out, num_q_heads, scale, work, workspace, stream, path);
}

cudaError_t PagedAttentionPrefill(const paged_kv_view& kv, const void* q, void* out,
                                  std::int32_t num_q_heads, float scale,
                                  const attention_work_view& work,
                                  const attention_split_workspace& workspace, cudaStream_t stream,
                                  AttentionPath path) {
  return PagedAttentionChecked(kv, q, out, num_q_heads, scale, work, workspace, stream, path);
}

cudaError_t PagedAttentionMaxResidentCtas(DType dtype, std::int32_t head_size,
                                          std::int32_t block_size, std::int32_t group_size,
                                          std::int64_t* max_ctas, AttentionPath path) {
  switch (dtype) {
    case DType::kF16:
      return MaxCtasByPath<__half>(path, head_size, block_size, group_size, max_ctas);
    case DType::kBF16:
      return MaxCtasByPath<__nv_bfloat16>(path, head_size, block_size, group_size, max_ctas);
    case DType::kF32:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace kvsim::kernels
