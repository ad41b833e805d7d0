// The two 16-bit float formats model files use, converted in plain integer arithmetic (no F16C, so
// the portable build has them too):
//
//   f16   IEEE 754 binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. Largest finite 65504;
//         subnormals down to 2^-24.
//   bf16  bfloat16: the top 16 bits of a float32 (1 sign, 8 exponent, 7 mantissa bits).
//
// float -> 16 bits rounds to nearest, ties to even (as torch's .half() and .bfloat16() do); a
// float beyond f16's range becomes infinity; NaN stays NaN (quiet). 16 bits -> float is exact.
#pragma once

#include <bit>
#include <cstdint>

namespace tformer {

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits = 0;
  if (exp == 0x1f) {  // infinity or NaN
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal: rebias 15 -> 127
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // signed zero
    bits = sign;
  } else {             // subnormal: mant * 2^-24, normalised
    uint32_t e = 113;  // the exponent field of 2^-14 in float32 is 113
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

inline uint16_t f32_to_f16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  const uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));  // inf, quiet NaN
  const int e = static_cast<int>(exp) - 127 + 15;               // the f16 exponent field, before rounding
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (e <= 0) {                           // subnormal or zero in f16: the value in units of 2^-24, rounded to even
    if (e < -10) return sign;             // below half of the smallest subnormal: rounds to zero
    const uint32_t m = mant | 0x800000u;  // the 24-bit significand
    const int shift = 14 - e;             // 14..24
    uint32_t q = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal: right
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t q = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (q & 1u))) ++q;  // a carry may reach infinity: right
  return static_cast<uint16_t>(sign | q);
}

inline float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  const uint32_t rounded = x + 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace tformer
