// The linear layer y = x W^T + b through the op table: the few-row path (2..8 rows: batched decode)
// and its edges against the naive product, with and without bias; the backward against finite
// differences, with and without bias, and with some gradients not requested.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::as;
using test::random_values;

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Against gemm_naive in double: float 1e-5 relative and absolute (K <= 33 terms of size <= 1),
// double 1e-13 (1e-14 for the small bias-free case). The backward of the double kernel against
// central differences of loss = sum(r * y): 1e-6.
const test::OpBounds kLinear{"linear",
                             {{"y<float>", {.rtol = 1e-5, .atol = 1e-5}},
                              {"y<double>", {.rtol = 1e-13, .atol = 1e-13}},
                              {"y<double> without bias", {.rtol = 1e-14, .atol = 1e-14}}},
                             1e-6};

std::string shape_str(int64_t n, int64_t in, int64_t out) {
  std::ostringstream os;
  os << "n=" << n << " in=" << in << " out=" << out;
  return os.str();
}

double weighted_sum(const std::vector<double>& r, const std::vector<double>& y) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += r[i] * y[i];
  return s;
}

// n rows: rows in blocks of four plus a remainder, output rows not a multiple of four, with and
// without bias, against the naive loop; y starts as garbage (overwritten).
test::OpCase few_rows(int64_t n) {
  return test::compare_case(kLinear, "naive n=" + std::to_string(n), [n] {
    std::vector<test::Compared> outputs;
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
          const std::vector<float> x = as<float>(xd), W = as<float>(Wd), b = as<float>(bd);
          std::vector<float> y(n * out, 1e30f);
          linear_forward<float>(y.data(), x.data(), W.data(), bias ? b.data() : nullptr, n, in, out);
          std::vector<double> yd(n * out, 1e30);
          linear_forward<double>(yd.data(), xd.data(), Wd.data(), bias ? bd.data() : nullptr, n, in, out);
          const std::string label = shape_str(n, in, out) + (bias ? " bias" : "");
          const test::Layout at{{{"row", n}, {"o", out}}};
          outputs.push_back(test::compared("y<float>", y, want, at, label));
          outputs.push_back(test::compared("y<double>", yd, want, at, label));
        }
    return outputs;
  });
}

// With bias; the gradient buffers start non-zero (the backward accumulates).
test::OpCase with_bias(int64_t n, int64_t in, int64_t out, uint64_t seed) {
  return test::gradient_case(kLinear, "finite differences " + shape_str(n, in, out), [=] {
    const std::vector<double> x = random_values(n * in, seed), W = random_values(out * in, seed + 1),
                              b = random_values(out, seed + 2), r = random_values(n * out, seed + 3);
    auto loss = [=](const std::vector<std::vector<double>>& v) {
      std::vector<double> y(n * out);
      linear_forward<double>(y.data(), v[0].data(), v[1].data(), v[2].data(), n, in, out);
      return weighted_sum(r, y);
    };
    std::vector<double> dx(n * in, 0.25), dW(out * in, -0.5), db(out, 1.0);
    linear_backward<double>(dx.data(), dW.data(), db.data(), r.data(), x.data(), W.data(), n, in, out);
    for (auto& v : dx) v -= 0.25;
    for (auto& v : dW) v += 0.5;
    for (auto& v : db) v -= 1.0;
    return test::GradientCheck{
        {{"x", x, dx, {{{"row", n}, {"i", in}}}}, {"W", W, dW, {{{"o", out}, {"i", in}}}}, {"b", b, db, {}}}, loss};
  });
}

// No bias: b null in the forward (y = x W^T exactly, no garbage from y's old contents; the naive
// loop as oracle) and db null in the backward; dx and dW still match finite differences.
test::OpCase null_bias(int64_t n, int64_t in, int64_t out, uint64_t seed) {
  test::OpCase c = test::gradient_case(kLinear, "null bias " + shape_str(n, in, out), [=] {
    const std::vector<double> x = random_values(n * in, seed), W = random_values(out * in, seed + 1),
                              r = random_values(n * out, seed + 2);
    auto loss = [=](const std::vector<std::vector<double>>& v) {
      std::vector<double> y(n * out, 1e30);
      linear_forward<double>(y.data(), v[0].data(), v[1].data(), nullptr, n, in, out);
      return weighted_sum(r, y);
    };
    std::vector<double> dx(n * in, 0.5), dW(out * in, -1.5);
    linear_backward<double>(dx.data(), dW.data(), nullptr, r.data(), x.data(), W.data(), n, in, out);
    for (auto& v : dx) v -= 0.5;
    for (auto& v : dW) v += 1.5;
    return test::GradientCheck{{{"x", x, dx, {{{"row", n}, {"i", in}}}}, {"W", W, dW, {{{"o", out}, {"i", in}}}}},
                               loss};
  });
  c.compare = [=] {
    const std::vector<double> x = random_values(n * in, seed), W = random_values(out * in, seed + 1);
    std::vector<double> y(n * out, 1e30), want(n * out);  // garbage: with b null, y is overwritten
    linear_forward<double>(y.data(), x.data(), W.data(), nullptr, n, in, out);
    gemm_naive<double>(want.data(), out, x.data(), in, false, W.data(), in, true, n, out, in);
    return std::vector<test::Compared>{test::compared("y<double> without bias", y, want, {{{"row", n}, {"o", out}}})};
  };
  return c;
}

// dx null or dW null: that gradient is skipped (a write through the null pointer would crash, or
// be reported by the sanitizer build), the requested ones equal the all-requested call bit for
// bit, and the inputs are left untouched. The all-requested call against finite differences.
test::OpCase null_dx_or_dw() {
  return test::gradient_case(kLinear, "null dx or dW " + shape_str(3, 4, 2), [] {
    const int64_t n = 3, in = 4, out = 2;
    std::vector<double> x = random_values(n * in, 61), W = random_values(out * in, 62), b = random_values(out, 63);
    const std::vector<double> dy = random_values(n * out, 64);
    auto loss = [=](const std::vector<std::vector<double>>& v) {
      std::vector<double> y(n * out);
      linear_forward<double>(y.data(), v[0].data(), v[1].data(), v[2].data(), n, in, out);
      return weighted_sum(dy, y);
    };
    std::vector<double> dx_all(n * in, 0.0), dW_all(out * in, 0.0), db_all(out, 0.0);
    linear_backward<double>(dx_all.data(), dW_all.data(), db_all.data(), dy.data(), x.data(), W.data(), n, in, out);
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
    return test::GradientCheck{{{"x", x, dx_all, {{{"row", n}, {"i", in}}}},
                                {"W", W, dW_all, {{{"o", out}, {"i", in}}}},
                                {"b", b, db_all, {}}},
                               loss};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (int64_t n = 1; n <= 9; ++n) cases.push_back(few_rows(n));
  cases.push_back(with_bias(3, 4, 5, 21));
  cases.push_back(with_bias(1, 1, 1, 25));
  cases.push_back(with_bias(9, 3, 2, 29));
  cases.push_back(null_bias(4, 3, 5, 51));
  cases.push_back(null_bias(2, 7, 3, 55));
  cases.push_back(null_dx_or_dw());
  return cases;
}

class LinearOps : public test::OpCaseTest {};
TEST_P(LinearOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, LinearOps, ::testing::ValuesIn(op_cases()), test::case_name);

}  // namespace
}  // namespace tformer
