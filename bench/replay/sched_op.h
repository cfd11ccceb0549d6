#pragma once
// One scheduler-mode op of a generated trace, in the compact form the core-only timings replay
// (V1's and V0's scheduler traces alike).

#include <cstdint>
#include <vector>

namespace kvsim::bench {

struct SchedOp {
  enum class Kind : std::uint8_t { kAdd, kSchedule, kUpdate, kAbort };
  Kind kind = Kind::kSchedule;
  std::int32_t req = -1;  // kAdd / kAbort: request slot
  std::int64_t max_tokens = 0;
  std::vector<std::int32_t> prompt;
};

}  // namespace kvsim::bench
