#include "kernels/dtype.h"

#include <cmath>

namespace kvsim::kernels {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "?";
}

half_bits detail::float_to_half_rare(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    const std::uint32_t nan_bit = abs > 0x7f800000u ? 0x0200u : 0u;
    return {static_cast<std::uint16_t>(sign | 0x7c00u | nan_bit)};
  }
  if (abs >= 0x477ff000u)
    return {static_cast<std::uint16_t>(sign | 0x7c00u)};  // rounds to >= 65520
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero): value = m * 2^-24 with m the rounded integer.
    if (abs < 0x33000000u) return {static_cast<std::uint16_t>(sign)};  // < 2^-25 rounds to 0
    const int exp = static_cast<int>(abs >> 23);                       // biased, 102..112
    const std::uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const int shift = 126 - exp;  // value = mant * 2^(exp-150); want mant * 2^(exp-150+24)
    std::uint32_t m = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (m & 1u))) ++m;
    return {static_cast<std::uint16_t>(sign | m)};
  }
  // Normal: rebias exponent 127 -> 15 and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t h = ((abs - 0x38000000u) >> 13);
  const std::uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry into the exponent is correct
  return {static_cast<std::uint16_t>(sign | h)};
}

}  // namespace kvsim::kernels
