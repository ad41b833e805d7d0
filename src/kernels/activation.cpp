// GELU (exact and tanh forms) and SwiGLU, forward and backward side by side. The double path
// computes every element in double (libm) and rounds once; the float path computes in float with
// fast::exp_f and friends, within 1e-6 relative of the double path (test_kernels_activation.cpp).
// Elements are independent, so any thread split gives the same result.
#include "kernels/activation.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/threads.h"
#include "kernels/fast_math.h"

namespace tformer {

namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;
// The double SwiGLU forward costs an exp in libm per value (tens of ns): it splits over the
// threads from this many values on (the float path, vectorised, from kParallelElements).
constexpr int64_t kParallelTranscendentals = 1024;

constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kGeluCubic = 0.044715;

double gelu_value(double x, GeluKind kind) {
  if (kind == GeluKind::Exact) return 0.5 * x * (1.0 + std::erf(x * kInvSqrt2));
  const double u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

double gelu_derivative(double x, GeluKind kind) {
  if (kind == GeluKind::Exact) {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x), phi(x) = exp(-x^2/2) / sqrt(2 pi)
    return 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
  }
  // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u',
  // u = sqrt(2/pi) (x + c x^3), u' = sqrt(2/pi) (1 + 3 c x^2)
  const double t = std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const double du = kSqrt2OverPi * (1.0 + 3.0 * kGeluCubic * x * x);
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du;
}

// sigmoid(a) without overflow: exp of a non-positive argument only.
double sigmoid(double a) {
  if (a >= 0) return 1.0 / (1.0 + std::exp(-a));
  const double e = std::exp(a);
  return e / (1.0 + e);
}

}  // namespace

// The float path: the same formulas in float with fast::exp_f / fast::normal_cdf_f, so the loops
// vectorise (the double path's libm erf/exp/tanh calls were a fifth of a small model's training
// step). Within 1e-6 relative of the double path (tests: Activation.FloatMatchesDouble).
// tanh-GELU through the logistic function, without cancellation in either tail:
// 0.5 (1 + tanh u) = s = sigmoid(2u) and 1 - tanh^2 u = 4 s (1 - s), with e = exp(-2|u|),
// s = 1/(1+e) or e/(1+e) by the sign of u and 1 - s the other one.
struct TanhGeluParts {
  float s, one_minus_s, du;
};
inline TanhGeluParts tanh_gelu_parts(float x) {
  const float u = 0.79788456080286535588f * x * fast::fmadd(0.044715f * x, x, 1.0f);
  const float e = fast::exp_f(-2.0f * std::abs(u));
  const float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
  const float du = 0.79788456080286535588f * fast::fmadd(3.0f * 0.044715f * x, x, 1.0f);
  return {u >= 0 ? big : small, u >= 0 ? small : big, du};
}
inline float gelu_value_f(float x, GeluKind kind) {
  if (kind == GeluKind::Exact) return x * fast::normal_cdf_f(x);
  return x * tanh_gelu_parts(x).s;
}
inline float gelu_derivative_f(float x, GeluKind kind) {
  if (kind == GeluKind::Exact) return fast::normal_cdf_f(x) + x * 0.39894228040143267794f * fast::exp_f(-0.5f * x * x);
  const TanhGeluParts p = tanh_gelu_parts(x);
  return p.s + 2.0f * x * p.s * p.one_minus_s * p.du;
}

// Plain loops over one chunk with the kind fixed, so the compiler vectorises them.
template <GeluKind K>
void gelu_forward_chunk(float* __restrict y, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = gelu_value_f(x[i], K);
}
template <GeluKind K>
void gelu_backward_chunk(float* __restrict dx, const float* __restrict dy, const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] += dy[i] * gelu_derivative_f(x[i], K);
}
constexpr int64_t kChunk = 4096;

template <typename T>
void gelu_forward(T* y, const T* x, int64_t n, GeluKind kind) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    parallel_for(chunks, n > kParallelElements, [&](int64_t c) {
      const int64_t b = c * kChunk, m = std::min(kChunk, n - b);
      if (kind == GeluKind::Exact)
        gelu_forward_chunk<GeluKind::Exact>(y + b, x + b, m);
      else
        gelu_forward_chunk<GeluKind::Tanh>(y + b, x + b, m);
    });
    return;
  }
  parallel_for(n, n > kParallelElements,
               [&](int64_t i) { y[i] = static_cast<T>(gelu_value(static_cast<double>(x[i]), kind)); });
}

// Forward (exact): y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2));
// forward (tanh):  y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// dx += dy * gelu'(x), with gelu' from gelu_derivative above.
template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n, GeluKind kind) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    parallel_for(chunks, n > kParallelElements, [&](int64_t c) {
      const int64_t b = c * kChunk, m = std::min(kChunk, n - b);
      if (kind == GeluKind::Exact)
        gelu_backward_chunk<GeluKind::Exact>(dx + b, dy + b, x + b, m);
      else
        gelu_backward_chunk<GeluKind::Tanh>(dx + b, dy + b, x + b, m);
    });
    return;
  }
  parallel_for(n, n > kParallelElements, [&](int64_t i) {
    dx[i] = static_cast<T>(static_cast<double>(dx[i]) +
                           static_cast<double>(dy[i]) * gelu_derivative(static_cast<double>(x[i]), kind));
  });
}

// The float path of SwiGLU, as GELU's: sigmoid through fast::exp_f of -|a| (no overflow), loops
// the compiler vectorises. It was the double formula with libm's exp per value, 14 us of a 110M
// decode step's 2048 values on 2 threads of a Zen 4 (160 us a token over 12 layers, 5% of a Q4_0
// step); now about 1 us on one thread.
struct SigmoidParts {
  float s, one_minus_s;
};
inline SigmoidParts sigmoid_parts(float a) {
  const float e = fast::exp_f(-std::abs(a));
  const float big = 1.0f / (1.0f + e), small = e / (1.0f + e);
  return {a >= 0 ? big : small, a >= 0 ? small : big};
}
void swiglu_forward_chunk(float* __restrict y, const float* __restrict a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sigmoid_parts(a[i]).s * b[i];
}
void swiglu_backward_chunk(float* __restrict da, float* __restrict db, const float* __restrict dy,
                           const float* __restrict a, const float* __restrict b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const SigmoidParts p = sigmoid_parts(a[i]);
    const float g = dy[i];
    if (da) da[i] += g * b[i] * (p.s + a[i] * p.s * p.one_minus_s);
    if (db) db[i] += g * a[i] * p.s;
  }
}

template <typename T>
void swiglu_forward(T* y, const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    parallel_for(chunks, n > kParallelElements, [&](int64_t c) {
      const int64_t i = c * kChunk;
      swiglu_forward_chunk(y + i, a + i, b + i, std::min(kChunk, n - i));
    });
    return;
  }
  parallel_for(n, n >= kParallelTranscendentals, [&](int64_t i) {
    const double av = static_cast<double>(a[i]);
    y[i] = static_cast<T>(av * sigmoid(av) * static_cast<double>(b[i]));
  });
}

// Forward: y = silu(a) * b, silu(a) = a * s, s = sigmoid(a).
// silu'(a) = s + a s (1 - s), so da += dy * b * silu'(a) and db += dy * silu(a).
template <typename T>
void swiglu_backward(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    parallel_for(chunks, n > kParallelElements, [&](int64_t c) {
      const int64_t i = c * kChunk;
      swiglu_backward_chunk(da ? da + i : nullptr, db ? db + i : nullptr, dy + i, a + i, b + i,
                            std::min(kChunk, n - i));
    });
    return;
  }
  parallel_for(n, n > kParallelElements, [&](int64_t i) {
    const double av = static_cast<double>(a[i]), g = static_cast<double>(dy[i]);
    const double s = sigmoid(av);
    if (da)
      da[i] = static_cast<T>(static_cast<double>(da[i]) + g * static_cast<double>(b[i]) * (s + av * s * (1.0 - s)));
    if (db) db[i] = static_cast<T>(static_cast<double>(db[i]) + g * av * s);
  });
}

template void gelu_forward<float>(float*, const float*, int64_t, GeluKind);
template void gelu_forward<double>(double*, const double*, int64_t, GeluKind);
template void gelu_backward<float>(float*, const float*, const float*, int64_t, GeluKind);
template void gelu_backward<double>(double*, const double*, const double*, int64_t, GeluKind);
template void swiglu_forward<float>(float*, const float*, const float*, int64_t);
template void swiglu_forward<double>(double*, const double*, const double*, int64_t);
template void swiglu_backward<float>(float*, float*, const float*, const float*, const float*, int64_t);
template void swiglu_backward<double>(double*, double*, const double*, const double*, const double*, int64_t);

}  // namespace tformer
