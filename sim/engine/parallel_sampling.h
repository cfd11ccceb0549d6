#pragma once
// Parallel sampling (`workload.n`, `workload.parallel_sampling`): how the simulator turns one
// request of the workload into its n samples. Sample 0 is the request itself (n = 1 changes
// nothing); sample i has the same prompt, arrival and output length, tokens of its own and
// request_id = id * n + i. In fanout mode the samples are independent requests queued in sample
// order (vLLM v0.7.2's ParallelSampleSequenceGroup); in fork mode samples 1..n-1 fork from
// sample 0 after its prompt (EngineCore::add_forking_request).

#include <cstdint>

namespace kvsim {

/// The output seed of sample `i`: the request's own for sample 0, a mix of it and i otherwise.
[[nodiscard]] std::uint64_t sample_output_seed(std::uint64_t output_seed, std::int64_t i);

/// The request_id of sample `i` of the request `id` with `n` samples: id * n + i (distinct for
/// distinct (id, i) while id * n fits 64 bits).
[[nodiscard]] constexpr std::uint64_t sample_request_id(std::uint64_t id, std::int64_t n,
                                                        std::int64_t i) {
  return id * static_cast<std::uint64_t>(n) + static_cast<std::uint64_t>(i);
}

}  // namespace kvsim
