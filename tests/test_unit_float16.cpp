// core/float16.h against independent references: the CPU's own F16C conversions (VCVTPS2PH with
// round-to-nearest-even, VCVTPH2PS) for f16, and a rounding written in double arithmetic for bf16. Every 16-bit pattern
// goes through both directions, and float inputs sweep every exponent with mantissas at, just below and just above the
// halfway points.
#include <gtest/gtest.h>

#include <cpuid.h>
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/float16.h"

namespace tformer {
namespace {

// The hardware's conversions, compiled for F16C whatever the build's target; the f16 tests skip
// on a CPU without it.
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float x) {
  return static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
}
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) {
  return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}
bool have_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;  // CPUID.1:ECX.F16C[bit 29]
}

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// bf16 by round-to-nearest-even done on the real value in double: the two bf16 neighbours of x
// and the midpoint between them.
uint16_t bf16_reference(float x) {
  if (std::isnan(x)) return 0x7fc0;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t down = bits & 0xffff0000u;
  if (down == bits) return static_cast<uint16_t>(bits >> 16);
  const uint32_t up = down + 0x10000u;
  const double lo = std::bit_cast<float>(down), hi = std::isinf(std::bit_cast<float>(up))
                                                         ? std::ldexp(1.0, 128) * (x < 0 ? -1 : 1)
                                                         : static_cast<double>(std::bit_cast<float>(up));
  const double dlo = std::fabs(static_cast<double>(x) - lo), dhi = std::fabs(hi - static_cast<double>(x));
  if (dlo < dhi) return static_cast<uint16_t>(down >> 16);
  if (dhi < dlo) return static_cast<uint16_t>(up >> 16);
  return static_cast<uint16_t>(((down >> 16) & 1u) ? up >> 16 : down >> 16);
}

std::vector<float> probe_floats() {
  std::vector<float> v;
  for (uint32_t exp = 0; exp < 256; ++exp)
    for (uint32_t m : {0u, 1u, 0x0fffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x7fffu, 0x8000u, 0x8001u, 0x18000u,
                       0x3ff000u, 0x7fe000u, 0x7ff000u, 0x7fefffu, 0x7fffffu, 0x123457u, 0x654321u})
      for (uint32_t s : {0u, 0x80000000u}) v.push_back(std::bit_cast<float>(s | (exp << 23) | m));
  return v;
}

TEST(Float16, EveryHalfToFloatMatchesTheHardware) {
  if (!have_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float ref = hw_f16_to_f32(bits);
    ASSERT_TRUE(same_float(f16_to_f32(bits), ref)) << "f16 bits 0x" << std::hex << h;
    if (!std::isnan(ref)) {
      ASSERT_EQ(f32_to_f16(f16_to_f32(bits)), bits) << "round trip of 0x" << std::hex << h;
    }
  }
}

TEST(Float16, FloatToHalfRoundsLikeTheHardware) {
  if (!have_f16c()) GTEST_SKIP() << "this CPU has no F16C";
  for (float x : probe_floats()) {
    const uint16_t ref = hw_f32_to_f16(x);
    const uint16_t got = f32_to_f16(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(got)));
      continue;
    }
    ASSERT_EQ(got, ref) << "x = " << x << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(x) << ")";
  }
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);               // the midpoint to 65536 rounds up, to infinity
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: to even (0)
  EXPECT_EQ(f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
}

TEST(Bfloat16, EveryPatternRoundTripsAndFloatsRoundToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = bf16_to_f32(bits);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(f32_to_bf16(f), bits);
    }
  }
  for (float x : probe_floats()) {
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(x))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(x), bf16_reference(x)) << "x bits 0x" << std::hex << std::bit_cast<uint32_t>(x);
  }
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // 1 + 2^-8: the tie goes to the even 1.0
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // 1 + 3 * 2^-8: the tie goes up to even
}

}  // namespace
}  // namespace tformer
