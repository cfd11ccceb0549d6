#pragma once
// Strong ids and basic scalar types shared by the core.

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

}  // namespace kvsim
