#include "validate/kv_content.h"

#include "core/common/assert.h"
#include "sim/common/rng.h"

namespace kvsim::validate {
namespace {

constexpr std::uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

constexpr std::uint64_t part_tag(KvPart part) {
  switch (part) {
    case KvPart::kKey:
      return 0x4b4b4b4b00000001ULL;
    case KvPart::kValue:
      return 0x5656565600000002ULL;
    case KvPart::kQuery:
      return 0x5151515100000003ULL;
  }
  return 0;
}

/// key(p) from key(p - 1) (the root for p = 0) and token[p] (the header's formula).
std::uint64_t next_key(std::uint64_t prev, Token token, std::int64_t p) {
  const std::uint64_t tok = static_cast<std::uint32_t>(token);
  const std::uint64_t k = splitmix64(prev ^ ((tok << 32) | static_cast<std::uint32_t>(p)));
  return k == 0 ? 1 : k;
}

}  // namespace

KvContentModel::KvContentModel(std::uint64_t seed, int num_q_heads, int num_kv_heads, int head_size,
                               kernels::DType dtype)
    : root_(stream_seed(seed, "validate.kv_content")),
      num_q_heads_(num_q_heads),
      num_kv_heads_(num_kv_heads),
      head_size_(head_size),
      dtype_(dtype) {
  KVSIM_ASSERT(
      num_q_heads >= 1 && num_kv_heads >= 1 && head_size >= 1 && num_q_heads % num_kv_heads == 0,
      "bad attention shape");
}

void KvContentModel::prefix_keys(std::span<const Token> tokens, std::int64_t count,
                                 std::vector<std::uint64_t>& keys) const {
  keys.clear();
  extend_prefix_keys(tokens, count, keys);
}

void KvContentModel::extend_prefix_keys(std::span<const Token> tokens, std::int64_t count,
                                        std::vector<std::uint64_t>& keys) const {
  KVSIM_ASSERT(count >= 0 && count <= static_cast<std::int64_t>(tokens.size()),
               "prefix_keys: count out of range");
  auto p = static_cast<std::int64_t>(keys.size());
  if (p >= count) return;
  keys.resize(static_cast<std::size_t>(count));
  std::uint64_t k = p == 0 ? root_ : keys[static_cast<std::size_t>(p - 1)];
  for (; p < count; ++p) {
    k = next_key(k, tokens[static_cast<std::size_t>(p)], p);
    keys[static_cast<std::size_t>(p)] = k;
  }
}

void KvContentModel::append_key(Token token, std::vector<std::uint64_t>& keys) const {
  const auto p = static_cast<std::int64_t>(keys.size());
  keys.push_back(next_key(p == 0 ? root_ : keys.back(), token, p));
}

void KvContentModel::values(std::uint64_t key, KvPart part, float* out) const {
  const std::int64_t n = part == KvPart::kQuery ? q_elems() : kv_elems();
  const std::uint64_t base = key ^ part_tag(part);
  constexpr float kSqrt3 = 1.7320508075688772f;
  for (std::int64_t e = 0; e < n; ++e) {
    const std::uint64_t x = splitmix64(base + static_cast<std::uint64_t>(e) * kGolden);
    const float u = (static_cast<float>(x >> 40) + 0.5f) * 0x1p-23f - 1.0f;  // (-1, 1)
    out[e] = kSqrt3 * u;
  }
  // Rounded in a second pass, the dtype chosen once (this runs for every K/V element checked).
  switch (dtype_) {
    case kernels::DType::kF32:
      break;
    case kernels::DType::kBF16:
      for (std::int64_t e = 0; e < n; ++e)
        out[e] = kernels::bf16_to_float(kernels::float_to_bf16(out[e]));
      break;
    case kernels::DType::kF16:
      for (std::int64_t e = 0; e < n; ++e)
        out[e] = kernels::half_to_float(kernels::float_to_half(out[e]));
      break;
  }
}

}  // namespace kvsim::validate
