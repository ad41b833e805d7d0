// The element-wise fills, copies and sums (kernels/elementwise.h) against plain loops, exactly, on
// sizes below and above the parallel threshold, with y aliasing an input of add.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/elementwise.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::as;
using test::random_values;

const test::OpBounds kElementwise{"elementwise vs plain loops", {{"zero", {}}, {"copy", {}}, {"add", {}}}};  // exact

template <typename T>
test::OpCase plain_case(int64_t n) {
  return test::compare_case(
      kElementwise, std::string(sizeof(T) == 4 ? "float" : "double") + " n=" + std::to_string(n), [n] {
        const std::vector<T> a = as<T>(random_values(n, 1, -1, 1));
        const std::vector<T> b = as<T>(random_values(n, 2, -3, 2));
        std::vector<T> z = a, c(static_cast<size_t>(n), T(7)), s(static_cast<size_t>(n));
        std::vector<T> in_place = a;
        zero(z.data(), n);
        copy(c.data(), b.data(), n);
        add(s.data(), a.data(), b.data(), n);
        add(in_place.data(), in_place.data(), b.data(), n);  // y aliases a
        std::vector<T> want_sum(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) want_sum[i] = a[i] + b[i];
        return std::vector<test::Compared>{test::compared("zero", z, std::vector<T>(static_cast<size_t>(n), T(0))),
                                           test::compared("copy", c, b), test::compared("add", s, want_sum),
                                           test::compared("add", in_place, want_sum, {}, "in place")};
      });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (int64_t n : {int64_t(0), int64_t(1), int64_t(33), kElementwiseParallelMin + 5}) {
    cases.push_back(plain_case<float>(n));
    cases.push_back(plain_case<double>(n));
  }
  return cases;
}

class ElementwiseOps : public test::OpCaseTest {};
TEST_P(ElementwiseOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, ElementwiseOps, ::testing::ValuesIn(op_cases()), test::case_name);

}  // namespace
}  // namespace tformer
