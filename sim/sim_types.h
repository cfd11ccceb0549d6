#pragma once
// Scalar types shared by the simulator.

#include <cstdint>

namespace kvsim {

/// Simulation clock: integer nanoseconds since t = 0.
using SimTimeNs = std::int64_t;

inline constexpr SimTimeNs kNsPerSecond = 1'000'000'000;
inline constexpr SimTimeNs kNsPerMs = 1'000'000;
inline constexpr SimTimeNs kNsPerUs = 1'000;

/// Seconds (double) to integer nanoseconds, rounded to nearest.
constexpr SimTimeNs seconds_to_ns(double seconds) {
  return static_cast<SimTimeNs>(seconds * 1e9 + (seconds >= 0 ? 0.5 : -0.5));
}

}  // namespace kvsim
