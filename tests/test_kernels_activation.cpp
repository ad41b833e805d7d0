// GELU (exact erf form and GPT-2 tanh form) and SwiGLU: known values; the op table: float against
// double, the backward against finite differences, PyTorch's outputs and gradients
// (fixtures/kernels.json); thread-count independence.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/threads.h"
#include "kernel_fixtures.h"
#include "kernels/activation.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::as;
using test::random_values;

TEST(Gelu, ExactFormKnownValues) {
  // gelu(x) = x Phi(x) with the standard normal CDF from tables:
  //   Phi(1) = 0.8413447460685429, Phi(2) = 0.9772498680518208, Phi(0.5) = 0.6914624612740131,
  //   Phi(-1) = 1 - Phi(1), Phi(-3) = 1 - 0.9986501019683699 = 0.0013498980316301.
  const std::vector<double> x{1, -1, 2, 0.5, -3, 0};
  const std::vector<double> expected{0.8413447460685429,  -0.15865525393145707, 1.9544997361036416,
                                     0.34573123063700656, -0.0040496940948903,  0};
  std::vector<double> y(x.size());
  gelu_forward<double>(y.data(), x.data(), 6, GeluKind::Exact);
  EXPECT_TRUE(all_close(y, expected, 1e-14, 1e-17));
  std::vector<float> yf(x.size());
  const auto xf = as<float>(x);
  gelu_forward<float>(yf.data(), xf.data(), 6, GeluKind::Exact);
  EXPECT_TRUE(all_close(yf, expected, 1e-6, 1e-9));
  // gelu'(x) = Phi(x) + x phi(x): at 0, 1/2; at 1, 0.8413447460685429 + exp(-1/2)/sqrt(2 pi)
  //   = 0.8413447460685429 + 0.24197072451914337 = 1.0833154705876864.
  const std::vector<double> at{0.0, 1.0}, dy{1.0, 1.0};
  std::vector<double> dx(2, 0.0);
  gelu_backward<double>(dx.data(), dy.data(), at.data(), 2, GeluKind::Exact);
  EXPECT_NEAR(dx[0], 0.5, 1e-16);
  EXPECT_NEAR(dx[1], 1.0833154705876864, 1e-15);
}

TEST(Gelu, TanhFormKnownValues) {
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), evaluated independently with Python's math
  // module; e.g. x = 1: sqrt(2/pi) * 1.044715 = 0.8335619689...; tanh = 0.6823839812...;
  // 0.5 * 1.6823839812 = 0.8411919906082768.
  const std::vector<double> x{1, -1, 2, 0.5, -3, 0};
  const std::vector<double> expected{0.8411919906082768,  -0.15880800939172324,   1.954597694087775,
                                     0.34571400982514394, -0.0036373920817729943, 0};
  std::vector<double> y(x.size());
  gelu_forward<double>(y.data(), x.data(), 6, GeluKind::Tanh);
  EXPECT_TRUE(all_close(y, expected, 1e-14, 1e-17));
  // The two forms are different functions, close on [-3, 3] (within 5e-4 here), not equal.
  std::vector<double> exact(x.size());
  gelu_forward<double>(exact.data(), x.data(), 6, GeluKind::Exact);
  EXPECT_TRUE(all_close(y, exact, 0, 5e-4));
  EXPECT_GT(std::abs(y[4] - exact[4]), 1e-4);
  // gelu_tanh'(0) = 1/2.
  const double zero = 0, one = 1;
  double d = 0;
  gelu_backward<double>(&d, &one, &zero, 1, GeluKind::Tanh);
  EXPECT_EQ(d, 0.5);
}

TEST(SwiGlu, HandComputedValues) {
  // silu(a) = a sigmoid(a). sigmoid(ln 3) = 1/(1 + 1/3) = 3/4; sigmoid(-ln 3) = 1/4.
  //   a = ln 3,  b = 2:    y = 2 * 0.75 ln 3 = 1.6479184330021646
  //   a = -ln 3, b = -1:   y = -1 * (-ln 3 / 4) = 0.27465307216702745
  //   a = 0,     b = 5:    y = 0
  //   a = 40,    b = 0.5:  sigmoid(40) = 1 - 4.2e-18 rounds to 1, y = 20
  //   a = -40,   b = 0.5:  silu = -40 e^-40 / (1 + e^-40) = -1.6993417021166355e-16, y = half of it
  const double ln3 = std::log(3.0);
  const std::vector<double> a{ln3, -ln3, 0, 40, -40}, b{2, -1, 5, 0.5, 0.5};
  const std::vector<double> expected{1.6479184330021646, 0.27465307216702745, 0, 20, -8.496708510583178e-17};
  std::vector<double> y(5);
  swiglu_forward<double>(y.data(), a.data(), b.data(), 5);
  EXPECT_TRUE(all_close(y, expected, 1e-15, 0));
  // Gradient at a = ln 3, b = 2, dy = 1:
  //   silu'(a) = s + a s (1 - s) = 0.75 + 0.1875 ln 3, da = b silu'(a) = 1.9119796082505411;
  //   db = silu(a) = 0.75 ln 3 = 0.8239592165010823.
  const double dy = 1;
  double da = 0, db = 0;
  swiglu_backward<double>(&da, &db, &dy, a.data(), b.data(), 1);
  EXPECT_NEAR(da, 1.9119796082505411, 1e-15);
  EXPECT_NEAR(db, 0.8239592165010823, 1e-15);
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float against double. The double path gets the float-rounded inputs widened, so only the
// kernels' arithmetic differs: the float path computes in double and rounds once, so 2 ulp (rtol
// 2.4e-7) would do; 1e-6 relative and 1e-7 absolute (for values near 0) leave margin. And against
// the double kernel on the unrounded inputs (what a float model sees): the rounding of x (relative
// 6e-8, |x| <= 6, |gelu'| <= 1.2) moves y by < 1e-6 absolute. Gradients of the double kernels
// against central differences: 1e-6.
constexpr test::Bound kFloatVsDouble{.rtol = 1e-6, .atol = 1e-7};
const test::OpBounds kGelu{
    "gelu",
    {{"y", kFloatVsDouble}, {"dx", kFloatVsDouble}, {"y, unrounded inputs", {.rtol = 1e-6, .atol = 1e-6}}},
    1e-6};
const test::OpBounds kGeluTanh{"gelu_tanh", {{"y", kFloatVsDouble}, {"dx", kFloatVsDouble}}, 1e-6};
const test::OpBounds kSwiGlu{"swiglu", {{"y", kFloatVsDouble}, {"da", kFloatVsDouble}, {"db", kFloatVsDouble}}, 1e-6};
// PyTorch's outputs and gradients (kernel_fixtures.h has the bounds' reasons).
const test::OpBounds kGeluTorchDouble{"gelu<double> vs torch", {{"y", test::kTorchDouble}, {"dx", test::kTorchDouble}}};
const test::OpBounds kGeluTorchFloat{"gelu<float> vs torch", {{"y", test::kTorchFloat}, {"dx", test::kTorchFloat}}};
const test::OpBounds kGeluTanhTorchDouble{"gelu_tanh<double> vs torch",
                                          {{"y", test::kTorchDouble}, {"dx", test::kTorchDouble}}};
const test::OpBounds kGeluTanhTorchFloat{"gelu_tanh<float> vs torch",
                                         {{"y", test::kTorchFloat}, {"dx", test::kTorchFloat}}};
const test::OpBounds kSwiGluTorchDouble{
    "swiglu<double> vs torch", {{"y", test::kTorchDouble}, {"da", test::kTorchDouble}, {"db", test::kTorchDouble}}};
const test::OpBounds kSwiGluTorchFloat{
    "swiglu<float> vs torch", {{"y", test::kTorchFloat}, {"da", test::kTorchFloat}, {"db", test::kTorchFloat}}};

const test::OpBounds& gelu_op(GeluKind kind) { return kind == GeluKind::Exact ? kGelu : kGeluTanh; }

double weighted_sum(const std::vector<double>& r, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
  return s;
}

test::OpCase gelu_float_vs_double(GeluKind kind, int64_t n, uint64_t seed) {
  return test::compare_case(gelu_op(kind), "float vs double n=" + std::to_string(n), [kind, n, seed] {
    const auto x = random_values(n, seed, -6.0, 6.0), dy = random_values(n, seed + 2, -1.0, 1.0);
    const auto xf = as<float>(x), dyf = as<float>(dy);
    const auto xw = as<double>(xf), dyw = as<double>(dyf);
    std::vector<double> y(n), dx(n), yd(n);
    std::vector<float> yf(n), dxf(n);
    gelu_forward<double>(y.data(), xw.data(), n, kind);
    gelu_backward<double>(dx.data(), dyw.data(), xw.data(), n, kind);
    gelu_forward<float>(yf.data(), xf.data(), n, kind);
    gelu_backward<float>(dxf.data(), dyf.data(), xf.data(), n, kind);
    std::vector<test::Compared> out{test::compared("y", yf, y), test::compared("dx", dxf, dx)};
    if (kind == GeluKind::Exact) {
      gelu_forward<double>(yd.data(), x.data(), n, kind);
      out.push_back(test::compared("y, unrounded inputs", yf, yd));
    }
    return out;
  });
}

test::OpCase swiglu_float_vs_double(int64_t n, uint64_t seed) {
  return test::compare_case(kSwiGlu, "float vs double n=" + std::to_string(n), [n, seed] {
    const auto af = as<float>(random_values(n, seed, -6.0, 6.0)), bf = as<float>(random_values(n, seed + 1, -2.0, 2.0)),
               dyf = as<float>(random_values(n, seed + 2, -1.0, 1.0));
    const auto aw = as<double>(af), bw = as<double>(bf), dyw = as<double>(dyf);
    std::vector<double> y(n), da(n), db(n);
    std::vector<float> yf(n), daf(n), dbf(n);
    swiglu_forward<double>(y.data(), aw.data(), bw.data(), n);
    swiglu_backward<double>(da.data(), db.data(), dyw.data(), aw.data(), bw.data(), n);
    swiglu_forward<float>(yf.data(), af.data(), bf.data(), n);
    swiglu_backward<float>(daf.data(), dbf.data(), dyf.data(), af.data(), bf.data(), n);
    return std::vector<test::Compared>{test::compared("y", yf, y), test::compared("da", daf, da),
                                       test::compared("db", dbf, db)};
  });
}

// loss = sum(r * y); the gradient buffers start non-zero (the backward accumulates).
test::OpCase gelu_finite_differences(GeluKind kind, int64_t n, uint64_t seed) {
  return test::gradient_case(gelu_op(kind), "finite differences n=" + std::to_string(n), [kind, n, seed] {
    const std::vector<double> x = random_values(n, seed, -4.0, 3.0), r = random_values(n, seed + 1, -1.0, 2.0);
    auto loss = [kind, n, r](const std::vector<std::vector<double>>& in) {
      std::vector<double> y(n);
      gelu_forward<double>(y.data(), in[0].data(), n, kind);
      return weighted_sum(r, y);
    };
    std::vector<double> dx(n, 0.125);
    gelu_backward<double>(dx.data(), r.data(), x.data(), n, kind);
    for (auto& v : dx) v -= 0.125;
    return test::GradientCheck{{{"x", x, dx, {}}}, loss};
  });
}

test::OpCase swiglu_finite_differences(int64_t n, uint64_t seed) {
  return test::gradient_case(kSwiGlu, "finite differences n=" + std::to_string(n), [n, seed] {
    const std::vector<double> a = random_values(n, seed, -5.0, 4.0), b = random_values(n, seed + 1, -2.0, 1.5);
    const std::vector<double> r = random_values(n, seed + 2, -1.0, 2.0);
    auto loss = [n, r](const std::vector<std::vector<double>>& in) {
      std::vector<double> y(n);
      swiglu_forward<double>(y.data(), in[0].data(), in[1].data(), n);
      return weighted_sum(r, y);
    };
    std::vector<double> da(n, 0.5), db(n, -0.25);
    swiglu_backward<double>(da.data(), db.data(), r.data(), a.data(), b.data(), n);
    for (auto& v : da) v -= 0.5;
    for (auto& v : db) v += 0.25;
    return test::GradientCheck{{{"a", a, da, {}}, {"b", b, db, {}}}, loss};
  });
}

// PyTorch's outputs and gradients for the fixture's inputs, in T.
template <typename T>
test::OpCase gelu_torch(GeluKind kind) {
  const bool dbl = std::is_same_v<T, double>;
  const test::OpBounds& op = kind == GeluKind::Exact ? (dbl ? kGeluTorchDouble : kGeluTorchFloat)
                                                     : (dbl ? kGeluTanhTorchDouble : kGeluTanhTorchFloat);
  return test::compare_case(op, "fixture", [kind] {
    const auto& c = test::kernel_fixture(kind == GeluKind::Exact ? "gelu_exact" : "gelu_tanh");
    const int64_t n = c.at("n");
    const auto x = as<T>(test::fixture_values(c, "x")), r = as<T>(test::fixture_values(c, "r"));
    std::vector<T> y(n), dx(n);
    gelu_forward<T>(y.data(), x.data(), n, kind);
    gelu_backward<T>(dx.data(), r.data(), x.data(), n, kind);
    return std::vector<test::Compared>{test::compared("y", y, test::fixture_values(c, "y")),
                                       test::compared("dx", dx, test::fixture_values(c, "dx"))};
  });
}

template <typename T>
test::OpCase swiglu_torch() {
  return test::compare_case(std::is_same_v<T, double> ? kSwiGluTorchDouble : kSwiGluTorchFloat, "fixture", [] {
    const auto& c = test::kernel_fixture("swiglu");
    const int64_t n = c.at("n");
    const auto a = as<T>(test::fixture_values(c, "a")), b = as<T>(test::fixture_values(c, "b")),
               r = as<T>(test::fixture_values(c, "r"));
    std::vector<T> y(n), da(n), db(n);
    swiglu_forward<T>(y.data(), a.data(), b.data(), n);
    swiglu_backward<T>(da.data(), db.data(), r.data(), a.data(), b.data(), n);
    return std::vector<test::Compared>{test::compared("y", y, test::fixture_values(c, "y")),
                                       test::compared("da", da, test::fixture_values(c, "da")),
                                       test::compared("db", db, test::fixture_values(c, "db"))};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (GeluKind kind : {GeluKind::Exact, GeluKind::Tanh}) {
    for (auto [n, seed] : {std::pair<int64_t, uint64_t>{257, 151}, {1, 154}, {16, 155}, {1000, 156}})
      cases.push_back(gelu_float_vs_double(kind, n, seed));
    for (auto [n, seed] : {std::pair<int64_t, uint64_t>{23, 131}, {1, 133}, {5, 134}})
      cases.push_back(gelu_finite_differences(kind, n, seed));
    cases.push_back(gelu_torch<double>(kind));
    cases.push_back(gelu_torch<float>(kind));
  }
  for (auto [n, seed] : {std::pair<int64_t, uint64_t>{257, 151}, {1, 154}, {16, 155}, {1000, 156}})
    cases.push_back(swiglu_float_vs_double(n, seed));
  for (auto [n, seed] : {std::pair<int64_t, uint64_t>{19, 141}, {1, 144}, {7, 145}})
    cases.push_back(swiglu_finite_differences(n, seed));
  cases.push_back(swiglu_torch<double>());
  cases.push_back(swiglu_torch<float>());
  return cases;
}

class ActivationOps : public test::OpCaseTest {};
TEST_P(ActivationOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, ActivationOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(Activation, SameResultWithOneAndTwoThreads) {
  const int64_t n = 40000;  // above the 2^15-element parallel threshold
  const auto x = as<float>(random_values(n, 161, -5.0, 5.0)), b = as<float>(random_values(n, 162)),
             dy = as<float>(random_values(n, 163));
  auto run = [&](int threads) {
    set_num_threads(threads);
    std::vector<float> ge(n), gt(n), dge(n, 0.5f), dgt(n, 0.5f), sy(n), da(n, 0.5f), db(n, 0.5f);
    gelu_forward<float>(ge.data(), x.data(), n, GeluKind::Exact);
    gelu_forward<float>(gt.data(), x.data(), n, GeluKind::Tanh);
    gelu_backward<float>(dge.data(), dy.data(), x.data(), n, GeluKind::Exact);
    gelu_backward<float>(dgt.data(), dy.data(), x.data(), n, GeluKind::Tanh);
    swiglu_forward<float>(sy.data(), x.data(), b.data(), n);
    swiglu_backward<float>(da.data(), db.data(), dy.data(), x.data(), b.data(), n);
    return std::vector<std::vector<float>>{ge, gt, dge, dgt, sy, da, db};
  };
  const auto one = run(1), two = run(2);
  set_num_threads(0);
  for (size_t k = 0; k < one.size(); ++k) EXPECT_EQ(one[k], two[k]) << "output " << k;
}

}  // namespace
}  // namespace tformer
