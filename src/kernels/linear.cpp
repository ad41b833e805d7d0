#include "kernels/linear.h"

#include <array>

#include "kernels/matmul.h"
#include "kernels/qlinear.h"

namespace tformer {

namespace {
thread_local bool row_independent = false;
}

RowIndependentProducts::RowIndependentProducts(bool on) : previous_(row_independent) { row_independent = on; }
RowIndependentProducts::~RowIndependentProducts() { row_independent = previous_; }
bool row_independent_products() { return row_independent; }

namespace {

// The stored types always, and with AVX-512 the products of a dense weight by fewer than
// kOwnDenseRows rows too: one row (decode: our few-row kernel streams the weights at the
// bandwidth bound, where OpenBLAS's sgemv, held to AVX2, did not), and the register tiles of 4
// weight rows x 6 activation rows (kernels/qlinear.cpp), which ran at least as fast as OpenBLAS's
// sgemm up to 128 rows (2 threads of a Zen 4, the stories shapes' matrices: 16 rows 120-170
// GFLOP/s against 60-120, 64 rows 130-205 against 110-180, 128 rows about even; at 256 and 512
// rows sgemm is 0-15% ahead). Row-independent products of a dense weight take them for every n.
constexpr int64_t kOwnDenseRows = 128;
bool own_kernel(const Weight<float>& W, int64_t n) {
#if defined(__AVX512F__)
  return !W.is_dense() || n < kOwnDenseRows || row_independent;
#else
  (void)n;
  return !W.is_dense();
#endif
}

void add_bias(float* y, const float* b, int64_t n, int64_t out) {
  if (b)
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) y[r * out + o] += b[o];
}

}  // namespace

int64_t row_independent_below(WeightType type) {
  if (type == WeightType::F64) return 1;  // (double products are OpenBLAS's, in or out of the scope)
  if (type == WeightType::F32) {
#if defined(__AVX512F__)
    return kOwnDenseRows;
#else
    return 2;
#endif
  }
  return kStoredFewRows;
}

template <typename T>
void linear_forward(T* y, const T* x, const Weight<T>& W, const T* b, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    const bool own = own_kernel(W, n);
#if !defined(__AVX512F__)
    if (W.is_dense() && n > 1 && row_independent) {
      for (int64_t r = 0; r < n; ++r) linear_forward<T>(y + r * W.rows, x + r * W.cols, W, b, 1);
      return;
    }
#endif
    if (own) {
      stored_linear(y, x, W, n);
      add_bias(y, b, n, W.rows);
      return;
    }
  }
  TF_CHECK(W.is_dense(), "linear: a {} weight multiplies float activations only", weight_type_name(W.type));
  linear_forward<T>(y, x, W.dense_values(), b, n, W.cols, W.rows);
}

template <typename T>
void linear_forward_shared(std::initializer_list<LinearOut<T>> outs, const T* x, int64_t n) {
  if (outs.size() == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    std::array<StoredProduct, 4> parts;  // (a fixed array: a decode step allocates nothing)
    bool shared = outs.size() > 1 && outs.size() <= parts.size();
    const Weight<float>* first = outs.begin()->W;
    size_t k = 0;
    for (const LinearOut<T>& o : outs) {
      shared = shared && own_kernel(*o.W, n) && o.W->type == first->type && o.W->cols == first->cols;
      if (k < parts.size()) parts[k++] = {o.y, o.W};
    }
    if (shared) {
      stored_linear_shared(std::span<const StoredProduct>(parts.data(), k), x, n);
      for (const LinearOut<T>& o : outs) add_bias(o.y, o.b, n, o.W->rows);
      return;
    }
  }
  for (const LinearOut<T>& o : outs) linear_forward<T>(o.y, x, *o.W, o.b, n);
}

template <typename T>
void linear_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const Weight<T>& W, int64_t n) {
  // Training keeps dense master weights; a stored type has no backward (dequantize first).
  TF_CHECK(W.is_dense(), "linear: no backward through a {} weight", weight_type_name(W.type));
  linear_backward<T>(dx, dW, db, dy, x, W.dense_values(), n, W.cols, W.rows);
}

template void linear_forward<float>(float*, const float*, const Weight<float>&, const float*, int64_t);
template void linear_forward<double>(double*, const double*, const Weight<double>&, const double*, int64_t);
template void linear_forward_shared<float>(std::initializer_list<LinearOut<float>>, const float*, int64_t);
template void linear_forward_shared<double>(std::initializer_list<LinearOut<double>>, const double*, int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const Weight<float>&, int64_t);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const Weight<double>&,
                                      int64_t);

}  // namespace tformer
