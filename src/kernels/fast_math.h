// Branch-free float versions of exp and the normal CDF that the compiler can vectorise (libm's
// expf/erff are scalar calls that cost more than the arithmetic around them in the softmax and
// GELU loops). Accuracy, against libm in double (tests/test_kernels_fast_math.cpp):
//   exp_f:        relative error below 1.2e-7 on (-87, 88]; 0 at -87 and below, exp(88) above 88.
//   exp_nonpos_d: relative error below 6e-16 on (-708, 0]; 0 at -708 and below.
//   normal_cdf_f: Phi(x) = erfc(-x / sqrt 2) / 2 with the Chebyshev-fitted erfc of Press et al.
//                 (Numerical Recipes, "erfcc"), so the lower tail keeps relative accuracy instead
//                 of being 1 - (1 - tiny): within 4.5e-7 (1 + x^2) relative for x <= 0 (the float
//                 rounding of x^2 in exp(-x^2/2) grows with x: 1.9e-6 at x = -5), within 2.5e-7
//                 absolute for x >= 0.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace tformer::fast {

// a * b + c, fused where the target has FMA (float and double).
template <typename T>
inline T fmadd(T a, T b, T c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(x): n = round(x / ln2), r = x - n ln2 in [-ln2/2, ln2/2] (ln2 split in two so n ln2 is
// exact), degree-7 Taylor polynomial of exp(r), times 2^n built in the exponent bits. The rounding
// adds and subtracts 1.5 * 2^23 (round to nearest even in the FPU) instead of calling std::floor,
// which GCC does not vectorise.
inline float exp_f(float x) {
  float xc = x > -87.0f ? x : -87.0f;
  xc = xc < 88.0f ? xc : 88.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float n = fmadd(xc, 1.44269504088896341f, kRound) - kRound;
  float r = fmadd(n, -0.693359375f, xc);
  r = fmadd(n, 2.12194440e-4f, r);
  float p = 1.0f / 5040.0f;
  p = fmadd(p, r, 1.0f / 720.0f);
  p = fmadd(p, r, 1.0f / 120.0f);
  p = fmadd(p, r, 1.0f / 24.0f);
  p = fmadd(p, r, 1.0f / 6.0f);
  p = fmadd(p, r, 0.5f);
  p = fmadd(p, r, 1.0f);
  p = fmadd(p, r, 1.0f);
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x > -87.0f ? p * scale : (x == x ? 0.0f : x);  // NaN in, NaN out (as std::exp)
}

// erfc(z) for z >= 0: t = 1 / (1 + z/2), erfc(z) = t exp(-z^2 + P(t)).
inline float erfc_nonneg_f(float z) {
  const float t = 1.0f / fmadd(0.5f, z, 1.0f);
  float p = 0.17087277f;
  p = fmadd(p, t, -0.82215223f);
  p = fmadd(p, t, 1.48851587f);
  p = fmadd(p, t, -1.13520398f);
  p = fmadd(p, t, 0.27886807f);
  p = fmadd(p, t, -0.18628806f);
  p = fmadd(p, t, 0.09678418f);
  p = fmadd(p, t, 0.37409196f);
  p = fmadd(p, t, 1.00002368f);
  p = fmadd(p, t, -1.26551223f);
  return t * exp_f(fmadd(-z, z, p));
}

// The standard normal CDF.
inline float normal_cdf_f(float x) {
  const float half_tail = 0.5f * erfc_nonneg_f(std::abs(x) * 0.70710678118654752f);
  return x >= 0 ? 1.0f - half_tail : half_tail;
}

// exp(x) in double, for x in [-708, 0] (softmax arguments after subtracting the maximum; below
// -708 it returns 0): the same reduction as exp_f with ln2 split hi/lo, a degree-12 Taylor
// polynomial (truncation 0.347^13/13! = 2e-16), relative error ~1e-16, vectorisable.
inline double exp_nonpos_d(double x) {
  const double xc = x > -708.0 ? x : -708.0;
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52
  const double n = fmadd(xc, 1.4426950408889634, kRound) - kRound;
  double r = fmadd(n, -0.6931471803691238, xc);  // ln2 high part: 0x3FE62E42FEE00000
  r = fmadd(n, -1.9082149292705877e-10, r);      // ln2 - high part
  double p = 1.0 / 479001600.0;                  // 1/12!
  p = fmadd(p, r, 1.0 / 39916800.0);
  p = fmadd(p, r, 1.0 / 3628800.0);
  p = fmadd(p, r, 1.0 / 362880.0);
  p = fmadd(p, r, 1.0 / 40320.0);
  p = fmadd(p, r, 1.0 / 5040.0);
  p = fmadd(p, r, 1.0 / 720.0);
  p = fmadd(p, r, 1.0 / 120.0);
  p = fmadd(p, r, 1.0 / 24.0);
  p = fmadd(p, r, 1.0 / 6.0);
  p = fmadd(p, r, 0.5);
  p = fmadd(p, r, 1.0);
  p = fmadd(p, r, 1.0);
  const double scale = std::bit_cast<double>((static_cast<int64_t>(n) + 1023) << 52);
  return x > -708.0 ? p * scale : 0.0;
}

}  // namespace tformer::fast
