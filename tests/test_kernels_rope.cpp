// Rotary position embedding: length preservation, the relative-position identity (both sides
// computed by separate kernel calls), both pairings against hand-computed cases and against each
// other, per-token positions, the cached-query position trap, a configurable base; the op table:
// float against double (float data, angles in double, at large positions), the backward against
// finite differences; threads and argument checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/rope.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::as;
using test::random_values;

constexpr RopePairing kPairings[] = {RopePairing::Adjacent, RopePairing::Halves};

const char* name(RopePairing p) { return p == RopePairing::Adjacent ? "Adjacent" : "Halves"; }

RopeParams params(int64_t hd, RopePairing pairing) {
  RopeParams p;
  p.head_dim = hd;
  p.pairing = pairing;
  return p;
}

// One head vector rotated to one position (a one-token, one-head call).
std::vector<double> rotated(std::vector<double> x, int64_t pos, const RopeParams& p) {
  rope_forward<double>(x.data(), &pos, 1, 1, p.head_dim, p);
  return x;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  return std::inner_product(a.begin(), a.end(), b.begin(), 0.0);
}

TEST(Rope, PreservesEachHeadVectorsLength) {
  const int64_t n_tokens = 5, H = 3, hd = 8;
  const std::vector<int64_t> pos{0, 1, 7, 100, 12345};
  for (RopePairing pairing : kPairings) {
    const auto x = random_values(n_tokens * H * hd, 1);
    auto y = x;
    rope_forward<double>(y.data(), pos.data(), n_tokens, H, H * hd, params(hd, pairing));
    EXPECT_NE(y, x) << name(pairing);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const auto at = [&](const std::vector<double>& v) {
          return std::vector<double>(v.begin() + (t * H + h) * hd, v.begin() + (t * H + h + 1) * hd);
        };
        EXPECT_NEAR(std::sqrt(dot(at(y), at(y))), std::sqrt(dot(at(x), at(x))), 1e-13)
            << name(pairing) << " t=" << t << " h=" << h;
      }
  }
}

// q rotated at m, k rotated at n: q'.k' depends on n - m only. Each side is its own pair of
// kernel calls; changing the gap changes the product.
TEST(Rope, DotProductDependsOnlyOnThePositionGap) {
  const int64_t hd = 8;
  const auto q = random_values(hd, 11), k = random_values(hd, 12);
  for (RopePairing pairing : kPairings) {
    const RopeParams p = params(hd, pairing);
    for (auto [m, n] : {std::pair<int64_t, int64_t>{0, 0}, {3, 1}, {2, 9}, {40, 7}}) {
      const double base = dot(rotated(q, m, p), rotated(k, n, p));
      for (int64_t shift : {1, 5, 37, 1000}) {
        const double shifted = dot(rotated(q, m + shift, p), rotated(k, n + shift, p));
        EXPECT_NEAR(shifted, base, 1e-12) << name(pairing) << " m=" << m << " n=" << n << " shift=" << shift;
      }
      // A different gap gives a different score.
      const double other_gap = dot(rotated(q, m, p), rotated(k, n + 1, p));
      EXPECT_GT(std::abs(other_gap - base), 1e-4) << name(pairing) << " m=" << m << " n=" << n;
    }
  }
}

// head_dim 4, base 10000: theta_0 = 10000^0 = 1, theta_1 = 10000^(-2/4) = 0.01. x = (1, 2, 3, 4).
//   position 1:  cos 1 = 0.5403023058681398, sin 1 = 0.8414709848078965
//                cos 0.01 = 0.9999500004166653, sin 0.01 = 0.009999833334166664
//   Adjacent pairs (x0, x1) at angle 1, (x2, x3) at angle 0.01:
//     (1 c1 - 2 s1, 1 s1 + 2 c1, 3 c2 - 4 s2, 3 s2 + 4 c2)
//     = (-1.1426396637476532, 1.922075596544176, 2.9598506679133294, 4.029799501669161)
//   Halves pairs (x0, x2) at angle 1, (x1, x3) at angle 0.01:
//     (1 c1 - 3 s1, 2 c2 - 4 s2, 1 s1 + 3 c1, 2 s2 + 4 c2)
//     = (-1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994)
//   position 0: the identity.
TEST(Rope, BothPairingsMatchHandComputedCase) {
  const std::vector<int64_t> pos{1, 0};
  const std::vector<double> x{1, 2, 3, 4, /**/ 1, 2, 3, 4};
  const std::vector<double> adjacent{
      -1.1426396637476532, 1.922075596544176, 2.9598506679133294, 4.029799501669161, 1, 2, 3, 4};
  const std::vector<double> halves{
      -1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994, 1, 2, 3, 4};
  auto ya = x, yh = x;
  rope_forward<double>(ya.data(), pos.data(), 2, 1, 4, params(4, RopePairing::Adjacent));
  rope_forward<double>(yh.data(), pos.data(), 2, 1, 4, params(4, RopePairing::Halves));
  EXPECT_TRUE(all_close(ya, adjacent, 0, 1e-14));
  EXPECT_TRUE(all_close(yh, halves, 0, 1e-14));
  // Position 0 is exactly the identity.
  for (int i = 4; i < 8; ++i) {
    EXPECT_EQ(ya[i], x[i]);
    EXPECT_EQ(yh[i], x[i]);
  }
  // Float: same numbers to float precision.
  std::vector<float> xf(x.begin(), x.end());
  rope_forward<float>(xf.data(), pos.data(), 2, 1, 4, params(4, RopePairing::Halves));
  EXPECT_TRUE(all_close(xf, halves, 0, 1e-6));
}

// The base is configurable. head_dim 4, base 100: theta_0 = 100^0 = 1, theta_1 = 100^(-2/4) = 0.1.
// x = (1, 2, 3, 4) at position 2, so the angles are 2 * 1 = 2 and 2 * 0.1 = 0.2:
//   c1 = cos 2   = -0.4161468365471424,  s1 = sin 2   = 0.9092974268256817
//   c2 = cos 0.2 =  0.9800665778412416,  s2 = sin 0.2 = 0.19866933079506122
//   Adjacent pairs (x0, x1) at angle 2, (x2, x3) at angle 0.2:
//     (1 c1 - 2 s1, 1 s1 + 2 c1, 3 c2 - 4 s2, 3 s2 + 4 c2)
//     = (-2.234741690198506, 0.0770037537313969, 2.1455224103434802, 4.5162743037501505)
//   Halves pairs (x0, x2) at angle 2, (x1, x3) at angle 0.2:
//     (1 c1 - 3 s1, 2 c2 - 4 s2, 1 s1 + 3 c1, 2 s2 + 4 c2)
//     = (-3.1440391170241875, 1.1654558325022384, -0.33914308281574557, 4.317604972955089)
// With the default base 10000 the second pair would turn by only 0.02 rad (cos 0.02 = 0.9998),
// so a kernel that ignored the base would miss the coordinates of the second pair by ~0.7.
TEST(Rope, ConfigurableBaseMatchesHandComputedCase) {
  const int64_t pos = 2;
  const std::vector<double> x{1, 2, 3, 4};
  const double c1 = std::cos(2.0), s1 = std::sin(2.0), c2 = std::cos(0.2), s2 = std::sin(0.2);
  const std::vector<double> adjacent{1 * c1 - 2 * s1, 1 * s1 + 2 * c1, 3 * c2 - 4 * s2, 3 * s2 + 4 * c2};
  const std::vector<double> halves{1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 1 * s1 + 3 * c1, 2 * s2 + 4 * c2};
  RopeParams pa = params(4, RopePairing::Adjacent), ph = params(4, RopePairing::Halves);
  pa.base = ph.base = 100.0;
  auto ya = x, yh = x;
  rope_forward<double>(ya.data(), &pos, 1, 1, 4, pa);
  rope_forward<double>(yh.data(), &pos, 1, 1, 4, ph);
  EXPECT_TRUE(all_close(ya, adjacent, 0, 1e-14));
  EXPECT_TRUE(all_close(yh, halves, 0, 1e-14));
  // The decimals written above, as an independent check of the formulas.
  EXPECT_TRUE(
      all_close(ya, std::vector<double>{-2.234741690198506, 0.0770037537313969, 2.1455224103434802, 4.5162743037501505},
                0, 1e-14));
  EXPECT_TRUE(all_close(
      yh, std::vector<double>{-3.1440391170241875, 1.1654558325022384, -0.33914308281574557, 4.317604972955089}, 0,
      1e-14));
  // The backward with the same base rotates back.
  rope_backward<double>(ya.data(), &pos, 1, 1, 4, pa);
  rope_backward<double>(yh.data(), &pos, 1, 1, 4, ph);
  EXPECT_TRUE(all_close(ya, x, 0, 1e-14));
  EXPECT_TRUE(all_close(yh, x, 0, 1e-14));
}

// Two bases give the same rotation at position 0 (the identity) and for pair 0 (theta_0 = 1 for
// every base), and different rotations of every other pair at every position > 0.
TEST(Rope, DifferentBasesGiveDifferentOutputsAtPositionsAboveZero) {
  const int64_t hd = 8, n = 4;
  const std::vector<int64_t> pos{0, 1, 5, 300};
  const auto x = random_values(n * hd, 81);
  for (RopePairing pairing : kPairings) {
    RopeParams p1 = params(hd, pairing), p2 = params(hd, pairing);
    p2.base = 500.0;
    ASSERT_EQ(p1.base, 10000.0);  // the documented default
    auto y1 = x, y2 = x;
    rope_forward<double>(y1.data(), pos.data(), n, 1, hd, p1);
    rope_forward<double>(y2.data(), pos.data(), n, 1, hd, p2);
    EXPECT_EQ(std::vector<double>(y1.begin(), y1.begin() + hd), std::vector<double>(y2.begin(), y2.begin() + hd))
        << name(pairing);
    const int64_t half = hd / 2;
    for (int64_t t = 1; t < n; ++t) {
      const double* a = y1.data() + t * hd;
      const double* b = y2.data() + t * hd;
      for (int64_t i = 0; i < half; ++i) {
        const int64_t ia = pairing == RopePairing::Adjacent ? 2 * i : i;
        const int64_t ib = pairing == RopePairing::Adjacent ? 2 * i + 1 : i + half;
        const double diff = std::abs(a[ia] - b[ia]) + std::abs(a[ib] - b[ib]);
        if (i == 0) {
          EXPECT_EQ(diff, 0.0) << name(pairing) << " t=" << t;  // theta_0 = 1 whatever the base
        } else {
          EXPECT_GT(diff, 1e-4) << name(pairing) << " t=" << t << " pair " << i;
        }
      }
    }
  }
}

// rope.cpp rejects a base that is not positive and finite, forward and backward, before writing.
TEST(Rope, RejectsANonPositiveOrNonFiniteBase) {
  std::vector<double> x(8, 1.0);
  const std::vector<int64_t> pos{0, 1};
  for (double base :
       {0.0, -0.0, -1.0, -10000.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    RopeParams p = params(4, RopePairing::Adjacent);
    p.base = base;
    EXPECT_ERROR(rope_forward<double>(x.data(), pos.data(), 2, 1, 4, p), ErrorKind::Internal, "") << "base " << base;
    p.pairing = RopePairing::Halves;
    EXPECT_ERROR(rope_backward<double>(x.data(), pos.data(), 2, 1, 4, p), ErrorKind::Internal, "") << "base " << base;
    std::vector<float> xf(8, 1.0f);
    EXPECT_ERROR(rope_forward<float>(xf.data(), pos.data(), 2, 1, 4, p), ErrorKind::Internal, "") << "base " << base;
  }
  EXPECT_EQ(x, std::vector<double>(8, 1.0));  // nothing written
  // A small positive base is legal.
  RopeParams ok = params(4, RopePairing::Adjacent);
  ok.base = 0.5;
  EXPECT_NO_THROW(rope_forward<double>(x.data(), pos.data(), 2, 1, 4, ok));
}

// The pairings are not interchangeable: weights rotated with the other one give other scores.
TEST(Rope, PairingsAreNotInterchangeable) {
  const int64_t hd = 8, n = 4;
  const std::vector<int64_t> pos{0, 1, 2, 50};
  const auto x = random_values(n * hd, 21);
  auto ya = x, yh = x;
  rope_forward<double>(ya.data(), pos.data(), n, 1, hd, params(hd, RopePairing::Adjacent));
  rope_forward<double>(yh.data(), pos.data(), n, 1, hd, params(hd, RopePairing::Halves));
  // Row 0 (position 0) is the identity for both; every later row differs.
  EXPECT_EQ(std::vector<double>(ya.begin(), ya.begin() + hd), std::vector<double>(x.begin(), x.begin() + hd));
  EXPECT_EQ(std::vector<double>(yh.begin(), yh.begin() + hd), std::vector<double>(x.begin(), x.begin() + hd));
  for (int64_t t = 1; t < n; ++t)
    EXPECT_FALSE(all_close(ya.data() + t * hd, yh.data() + t * hd, hd, 0, 1e-3)) << "t=" << t;
}

// Positions are per token: a one-token call at position 100 equals row 100 of a long call.
// Heads sit in rows wider than n_heads * head_dim (a fused qkv row); the rest of the row is
// untouched.
TEST(Rope, PositionsAreHonouredPerToken) {
  const int64_t n = 128, H = 2, hd = 6, stride = 3 * H * hd;
  for (RopePairing pairing : kPairings) {
    const RopeParams p = params(hd, pairing);
    const auto x = random_values(n * stride, 31);
    std::vector<int64_t> pos(n);
    std::iota(pos.begin(), pos.end(), 0);
    auto all = x;
    rope_forward<double>(all.data(), pos.data(), n, H, stride, p);
    std::vector<double> one(x.begin() + 100 * stride, x.begin() + 101 * stride);
    const int64_t p100 = 100;
    rope_forward<double>(one.data(), &p100, 1, H, stride, p);
    EXPECT_EQ(one, std::vector<double>(all.begin() + 100 * stride, all.begin() + 101 * stride)) << name(pairing);
    // Beyond the heads: untouched.
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = H * hd; c < stride; ++c) EXPECT_EQ(all[t * stride + c], x[t * stride + c]);
    // A position-100 token rotated as if at 0 is unchanged, which is not row 100.
    EXPECT_NE(std::vector<double>(x.begin() + 100 * stride, x.begin() + 100 * stride + H * hd),
              std::vector<double>(all.begin() + 100 * stride, all.begin() + 100 * stride + H * hd));
  }
}

// Restarting positions at 0 for a cached query changes its relation to the stored keys: key at 3,
// query at its true position 10 gives the gap-7 score; the query rotated at 0 does not.
TEST(Rope, RestartingPositionsForACachedQueryChangesTheScore) {
  const int64_t hd = 8;
  const auto q = random_values(hd, 41), k = random_values(hd, 42);
  for (RopePairing pairing : kPairings) {
    const RopeParams p = params(hd, pairing);
    const auto key = rotated(k, 3, p);
    const double correct = dot(rotated(q, 10, p), key);
    const double restarted = dot(rotated(q, 0, p), key);
    EXPECT_NEAR(correct, dot(rotated(q, 7, p), rotated(k, 0, p)), 1e-12) << name(pairing);
    EXPECT_GT(std::abs(correct - restarted), 1e-3) << name(pairing);
  }
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float data, angles in double: at position 100000 a float angle (100000 * theta_0 rounded to
// float) would be off by up to ~4e-3 rad; ours matches double to float precision, 1e-6 absolute on
// entries of size <= 1. The backward (rotating the gradient back) against central differences of
// loss = sum(r * rope(x)): 1e-6.
const test::OpBounds kRopeAdjacent{"rope adjacent", {{"y", {.atol = 1e-6}}}, 1e-6};
const test::OpBounds kRopeHalves{"rope halves", {{"y", {.atol = 1e-6}}}, 1e-6};

const test::OpBounds& rope_op(RopePairing p) { return p == RopePairing::Adjacent ? kRopeAdjacent : kRopeHalves; }

struct Shape {
  int64_t n, H, hd, stride;  // stride: a token's row, >= H * hd (a wider row: untouched columns)
  std::vector<int64_t> pos;
  uint64_t seed;
  std::string str() const {
    std::ostringstream os;
    os << "n=" << n << " H=" << H << " hd=" << hd << " stride=" << stride << " pos";
    for (int64_t p : pos) os << " " << p;
    return os.str();
  }
  test::Layout layout() const { return {{{"t", n}, {"c", stride}}}; }
};

test::OpCase float_vs_double(RopePairing pairing, const Shape& sh) {
  return test::compare_case(rope_op(pairing), "float vs double " + sh.str(), [pairing, sh] {
    const RopeParams p = params(sh.hd, pairing);
    auto xd = random_values(sh.n * sh.stride, sh.seed);
    std::vector<float> xf = as<float>(xd);
    rope_forward<double>(xd.data(), sh.pos.data(), sh.n, sh.H, sh.stride, p);
    rope_forward<float>(xf.data(), sh.pos.data(), sh.n, sh.H, sh.stride, p);
    return std::vector<test::Compared>{test::compared("y", xf, xd, sh.layout())};
  });
}

// The columns of a row past the heads are not part of any head: the loss ignores them, and the
// backward leaves them as they were. The backward undoes the forward (R^T R = I).
test::OpCase finite_differences(RopePairing pairing, const Shape& sh) {
  return test::gradient_case(rope_op(pairing), "finite differences " + sh.str(), [pairing, sh] {
    const RopeParams p = params(sh.hd, pairing);
    const int64_t n = sh.n, H = sh.H, hd = sh.hd, stride = sh.stride;
    const std::vector<int64_t> pos = sh.pos;
    const std::vector<double> x = random_values(n * stride, sh.seed), r = random_values(n * stride, sh.seed + 1);
    auto loss = [=](const std::vector<std::vector<double>>& in) {
      auto y = in[0];
      rope_forward<double>(y.data(), pos.data(), n, H, stride, p);
      double s = 0;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < H * hd; ++c) s += r[t * stride + c] * y[t * stride + c];
      return s;
    };
    auto g = r;
    rope_backward<double>(g.data(), pos.data(), n, H, stride, p);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = H * hd; c < stride; ++c) {
        EXPECT_EQ(g[t * stride + c], r[t * stride + c]);
        g[t * stride + c] = 0;
      }
    auto y = x;
    rope_forward<double>(y.data(), pos.data(), n, H, stride, p);
    rope_backward<double>(y.data(), pos.data(), n, H, stride, p);
    EXPECT_TRUE(all_close(y, x, 0, 1e-14));
    return test::GradientCheck{{{"x", x, g, sh.layout()}}, loss};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (RopePairing pairing : kPairings) {
    for (const Shape& sh : {Shape{3, 2, 16, 32, {5, 100000, 123457}, 61}, Shape{1, 1, 2, 2, {7}, 62},
                            Shape{4, 3, 64, 200, {0, 1, 4095, 70000}, 63}})
      cases.push_back(float_vs_double(pairing, sh));
    for (const Shape& sh :
         {Shape{4, 2, 6, 14, {0, 3, 17, 250}, 51}, Shape{1, 1, 2, 2, {9}, 53}, Shape{3, 1, 8, 8, {1, 2, 1000}, 54}})
      cases.push_back(finite_differences(pairing, sh));
  }
  return cases;
}

class RopeOps : public test::OpCaseTest {};
TEST_P(RopeOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, RopeOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(Rope, IdenticalWithOneAndTwoThreads) {
  const int64_t n = 512, H = 4, hd = 32;
  std::vector<int64_t> pos(n);
  std::iota(pos.begin(), pos.end(), 7);
  const auto x0 = random_values(n * H * hd, 71);
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    std::vector<float> x(x0.begin(), x0.end());
    rope_forward<float>(x.data(), pos.data(), n, H, H * hd, params(hd, RopePairing::Halves));
    rope_backward<float>(x.data(), pos.data(), n / 2, H, H * hd, params(hd, RopePairing::Halves));
    results.push_back(x);
  }
  set_num_threads(0);
  EXPECT_EQ(results[0], results[1]);
}

TEST(Rope, RejectsOddHeadDimAndNegativePositions) {
  std::vector<double> x(16, 1.0);
  const std::vector<int64_t> pos{0, 1};
  for (int64_t hd : {3, 5, 0})
    EXPECT_ERROR(rope_forward<double>(x.data(), pos.data(), 2, 1, 8, params(hd, RopePairing::Adjacent)),
                 ErrorKind::Internal, "")
        << "head_dim " << hd;
  EXPECT_ERROR(rope_backward<double>(x.data(), pos.data(), 2, 1, 8, params(7, RopePairing::Halves)),
               ErrorKind::Internal, "");
  const std::vector<int64_t> neg{0, -1};
  EXPECT_ERROR(rope_forward<double>(x.data(), neg.data(), 2, 1, 8, params(8, RopePairing::Adjacent)),
               ErrorKind::Internal, "");
  EXPECT_ERROR(rope_backward<double>(x.data(), neg.data(), 2, 1, 8, params(8, RopePairing::Adjacent)),
               ErrorKind::Internal, "");
  // Nothing was written before the error.
  EXPECT_EQ(x, std::vector<double>(16, 1.0));
  // A row stride smaller than the heads is an error too.
  EXPECT_ERROR(rope_forward<double>(x.data(), pos.data(), 2, 2, 8, params(8, RopePairing::Adjacent)),
               ErrorKind::Internal, "");
}

}  // namespace
}  // namespace tformer
