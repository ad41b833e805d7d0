// Softmax and log-softmax over the last dimension, forward and backward side by side.
//
// Row statistics (maximum, sum of exponentials, dot products) are accumulated in double for both
// float and double inputs. Each row is computed by exactly one thread, so results do not depend on
// the thread count.
#include "kernels/softmax.h"
#include "core/threads.h"

#include <cmath>
#include <limits>

namespace tformer {

namespace {

// Below this many elements the loops stay on one thread (the fork costs more than the work).
constexpr int64_t kParallelElements = int64_t(1) << 15;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Maximum over the allowed (> -inf) entries of one row; -inf when every entry is masked.
template <typename T>
double allowed_max(const T* x, int64_t cols) {
  double m = kNegInf;
  for (int64_t j = 0; j < cols; ++j) {
    const double v = static_cast<double>(x[j]);
    if (v > m) m = v;
  }
  return m;
}

// sum_j exp(x_j - m) over one row, m finite; masked entries contribute exp(-inf) = 0.
template <typename T>
double sum_exp(const T* x, int64_t cols, double m) {
  double s = 0;
  for (int64_t j = 0; j < cols; ++j) s += std::exp(static_cast<double>(x[j]) - m);
  return s;
}

}  // namespace

template <typename T>
void softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols > kParallelElements, [&](int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const double m = allowed_max(xr, cols);
    if (m == kNegInf) {  // no allowed entry: the documented all-zero policy
      for (int64_t j = 0; j < cols; ++j) yr[j] = T(0);
      return;
    }
    const double inv = 1.0 / sum_exp(xr, cols, m);  // sum >= 1 (the maximum contributes exp(0))
    // Each x_j is read before y_j is written, so y may alias x.
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(std::exp(static_cast<double>(xr[j]) - m) * inv);
  });
}

// Forward: y_i = exp(x_i) / sum_k exp(x_k).
// dy_i/dx_j = y_i (delta_ij - y_j), so dx_j = sum_i dy_i y_i (delta_ij - y_j) = y_j (dy_j - sum_i dy_i y_i).
// Masked entries have y = 0 and receive 0; an all-masked row (all y = 0) receives 0.
template <typename T>
void softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols > kParallelElements, [&](int64_t r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    T* dxr = dx + r * cols;
    double dot = 0;
    for (int64_t j = 0; j < cols; ++j) dot += static_cast<double>(dyr[j]) * static_cast<double>(yr[j]);
    for (int64_t j = 0; j < cols; ++j) {
      const double yj = static_cast<double>(yr[j]);
      if (yj == 0) continue;  // masked (or underflowed): exactly zero contribution, never 0 * inf
      dxr[j] = static_cast<T>(static_cast<double>(dxr[j]) + yj * (static_cast<double>(dyr[j]) - dot));
    }
  });
}

template <typename T>
void log_softmax_forward(T* y, const T* x, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols > kParallelElements, [&](int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    const double m = allowed_max(xr, cols);
    if (m == kNegInf) {  // no allowed entry: log-probability -inf everywhere
      for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(kNegInf);
      return;
    }
    const double shift = m + std::log(sum_exp(xr, cols, m));  // log-sum-exp of the row
    // Masked entries: -inf - shift = -inf.
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(static_cast<double>(xr[j]) - shift);
  });
}

// Forward: y_i = x_i - log sum_k exp(x_k), over the allowed entries k.
// dy_i/dx_j = delta_ij - p_j with p_j = exp(y_j), so dx_j = dy_j - p_j * sum_i dy_i, where i runs over
// ALLOWED entries only: a masked y_i is the constant -inf and its dy_i cannot reach any x_j. A masked
// x_j (y_j = -inf) receives 0; an all-masked row receives 0.
template <typename T>
void log_softmax_backward(T* dx, const T* dy, const T* y, int64_t rows, int64_t cols) {
  parallel_for(rows, rows * cols > kParallelElements, [&](int64_t r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    T* dxr = dx + r * cols;
    double sum_dy = 0;
    for (int64_t j = 0; j < cols; ++j)
      if (static_cast<double>(yr[j]) != kNegInf) sum_dy += static_cast<double>(dyr[j]);
    for (int64_t j = 0; j < cols; ++j) {
      const double yj = static_cast<double>(yr[j]);
      if (yj == kNegInf) continue;
      dxr[j] = static_cast<T>(static_cast<double>(dxr[j]) + static_cast<double>(dyr[j]) - std::exp(yj) * sum_dy);
    }
  });
}

template void softmax_forward<float>(float*, const float*, int64_t, int64_t);
template void softmax_forward<double>(double*, const double*, int64_t, int64_t);
template void softmax_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void softmax_backward<double>(double*, const double*, const double*, int64_t, int64_t);
template void log_softmax_forward<float>(float*, const float*, int64_t, int64_t);
template void log_softmax_forward<double>(double*, const double*, int64_t, int64_t);
template void log_softmax_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void log_softmax_backward<double>(double*, const double*, const double*, int64_t, int64_t);

}  // namespace tformer
