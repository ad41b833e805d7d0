// gemm (OpenBLAS, or our sgemm for float products big enough) and the matmul() view wrapper: the
// op table against the naive triple loop on odd shapes, every transpose combination, alpha and
// beta, padded leading dimensions (a sentinel in C's padding must survive, NaN in A's and B's
// must not be read) and one and two threads; hand-computed transposes; view shape checks; the
// OpenBLAS build in use. Our AVX-512 sgemm itself: test_kernels_sgemm.cpp; the linear layer:
// test_kernels_linear.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/matmul.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::as;
using test::random_values;

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float: an accumulation over K terms of size <= 1, whose error grows like K eps: 1e-5 relative
// plus 1e-6 K absolute (Compared::scale holds K). Double through dgemm: near machine precision,
// 1e-12 (1e-13 on the small wrapper and padded cases).
constexpr test::Bound kFloatOverK{.rtol = 1e-5, .rtol_of_scale = 1e-6};
const test::OpBounds kGemm{"gemm", {{"C<float>", kFloatOverK}, {"C<double>", {.rtol = 1e-12, .atol = 1e-12}}}};
const test::OpBounds kGemmPadded{"gemm padded leading dimensions",
                                 {{"C<float>", kFloatOverK},
                                  {"C<double>", {.rtol = 1e-13, .atol = 1e-13}},
                                  {"C<double> vs compact copies", {.rtol = 1e-13, .atol = 1e-13}}}};
const test::OpBounds kMatmulViews{"matmul views",
                                  {{"C<float>", kFloatOverK}, {"C<double>", {.rtol = 1e-13, .atol = 1e-13}}}};

// A float comparison whose bound grows with K.
test::Compared float_over_k(const std::vector<float>& got, const std::vector<float>& want, int64_t K, test::Layout at,
                            std::string label) {
  test::Compared c = test::compared("C<float>", got, want, std::move(at), std::move(label));
  c.scale.assign(c.want.size(), static_cast<double>(K));
  return c;
}

std::string shape_str(int64_t M, int64_t N, int64_t K, bool ta, bool tb) {
  std::ostringstream os;
  os << "M=" << M << " N=" << N << " K=" << K << " ta=" << ta << " tb=" << tb;
  return os.str();
}

// gemm against gemm_naive: float with alpha 1.5 and beta 0 and 0.5 (C starts non-zero, so beta is
// exercised), double with alpha 1 and beta 0 over garbage.
test::OpCase gemm_vs_naive(int M, int N, int K, bool ta, bool tb) {
  return test::compare_case(kGemm, shape_str(M, N, K, ta, tb), [=] {
    const auto A = as<float>(random_values(int64_t(M) * K, 1));
    const auto B = as<float>(random_values(int64_t(K) * N, 2));
    const auto C0 = as<float>(random_values(int64_t(M) * N, 3));
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    const test::Layout at{{{"i", M}, {"j", N}}};
    std::vector<test::Compared> out;
    for (float beta : {0.0f, 0.5f}) {
      std::vector<float> fast = C0, slow = C0;
      gemm<float>(fast.data(), N, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 1.5f, beta);
      gemm_naive<float>(slow.data(), N, A.data(), lda, ta, B.data(), ldb, tb, M, N, K, 1.5f, beta);
      out.push_back(float_over_k(fast, slow, K, at, beta == 0 ? "beta=0" : "beta=0.5"));
    }
    const auto Ad = random_values(int64_t(M) * K, 1), Bd = random_values(int64_t(K) * N, 2);
    std::vector<double> fast(size_t(M) * N), slow(size_t(M) * N, 7.0);
    gemm<double>(fast.data(), N, Ad.data(), lda, ta, Bd.data(), ldb, tb, M, N, K);
    gemm_naive<double>(slow.data(), N, Ad.data(), lda, ta, Bd.data(), ldb, tb, M, N, K);
    out.push_back(test::compared("C<double>", fast, slow, at));
    return out;
  });
}

// The shapes 1x1x1, 3x5x7 and 129x65x33 with their own data, alpha 1, beta 0.
test::OpCase fresh_data_shape(int M, int N, int K, bool ta, bool tb) {
  return test::compare_case(kGemm, "fresh data " + shape_str(M, N, K, ta, tb), [=] {
    const auto A = as<float>(random_values(int64_t(M) * K, 11));
    const auto B = as<float>(random_values(int64_t(K) * N, 12));
    std::vector<float> fast(size_t(M) * N), slow(size_t(M) * N);
    gemm<float>(fast.data(), N, A.data(), ta ? M : K, ta, B.data(), tb ? K : N, tb, M, N, K);
    gemm_naive<float>(slow.data(), N, A.data(), ta ? M : K, ta, B.data(), tb ? K : N, tb, M, N, K);
    return std::vector<test::Compared>{float_over_k(fast, slow, K, {{{"i", M}, {"j", N}}}, "")};
  });
}

// OpenBLAS does not promise bit-identical results across thread counts (the K split may differ),
// so each thread count is compared with the naive loop, not with the other.
test::OpCase one_and_two_threads() {
  return test::compare_case(kGemm, "threads 1 and 2 M=200 N=150 K=300", [] {
    const int M = 200, N = 150, K = 300;
    const auto A = as<float>(random_values(int64_t(M) * K, 5));
    const auto B = as<float>(random_values(int64_t(K) * N, 6));
    std::vector<float> one(size_t(M) * N), two(size_t(M) * N), slow(size_t(M) * N);
    set_num_threads(1);
    gemm<float>(one.data(), N, A.data(), K, false, B.data(), N, false, M, N, K);
    set_num_threads(2);
    gemm<float>(two.data(), N, A.data(), K, false, B.data(), N, false, M, N, K);
    set_num_threads(0);
    gemm_naive<float>(slow.data(), N, A.data(), K, false, B.data(), N, false, M, N, K);
    const test::Layout at{{{"i", M}, {"j", N}}};
    return std::vector<test::Compared>{float_over_k(one, slow, K, at, "1 thread"),
                                       float_over_k(two, slow, K, at, "2 threads")};
  });
}

// matmul(), the shape-checked wrapper over 2-D views: its VALUES (not only its shape checks) for
// every transpose combination, against gemm_naive on the same storage, with alpha and beta.
// A is stored [M, K] or, transposed, [K, M]; B is stored [K, N] or [N, K].
test::OpCase matmul_views(bool ta, bool tb) {
  return test::compare_case(kMatmulViews, shape_str(5, 3, 7, ta, tb), [=] {
    const int64_t M = 5, N = 3, K = 7;
    Buffer<double> a(ta ? Shape{K, M} : Shape{M, K}, random_values(M * K, 31));
    Buffer<double> b(tb ? Shape{N, K} : Shape{K, N}, random_values(K * N, 32));
    const auto c0 = random_values(M * N, 33);
    Buffer<double> c(Shape{M, N}, c0);
    matmul<double>(c.view(), a.view(), b.view(), ta, tb, 1.5, 0.5);
    std::vector<double> want = c0;
    gemm_naive<double>(want.data(), N, a.data(), ta ? M : K, ta, b.data(), tb ? K : N, tb, M, N, K, 1.5, 0.5);
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
    const test::Layout at{{{"i", M}, {"j", N}}};
    return std::vector<test::Compared>{
        test::compared("C<double>", std::vector<double>(c.data(), c.data() + M * N), want, at),
        float_over_k(std::vector<float>(cf.data(), cf.data() + M * N), wf, K, at, "")};
  });
}

// Leading dimensions larger than the matrix widths (a sub-block of wider storage): lda > K (or
// > M transposed), ldb > N (or > K), ldc > N. gemm must read only the M x K / K x N blocks and
// write only the M x N block of C: C's padding columns hold a sentinel that must survive, and A's
// and B's padding columns hold NaN, which would poison any result that read them. The oracle:
// gemm_naive on the same padded storage, and, independently, on compact copies.
test::OpCase padded_leading_dimensions(bool ta, bool tb) {
  return test::compare_case(kGemmPadded, shape_str(6, 5, 7, ta, tb), [=] {
    const int64_t M = 6, N = 5, K = 7;
    const double kSentinel = 12345;
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
    std::vector<double> fast_block(M * N), slow_block(M * N);
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t c = 0; c < N; ++c) {
        fast_block[r * N + c] = fast[r * ldc + c];
        slow_block[r * N + c] = slow[r * ldc + c];
      }
      for (int64_t c = N; c < ldc; ++c) {
        EXPECT_EQ(fast[r * ldc + c], kSentinel) << "gemm wrote C padding (" << r << ", " << c << ")";
        EXPECT_EQ(slow[r * ldc + c], kSentinel) << "gemm_naive wrote C padding (" << r << ", " << c << ")";
      }
    }
    // Float, beta 0; the padding compared too: both must be the sentinel.
    std::vector<float> Af(A.begin(), A.end()), Bf(B.begin(), B.end()), Cf(C.begin(), C.end()), Sf = Cf;
    gemm<float>(Cf.data(), ldc, Af.data(), lda, ta, Bf.data(), ldb, tb, M, N, K);
    gemm_naive<float>(Sf.data(), ldc, Af.data(), lda, ta, Bf.data(), ldb, tb, M, N, K);
    for (int64_t r = 0; r < M; ++r)
      for (int64_t c = N; c < ldc; ++c) EXPECT_EQ(Cf[r * ldc + c], static_cast<float>(kSentinel));
    const test::Layout at{{{"i", M}, {"j", N}}};
    return std::vector<test::Compared>{test::compared("C<double>", fast_block, slow_block, at),
                                       test::compared("C<double> vs compact copies", fast_block, Cc, at),
                                       float_over_k(Cf, Sf, K, {{{"i", M}, {"j", ldc}}}, "")};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (int M : {1, 3, 129})
    for (int N : {1, 5, 65})
      for (int K : {1, 7, 33})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) cases.push_back(gemm_vs_naive(M, N, K, ta, tb));
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, std::tuple{3, 5, 7}, std::tuple{129, 65, 33}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) cases.push_back(fresh_data_shape(M, N, K, ta, tb));
  cases.push_back(one_and_two_threads());
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      cases.push_back(matmul_views(ta, tb));
      cases.push_back(padded_leading_dimensions(ta, tb));
    }
  return cases;
}

class GemmOps : public test::OpCaseTest {};
TEST_P(GemmOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, GemmOps, ::testing::ValuesIn(op_cases()), test::case_name);

// ---------------------------------------------------------------------------------------------

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

// Shapes that only agree transposed are rejected untransposed; mismatched views are rejected.
TEST(Gemm, ViewShapesAreChecked) {
  const int64_t M = 5, N = 3, K = 7;
  Buffer<double> a(Shape{K, M}), b(Shape{N, K}), c(Shape{M, N});
  EXPECT_ERROR(matmul<double>(c.view(), a.view(), b.view(), false, false), ErrorKind::Internal, "");
  EXPECT_NO_THROW(matmul<double>(c.view(), a.view(), b.view(), true, true));
  Buffer<float> af({2, 3}), bf({4, 5}), cf({2, 5});
  EXPECT_ERROR(matmul<float>(cf.view(), af.view(), bf.view(), false, false), ErrorKind::Internal, "");
  Buffer<float> b2({3, 5});
  EXPECT_NO_THROW(matmul<float>(cf.view(), af.view(), b2.view(), false, false));
}

TEST(Blas, IsTheOpenMPBuild) {
  // Our loops and OpenBLAS must share one OpenMP pool; the pthread build would oversubscribe.
  EXPECT_EQ(blas_parallel_model(), 2) << "OpenBLAS config: " << blas_config();
}

}  // namespace
}  // namespace tformer
