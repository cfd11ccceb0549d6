#pragma once
// The time vLLM V0's worker spends moving KV blocks before a step's forward pass: it swaps the
// step's blocks_to_swap_in from CPU memory, blocks_to_swap_out to it (cache_engine swap_in /
// swap_out, one copy per block over the host link) and copies blocks_to_copy within the GPU
// (copy_blocks: each copy reads and writes a block), all on the model's stream before the
// forward pass, so the step takes that much longer. A block is its bytes over all layers on one
// GPU (the swap of one block moves every layer's page of it).

#include <cstdint>

#include "core/engine_api.h"
#include "sim/common/sim_types.h"

namespace kvsim {

struct BlockMoveCost {
  double page_bytes = 0;             // one block over all layers on one GPU
  double host_link_bytes_per_s = 0;  // one direction of the host link (PCIe)
  double hbm_bytes_per_s = 0;        // GPU memory bandwidth

  /// round(swapped_blocks * page / host link) + round(copied_blocks * 2 * page / hbm), in ns.
  [[nodiscard]] SimTimeNs time_ns(std::int64_t swapped_blocks, std::int64_t copied_blocks) const;
  /// time_ns of a step's swaps (in and out) and copies.
  [[nodiscard]] SimTimeNs step_time_ns(const SchedulerOutput& out) const {
    return time_ns(
        static_cast<std::int64_t>(out.blocks_to_swap_in.size() + out.blocks_to_swap_out.size()),
        static_cast<std::int64_t>(out.blocks_to_copy.size()));
  }
};

}  // namespace kvsim
