// The batch sampler: windows of the token stream shifted by one (inputs and next-token targets),
// every start reachable and no other, determinism by seed and a saved state that resumes the same
// sequence, and a split too short for the context refused naming the numbers.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <numeric>
#include <set>
#include <vector>

#include "core/error.h"
#include "test_util.h"
#include "train/data.h"

namespace tformer {
namespace {

std::vector<TokenId> iota_tokens(int n) {
  std::vector<TokenId> t(n);
  std::iota(t.begin(), t.end(), 0);
  return t;
}

TEST(BatchSampler, WindowsAreShiftedByOneAndInBounds) {
  const auto tokens = iota_tokens(1000);
  const int64_t B = 4, T = 16;
  BatchSampler s(tokens, B, T, 42, "train");
  std::vector<TokenId> in(B * T), tgt(B * T);
  for (int it = 0; it < 200; ++it) {
    s.next(in.data(), tgt.data());
    for (int64_t b = 0; b < B; ++b) {
      const TokenId start = in[b * T];
      ASSERT_GE(start, 0);
      ASSERT_LE(start, 1000 - T - 1);
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[b * T + t], start + t);       // a contiguous window
        ASSERT_EQ(tgt[b * T + t], start + t + 1);  // the next token
      }
    }
  }
}

TEST(BatchSampler, EveryStartIsReachableAndNoOther) {
  const auto tokens = iota_tokens(10);
  const int64_t T = 3;  // starts 0..6 (the last window's target is token 9)
  BatchSampler s(tokens, 5, T, 7, "train");
  std::vector<TokenId> in(5 * T), tgt(5 * T);
  std::set<TokenId> starts;
  for (int it = 0; it < 400; ++it) {
    s.next(in.data(), tgt.data());
    for (int b = 0; b < 5; ++b) starts.insert(in[b * T]);
  }
  EXPECT_EQ(starts, (std::set<TokenId>{0, 1, 2, 3, 4, 5, 6}));

  // Exactly context + 1 tokens: one window.
  const auto two = iota_tokens(4);
  BatchSampler one(two, 2, 3, 1, "train");
  one.next(in.data(), tgt.data());
  EXPECT_EQ(std::vector<TokenId>(in.begin(), in.begin() + 6), (std::vector<TokenId>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(std::vector<TokenId>(tgt.begin(), tgt.begin() + 6), (std::vector<TokenId>{1, 2, 3, 1, 2, 3}));
}

TEST(BatchSampler, DeterministicBySeedAndStateRoundTrips) {
  const auto tokens = iota_tokens(5000);
  const int64_t B = 3, T = 8;
  auto run = [&](BatchSampler& s, int n) {
    std::vector<TokenId> all, in(B * T), tgt(B * T);
    for (int i = 0; i < n; ++i) {
      s.next(in.data(), tgt.data());
      all.insert(all.end(), in.begin(), in.end());
    }
    return all;
  };
  BatchSampler a(tokens, B, T, 123, "train"), b(tokens, B, T, 123, "train"), c(tokens, B, T, 124, "train");
  EXPECT_EQ(run(a, 10), run(b, 10));
  EXPECT_NE(run(a, 10), run(c, 10));

  // Save the position, continue; a sampler restored from the saved position continues identically.
  BatchSampler d(tokens, B, T, 9, "train");
  run(d, 5);
  const std::array<uint64_t, 4> saved = d.state();
  const auto expected = run(d, 7);
  BatchSampler e(tokens, B, T, 999, "train");
  e.set_state(saved);
  EXPECT_EQ(e.state(), saved);
  EXPECT_EQ(run(e, 7), expected);
}

TEST(BatchSampler, TooShortSplitNamesItAndBothNumbers) {
  const auto tokens = iota_tokens(40);
  EXPECT_ERROR(BatchSampler s(tokens, 4, 64, 1, "validation"), ErrorKind::BadInput, "--context",
               "the validation split has 40 tokens; --context 64 needs at least 65");
  const std::vector<TokenId> empty;
  EXPECT_ERROR(BatchSampler s(empty, 1, 8, 1, "train"), ErrorKind::BadInput, "--context",
               "the train split has 0 tokens; --context 8 needs at least 9");
  EXPECT_ERROR(BatchSampler(iota_tokens(64), 4, 64, 1, "train"), ErrorKind::BadInput, "--context");  // 64 < 65
  EXPECT_NO_THROW(BatchSampler(iota_tokens(65), 4, 64, 1, "train"));
  EXPECT_ERROR(BatchSampler(iota_tokens(65), 0, 8, 1, "train"), ErrorKind::BadInput, "--batch");
}

}  // namespace
}  // namespace tformer
