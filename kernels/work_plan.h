#pragma once
// Host-side split-KV policy (kernels.md §7.3): which (query row, KV chunk) work items to launch.
// Plain C++ so the policy is unit-tested without a GPU.

#include <cstdint>
#include <string_view>
#include <vector>

namespace kvsim::kernels {

/// Which kernel computes a paged attention call (kernels.md §7.2, "Math path").
enum class AttentionPath : std::uint8_t {
  kAuto,        // kTensorCore for kMinTensorCoreGroup <= G <= kMaxTensorCoreGroup, else kCudaCore
  kCudaCore,    // PagedAttentionKernel: fp32 FMAs on CUDA cores, any G with (D/8) x G <= 1024
  kTensorCore,  // PagedAttentionMmaKernel: mma.sync m16n8k16, the G heads as the 16 MMA rows
};

/// Group sizes (query heads per KV head) the automatic choice sends to the tensor-core kernel.
/// Below 4 the CUDA-core kernel does little arithmetic per byte; above 16 the heads no longer fit
/// the 16 rows of one MMA tile.
inline constexpr std::int32_t kMinTensorCoreGroup = 4;
inline constexpr std::int32_t kMaxTensorCoreGroup = 16;

/// The path that runs for `requested` at group size `group_size`: kAuto is resolved by the group
/// size, a forced path is returned unchanged (the launchers reject kTensorCore for G > 16).
AttentionPath resolve_attention_path(AttentionPath requested, std::int32_t group_size);

/// "auto", "cuda_core" or "tensor_core".
const char* attention_path_name(AttentionPath path);
/// Parses the names of attention_path_name; throws std::invalid_argument otherwise.
AttentionPath parse_attention_path(std::string_view name);

/// Smallest KV chunk the automatic policy splits into (FlashInfer's lower bound).
inline constexpr std::int32_t kMinSplitChunkTokens = 128;

/// Work items of one attention call, row-major by query row. Each item covers KV tokens
/// [kv_begin, kv_end) of one query row, for every KV head (grid.y). A row whose keys are all
/// masked (seq_len 0) still gets one empty item so that its output is written (as 0).
struct attention_work_plan {
  std::int32_t chunk_tokens = 0;             // KV tokens per item; 0 = one item per row
  std::int32_t max_items_per_row = 0;        // 1 = no split, no reduce kernel needed
  std::vector<std::int32_t> item_row;        // [num_items] query row (index into Q/O)
  std::vector<std::int32_t> item_seq;        // [num_items] sequence of that row
  std::vector<std::int32_t> item_kv_begin;   // [num_items]
  std::vector<std::int32_t> item_kv_end;     // [num_items] exclusive; <= the row's visible keys
  std::vector<std::int32_t> row_item_indptr; // [num_rows + 1] items of row r: [indptr[r], indptr[r+1])

  std::int32_t num_items() const { return static_cast<std::int32_t>(item_row.size()); }
  std::int32_t num_rows() const { return static_cast<std::int32_t>(row_item_indptr.size()) - 1; }
};

/// Plans the work of a decode (q_indptr == nullptr) or prefill call. Row i of a q_len chunk sees
/// i + seq_len - q_len + 1 keys (bottom-right causal).
/// - forced_splits > 0: chunk = ceil(max_visible / forced_splits), so the longest row gets exactly
///   forced_splits items (shorter rows fewer).
/// - forced_splits == 0 (auto): no split when num_rows * num_kv_heads >= max_ctas (a full wave) or
///   the longest row is <= kMinSplitChunkTokens; otherwise the smallest chunk (multiple of
///   block_size, >= kMinSplitChunkTokens) such that sum_rows ceil(visible / chunk) * Hkv <= max_ctas,
///   found by binary search. O(num_rows * log(max_visible)).
/// Inputs are host arrays: seq_lens[num_seqs], q_indptr[num_seqs + 1].
attention_work_plan plan_attention_work(const std::int32_t* seq_lens, const std::int32_t* q_indptr,
                                        std::int32_t num_seqs, std::int32_t num_kv_heads,
                                        std::int32_t block_size, std::int64_t max_ctas,
                                        std::int32_t forced_splits);

}  // namespace kvsim::kernels
