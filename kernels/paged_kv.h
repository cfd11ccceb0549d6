#pragma once
// The paged KV pool as plain arrays: one view struct shared by the CPU and CUDA backends.
// Host-only C++ and nvcc both include this header; it has no CUDA dependency.

#include <cstdint>

#include "kernels/dtype.h"

#if defined(__CUDACC__)
#define KVSIM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KVSIM_HOST_DEVICE inline
#endif

namespace kvsim::kernels {

/// A paged KV pool plus the block tables that index it, passed by value to every kernel.
///
/// The default layout is the vLLM V1 pool `[2, num_blocks, block_size, num_kv_heads, head_size]`
/// (see `make_vllm_v1_strides`), but every address is computed from the four strides, so
/// `[num_blocks, 2, block_size, Hkv, D]` and HND layouts work too. The head dimension is always
/// contiguous (stride 1). All strides and offsets are in elements and 64-bit.
/// Pointers live in the memory space of the backend that receives the view (host or device).
///
/// Block storage is either one allocation (`pool`, block b at `pool + b * stride_block`) or, on
/// the host only, one allocation per block (`block_base`, block b at `block_base[b]`, with
/// `stride_block` unused): the CPU backend's lazily allocated pool, where a block costs memory only
/// once written. The CUDA kernels take `pool` and refuse a view with `block_base` set.
struct paged_kv_view {
  void* pool = nullptr;               // [2, num_blocks, block_size, Hkv, head_size] (strided)
  void* const* block_base = nullptr;  // [num_blocks] host only; when set, `pool` is unused
  DType dtype = DType::kF16;          // element type of the pool
  std::int64_t stride_kv = 0;         // elements from K to V of the same (block, token, head)
  std::int64_t stride_block = 0;      // elements between consecutive blocks
  std::int64_t stride_token = 0;      // elements between consecutive tokens of a block
  std::int64_t stride_head = 0;       // elements between consecutive KV heads
  std::int32_t num_blocks = 0;
  std::int32_t block_size = 0;        // tokens per block
  std::int32_t num_kv_heads = 0;
  std::int32_t head_size = 0;
  const std::int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  std::int32_t max_blocks_per_seq = 0;
  const std::int32_t* seq_lens = nullptr;      // [num_seqs] cached tokens incl. this step's new ones
  std::int32_t num_seqs = 0;

  /// Element offset of K (kv = 0) or V (kv = 1) of token `token` of sequence `seq`, KV head `head`.
  /// Precondition: token < seq_lens[seq]; reads exactly one block-table entry.
  KVSIM_HOST_DEVICE std::int64_t offset(int kv, int seq, std::int64_t token, int head) const {
    const std::int64_t block =
        block_tables[static_cast<std::int64_t>(seq) * max_blocks_per_seq + token / block_size];
    return kv * stride_kv + block * stride_block + (token % block_size) * stride_token +
           head * stride_head;
  }
  /// Element offset of K or V in pool slot `slot` (= block_id * block_size + offset in block).
  KVSIM_HOST_DEVICE std::int64_t slot_offset(int kv, std::int64_t slot, int head) const {
    return kv * stride_kv + (slot / block_size) * stride_block +
           (slot % block_size) * stride_token + head * stride_head;
  }
  /// Address of K (kv = 0) or V (kv = 1), KV head `head`, of offset `token_in_block` of block
  /// `block`, through `block_base` when set and `pool` otherwise. `T` is the pool's element type.
  template <typename T>
  KVSIM_HOST_DEVICE T* element(int kv, std::int64_t block, std::int64_t token_in_block,
                               int head) const {
    const std::int64_t within = kv * stride_kv + token_in_block * stride_token + head * stride_head;
    if (block_base != nullptr) return static_cast<T*>(block_base[block]) + within;
    return static_cast<T*>(pool) + block * stride_block + within;
  }
};

/// Pool geometry without pointers.
struct kv_pool_shape {
  DType dtype = DType::kF16;
  std::int32_t num_blocks = 0;
  std::int32_t block_size = 16;
  std::int32_t num_kv_heads = 1;
  std::int32_t head_size = 128;

  /// Elements of the whole pool (K and V).
  std::int64_t num_elements() const {
    return std::int64_t{2} * num_blocks * block_size * num_kv_heads * head_size;
  }
};

/// Elements of one block (K and V) of a pool of `shape`.
inline std::int64_t block_elements(const kv_pool_shape& shape) {
  return std::int64_t{2} * shape.block_size * shape.num_kv_heads * shape.head_size;
}

/// The fields every view of `shape` shares: its shape, and the head and token strides of a
/// `[block_size, num_kv_heads, head_size]` page.
inline paged_kv_view shaped_view(const kv_pool_shape& shape) {
  paged_kv_view v;
  v.dtype = shape.dtype;
  v.num_blocks = shape.num_blocks;
  v.block_size = shape.block_size;
  v.num_kv_heads = shape.num_kv_heads;
  v.head_size = shape.head_size;
  v.stride_head = shape.head_size;
  v.stride_token = std::int64_t{shape.num_kv_heads} * shape.head_size;
  return v;
}

/// A view over per-block storage `block_base[num_blocks]`, each block laid out
/// `[2, block_size, num_kv_heads, head_size]` (block tables and lengths left empty). Host only.
inline paged_kv_view make_per_block_view(void* const* block_base, const kv_pool_shape& shape) {
  paged_kv_view v = shaped_view(shape);
  v.block_base = block_base;
  v.stride_kv = v.stride_token * shape.block_size;
  v.stride_block = 2 * v.stride_kv;
  return v;
}

/// A view with the contiguous vLLM V1 strides over `pool` (block tables and lengths left empty).
inline paged_kv_view make_vllm_v1_view(void* pool, const kv_pool_shape& shape) {
  paged_kv_view v = shaped_view(shape);
  v.pool = pool;
  v.stride_block = v.stride_token * shape.block_size;
  v.stride_kv = v.stride_block * shape.num_blocks;
  return v;
}

/// The query side of an attention call. Decode is the special case q_len = 1 for every sequence.
/// Q and O are contiguous `[num_q_tokens, num_q_heads, head_size]` in the view's dtype; the
/// tokens of sequence s are rows q_indptr[s] .. q_indptr[s+1]-1 and are its *last* q_len tokens
/// (bottom-right causal alignment: query i of a q_len chunk sees keys <= i + kv_len - q_len).
struct attention_queries {
  const std::int32_t* q_indptr = nullptr;  // [num_seqs + 1]; nullptr means decode (one row per seq)
  std::int32_t num_q_heads = 0;            // multiple of num_kv_heads; kv_head = q_head / G
  float scale = 1.0f;                      // softmax scale, usually 1/sqrt(head_size)
};

}  // namespace kvsim::kernels
