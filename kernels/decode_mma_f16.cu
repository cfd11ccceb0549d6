// Explicit instantiations of the tensor-core paged attention kernel for __half (3 head sizes x 3
// block sizes).
#include "kernels/decode_mma.cuh"

namespace kvsim::kernels::detail {

template cudaError_t PagedAttentionMmaRun<__half>(const paged_kv_view&, const void*, void*,
                                                  std::int32_t, float, const attention_work_view&,
                                                  const attention_split_workspace&, cudaStream_t);
template cudaError_t PagedAttentionMmaMaxCtas<__half>(std::int32_t, std::int32_t, std::int64_t*);

}  // namespace kvsim::kernels::detail
