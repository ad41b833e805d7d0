#include "kernels/matmul.h"

#include "core/threads.h"
#include "kernels/sgemm_avx512.h"

#include <cblas.h>
#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports once inlined (GCC bug 105593, fixed in 13): a false positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include <type_traits>

#include <cstdlib>
#include <string_view>

namespace tformer {

namespace {

enum class SgemmChoice { Auto, OpenBlas, Own };

// TFORMER_SGEMM, read once (see matmul.h).
SgemmChoice sgemm_choice() {
  static const SgemmChoice choice = [] {
    const char* env = std::getenv("TFORMER_SGEMM");
    const std::string_view v = env ? env : "";
    if (v.empty() || v == "auto") return SgemmChoice::Auto;
    if (v == "openblas") return SgemmChoice::OpenBlas;
    if (v == "own") return SgemmChoice::Own;
    fail_input("TFORMER_SGEMM", "TFORMER_SGEMM={}: expected auto, openblas or own", v);
  }();
  return choice;
}

// The automatic rule (matmul.h): our AVX-512 kernel wherever it was measured to win. It loses
// only on slivers: M < 8 or N < 32 fill too little of its 14 x 32 register tile (M = 4, N = 32,
// K = 512: 0.77x OpenBLAS; N = 8: 0.52x), and K < 16 leaves it bound by writing C (2048 x 2048 x
// 4: 0.48x). At M = 8, N = 32, K = 16 and above it measured 1.1x to 6x.
bool own_sgemm_wins(int64_t M, int64_t N, int64_t K) { return sgemm_avx512_compiled() && M >= 8 && N >= 32 && K >= 16; }

bool use_own_sgemm(int64_t M, int64_t N, int64_t K) {
  switch (sgemm_choice()) {
    case SgemmChoice::OpenBlas:
      return false;
    case SgemmChoice::Own:
      return true;
    case SgemmChoice::Auto:
      break;
  }
  return own_sgemm_wins(M, N, K);
}

void check_gemm_args(int64_t ldc, int64_t lda, bool trans_a, int64_t ldb, bool trans_b, int64_t M, int64_t N,
                     int64_t K) {
  TF_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  TF_CHECK(ldc >= std::max<int64_t>(N, 1), "gemm: ldc {} < N {}", ldc, N);
  TF_CHECK(lda >= std::max<int64_t>(trans_a ? M : K, 1), "gemm: lda {} too small", lda);
  TF_CHECK(ldb >= std::max<int64_t>(trans_b ? K : N, 1), "gemm: ldb {} too small", ldb);
  // OpenBLAS takes 32-bit ints: every size and leading dimension must fit.
  constexpr int64_t kMax = 0x7fffffff;
  TF_CHECK(M <= kMax && N <= kMax && K <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
           "gemm: size beyond 2^31-1");
}
}  // namespace

template <>
void gemm<float>(float* C, int64_t ldc, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                 bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
  check_gemm_args(ldc, lda, trans_a, ldb, trans_b, M, N, K);
  if (M == 0 || N == 0) return;
  if (use_own_sgemm(M, N, K)) return sgemm_avx512(C, ldc, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta);
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

template <>
void gemm<double>(double* C, int64_t ldc, const double* A, int64_t lda, bool trans_a, const double* B, int64_t ldb,
                  bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, double beta) {
  check_gemm_args(ldc, lda, trans_a, ldb, trans_b, M, N, K);
  if (M == 0 || N == 0) return;
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

template <>
void gemv<float>(float* y, const float* W, const float* x, int64_t out, int64_t in, float beta) {
  TF_CHECK(out >= 0 && in >= 0 && out <= 0x7fffffff && in <= 0x7fffffff, "gemv: sizes {} x {}", out, in);
  if (out == 0) return;
  cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0f, W,
              static_cast<int>(std::max<int64_t>(in, 1)), x, 1, beta, y, 1);
}

template <>
void gemv<double>(double* y, const double* W, const double* x, int64_t out, int64_t in, double beta) {
  TF_CHECK(out >= 0 && in >= 0 && out <= 0x7fffffff && in <= 0x7fffffff, "gemv: sizes {} x {}", out, in);
  if (out == 0) return;
  cblas_dgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(out), static_cast<int>(in), 1.0, W,
              static_cast<int>(std::max<int64_t>(in, 1)), x, 1, beta, y, 1);
}

template <typename T>
void gemm_naive(T* C, int64_t ldc, const T* A, int64_t lda, bool trans_a, const T* B, int64_t ldb, bool trans_b,
                int64_t M, int64_t N, int64_t K, T alpha, T beta) {
  check_gemm_args(ldc, lda, trans_a, ldb, trans_b, M, N, K);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < K; ++p) {
        const double a = trans_a ? A[p * lda + i] : A[i * lda + p];
        const double b = trans_b ? B[j * ldb + p] : B[p * ldb + j];
        acc += a * b;
      }
      // beta == 0 overwrites (as BLAS does), so C may start as garbage.
      const double prev = beta == T(0) ? 0.0 : static_cast<double>(beta) * C[i * ldc + j];
      C[i * ldc + j] = static_cast<T>(static_cast<double>(alpha) * acc + prev);
    }
  }
}

template <typename T>
void matmul(TensorView<T> C, TensorView<const T> A, TensorView<const T> B, bool trans_a, bool trans_b, T alpha,
            T beta) {
  TF_CHECK(A.rank() == 2 && B.rank() == 2 && C.rank() == 2, "matmul: 2-D views expected, got {} {} {}", A.shape().str(),
           B.shape().str(), C.shape().str());
  const int64_t M = trans_a ? A.dim(1) : A.dim(0);
  const int64_t K = trans_a ? A.dim(0) : A.dim(1);
  const int64_t Kb = trans_b ? B.dim(1) : B.dim(0);
  const int64_t N = trans_b ? B.dim(0) : B.dim(1);
  TF_CHECK(K == Kb && C.dim(0) == M && C.dim(1) == N, "matmul: shapes {}{} x {}{} -> {} do not agree", A.shape().str(),
           trans_a ? "^T" : "", B.shape().str(), trans_b ? "^T" : "", C.shape().str());
  gemm<T>(C.data(), std::max<int64_t>(N, 1), A.data(), std::max<int64_t>(A.dim(1), 1), trans_a, B.data(),
          std::max<int64_t>(B.dim(1), 1), trans_b, M, N, K, alpha, beta);
}

template <typename T>
void linear_forward(T* y, const T* x, const T* W, const T* b, int64_t n, int64_t in, int64_t out) {
  if (b) {
    parallel_for(n, n * out >= (1 << 16), [&](int64_t r) {
      for (int64_t o = 0; o < out; ++o) y[r * out + o] = b[o];
    });
  }
  // y[n, out] (+)= x[n, in] W[out, in]^T; one row (decode) is a matrix-vector product.
  if (n == 1) {
    gemv<T>(y, W, x, out, in, b ? T(1) : T(0));
    return;
  }
  if (n <= 8) {
    // A few rows (batched decode): stream the weights once, four rows at a time, and dot them
    // with every input row, which stay in L1 (8 x in values). BLAS would pack the whole weight
    // matrix first, moving it through memory twice more than the product needs. Each y element
    // is written by one thread, in a fixed order.
    const int64_t blocks = (out + 3) / 4;
    parallel_for(blocks, out * in > 65536, [&](int64_t blk) {
      const int64_t o0 = blk * 4;
      const int64_t m = std::min<int64_t>(4, out - o0);
      const T* w0 = W + o0 * in;
      const T* w1 = W + (o0 + std::min<int64_t>(1, m - 1)) * in;  // rows past the end repeat the
      const T* w2 = W + (o0 + std::min<int64_t>(2, m - 1)) * in;  // last one; their sums are
      const T* w3 = W + (o0 + std::min<int64_t>(3, m - 1)) * in;  // not stored
      auto store = [&](int64_t r, const T* acc) {
        for (int64_t j = 0; j < m; ++j) y[r * out + o0 + j] = (b ? y[r * out + o0 + j] : T(0)) + acc[j];
      };
      // Ask for the weight rows kAhead blocks ahead now: the inner loops run from L1 and the next
      // block's rows would otherwise arrive from memory only when first touched.
      constexpr int64_t kAhead = 2;  // blocks (2, 4, 8 measured: 2 best on the 110M shape)
      if (!std::is_same_v<T, float> && blk + kAhead < blocks)
        for (const T* pf = W + (o0 + 4 * kAhead) * in; pf < W + std::min(out, o0 + 4 * kAhead + 4) * in;
             pf += 64 / sizeof(T))
          __builtin_prefetch(pf);
      int64_t r = 0;
      // Four input rows at a time: 16 dot products share each load of a weight vector and of an
      // input vector (8 loads per 16 multiply-adds instead of 5 per 4), so the loop is bound by
      // the multiply-adds rather than by L1 loads.
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        // Explicit registers: the 4 weight vectors and 4 input vectors of each step are loaded
        // once and feed 16 FMAs (GCC's version of the loop below re-loads an operand per FMA).
        for (; r + 4 <= n; r += 4) {
          const float *x0 = x + r * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
          __m512 acc[16];
          for (auto& a : acc) a = _mm512_setzero_ps();
          const float* ahead = W + std::min(out - 1, o0 + 4 * kAhead) * in;  // [4 rows x in] kAhead blocks on
          const int64_t groups = std::min<int64_t>(n / 4, 4), per_step = 4 / groups;
          for (int64_t k = 0; k < in; k += 16) {
            // The block ahead (4 rows = 4 x in floats) is requested spread over the groups of
            // four input rows, so memory keeps streaming while later groups compute from L1.
            if (r / 4 < groups)
              for (int64_t line = 0; line < per_step; ++line)
                __builtin_prefetch(ahead + (r / 4) * (4 * in / groups) + per_step * k + 16 * line);
            const __mmask16 mk = in - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (in - k)) - 1);
            const __m512 v0 = _mm512_maskz_loadu_ps(mk, w0 + k), v1 = _mm512_maskz_loadu_ps(mk, w1 + k);
            const __m512 v2 = _mm512_maskz_loadu_ps(mk, w2 + k), v3 = _mm512_maskz_loadu_ps(mk, w3 + k);
            const __m512 u[4] = {_mm512_maskz_loadu_ps(mk, x0 + k), _mm512_maskz_loadu_ps(mk, x1 + k),
                                 _mm512_maskz_loadu_ps(mk, x2 + k), _mm512_maskz_loadu_ps(mk, x3 + k)};
            for (int i = 0; i < 4; ++i) {
              acc[4 * i + 0] = _mm512_fmadd_ps(v0, u[i], acc[4 * i + 0]);
              acc[4 * i + 1] = _mm512_fmadd_ps(v1, u[i], acc[4 * i + 1]);
              acc[4 * i + 2] = _mm512_fmadd_ps(v2, u[i], acc[4 * i + 2]);
              acc[4 * i + 3] = _mm512_fmadd_ps(v3, u[i], acc[4 * i + 3]);
            }
          }
          // Sixteen horizontal sums at once by a transposing tree (15 shuffle-adds instead of 16
          // separate reductions): lane l of the result is the full sum of acc[l].
          __m512 l1[8], l2[4], l3[2];
          for (int i = 0; i < 8; ++i)
            l1[i] = _mm512_add_ps(_mm512_unpacklo_ps(acc[2 * i], acc[2 * i + 1]),
                                  _mm512_unpackhi_ps(acc[2 * i], acc[2 * i + 1]));
          for (int i = 0; i < 4; ++i) {
            const __m512d a = _mm512_castps_pd(l1[2 * i]), b = _mm512_castps_pd(l1[2 * i + 1]);
            l2[i] =
                _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
          }
          for (int i = 0; i < 2; ++i)
            l3[i] = _mm512_add_ps(_mm512_shuffle_f32x4(l2[2 * i], l2[2 * i + 1], 0x88),
                                  _mm512_shuffle_f32x4(l2[2 * i], l2[2 * i + 1], 0xDD));
          alignas(64) float sums[16];
          _mm512_store_ps(
              sums, _mm512_add_ps(_mm512_shuffle_f32x4(l3[0], l3[1], 0x88), _mm512_shuffle_f32x4(l3[0], l3[1], 0xDD)));
          for (int i = 0; i < 4; ++i) store(r + i, sums + 4 * i);  // sums[4 i + j]: input row i, weight row j
        }
      }
#endif
      for (; r + 4 <= n; r += 4) {
        const T *x0 = x + r * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
        T a00 = 0, a01 = 0, a02 = 0, a03 = 0, a10 = 0, a11 = 0, a12 = 0, a13 = 0;
        T a20 = 0, a21 = 0, a22 = 0, a23 = 0, a30 = 0, a31 = 0, a32 = 0, a33 = 0;
#pragma omp simd reduction(+ : a00, a01, a02, a03, a10, a11, a12, a13, a20, a21, a22, a23, a30, a31, a32, a33)
        for (int64_t k = 0; k < in; ++k) {
          const T v0 = w0[k], v1 = w1[k], v2 = w2[k], v3 = w3[k];
          const T u0 = x0[k], u1 = x1[k], u2 = x2[k], u3 = x3[k];
          a00 += v0 * u0;
          a01 += v1 * u0;
          a02 += v2 * u0;
          a03 += v3 * u0;
          a10 += v0 * u1;
          a11 += v1 * u1;
          a12 += v2 * u1;
          a13 += v3 * u1;
          a20 += v0 * u2;
          a21 += v1 * u2;
          a22 += v2 * u2;
          a23 += v3 * u2;
          a30 += v0 * u3;
          a31 += v1 * u3;
          a32 += v2 * u3;
          a33 += v3 * u3;
        }
        const T acc0[4] = {a00, a01, a02, a03}, acc1[4] = {a10, a11, a12, a13};
        const T acc2[4] = {a20, a21, a22, a23}, acc3[4] = {a30, a31, a32, a33};
        store(r, acc0);
        store(r + 1, acc1);
        store(r + 2, acc2);
        store(r + 3, acc3);
      }
      for (; r < n; ++r) {
        const T* xr = x + r * in;
        T a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
        for (int64_t k = 0; k < in; ++k) {
          const T xv = xr[k];
          a0 += w0[k] * xv;
          a1 += w1[k] * xv;
          a2 += w2[k] * xv;
          a3 += w3[k] * xv;
        }
        const T acc[4] = {a0, a1, a2, a3};
        store(r, acc);
      }
    });
    return;
  }
  gemm<T>(y, out, x, in, false, W, in, true, n, out, in, T(1), b ? T(1) : T(0));
}

template <typename T>
void linear_backward(T* dx, T* dW, T* db, const T* dy, const T* x, const T* W, int64_t n, int64_t in, int64_t out) {
  // dx[n, in] += dy[n, out] W[out, in]
  if (dx) gemm<T>(dx, in, dy, out, false, W, in, false, n, in, out, T(1), T(1));
  // dW[out, in] += dy[n, out]^T x[n, in]
  if (dW) gemm<T>(dW, in, dy, out, true, x, in, false, out, in, n, T(1), T(1));
  // db[out] += sum over rows of dy
  if (db) {
    // Column blocks in parallel; each column is summed over the rows in order by one thread, so
    // the result does not depend on the thread count.
    constexpr int64_t kCols = 64;
    const int64_t blocks = (out + kCols - 1) / kCols;
    parallel_for(blocks, n * out >= (1 << 16), [&](int64_t blk) {
      const int64_t o0 = blk * kCols, o1 = std::min(out, o0 + kCols);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t o = o0; o < o1; ++o) db[o] += dy[r * out + o];
    });
  }
}

template void gemm_naive<float>(float*, int64_t, const float*, int64_t, bool, const float*, int64_t, bool, int64_t,
                                int64_t, int64_t, float, float);
template void gemm_naive<double>(double*, int64_t, const double*, int64_t, bool, const double*, int64_t, bool, int64_t,
                                 int64_t, int64_t, double, double);
template void matmul<float>(TensorView<float>, TensorView<const float>, TensorView<const float>, bool, bool, float,
                            float);
template void matmul<double>(TensorView<double>, TensorView<const double>, TensorView<const double>, bool, bool, double,
                             double);
template void linear_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
template void linear_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t);
template void linear_backward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t, int64_t,
                                     int64_t);
template void linear_backward<double>(double*, double*, double*, const double*, const double*, const double*, int64_t,
                                      int64_t, int64_t);

}  // namespace tformer
