// BLAS gemm against the naive triple loop on odd shapes and every transpose combination, and the
// linear layer's backward against finite differences.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "core/threads.h"
#include "kernels/matmul.h"
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

TEST(Gemm, ViewShapesAreChecked) {
  Buffer<float> a({2, 3}), b({4, 5}), c({2, 5});
  EXPECT_THROW(matmul<float>(c.view(), a.view(), b.view(), false, false), Error);
  Buffer<float> b2({3, 5});
  EXPECT_NO_THROW(matmul<float>(c.view(), a.view(), b2.view(), false, false));
}

TEST(Gemm, SameResultWithOneAndTwoThreads) {
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
}

TEST(Blas, IsTheOpenMPBuild) {
  // Our loops and OpenBLAS must share one OpenMP pool; the pthread build would oversubscribe.
  EXPECT_EQ(blas_parallel_model(), 2) << "OpenBLAS config: " << blas_config();
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

}  // namespace
}  // namespace tformer
