// Our kernels against an independent outside reference: PyTorch's outputs and autograd gradients,
// stored in fixtures/kernels.json by tools/reference/gen_kernel_fixtures.py (float64, seeded,
// asymmetric inputs; gradients are those of loss = sum(r * y) for the fixture's r, or of
// dloss * mean cross-entropy).
//
// Tolerances (|ours - torch| <= rtol |torch| + atol_scaled max|torch|, per quantity).
// Double: both sides compute in float64 with different but stable formulas and summation orders over
// rows of <= 8 elements, so they agree to a few units in the last place of each quantity's scale
// (observed <= ~5e-16 relative), except where the operation itself amplifies rounding: the
// LayerNorm row with std ~1e-3 around 1 turns the 1e-16 rounding of x - mean into ~1e-13 relative
// (observed 3e-13 on one output). rtol 1e-12 + 1e-13 max-scaled covers that with margin and is
// still 1e6 below any formula slip (wrong eps placement, biased/unbiased variance, a missing mean
// term, tanh-GELU's 0.044715 mistyped all show at >= 1e-6). The max-scaled term serves components
// that are small by cancellation, where a relative error says nothing.
// Float: the float kernels get the fixture's inputs rounded to float (relative 6e-8), so the
// difference is that rounding times each operation's condition number (a few) plus one output
// rounding: observed <= 1e-7 relative, checked at 1e-5. The small-variance LayerNorm row amplifies
// the input rounding by |x| / std ~ 850 (<= 5e-5 relative, observed 1.4e-5): checked at 1e-4.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/activation.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/norm.h"
#include "kernels/softmax.h"
#include "test_util.h"

namespace tformer {
namespace {

using nlohmann::json;

const json& fixture() {
  static const json j = [] {
    std::ifstream in("fixtures/kernels.json");
    if (!in) throw std::runtime_error("cannot open fixtures/kernels.json (tests run from tests/)");
    return json::parse(in);
  }();
  return j;
}

std::vector<double> vec(const json& j, const char* key) { return j.at(key).get<std::vector<double>>(); }

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

template <typename T>
::testing::AssertionResult matches(const std::vector<T>& got, const std::vector<double>& ref, double rtol,
                                   double atol_scaled) {
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  return test::all_close(got.data(), ref.data(), static_cast<int64_t>(ref.size()), rtol, atol_scaled * scale);
}

struct Tol {
  double rtol, atol_scaled;
};
template <typename T>
constexpr Tol kTol = std::is_same_v<T, double> ? Tol{1e-12, 1e-13} : Tol{1e-5, 1e-5};

template <typename T>
void check_softmax(bool log) {
  const json& c = fixture().at(log ? "log_softmax" : "softmax");
  const int64_t rows = c.at("rows"), cols = c.at("cols");
  const auto masked = c.at("masked").get<std::vector<int>>();
  std::vector<T> x = as<T>(vec(c, "x"));
  for (size_t i = 0; i < x.size(); ++i)
    if (masked[i]) x[i] = -std::numeric_limits<T>::infinity();
  const auto r = as<T>(vec(c, "r"));  // r is non-zero at masked slots too: must be ignored
  std::vector<T> y(rows * cols), dx(rows * cols, T(0));
  if (log) {
    log_softmax_forward<T>(y.data(), x.data(), rows, cols);
    log_softmax_backward<T>(dx.data(), r.data(), y.data(), rows, cols);
    for (size_t i = 0; i < y.size(); ++i)
      if (masked[i]) {
        EXPECT_EQ(y[i], -std::numeric_limits<T>::infinity()) << i;
        y[i] = 0;  // the fixture writes 0 there (JSON has no infinity)
      }
  } else {
    softmax_forward<T>(y.data(), x.data(), rows, cols);
    softmax_backward<T>(dx.data(), r.data(), y.data(), rows, cols);
  }
  for (size_t i = 0; i < y.size(); ++i) {
    if (masked[i]) {
      EXPECT_EQ(dx[i], T(0)) << i;
    }
  }
  EXPECT_TRUE(matches(y, vec(c, "y"), kTol<T>.rtol, kTol<T>.atol_scaled));
  EXPECT_TRUE(matches(dx, vec(c, "dx"), kTol<T>.rtol, kTol<T>.atol_scaled));
}

TEST(ReferenceSoftmax, DoubleMatchesTorch) { check_softmax<double>(false); }
TEST(ReferenceSoftmax, FloatMatchesTorch) { check_softmax<float>(false); }
TEST(ReferenceLogSoftmax, DoubleMatchesTorch) { check_softmax<double>(true); }
TEST(ReferenceLogSoftmax, FloatMatchesTorch) { check_softmax<float>(true); }

template <typename T>
void check_layer_norm() {
  const json& c = fixture().at("layer_norm");
  const int64_t rows = c.at("rows"), cols = c.at("cols");
  const T eps = static_cast<T>(c.at("eps").get<double>());
  const auto x = as<T>(vec(c, "x")), w = as<T>(vec(c, "weight")), b = as<T>(vec(c, "bias")), r = as<T>(vec(c, "r"));
  std::vector<T> y(rows * cols), mean(rows), rstd(rows), dx(rows * cols), dw(cols), db(cols);
  layernorm_forward<T>(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), rows, cols, eps);
  layernorm_backward<T>(dx.data(), dw.data(), db.data(), r.data(), x.data(), mean.data(), rstd.data(), w.data(), rows,
                        cols);
  Tol t = kTol<T>;
  if (std::is_same_v<T, float>) {
    // Row 2 has std ~1.2e-3 around 1: the float rounding of x (6e-8 absolute) is up to 5e-5 of
    // its deviations from the mean, which y, rstd, dx and dweight inherit.
    t = Tol{1e-4, 1e-5};
  }
  EXPECT_TRUE(matches(y, vec(c, "y"), t.rtol, t.atol_scaled));
  EXPECT_TRUE(matches(mean, vec(c, "mean"), kTol<T>.rtol, 0));
  EXPECT_TRUE(matches(rstd, vec(c, "rstd"), t.rtol, 0));
  EXPECT_TRUE(matches(dx, vec(c, "dx"), t.rtol, t.atol_scaled));
  EXPECT_TRUE(matches(dw, vec(c, "dweight"), t.rtol, t.atol_scaled));
  EXPECT_TRUE(matches(db, vec(c, "dbias"), kTol<T>.rtol, kTol<T>.atol_scaled));
}

TEST(ReferenceLayerNorm, DoubleMatchesTorch) { check_layer_norm<double>(); }
TEST(ReferenceLayerNorm, FloatMatchesTorch) { check_layer_norm<float>(); }

template <typename T>
void check_rms_norm() {
  const json& c = fixture().at("rms_norm");
  const int64_t rows = c.at("rows"), cols = c.at("cols");
  const T eps = static_cast<T>(c.at("eps").get<double>());
  const auto x = as<T>(vec(c, "x")), w = as<T>(vec(c, "weight")), r = as<T>(vec(c, "r"));
  std::vector<T> y(rows * cols), rstd(rows), dx(rows * cols), dw(cols);
  rmsnorm_forward<T>(y.data(), rstd.data(), x.data(), w.data(), rows, cols, eps);
  rmsnorm_backward<T>(dx.data(), dw.data(), r.data(), x.data(), rstd.data(), w.data(), rows, cols);
  const Tol t = kTol<T>;
  EXPECT_TRUE(matches(y, vec(c, "y"), t.rtol, t.atol_scaled));
  EXPECT_TRUE(matches(rstd, vec(c, "rstd"), t.rtol, 0));
  EXPECT_TRUE(matches(dx, vec(c, "dx"), t.rtol, t.atol_scaled));
  EXPECT_TRUE(matches(dw, vec(c, "dweight"), t.rtol, t.atol_scaled));
}

TEST(ReferenceRmsNorm, DoubleMatchesTorch) { check_rms_norm<double>(); }
TEST(ReferenceRmsNorm, FloatMatchesTorch) { check_rms_norm<float>(); }

template <typename T>
void check_gelu(GeluKind kind) {
  const json& c = fixture().at(kind == GeluKind::Exact ? "gelu_exact" : "gelu_tanh");
  const int64_t n = c.at("n");
  const auto x = as<T>(vec(c, "x")), r = as<T>(vec(c, "r"));
  std::vector<T> y(n), dx(n);
  gelu_forward<T>(y.data(), x.data(), n, kind);
  gelu_backward<T>(dx.data(), r.data(), x.data(), n, kind);
  EXPECT_TRUE(matches(y, vec(c, "y"), kTol<T>.rtol, kTol<T>.atol_scaled));
  EXPECT_TRUE(matches(dx, vec(c, "dx"), kTol<T>.rtol, kTol<T>.atol_scaled));
}

TEST(ReferenceGelu, ExactDoubleMatchesTorch) { check_gelu<double>(GeluKind::Exact); }
TEST(ReferenceGelu, ExactFloatMatchesTorch) { check_gelu<float>(GeluKind::Exact); }
TEST(ReferenceGelu, TanhDoubleMatchesTorch) { check_gelu<double>(GeluKind::Tanh); }
TEST(ReferenceGelu, TanhFloatMatchesTorch) { check_gelu<float>(GeluKind::Tanh); }

template <typename T>
void check_swiglu() {
  const json& c = fixture().at("swiglu");
  const int64_t n = c.at("n");
  const auto a = as<T>(vec(c, "a")), b = as<T>(vec(c, "b")), r = as<T>(vec(c, "r"));
  std::vector<T> y(n), da(n), db(n);
  swiglu_forward<T>(y.data(), a.data(), b.data(), n);
  swiglu_backward<T>(da.data(), db.data(), r.data(), a.data(), b.data(), n);
  EXPECT_TRUE(matches(y, vec(c, "y"), kTol<T>.rtol, kTol<T>.atol_scaled));
  EXPECT_TRUE(matches(da, vec(c, "da"), kTol<T>.rtol, kTol<T>.atol_scaled));
  EXPECT_TRUE(matches(db, vec(c, "db"), kTol<T>.rtol, kTol<T>.atol_scaled));
}

TEST(ReferenceSwiGlu, DoubleMatchesTorch) { check_swiglu<double>(); }
TEST(ReferenceSwiGlu, FloatMatchesTorch) { check_swiglu<float>(); }

template <typename T>
void check_embedding() {
  const json& c = fixture().at("embedding");
  const int64_t n = c.at("n"), vocab = c.at("vocab"), d = c.at("d");
  const auto ids = c.at("ids").get<std::vector<TokenId>>();
  const auto table = as<T>(vec(c, "table")), r = as<T>(vec(c, "r"));
  std::vector<T> y(n * d), dt(vocab * d);
  embedding_forward<T>(y.data(), ids.data(), table.data(), n, vocab, d);
  embedding_backward<T>(dt.data(), r.data(), ids.data(), n, vocab, d);
  EXPECT_TRUE(matches(y, vec(c, "y"), kTol<T>.rtol, 0));
  EXPECT_TRUE(matches(dt, vec(c, "dtable"), kTol<T>.rtol, kTol<T>.atol_scaled));
}

TEST(ReferenceEmbedding, DoubleMatchesTorch) { check_embedding<double>(); }
TEST(ReferenceEmbedding, FloatMatchesTorch) { check_embedding<float>(); }

template <typename T>
void check_cross_entropy() {
  const json& c = fixture().at("cross_entropy");
  const int64_t rows = c.at("rows"), vocab = c.at("vocab");
  const auto targets = c.at("targets").get<std::vector<TokenId>>();
  const auto logits = as<T>(vec(c, "logits"));
  const double dloss = c.at("dloss");
  std::vector<T> row_loss(rows), d(rows * vocab);
  const auto res = cross_entropy_forward<T>(row_loss.data(), logits.data(), targets.data(), rows, vocab);
  cross_entropy_backward<T>(d.data(), logits.data(), targets.data(), rows, vocab, res.count, static_cast<T>(dloss));
  EXPECT_EQ(res.count, c.at("count").get<int64_t>());
  const double loss = c.at("loss");
  // Row 4's logits are ~100: float rounding of them (~4e-6 absolute) moves its loss by as much.
  const double loss_tol = std::is_same_v<T, double> ? 1e-13 : 1e-5;
  EXPECT_NEAR(res.loss, loss, loss_tol);
  EXPECT_TRUE(matches(row_loss, vec(c, "row_loss"), kTol<T>.rtol, loss_tol));
  EXPECT_TRUE(matches(d, vec(c, "dlogits"), kTol<T>.rtol, kTol<T>.atol_scaled));
}

TEST(ReferenceCrossEntropy, DoubleMatchesTorch) { check_cross_entropy<double>(); }
TEST(ReferenceCrossEntropy, FloatMatchesTorch) { check_cross_entropy<float>(); }

}  // namespace
}  // namespace tformer
