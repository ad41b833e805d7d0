// The explorable page's toy widgets (serve/widgets.h) against hand-computed values and the spec's
// own claims: section 07's attention example and its three checks, the two wrong masks leaking
// mass, the RoPE identity, LayerNorm's invariances, the KV cache's payload formula.
#include "serve/widgets.h"

#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace tformer::widgets {
namespace {

const double kA = 1 / std::sqrt(2.0);  // a score of q.k = 1 over sqrt(2)

TEST(Widgets, SpecAttentionExampleByHandAndItsThreeChecks) {
  const SpecAttentionChecks c = spec_attention_example();
  // Row 0 reads key 0 only: the first value, exactly.
  EXPECT_EQ(c.full.out[0][0], 2.0);
  EXPECT_EQ(c.full.out[0][1], 0.0);
  EXPECT_EQ(c.full.weights[0][1], 0.0);
  EXPECT_EQ(c.full.weights[0][2], 0.0);
  // Row 1, q = (0, 1): scores 0 and 1 / sqrt 2 over keys 0, 1; values (2, 0), (0, 3).
  const double w1 = std::exp(kA) / (1 + std::exp(kA));
  EXPECT_NEAR(c.full.out[1][0], 2 * (1 - w1), 1e-15);
  EXPECT_NEAR(c.full.out[1][1], 3 * w1, 1e-15);
  EXPECT_EQ(c.full.weights[1][2], 0.0) << "the future key gets nothing";
  // Row 2, q = (1, 1): scores 1/sqrt2, 1/sqrt2, 2/sqrt2.
  const double z = 2 * std::exp(kA) + std::exp(2 * kA);
  const double p0 = std::exp(kA) / z, p2 = std::exp(2 * kA) / z;
  EXPECT_NEAR(c.full.out[2][0], 2 * p0 - p2, 1e-15);
  EXPECT_NEAR(c.full.out[2][1], 3 * p0 + p2, 1e-15);
  // The spec's checks.
  EXPECT_LT(c.first_row_error, 1e-12);
  EXPECT_LT(c.cached_vs_full, 1e-12);
  EXPECT_TRUE(c.earlier_row_immune);
  EXPECT_NE(c.changed.out[2], c.full.out[2]) << "the changed value does reach the row that may read it";
}

TEST(Widgets, WrongMasksLeakMassOntoFutureKeys) {
  const std::vector<Vec2> q{{1, 0}, {0, 1}, {1, 1}}, v{{2, 0}, {0, 3}, {-1, 1}};
  // Masked scores replaced by 0: row 0's scores 1/sqrt2, 0, 0 -> the two future keys keep weight.
  const ToyAttention zero = toy_attention(q, q, v, 0, MaskRule::ScoreZero);
  const double leak = 2 / (std::exp(kA) + 2);
  EXPECT_NEAR(zero.weights[0][1] + zero.weights[0][2], leak, 1e-15);
  EXPECT_GT(zero.weights[0][2], 0.0);
  // Zeroed after the softmax: row 0's softmax over 1/sqrt2, 0, 1/sqrt2, the future zeroed, the
  // row no longer sums to one.
  const ToyAttention after = toy_attention(q, q, v, 0, MaskRule::ZeroAfterSoftmax);
  EXPECT_EQ(after.weights[0][1], 0.0);
  EXPECT_NEAR(after.weights[0][0], std::exp(kA) / (2 * std::exp(kA) + 1), 1e-15);
  EXPECT_LT(after.weights[0][0] + after.weights[0][1] + after.weights[0][2], 0.5);
  // The correct rule's rows sum to one.
  const ToyAttention ok = toy_attention(q, q, v, 0);
  for (const auto& row : ok.weights) EXPECT_NEAR(row[0] + row[1] + row[2], 1.0, 1e-15);
}

TEST(Widgets, ToyAttentionRefusesAnOffsetPastTheKeys) {
  const std::vector<Vec2> q{{1, 0}}, k{{1, 0}, {0, 1}};
  EXPECT_ERROR(toy_attention(q, k, k, 2), ErrorKind::BadInput, "q_offset", "2");
  EXPECT_ERROR(toy_attention(q, k, {{1, 0}}, 0), ErrorKind::BadInput, "attention");
}

TEST(Widgets, RopeScoreDependsOnlyOnTheGap) {
  const Vec2 q{1, 2}, k{3, -1};
  // By hand: q . R(4 x 0.3) k = cos 1.2 + 7 sin 1.2 (R k = (3c + s, 3s - c)).
  const RopeScores r = rope_scores(q, k, 3, 7, 0.3);
  EXPECT_NEAR(r.rotated, std::cos(1.2) + 7 * std::sin(1.2), 1e-12);
  EXPECT_NEAR(r.relative, std::cos(1.2) + 7 * std::sin(1.2), 1e-12);
  const RopeScores shifted = rope_scores(q, k, 3 + 50, 7 + 50, 0.3);
  EXPECT_NEAR(shifted.rotated, r.rotated, 1e-12);
  EXPECT_NEAR(shifted.relative, r.relative, 1e-12);
  const RopeScores wider = rope_scores(q, k, 3, 8, 0.3);
  EXPECT_GT(std::fabs(wider.rotated - r.rotated), 0.1) << "another gap, another score";
  // The key before the query (n < m), and theta = 1 (a pair of its own).
  const RopeScores back = rope_scores(q, k, 9, 2, 1.0);
  EXPECT_NEAR(back.rotated, back.relative, 1e-12);
  EXPECT_NEAR(back.rotated, std::cos(7.0) - 7 * std::sin(7.0), 1e-12);  // gap -7: c - 7 s
  EXPECT_ERROR(rope_scores(q, k, 0, 1, 1.5), ErrorKind::BadInput, "theta");
}

TEST(Widgets, RopeTurnsNegativePositionsTheOtherWay) {
  // A shift that takes a position below zero is still a shift: R(-2 x 0.3) q . R(2 x 0.3) k is the
  // gap-4 score above, and each vector alone turns by a negative angle (by hand, theta = 1: q at
  // -1 against k = (1, 0) at 0 is q . R(1) k = cos 1 + 2 sin 1).
  const Vec2 q{1, 2}, k{3, -1};
  const RopeScores r = rope_scores(q, k, -2, 2, 0.3);
  EXPECT_NEAR(r.rotated, std::cos(1.2) + 7 * std::sin(1.2), 1e-12);
  EXPECT_NEAR(r.relative, r.rotated, 1e-12);
  const RopeScores one = rope_scores(q, {1, 0}, -1, 0, 1.0);
  EXPECT_NEAR(one.rotated, std::cos(1.0) + 2 * std::sin(1.0), 1e-12);
  EXPECT_NEAR(rope_scores(q, k, -13, -9, 0.3).rotated, r.rotated, 1e-12);
  EXPECT_ERROR(rope_scores(q, k, -(int64_t{1} << 41), 0, 0.3), ErrorKind::BadInput, "position");
  EXPECT_ERROR(rope_scores(q, k, std::numeric_limits<int64_t>::min(), 0, 0.3), ErrorKind::BadInput, "position");
}

TEST(Widgets, LayerNormShiftCancelsScaleCancelsButForEps) {
  // x = 1, 2, 4, 7: mean 3.5, biased variance 21 / 4.
  const std::vector<double> x{1, 2, 4, 7};
  const LayerNormDemo d = layernorm_demo(x, 10.0, 3.0, 1e-5);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(d.y[i], (x[i] - 3.5) / std::sqrt(5.25 + 1e-5), 1e-14);
  EXPECT_LT(d.shift_error, 1e-12);
  EXPECT_GT(d.scale_error, 0.0) << "eps makes the scale invariance inexact";
  EXPECT_LT(d.scale_error, 1e-5);
  // A small-variance input: eps dominates and scaling by 1000 changes the output a lot.
  std::vector<double> small = x;
  for (double& v : small) v *= 1e-3;
  const LayerNormDemo s = layernorm_demo(small, 10.0, 1000.0, 1e-5);
  EXPECT_GT(s.scale_error, 0.1);
  // Gain 2, bias 1: mean 1, variance 4 var / (var + eps).
  const LayerNormDemo a = layernorm_demo(x, 0, 1, 1e-5, {2, 2, 2, 2}, {1, 1, 1, 1});
  EXPECT_NEAR(a.affine_mean, 1.0, 1e-14);
  EXPECT_NEAR(a.affine_var, 4 * 5.25 / (5.25 + 1e-5), 1e-12);
  EXPECT_ERROR(layernorm_demo(x, 0, -1, 1e-5), ErrorKind::BadInput, "scale");
}

TEST(Widgets, BpeStepsFollowTheWorkedExampleAndThePairCountsPredictTheNextMerge) {
  // sennrich_bpe.h's worked example: "aaaa aaaa aaaa ab ab".
  const std::string corpus = "aaaa aaaa aaaa ab ab";
  const BpeWidget zero = bpe_widget(corpus, 0, 2, "");
  ASSERT_EQ(zero.words.size(), 2u);
  EXPECT_EQ(zero.words[0].word, "aaaa");
  EXPECT_EQ(zero.words[0].count, 3u);
  EXPECT_EQ(zero.segments[0], (std::vector<std::string>{"a", "a", "a", "a</w>"}));
  // Before any merge: a a a a</w> holds (a, a) twice, times 3 words.
  ASSERT_FALSE(zero.pairs.empty());
  EXPECT_EQ(zero.pairs[0].first, "a");
  EXPECT_EQ(zero.pairs[0].second, "a");
  EXPECT_EQ(zero.pairs[0].count, 6);
  // After step 1 the candidates tie at 3: (aa, a) before (a, a</w>), the greater pair.
  const BpeWidget one = bpe_widget(corpus, 1, 2, "");
  ASSERT_EQ(one.steps.size(), 1u);
  EXPECT_EQ(one.steps[0].first + " " + one.steps[0].second, "a a");
  EXPECT_EQ(one.steps[0].count, 6);
  ASSERT_GE(one.pairs.size(), 2u);
  EXPECT_EQ(one.pairs[0].first + " " + one.pairs[0].second, "aa a");
  EXPECT_EQ(one.pairs[1].first + " " + one.pairs[1].second, "a a</w>");
  EXPECT_EQ(one.pairs[0].count, 3);
  EXPECT_EQ(one.pairs[1].count, 3);
  // Every step's recount names the next step's merge, through the four of the example.
  const BpeWidget all = bpe_widget(corpus, 10, 2, "aaaa ab ba");
  ASSERT_EQ(all.steps.size(), 4u);
  EXPECT_FALSE(all.stop_reason.empty());
  for (int64_t k = 0; k < 4; ++k) {
    const BpeWidget w = bpe_widget(corpus, k, 2, "");
    EXPECT_EQ(w.pairs[0].first, all.steps[static_cast<size_t>(k)].first) << "step " << k + 1;
    EXPECT_EQ(w.pairs[0].second, all.steps[static_cast<size_t>(k)].second) << "step " << k + 1;
    EXPECT_EQ(w.pairs[0].count, all.steps[static_cast<size_t>(k)].count) << "step " << k + 1;
  }
  // Applied to new text, in its order: aaaa is one symbol, ab one, "ba" stays two characters.
  ASSERT_EQ(all.applied.size(), 3u);
  EXPECT_EQ(all.applied[0], (std::vector<std::string>{"aaaa</w>"}));
  EXPECT_EQ(all.applied[1], (std::vector<std::string>{"ab</w>"}));
  EXPECT_EQ(all.applied[2], (std::vector<std::string>{"b", "a</w>"}));
  EXPECT_ERROR(bpe_widget("", 1, 2, ""), ErrorKind::BadInput, "corpus");
}

TEST(Widgets, KvCachePayloadFormula) {
  // GPT-2 124M at 1024 tokens in float32: 2 x 12 x 1 x 12 x 1024 x 64 x 4.
  EXPECT_EQ(kv_cache_payload_bytes(12, 1, 12, 1024, 64, 4), 75497472);
  // Grouped-query attention: 4 KV heads instead of 12, a third of it.
  EXPECT_EQ(kv_cache_payload_bytes(12, 1, 4, 1024, 64, 4) * 3, 75497472);
  EXPECT_ERROR(kv_cache_payload_bytes(12, 1, -1, 1024, 64, 4), ErrorKind::BadInput, "kv_heads", "-1");
}

}  // namespace
}  // namespace tformer::widgets
