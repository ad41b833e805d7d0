// Our AVX-512 sgemm (kernels/sgemm_avx512.h) against the naive loop through the op table: edges in
// every dimension, several blocks of K, M and N, every transpose combination, padded and tight
// leading dimensions, alpha and beta (0 over NaN in C); gemm<float> on shapes big enough for the
// dispatch to pick it; empty products; bit-identical results for 1 and 2 threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/threads.h"
#include "kernels/matmul.h"
#include "kernels/sgemm_avx512.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::random_values;

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

// ---------------------------------------------------------------------------------------------
// The op table.
//
// |got - naive| <= 2 eps (K + 2) (|alpha| sum_p |a_ip b_pj| + |beta c0_ij|) + eps |naive|: the bound
// of a float32 accumulation of K products in any order plus the naive loop's final rounding
// (Compared::scale holds (K + 2) (|alpha| sum_p |a_ip b_pj| + |beta c0_ij|) per element).
constexpr double kEps = std::numeric_limits<float>::epsilon();
constexpr test::Bound kAccumulation{.rtol = kEps, .rtol_of_scale = 2 * kEps};
const test::OpBounds kSgemm{"sgemm_avx512", {{"C", kAccumulation}}};
const test::OpBounds kGemmLarge{"gemm<float> large shapes", {{"C", kAccumulation}}};

// got (computed from C0 with alpha, beta) beside gemm_naive's result, over the M x N block, with
// the error model's scale. C's padding must still hold the sentinel.
test::Compared naive_compared(const PaddedGemm& g, const std::vector<float>& C0, const std::vector<float>& got,
                              float alpha, float beta, std::string label) {
  std::vector<float> want = C0;
  gemm_naive<float>(want.data(), g.ldc, g.A.data(), g.lda, g.ta, g.B.data(), g.ldb, g.tb, g.M, g.N, g.K, alpha, beta);
  test::Compared c;
  c.name = "C";
  c.label = std::move(label);
  c.layout = {{{"i", g.M}, {"j", g.N}}};
  for (int64_t i = 0; i < g.M; ++i) {
    for (int64_t j = 0; j < g.N; ++j) {
      double mag = 0;
      for (int64_t p = 0; p < g.K; ++p) mag += std::abs(static_cast<double>(g.a(i, p)) * g.b(p, j));
      const double c0 = beta == 0.0f ? 0.0 : std::abs(static_cast<double>(beta) * C0[i * g.ldc + j]);
      c.got.push_back(got[i * g.ldc + j]);
      c.want.push_back(want[i * g.ldc + j]);
      c.scale.push_back(static_cast<double>(g.K + 2) * (std::abs(alpha) * mag + c0));
    }
    for (int64_t j = g.N; j < g.ldc; ++j)
      EXPECT_EQ(got[i * g.ldc + j], PaddedGemm::kSentinel) << "wrote C's padding at (" << i << ", " << j << ")";
  }
  return c;
}

std::string shape_str(int64_t M, int64_t N, int64_t K) {
  std::ostringstream os;
  os << "M=" << M << " N=" << N << " K=" << K;
  return os.str();
}

std::string flags(bool ta, bool tb, float beta) {
  std::ostringstream os;
  os << "ta=" << ta << " tb=" << tb << " beta=" << beta;
  return os.str();
}

// Every transpose combination and beta 0 over NaN (it overwrites: NaN in C must not leak into the
// result), 1 and -0.5, alpha 1.5, padded leading dimensions; `seed` advances by 3 per problem.
test::OpCase every_transpose_and_beta(int64_t M, int64_t N, int64_t K, uint64_t seed) {
  return test::compare_case(kSgemm, "padded " + shape_str(M, N, K), [=] {
    std::vector<test::Compared> out;
    uint64_t s = seed;
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (float beta : {0.0f, 1.0f, -0.5f}) {
          PaddedGemm g(M, N, K, ta, tb, 3, s += 3);
          std::vector<float> C0 = g.C;
          if (beta == 0.0f)
            for (int64_t i = 0; i < M; ++i)
              for (int64_t j = 0; j < N; ++j) C0[i * g.ldc + j] = std::numeric_limits<float>::quiet_NaN();
          std::vector<float> got = C0;
          sgemm_avx512(got.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, M, N, K, 1.5f, beta);
          out.push_back(naive_compared(g, C0, got, 1.5f, beta, flags(ta, tb, beta)));
        }
    return out;
  });
}

// Unpadded storage (ld = width exactly) and alpha 1, beta 0: the linear layer's three products.
test::OpCase tight_leading_dimensions() {
  return test::compare_case(kSgemm, "tight " + shape_str(45, 77, 290), [] {
    std::vector<test::Compared> out;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        PaddedGemm g(45, 77, 290, ta, tb, 0, 7);
        const std::vector<float> C0 = g.C;
        std::vector<float> got = C0;
        sgemm_avx512(got.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, g.M, g.N, g.K, 1.0f, 0.0f);
        out.push_back(naive_compared(g, C0, got, 1.0f, 0.0f, flags(ta, tb, 0.0f)));
      }
    return out;
  });
}

// gemm<float> on shapes large enough for the dispatch to pick our kernel (unless TFORMER_SGEMM
// says otherwise): still the naive loop's result, every transpose combination.
test::OpCase large_gemm() {
  return test::compare_case(kGemmLarge, shape_str(260, 300, 270), [] {
    std::vector<test::Compared> out;
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const PaddedGemm g(260, 300, 270, ta, tb, 2, 300);
        std::vector<float> got = g.C;
        gemm<float>(got.data(), g.ldc, g.A.data(), g.lda, ta, g.B.data(), g.ldb, tb, g.M, g.N, g.K, 0.5f, 1.0f);
        out.push_back(naive_compared(g, g.C, got, 0.5f, 1.0f, flags(ta, tb, 1.0f)));
      }
    return out;
  });
}

// Shapes with edges in every dimension (M not a multiple of the 14 micro-tile rows, N not of its
// 32 columns, K odd), including several K blocks (K = 1700 > 768), several row blocks (M = 700:
// two thread slabs of 350 rows > 168) and several column blocks (N = 4500 > 2048, one thread:
// under 1 MFLOP).
std::vector<test::OpCase> sgemm_cases() {
  std::vector<test::OpCase> cases;
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> shapes{{1, 1, 1},      {7, 5, 3},       {17, 33, 65},
                                                                  {129, 257, 31}, {300, 200, 500}, {700, 90, 40},
                                                                  {3, 4500, 20},  {40, 50, 1700}};
  uint64_t seed = 100;
  for (const auto& [M, N, K] : shapes) {
    cases.push_back(every_transpose_and_beta(M, N, K, seed));
    seed += 3 * 12;
  }
  cases.push_back(tight_leading_dimensions());
  return cases;
}

#define SKIP_WITHOUT_AVX512() \
  if (!sgemm_avx512_compiled()) GTEST_SKIP() << "built without AVX-512: sgemm_avx512 is cblas_sgemm"

class SgemmOps : public test::OpCaseTest {};
TEST_P(SgemmOps, WithinBounds) {
  SKIP_WITHOUT_AVX512();
  test::check_case(GetParam());
}
INSTANTIATE_TEST_SUITE_P(Table, SgemmOps, ::testing::ValuesIn(sgemm_cases()), test::case_name);

class GemmLargeOps : public test::OpCaseTest {};
TEST_P(GemmLargeOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, GemmLargeOps, ::testing::Values(large_gemm()), test::case_name);

// ---------------------------------------------------------------------------------------------

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
          EXPECT_TRUE(test::within(naive_compared(g, g.C, two, 1.0f, beta, ""), kAccumulation));
        }
  set_num_threads(0);
}

}  // namespace
}  // namespace tformer
