// The linear layer over a typed weight view. A layer names its weights as Weight<T> and calls
// these two functions; which storage format a weight has (dense float32 or float64, or for float
// activations one of GGUF's stored types: F16, BF16, Q8_0, Q4_0, kernels/qlinear.h) is the
// kernel's business, so adding a weight type changes this file and its kernels, never the layer
// code. Only dense weights have a backward: training keeps its master weights dense.
//
//   forward:  y[n, out] = x[n, in] W[out, in]^T + b[out]           (b may be null)
//   backward: dx[n, in] += dy W;  dW[out, in] += dy^T x;  db[out] += sum_n dy   (each may be null)
//
// The weight's gradient is always dense (an array of T, [out, in]): training keeps its master
// weights dense.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "core/error.h"

namespace tformer {

enum class WeightType : uint8_t {
  F32,       // float, [out, in] row-major
  F64,       // double, [out, in] row-major
  F16,       // IEEE binary16, [out, in] row-major                       (float activations only)
  BF16,      // bfloat16, [out, in] row-major                            (float activations only)
  Q8_0,      // ggml's Q8_0 blocks (kernels/quant.h), in / 32 per row     (float activations only)
  Q4_0,      // ggml's Q4_0 blocks, in / 32 per row                      (float activations only)
  Q4_0_R8,   // Q4_0 regrouped by eight blocks in memory (kernels/qlinear.h: repack_weight)
  Q8_0_R8,   // Q8_0 regrouped by eight blocks in memory (likewise)
  Q4_0_X16,  // Q4_0 interleaved sixteen rows at a time in memory (likewise: what a loaded Q4_0 becomes)
  Q8_0_X16,  // Q8_0 likewise
};
// The stored types (F16 to Q8_0_X16) run in kernels/qlinear.h; "f32", "f16", "bf16", "q8_0", "q4_0",
// "q4_0_r8", "q8_0_r8", "q4_0_x16", "q8_0_x16".
const char* weight_type_name(WeightType type);

// The dense type whose values a Weight<T> holds directly.
template <typename T>
constexpr WeightType dense_weight_type() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>);
  return std::is_same_v<T, float> ? WeightType::F32 : WeightType::F64;
}

// A [rows = out, cols = in] weight matrix in some storage format; T is the type of the
// activations it multiplies. A default-constructed Weight is absent (null data).
template <typename T>
struct Weight {
  WeightType type = dense_weight_type<T>();
  const void* data = nullptr;
  int64_t rows = 0, cols = 0;

  static Weight dense(const T* values, int64_t rows, int64_t cols) {
    return {dense_weight_type<T>(), values, rows, cols};
  }
  bool present() const { return data != nullptr; }
  bool is_dense() const { return type == dense_weight_type<T>(); }
  // The values of a dense weight; an Error for any other storage (a caller that needs T values,
  // such as the weight gradient, cannot take a block format).
  const T* dense_values() const {
    TF_CHECK(is_dense() && data, "weight: dense values of a {}x{} weight that is not dense", rows, cols);
    return static_cast<const T*>(data);
  }
};

// y: [n, W.rows]; x: [n, W.cols]; b: [W.rows] or null.
template <typename T>
void linear_forward(T* y, const T* x, const Weight<T>& W, const T* b, int64_t n);

// The products of one input x [n, in] by several weights of the same width (a layer's q, k and v;
// its w1 and w3): outs[i].y = x outs[i].W^T + outs[i].b. Each result has the bits of its own
// linear_forward; where those are the few-row kernels of one stored type, the products share one
// pass (kernels/qlinear.h: stored_linear_shared), which is what decode gains from it.
template <typename T>
struct LinearOut {
  T* y = nullptr;
  const Weight<T>* W = nullptr;
  const T* b = nullptr;
};
template <typename T>
void linear_forward_shared(std::initializer_list<LinearOut<T>> outs, const T* x, int64_t n);

// Row-independent products. While a RowIndependentProducts object lives on a thread, every float
// linear_forward that thread calls computes each row of y with exactly the arithmetic of the
// one-row product (n = 1), whatever n is: the few-row kernels of kernels/qlinear.h, whose per-row
// work does not depend on how many rows share the call, for every n (and, where the one-row
// product of a float32 weight is OpenBLAS's, one row at a time). A server's batch changes from step
// to step; with this, a sequence's logits do not change with it. A batch of 8 or more float32 rows
// takes register tiles of 4 weight rows x 6 activation rows (the rows past the sixes in fours to
// ones) whose every sum is the one-row kernel's (same order, same reduction) instead of the tiled
// sgemm, as float32 products of 8 to 127 rows do outside the scope too; bench/serve.sh measures.
class RowIndependentProducts {
 public:
  explicit RowIndependentProducts(bool on = true);
  ~RowIndependentProducts();
  RowIndependentProducts(const RowIndependentProducts&) = delete;
  RowIndependentProducts& operator=(const RowIndependentProducts&) = delete;

 private:
  bool previous_;
};
// Whether a RowIndependentProducts scope is on for this thread.
bool row_independent_products();
// The row count below which a float product by a `type` weight takes, with no RowIndependentProducts
// scope, the very kernels it takes inside one: fewer rows than this have, alone, the bits each of
// them has in a row-independent product of any size (so a server's short prefill chunks of several
// sequences in one forward have each chunk's products alone, and `tformer generate`'s; attention,
// whose one-token forward takes another kernel than a wider one, is serve/engine.cpp's concern).
// F32: 128 in a build with AVX-512 (-march=native on such a CPU; kernels/linear.cpp), 2 without
// it (OpenBLAS's for more than one row); the stored types: 8 (kernels/qlinear.h's few-row
// kernels); F64: 1.
int64_t row_independent_below(WeightType type);

// dx: [n, W.cols] (+=); dW: [W.rows, W.cols] (+=, dense); db: [W.rows] (+=); dy: [n, W.rows];
// x: [n, W.cols] (read only when dW is wanted).
template <typename T>
void linear_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const Weight<T>& W, int64_t n);

}  // namespace tformer
