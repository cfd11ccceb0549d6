#pragma once
// The KV content model (architecture.md, "The KV content model"): the K, V and Q vectors of a
// request's token are a deterministic pseudo-random function of the request's tokens up to it, so
// two requests that share a prefix share exactly those K/V values, as a real model's would, and
// any cache decision that serves a token from the wrong prefix or position shows up in attention.
//
//   key(-1)   = stream_seed(seed, "validate.kv_content")                       (sim/rng.h)
//   key(p)    = splitmix64(key(p-1) ^ (uint32(token[p]) << 32 | uint32(p))), 0 mapped to 1
//   x(e)      = splitmix64((key(p) ^ tag) + e * 0x9e3779b97f4a7c15),  e = head * head_size + dim
//   value     = sqrt(3) * (2 * ((x >> 40) + 0.5) / 2^24 - 1)   (U(-sqrt 3, sqrt 3): mean 0, std 1)
// rounded to the pool dtype, with tag distinct for K, V and Q. key(p) depends on tokens [0, p] and
// on p, never on the request's id, block table or step. Keys are never 0 (0 marks "never written").

#include <cstdint>
#include <span>
#include <vector>

#include "core/common/types.h"
#include "kernels/dtype.h"

namespace kvsim::validate {

/// Which vector of a token.
enum class KvPart : std::uint8_t { kKey, kValue, kQuery };

class KvContentModel {
 public:
  /// Precondition: heads and head_size >= 1, num_q_heads a multiple of num_kv_heads.
  KvContentModel(std::uint64_t seed, int num_q_heads, int num_kv_heads, int head_size,
                 kernels::DType dtype);

  /// keys[p] = key(p) for p in [0, count). Precondition: count <= tokens.size(). O(count).
  void prefix_keys(std::span<const Token> tokens, std::int64_t count,
                   std::vector<std::uint64_t>& keys) const;
  /// Extends `keys`, which holds key(0 .. k-1) of the same `tokens`, to key(0 .. count-1); no
  /// change when k >= count. O(count - k).
  void extend_prefix_keys(std::span<const Token> tokens, std::int64_t count,
                          std::vector<std::uint64_t>& keys) const;
  /// Appends key(k) of `token` at position k = keys.size(), `keys` holding key(0 .. k-1). O(1).
  void append_key(Token token, std::vector<std::uint64_t>& keys) const;

  /// The `part` vector of the token with key `key`, rounded to the dtype, into `out`:
  /// [num_kv_heads, head_size] floats for K and V, [num_q_heads, head_size] for Q.
  void values(std::uint64_t key, KvPart part, float* out) const;

  /// Floats per token of K or V (num_kv_heads * head_size), and of Q.
  std::int64_t kv_elems() const { return std::int64_t{num_kv_heads_} * head_size_; }
  std::int64_t q_elems() const { return std::int64_t{num_q_heads_} * head_size_; }
  kernels::DType dtype() const { return dtype_; }

 private:
  std::uint64_t root_;
  int num_q_heads_, num_kv_heads_, head_size_;
  kernels::DType dtype_;
};

}  // namespace kvsim::validate
