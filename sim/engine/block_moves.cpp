#include "sim/engine/block_moves.h"

#include <cmath>

namespace kvsim {

SimTimeNs BlockMoveCost::time_ns(std::int64_t swapped_blocks, std::int64_t copied_blocks) const {
  SimTimeNs ns = 0;
  if (swapped_blocks > 0)
    ns += std::llround(static_cast<double>(swapped_blocks) * page_bytes / host_link_bytes_per_s *
                       1e9);
  if (copied_blocks > 0)
    ns +=
        std::llround(static_cast<double>(copied_blocks) * 2.0 * page_bytes / hbm_bytes_per_s * 1e9);
  return ns;
}

}  // namespace kvsim
