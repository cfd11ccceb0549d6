#pragma once
// The K/V tile copy shared by the CUDA-core and tensor-core attention kernels: one tile of a
// (sequence, KV head) goes global -> shared with 16-byte cp.async, through the block table.

#include <cstdint>

#include "kernels/cuda_vec.cuh"
#include "kernels/paged_kv.h"

namespace kvsim::kernels::detail {

/// Issues the cp.async copies of the K and V rows of tokens [tile_start, tile_start + TILE) of
/// sequence `seq`, KV head `kv_head`, into smem_k / smem_v (`[TILE, ROW_STRIDE]` elements each,
/// row r = token tile_start + r), and commits them as one group. Tokens >= kv_end are
/// zero-filled and their block-table entries are never read. Called by all `num_threads`
/// threads of the CTA (`tid` = the caller's index among them).
template <typename T, int HEAD_DIM, int BLOCK_SIZE, int TILE, int ROW_STRIDE>
__device__ __forceinline__ void LoadKvTileAsync(const paged_kv_view& kv, int seq, int kv_head,
                                                int tile_start, int kv_end,
                                                T* __restrict__ smem_k,  // [TILE, ROW_STRIDE]
                                                T* __restrict__ smem_v,  // [TILE, ROW_STRIDE]
                                                int tid, int num_threads) {
  constexpr int kLanes = HEAD_DIM / 8;  // 16-byte vectors per token row
  const T* __restrict__ pool = static_cast<const T*>(kv.pool);
  for (int i = tid; i < TILE * kLanes; i += num_threads) {
    const int r = i / kLanes;
    const int c = i % kLanes;
    const int t = tile_start + r;
    const bool valid = t < kv_end;
    std::int64_t off = 0;
    if (valid) {
      const std::int64_t block =
          kv.block_tables[static_cast<std::int64_t>(seq) * kv.max_blocks_per_seq + t / BLOCK_SIZE];
      off = block * kv.stride_block + (t % BLOCK_SIZE) * kv.stride_token +
            kv_head * kv.stride_head + c * 8;
    }
    const int s = r * ROW_STRIDE + c * 8;
    cp_async_16(smem_k + s, pool + off, valid);
    cp_async_16(smem_v + s, pool + (valid ? off + kv.stride_kv : 0), valid);
  }
  cp_async_commit();
}

}  // namespace kvsim::kernels::detail
