// PyTorch's outputs and autograd gradients for the kernels, an independent outside reference:
// fixtures/kernels.json, written by tools/reference/gen_kernel_fixtures.py (float64, seeded,
// asymmetric inputs; gradients are those of loss = sum(r * y) for the fixture's r, or of
// dloss * mean cross-entropy). Each kernel's test file checks its own entries through its op table.
//
// Bounds (|ours - torch| <= rtol |torch| + atol_of_max max|torch|, per quantity).
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
// rounding: observed <= 1e-7 relative, checked at 1e-5. (The small-variance LayerNorm row is looser:
// test_kernels_norm.cpp.)
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "test_util.h"

namespace tformer::test {

// The fixture's entry for one kernel ("softmax", "layer_norm", ...).
inline const nlohmann::json& kernel_fixture(const char* name) {
  static const nlohmann::json j = [] {
    std::ifstream in("fixtures/kernels.json");
    if (!in) throw std::runtime_error("cannot open fixtures/kernels.json (tests run from tests/)");
    return nlohmann::json::parse(in);
  }();
  return j.at(name);
}

inline std::vector<double> fixture_values(const nlohmann::json& j, const char* key) {
  return j.at(key).get<std::vector<double>>();
}

inline constexpr Bound kTorchDouble{.rtol = 1e-12, .atol_of_max = 1e-13};
inline constexpr Bound kTorchFloat{.rtol = 1e-5, .atol_of_max = 1e-5};

template <typename T>
constexpr Bound torch_bound() {
  return std::is_same_v<T, double> ? kTorchDouble : kTorchFloat;
}

// Only the relative part (quantities compared without the max-scaled term).
template <typename T>
constexpr Bound torch_rtol() {
  return {.rtol = torch_bound<T>().rtol};
}

}  // namespace tformer::test
