#include "sim/engine/parallel_sampling.h"

#include "sim/common/rng.h"

namespace kvsim {

std::uint64_t sample_output_seed(std::uint64_t output_seed, std::int64_t i) {
  if (i == 0) return output_seed;
  return splitmix64(output_seed ^ splitmix64(0x5a3f1e7bULL + static_cast<std::uint64_t>(i)));
}

}  // namespace kvsim
