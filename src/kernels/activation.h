// Element-wise activations, forward and backward side by side. Backward passes accumulate.
//
// GELU exact:  gelu(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))
// GELU tanh (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
// SwiGLU: y = silu(a) * b, silu(a) = a * sigmoid(a)   (a = W1 x, b = W3 x in the FFN)
#pragma once

#include <cstdint>

namespace tformer {

enum class GeluKind { Exact, Tanh };

template <typename T>
void gelu_forward(T* y, const T* x, int64_t n, GeluKind kind);
// dx += dy * gelu'(x)
template <typename T>
void gelu_backward(T* dx, const T* dy, const T* x, int64_t n, GeluKind kind);

template <typename T>
void swiglu_forward(T* y, const T* a, const T* b, int64_t n);
// da += dy * b * silu'(a);  db += dy * silu(a)
template <typename T>
void swiglu_backward(T* da, T* db, const T* dy, const T* a, const T* b, int64_t n);

}  // namespace tformer
