#pragma once
// CUDA launchers of kvsim_kernels (host API; all pointers are device pointers). Built only with
// KVSIM_KERNELS_HAVE_CUDA. Launchers are asynchronous on `stream` and return the launch status.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/paged_kv.h"
#include "kernels/work_plan.h"

namespace kvsim::kernels {

/// Device copy of an attention_work_plan (see work_plan.h), passed by value to the kernels.
struct attention_work_view {
  const std::int32_t* item_row = nullptr;         // [num_items]
  const std::int32_t* item_seq = nullptr;         // [num_items]
  const std::int32_t* item_kv_begin = nullptr;    // [num_items]
  const std::int32_t* item_kv_end = nullptr;      // [num_items]
  const std::int32_t* row_item_indptr = nullptr;  // [num_rows + 1]
  std::int32_t num_items = 0;
  std::int32_t num_rows = 0;
  std::int32_t max_items_per_row = 0;  // > 1: the merge kernel runs
};

/// Split-KV partials; needed only when work.max_items_per_row > 1.
struct attention_split_workspace {
  float* o_part = nullptr;    // [num_items, num_q_heads, head_size] normalised partial outputs
  float* lse_part = nullptr;  // [num_items, num_q_heads] log2-sum-exp: m + log2(l) (base 2!)
};

/// Paged decode: one query row per sequence (work planned with q_indptr = nullptr).
/// kv: device pool/tables/lengths, dtype kF16 or kBF16, head_size 64/128/256, block_size
/// 8/16/32, strides and pool 16-byte aligned. q/out: `[num_rows, num_q_heads, head_size]`.
/// Grid (num_items, Hkv) of the kernel `path` resolves to (resolve_attention_path:
/// PagedAttentionKernel or PagedAttentionMmaKernel), then PagedAttentionMergeKernel if split.
/// kTensorCore with G = num_q_heads / Hkv > 16 returns cudaErrorInvalidValue.
cudaError_t PagedAttentionDecode(const paged_kv_view& kv, const void* q, void* out,
                                 std::int32_t num_q_heads, float scale,
                                 const attention_work_view& work,
                                 const attention_split_workspace& workspace, cudaStream_t stream,
                                 AttentionPath path = AttentionPath::kAuto);

/// Paged prefill/append: rows of q_len chunks, bottom-right causal (the plan encodes each row's
/// visible keys). Same kernels as decode, one CTA per (query row, KV chunk, KV head).
cudaError_t PagedAttentionPrefill(const paged_kv_view& kv, const void* q, void* out,
                                  std::int32_t num_q_heads, float scale,
                                  const attention_work_view& work,
                                  const attention_split_workspace& workspace, cudaStream_t stream,
                                  AttentionPath path = AttentionPath::kAuto);

/// CTAs resident at once on the current device for these parameters (occupancy x SMs) with the
/// kernel `path` resolves to: the `max_ctas` argument of plan_attention_work. Pass the same path
/// as to the launch, so that the split plan fits that kernel's wave.
cudaError_t PagedAttentionMaxResidentCtas(DType dtype, std::int32_t head_size,
                                          std::int32_t block_size, std::int32_t group_size,
                                          std::int64_t* max_ctas,
                                          AttentionPath path = AttentionPath::kAuto);

/// reshape_and_cache: key/value `[num_tokens, Hkv, D]` (pool dtype, any of f32/f16/bf16) into
/// slots `slot_mapping[num_tokens]`; negative slots are skipped. Block tables are not used.
cudaError_t ReshapeAndCache(const paged_kv_view& kv, const void* key, const void* value,
                            const std::int64_t* slot_mapping, std::int64_t num_tokens,
                            cudaStream_t stream);

/// vLLM's swap_blocks (csrc/cache_kernels.cu) for one layer: for each pair (src, dst) of the host
/// array `block_mapping` [num_pairs, 2], in order, K and V of block src of `src` are copied to
/// block dst of `dst` (two cudaMemcpyAsync per pair: K and V of a block are each one run of
/// stride_block elements, stride_kv apart). One view is device memory and the other host memory
/// (pinned: the copies are then asynchronous on `stream`); same dtype, block shape and
/// contiguous-block strides. Block ids are not range-checked here (check_block_mapping).
cudaError_t SwapBlocks(const paged_kv_view& src, const paged_kv_view& dst,
                       const std::int64_t* block_mapping, std::int64_t num_pairs,
                       cudaStream_t stream);

/// vLLM's copy_blocks_kernel for one layer: for each pair (src, dst) of the device array
/// `block_mapping` [num_pairs, 2], block dst of `kv` (K and V) becomes a copy of block src. Grid
/// (num_pairs, 2: K and V), 128 threads copying 16-byte words (2-byte words when a block's K run
/// is not a multiple of 16 bytes or the pool is not 16-byte aligned). The pairs run at once: no
/// block may be both a source and a destination (check_block_mapping).
cudaError_t CopyBlocks(const paged_kv_view& kv, const std::int64_t* block_mapping,
                       std::int64_t num_pairs, cudaStream_t stream);

/// Dense fp32 reference attention (kernels.md §7.5), no paging, no shared code with the fast path.
struct dense_attention_args {
  const float* q = nullptr;                 // [num_rows, num_q_heads, head_size]
  const float* k = nullptr;                 // [total_kv, num_kv_heads, head_size] seqs concatenated
  const float* v = nullptr;                 // [total_kv, num_kv_heads, head_size]
  const std::int32_t* q_indptr = nullptr;   // [num_seqs + 1]
  const std::int32_t* kv_indptr = nullptr;  // [num_seqs + 1]
  float* scores = nullptr;                  // scratch [num_rows, num_q_heads, max_kv_len]
  float* out = nullptr;                     // [num_rows, num_q_heads, head_size]
  std::int32_t num_seqs = 0;
  std::int32_t num_rows = 0;
  std::int32_t num_q_heads = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_size = 0;
  std::int32_t max_kv_len = 0;
  float scale = 1.0f;
};
/// Grid (num_rows, Hq), 128 threads, three fp32 passes (scores, expf + sum, P.V).
cudaError_t DenseAttentionReference(const dense_attention_args& args, cudaStream_t stream);

}  // namespace kvsim::kernels
