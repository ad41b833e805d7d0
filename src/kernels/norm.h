// Normalisations over the last dimension of [rows, cols], one token per row.
//
// LayerNorm (Ba et al.): mean and variance over the feature count (biased variance, divided by
// cols), epsilon inside the square root:
//     y = (x - mean) / sqrt(var + eps) * gain + bias
// RMSNorm: y = x / sqrt(mean(x^2) + eps) * gain  (no centring, no bias).
// Forward saves per-row statistics (mean, rstd = 1/sqrt(var + eps)) for the backward.
// Backward passes accumulate (dx += ..., dgain += ..., dbias += ...); any gradient pointer may be null.
#pragma once

#include <cstdint>

namespace tformer {

// y, x: [rows, cols]; gain, bias: [cols] (bias may be null); mean, rstd: [rows] (saved).
template <typename T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* gain, const T* bias, int64_t rows, int64_t cols,
                       T eps);
template <typename T>
void layernorm_backward(T* dx, T* dgain, T* dbias, const T* dy, const T* x, const T* mean, const T* rstd, const T* gain,
                        int64_t rows, int64_t cols);

// y, x: [rows, cols]; gain: [cols]; rstd: [rows] (saved, 1/sqrt(mean(x^2) + eps)).
template <typename T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* gain, int64_t rows, int64_t cols, T eps);
template <typename T>
void rmsnorm_backward(T* dx, T* dgain, const T* dy, const T* x, const T* rstd, const T* gain, int64_t rows,
                      int64_t cols);

}  // namespace tformer
