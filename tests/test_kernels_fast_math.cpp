// The branch-free float exp, the double exp for non-positive arguments and the float normal CDF
// (kernels/fast_math.h) against libm in double over dense sweeps of their ranges, and at the edges
// (the clamps, NaN, infinities).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/fast_math.h"
#include "test_util.h"

namespace tformer {
namespace {

// n + 1 evenly spaced points from lo to hi, rounded to T (the function sees exactly those values).
template <typename T>
std::vector<T> sweep(double lo, double hi, int n) {
  std::vector<T> x(static_cast<size_t>(n) + 1);
  for (int i = 0; i <= n; ++i) x[static_cast<size_t>(i)] = static_cast<T>(lo + (hi - lo) * i / n);
  return x;
}

const test::OpBounds kExpF{"exp_f vs std::exp in double", {{"y", {.rtol = 1.2e-7}}}};
const test::OpBounds kExpNonposD{"exp_nonpos_d vs std::exp", {{"y", {.rtol = 6e-16}}}};
// For x <= 0, Phi(x) is the tail itself and keeps relative accuracy (3.5e-7 at worst near 0 with
// FMA, 4.2e-7 in the portable build, which has none), but the float rounding of x^2 inside
// exp(-x^2 / 2) costs more of it as x grows (about 1.9e-6 at x = -5, 1.4e-5 at x = -12): the
// bound is 4.5e-7 (1 + x^2) relative. For x > 0, Phi(x) = 1 - tail is within an ulp or
// two of 1 in absolute terms.
const test::OpBounds kNormalCdfLower{"normal_cdf_f vs erfc in double, x <= 0",
                                     {{"y", {.rtol = 4.5e-7, .rtol_of_scale = 4.5e-7}}}};
const test::OpBounds kNormalCdfUpper{"normal_cdf_f vs erfc in double, x >= 0", {{"y", {.atol = 2.5e-7}}}};

test::OpCase exp_f_case(double lo, double hi) {
  return test::compare_case(kExpF, "x in (" + std::to_string(lo) + ", " + std::to_string(hi) + "]", [lo, hi] {
    std::vector<float> x = sweep<float>(lo, hi, 400000);
    std::erase_if(x, [](float v) { return v <= -87.0f; });
    std::vector<double> got, want;
    for (float v : x) {
      got.push_back(fast::exp_f(v));
      want.push_back(std::exp(static_cast<double>(v)));
    }
    return std::vector<test::Compared>{test::compared("y", got, want)};
  });
}

test::OpCase exp_nonpos_d_case(double lo, double hi) {
  return test::compare_case(kExpNonposD, "x in (" + std::to_string(lo) + ", " + std::to_string(hi) + "]", [lo, hi] {
    std::vector<double> x = sweep<double>(lo, hi, 400000);
    std::erase_if(x, [](double v) { return v <= -708.0; });
    std::vector<double> got, want;
    for (double v : x) {
      got.push_back(fast::exp_nonpos_d(v));
      want.push_back(std::exp(v));
    }
    return std::vector<test::Compared>{test::compared("y", got, want)};
  });
}

test::OpCase normal_cdf_case(double lo, double hi) {
  return test::compare_case(hi <= 0 ? kNormalCdfLower : kNormalCdfUpper,
                            "x in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", [lo, hi] {
                              const std::vector<float> x = sweep<float>(lo, hi, 400000);
                              test::Compared c{"y", {}, {}, {}, {}, ""};
                              for (float v : x) {
                                const double xd = static_cast<double>(v);
                                const double want = 0.5 * std::erfc(-xd / std::sqrt(2.0));
                                c.got.push_back(fast::normal_cdf_f(v));
                                c.want.push_back(want);
                                c.scale.push_back(want * xd * xd);
                              }
                              return std::vector<test::Compared>{c};
                            });
}

std::vector<test::OpCase> op_cases() {
  return {exp_f_case(-87, 0),         exp_f_case(0, 88),        exp_f_case(-1, 1),
          exp_nonpos_d_case(-708, 0), exp_nonpos_d_case(-1, 0), normal_cdf_case(-12, -4),
          normal_cdf_case(-4, 0),     normal_cdf_case(0, 4),    normal_cdf_case(4, 12)};
}

class FastMathOps : public test::OpCaseTest {};
TEST_P(FastMathOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, FastMathOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(FastMath, EdgesOfTheRanges) {
  const float inf = std::numeric_limits<float>::infinity();
  // exp_f: 0 at and below -87 (and for -inf), exp(88) for every argument above 88, NaN for NaN.
  EXPECT_EQ(fast::exp_f(-87.0f), 0.0f);
  EXPECT_EQ(fast::exp_f(-1000.0f), 0.0f);
  EXPECT_EQ(fast::exp_f(-inf), 0.0f);
  const float e88 = fast::exp_f(88.0f);
  EXPECT_NEAR(e88, std::exp(88.0), 1.2e-7 * std::exp(88.0));
  EXPECT_EQ(fast::exp_f(100.0f), e88);
  EXPECT_EQ(fast::exp_f(inf), e88);
  EXPECT_TRUE(std::isnan(fast::exp_f(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(fast::exp_f(0.0f), 1.0f);
  // exp_nonpos_d: 0 at and below -708, exactly 1 at 0.
  EXPECT_EQ(fast::exp_nonpos_d(-708.0), 0.0);
  EXPECT_EQ(fast::exp_nonpos_d(-1e6), 0.0);
  EXPECT_EQ(fast::exp_nonpos_d(0.0), 1.0);
  // normal_cdf_f: 0 and 1 at the infinities, 1/2 at 0, and Phi(x) + Phi(-x) = 1.
  EXPECT_EQ(fast::normal_cdf_f(-inf), 0.0f);
  EXPECT_EQ(fast::normal_cdf_f(inf), 1.0f);
  EXPECT_NEAR(fast::normal_cdf_f(0.0f), 0.5f, 1e-7f);
  for (float x : {0.3f, 1.7f, 2.9f, 6.1f})
    EXPECT_NEAR(fast::normal_cdf_f(x) + fast::normal_cdf_f(-x), 1.0f, 2.5e-7f) << x;
}

}  // namespace
}  // namespace tformer
