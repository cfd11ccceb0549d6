#pragma once
// Host helper: a work plan and its split workspace in device memory (CUDA builds only).

#include <cstdint>
#include <vector>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_utils.h"
#include "kernels/paged_kv.h"
#include "kernels/work_plan.h"

namespace kvsim::kernels {

/// Device copy of an attention_work_plan plus the fp32 split workspace it needs.
class DeviceWorkPlan {
 public:
  /// Uploads `plan` (synchronous copy) and sizes the workspace for `num_q_heads` x `head_size`.
  void upload(const attention_work_plan& plan, std::int32_t num_q_heads, std::int32_t head_size) {
    const std::size_t n = static_cast<std::size_t>(plan.num_items());
    std::vector<std::int32_t> packed;  // [item_row | item_seq | kv_begin | kv_end | row_item_indptr]
    packed.reserve(4 * n + plan.row_item_indptr.size());
    for (const auto* part : {&plan.item_row, &plan.item_seq, &plan.item_kv_begin, &plan.item_kv_end,
                             &plan.row_item_indptr})
      packed.insert(packed.end(), part->begin(), part->end());
    ints_.resize(packed.size());
    ints_.upload(packed.data(), packed.size());
    view_.item_row = ints_.get();
    view_.item_seq = ints_.get() + n;
    view_.item_kv_begin = ints_.get() + 2 * n;
    view_.item_kv_end = ints_.get() + 3 * n;
    view_.row_item_indptr = ints_.get() + 4 * n;
    view_.num_items = plan.num_items();
    view_.num_rows = plan.num_rows();
    view_.max_items_per_row = plan.max_items_per_row;
    if (plan.max_items_per_row > 1) {
      o_part_.resize(n * static_cast<std::size_t>(num_q_heads) * static_cast<std::size_t>(head_size));
      lse_part_.resize(n * static_cast<std::size_t>(num_q_heads));
    }
  }
  const attention_work_view& view() const { return view_; }
  attention_split_workspace workspace() const { return {o_part_.get(), lse_part_.get()}; }

  /// Plans a batch for the kernel `path` picks (its occupancy on the current device sizes the
  /// splits; forced_splits 0 = automatic), uploads the plan and returns it. A null q_indptr is a
  /// decode batch (one query token per sequence).
  attention_work_plan plan(const kv_pool_shape& shape, const std::int32_t* seq_lens,
                           const std::int32_t* q_indptr, std::int32_t num_seqs,
                           std::int32_t num_q_heads, std::int32_t forced_splits,
                           AttentionPath path) {
    std::int64_t max_ctas = 0;
    KVSIM_CUDA_CHECK(PagedAttentionMaxResidentCtas(shape.dtype, shape.head_size, shape.block_size,
                                                   num_q_heads / shape.num_kv_heads, &max_ctas,
                                                   path));
    attention_work_plan p = plan_attention_work(seq_lens, q_indptr, num_seqs, shape.num_kv_heads,
                                                shape.block_size, max_ctas, forced_splits);
    upload(p, num_q_heads, shape.head_size);
    decode_ = q_indptr == nullptr;
    return p;
  }
  /// Launches the planned batch: PagedAttentionDecode or PagedAttentionPrefill, as planned.
  cudaError_t launch(const paged_kv_view& kv, const void* q, void* out, std::int32_t num_q_heads,
                     float scale, cudaStream_t stream, AttentionPath path) const {
    return decode_ ? PagedAttentionDecode(kv, q, out, num_q_heads, scale, view_, workspace(),
                                          stream, path)
                   : PagedAttentionPrefill(kv, q, out, num_q_heads, scale, view_, workspace(),
                                           stream, path);
  }

 private:
  DeviceBuffer<std::int32_t> ints_;
  DeviceBuffer<float> o_part_;    // [num_items, num_q_heads, head_size]
  DeviceBuffer<float> lse_part_;  // [num_items, num_q_heads]
  attention_work_view view_;
  bool decode_ = true;
};

}  // namespace kvsim::kernels
