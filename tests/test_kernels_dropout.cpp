// Element-wise dropout (kernels/dropout.h) against its definition: element i kept iff
// dropout_kept(key, i, threshold) and then scaled by 1 / (1 - p) in T; the kept fraction against
// the binomial distribution; the same call as its own backward; independence from the thread
// count; p = 0 leaves the tensor untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "core/threads.h"
#include "kernels/dropout.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::as;
using test::random_values;

// The definition, written out: x[i] kept or zeroed, the kept ones times scale rounded to T.
template <typename T>
std::vector<T> by_definition(const std::vector<T>& x, uint64_t key, double p) {
  const uint64_t threshold = dropout_threshold(p);
  const T scale = static_cast<T>(1.0 / (1.0 - p));
  std::vector<T> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = dropout_kept(key, i, threshold) ? x[i] * scale : T(0);
  return y;
}

const test::OpBounds kDropoutFloat{"dropout<float> vs definition", {{"y", {}}}};  // exact
const test::OpBounds kDropoutDouble{"dropout<double> vs definition", {{"y", {}}}};

template <typename T>
test::OpCase definition_case(int64_t n, double p, uint64_t key) {
  const test::OpBounds& op = std::is_same_v<T, float> ? kDropoutFloat : kDropoutDouble;
  return test::compare_case(op, "n=" + std::to_string(n) + " p=" + std::to_string(p), [n, p, key] {
    const std::vector<T> x = as<T>(random_values(n, key + 1, -2.0, 3.0));
    std::vector<T> y = x;
    dropout_apply<T>(y.data(), n, DropoutMask::with_probability(key, p));
    return std::vector<test::Compared>{test::compared("y", y, by_definition(x, key, p))};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (const auto& [n, p] : std::vector<std::pair<int64_t, double>>{{1, 0.5}, {37, 0.1}, {1000, 0.3}, {70000, 0.2}}) {
    cases.push_back(definition_case<float>(n, p, 11 + static_cast<uint64_t>(n)));
    cases.push_back(definition_case<double>(n, p, 13 + static_cast<uint64_t>(n)));
  }
  return cases;
}

class DropoutOps : public test::OpCaseTest {};
TEST_P(DropoutOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, DropoutOps, ::testing::ValuesIn(op_cases()), test::case_name);

TEST(Dropout, KeptFractionIsBinomial) {
  const int64_t n = 200000;
  for (const double p : {0.1, 0.5, 0.9}) {
    std::vector<double> x(n, 1.0);
    dropout_apply<double>(x.data(), n, DropoutMask::with_probability(77, p));
    int64_t kept = 0;
    for (double v : x) {
      if (v != 0) {
        ++kept;
        EXPECT_EQ(v, 1.0 / (1.0 - p));
      }
    }
    const double mean = n * (1 - p), sd = std::sqrt(n * p * (1 - p));
    EXPECT_LT(std::abs(static_cast<double>(kept) - mean), 5 * sd) << "p " << p << ": kept " << kept;
  }
}

TEST(Dropout, ItsOwnBackwardAndTheKeyChoosesTheMask) {
  // y = m * s * x is linear in x with a diagonal Jacobian, so dL/dx = m * s * dL/dy: the same call.
  const int64_t n = 64;
  const std::vector<double> x = random_values(n, 5, -1, 1), dy = random_values(n, 6, -1, 1);
  const DropoutMask mask = DropoutMask::with_probability(9, 0.4);
  std::vector<double> y = x, dx = dy;
  dropout_apply<double>(y.data(), n, mask);
  dropout_apply<double>(dx.data(), n, mask);
  for (int64_t i = 0; i < n; ++i) {
    const double factor = y[i] == 0 ? 0.0 : y[i] / x[i];
    EXPECT_DOUBLE_EQ(dx[i], factor * dy[i]) << i;
  }
  // Another key drops other elements.
  std::vector<double> other = x;
  dropout_apply<double>(other.data(), n, DropoutMask::with_probability(10, 0.4));
  int64_t differ = 0;
  for (int64_t i = 0; i < n; ++i) differ += (other[i] == 0) != (y[i] == 0);
  EXPECT_GT(differ, 0);
}

TEST(Dropout, ProbabilityZeroIsInactiveAndLeavesTheTensorAlone) {
  const DropoutMask off = DropoutMask::with_probability(3, 0.0);
  EXPECT_FALSE(off.active());
  EXPECT_EQ(off.scale, 1.0);
  std::vector<float> x = as<float>(random_values(100, 4, -1, 1));
  const std::vector<float> before = x;
  dropout_apply<float>(x.data(), 100, off);
  EXPECT_EQ(x, before);
}

TEST(Dropout, SameResultWithOneAndTwoThreads) {
  const int64_t n = 100000;  // above the kernel's parallel threshold
  const std::vector<float> x = as<float>(random_values(n, 8, -1, 1));
  const int saved = num_threads();
  std::vector<float> one = x, two = x;
  set_num_threads(1);
  dropout_apply<float>(one.data(), n, DropoutMask::with_probability(21, 0.25));
  set_num_threads(2);
  dropout_apply<float>(two.data(), n, DropoutMask::with_probability(21, 0.25));
  set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), n * sizeof(float)), 0);
}

}  // namespace
}  // namespace tformer
