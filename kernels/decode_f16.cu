// Explicit instantiations of the CUDA-core paged attention kernel for __half (3 head sizes x 3
// block sizes).
#include "kernels/decode.cuh"

namespace kvsim::kernels::detail {

template cudaError_t PagedAttentionRun<__half>(const paged_kv_view&, const void*, void*, std::int32_t,
                                           float, const attention_work_view&,
                                           const attention_split_workspace&, cudaStream_t);
template cudaError_t PagedAttentionMaxCtas<__half>(std::int32_t, std::int32_t, std::int32_t,
                                               std::int64_t*);

}  // namespace kvsim::kernels::detail
