// Softmax and log-softmax: hand-computed rows, the masking policy (-inf = not allowed, max over
// allowed entries, all-masked rows); the op table: float against double, the backward against
// finite differences, PyTorch's outputs and gradients (fixtures/kernels.json); thread-count
// independence.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/threads.h"
#include "kernel_fixtures.h"
#include "kernels/softmax.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::as;
using test::random_values;

constexpr double kInf = std::numeric_limits<double>::infinity();

template <typename T>
bool all_finite(const std::vector<T>& v) {
  for (T x : v)
    if (!std::isfinite(static_cast<double>(x))) return false;
  return true;
}

TEST(Softmax, HandComputedRows) {
  // Row 0 = [1, 2, 3]: exp = [2.718281828459045, 7.38905609893065, 20.085536923187668],
  //   sum = 30.19287485057736, y = exp / sum = [0.09003057317038046, 0.24472847105479767, 0.6652409557748219].
  // Row 1 = [3, 1, 2] + 100: softmax is shift invariant, so the same numbers permuted, and exp(103)
  //   must never be formed directly (it is not, the max is subtracted first).
  const std::vector<double> x{1, 2, 3, 103, 101, 102};
  const std::vector<double> expected{0.09003057317038046, 0.24472847105479767, 0.6652409557748219,
                                     0.6652409557748219,  0.09003057317038046, 0.24472847105479767};
  std::vector<double> y(6);
  softmax_forward<double>(y.data(), x.data(), 2, 3);
  EXPECT_TRUE(all_close(y, expected, 1e-15, 1e-16));
  std::vector<float> yf(6);
  const auto xf = as<float>(x);
  softmax_forward<float>(yf.data(), xf.data(), 2, 3);
  EXPECT_TRUE(all_close(yf, expected, 1e-6, 1e-7));
}

TEST(Softmax, InPlaceAliasing) {
  std::vector<double> x{0.5, -1.25, 2.0, 0.0, 3.5}, y(5);
  softmax_forward<double>(y.data(), x.data(), 1, 5);
  softmax_forward<double>(x.data(), x.data(), 1, 5);  // y aliases x
  EXPECT_EQ(x, y);
  std::vector<double> z{0.5, -1.25, 2.0, 0.0, 3.5}, lz(5);
  log_softmax_forward<double>(lz.data(), z.data(), 1, 5);
  log_softmax_forward<double>(z.data(), z.data(), 1, 5);
  EXPECT_EQ(z, lz);
}

TEST(LogSoftmax, HandComputedRow) {
  // [1, 2, 3]: log-sum-exp = log(30.19287485057736) = 3.40760596444438,
  //   y = x - lse = [-2.40760596444438, -1.4076059644443801, -0.40760596444438013].
  // Second row [-1000, -1001, -999] is the same row shifted by -1002 (log-softmax is shift invariant
  // too): [-1.40760596444438, -2.40760596444438, -0.40760596444438]; exp(-1000) would underflow to 0
  // if the max were not subtracted first.
  const std::vector<double> x{1, 2, 3, -1000, -1001, -999};
  const std::vector<double> expected{-2.40760596444438,   -1.4076059644443801, -0.40760596444438013,
                                     -1.4076059644443801, -2.40760596444438,   -0.40760596444438013};
  std::vector<double> y(6);
  log_softmax_forward<double>(y.data(), x.data(), 2, 3);
  // Row 1 loses ~1000 * 2^-53 absolute to the shift: 1e-13 absolute is ample.
  EXPECT_TRUE(all_close(y, expected, 1e-15, 1e-13));
  // exp(log-softmax) equals softmax; the ~1e-13 absolute error of row 1's y becomes ~1e-13
  // relative in exp(y).
  std::vector<double> p(6);
  softmax_forward<double>(p.data(), x.data(), 2, 3);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(std::exp(y[i]), p[i], 2e-13);
}

TEST(Softmax, MaskedEntriesGetExactlyZero) {
  // Row [1, -inf, 2, -inf]: only 1 and 2 are allowed: exp(1 - 2) = 0.36787944117144233, exp(0) = 1,
  // sum = 1.3678794411714423, y = [0.2689414213699951, 0, 0.7310585786300049, 0].
  const std::vector<double> x{1, -kInf, 2, -kInf};
  std::vector<double> y(4, 99.0);
  softmax_forward<double>(y.data(), x.data(), 1, 4);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[3], 0.0);
  EXPECT_NEAR(y[0], 0.2689414213699951, 1e-16);
  EXPECT_NEAR(y[2], 0.7310585786300049, 1e-16);
  std::vector<double> ly(4);
  log_softmax_forward<double>(ly.data(), x.data(), 1, 4);
  EXPECT_EQ(ly[1], -kInf);
  EXPECT_EQ(ly[3], -kInf);
  EXPECT_NEAR(ly[0], std::log(0.2689414213699951), 1e-15);
}

TEST(Softmax, MaxIsOverAllowedEntriesOnly) {
  // [1000, -inf, 999]: exp(1000) overflows, so the kernel must subtract the allowed max 1000:
  // weights [1, 0, e^-1] / (1 + e^-1) = [0.7310585786300049, 0, 0.2689414213699951].
  for (bool log : {false, true}) {
    const std::vector<float> x{1000.0f, -std::numeric_limits<float>::infinity(), 999.0f};
    std::vector<float> y(3);
    if (log)
      log_softmax_forward<float>(y.data(), x.data(), 1, 3);
    else
      softmax_forward<float>(y.data(), x.data(), 1, 3);
    if (log) {
      EXPECT_NEAR(y[0], std::log(0.7310585786300049), 1e-6);
      EXPECT_EQ(y[1], -std::numeric_limits<float>::infinity());
      EXPECT_NEAR(y[2], std::log(0.2689414213699951), 1e-6);
    } else {
      EXPECT_NEAR(y[0], 0.7310585786300049, 1e-7);
      EXPECT_EQ(y[1], 0.0f);
      EXPECT_NEAR(y[2], 0.2689414213699951, 1e-7);
    }
  }
  // A causal row whose masked positions would have held scores far above the allowed ones: the
  // result must equal the softmax of the allowed entries alone ([-2, 0.5] -> exp(-2.5) / (1 + exp(-2.5))
  // = 0.07585818002124356 and 0.9241418199787566), i.e. the would-be values leave no trace.
  const std::vector<double> masked{-2.0, 0.5, -kInf, -kInf};  // had been [-2, 0.5, 500, 800] before masking
  std::vector<double> y(4);
  softmax_forward<double>(y.data(), masked.data(), 1, 4);
  const std::vector<double> expected{0.07585818002124356, 0.9241418199787566, 0, 0};
  EXPECT_TRUE(all_close(y, expected, 1e-15, 0));
}

TEST(Softmax, AllMaskedRowGivesZerosAndZeroGradient) {
  // Row 0 is fully masked, row 1 is normal: the policy affects row 0 only.
  const std::vector<double> x{-kInf, -kInf, -kInf, 0.25, -0.5, 1.0};
  std::vector<double> y(6, 7.0);
  softmax_forward<double>(y.data(), x.data(), 2, 3);
  EXPECT_EQ(y[0], 0.0);
  EXPECT_EQ(y[1], 0.0);
  EXPECT_EQ(y[2], 0.0);
  EXPECT_TRUE(all_finite(y));
  EXPECT_NEAR(y[3] + y[4] + y[5], 1.0, 1e-15);
  const std::vector<double> dy{0.3, -1.7, 2.2, 0.4, 0.1, -0.9};
  std::vector<double> dx(6, 0.0);
  softmax_backward<double>(dx.data(), dy.data(), y.data(), 2, 3);
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[1], 0.0);
  EXPECT_EQ(dx[2], 0.0);
  EXPECT_TRUE(all_finite(dx));
  // Same in float.
  const std::vector<float> xf(x.begin(), x.end());
  std::vector<float> yf(6, 7.0f);
  softmax_forward<float>(yf.data(), xf.data(), 2, 3);
  EXPECT_EQ(yf[0] + yf[1] + yf[2], 0.0f);
  EXPECT_TRUE(all_finite(yf));
}

TEST(LogSoftmax, AllMaskedRowPolicy) {
  // Policy: -inf everywhere, zero gradient, never NaN.
  const std::vector<double> x{-kInf, -kInf, 0.25, -0.5};
  std::vector<double> y(4);
  log_softmax_forward<double>(y.data(), x.data(), 2, 2);
  EXPECT_EQ(y[0], -kInf);
  EXPECT_EQ(y[1], -kInf);
  EXPECT_TRUE(std::isfinite(y[2]) && std::isfinite(y[3]));
  const std::vector<double> dy{1.5, -2.0, 0.3, 0.7};
  std::vector<double> dx(4, 0.0);
  log_softmax_backward<double>(dx.data(), dy.data(), y.data(), 2, 2);
  EXPECT_EQ(dx[0], 0.0);
  EXPECT_EQ(dx[1], 0.0);
  EXPECT_TRUE(all_finite(dx));
  // Row 1: dx_j = dy_j - p_j (dy_0 + dy_1); the two components sum to 0 since p sums to 1.
  EXPECT_NEAR(dx[2] + dx[3], 0.0, 1e-15);
}

// Scores with a causal-like mask: row r allows columns 0..r (rows beyond cols allow everything),
// plus a fully masked last row.
std::vector<double> masked_scores(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<double> x = random_values(rows * cols, seed, -2.0, 3.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (c > r || r == rows - 1) x[r * cols + c] = -kInf;
  return x;
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float against double: inputs rounded to float (relative 6e-8, |x| <= 3) move each output by a
// few 1e-7; outputs are rounded once more. 1e-5 relative + 1e-6 absolute leaves a wide margin yet
// catches any float-accumulation or formula slip; a -inf entry (log-softmax of a masked score)
// must be -inf in float too. Gradients of the double kernels against central differences: 1e-6.
const test::OpBounds kSoftmax{
    "softmax", {{"y", {.rtol = 1e-5, .atol = 1e-6}}, {"dx", {.rtol = 1e-5, .atol = 1e-6}}}, 1e-6};
const test::OpBounds kLogSoftmax{
    "log_softmax", {{"y", {.rtol = 1e-5, .atol = 1e-6}}, {"dx", {.rtol = 1e-5, .atol = 1e-6}}}, 1e-6};
// PyTorch's outputs and gradients (kernel_fixtures.h has the bounds' reasons).
const test::OpBounds kSoftmaxTorchDouble{"softmax<double> vs torch",
                                         {{"y", test::kTorchDouble}, {"dx", test::kTorchDouble}}};
const test::OpBounds kSoftmaxTorchFloat{"softmax<float> vs torch",
                                        {{"y", test::kTorchFloat}, {"dx", test::kTorchFloat}}};
const test::OpBounds kLogSoftmaxTorchDouble{"log_softmax<double> vs torch",
                                            {{"y", test::kTorchDouble}, {"dx", test::kTorchDouble}}};
const test::OpBounds kLogSoftmaxTorchFloat{"log_softmax<float> vs torch",
                                           {{"y", test::kTorchFloat}, {"dx", test::kTorchFloat}}};

struct Shape {
  int64_t rows, cols;
  bool masked;
  uint64_t seed;
  std::string str() const {
    return "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) + (masked ? " masked" : "");
  }
  std::vector<double> scores() const {
    return masked ? masked_scores(rows, cols, seed) : random_values(rows * cols, seed, -2.0, 3.0);
  }
  test::Layout layout() const { return {{{"r", rows}, {"c", cols}}}; }
};

// y = (log-)softmax(x) and dx = backward(dy) in T.
template <typename T>
std::vector<std::vector<T>> run(bool log, const std::vector<T>& x, const std::vector<T>& dy, int64_t rows,
                                int64_t cols) {
  std::vector<T> y(rows * cols), dx(rows * cols);
  if (log) {
    log_softmax_forward<T>(y.data(), x.data(), rows, cols);
    log_softmax_backward<T>(dx.data(), dy.data(), y.data(), rows, cols);
  } else {
    softmax_forward<T>(y.data(), x.data(), rows, cols);
    softmax_backward<T>(dx.data(), dy.data(), y.data(), rows, cols);
  }
  return {y, dx};
}

// The float kernels against the double kernels on the same inputs.
test::OpCase float_vs_double(bool log, const Shape& sh) {
  return test::compare_case(log ? kLogSoftmax : kSoftmax, "float vs double " + sh.str(), [log, sh] {
    const std::vector<double> x = sh.scores();
    const std::vector<double> dy = random_values(sh.rows * sh.cols, sh.seed + 1, -1.0, 1.0);
    const auto d = run<double>(log, x, dy, sh.rows, sh.cols);
    const auto f = run<float>(log, as<float>(x), as<float>(dy), sh.rows, sh.cols);
    return std::vector<test::Compared>{test::compared("y", f[0], d[0], sh.layout()),
                                       test::compared("dx", f[1], d[1], sh.layout())};
  });
}

// loss = sum(r * y) over the allowed outputs (a masked log-softmax output is the constant -inf);
// dy = r everywhere, masked slots included: their dy must be ignored. The gradient buffer starts
// non-zero: the backward accumulates.
test::OpCase finite_differences(bool log, const Shape& sh) {
  return test::gradient_case(log ? kLogSoftmax : kSoftmax, "finite differences " + sh.str(), [log, sh] {
    const int64_t n = sh.rows * sh.cols;
    const std::vector<double> r = random_values(n, sh.seed + 1, -1.0, 2.0);
    auto loss = [log, sh, n, r](const std::vector<std::vector<double>>& in) {
      std::vector<double> y(n);
      if (log)
        log_softmax_forward<double>(y.data(), in[0].data(), sh.rows, sh.cols);
      else
        softmax_forward<double>(y.data(), in[0].data(), sh.rows, sh.cols);
      double s = 0;
      for (int64_t i = 0; i < n; ++i)
        if (y[i] != -kInf) s += r[i] * y[i];
      return s;
    };
    const std::vector<double> x = sh.scores();
    std::vector<double> y(n);
    const double start = log ? -1.25 : 0.375;
    std::vector<double> dx(n, start);
    if (log) {
      log_softmax_forward<double>(y.data(), x.data(), sh.rows, sh.cols);
      log_softmax_backward<double>(dx.data(), r.data(), y.data(), sh.rows, sh.cols);
    } else {
      softmax_forward<double>(y.data(), x.data(), sh.rows, sh.cols);
      softmax_backward<double>(dx.data(), r.data(), y.data(), sh.rows, sh.cols);
    }
    for (auto& v : dx) v -= start;
    EXPECT_TRUE(all_finite(dx));
    // Masked entries: the central difference of a -inf coordinate is 0, as is ours.
    return test::GradientCheck{{{"x", x, dx, sh.layout()}}, loss};
  });
}

// PyTorch's outputs and gradients (fixtures/kernels.json) for the fixture's inputs, in T.
template <typename T>
test::OpCase torch_case(bool log) {
  const test::OpBounds& op = log ? (std::is_same_v<T, double> ? kLogSoftmaxTorchDouble : kLogSoftmaxTorchFloat)
                                 : (std::is_same_v<T, double> ? kSoftmaxTorchDouble : kSoftmaxTorchFloat);
  return test::compare_case(op, "fixture", [log] {
    const auto& c = test::kernel_fixture(log ? "log_softmax" : "softmax");
    const int64_t rows = c.at("rows"), cols = c.at("cols");
    const auto masked = c.at("masked").get<std::vector<int>>();
    std::vector<T> x = as<T>(test::fixture_values(c, "x"));
    for (size_t i = 0; i < x.size(); ++i)
      if (masked[i]) x[i] = -std::numeric_limits<T>::infinity();
    const auto r = as<T>(test::fixture_values(c, "r"));  // r is non-zero at masked slots too: ignored
    auto out = run<T>(log, x, r, rows, cols);
    std::vector<T>& y = out[0];
    for (size_t i = 0; i < y.size(); ++i) {
      if (log && masked[i]) {
        EXPECT_EQ(y[i], -std::numeric_limits<T>::infinity()) << i;
        y[i] = 0;  // the fixture writes 0 there (JSON has no infinity)
      }
      if (masked[i]) {
        EXPECT_EQ(out[1][i], T(0)) << i;
      }
    }
    const test::Layout at{{{"r", rows}, {"c", cols}}};
    return std::vector<test::Compared>{test::compared("y", y, test::fixture_values(c, "y"), at),
                                       test::compared("dx", out[1], test::fixture_values(c, "dx"), at)};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (bool log : {false, true}) {
    for (const Shape& sh : {Shape{7, 33, true, 51}, Shape{1, 1, false, 53}, Shape{1, 7, false, 54},
                            Shape{4, 1, true, 55}, Shape{3, 130, false, 56}, Shape{16, 17, true, 57}})
      cases.push_back(float_vs_double(log, sh));
    const uint64_t seed = log ? 41 : 31;
    for (const Shape& sh : {Shape{5, 4, false, seed}, Shape{5, 4, true, seed}, Shape{1, 1, false, seed + 10},
                            Shape{6, 9, true, seed + 20}})
      cases.push_back(finite_differences(log, sh));
    cases.push_back(torch_case<double>(log));
    cases.push_back(torch_case<float>(log));
  }
  return cases;
}

class SoftmaxOps : public test::OpCaseTest {};
TEST_P(SoftmaxOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, SoftmaxOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(Softmax, SameResultWithOneAndTwoThreads) {
  // 300 x 131 = 39300 elements: above the kernels' 2^15-element parallel threshold.
  const int64_t rows = 300, cols = 131;
  const auto x = as<float>(masked_scores(rows, cols, 61));
  const auto dy = as<float>(random_values(rows * cols, 62));
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> y(rows * cols), ly(rows * cols), dx(rows * cols, 0.5f), ldx(rows * cols, 0.5f);
    softmax_forward<float>(y.data(), x.data(), rows, cols);
    softmax_backward<float>(dx.data(), dy.data(), y.data(), rows, cols);
    log_softmax_forward<float>(ly.data(), x.data(), rows, cols);
    log_softmax_backward<float>(ldx.data(), dy.data(), ly.data(), rows, cols);
    return std::vector<std::vector<float>>{y, ly, dx, ldx};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(0);
  for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], two[k]) << "output " << k;
}

}  // namespace
}  // namespace tformer
