#pragma once
// One interface over the CPU and CUDA backends, chosen at run time (validate/ --backend cpu|cuda).
// Every pointer argument is host memory; the backend owns its pool (host or device).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "kernels/paged_kv.h"
#include "kernels/work_plan.h"

namespace kvsim::kernels {

enum class BackendKind : std::uint8_t { kCpu, kCuda };

/// Parses "cpu" or "cuda"; throws std::invalid_argument otherwise.
BackendKind parse_backend_kind(std::string_view name);
/// "cpu" or "cuda".
const char* backend_name(BackendKind kind);

/// Which way swap_blocks copies (vLLM V0's CacheEngine.swap_in / swap_out).
enum class SwapDirection : std::uint8_t {
  kIn,   // swap pool (CPU memory) -> pool
  kOut,  // pool -> swap pool
};

/// True when this build has CUDA and a usable device is present. Never throws: any CUDA error
/// (no driver, no device, insufficient driver) means false.
bool cuda_device_available();

/// The current CUDA device's name and compute capability, e.g. "NVIDIA H100 80GB HBM3 (sm_90)";
/// "cuda device" when it cannot be read, "none" in a build without CUDA.
std::string cuda_device_name();

/// Latency of one timed attention call, microseconds.
struct KernelTiming {
  double median_us = 0;
  double p10_us = 0;
  double p90_us = 0;
  double min_us = 0;
  std::int32_t repeats = 0;
};

/// Sorted-sample statistics of `samples_us` (reordered in place). Precondition: n >= 1.
KernelTiming timing_from_samples(double* samples_us, std::int32_t n);

/// A batch of sequences over the backend's pool (host arrays).
struct attention_batch {
  const std::int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  std::int32_t max_blocks_per_seq = 0;
  const std::int32_t* seq_lens = nullptr;  // [num_seqs], including this step's new tokens
  std::int32_t num_seqs = 0;
  const std::int32_t* q_indptr = nullptr;  // [num_seqs + 1]; nullptr = decode (1 row per seq)
  std::int32_t num_q_heads = 0;
  float scale = 1.0f;

  /// Query rows: q_indptr[num_seqs] or num_seqs for decode.
  std::int64_t num_q_rows() const { return q_indptr ? q_indptr[num_seqs] : num_seqs; }
};

/// The byte every element of a fresh, cleared or released pool block is filled with, in every
/// backend: all-ones is a NaN in fp32, fp16 and bf16 alike, and one pattern makes the backends'
/// pools comparable byte for byte.
inline constexpr unsigned char kPoisonByte = 0xff;

/// Paged attention and KV writes over a pool owned by the backend.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual BackendKind kind() const = 0;

  /// (Re)creates the pool `[2, num_blocks, block_size, num_kv_heads, head_size]` (vLLM V1
  /// layout) with every element NaN, so unwritten slots poison any read of them. The CPU backend
  /// allocates lazily: a block takes memory at its first write (and is NaN-filled then); a block
  /// never written costs nothing and reads as NaN. The CUDA backend allocates the whole pool.
  virtual void init_pool(const kv_pool_shape& shape) = 0;
  virtual const kv_pool_shape& pool_shape() const = 0;
  /// Bytes of pool storage held now, the swap pool's included (CPU: written blocks x block bytes;
  /// CUDA: the whole pool and the whole swap pool).
  virtual std::int64_t pool_resident_bytes() const = 0;
  /// Forgets every block's content (every element reads as NaN again, as after init_pool); the
  /// CPU backend frees the blocks' storage. O(blocks held).
  virtual void clear_pool() = 0;
  /// Forgets block `block`'s content (it reads as NaN again); the CPU backend frees its storage.
  /// Throws std::invalid_argument for a block past the pool. O(1) (CPU), O(block) (CUDA).
  virtual void release_block(std::int64_t block) = 0;

  /// reshape_and_cache: key/value `[num_tokens, Hkv, D]` (pool dtype) into slots
  /// `slot_mapping[num_tokens]` (block_id * block_size + offset; negative = skip). Throws
  /// std::invalid_argument for a slot past the pool.
  virtual void write_kv(const void* key, const void* value, const std::int64_t* slot_mapping,
                        std::int64_t num_tokens) = 0;

  /// Decode or prefill/append attention (see cpu_paged_attention for the semantics).
  /// q/out: `[batch.num_q_rows(), num_q_heads, head_size]` in the pool dtype.
  virtual void attention(const attention_batch& batch, const void* q, void* out) = 0;
  /// The kernel-only latency of attention(batch, q, out): `warmup` untimed calls, then `repeats`
  /// (>= 1) timed ones; `out` receives the last call's output. The CPU backend times each call
  /// with the host clock; the CUDA backend uploads and plans once and times each launch with
  /// CUDA events on its own pool, so the arguments' transfers stay out of the figure.
  virtual KernelTiming time_attention(const attention_batch& batch, const void* q,
                                      std::int32_t warmup, std::int32_t repeats, void* out);

  /// Copies the whole pool (pool_shape().num_elements() elements, vLLM V1 layout) into `dst`.
  virtual void read_pool(void* dst) const = 0;
  /// Overwrites the whole pool from `src` (same size and layout as read_pool); every block is
  /// then held.
  virtual void load_pool(const void* src) = 0;

  // ---- vLLM V0's block moves (CacheEngine.swap_in / swap_out / copy) ----
  // `block_mapping` is [num_pairs, 2] (src, dst) block ids, host memory, as vLLM's tensor.

  /// (Re)creates the swap pool (vLLM V0's CPU cache): `num_blocks` blocks shaped like the pool's,
  /// in host memory, every element NaN. CPU backend: a block takes memory at its first swap-out;
  /// CUDA: pinned host memory, whole. 0 = none (the state after init_pool).
  virtual void init_swap_pool(std::int64_t num_blocks) = 0;
  virtual std::int64_t swap_pool_blocks() const = 0;
  /// vLLM's swap_blocks: for each pair in order, the whole block (K and V) from pool block src to
  /// swap block dst (kOut) or from swap block src to pool block dst (kIn). Throws
  /// std::invalid_argument for a block out of range. O(num_pairs x block).
  virtual void swap_blocks(SwapDirection direction, const std::int64_t* block_mapping,
                           std::int64_t num_pairs) = 0;
  /// vLLM's copy_blocks: for each pair, pool block dst (K and V) becomes a copy of pool block src.
  /// The pairs are independent (the CUDA kernel copies them at once): no block may be both a
  /// source and a destination, nor a destination twice (std::invalid_argument, as out of range).
  /// O(num_pairs x block).
  virtual void copy_blocks(const std::int64_t* block_mapping, std::int64_t num_pairs) = 0;
  /// Forgets swap block `block`'s content (it reads as NaN again); the CPU backend frees it.
  virtual void release_swap_block(std::int64_t block) = 0;
  /// Copies the whole swap pool (`[2, swap_pool_blocks(), block_size, Hkv, D]`) into `dst`.
  virtual void read_swap_pool(void* dst) const = 0;

  /// Forces the split-KV count (CUDA only; 0 = automatic policy). The CPU backend ignores it.
  virtual void set_forced_splits(std::int32_t /*splits*/) {}
  /// Forces the attention kernel (CUDA only; kAuto = chosen by the group size, see
  /// resolve_attention_path). The CPU backend ignores it.
  virtual void set_attention_path(AttentionPath /*path*/) {}
};

/// Checks a block_mapping for swap_blocks (`src_blocks`/`dst_blocks`: the sizes of the source and
/// destination pools) or, with `independent`, for copy_blocks (also: no block both a source and a
/// destination, no destination twice). Throws std::invalid_argument. O(n log n).
void check_block_mapping(const std::int64_t* block_mapping, std::int64_t num_pairs,
                         std::int64_t src_blocks, std::int64_t dst_blocks, bool independent);

/// A backend of `kind`. Throws std::runtime_error for kCuda when !cuda_device_available().
std::unique_ptr<AttentionBackend> make_attention_backend(BackendKind kind);

}  // namespace kvsim::kernels
