// LayerNorm and RMSNorm over the last dimension, forward and backward side by side.
//
// Row statistics are accumulated in double for float and double inputs (the forward's in several
// vector lanes at once: one chain of 768 dependent double adds was about 1 us a norm, 2% of a
// 110M Q4_0 decode step). Rows are split across
// threads (one row, one thread) for y and dx; the gain/bias gradients, which sum over rows, are split
// across threads by COLUMN blocks, each column summed over the rows in order 0..rows-1 by one thread,
// so every result is independent of the thread count. A null gain is treated as all ones.
#include "kernels/norm.h"
#include "core/threads.h"

#include <algorithm>
#include <cmath>

namespace tformer {

namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;
// Columns per block in the gain/bias reductions (a few cache lines of one row).
constexpr int64_t kColumnBlock = 64;

template <typename T>
double gain_at(const T* gain, int64_t j) {
  return gain ? static_cast<double>(gain[j]) : 1.0;
}

}  // namespace

template <typename T>
void layernorm_forward(T* y, T* mean, T* rstd, const T* x, const T* gain, const T* bias, int64_t rows, int64_t cols,
                       T eps) {
  const double n = static_cast<double>(cols);
  parallel_for(rows, rows * cols > kParallelElements, [&](int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double mu = 0;
#pragma omp simd reduction(+ : mu)
    for (int64_t j = 0; j < cols; ++j) mu += static_cast<double>(xr[j]);
    mu /= n;
    double var = 0;  // two passes: no cancellation from E[x^2] - E[x]^2
#pragma omp simd reduction(+ : var)
    for (int64_t j = 0; j < cols; ++j) {
      const double d = static_cast<double>(xr[j]) - mu;
      var += d * d;
    }
    var /= n;
    const double rs = 1.0 / std::sqrt(var + static_cast<double>(eps));
    if (mean) mean[r] = static_cast<T>(mu);
    if (rstd) rstd[r] = static_cast<T>(rs);
    for (int64_t j = 0; j < cols; ++j) {
      const double v = (static_cast<double>(xr[j]) - mu) * rs * gain_at(gain, j);
      yr[j] = static_cast<T>(bias ? v + static_cast<double>(bias[j]) : v);
    }
  });
}

// Forward: y_i = xhat_i * g_i + b_i, xhat_i = (x_i - mu) * rstd, mu = mean(x),
//          rstd = (var + eps)^(-1/2), var = mean((x - mu)^2)   (means over the n = cols features).
// With gy_i = dy_i * g_i, and d mu/dx_j = 1/n, d rstd/dx_j = -rstd^3 (x_j - mu) / n:
//   dx_j   = rstd * (gy_j - mean_i(gy_i) - xhat_j * mean_i(gy_i * xhat_i))
//   dg_i  += sum over rows of dy_i * xhat_i
//   db_i  += sum over rows of dy_i
template <typename T>
void layernorm_backward(T* dx, T* dgain, T* dbias, const T* dy, const T* x, const T* mean, const T* rstd, const T* gain,
                        int64_t rows, int64_t cols) {
  const double n = static_cast<double>(cols);
  const bool parallel = rows * cols > kParallelElements;
  if (dx) {
    parallel_for(rows, parallel, [&](int64_t r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
      const double mu = static_cast<double>(mean[r]), rs = static_cast<double>(rstd[r]);
      double sum_gy = 0, sum_gy_xhat = 0;
      for (int64_t j = 0; j < cols; ++j) {
        const double gy = static_cast<double>(dyr[j]) * gain_at(gain, j);
        sum_gy += gy;
        sum_gy_xhat += gy * (static_cast<double>(xr[j]) - mu) * rs;
      }
      const double mean_gy = sum_gy / n, mean_gy_xhat = sum_gy_xhat / n;
      for (int64_t j = 0; j < cols; ++j) {
        const double gy = static_cast<double>(dyr[j]) * gain_at(gain, j);
        const double xhat = (static_cast<double>(xr[j]) - mu) * rs;
        dxr[j] = static_cast<T>(static_cast<double>(dxr[j]) + rs * (gy - mean_gy - xhat * mean_gy_xhat));
      }
    });
  }
  if (dgain || dbias) {
    const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
    parallel_for(blocks, parallel, [&](int64_t blk) {
      const int64_t j0 = blk * kColumnBlock, j1 = std::min(cols, j0 + kColumnBlock);
      double sg[kColumnBlock] = {}, sb[kColumnBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {  // fixed row order for every column
        const T* xr = x + r * cols;
        const T* dyr = dy + r * cols;
        const double mu = static_cast<double>(mean[r]), rs = static_cast<double>(rstd[r]);
        for (int64_t j = j0; j < j1; ++j) {
          const double d = static_cast<double>(dyr[j]);
          sg[j - j0] += d * (static_cast<double>(xr[j]) - mu) * rs;
          sb[j - j0] += d;
        }
      }
      for (int64_t j = j0; j < j1; ++j) {
        if (dgain) dgain[j] = static_cast<T>(static_cast<double>(dgain[j]) + sg[j - j0]);
        if (dbias) dbias[j] = static_cast<T>(static_cast<double>(dbias[j]) + sb[j - j0]);
      }
    });
  }
}

template <typename T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* gain, int64_t rows, int64_t cols, T eps) {
  const double n = static_cast<double>(cols);
  parallel_for(rows, rows * cols > kParallelElements, [&](int64_t r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double ms = 0;
#pragma omp simd reduction(+ : ms)
    for (int64_t j = 0; j < cols; ++j) ms += static_cast<double>(xr[j]) * static_cast<double>(xr[j]);
    ms /= n;
    const double rs = 1.0 / std::sqrt(ms + static_cast<double>(eps));
    if (rstd) rstd[r] = static_cast<T>(rs);
    for (int64_t j = 0; j < cols; ++j) yr[j] = static_cast<T>(static_cast<double>(xr[j]) * rs * gain_at(gain, j));
  });
}

// Forward: y_i = x_i * rstd * g_i, rstd = (mean(x^2) + eps)^(-1/2) (mean over n = cols features).
// d rstd/dx_j = -rstd^3 x_j / n, so with gy_i = dy_i * g_i:
//   dx_j  = rstd * gy_j - rstd^3 * x_j * mean_i(gy_i * x_i)
//   dg_i += sum over rows of dy_i * x_i * rstd
template <typename T>
void rmsnorm_backward(T* dx, T* dgain, const T* dy, const T* x, const T* rstd, const T* gain, int64_t rows,
                      int64_t cols) {
  const double n = static_cast<double>(cols);
  const bool parallel = rows * cols > kParallelElements;
  if (dx) {
    parallel_for(rows, parallel, [&](int64_t r) {
      const T* xr = x + r * cols;
      const T* dyr = dy + r * cols;
      T* dxr = dx + r * cols;
      const double rs = static_cast<double>(rstd[r]);
      double sum_gy_x = 0;
      for (int64_t j = 0; j < cols; ++j)
        sum_gy_x += static_cast<double>(dyr[j]) * gain_at(gain, j) * static_cast<double>(xr[j]);
      const double c = rs * rs * rs * sum_gy_x / n;
      for (int64_t j = 0; j < cols; ++j) {
        const double gy = static_cast<double>(dyr[j]) * gain_at(gain, j);
        dxr[j] = static_cast<T>(static_cast<double>(dxr[j]) + rs * gy - c * static_cast<double>(xr[j]));
      }
    });
  }
  if (dgain) {
    const int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
    parallel_for(blocks, parallel, [&](int64_t blk) {
      const int64_t j0 = blk * kColumnBlock, j1 = std::min(cols, j0 + kColumnBlock);
      double sg[kColumnBlock] = {};
      for (int64_t r = 0; r < rows; ++r) {  // fixed row order for every column
        const T* xr = x + r * cols;
        const T* dyr = dy + r * cols;
        const double rs = static_cast<double>(rstd[r]);
        for (int64_t j = j0; j < j1; ++j) sg[j - j0] += static_cast<double>(dyr[j]) * static_cast<double>(xr[j]) * rs;
      }
      for (int64_t j = j0; j < j1; ++j) dgain[j] = static_cast<T>(static_cast<double>(dgain[j]) + sg[j - j0]);
    });
  }
}

template void layernorm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                       int64_t, float);
template void layernorm_forward<double>(double*, double*, double*, const double*, const double*, const double*, int64_t,
                                        int64_t, double);
template void layernorm_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                        const float*, int64_t, int64_t);
template void layernorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         const double*, const double*, int64_t, int64_t);
template void rmsnorm_forward<float>(float*, float*, const float*, const float*, int64_t, int64_t, float);
template void rmsnorm_forward<double>(double*, double*, const double*, const double*, int64_t, int64_t, double);
template void rmsnorm_backward<float>(float*, float*, const float*, const float*, const float*, const float*, int64_t,
                                      int64_t);
template void rmsnorm_backward<double>(double*, double*, const double*, const double*, const double*, const double*,
                                       int64_t, int64_t);

}  // namespace tformer
