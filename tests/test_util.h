// Shared test helpers: closeness with a combined tolerance that reports the worst element, and
// central finite differences in double precision.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"

namespace tformer::test {

// Passes when |a_i - ref_i| <= atol + rtol * |ref_i| for every i; on failure names the worst index,
// both values and the difference.
template <typename A, typename B>
::testing::AssertionResult all_close(const A* a, const B* ref, int64_t n, double rtol, double atol) {
  int64_t worst = -1;
  double worst_excess = 0, worst_diff = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(a[i]), r = static_cast<double>(ref[i]);
    const double diff = std::abs(x - r);
    const double excess = diff - (atol + rtol * std::abs(r));
    if (!(excess <= 0) && (worst < 0 || !(excess <= worst_excess))) {  // NaN counts as a failure
      worst = i;
      worst_excess = excess;
      worst_diff = diff;
    }
  }
  if (worst < 0) return ::testing::AssertionSuccess();
  std::ostringstream os;
  os.precision(17);
  os << "element " << worst << " of " << n << ": got " << static_cast<double>(a[worst]) << ", expected "
     << static_cast<double>(ref[worst]) << " (|diff| " << worst_diff << " > atol " << atol << " + rtol " << rtol
     << " * |expected|)";
  return ::testing::AssertionFailure() << os.str();
}

template <typename A, typename B>
::testing::AssertionResult all_close(const std::vector<A>& a, const std::vector<B>& ref, double rtol, double atol) {
  if (a.size() != ref.size())
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << ref.size();
  return all_close(a.data(), ref.data(), static_cast<int64_t>(a.size()), rtol, atol);
}

// Central differences of a scalar function f at x. Coordinate i is perturbed by
// +-h * max(1, |x_i|): a step relative to the coordinate's size once it exceeds 1, so a large input
// (a row offset by 40, logits of 4) is not perturbed by a step that its own rounding (ulp(40) =
// 7e-15) and the loss's round-off turn into a visible error. The quotient divides by the step
// actually represented, (x_i + h_i) - (x_i - h_i), not by 2 h_i.
inline std::vector<double> numeric_gradient(const std::function<double()>& f, std::vector<double>& x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    const double step = h * std::max(1.0, std::abs(saved));
    const double up = saved + step, down = saved - step;
    x[i] = up;
    const double fp = f();
    x[i] = down;
    const double fm = f();
    x[i] = saved;
    g[i] = (fp - fm) / (up - down);
  }
  return g;
}

// max_i |a_i - n_i| / max(|a_i|, |n_i|, floor): the conventional relative error of a gradient
// check, measured against the larger of the two magnitudes. (An earlier version divided by
// |a_i| + |n_i|, which is up to twice as lenient.) The floor only keeps exactly-zero gradients
// from dividing by zero: a masked entry the loss does not depend on has analytic 0 and numeric
// exactly 0 (f(x + h) and f(x - h) are the same number), so 0 / floor = 0. It is far below any
// real gradient component in these tests, so it never loosens a real comparison.
inline double gradient_error(const std::vector<double>& analytic, const std::vector<double>& numeric,
                             double floor = 1e-8) {
  EXPECT_EQ(analytic.size(), numeric.size()) << "gradient_error: sizes differ";
  double worst = 0;
  for (size_t i = 0; i < analytic.size() && i < numeric.size(); ++i) {
    const double denom = std::max({std::abs(analytic[i]), std::abs(numeric[i]), floor});
    worst = std::max(worst, std::abs(analytic[i] - numeric[i]) / denom);
  }
  return worst;
}

// Deterministic test data: n values uniform in [lo, hi) from (seed, stream).
inline std::vector<double> random_values(int64_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = lo + (hi - lo) * uniform_at(seed, 0, static_cast<uint64_t>(i));
  return v;
}

}  // namespace tformer::test
