// Core: shapes and views, arenas, errors, and the seeded RNG's determinism.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "core/arena.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threads.h"

namespace tformer {
namespace {

TEST(Shape, StridesAreRowMajor) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.stride(0), 12);
  EXPECT_EQ(s.stride(1), 4);
  EXPECT_EQ(s.stride(2), 1);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_THROW((Shape{2, -1}), Error);
}

TEST(TensorView, IndexingSlicingAndBounds) {
  Buffer<float> b({2, 3});
  for (int i = 0; i < 6; ++i) b.data()[i] = static_cast<float>(i * 10);
  auto v = b.view();
  EXPECT_EQ(v(1, 2), 50);
  EXPECT_EQ(v.slice0(1)(0), 30);
  EXPECT_THROW(v(2, 0), Error);
  EXPECT_THROW(v(0, 3), Error);
  EXPECT_THROW(v(0), Error);
  EXPECT_EQ(v.reshape({3, 2})(2, 1), 50);
  EXPECT_THROW(v.reshape({4, 2}), Error);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kAlignment, 0u);
}

TEST(Error, CheckNamesFileLineAndMessage) {
  try {
    TF_CHECK(1 + 1 == 3, "arithmetic is off by {}", 1);
    FAIL() << "TF_CHECK did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("arithmetic is off by 1"), std::string::npos) << what;
    EXPECT_NE(what.find("test_unit_core.cpp"), std::string::npos) << what;
    EXPECT_NE(what.find("1 + 1 == 3"), std::string::npos) << what;
  }
}

TEST(Arena, OneAlignedBufferWithNamedViews) {
  Arena a;
  a.add("w", {3, 5});
  a.add("b", {5});
  EXPECT_THROW(a.add("w", {1}), Error);
  a.allocate();
  auto w = a.get("w"), b = a.get("b");
  EXPECT_EQ(w.shape(), (Shape{3, 5}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kAlignment, 0u);
  EXPECT_GE(b.data(), w.data() + 15);  // no overlap
  w(2, 4) = 7;
  EXPECT_EQ(a.data()[14], 7);
  EXPECT_THROW(a.get("missing"), Error);
  Arena g;
  g.mirror(a);
  EXPECT_EQ(g.size(), a.size());
  EXPECT_EQ(g.get("w")(2, 4), 0);  // a mirror has the layout, not the values
}

TEST(Rng, SameSeedSameSequenceDifferentSeedDifferent) {
  Rng a(42), b(42), c(43);
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    differs |= x != c.next_u64();
  }
  EXPECT_TRUE(differs);
}

TEST(Rng, StateRoundTripsExactly) {
  Rng a(7);
  for (int i = 0; i < 10; ++i) a.next_u64();
  const auto s = a.state();
  const double x = a.normal();
  Rng b;
  b.set_state(s);
  EXPECT_EQ(b.normal(), x);
}

TEST(Rng, UniformAndNormalMoments) {
  Rng r(1);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const float u = r.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    const double z = r.normal();
    sn += z;
    sn2 += z * z;
  }
  // Standard errors: uniform mean 0.5 +- 0.29/sqrt(n) = 6.5e-4; normal mean 0 +- 2.2e-3; var 1 +- 3.2e-3.
  EXPECT_NEAR(su / n, 0.5, 5 * 6.5e-4);
  EXPECT_NEAR(sn / n, 0.0, 5 * 2.2e-3);
  EXPECT_NEAR(sn2 / n, 1.0, 5 * 3.2e-3);
}

TEST(Rng, BelowIsInRangeAndCoversIt) {
  Rng r(3);
  std::vector<int> seen(7);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t x = r.below(7);
    ASSERT_LT(x, 7u);
    seen[x]++;
  }
  for (int c : seen) EXPECT_GT(c, 800);  // expected 1000 each
}

TEST(Rng, ParallelFillIndependentOfThreadCount) {
  Buffer<float> one({300, 301}), two({300, 301});
  set_num_threads(1);
  fill_normal<float>(one.view(), 5, 9, 0.0, 0.02);
  set_num_threads(2);
  fill_normal<float>(two.view(), 5, 9, 0.0, 0.02);
  EXPECT_EQ(one.values(), two.values());
  // Different streams give different tensors.
  Buffer<float> other({300, 301});
  fill_normal<float>(other.view(), 5, 10, 0.0, 0.02);
  EXPECT_NE(one.values(), other.values());
}

}  // namespace
}  // namespace tformer
