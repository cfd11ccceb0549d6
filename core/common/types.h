#pragma once
// Strong ids and basic scalar types shared by the core.

#include <bit>
#include <cstdint>

namespace kvsim {

/// A token id. vLLM token ids are arbitrary ints (its multimodal tests use -1 for placeholders).
using Token = std::int32_t;

/// Index of a KV cache block in the pool, 0 .. num_gpu_blocks-1.
enum class BlockId : std::int32_t {};
constexpr BlockId kNoBlock{-1};
constexpr std::int32_t to_int(BlockId b) { return static_cast<std::int32_t>(b); }

/// Identity of an interned block hash (see BlockHashTable). Equal ids <=> equal vLLM block hashes.
enum class HashId : std::int32_t {};
constexpr HashId kNoHash{-1};
constexpr std::int32_t to_int(HashId h) { return static_cast<std::int32_t>(h); }

/// Identity of an interned tuple of block-hash extra keys (multimodal hashes).
/// kExtraNone is Python's None, kExtraEmpty is the empty tuple (); they differ in vLLM's hash.
enum class ExtraKeysId : std::int32_t {};
constexpr ExtraKeysId kExtraNone{0};
constexpr ExtraKeysId kExtraEmpty{1};

/// ceil(a / b) for non-negative a and positive b.
constexpr std::int64_t cdiv(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

/// Python's floor division (a // b) for positive b.
constexpr std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  const std::int64_t q = a / b;
  return a % b != 0 && a < 0 ? q - 1 : q;
}

/// A positive divisor fixed at construction (a block size, a ratio of block sizes): dividing by
/// it is a shift when it is a power of two. Every engine step divides token counts by block
/// sizes, and a 64-bit division costs tens of cycles; GCC also turns `d == 1 ? x : x / d` into an
/// unconditional division, so a test for the usual value does not avoid it.
class Divisor {
 public:
  constexpr Divisor() = default;
  constexpr explicit Divisor(std::int64_t d)
      : value_(d),
        shift_(d > 0 && std::has_single_bit(static_cast<std::uint64_t>(d))
                   ? std::countr_zero(static_cast<std::uint64_t>(d))
                   : -1) {}
  constexpr std::int64_t value() const { return value_; }
  /// a / d for a >= 0 (a negative a gets a floor, not C++'s truncation, when d is a power of
  /// two).
  constexpr std::int64_t div(std::int64_t a) const {
    return shift_ >= 0 ? a >> shift_ : a / value_;
  }
  /// a // d, Python's floor division (an arithmetic shift floors).
  constexpr std::int64_t floor(std::int64_t a) const {
    return shift_ >= 0 ? a >> shift_ : floor_div(a, value_);
  }
  /// cdiv(a, d) for a >= 0.
  constexpr std::int64_t ceil(std::int64_t a) const { return div(a + value_ - 1); }

 private:
  std::int64_t value_ = 1;
  int shift_ = 0;  // log2(value_), or -1 when it is not a power of two
};

}  // namespace kvsim
