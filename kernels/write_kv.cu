// reshape_and_cache (vLLM): scatter the new tokens' K/V into the paged pool by slot mapping.

#include <cstdint>

#include "kernels/attention_cuda.h"

namespace kvsim::kernels {

/// One CTA per token; threads stride over (head, dim). Elem is the storage word (uint16_t for
/// fp16/bf16, float for fp32): a bit-exact copy. A negative slot (padding) is skipped.
template <typename Elem>
__global__ void ReshapeAndCacheKernel(const paged_kv_view kv,
                                      const Elem* __restrict__ key,    // [num_tokens, Hkv, D]
                                      const Elem* __restrict__ value,  // [num_tokens, Hkv, D]
                                      const std::int64_t* __restrict__ slot_mapping) {  // [num_tokens]
  const std::int64_t token = blockIdx.x;
  const std::int64_t slot = slot_mapping[token];
  if (slot < 0) return;
  Elem* pool = static_cast<Elem*>(kv.pool);
  const int d = kv.head_size;
  const int n = kv.num_kv_heads * d;
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    const int head = i / d;
    const int dim = i % d;
    const std::int64_t src = token * n + i;
    pool[kv.slot_offset(0, slot, head) + dim] = key[src];
    pool[kv.slot_offset(1, slot, head) + dim] = value[src];
  }
}

cudaError_t ReshapeAndCache(const paged_kv_view& kv, const void* key, const void* value,
                            const std::int64_t* slot_mapping, std::int64_t num_tokens,
                            cudaStream_t stream) {
  if (kv.pool == nullptr || kv.block_base != nullptr || kv.block_size <= 0 || num_tokens < 0)
    return cudaErrorInvalidValue;
  if (num_tokens == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(num_tokens));
  if (kv.dtype == DType::kF32) {
    ReshapeAndCacheKernel<float><<<grid, 128, 0, stream>>>(kv, static_cast<const float*>(key),
                                                           static_cast<const float*>(value),
                                                           slot_mapping);
  } else {
    ReshapeAndCacheKernel<std::uint16_t><<<grid, 128, 0, stream>>>(
        kv, static_cast<const std::uint16_t*>(key), static_cast<const std::uint16_t*>(value),
        slot_mapping);
  }
  return cudaGetLastError();
}

}  // namespace kvsim::kernels
