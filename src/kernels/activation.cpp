// GELU (exact and tanh forms) and SwiGLU, forward and backward side by side. Every element is
// computed in double and rounded once to T; elements are independent, so any thread split gives the
// same result.
#include "kernels/activation.h"

#include <cmath>

namespace tformer {

namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;

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

template <typename T>
void gelu_forward(T* y, const T* x, int64_t n, GeluKind kind) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(gelu_value(static_cast<double>(x[i]), kind));
}

// Forward (exact): y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2));
// forward (tanh):  y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// dx += dy * gelu'(x), with gelu' from gelu_derivative above.
template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n, GeluKind kind) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i)
    dx[i] = static_cast<T>(static_cast<double>(dx[i]) +
                           static_cast<double>(dy[i]) * gelu_derivative(static_cast<double>(x[i]), kind));
}

template <typename T>
void swiglu_forward(T* y, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const double av = static_cast<double>(a[i]);
    y[i] = static_cast<T>(av * sigmoid(av) * static_cast<double>(b[i]));
  }
}

// Forward: y = silu(a) * b, silu(a) = a * s, s = sigmoid(a).
// silu'(a) = s + a s (1 - s), so da += dy * b * silu'(a) and db += dy * silu(a).
template <typename T>
void swiglu_backward(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > kParallelElements)
  for (int64_t i = 0; i < n; ++i) {
    const double av = static_cast<double>(a[i]), g = static_cast<double>(dy[i]);
    const double s = sigmoid(av);
    if (da) da[i] = static_cast<T>(static_cast<double>(da[i]) + g * static_cast<double>(b[i]) * (s + av * s * (1.0 - s)));
    if (db) db[i] = static_cast<T>(static_cast<double>(db[i]) + g * av * s);
  }
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
