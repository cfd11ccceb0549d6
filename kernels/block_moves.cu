// vLLM V0's block moves on the GPU: swap_blocks (pool <-> host swap pool, by copies) and
// copy_blocks (within the pool, one kernel). Our own code after csrc/cache_kernels.cu's semantics.

#include <cstdint>

#include "kernels/attention_cuda.h"

namespace kvsim::kernels {
namespace {

/// Whether `kv` is laid out with each block's K (and V) one contiguous run of stride_block
/// elements: the vLLM V1 strides (token-major inside a block, head size contiguous).
bool contiguous_blocks(const paged_kv_view& kv) {
  return kv.pool != nullptr && kv.block_base == nullptr && kv.stride_head == kv.head_size &&
         kv.stride_token == std::int64_t{kv.num_kv_heads} * kv.head_size &&
         kv.stride_block == kv.stride_token * kv.block_size;
}

/// One CTA per (pair, part): part 0 copies the block's K run, part 1 its V run, as `Word`s.
template <typename Word>
__global__ void CopyBlocksKernel(Word* __restrict__ pool, const std::int64_t* __restrict__ mapping,
                                 std::int64_t words_per_run, std::int64_t words_kv) {
  const std::int64_t pair = blockIdx.x;
  const std::int64_t part = blockIdx.y;
  const std::int64_t src = mapping[2 * pair] * words_per_run + part * words_kv;
  const std::int64_t dst = mapping[2 * pair + 1] * words_per_run + part * words_kv;
  for (std::int64_t i = threadIdx.x; i < words_per_run; i += blockDim.x)
    pool[dst + i] = pool[src + i];
}

}  // namespace

cudaError_t SwapBlocks(const paged_kv_view& src, const paged_kv_view& dst,
                       const std::int64_t* block_mapping, std::int64_t num_pairs,
                       cudaStream_t stream) {
  if (!contiguous_blocks(src) || !contiguous_blocks(dst) || src.dtype != dst.dtype ||
      src.stride_block != dst.stride_block || num_pairs < 0 ||
      (num_pairs > 0 && block_mapping == nullptr))
    return cudaErrorInvalidValue;
  const std::size_t elt = dtype_size_bytes(src.dtype);
  const std::size_t run_bytes = static_cast<std::size_t>(src.stride_block) * elt;
  const auto* from = static_cast<const std::byte*>(src.pool);
  auto* to = static_cast<std::byte*>(dst.pool);
  for (std::int64_t i = 0; i < num_pairs; ++i) {
    for (std::int64_t part = 0; part < 2; ++part) {
      const std::int64_t s = part * src.stride_kv + block_mapping[2 * i] * src.stride_block;
      const std::int64_t d = part * dst.stride_kv + block_mapping[2 * i + 1] * dst.stride_block;
      const cudaError_t err = cudaMemcpyAsync(to + static_cast<std::size_t>(d) * elt,
                                              from + static_cast<std::size_t>(s) * elt, run_bytes,
                                              cudaMemcpyDefault, stream);
      if (err != cudaSuccess) return err;
    }
  }
  return cudaSuccess;
}

cudaError_t CopyBlocks(const paged_kv_view& kv, const std::int64_t* block_mapping,
                       std::int64_t num_pairs, cudaStream_t stream) {
  if (!contiguous_blocks(kv) || num_pairs < 0 || (num_pairs > 0 && block_mapping == nullptr))
    return cudaErrorInvalidValue;
  if (num_pairs == 0) return cudaSuccess;
  const std::size_t elt = dtype_size_bytes(kv.dtype);
  const std::size_t run_bytes = static_cast<std::size_t>(kv.stride_block) * elt;
  const std::size_t kv_bytes = static_cast<std::size_t>(kv.stride_kv) * elt;
  const dim3 grid(static_cast<unsigned>(num_pairs), 2);
  const bool wide = run_bytes % 16 == 0 && kv_bytes % 16 == 0 &&
                    reinterpret_cast<std::uintptr_t>(kv.pool) % 16 == 0;
  if (wide) {
    CopyBlocksKernel<uint4><<<grid, 128, 0, stream>>>(static_cast<uint4*>(kv.pool), block_mapping,
                                                      static_cast<std::int64_t>(run_bytes / 16),
                                                      static_cast<std::int64_t>(kv_bytes / 16));
  } else {
    CopyBlocksKernel<std::uint16_t><<<grid, 128, 0, stream>>>(
        static_cast<std::uint16_t*>(kv.pool), block_mapping,
        static_cast<std::int64_t>(run_bytes / 2), static_cast<std::int64_t>(kv_bytes / 2));
  }
  return cudaGetLastError();
}

}  // namespace kvsim::kernels
