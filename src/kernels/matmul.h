// Matrix multiply: the one place the library calls BLAS (OpenBLAS sgemm/dgemm) or our own AVX-512
// sgemm (sgemm_avx512.h), plus the plain triple loop that the tests use as the oracle. All
// matrices are row-major.
//
//   gemm: C[M,N] = alpha * op(A) * op(B) + beta * C
//         op(A) is [M,K]: A is stored [M,K] (lda >= K), or [K,M] when trans_a (lda >= M)
//         op(B) is [K,N]: B is stored [K,N] (ldb >= N), or [N,K] when trans_b (ldb >= K)
//         C is [M,N] with ldc >= N. beta == 0 overwrites C (which may hold NaN).
//   FLOPs: 2*M*N*K.
//
// Which sgemm runs (gemm<float>; double always goes to OpenBLAS's dgemm):
//   - our AVX-512 kernel when the build has AVX-512 and M >= 8, N >= 32, K >= 16: there it
//     measured 1.1x to 6x OpenBLAS in bench_gemm on 2 cores (about 1.6-2.7x on the training shapes
//     at 2 threads), because OPENBLAS_CORETYPE=Haswell holds OpenBLAS to its AVX2 kernel;
//   - OpenBLAS's cblas_sgemm otherwise (thin products, where a 14 x 32 register tile is mostly
//     padding, and builds without AVX-512).
// The environment variable TFORMER_SGEMM, read once at the first call, overrides the rule for
// debugging and benchmarking: "openblas" (always OpenBLAS), "own" (always sgemm_avx512, which is
// cblas_sgemm in a build without AVX-512) or "auto" (the rule; also when unset). Any other value
// is an error. Our kernel gives bit-identical results for any thread count; OpenBLAS does not
// promise that.
#pragma once

#include "core/tensor.h"

#include <cstdint>

namespace tformer {

template <typename T>
void gemm(T* C, int64_t ldc, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b, int64_t M,
          int64_t N, int64_t K, T alpha = T(1), T beta = T(0));

// y[out] = W[out, in] x[in] + beta * y: the one-row case of the linear layer (decode).
template <typename T>
void gemv(T* y, const T* W, const T* x, int64_t out, int64_t in, T beta = T(0));

// Oracle: the same contract, a plain triple loop accumulating in double.
template <typename T>
void gemm_naive(T* C, int64_t ldc, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
                int64_t M, int64_t N, int64_t K, T alpha = T(1), T beta = T(0));

// Shape-checked form over contiguous 2-D views.
template <typename T>
void matmul(TensorView<T> C, TensorView<const T> A, TensorView<const T> B, bool trans_a, bool trans_b, T alpha = T(1),
            T beta = T(0));

// Linear layer, weights stored [out, in] as torch.nn.Linear.
//   forward:  y[n, out] = x[n, in] * W[out, in]^T + b[out]         (b may be null)
//   backward: dx[n, in] += dy * W;  dW[out, in] += dy^T * x;  db[out] += sum_n dy   (each may be null)
template <typename T>
void linear_forward(T* y, const T* x, const T* W, const T* b, int64_t n, int64_t in, int64_t out);
template <typename T>
void linear_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const T* W, int64_t n, int64_t in, int64_t out);

}  // namespace tformer
