// Softmax and log-softmax over the last dimension of a [rows, cols] buffer.
//
// Masking: a score of -infinity means "not allowed" (the mask was applied before softmax). The
// row's maximum is taken over ALLOWED scores only, so exp() never sees a large positive argument
// and masked entries get weight exactly 0. Policy for a row with no allowed score: softmax
// returns all zeros (and its gradient is zero); log-softmax returns -infinity everywhere with a
// zero gradient. No NaN is ever produced from masking.
//
// Backward passes ACCUMULATE into dx (dx += ...), like every backward in tformer.
#pragma once

#include <cstdint>

namespace tformer {

// y = softmax(x) row by row. y may alias x.
template <typename T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols);
// dx += y * (dy - sum_j dy_j y_j), from the saved output y.
template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols);

// y = x - max - log(sum exp(x - max)) row by row. y may alias x.
template <typename T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols);
// dx += dy - exp(y) * sum_j dy_j, from the saved output y (masked entries get 0).
template <typename T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols);

}  // namespace tformer
