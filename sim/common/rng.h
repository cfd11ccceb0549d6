#pragma once
// Named, seeded random streams. Every consumer of randomness owns one std::mt19937_64 made by
// make_stream(scenario_seed, "name"), so adding a stream never shifts the numbers another sees.
//
// Mixing (fixed forever; changing it changes every output):
//   stream_seed(seed, name) = splitmix64(splitmix64(seed) ^ fnv1a64(name))
// where fnv1a64 is 64-bit FNV-1a over the name's bytes and splitmix64 is Steele/Lea/Flood's
// finaliser (x += 0x9e3779b97f4a7c15; then two xor-shift-multiply rounds). std::mt19937_64 seeded
// with one integer is fully specified by the C++ standard, so streams agree on every platform.

#include <cstdint>
#include <random>
#include <string_view>

namespace kvsim {

/// The generator type of every stream.
using RngStream = std::mt19937_64;

/// splitmix64: a bijective 64-bit mixer.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// 64-bit FNV-1a of `s`.
constexpr std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : s) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

/// The seed of stream `name` under scenario seed `seed`.
constexpr std::uint64_t stream_seed(std::uint64_t seed, std::string_view name) {
  return splitmix64(splitmix64(seed) ^ fnv1a64(name));
}

/// A fresh generator for stream `name` under scenario seed `seed`.
inline RngStream make_stream(std::uint64_t seed, std::string_view name) {
  return RngStream(stream_seed(seed, name));
}

}  // namespace kvsim
