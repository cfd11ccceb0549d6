#pragma once
// Element types of the KV pool, Q and O, and exact CPU-side conversions for the 16-bit formats.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvsim::kernels {

/// Storage type of the pool, the queries and the outputs (they always share one dtype).
enum class DType : std::uint8_t { kF32, kF16, kBF16 };

/// Bytes per element of `dtype`.
constexpr std::size_t dtype_size_bytes(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

/// "f32", "f16" or "bf16".
const char* dtype_name(DType dtype);

/// IEEE binary16 bits (host-side storage type; bit-compatible with CUDA's __half).
struct half_bits {
  std::uint16_t bits;
};
/// bfloat16 bits (host-side storage type; bit-compatible with CUDA's __nv_bfloat16).
struct bf16_bits {
  std::uint16_t bits;
};
static_assert(sizeof(half_bits) == 2 && sizeof(bf16_bits) == 2);

namespace detail {
/// float_to_half for the inputs whose result is not a normal half: zero, subnormal, inf, NaN.
half_bits float_to_half_rare(float f);
}  // namespace detail
/// fp32 -> fp16, round to nearest even; overflow gives inf, NaN stays NaN (quiet). Inline, with
/// one predictable branch for a normal result: the validation harness rounds every K/V element
/// it generates.
inline half_bits float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs - 0x38800000u < 0x477ff000u - 0x38800000u) [[likely]] {  // [2^-14, 65520): normal
    // Round the 13 dropped mantissa bits to nearest even (h's last bit is abs's bit 13), then
    // rebias the exponent 127 -> 15; a carry into the exponent is correct.
    const std::uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
    return {static_cast<std::uint16_t>(((x >> 16) & 0x8000u) | ((rounded - 0x38000000u) >> 13))};
  }
  return detail::float_to_half_rare(f);
}
/// fp16 -> fp32 (exact). Inline, with one predictable branch for a normal half: it sits in the
/// CPU backend's inner loop.
inline float half_to_float(half_bits h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t em = h.bits & 0x7fffu;  // exponent and mantissa
  if (em - 0x0400u < 0x7800u) [[likely]]      // exponent 1..30: normal, rebias 15 -> 127
    return std::bit_cast<float>(sign | ((em << 13) + 0x38000000u));
  const std::uint32_t mant = em & 0x3ffu;
  if (em >= 0x7c00u) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  const float v = static_cast<float>(mant) * 0x1p-24f;  // zero or subnormal: exact in float
  return sign ? -v : v;
}
/// fp32 -> bf16, round to nearest even; NaN stays NaN (quiet). Inline: the validation harness
/// rounds every K/V element it generates.
inline bf16_bits float_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((x >> 16) | 0x0040u)};
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return {static_cast<std::uint16_t>((x + rounding) >> 16)};
}
/// bf16 -> fp32 (exact).
inline float bf16_to_float(bf16_bits b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16);
}

/// Reads element `i` of a buffer of `dtype` as float.
inline float load_as_float(const void* data, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(data)[i];
    case DType::kF16:
      return half_to_float(static_cast<const half_bits*>(data)[i]);
    case DType::kBF16:
      return bf16_to_float(static_cast<const bf16_bits*>(data)[i]);
  }
  return 0.0f;
}

/// Writes `value` rounded to `dtype` (nearest even) into element `i` of a buffer of `dtype`.
inline void store_from_float(void* data, DType dtype, std::int64_t i, float value) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(data)[i] = value;
      break;
    case DType::kF16:
      static_cast<half_bits*>(data)[i] = float_to_half(value);
      break;
    case DType::kBF16:
      static_cast<bf16_bits*>(data)[i] = float_to_bf16(value);
      break;
  }
}

/// Rounds `value` to the nearest `dtype` value and returns it as float (identity for kF32).
inline float round_to_dtype(float value, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return value;
    case DType::kF16:
      return half_to_float(float_to_half(value));
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(value));
  }
  return value;
}

}  // namespace kvsim::kernels
