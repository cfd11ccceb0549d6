#pragma once
// Host helper: a work plan and its split workspace in device memory (CUDA builds only).

#include <cstdint>
#include <vector>

#include "kernels/attention_cuda.h"
#include "kernels/cuda_utils.h"
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

 private:
  DeviceBuffer<std::int32_t> ints_;
  DeviceBuffer<float> o_part_;    // [num_items, num_q_heads, head_size]
  DeviceBuffer<float> lse_part_;  // [num_items, num_q_heads]
  attention_work_view view_;
};

}  // namespace kvsim::kernels
