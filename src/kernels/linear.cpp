#include "kernels/linear.h"

#include "kernels/matmul.h"

namespace tformer {

template <typename T>
void linear_forward(T* y, const T* x, const Weight<T>& W, const T* b, int64_t n) {
  switch (W.type) {
    case WeightType::F32:
    case WeightType::F64:
      linear_forward<T>(y, x, W.dense_values(), b, n, W.cols, W.rows);
      return;
  }
  TF_CHECK(false, "linear: unknown weight type {}", static_cast<int>(W.type));
}

template <typename T>
void linear_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const Weight<T>& W, int64_t n) {
  switch (W.type) {
    case WeightType::F32:
    case WeightType::F64:
      linear_backward<T>(dx, dW, db, dy, x, W.dense_values(), n, W.cols, W.rows);
      return;
  }
  TF_CHECK(false, "linear: unknown weight type {}", static_cast<int>(W.type));
}

template void linear_forward<float>(float*, const float*, const Weight<float>&, const float*, int64_t);
template void linear_forward<double>(double*, const double*, const Weight<double>&, const double*, int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const Weight<float>&, int64_t);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const Weight<double>&,
                                      int64_t);

}  // namespace tformer
