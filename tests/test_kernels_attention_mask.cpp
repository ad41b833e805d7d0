// The reference attention kernel's masks: two wrong masked softmaxes shown to differ (a masked
// score 0 instead of -infinity, weights zeroed after the softmax), padded keys never read, rows
// without any allowed key; the op table: a left-padded batch against each prompt alone, a chunk at
// a cache offset against the full pass. Layouts: attention_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "attention_test_util.h"
#include "core/error.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::any_nan;
using test::as;
using test::backward;
using test::forward;
using test::Forward;
using test::Grads;
using test::kNaN;
using test::kv_index;
using test::kv_size;
using test::MaskData;
using test::p_index;
using test::p_size;
using test::q_index;
using test::q_size;
using test::random_values;
using test::rows_of;
using test::SymmetricExample;
using test::zero_grads;

// ---------------------------------------------------------------------------------------------
// Masking traps.

// Two WRONG masked softmaxes for one head of width 2, written here to show they differ from the
// kernel: (a) a masked score replaced by 0 instead of -infinity; (b) softmax over every key, then
// the masked weights zeroed without renormalising. Returns the weights; out = weights . v.
enum class WrongMask { ScoreZero, ZeroAfterSoftmax };
std::vector<double> wrong_weights(const std::vector<double>& q, const std::vector<double>& k, int64_t n_kv, int64_t i,
                                  WrongMask how) {
  std::vector<double> sc(n_kv);
  for (int64_t j = 0; j < n_kv; ++j) {
    sc[j] = (q[2 * i] * k[2 * j] + q[2 * i + 1] * k[2 * j + 1]) / std::sqrt(2.0);
    if (how == WrongMask::ScoreZero && j > i) sc[j] = 0;
  }
  double mx = sc[0], sum = 0;
  for (double x : sc) mx = std::max(mx, x);
  for (double& x : sc) sum += (x = std::exp(x - mx));
  for (int64_t j = 0; j < n_kv; ++j) {
    sc[j] /= sum;
    if (how == WrongMask::ZeroAfterSoftmax && j > i) sc[j] = 0;
  }
  return sc;
}

std::vector<double> mix(const std::vector<double>& w, const std::vector<double>& v) {
  std::vector<double> o(2, 0.0);
  for (size_t j = 0; j < w.size(); ++j)
    for (int d = 0; d < 2; ++d) o[d] += w[j] * v[2 * j + d];
  return o;
}

TEST(AttentionMask, MaskedScoreSetToZeroInsteadOfMinusInfinityIsWrong) {
  const SymmetricExample ex;
  MaskData md;
  const auto f = forward<double>(ex.s, md.get(ex.s), ex.q, ex.q, ex.v);
  ASSERT_TRUE(all_close(f.out, ex.hand_out(), 0, 1e-12));
  // Row 1 with the masked score set to 0: scores (0, r, 0), exp(s - r) = (e, 1, e): the future
  // key 2 gets weight e/(1+2e) = 0.248 and its value (-1, 1) leaks in.
  const auto w = wrong_weights(ex.q, ex.q, 3, 1, WrongMask::ScoreZero);
  EXPECT_GT(w[2], 0.2);
  const auto wrong = mix(w, ex.v);
  const auto ours = rows_of(f.out, 3, 2, 0, 1, 1);
  EXPECT_GT(std::abs(wrong[0] - ours[0]) + std::abs(wrong[1] - ours[1]), 0.1);
  EXPECT_EQ(f.probs[p_index(ex.s, 0, 0, 1, 2)], 0.0);  // ours: exactly no weight on the future key
}

TEST(AttentionMask, ZeroingWeightsAfterSoftmaxIsWrong) {
  const SymmetricExample ex;
  MaskData md;
  const auto f = forward<double>(ex.s, md.get(ex.s), ex.q, ex.q, ex.v);
  ASSERT_TRUE(all_close(f.out, ex.hand_out(), 0, 1e-12));
  // Row 1, softmax over all three scores (0, r, r) = (e, 1, 1)/(e + 2), then key 2 zeroed: the
  // weights sum to (1 + e)/(2 + e) = 0.599, not 1, and the output shrinks.
  const auto w = wrong_weights(ex.q, ex.q, 3, 1, WrongMask::ZeroAfterSoftmax);
  EXPECT_LT(w[0] + w[1] + w[2], 0.61);
  const auto wrong = mix(w, ex.v);
  const auto ours = rows_of(f.out, 3, 2, 0, 1, 1);
  EXPECT_GT(std::abs(wrong[0] - ours[0]) + std::abs(wrong[1] - ours[1]), 0.1);
  // Ours: every row's weights sum to one.
  for (int64_t i = 0; i < 3; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 3; ++j) sum += f.probs[p_index(ex.s, 0, 0, i, j)];
    EXPECT_NEAR(sum, 1.0, 1e-15);
  }
}

// Padding: seq 0 has a padded key in the middle, seq 1 is left-padded (slots 0, 1), which also
// makes its rows 0 and 1 fully masked.
TEST(AttentionMask, PaddedKeysGetExactlyZeroWeightAndAreNeverRead) {
  const AttentionShape s{.batch = 2, .n_q = 6, .n_kv = 6, .n_heads = 2, .n_kv_heads = 2, .head_dim = 3};
  const auto q = random_values(q_size(s), 61), k = random_values(kv_size(s), 62), v = random_values(kv_size(s), 63);
  MaskData md;
  md.key_valid = {1, 1, 0, 1, 1, 0, /**/ 0, 0, 1, 1, 1, 1};
  const auto f = forward<double>(s, md.get(s), q, k, v);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 2; ++h)
      for (int64_t i = 0; i < s.n_q; ++i) {
        double sum = 0;
        bool any = false;
        for (int64_t j = 0; j < s.n_kv; ++j) {
          const double p = f.probs[p_index(s, b, h, i, j)];
          if (md.key_valid[b * 6 + j] == 0 || j > i) {
            EXPECT_EQ(p, 0.0) << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
          } else {
            EXPECT_GT(p, 0.0);
            any = true;
          }
          sum += p;
        }
        EXPECT_NEAR(sum, any ? 1.0 : 0.0, 1e-15);
      }
  const auto dout = random_values(q_size(s), 64);
  auto g = zero_grads<double>(s);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, g);
  // Overwrite the padded keys and values with large numbers, then with NaN: nothing changes,
  // forward or backward (the padded slots' own gradients stay exactly zero).
  for (double junk : {1e3, kNaN}) {
    auto k2 = k, v2 = v;
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < 6; ++j)
        if (md.key_valid[b * 6 + j] == 0)
          for (int64_t g = 0; g < 2; ++g)
            for (int64_t d = 0; d < 3; ++d) k2[kv_index(s, b, j, g, d)] = v2[kv_index(s, b, j, g, d)] = junk;
    const auto f2 = forward<double>(s, md.get(s), q, k2, v2);
    EXPECT_EQ(f2.out, f.out) << "junk " << junk;
    EXPECT_EQ(f2.probs, f.probs) << "junk " << junk;
    auto g2 = zero_grads<double>(s);
    backward<double>(s, md.get(s), q, k2, v2, f2.probs, dout, g2);
    EXPECT_EQ(g2.dq, g.dq) << "junk " << junk;
    EXPECT_EQ(g2.dk, g.dk) << "junk " << junk;
    EXPECT_EQ(g2.dv, g.dv) << "junk " << junk;
  }
}

// Rows with no allowed key: a sequence with kv_len 0 (its cache slots hold NaN), and a row whose
// only causal key is padding. Output 0, weights 0, gradients 0, no NaN anywhere.
TEST(AttentionMask, AllMaskedRowGivesZerosAndZeroGradientNeverNaN) {
  const AttentionShape s{.batch = 2, .n_q = 3, .n_kv = 4, .n_heads = 2, .n_kv_heads = 1, .head_dim = 3};
  auto q = random_values(q_size(s), 81), k = random_values(kv_size(s), 82), v = random_values(kv_size(s), 83);
  for (int64_t j = 0; j < s.n_kv; ++j)
    for (int64_t d = 0; d < 3; ++d) k[kv_index(s, 0, j, 0, d)] = v[kv_index(s, 0, j, 0, d)] = kNaN;
  MaskData md;
  md.kv_len = {0, 4};
  md.key_valid = {1, 1, 1, 1, /**/ 0, 1, 1, 1};
  const auto f = forward<double>(s, md.get(s), q, k, v);
  EXPECT_FALSE(any_nan(f.out));
  EXPECT_FALSE(any_nan(f.probs));
  const int64_t w = s.n_heads * s.head_dim;
  EXPECT_EQ(rows_of(f.out, 3, w, 0, 0, 3), std::vector<double>(3 * w, 0.0));  // seq 0: empty cache
  EXPECT_EQ(rows_of(f.out, 3, w, 1, 0, 1), std::vector<double>(w, 0.0));      // seq 1 row 0: key 0 is padding
  EXPECT_NE(rows_of(f.out, 3, w, 1, 1, 1), std::vector<double>(w, 0.0));      // row 1 reads key 1
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t j = 0; j < 4; ++j) {
      for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(f.probs[p_index(s, 0, h, i, j)], 0.0);
      EXPECT_EQ(f.probs[p_index(s, 1, h, 0, j)], 0.0);
    }
  auto g = zero_grads<double>(s);
  backward<double>(s, md.get(s), q, k, v, f.probs, random_values(q_size(s), 84), g);
  EXPECT_FALSE(any_nan(g.dq));
  EXPECT_FALSE(any_nan(g.dk));
  EXPECT_FALSE(any_nan(g.dv));
  EXPECT_EQ(rows_of(g.dq, 3, w, 0, 0, 3), std::vector<double>(3 * w, 0.0));
  EXPECT_EQ(rows_of(g.dq, 3, w, 1, 0, 1), std::vector<double>(w, 0.0));
  EXPECT_EQ(rows_of(g.dk, 4, 3, 0, 0, 4), std::vector<double>(12, 0.0));
  EXPECT_EQ(rows_of(g.dv, 4, 3, 0, 0, 4), std::vector<double>(12, 0.0));
  EXPECT_EQ(rows_of(g.dv, 4, 3, 1, 0, 1), std::vector<double>(3, 0.0));  // seq 1's padded key
}

// ---------------------------------------------------------------------------------------------
// The op table: a padded batch against each prompt alone, and a chunk at a cache offset against
// the full pass. 1e-12 in double on O(1) values (the same arithmetic; a wrong mask or offset
// changes a row by ~0.1).
const test::OpBounds kPaddedBatch{"attention left-padded batch vs each prompt alone", {{"out", {.atol = 1e-12}}}};
const test::OpBounds kOffsetChunk{"attention chunk at an offset vs full pass", {{"out", {.atol = 1e-12}}}};

// A left-padded batch (batched generation of prompts of different lengths) equals each prompt run
// alone. The padding rows themselves see no key at all: zeros.
test::OpCase left_padded_batch() {
  return test::compare_case(kPaddedBatch, "B=2 n=6 pad=2", [] {
    const int64_t H = 2, KVH = 1, hd = 4, n = 6, pad = 2;
    const AttentionShape s{.batch = 2, .n_q = n, .n_kv = n, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto q = random_values(q_size(s), 71), k = random_values(kv_size(s), 72), v = random_values(kv_size(s), 73);
    MaskData md;
    md.key_valid = {1, 1, 1, 1, 1, 1, /**/ 0, 0, 1, 1, 1, 1};
    const auto batch = forward<double>(s, md.get(s), q, k, v);
    std::vector<test::Compared> outputs;
    for (int64_t b = 0; b < 2; ++b) {
      const int64_t start = b == 0 ? 0 : pad, len = n - start;
      const AttentionShape one{.batch = 1, .n_q = len, .n_kv = len, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
      const auto qa = rows_of(q, n, H * hd, b, start, len), ka = rows_of(k, n, KVH * hd, b, start, len),
                 va = rows_of(v, n, KVH * hd, b, start, len);
      MaskData causal;
      const auto alone = forward<double>(one, causal.get(one), qa, ka, va);
      outputs.push_back(test::compared("out", rows_of(batch.out, n, H * hd, b, start, len), alone.out,
                                       {{{"i", len}, {"h", H}, {"e", hd}}}, "b=" + std::to_string(b)));
      EXPECT_EQ(rows_of(batch.out, n, H * hd, b, 0, start), std::vector<double>(start * H * hd, 0.0));
    }
    return outputs;
  });
}

// A one-token chunk at absolute position 100 reads keys 0..100, not just key 0 (which a causal mask
// aligned to the top left, the triangle of a 1 x 101 mask, would leave it). The last row puts
// positive weight on all 101 keys.
test::OpCase chunk_at_position_100(int64_t c) {
  return test::compare_case(kOffsetChunk, "N=101 chunk=" + std::to_string(c), [c] {
    const int64_t N = 101, H = 2, KVH = 1, hd = 4;
    const AttentionShape full_s{.batch = 1, .n_q = N, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto q = random_values(q_size(full_s), 91), k = random_values(kv_size(full_s), 92),
               v = random_values(kv_size(full_s), 93);
    MaskData causal;
    const auto full = forward<double>(full_s, causal.get(full_s), q, k, v);
    const int64_t s0 = N - c;
    const AttentionShape s{.batch = 1, .n_q = c, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto qc = rows_of(q, N, H * hd, 0, s0, c);
    MaskData md;
    md.q_offset = {s0};
    const auto f = forward<double>(s, md.get(s), qc, k, v);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t j = 0; j < N; ++j) EXPECT_GT(f.probs[p_index(s, 0, h, c - 1, j)], 0.0);
    if (c == 1) {
      // The trap: without the offset the chunk's row 0 sees only key 0 and returns v[0].
      MaskData no_offset;
      const auto wrong = forward<double>(s, no_offset.get(s), qc, k, v);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < hd; ++d) EXPECT_EQ(wrong.out[q_index(s, 0, 0, h, d)], v[kv_index(s, 0, 0, 0, d)]);
      EXPECT_FALSE(all_close(wrong.out, f.out, 0, 1e-3));
    }
    return std::vector<test::Compared>{
        test::compared("out", f.out, rows_of(full.out, N, H * hd, 0, s0, c), {{{"i", c}, {"h", H}, {"e", hd}}})};
  });
}

std::vector<test::OpCase> op_cases() {
  return {left_padded_batch(), chunk_at_position_100(1), chunk_at_position_100(3)};
}

class AttentionMaskOps : public test::OpCaseTest {};
TEST_P(AttentionMaskOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, AttentionMaskOps, ::testing::ValuesIn(op_cases()), test::case_name);

}  // namespace
}  // namespace tformer
