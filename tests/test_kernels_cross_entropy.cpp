// Cross-entropy: target shifting, a hand-worked loss with an ignored row, large logits, the
// count-0 policy, target range errors; the op table: float against double, the backward against
// finite differences, PyTorch's outputs and gradients (fixtures/kernels.json); thread-count
// independence.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernel_fixtures.h"
#include "kernels/cross_entropy.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::as;
using test::random_values;

TEST(CrossEntropy, ShiftTargets) {
  // tokens [2, 4]: [5, 6, 7, 0] and [8, 9, 0, 0]; targets = tokens shifted left by one.
  const std::vector<TokenId> tokens{5, 6, 7, 0, 8, 9, 0, 0};
  std::vector<TokenId> targets(6);
  shift_targets(targets.data(), tokens.data(), 2, 3);
  EXPECT_EQ(targets, (std::vector<TokenId>{6, 7, 0, 9, 0, 0}));
  // pad_id 0: padded targets become ignore_index.
  shift_targets(targets.data(), tokens.data(), 2, 3, 0);
  EXPECT_EQ(targets, (std::vector<TokenId>{6, 7, -100, 9, -100, -100}));
  shift_targets(targets.data(), tokens.data(), 2, 3, 0, -1);
  EXPECT_EQ(targets, (std::vector<TokenId>{6, 7, -1, 9, -1, -1}));
}

TEST(CrossEntropy, HandComputedWithIgnoredRow) {
  // vocab 3.
  // Row 0: logits [1, 2, 3], target 2. softmax = [0.09003057317038046, 0.24472847105479767,
  //   0.6652409557748219]; loss = log-sum-exp - 3 = 3.40760596444438 - 3 = 0.40760596444438.
  // Row 1: target -100, ignored (its logits [5, -7, 0.5] play no part).
  // Row 2: logits [0, 0, ln 2], target 0: exp = [1, 1, 2], p = [1/4, 1/4, 1/2]; loss = ln 4 = 1.3862943611198906.
  // Mean over the 2 counted rows: (0.40760596444438 + 1.3862943611198906) / 2 = 0.8969501627821353.
  const std::vector<double> logits{1, 2, 3, 5, -7, 0.5, 0, 0, std::log(2.0)};
  const std::vector<TokenId> targets{2, kIgnoreIndex, 0};
  std::vector<double> row_loss(3, 9.0);
  const CrossEntropyResult res = cross_entropy_forward<double>(row_loss.data(), logits.data(), targets.data(), 3, 3);
  EXPECT_EQ(res.count, 2);
  EXPECT_NEAR(res.loss, 0.8969501627821353, 1e-15);
  EXPECT_TRUE(all_close(row_loss, std::vector<double>{0.40760596444438, 0, 1.3862943611198906}, 1e-14, 0));
  // Gradient (dloss = 1, count 2): (p - onehot) / 2 per counted row; zero for row 1.
  //   row 0: ([0.0900.., 0.2447.., 0.6652..] - [0, 0, 1]) / 2 = [0.04501528658519023, 0.12236423552739883,
  //   -0.16737952211258905] row 2: ([0.25, 0.25, 0.5] - [1, 0, 0]) / 2 = [-0.375, 0.125, 0.25]
  std::vector<double> d(9, 1.0);  // starts at 1: accumulates
  cross_entropy_backward<double>(d.data(), logits.data(), targets.data(), 3, 3, res.count);
  for (auto& v : d) v -= 1.0;
  const std::vector<double> expected{
      0.04501528658519023, 0.12236423552739883, -0.16737952211258905, 0, 0, 0, -0.375, 0.125, 0.25};
  EXPECT_TRUE(all_close(d, expected, 1e-14, 1e-15));
  // Float: same numbers to float precision; the loss is a double accumulated from float logits.
  const auto lf = as<float>(logits);
  std::vector<float> rlf(3);
  const CrossEntropyResult rf = cross_entropy_forward<float>(rlf.data(), lf.data(), targets.data(), 3, 3);
  EXPECT_EQ(rf.count, 2);
  EXPECT_NEAR(rf.loss, 0.8969501627821353, 1e-7);
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  // Adding 1000 to a row changes nothing: [1000, 1001, 1003] target 1 has the loss of [0, 1, 3]
  // target 1 = 3 + log(1 + e^-3 + e^-2) - 1 = 2.1698460617088...; exp(1003) would overflow.
  const std::vector<float> big{1000, 1001, 1003}, small{0, 1, 3};
  const TokenId t = 1;
  const auto a = cross_entropy_forward<float>(nullptr, big.data(), &t, 1, 3);
  const auto b = cross_entropy_forward<float>(nullptr, small.data(), &t, 1, 3);
  EXPECT_TRUE(std::isfinite(a.loss));
  EXPECT_NEAR(a.loss, 3 + std::log(1 + std::exp(-3.0) + std::exp(-2.0)) - 1, 1e-12);
  EXPECT_NEAR(a.loss, b.loss, 1e-12);
  std::vector<float> d(3, 0.0f);
  cross_entropy_backward<float>(d.data(), big.data(), &t, 1, 3, 1);
  for (float v : d) EXPECT_TRUE(std::isfinite(v));
  EXPECT_NEAR(d[0] + d[1] + d[2], 0.0, 1e-7);  // softmax sums to 1, the one-hot to 1
}

TEST(CrossEntropy, NoCountedRowGivesZeroLossAndZeroGradient) {
  const std::vector<double> logits{0.5, -1, 2, 3, 0.25, -0.5};
  const std::vector<TokenId> targets{kIgnoreIndex, kIgnoreIndex};
  std::vector<double> row_loss(2, 4.0);
  const auto res = cross_entropy_forward<double>(row_loss.data(), logits.data(), targets.data(), 2, 3);
  EXPECT_EQ(res.count, 0);
  EXPECT_EQ(res.loss, 0.0);
  EXPECT_EQ(row_loss, (std::vector<double>{0, 0}));
  std::vector<double> d(6, 0.75);
  cross_entropy_backward<double>(d.data(), logits.data(), targets.data(), 2, 3, res.count);
  EXPECT_EQ(d, std::vector<double>(6, 0.75));
}

TEST(CrossEntropy, TargetOutsideVocabThrowsNamingRow) {
  const std::vector<float> logits(3 * 4, 0.5f);
  for (const auto& c : {std::tuple{std::vector<TokenId>{1, 4, 0}, "row 1", "target 4"},
                        std::tuple{std::vector<TokenId>{kIgnoreIndex, 2, -3}, "row 2", "target -3"}}) {
    // Plain references, not a structured binding: EXPECT_ERROR's lambda captures them, which
    // clang before 16 (the parser of clang-tidy 14) refuses for a binding.
    const std::vector<TokenId>& targets = std::get<0>(c);
    const char* row = std::get<1>(c);
    const char* tgt = std::get<2>(c);
    EXPECT_ERROR(cross_entropy_forward<float>(nullptr, logits.data(), targets.data(), 3, 4), ErrorKind::BadInput, row,
                 tgt);
    std::vector<float> d(12, 0.0f);
    EXPECT_ERROR(cross_entropy_backward<float>(d.data(), logits.data(), targets.data(), 3, 4, 2), ErrorKind::BadInput,
                 row, tgt);
    EXPECT_EQ(d, std::vector<float>(12, 0.0f));
  }
  // ignore_index itself is outside [0, vocab) but never an error.
  const std::vector<TokenId> ok{kIgnoreIndex, 3, 0};
  EXPECT_NO_THROW(cross_entropy_forward<float>(nullptr, logits.data(), ok.data(), 3, 4));
}

// ---------------------------------------------------------------------------------------------
// The op table.
//
// Float against double on the same float-rounded logits: both accumulate in double; the float
// path only rounds its outputs once (2e-7 relative; 1e-9 absolute for gradients near 0). Against
// the unrounded double logits: |dloss/dlogit| <= 1, rounding 6e-8 relative of |x| <= 5: 1e-6.
// The backward of the double kernel against central differences of dloss * mean loss: 1e-6.
const test::OpBounds kCrossEntropy{"cross_entropy",
                                   {{"loss", {.atol = 1e-12}},
                                    {"row_loss", {.rtol = 2e-7}},
                                    {"dlogits", {.rtol = 2e-7, .atol = 1e-9}},
                                    {"loss, unrounded logits", {.atol = 1e-6}}},
                                   1e-6};
// PyTorch's outputs and gradients (kernel_fixtures.h has the bounds' reasons). The fixture's row 4
// has logits ~100: float rounding of them (~4e-6 absolute) moves its loss by as much: the losses
// are held to 1e-5 absolute in float (1e-13 in double), the per-row ones relative to the largest.
const test::OpBounds kCrossEntropyTorchDouble{"cross_entropy<double> vs torch",
                                              {{"loss", {.atol = 1e-13}},
                                               {"row_loss", {.rtol = test::kTorchDouble.rtol, .atol_of_max = 1e-13}},
                                               {"dlogits", test::kTorchDouble}}};
const test::OpBounds kCrossEntropyTorchFloat{"cross_entropy<float> vs torch",
                                             {{"loss", {.atol = 1e-5}},
                                              {"row_loss", {.rtol = test::kTorchFloat.rtol, .atol_of_max = 1e-5}},
                                              {"dlogits", test::kTorchFloat}}};

// Targets for `rows` rows of `vocab` logits: every `ignore_every`-th row (from row 3) ignored.
std::vector<TokenId> some_targets(int64_t rows, int64_t vocab, int64_t ignore_every, int64_t mul) {
  std::vector<TokenId> targets(rows);
  for (int64_t r = 0; r < rows; ++r)
    targets[r] = r % ignore_every == 3 ? kIgnoreIndex : static_cast<TokenId>((r * mul) % vocab);
  return targets;
}

test::OpCase float_vs_double(int64_t rows, int64_t vocab, uint64_t seed) {
  return test::compare_case(
      kCrossEntropy, "float vs double rows=" + std::to_string(rows) + " vocab=" + std::to_string(vocab),
      [rows, vocab, seed] {
        const auto logits = random_values(rows * vocab, seed, -5.0, 5.0);
        const std::vector<TokenId> targets = some_targets(rows, vocab, 5, 11);
        const auto lf = as<float>(logits);
        const auto lw = as<double>(lf);  // same float-rounded logits for both paths
        std::vector<double> rl(rows), d(rows * vocab);
        std::vector<float> rlf(rows), df(rows * vocab);
        const auto res = cross_entropy_forward<double>(rl.data(), lw.data(), targets.data(), rows, vocab);
        const auto resf = cross_entropy_forward<float>(rlf.data(), lf.data(), targets.data(), rows, vocab);
        cross_entropy_backward<double>(d.data(), lw.data(), targets.data(), rows, vocab, res.count, 1.3);
        cross_entropy_backward<float>(df.data(), lf.data(), targets.data(), rows, vocab, resf.count, 1.3f);
        EXPECT_EQ(res.count, resf.count);
        const auto exact = cross_entropy_forward<double>(nullptr, logits.data(), targets.data(), rows, vocab);
        const test::Layout at{{{"row", rows}, {"v", vocab}}};
        return std::vector<test::Compared>{
            test::compared("loss", std::vector<double>{resf.loss}, std::vector<double>{res.loss}),
            test::compared("row_loss", rlf, rl, {{{"row", rows}}}), test::compared("dlogits", df, d, at),
            test::compared("loss, unrounded logits", std::vector<double>{resf.loss}, std::vector<double>{exact.loss})};
      });
}

// loss functional: dloss * mean loss; the gradient buffer starts non-zero (the backward
// accumulates); an ignored row's gradient is exactly 0 both ways.
test::OpCase finite_differences(int64_t rows, int64_t vocab, const std::vector<TokenId>& targets, uint64_t seed) {
  return test::gradient_case(
      kCrossEntropy, "finite differences rows=" + std::to_string(rows) + " vocab=" + std::to_string(vocab),
      [rows, vocab, targets, seed] {
        const std::vector<double> logits = random_values(rows * vocab, seed, -3.0, 4.0);
        const double dloss = 0.7;
        auto loss = [=](const std::vector<std::vector<double>>& in) {
          return dloss * cross_entropy_forward<double>(nullptr, in[0].data(), targets.data(), rows, vocab).loss;
        };
        const int64_t count = cross_entropy_forward<double>(nullptr, logits.data(), targets.data(), rows, vocab).count;
        int64_t counted = 0;
        for (TokenId t : targets) counted += t != kIgnoreIndex;
        EXPECT_EQ(count, counted);
        std::vector<double> d(rows * vocab, -0.5);
        cross_entropy_backward<double>(d.data(), logits.data(), targets.data(), rows, vocab, count, dloss);
        for (auto& v : d) v += 0.5;
        for (int64_t r = 0; r < rows; ++r)
          if (targets[r] == kIgnoreIndex) {
            for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(d[r * vocab + j], 0.0) << "row " << r;
          }
        return test::GradientCheck{{{"logits", logits, d, {{{"row", rows}, {"v", vocab}}}}}, loss};
      });
}

// PyTorch's outputs and gradients for the fixture's inputs, in T.
template <typename T>
test::OpCase torch_case() {
  return test::compare_case(
      std::is_same_v<T, double> ? kCrossEntropyTorchDouble : kCrossEntropyTorchFloat, "fixture", [] {
        const auto& c = test::kernel_fixture("cross_entropy");
        const int64_t rows = c.at("rows"), vocab = c.at("vocab");
        const auto targets = c.at("targets").get<std::vector<TokenId>>();
        const auto logits = as<T>(test::fixture_values(c, "logits"));
        const double dloss = c.at("dloss");
        std::vector<T> row_loss(rows), d(rows * vocab);
        const auto res = cross_entropy_forward<T>(row_loss.data(), logits.data(), targets.data(), rows, vocab);
        cross_entropy_backward<T>(d.data(), logits.data(), targets.data(), rows, vocab, res.count,
                                  static_cast<T>(dloss));
        EXPECT_EQ(res.count, c.at("count").get<int64_t>());
        return std::vector<test::Compared>{
            test::compared("loss", std::vector<double>{res.loss}, std::vector<double>{c.at("loss").get<double>()}),
            test::compared("row_loss", row_loss, test::fixture_values(c, "row_loss"), {{{"row", rows}}}),
            test::compared("dlogits", d, test::fixture_values(c, "dlogits"), {{{"row", rows}, {"v", vocab}}})};
      });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (auto [rows, vocab, seed] :
       {std::tuple<int64_t, int64_t, uint64_t>{12, 29, 211}, {1, 1, 212}, {5, 130, 213}, {33, 7, 214}})
    cases.push_back(float_vs_double(rows, vocab, seed));
  cases.push_back(finite_differences(6, 5, {4, 0, kIgnoreIndex, 2, 2, 1}, 201));
  cases.push_back(finite_differences(1, 1, {0}, 202));
  cases.push_back(finite_differences(3, 17, {16, kIgnoreIndex, 5}, 203));
  cases.push_back(finite_differences(4, 2, {1, 0, 0, 1}, 204));
  cases.push_back(torch_case<double>());
  cases.push_back(torch_case<float>());
  return cases;
}

class CrossEntropyOps : public test::OpCaseTest {};
TEST_P(CrossEntropyOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, CrossEntropyOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(CrossEntropy, SameResultWithOneAndTwoThreads) {
  const int64_t rows = 300, vocab = 130;  // 39000 elements: above the 2^15 threshold
  const auto logits = as<float>(random_values(rows * vocab, 221, -6.0, 6.0));
  std::vector<TokenId> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 7 == 0 ? kIgnoreIndex : static_cast<TokenId>((r * 37) % vocab);
  auto run = [&](int threads, std::vector<float>& rl, std::vector<float>& d) {
    set_num_threads(threads);
    const auto res = cross_entropy_forward<float>(rl.data(), logits.data(), targets.data(), rows, vocab);
    cross_entropy_backward<float>(d.data(), logits.data(), targets.data(), rows, vocab, res.count);
    return res;
  };
  std::vector<float> rl1(rows), rl2(rows), d1(rows * vocab, 0.5f), d2(rows * vocab, 0.5f);
  const auto one = run(1, rl1, d1), two = run(2, rl2, d2);
  set_num_threads(0);
  EXPECT_EQ(one.loss, two.loss);  // bit-identical, not merely close
  EXPECT_EQ(one.count, two.count);
  EXPECT_EQ(rl1, rl2);
  EXPECT_EQ(d1, d2);
}

}  // namespace
}  // namespace tformer
