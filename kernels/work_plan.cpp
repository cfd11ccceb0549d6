#include "kernels/work_plan.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/check.h"

namespace kvsim::kernels {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

std::int64_t count_ctas(const std::vector<std::int32_t>& visible, std::int64_t chunk,
                        std::int64_t num_kv_heads) {
  std::int64_t n = 0;
  for (const std::int32_t v : visible) n += std::max<std::int64_t>(1, ceil_div(v, chunk));
  return n * num_kv_heads;
}

}  // namespace

AttentionPath resolve_attention_path(AttentionPath requested, std::int32_t group_size) {
  if (requested != AttentionPath::kAuto) return requested;
  return group_size >= kMinTensorCoreGroup && group_size <= kMaxTensorCoreGroup
             ? AttentionPath::kTensorCore
             : AttentionPath::kCudaCore;
}

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::kAuto: return "auto";
    case AttentionPath::kCudaCore: return "cuda_core";
    case AttentionPath::kTensorCore: return "tensor_core";
  }
  return "?";
}

AttentionPath parse_attention_path(std::string_view name) {
  for (const AttentionPath p :
       {AttentionPath::kAuto, AttentionPath::kCudaCore, AttentionPath::kTensorCore})
    if (name == attention_path_name(p)) return p;
  throw std::invalid_argument("unknown attention path '" + std::string(name) +
                              "' (allowed: auto, cuda_core, tensor_core)");
}

attention_work_plan plan_attention_work(const std::int32_t* seq_lens, const std::int32_t* q_indptr,
                                        std::int32_t num_seqs, std::int32_t num_kv_heads,
                                        std::int32_t block_size, std::int64_t max_ctas,
                                        std::int32_t forced_splits) {
  KVSIM_KERNELS_CHECK(num_seqs >= 0 && num_kv_heads > 0 && block_size > 0, "bad shape");
  KVSIM_KERNELS_CHECK(forced_splits >= 0, "forced_splits must be >= 0");
  std::vector<std::int32_t> visible;  // [num_rows]
  std::vector<std::int32_t> row_seq;  // [num_rows]
  for (std::int32_t s = 0; s < num_seqs; ++s) {
    const std::int32_t q_len = q_indptr ? q_indptr[s + 1] - q_indptr[s] : 1;
    for (std::int32_t i = 0; i < q_len; ++i) {
      visible.push_back(std::max(0, seq_lens[s] - q_len + i + 1));
      row_seq.push_back(s);
    }
  }
  const std::int32_t max_visible =
      visible.empty() ? 0 : *std::max_element(visible.begin(), visible.end());

  std::int64_t chunk = 0;  // 0: whole row
  if (forced_splits > 0) {
    chunk = std::max<std::int64_t>(1, ceil_div(max_visible, forced_splits));
  } else if (static_cast<std::int64_t>(visible.size()) * num_kv_heads < max_ctas &&
             max_visible > kMinSplitChunkTokens) {
    std::int64_t lo = ceil_div(kMinSplitChunkTokens, block_size);  // in blocks
    std::int64_t hi = ceil_div(max_visible, block_size);
    while (lo < hi) {  // smallest chunk (in blocks) whose CTA count fits one wave
      const std::int64_t mid = (lo + hi) / 2;
      if (count_ctas(visible, mid * block_size, num_kv_heads) <= max_ctas)
        hi = mid;
      else
        lo = mid + 1;
    }
    chunk = lo * block_size;
  }

  attention_work_plan plan;
  plan.chunk_tokens = static_cast<std::int32_t>(chunk);
  plan.row_item_indptr.push_back(0);
  for (std::size_t r = 0; r < visible.size(); ++r) {
    const std::int64_t len = visible[r];
    const std::int64_t step = chunk > 0 ? chunk : std::max<std::int64_t>(len, 1);
    const std::int64_t items = std::max<std::int64_t>(1, ceil_div(len, step));
    for (std::int64_t j = 0; j < items; ++j) {
      plan.item_row.push_back(static_cast<std::int32_t>(r));
      plan.item_seq.push_back(row_seq[r]);
      plan.item_kv_begin.push_back(static_cast<std::int32_t>(std::min(len, j * step)));
      plan.item_kv_end.push_back(static_cast<std::int32_t>(std::min(len, (j + 1) * step)));
    }
    plan.max_items_per_row = std::max(plan.max_items_per_row, static_cast<std::int32_t>(items));
    plan.row_item_indptr.push_back(plan.num_items());
  }
  return plan;
}

}  // namespace kvsim::kernels
