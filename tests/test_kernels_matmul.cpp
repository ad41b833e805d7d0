// BLAS gemm against the naive triple loop on odd shapes, every transpose combination and padded
// leading dimensions; the matmul() view wrapper's values; our AVX-512 sgemm against the same loop
// (edges in every dimension, several blocks of K, M and N, alpha and beta, NaN in C with beta 0)
// and bit-identical across thread counts; and the linear layer's backward against finite
// differences, with and without bias and with some gradients not requested.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "core/threads.h"
#include "kernels/matmul.h"
#include "kernels/sgemm_avx512.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::random_values;

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

class GemmShapes : public ::testing::TestWithParam<std::tuple<int, int, int, bool, bool>> {};

TEST_P(GemmShapes, BlasEqualsNaiveLoop) {
  const auto [M, N, K, ta, tb] = GetParam();
  const auto A = as<float>(random_values(int64_t(M) * K, 1));
  const auto B = as<float>(random_values(int64_t(K) * N, 2));
  // C starts non-zero so beta is exercised.
  const auto C0 = as<float>(random_values(int64_t(M) * N, 3));
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  for (float beta : {0.0f, 0.5f}) {
    std::vector<float> fast = C0, slow = C0;
    gemm<float>(fast.data(), N, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 1.5f, beta);
    gemm_naive<float>(slow.data(), N, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 1.5f, beta);
    // float accumulation over K terms of size <= 1: error grows like K * eps.
    EXPECT_TRUE(all_close(fast, slow, 1e-5, 1e-6 * K)) << "M=" << M << " N=" << N << " K=" << K;
  }
  // double through dgemm must agree to near machine precision.
  const auto Ad = random_values(int64_t(M) * K, 1), Bd = random_values(int64_t(K) * N, 2);
  std::vector<double> fast(size_t(M) * N), slow(size_t(M) * N, 7.0);
  gemm<double>(fast.data(), N, Ad.data(), lda, ta, Bd.data(), ldb, tb, M, N, K);
  gemm_naive<double>(slow.data(), N, Ad.data(), lda, ta, Bd.data(), ldb, tb, M, N, K);
  EXPECT_TRUE(all_close(fast, slow, 1e-12, 1e-12));
}

INSTANTIATE_TEST_SUITE_P(OddShapes, GemmShapes,
                         ::testing::Combine(::testing::Values(1, 3, 129), ::testing::Values(1, 5, 65),
                                            ::testing::Values(1, 7, 33), ::testing::Bool(), ::testing::Bool()));

TEST(Gemm, SpecShapesExactly) {
  // The three shapes the issue names, with every transpose combination.
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{3, 5, 7}, std::tuple{129, 65, 33}}) {
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const auto A = as<float>(random_values(int64_t(M) * K, 11));
        const auto B = as<float>(random_values(int64_t(K) * N, 12));
        std::vector<float> fast(size_t(M) * N), slow(size_t(M) * N);
        gemm<float>(fast.data(), N, A.data(), ta ? M : K, ta, B.data(), tb ? K : N, tb, M, N, K);
        gemm_naive<float>(slow.data(), N, A.data(), ta ? M : K, ta, B.data(), tb ? K : N, tb, M, N, K);
        EXPECT_TRUE(all_close(fast, slow, 1e-5, 1e-6 * K)) << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb;
      }
  }
}

TEST(Gemm, HandComputedTransposes) {
  // A = [[1, 2], [3, 4], [5, 6]] (3x2), B = [[1, 0, -1], [2, 1, 0]] (2x3)
  // A B = [[1+4, 0+2, -1+0], [3+8, 0+4, -3+0], [5+12, 0+6, -5+0]] = [[5, 2, -1], [11, 4, -3], [17, 6, -5]]
  const std::vector<float> A{1, 2, 3, 4, 5, 6}, B{1, 0, -1, 2, 1, 0};
  std::vector<float> C(9);
  gemm<float>(C.data(), 3, A.data(), 2, false, B.data(), 3, false, 3, 3, 2);
  EXPECT_EQ(C, (std::vector<float>{5, 2, -1, 11, 4, -3, 17, 6, -5}));
  // A^T A = [[1+9+25, 2+12+30], [2+12+30, 4+16+36]] = [[35, 44], [44, 56]]
  std::vector<float> G(4);
  gemm<float>(G.data(), 2, A.data(), 2, true, A.data(), 2, false, 2, 2, 3);
  EXPECT_EQ(G, (std::vector<float>{35, 44, 44, 56}));
  // A A^T row 0 = [1*1+2*2, 1*3+2*4, 1*5+2*6] = [5, 11, 17]
  std::vector<float> H(9);
  gemm<float>(H.data(), 3, A.data(), 2, false, A.data(), 2, true, 3, 3, 2);
  EXPECT_EQ(H[0], 5);
  EXPECT_EQ(H[1], 11);
  EXPECT_EQ(H[2], 17);
}

// matmul(), the shape-checked wrapper over 2-D views: its VALUES (not only its shape checks) for
// every transpose combination, against gemm_naive on the same storage, with alpha and beta.
// A is stored [M, K] or, transposed, [K, M]; B is stored [K, N] or [N, K].
TEST(Gemm, MatmulViewWrapperValuesMatchNaiveForEveryTranspose) {
  const int64_t M = 5, N = 3, K = 7;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      Buffer<double> a(ta ? Shape{K, M} : Shape{M, K}, random_values(M * K, 31));
      Buffer<double> b(tb ? Shape{N, K} : Shape{K, N}, random_values(K * N, 32));
      const auto c0 = random_values(M * N, 33);
      Buffer<double> c(Shape{M, N}, c0);
      matmul<double>(c.view(), a.view(), b.view(), ta, tb, 1.5, 0.5);
      std::vector<double> want = c0;
      gemm_naive<double>(want.data(), N, a.data(), ta ? M : K, ta, b.data(), tb ? K : N, tb, M, N, K, 1.5, 0.5);
      EXPECT_TRUE(all_close(c.data(), want.data(), M * N, 1e-13, 1e-13));
      // Element (1, 2) by hand from the views: alpha * sum_p op(A)(1, p) op(B)(p, 2) + beta * C0(1, 2).
      double acc = 0;
      for (int64_t p = 0; p < K; ++p)
        acc += (ta ? a.view()(p, 1) : a.view()(1, p)) * (tb ? b.view()(2, p) : b.view()(p, 2));
      EXPECT_NEAR(c.view()(1, 2), 1.5 * acc + 0.5 * c0[1 * N + 2], 1e-13);
      // Float, beta 0 (C starts as garbage and is overwritten).
      Buffer<float> af(a.shape(), std::vector<float>(a.data(), a.data() + M * K));
      Buffer<float> bf(b.shape(), std::vector<float>(b.data(), b.data() + K * N));
      Buffer<float> cf(Shape{M, N}, std::vector<float>(M * N, 1e30f));
      matmul<float>(cf.view(), af.view(), bf.view(), ta, tb);
      std::vector<float> wf(M * N);
      gemm_naive<float>(wf.data(), N, af.data(), ta ? M : K, ta, bf.data(), tb ? K : N, tb, M, N, K);
      EXPECT_TRUE(all_close(cf.data(), wf.data(), M * N, 1e-5, 1e-6 * K));
    }
  // Shapes that only agree transposed are rejected untransposed.
  Buffer<double> a(Shape{K, M}), b(Shape{N, K}), c(Shape{M, N});
  EXPECT_THROW(matmul<double>(c.view(), a.view(), b.view(), false, false), Error);
  EXPECT_NO_THROW(matmul<double>(c.view(), a.view(), b.view(), true, true));
}

// Leading dimensions larger than the matrix widths (a sub-block of wider storage): lda > K (or
// > M transposed), ldb > N (or > K), ldc > N. gemm must read only the M x K / K x N blocks and
// write only the M x N block of C: C's padding columns hold a sentinel that must survive, and A's
// and B's padding columns hold NaN, which would poison any result that read them.
TEST(Gemm, LeadingDimensionsLargerThanTheWidth) {
  const int64_t M = 6, N = 5, K = 7;
  const double kSentinel = 12345;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, lda = a_cols + 3;
      const int64_t b_rows = tb ? N : K, b_cols = tb ? K : N, ldb = b_cols + 2;
      const int64_t ldc = N + 4;
      const auto av = random_values(a_rows * lda, 41), bv = random_values(b_rows * ldb, 42),
                 cv = random_values(M * ldc, 43);
      std::vector<double> A(av), B(bv), C(cv);
      for (int64_t r = 0; r < a_rows; ++r)
        for (int64_t c = a_cols; c < lda; ++c) A[r * lda + c] = std::numeric_limits<double>::quiet_NaN();
      for (int64_t r = 0; r < b_rows; ++r)
        for (int64_t c = b_cols; c < ldb; ++c) B[r * ldb + c] = std::numeric_limits<double>::quiet_NaN();
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = N; c < ldc; ++c) C[r * ldc + c] = kSentinel;
      // Oracle: gemm_naive on the same padded storage, and, independently, on compact copies.
      std::vector<double> fast = C, slow = C;
      gemm<double>(fast.data(), ldc, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 2.0, -0.5);
      gemm_naive<double>(slow.data(), ldc, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 2.0, -0.5);
      std::vector<double> Ac(a_rows * a_cols), Bc(b_rows * b_cols), Cc(M * N);
      for (int64_t r = 0; r < a_rows; ++r)
        for (int64_t c = 0; c < a_cols; ++c) Ac[r * a_cols + c] = A[r * lda + c];
      for (int64_t r = 0; r < b_rows; ++r)
        for (int64_t c = 0; c < b_cols; ++c) Bc[r * b_cols + c] = B[r * ldb + c];
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = 0; c < N; ++c) Cc[r * N + c] = C[r * ldc + c];
      gemm_naive<double>(Cc.data(), N, Ac.data(), a_cols, ta, Bc.data(), b_cols, tb, M, N, K, 2.0, -0.5);
      for (int64_t r = 0; r < M; ++r) {
        EXPECT_TRUE(all_close(fast.data() + r * ldc, slow.data() + r * ldc, N, 1e-13, 1e-13)) << "row " << r;
        EXPECT_TRUE(all_close(fast.data() + r * ldc, Cc.data() + r * N, N, 1e-13, 1e-13)) << "row " << r;
        for (int64_t c = N; c < ldc; ++c) {
          EXPECT_EQ(fast[r * ldc + c], kSentinel) << "gemm wrote C padding (" << r << ", " << c << ")";
          EXPECT_EQ(slow[r * ldc + c], kSentinel) << "gemm_naive wrote C padding (" << r << ", " << c << ")";
        }
      }
      // Float, beta 0.
      std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Cf(C.begin(), C.end()), Sf = Cf;
      gemm<float>(Cf.data(), ldc, Af.data(), lda, ta, Bf.data(), ldb, tb, M, N, K);
      gemm_naive<float>(Sf.data(), ldc, Af.data(), lda, ta, Bf.data(), ldb, tb, M, N, K);
      EXPECT_TRUE(all_close(Cf, Sf, 1e-5, 1e-6 * K));  // padding compared too: both must be the sentinel
      for (int64_t r = 0; r < M; ++r)
        for (int64_t c = N; c < ldc; ++c) EXPECT_EQ(Cf[r * ldc + c], static_cast<float>(kSentinel));
    }
}

TEST(Gemm, ViewShapesAreChecked) {
  Buffer<float> a({2, 3}), b({4, 5}), c({2, 5});
  EXPECT_THROW(matmul<float>(c.view(), a.view(), b.view(), false, false), Error);
  Buffer<float> b2({3, 5});
  EXPECT_NO_THROW(matmul<float>(c.view(), a.view(), b2.view(), false, false));
}

// OpenBLAS does not promise bit-identical results across thread counts (the K split may differ),
// so each thread count is compared with the naive loop, not with the other.
TEST(Gemm, OneAndTwoThreadsBothMatchTheNaiveLoop) {
  const int M = 200, N = 150, K = 300;
  const auto A = as<float>(random_values(int64_t(M) * K, 5));
  const auto B = as<float>(random_values(int64_t(K) * N, 6));
  std::vector<float> one(size_t(M) * N), two(size_t(M) * N), slow(size_t(M) * N);
  set_num_threads(1);
  gemm<float>(one.data(), N, A.data(), K, false, B.data(), N, false, M, N, K);
  set_num_threads(2);
  gemm<float>(two.data(), N, A.data(), K, false, B.data(), N, false, M, N, K);
  gemm_naive<float>(slow.data(), N, A.data(), K, false, B.data(), N, false, M, N, K);
  EXPECT_TRUE(all_close(one, slow, 1e-5, 1e-6 * K));
  EXPECT_TRUE(all_close(two, slow, 1e-5, 1e-6 * K));
  set_num_threads(0);
}

// ---- sgemm_avx512 -------------------------------------------------------------------------

// One sgemm problem stored with padded leading dimensions: A's, B's padding holds NaN (reading it
// would poison a result), C's padding holds a sentinel that must survive.
struct PaddedGemm {
  int64_t M, N, K;
  bool ta, tb;
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C;
  static constexpr float kSentinel = 12345.0f;

  PaddedGemm(int64_t M_, int64_t N_, int64_t K_, bool ta_, bool tb_, int64_t pad, uint64_t seed)
      : M(M_), N(N_), K(K_), ta(ta_), tb(tb_) {
    const int64_t a_rows = ta ? K : M, a_cols = ta ? M : K, b_rows = tb ? N : K, b_cols = tb ? K : N;
    lda = a_cols + pad;
    ldb = b_cols + 2 * pad;
    ldc = N + pad;
    A = padded(random_values(a_rows * a_cols, seed), a_rows, a_cols, lda, std::numeric_limits<float>::quiet_NaN());
    B = padded(random_values(b_rows * b_cols, seed + 1), b_rows, b_cols, ldb, std::numeric_limits<float>::quiet_NaN());
    C = padded(random_values(M * N, seed + 2), M, N, ldc, kSentinel);
  }
  static std::vector<float> padded(const std::vector<double>& v, int64_t rows, int64_t cols, int64_t ld, float pad) {
    std::vector<float> out(static_cast<size_t>(std::max<int64_t>(rows * ld, 1)), pad);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[r * ld + c] = static_cast<float>(v[r * cols + c]);
    return out;
  }
  float a(int64_t i, int64_t p) const { return ta ? A[p * lda + i] : A[i * lda + p]; }
  float b(int64_t p, int64_t j) const { return tb ? B[j * ldb + p] : B[p * ldb + j]; }
};

// got (from C0) against gemm_naive: |got - ref| <= 2 eps (K + 2) (|alpha| sum_p |a_ip b_pj| +
// |beta c0_ij|) + eps |ref|, the bound of a float32 accumulation of K products in any order plus
// the naive loop's final rounding. C's padding must still hold the sentinel.
::testing::AssertionResult matches_naive(const PaddedGemm& g, const std::vector<float>& C0,
                                         const std::vector<float>& got, float alpha, float beta) {
  std::vector<float> want = C0;
  gemm_naive<float>(want.data(), g.ldc, g.A.data(), g.lda, g.ta, g.B.data(), g.ldb, g.tb, g.M, g.N, g.K, alpha, beta);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t i = 0; i < g.M; ++i) {
    for (int64_t j = 0; j < g.N; ++j) {
      double mag = 0;
      for (int64_t p = 0; p < g.K; ++p) mag += std::abs(static_cast<double>(g.a(i, p)) * g.b(p, j));
      const double c0 = beta == 0.0f ? 0.0 : std::abs(static_cast<double>(beta) * C0[i * g.ldc + j]);
      const double x = got[i * g.ldc + j], r = want[i * g.ldc + j];
      const double tol = 2 * eps * static_cast<double>(g.K + 2) * (std::abs(alpha) * mag + c0) + eps * std::abs(r);
      if (!(std::abs(x - r) <= tol))
        return ::testing::AssertionFailure() << "C(" << i << ", " << j << ") = " << x << ", naive " << r << ", |diff| "
                                             << std::abs(x - r) << " > " << tol;
    }
    for (int64_t j = g.N; j < g.ldc; ++j)
      if (got[i * g.ldc + j] != PaddedGemm::kSentinel)
        return ::testing::AssertionFailure() << "wrote C's padding at (" << i << ", " << j << ")";
  }
  return ::testing::AssertionSuccess();
}

#define SKIP_WITHOUT_AVX512() \
  if (!sgemm_avx512_compiled()) GTEST_SKIP() << "built without AVX-512: sgemm_avx512 is cblas_sgemm"

// Every transpose combination on shapes with edges in every dimension (M not a multiple of the 14
// micro-tile rows, N not of its 32 columns, K odd), including several K blocks (K = 1700 > 768),
// several row blocks (M = 700: two thread slabs of 350 rows > 168) and several column blocks
// (N = 4500 > 2048, one thread: under 1 MFLOP); padded leading dimensions; alpha 1.5; beta 0 over
// NaN, 1 and -0.5.
TEST(SgemmAvx512, MatchesNaiveLoopOnEveryTransposeAndEdge) {
  SKIP_WITHOUT_AVX512();
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes{{1, 1, 1},      {7, 5, 3},       {17, 33, 65},
                                                                  {129, 257, 31}, {300, 200, 500}, {700, 90, 40},
                                                                  {3, 4500, 20},  {40, 50, 1700}};
  uint64_t seed = 100;
  for (const auto& [M, N, K] : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          SCOPED_TRACE(::testing::Message()
                       << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          PaddedGemm g(M, N, K, ta, tb, 3, seed += 3);
          std::vector<float> C0 = g.C;
          if (beta == 0.0f)  // beta 0 overwrites: NaN in C must not leak into the result
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) C0[i * g.ldc + j] = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> got = C0;
          sgemm_avx512(got.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, M, N, K, 1.5f, beta);
          EXPECT_TRUE(matches_naive(g, C0, got, 1.5f, beta));
        }
}

// Unpadded storage (ld = width exactly) and alpha 1, beta 0: the linear layer's three products.
TEST(SgemmAvx512, MatchesNaiveLoopWithTightLeadingDimensions) {
  SKIP_WITHOUT_AVX512();
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      PaddedGemm g(45, 77, 290, ta, tb, 0, 7);
      const std::vector<float> C0 = g.C;
      std::vector<float> got = C0;
      sgemm_avx512(got.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, g.M, g.N, g.K, 1.0f, 0.0f);
      EXPECT_TRUE(matches_naive(g, C0, got, 1.0f, 0.0f));
    }
}

// K == 0: C = beta * C (beta 0 clears, even NaN); M or N == 0: nothing is touched; alpha == 0:
// C = beta * C without reading A or B (BLAS's rule: NaN there does not leak).
TEST(SgemmAvx512, EmptyProducts) {
  SKIP_WITHOUT_AVX512();
  const float A[1] = {1.0f}, B[1] = {1.0f};
  std::vector<float> C{2.0f, std::numeric_limits<float>::quiet_NaN(), -4.0f, 8.0f};
  sgemm_avx512(C.data(), 2, A, 1, false, B, 2, false, 2, 2, 0, 1.0f, -0.5f);
  EXPECT_EQ(C[0], -1.0f);
  EXPECT_TRUE(std::isnan(C[1]));
  EXPECT_EQ(C[3], -4.0f);
  sgemm_avx512(C.data(), 2, A, 1, false, B, 2, false, 2, 2, 0, 1.0f, 0.0f);
  EXPECT_EQ(C, (std::vector<float>{0, 0, 0, 0}));
  std::vector<float> D{5.0f};
  sgemm_avx512(D.data(), 1, A, 1, false, B, 1, false, 0, 1, 1, 1.0f, 0.0f);
  sgemm_avx512(D.data(), 1, A, 1, false, B, 1, false, 1, 0, 1, 1.0f, 0.0f);
  EXPECT_EQ(D[0], 5.0f);
  const std::vector<float> nan_a(20 * 30, std::numeric_limits<float>::quiet_NaN()), b(30 * 40, 1.0f);
  std::vector<float> E(20 * 40, 2.0f);
  sgemm_avx512(E.data(), 40, nan_a.data(), 30, false, b.data(), 40, false, 20, 40, 30, 0.0f, 0.5f);
  EXPECT_EQ(E, std::vector<float>(20 * 40, 1.0f));
}

// Each C element is one thread's fixed-order sum: 1 and 2 threads give the same bits, for a
// split by rows (M >= N) and by columns (N > M), one and several K blocks, every transpose
// combination, beta 0 and 1.
TEST(SgemmAvx512, OneAndTwoThreadsGiveIdenticalBits) {
  SKIP_WITHOUT_AVX512();
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{300, 200, 500}, {64, 1000, 300}, {150, 100, 1600}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f}) {
          SCOPED_TRACE(::testing::Message()
                       << M << "x" << N << "x" << K << " ta=" << ta << " tb=" << tb << " beta=" << beta);
          const PaddedGemm g(M, N, K, ta, tb, 1, 200);
          std::vector<float> one = g.C, two = g.C;
          omp_set_num_threads(1);
          sgemm_avx512(one.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, M, N, K, 1.0f, beta);
          omp_set_num_threads(2);
          sgemm_avx512(two.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, M, N, K, 1.0f, beta);
          EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0);
          EXPECT_TRUE(matches_naive(g, g.C, two, 1.0f, beta));
        }
  set_num_threads(0);
}

// gemm<float> on shapes large enough for the dispatch to pick our kernel (unless TFORMER_SGEMM
// says otherwise): still the naive loop's result, every transpose combination.
TEST(Gemm, LargeShapesMatchNaiveWhicheverKernelRuns) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "ta=" << ta << " tb=" << tb);
      const PaddedGemm g(260, 300, 270, ta, tb, 2, 300);
      std::vector<float> got = g.C;
      gemm<float>(got.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, g.M, g.N, g.K, 0.5f, 1.0f);
      EXPECT_TRUE(matches_naive(g, g.C, got, 0.5f, 1.0f));
    }
}

TEST(Blas, IsTheOpenMPBuild) {
  // Our loops and OpenBLAS must share one OpenMP pool; the pthread build would oversubscribe.
  EXPECT_EQ(blas_parallel_model(), 2) << "OpenBLAS config: " << blas_config();
}

// The few-row path (2..8 rows: batched decode) and its edges: rows in blocks of four plus a
// remainder, output rows not a multiple of four, with and without bias, against the naive loop.
TEST(Linear, FewRowsEqualTheNaiveProduct) {
  for (int64_t n = 1; n <= 9; ++n)
    for (int64_t out : {1, 3, 4, 5, 13})
      for (int64_t in : {1, 7, 33})
        for (bool bias : {false, true}) {
          const std::vector<double> xd = random_values(n * in, 71 + n), Wd = random_values(out * in, 72 + out),
                                    bd = random_values(out, 73);
          std::vector<double> want(n * out);
          gemm_naive<double>(want.data(), out, xd.data(), in, false, Wd.data(), in, true, n, out, in);
          if (bias)
            for (int64_t r = 0; r < n; ++r)
              for (int64_t o = 0; o < out; ++o) want[r * out + o] += bd[o];
          const std::vector<float> x(xd.begin(), xd.end()), W(Wd.begin(), Wd.end()), b(bd.begin(), bd.end());
          std::vector<float> y(n * out, 1e30f);  // garbage: overwritten
          linear_forward<float>(y.data(), x.data(), W.data(), bias ? b.data() : nullptr, n, in, out);
          EXPECT_TRUE(all_close(y, want, 1e-5, 1e-5)) << "n " << n << " out " << out << " in " << in;
          std::vector<double> yd(n * out, 1e30);
          linear_forward<double>(yd.data(), xd.data(), Wd.data(), bias ? bd.data() : nullptr, n, in, out);
          EXPECT_TRUE(all_close(yd, want, 1e-13, 1e-13)) << "n " << n << " out " << out << " in " << in;
        }
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int64_t n = 3, in = 4, out = 5;
  std::vector<double> x = random_values(n * in, 21), W = random_values(out * in, 22), b = random_values(out, 23);
  const std::vector<double> r = random_values(n * out, 24);  // loss = sum(r * y)
  auto loss = [&] {
    std::vector<double> y(n * out);
    linear_forward<double>(y.data(), x.data(), W.data(), b.data(), n, in, out);
    double s = 0;
    for (int64_t i = 0; i < n * out; ++i) s += r[i] * y[i];
    return s;
  };
  // Start the gradients non-zero: backward must accumulate.
  std::vector<double> dx(n * in, 0.25), dW(out * in, -0.5), db(out, 1.0);
  linear_backward<double>(dx.data(), dW.data(), db.data(), r.data(), x.data(), W.data(), n, in, out);
  for (auto& v : dx) v -= 0.25;
  for (auto& v : dW) v += 0.5;
  for (auto& v : db) v -= 1.0;
  EXPECT_LT(test::gradient_error(dx, test::numeric_gradient(loss, x)), 1e-6);
  EXPECT_LT(test::gradient_error(dW, test::numeric_gradient(loss, W)), 1e-6);
  EXPECT_LT(test::gradient_error(db, test::numeric_gradient(loss, b)), 1e-6);
}

// No bias: b null in the forward (y = x W^T exactly, no garbage from y's old contents) and db null
// in the backward; dx and dW still match finite differences.
TEST(Linear, NullBiasMatchesFiniteDifferences) {
  const int64_t n = 4, in = 3, out = 5;
  std::vector<double> x = random_values(n * in, 51), W = random_values(out * in, 52);
  const std::vector<double> r = random_values(n * out, 53);
  auto forward_nb = [&] {
    std::vector<double> y(n * out, 1e30);  // garbage: with b null, y is overwritten, not accumulated
    linear_forward<double>(y.data(), x.data(), W.data(), nullptr, n, in, out);
    return y;
  };
  auto loss = [&] {
    const auto y = forward_nb();
    double s = 0;
    for (int64_t i = 0; i < n * out; ++i) s += r[i] * y[i];
    return s;
  };
  // y = x W^T with the naive loop as oracle.
  std::vector<double> want(n * out);
  gemm_naive<double>(want.data(), out, x.data(), in, false, W.data(), in, true, n, out, in);
  EXPECT_TRUE(all_close(forward_nb(), want, 1e-14, 1e-14));
  std::vector<double> dx(n * in, 0.5), dW(out * in, -1.5);
  linear_backward<double>(dx.data(), dW.data(), nullptr, r.data(), x.data(), W.data(), n, in, out);
  for (auto& v : dx) v -= 0.5;
  for (auto& v : dW) v += 1.5;
  EXPECT_LT(test::gradient_error(dx, test::numeric_gradient(loss, x)), 1e-6);
  EXPECT_LT(test::gradient_error(dW, test::numeric_gradient(loss, W)), 1e-6);
}

// dx null or dW null: that gradient is skipped (a write through the null pointer would crash, or
// be reported by the sanitizer build), the requested ones equal the all-requested call bit for
// bit, and the inputs are left untouched.
TEST(Linear, NullDxOrNullDwComputesOnlyTheOthers) {
  const int64_t n = 3, in = 4, out = 2;
  std::vector<double> x = random_values(n * in, 61), W = random_values(out * in, 62), b = random_values(out, 63);
  const std::vector<double> dy = random_values(n * out, 64);
  auto loss = [&] {
    std::vector<double> y(n * out);
    linear_forward<double>(y.data(), x.data(), W.data(), b.data(), n, in, out);
    double s = 0;
    for (int64_t i = 0; i < n * out; ++i) s += dy[i] * y[i];
    return s;
  };
  // Reference: all three requested, each starting at 0.
  std::vector<double> dx_all(n * in, 0.0), dW_all(out * in, 0.0), db_all(out, 0.0);
  linear_backward<double>(dx_all.data(), dW_all.data(), db_all.data(), dy.data(), x.data(), W.data(), n, in, out);
  EXPECT_LT(test::gradient_error(dx_all, test::numeric_gradient(loss, x)), 1e-6);
  EXPECT_LT(test::gradient_error(dW_all, test::numeric_gradient(loss, W)), 1e-6);
  EXPECT_LT(test::gradient_error(db_all, test::numeric_gradient(loss, b)), 1e-6);
  {  // dx null: dW and db as before; the inputs are untouched.
    const auto x0 = x, W0 = W, dy0 = dy;
    std::vector<double> dW(out * in, 0.0), db(out, 0.0);
    linear_backward<double>(nullptr, dW.data(), db.data(), dy.data(), x.data(), W.data(), n, in, out);
    EXPECT_EQ(dW, dW_all);
    EXPECT_EQ(db, db_all);
    EXPECT_EQ(x, x0);
    EXPECT_EQ(W, W0);
    EXPECT_EQ(dy, dy0);
  }
  {  // dW null: dx and db as before.
    std::vector<double> dx(n * in, 0.0), db(out, 0.0);
    linear_backward<double>(dx.data(), nullptr, db.data(), dy.data(), x.data(), W.data(), n, in, out);
    EXPECT_EQ(dx, dx_all);
    EXPECT_EQ(db, db_all);
  }
  {  // Only db: dx and dW not requested.
    std::vector<double> db(out, 0.0);
    linear_backward<double>(nullptr, nullptr, db.data(), dy.data(), x.data(), W.data(), n, in, out);
    EXPECT_EQ(db, db_all);
  }
  {  // Nothing requested: a no-op, and no crash (the sanitizer build checks the null pointers).
    EXPECT_NO_THROW(linear_backward<double>(nullptr, nullptr, nullptr, dy.data(), x.data(), W.data(), n, in, out));
  }
}

}  // namespace
}  // namespace tformer
