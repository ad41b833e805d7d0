// LayerNorm and RMSNorm: hand-computed rows; the shift/scale properties of LayerNorm with the
// epsilon effect predicted; the op table: float against double, the backward against finite
// differences (x, gain, bias; and with a null gain, treated as all ones), PyTorch's outputs and
// gradients (fixtures/kernels.json); thread-count independence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/threads.h"
#include "kernel_fixtures.h"
#include "kernels/norm.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::as;
using test::random_values;

TEST(LayerNorm, HandComputedRows) {
  // eps = 2/9 makes the arithmetic exact by hand.
  // Row 0 = [1, 2, 4]: mean 7/3; deviations [-4/3, -1/3, 5/3]; squares [16/9, 1/9, 25/9], sum 42/9,
  //   var = 14/9; var + eps = 16/9, so rstd = 3/4 and xhat = [-1, -1/4, 5/4].
  //   gain [0.5, 1, 2], bias [0.1, -0.2, 0.3]: y = [-0.5 + 0.1, -0.25 - 0.2, 2.5 + 0.3] = [-0.4, -0.45, 2.8].
  // Row 1 = [3, 3, 3]: var 0, rstd = 1/sqrt(2/9) = 3/sqrt(2) = 2.1213203435596424, xhat = 0, y = bias.
  const std::vector<double> x{1, 2, 4, 3, 3, 3}, gain{0.5, 1, 2}, bias{0.1, -0.2, 0.3};
  const double eps = 2.0 / 9.0;
  const std::vector<double> expected{-0.4, -0.45, 2.8, 0.1, -0.2, 0.3};
  std::vector<double> y(6), mean(2), rstd(2);
  layernorm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), gain.data(), bias.data(), 2, 3, eps);
  EXPECT_TRUE(all_close(y, expected, 1e-15, 1e-15));
  EXPECT_NEAR(mean[0], 7.0 / 3.0, 1e-15);
  EXPECT_EQ(mean[1], 3.0);
  EXPECT_NEAR(rstd[0], 0.75, 1e-15);
  EXPECT_NEAR(rstd[1], 2.1213203435596424, 1e-15);
  // Float path: same numbers to float precision.
  const auto xf = as<float>(x), gf = as<float>(gain), bf = as<float>(bias);
  std::vector<float> yf(6), mf(2), rf(2);
  layernorm_forward<float>(yf.data(), mf.data(), rf.data(), xf.data(), gf.data(), bf.data(), 2, 3, 2.0f / 9.0f);
  EXPECT_TRUE(all_close(yf, expected, 1e-6, 1e-7));
  // Null bias means no bias: y - bias.
  std::vector<double> y0(6);
  layernorm_forward<double>(y0.data(), mean.data(), rstd.data(), x.data(), gain.data(), nullptr, 2, 3, eps);
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(y0[i], expected[i] - bias[i % 3], 1e-15);
}

TEST(RmsNorm, HandComputedRows) {
  // eps = 1.
  // Row 0 = [1, -2, 2]: mean square (1 + 4 + 4)/3 = 3; + eps = 4; rstd = 1/2; x * rstd = [0.5, -1, 1];
  //   gain [0.5, 1, 2] -> y = [0.25, -1, 2].
  // Row 1 = [2, 0, -1]: mean square 5/3; + 1 = 8/3; rstd = sqrt(3/8) = 0.6123724356957945;
  //   y = [2 * 0.5, 0, -1 * 2] * 0.6123724356957945 = [0.6123724356957945, 0, -1.224744871391589].
  // Row 2 = [0, 0, 0]: rstd = 1, y = 0 (eps keeps it finite).
  const std::vector<double> x{1, -2, 2, 2, 0, -1, 0, 0, 0}, gain{0.5, 1, 2};
  const std::vector<double> expected{0.25, -1, 2, 0.6123724356957945, 0, -1.224744871391589, 0, 0, 0};
  std::vector<double> y(9), rstd(3);
  rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), gain.data(), 3, 3, 1.0);
  EXPECT_TRUE(all_close(y, expected, 1e-15, 1e-16));
  EXPECT_EQ(rstd[0], 0.5);
  EXPECT_NEAR(rstd[1], 0.6123724356957945, 1e-16);
  EXPECT_EQ(rstd[2], 1.0);
  const auto xf = as<float>(x), gf = as<float>(gain);
  std::vector<float> yf(9), rf(3);
  rmsnorm_forward<float>(yf.data(), rf.data(), xf.data(), gf.data(), 3, 3, 1.0f);
  EXPECT_TRUE(all_close(yf, expected, 1e-6, 1e-7));
}

// Rows of different character: ordinary, small variance (comparable to eps), large offset.
std::vector<double> norm_inputs(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<double> x = random_values(rows * cols, seed, -1.5, 2.5);
  for (int64_t c = 0; c < cols; ++c) {
    if (rows > 1) x[1 * cols + c] = 0.7 + 0.004 * x[1 * cols + c];  // var ~ 5e-6 (eps 1e-5)
    if (rows > 2) x[2 * cols + c] += 40.0;
  }
  return x;
}

template <typename T>
void check_shift_invariance() {
  const int64_t rows = 2, cols = 16;
  const auto x = as<T>(random_values(rows * cols, 91, -1.0, 1.0));
  const auto gain = as<T>(random_values(cols, 92, 0.5, 1.5)), bias = as<T>(random_values(cols, 93, -0.5, 0.5));
  std::vector<T> y(rows * cols), mean(rows), rstd(rows);
  layernorm_forward<T>(y.data(), mean.data(), rstd.data(), x.data(), gain.data(), bias.data(), rows, cols, T(1e-5));
  const double u = std::numeric_limits<T>::epsilon() / 2;  // unit roundoff
  const double rstd_max = std::max<double>(rstd[0], rstd[1]);
  for (double c : {100.0, -37.5, 3.25}) {
    std::vector<T> xc(x), yc(rows * cols), mc(rows), rc(rows);
    for (auto& v : xc) v = static_cast<T>(v + static_cast<T>(c));
    layernorm_forward<T>(yc.data(), mc.data(), rc.data(), xc.data(), gain.data(), bias.data(), rows, cols, T(1e-5));
    // Exact in real arithmetic. In T, forming x + c rounds each element by up to ulp(x + c)/2 <= 2|c|u,
    // which enters x - mean (twice: the element and the mean) and is scaled by rstd * gain (< 1.5);
    // the output itself rounds by u |y| (|y| < 4). Tolerance: 4 |c| u rstd 1.5 + 8 u.
    const double tol = 4 * std::abs(c) * u * rstd_max * 1.5 + 8 * u;
    EXPECT_TRUE(all_close(yc, y, 0, tol)) << "c = " << c;
  }
}

TEST(LayerNorm, AddingAConstantLeavesOutputUnchanged) {
  check_shift_invariance<double>();  // tol ~ 1e-13 for c = 100
  check_shift_invariance<float>();   // tol ~ 6e-5 for c = 100: the float rounding of x + c itself
}

TEST(LayerNorm, ScalingDeviationIsPredictedByEpsilon) {
  // No affine (gain 1, bias 0). y(x)_j = (x_j - m) / sqrt(var + eps); scaling by c > 0 gives
  //   y(cx)_j = c (x_j - m) / sqrt(c^2 var + eps) = (x_j - m) / sqrt(var + eps / c^2),
  // so y(cx)_j / y(x)_j = sqrt(var + eps) / sqrt(var + eps / c^2) for every j: not 1 unless eps = 0.
  const int64_t rows = 2, cols = 9;
  const double eps = 1e-5;
  std::vector<double> x = random_values(rows * cols, 101, -1.0, 1.0);
  for (int64_t j = 0; j < cols; ++j) x[cols + j] *= 0.005;  // row 1: var ~ 8e-6, comparable to eps
  const std::vector<double> ones(cols, 1.0), zeros(cols, 0.0);
  std::vector<double> y(rows * cols), m(rows), s(rows);
  layernorm_forward<double>(y.data(), m.data(), s.data(), x.data(), ones.data(), zeros.data(), rows, cols, eps);
  for (double c : {10.0, 0.5, 3.0}) {
    std::vector<double> xc(x), yc(rows * cols);
    for (auto& v : xc) v *= c;
    layernorm_forward<double>(yc.data(), m.data(), s.data(), xc.data(), ones.data(), zeros.data(), rows, cols, eps);
    for (int64_t r = 0; r < rows; ++r) {
      // The test's own statistics (independent of the kernel's).
      double mean = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mean += x[r * cols + j];
      mean /= cols;
      for (int64_t j = 0; j < cols; ++j) var += (x[r * cols + j] - mean) * (x[r * cols + j] - mean);
      var /= cols;
      const double predicted = std::sqrt(var + eps) / std::sqrt(var + eps / (c * c));
      for (int64_t j = 0; j < cols; ++j) {
        const double dev = x[r * cols + j] - mean;
        if (std::abs(dev) < 0.1 * std::sqrt(var)) continue;  // ratio of two near-zero numbers: skip
        const double measured = yc[r * cols + j] / y[r * cols + j];
        // Each y has relative error ~ a few 1e-16 (more where x_j - mean cancels, bounded by the skip
        // above at ~ 1e-15), so 1e-12 on the ratio is tight enough to tell the deviation apart.
        EXPECT_NEAR(measured, predicted, 1e-12) << "row " << r << " j " << j << " c " << c;
      }
      if (r == 0) {
        // var ~ 0.3 >> eps: almost invariant, deviation ~ eps (1 - 1/c^2) / (2 var) ~ 1e-5, yet
        // far above the 1e-12 measurement tolerance.
        EXPECT_LT(std::abs(predicted - 1), 1e-4) << "c " << c;
        EXPECT_GT(std::abs(predicted - 1), 1e-7) << "c " << c;
      } else {
        // var comparable to eps: the "invariance" fails visibly.
        EXPECT_GT(std::abs(predicted - 1), 0.05) << "c " << c;
      }
      EXPECT_EQ(predicted > 1, c > 1);  // c > 1 shrinks eps / c^2, so |y| grows
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float against double. The double path gets the SAME float-rounded inputs (widened), so only the
// kernels' arithmetic differs (row 1's tiny variance would otherwise amplify the float rounding of
// x, relative 6e-8 of 0.7, divided by std ~ 3e-3, times rstd). Float rounds each output once
// (|y| <= ~3), and the saved mean/rstd are rounded to float before the backward (relative 6e-8;
// the mean of row 2 ~ 40 loses ~2e-6 absolute, times rstd ~ 1). dx of row 1 is ~rstd ~ 300 in
// magnitude. 1e-5 relative + 1e-5 absolute covers these (1e-6 absolute for RMSNorm's outputs, which
// subtract no mean); the saved statistics, 1e-6 relative.
// Gradients of the double kernels against central differences (x, gain, bias): 1e-6.
const test::OpBounds kLayerNorm{"layernorm",
                                {{"y", {.rtol = 1e-5, .atol = 1e-5}},
                                 {"mean", {.rtol = 1e-6}},
                                 {"rstd", {.rtol = 1e-6}},
                                 {"dx", {.rtol = 1e-5, .atol = 1e-5}},
                                 {"dgain", {.rtol = 1e-5, .atol = 1e-5}},
                                 {"dbias", {.rtol = 1e-5, .atol = 1e-5}}},
                                1e-6};
const test::OpBounds kRmsNorm{"rmsnorm",
                              {{"y", {.rtol = 1e-5, .atol = 1e-6}},
                               {"rstd", {.rtol = 1e-6}},
                               {"dx", {.rtol = 1e-5, .atol = 1e-6}},
                               {"dgain", {.rtol = 1e-5, .atol = 1e-6}}},
                              1e-6};
// PyTorch's outputs and gradients (kernel_fixtures.h has the bounds' reasons). In float, the
// fixture's row 2 has std ~1.2e-3 around 1: the float rounding of x (6e-8 absolute) is up to 5e-5
// of its deviations from the mean, which y, rstd, dx and dweight inherit: rtol 1e-4 there.
constexpr test::Bound kSmallVarianceFloat{.rtol = 1e-4, .atol_of_max = 1e-5};
const test::OpBounds kLayerNormTorchDouble{"layernorm<double> vs torch",
                                           {{"y", test::kTorchDouble},
                                            {"mean", test::torch_rtol<double>()},
                                            {"rstd", test::torch_rtol<double>()},
                                            {"dx", test::kTorchDouble},
                                            {"dweight", test::kTorchDouble},
                                            {"dbias", test::kTorchDouble}}};
const test::OpBounds kLayerNormTorchFloat{"layernorm<float> vs torch",
                                          {{"y", kSmallVarianceFloat},
                                           {"mean", test::torch_rtol<float>()},
                                           {"rstd", {.rtol = kSmallVarianceFloat.rtol}},
                                           {"dx", kSmallVarianceFloat},
                                           {"dweight", kSmallVarianceFloat},
                                           {"dbias", test::kTorchFloat}}};
const test::OpBounds kRmsNormTorchDouble{"rmsnorm<double> vs torch",
                                         {{"y", test::kTorchDouble},
                                          {"rstd", test::torch_rtol<double>()},
                                          {"dx", test::kTorchDouble},
                                          {"dweight", test::kTorchDouble}}};
const test::OpBounds kRmsNormTorchFloat{"rmsnorm<float> vs torch",
                                        {{"y", test::kTorchFloat},
                                         {"rstd", test::torch_rtol<float>()},
                                         {"dx", test::kTorchFloat},
                                         {"dweight", test::kTorchFloat}}};

struct Shape {
  int64_t rows, cols;
  uint64_t seed;
  std::string str() const { return "rows=" + std::to_string(rows) + " cols=" + std::to_string(cols); }
  test::Layout rows_cols() const { return {{{"r", rows}, {"c", cols}}}; }
  test::Layout row() const { return {{{"r", rows}}}; }
  test::Layout col() const { return {{{"c", cols}}}; }
};

// RMSNorm's inputs: norm_inputs with row 1 moved to mean square ~5e-6, where eps matters.
std::vector<double> rms_inputs(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<double> x = norm_inputs(rows, cols, seed);
  if (rows > 1)
    for (int64_t c = 0; c < cols; ++c) x[1 * cols + c] -= 0.7;
  return x;
}

double weighted_sum(const std::vector<double>& r, const std::vector<double>& y) {
  double acc = 0;
  for (size_t i = 0; i < y.size(); ++i) acc += r[i] * y[i];
  return acc;
}

// LayerNorm in T: y, mean, rstd and the backward of dy (dx, dgain, dbias; buffers starting at 0).
template <typename T>
std::vector<std::vector<T>> layernorm_outputs(const Shape& sh, const std::vector<T>& x, const std::vector<T>& g,
                                              const std::vector<T>& b, const std::vector<T>& dy) {
  const int64_t rows = sh.rows, cols = sh.cols;
  std::vector<T> y(rows * cols), m(rows), s(rows), dx(rows * cols), dg(cols), db(cols);
  layernorm_forward<T>(y.data(), m.data(), s.data(), x.data(), g.data(), b.data(), rows, cols, T(1e-5));
  layernorm_backward<T>(dx.data(), dg.data(), db.data(), dy.data(), x.data(), m.data(), s.data(), g.data(), rows, cols);
  return {y, m, s, dx, dg, db};
}

test::OpCase layernorm_float_vs_double(const Shape& sh) {
  return test::compare_case(kLayerNorm, "float vs double " + sh.str(), [sh] {
    const int64_t rows = sh.rows, cols = sh.cols;
    const auto xf = as<float>(norm_inputs(rows, cols, sh.seed));
    const auto gf = as<float>(random_values(cols, sh.seed + 1, 0.5, 1.5));
    const auto bf = as<float>(random_values(cols, sh.seed + 2, -0.5, 0.5));
    const auto dyf = as<float>(random_values(rows * cols, sh.seed + 3));
    const auto d = layernorm_outputs<double>(sh, as<double>(xf), as<double>(gf), as<double>(bf), as<double>(dyf));
    const auto f = layernorm_outputs<float>(sh, xf, gf, bf, dyf);
    return std::vector<test::Compared>{
        test::compared("y", f[0], d[0], sh.rows_cols()), test::compared("mean", f[1], d[1], sh.row()),
        test::compared("rstd", f[2], d[2], sh.row()),    test::compared("dx", f[3], d[3], sh.rows_cols()),
        test::compared("dgain", f[4], d[4], sh.col()),   test::compared("dbias", f[5], d[5], sh.col())};
  });
}

test::OpCase rmsnorm_float_vs_double(const Shape& sh) {
  return test::compare_case(kRmsNorm, "float vs double " + sh.str(), [sh] {
    const int64_t rows = sh.rows, cols = sh.cols;
    const auto xf = as<float>(norm_inputs(rows, cols, sh.seed));
    const auto gf = as<float>(random_values(cols, sh.seed + 1, 0.5, 1.5));
    const auto dyf = as<float>(random_values(rows * cols, sh.seed + 3));
    auto run = [&](auto zero, const auto& x, const auto& g, const auto& dy) {
      using T = decltype(zero);
      std::vector<T> y(rows * cols), s(rows), dx(rows * cols), dg(cols);
      rmsnorm_forward<T>(y.data(), s.data(), x.data(), g.data(), rows, cols, T(1e-5));
      rmsnorm_backward<T>(dx.data(), dg.data(), dy.data(), x.data(), s.data(), g.data(), rows, cols);
      return std::vector<std::vector<T>>{y, s, dx, dg};
    };
    const auto d = run(0.0, as<double>(xf), as<double>(gf), as<double>(dyf));
    const auto f = run(0.0f, xf, gf, dyf);
    return std::vector<test::Compared>{
        test::compared("y", f[0], d[0], sh.rows_cols()), test::compared("rstd", f[1], d[1], sh.row()),
        test::compared("dx", f[2], d[2], sh.rows_cols()), test::compared("dgain", f[3], d[3], sh.col())};
  });
}

// loss = sum(r * y) for x, gain and bias; the gradient buffers start non-zero (the backward
// accumulates). Null gradient pointers are skipped: dx alone is the same.
test::OpCase layernorm_finite_differences(const Shape& sh) {
  return test::gradient_case(kLayerNorm, "finite differences " + sh.str(), [sh] {
    const int64_t rows = sh.rows, cols = sh.cols;
    const double eps = 1e-5;
    const std::vector<double> x = norm_inputs(rows, cols, sh.seed), gain = random_values(cols, sh.seed + 1, 0.5, 1.5),
                              bias = random_values(cols, sh.seed + 2, -0.5, 0.5);
    const std::vector<double> r = random_values(rows * cols, sh.seed + 3, -1.0, 2.0);
    auto loss = [=](const std::vector<std::vector<double>>& in) {
      std::vector<double> y(rows * cols), m(rows), s(rows);
      layernorm_forward<double>(y.data(), m.data(), s.data(), in[0].data(), in[1].data(), in[2].data(), rows, cols,
                                eps);
      return weighted_sum(r, y);
    };
    std::vector<double> y(rows * cols), mean(rows), rstd(rows);
    layernorm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), gain.data(), bias.data(), rows, cols, eps);
    std::vector<double> dx(rows * cols, 0.25), dg(cols, -0.5), db(cols, 1.0);
    layernorm_backward<double>(dx.data(), dg.data(), db.data(), r.data(), x.data(), mean.data(), rstd.data(),
                               gain.data(), rows, cols);
    for (auto& v : dx) v -= 0.25;
    for (auto& v : dg) v += 0.5;
    for (auto& v : db) v -= 1.0;
    std::vector<double> dx_only(rows * cols, 0.0);
    layernorm_backward<double>(dx_only.data(), nullptr, nullptr, r.data(), x.data(), mean.data(), rstd.data(),
                               gain.data(), rows, cols);
    EXPECT_TRUE(all_close(dx_only, dx, 1e-14, 1e-14));
    return test::GradientCheck{
        {{"x", x, dx, sh.rows_cols()}, {"gain", gain, dg, sh.col()}, {"bias", bias, db, sh.col()}}, loss};
  });
}

test::OpCase rmsnorm_finite_differences(const Shape& sh) {
  return test::gradient_case(kRmsNorm, "finite differences " + sh.str(), [sh] {
    const int64_t rows = sh.rows, cols = sh.cols;
    const double eps = 1e-5;
    const std::vector<double> x = rms_inputs(rows, cols, sh.seed), gain = random_values(cols, sh.seed + 1, 0.5, 1.5);
    const std::vector<double> r = random_values(rows * cols, sh.seed + 2, -1.0, 2.0);
    auto loss = [=](const std::vector<std::vector<double>>& in) {
      std::vector<double> y(rows * cols), s(rows);
      rmsnorm_forward<double>(y.data(), s.data(), in[0].data(), in[1].data(), rows, cols, eps);
      return weighted_sum(r, y);
    };
    std::vector<double> y(rows * cols), rstd(rows);
    rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), gain.data(), rows, cols, eps);
    std::vector<double> dx(rows * cols, -0.75), dg(cols, 2.0);
    rmsnorm_backward<double>(dx.data(), dg.data(), r.data(), x.data(), rstd.data(), gain.data(), rows, cols);
    for (auto& v : dx) v += 0.75;
    for (auto& v : dg) v -= 2.0;
    return test::GradientCheck{{{"x", x, dx, sh.rows_cols()}, {"gain", gain, dg, sh.col()}}, loss};
  });
}

// A null gain is treated as all ones (norm.cpp's gain_at). LayerNorm with gain null (bias given):
// the forward equals the forward with explicit ones, and dx (with dgain null, which is allowed)
// matches finite differences of the null-gain forward; dbias too. The same as the explicit-ones
// backward; and a dgain requested with a null gain is d/dgain at gain 1.
test::OpCase layernorm_null_gain(const Shape& sh) {
  return test::gradient_case(kLayerNorm, "finite differences null gain " + sh.str(), [sh] {
    const int64_t rows = sh.rows, cols = sh.cols;
    const double eps = 1e-5;
    const std::vector<double> x = norm_inputs(rows, cols, sh.seed), bias = random_values(cols, sh.seed + 1, -0.5, 0.5);
    const std::vector<double> r = random_values(rows * cols, sh.seed + 2, -1.0, 2.0);
    const std::vector<double> ones(cols, 1.0);
    auto forward = [=](const std::vector<double>& xv, const std::vector<double>& bv, const double* gain) {
      std::vector<double> y(rows * cols), m(rows), s(rows);
      layernorm_forward<double>(y.data(), m.data(), s.data(), xv.data(), gain, bv.data(), rows, cols, eps);
      return y;
    };
    auto loss = [=](const std::vector<std::vector<double>>& in) {
      return weighted_sum(r, forward(in[0], in[1], nullptr));
    };
    // Equal up to rounding, not bit for bit: the compiler may contract xhat * g + b into a fused
    // multiply-add differently when g is the constant 1 (GCC's default -ffp-contract=fast).
    EXPECT_TRUE(all_close(forward(x, bias, nullptr), forward(x, bias, ones.data()), 1e-15, 1e-15));
    std::vector<double> y(rows * cols), mean(rows), rstd(rows);
    layernorm_forward<double>(y.data(), mean.data(), rstd.data(), x.data(), nullptr, bias.data(), rows, cols, eps);
    std::vector<double> dx(rows * cols, 0.25), db(cols, -1.0);
    layernorm_backward<double>(dx.data(), nullptr, db.data(), r.data(), x.data(), mean.data(), rstd.data(), nullptr,
                               rows, cols);
    for (auto& v : dx) v -= 0.25;
    for (auto& v : db) v += 1.0;
    std::vector<double> dx1(rows * cols, 0.0), dg1(cols, 0.0), db1(cols, 0.0), dg0(cols, 0.0);
    layernorm_backward<double>(dx1.data(), dg1.data(), db1.data(), r.data(), x.data(), mean.data(), rstd.data(),
                               ones.data(), rows, cols);
    std::vector<double> dx0(rows * cols, 0.0);
    layernorm_backward<double>(dx0.data(), dg0.data(), nullptr, r.data(), x.data(), mean.data(), rstd.data(), nullptr,
                               rows, cols);
    EXPECT_TRUE(all_close(dx0, dx1, 1e-14, 1e-14));
    EXPECT_TRUE(all_close(dg0, dg1, 1e-14, 1e-14));
    EXPECT_TRUE(all_close(dx, dx1, 1e-14, 1e-14));
    // Only dx requested (dgain and dbias null) with a null gain: the same dx.
    std::vector<double> dx_only(rows * cols, 0.0);
    layernorm_backward<double>(dx_only.data(), nullptr, nullptr, r.data(), x.data(), mean.data(), rstd.data(), nullptr,
                               rows, cols);
    EXPECT_EQ(dx_only, dx0);
    return test::GradientCheck{{{"x", x, dx, sh.rows_cols()}, {"bias", bias, db, sh.col()}}, loss};
  });
}

// RMSNorm with a null gain: y = x * rstd; dx against finite differences with dgain null, and the
// same as the explicit-ones backward, with or without dgain.
test::OpCase rmsnorm_null_gain(const Shape& sh) {
  return test::gradient_case(kRmsNorm, "finite differences null gain " + sh.str(), [sh] {
    const int64_t rows = sh.rows, cols = sh.cols;
    const double eps = 1e-5;
    const std::vector<double> x = rms_inputs(rows, cols, sh.seed);
    const std::vector<double> r = random_values(rows * cols, sh.seed + 1, -1.0, 2.0);
    const std::vector<double> ones(cols, 1.0);
    auto forward = [=](const std::vector<double>& xv, const double* gain) {
      std::vector<double> y(rows * cols), s(rows);
      rmsnorm_forward<double>(y.data(), s.data(), xv.data(), gain, rows, cols, eps);
      return y;
    };
    auto loss = [=](const std::vector<std::vector<double>>& in) { return weighted_sum(r, forward(in[0], nullptr)); };
    EXPECT_TRUE(all_close(forward(x, nullptr), forward(x, ones.data()), 1e-15, 1e-15));  // up to FMA contraction
    std::vector<double> y(rows * cols), rstd(rows);
    rmsnorm_forward<double>(y.data(), rstd.data(), x.data(), nullptr, rows, cols, eps);
    // The test's own y = x / sqrt(mean(x^2) + eps) for row 0.
    double ms = 0;
    for (int64_t c = 0; c < cols; ++c) ms += x[c] * x[c];
    ms /= cols;
    for (int64_t c = 0; c < cols; ++c) EXPECT_NEAR(y[c], x[c] / std::sqrt(ms + eps), 1e-14);
    std::vector<double> dx(rows * cols, 0.5);
    rmsnorm_backward<double>(dx.data(), nullptr, r.data(), x.data(), rstd.data(), nullptr, rows, cols);
    for (auto& v : dx) v -= 0.5;
    std::vector<double> dx1(rows * cols, 0.0), dg1(cols, 0.0), dx0(rows * cols, 0.0), dg0(cols, 0.0);
    rmsnorm_backward<double>(dx1.data(), dg1.data(), r.data(), x.data(), rstd.data(), ones.data(), rows, cols);
    rmsnorm_backward<double>(dx0.data(), dg0.data(), r.data(), x.data(), rstd.data(), nullptr, rows, cols);
    EXPECT_TRUE(all_close(dx0, dx1, 1e-14, 1e-14));
    EXPECT_TRUE(all_close(dg0, dg1, 1e-14, 1e-14));
    EXPECT_TRUE(all_close(dx, dx1, 1e-14, 1e-14));
    return test::GradientCheck{{{"x", x, dx, sh.rows_cols()}}, loss};
  });
}

// PyTorch's outputs and gradients for the fixture's inputs, in T.
template <typename T>
test::OpCase layernorm_torch() {
  return test::compare_case(std::is_same_v<T, double> ? kLayerNormTorchDouble : kLayerNormTorchFloat, "fixture", [] {
    const auto& c = test::kernel_fixture("layer_norm");
    const int64_t rows = c.at("rows"), cols = c.at("cols");
    const T eps = static_cast<T>(c.at("eps").get<double>());
    const auto x = as<T>(test::fixture_values(c, "x")), w = as<T>(test::fixture_values(c, "weight")),
               b = as<T>(test::fixture_values(c, "bias")), r = as<T>(test::fixture_values(c, "r"));
    std::vector<T> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw(cols), db(cols);
    layernorm_forward<T>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols, eps);
    layernorm_backward<T>(dx.data(), dw.data(), db.data(), r.data(), x.data(), mean.data(), rstd.data(), w.data(), rows,
                          cols);
    const Shape sh{rows, cols, 0};
    return std::vector<test::Compared>{test::compared("y", y, test::fixture_values(c, "y"), sh.rows_cols()),
                                       test::compared("mean", mean, test::fixture_values(c, "mean"), sh.row()),
                                       test::compared("rstd", rstd, test::fixture_values(c, "rstd"), sh.row()),
                                       test::compared("dx", dx, test::fixture_values(c, "dx"), sh.rows_cols()),
                                       test::compared("dweight", dw, test::fixture_values(c, "dweight"), sh.col()),
                                       test::compared("dbias", db, test::fixture_values(c, "dbias"), sh.col())};
  });
}

template <typename T>
test::OpCase rmsnorm_torch() {
  return test::compare_case(std::is_same_v<T, double> ? kRmsNormTorchDouble : kRmsNormTorchFloat, "fixture", [] {
    const auto& c = test::kernel_fixture("rms_norm");
    const int64_t rows = c.at("rows"), cols = c.at("cols");
    const T eps = static_cast<T>(c.at("eps").get<double>());
    const auto x = as<T>(test::fixture_values(c, "x")), w = as<T>(test::fixture_values(c, "weight")),
               r = as<T>(test::fixture_values(c, "r"));
    std::vector<T> y(rows * cols), rstd(rows), dx(rows * cols), dw(cols);
    rmsnorm_forward<T>(y.data(), rstd.data(), x.data(), w.data(), rows, cols, eps);
    rmsnorm_backward<T>(dx.data(), dw.data(), r.data(), x.data(), rstd.data(), w.data(), rows, cols);
    const Shape sh{rows, cols, 0};
    return std::vector<test::Compared>{test::compared("y", y, test::fixture_values(c, "y"), sh.rows_cols()),
                                       test::compared("rstd", rstd, test::fixture_values(c, "rstd"), sh.row()),
                                       test::compared("dx", dx, test::fixture_values(c, "dx"), sh.rows_cols()),
                                       test::compared("dweight", dw, test::fixture_values(c, "dweight"), sh.col())};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (const Shape& sh :
       {Shape{9, 37, 111}, Shape{1, 1, 115}, Shape{1, 64, 116}, Shape{5, 3, 117}, Shape{2, 64, 118}}) {
    cases.push_back(layernorm_float_vs_double(sh));
    cases.push_back(rmsnorm_float_vs_double(sh));
  }
  for (const Shape& sh : {Shape{3, 5, 71}, Shape{1, 1, 75}, Shape{2, 1, 76}, Shape{4, 9, 77}})
    cases.push_back(layernorm_finite_differences(sh));
  for (const Shape& sh : {Shape{3, 6, 81}, Shape{1, 3, 85}, Shape{2, 4, 86}, Shape{4, 9, 87}})
    cases.push_back(rmsnorm_finite_differences(sh));
  for (const Shape& sh : {Shape{3, 5, 131}, Shape{4, 9, 135}}) cases.push_back(layernorm_null_gain(sh));
  for (const Shape& sh : {Shape{3, 6, 141}, Shape{4, 9, 145}}) cases.push_back(rmsnorm_null_gain(sh));
  cases.push_back(layernorm_torch<double>());
  cases.push_back(layernorm_torch<float>());
  cases.push_back(rmsnorm_torch<double>());
  cases.push_back(rmsnorm_torch<float>());
  return cases;
}

class NormOps : public test::OpCaseTest {};
TEST_P(NormOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, NormOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(Norm, SameResultWithOneAndTwoThreads) {
  // 300 x 130 = 39000 elements: above the kernels' 2^15-element parallel threshold; 130 columns make
  // three column blocks in the gain/bias reductions.
  const int64_t rows = 300, cols = 130;
  const auto x = as<float>(random_values(rows * cols, 121, -2.0, 2.0));
  const auto gain = as<float>(random_values(cols, 122, 0.5, 1.5)), bias = as<float>(random_values(cols, 123));
  const auto dy = as<float>(random_values(rows * cols, 124));
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> y(rows * cols), m(rows), s(rows), dx(rows * cols, 0.5f), dg(cols, 0.5f), db(cols, 0.5f);
    layernorm_forward<float>(y.data(), m.data(), s.data(), x.data(), gain.data(), bias.data(), rows, cols, 1e-5f);
    layernorm_backward<float>(dx.data(), dg.data(), db.data(), dy.data(), x.data(), m.data(), s.data(), gain.data(),
                              rows, cols);
    std::vector<float> ry(rows * cols), rs(rows), rdx(rows * cols, 0.5f), rdg(cols, 0.5f);
    rmsnorm_forward<float>(ry.data(), rs.data(), x.data(), gain.data(), rows, cols, 1e-5f);
    rmsnorm_backward<float>(rdx.data(), rdg.data(), dy.data(), x.data(), rs.data(), gain.data(), rows, cols);
    return std::vector<std::vector<float>>{y, m, s, dx, dg, db, ry, rs, rdx, rdg};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(0);
  for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], two[k]) << "output " << k;
}

}  // namespace
}  // namespace tformer
