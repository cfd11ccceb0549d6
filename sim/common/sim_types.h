#pragma once
// Scalar types shared by the simulator.

#include <cstdint>

namespace kvsim {

/// Simulation clock: integer nanoseconds since t = 0.
using SimTimeNs = std::int64_t;

inline constexpr SimTimeNs kNsPerSecond = 1'000'000'000;
inline constexpr SimTimeNs kNsPerMs = 1'000'000;
inline constexpr SimTimeNs kNsPerUs = 1'000;

/// The largest time the simulator represents (about 285 years); conversions saturate here.
inline constexpr SimTimeNs kMaxSimTimeNs = 9'000'000'000'000'000'000;

/// Seconds (double) to integer nanoseconds, rounded to nearest, saturating at +-kMaxSimTimeNs
/// (NaN gives 0).
constexpr SimTimeNs seconds_to_ns(double seconds) {
  const double ns = seconds * 1e9;
  if (!(ns == ns)) return 0;
  if (ns >= static_cast<double>(kMaxSimTimeNs)) return kMaxSimTimeNs;
  if (ns <= -static_cast<double>(kMaxSimTimeNs)) return -kMaxSimTimeNs;
  return static_cast<SimTimeNs>(ns + (ns >= 0 ? 0.5 : -0.5));
}

/// a + b for non-negative times, saturating at kMaxSimTimeNs.
constexpr SimTimeNs add_time_saturating(SimTimeNs a, SimTimeNs b) {
  return a > kMaxSimTimeNs - b ? kMaxSimTimeNs : a + b;
}

}  // namespace kvsim
