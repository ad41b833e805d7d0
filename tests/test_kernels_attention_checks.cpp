// The reference attention kernel (kernels/attention.h): the three checks of causal attention
// (the first row reads only its own key, a cached chunk equals the full pass through the op table,
// changing a future key or value is invisible to earlier rows) over heads and batches; two
// hand-computed cases (one symmetric, one asymmetric with GQA, the latter against a
// transposed-score variant). Layouts: attention_test_util.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
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
// 1. The three checks of causal attention, over heads and batches.

template <typename T>
void check_first_row_returns_its_only_key() {
  const AttentionShape s{.batch = 2, .n_q = 5, .n_kv = 5, .n_heads = 4, .n_kv_heads = 2, .head_dim = 3};
  const auto q = as<T>(random_values(q_size(s), 1)), k = as<T>(random_values(kv_size(s), 2)),
             v = as<T>(random_values(kv_size(s), 3));
  MaskData md;
  const auto f = forward<T>(s, md.get(s), q, k, v);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_heads; ++h) {
      const int64_t g = h / 2;
      // Position 0 may read only key 0: weight exactly 1, output exactly that key's value.
      for (int64_t d = 0; d < s.head_dim; ++d) EXPECT_EQ(f.out[q_index(s, b, 0, h, d)], v[kv_index(s, b, 0, g, d)]);
      EXPECT_EQ(f.probs[p_index(s, b, h, 0, 0)], T(1));
      for (int64_t j = 1; j < s.n_kv; ++j) EXPECT_EQ(f.probs[p_index(s, b, h, 0, j)], T(0));
    }
}

TEST(AttentionCausal, FirstRowReturnsItsOnlyKeysValueExactly) {
  check_first_row_returns_its_only_key<double>();
  check_first_row_returns_its_only_key<float>();
}

// The op table: a cached chunk against the full causal pass. Tolerance 1e-12 in double on O(1)
// values: the math is identical, only the summation order may legitimately differ in a tiled
// kernel (this reference happens to be bit-exact here); a wrong mask or offset changes a row by
// ~0.1.
const test::OpBounds kChunk{"attention cached chunk vs full pass", {{"out", {.atol = 1e-12}}}};

test::Layout rows_layout(int64_t n, int64_t H, int64_t hd) { return {{{"i", n}, {"h", H}, {"e", hd}}}; }

// Every prompt length N in 1..9 and chunk sizes {1, 2, 3, 7, N}: the chunk's rows [s0, s0 + c)
// with q_offset s0 over keys [0, s0 + c) equal rows [s0, s0 + c) of the full causal pass. Two
// ways to pass the keys: n_kv = s0 + c (a view onto the full keys), and a [B, KVH, capacity, hd]
// cache with kv_len = s0 + c whose unused slots hold NaN (they must never be read).
test::OpCase cached_chunks(int64_t N) {
  return test::compare_case(kChunk, "every chunk N=" + std::to_string(N), [N] {
    const int64_t H = 4, KVH = 2, hd = 5, B = 2, N_max = 9, cap = N_max + 2;
    const AttentionShape full_s{.batch = B, .n_q = N, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto q = random_values(q_size(full_s), 10 + N), k = random_values(kv_size(full_s), 20 + N),
               v = random_values(kv_size(full_s), 30 + N);
    MaskData causal;
    const auto full = forward<double>(full_s, causal.get(full_s), q, k, v);
    std::vector<test::Compared> outputs;
    for (int64_t c : {int64_t(1), int64_t(2), int64_t(3), int64_t(7), N}) {
      for (int64_t s0 = 0; s0 < N; s0 += c) {
        const int64_t len = std::min(c, N - s0);
        MaskData md;
        md.q_offset = {s0, s0};
        // (a) n_kv = s0 + len, views straight into the full-pass arrays (row stride unchanged).
        const AttentionShape a{
            .batch = B, .n_q = len, .n_kv = s0 + len, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
        const auto fa =
            forward<double>(a, md.get(a), HeadsView<const double>{q.data() + s0 * H * hd, N * H * hd, H * hd, hd},
                            heads_btHd(k.data(), N, KVH, hd), heads_btHd(v.data(), N, KVH, hd));
        // (b) a cache of capacity cap, NaN past the filled slots, kv_len = s0 + len.
        std::vector<double> kc(B * KVH * cap * hd, kNaN), vc(B * KVH * cap * hd, kNaN);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = 0; j < s0 + len; ++j)
            for (int64_t g = 0; g < KVH; ++g)
              for (int64_t d = 0; d < hd; ++d) {
                kc[((b * KVH + g) * cap + j) * hd + d] = k[kv_index(full_s, b, j, g, d)];
                vc[((b * KVH + g) * cap + j) * hd + d] = v[kv_index(full_s, b, j, g, d)];
              }
        const AttentionShape bs{.batch = B, .n_q = len, .n_kv = cap, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
        MaskData mb = md;
        mb.kv_len = {s0 + len, s0 + len};
        const auto fb = forward<double>(
            bs, mb.get(bs), HeadsView<const double>{q.data() + s0 * H * hd, N * H * hd, H * hd, hd},
            heads_bHTd<const double>(kc.data(), cap, KVH, hd), heads_bHTd<const double>(vc.data(), cap, KVH, hd));
        for (int64_t b = 0; b < B; ++b) {
          const auto want = rows_of(full.out, N, H * hd, b, s0, len);
          const std::string label =
              "chunk=" + std::to_string(c) + " start=" + std::to_string(s0) + " b=" + std::to_string(b);
          outputs.push_back(
              test::compared("out", rows_of(fa.out, len, H * hd, b, 0, len), want, rows_layout(len, H, hd), label));
          outputs.push_back(test::compared("out", rows_of(fb.out, len, H * hd, b, 0, len), want,
                                           rows_layout(len, H, hd), label + " (cache)"));
        }
      }
    }
    return outputs;
  });
}

// Batch 2 whose sequences sit at different offsets in one call: each row still equals its own
// sequence's full pass.
test::OpCase different_offsets(int64_t o0, int64_t o1, int64_t chunk) {
  return test::compare_case(
      kChunk, "offsets " + std::to_string(o0) + " and " + std::to_string(o1) + " chunk=" + std::to_string(chunk), [=] {
        const int64_t H = 3, KVH = 1, hd = 4, N = 9, cap = 12;
        const AttentionShape full_s{.batch = 2, .n_q = N, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
        const auto q = random_values(q_size(full_s), 41), k = random_values(kv_size(full_s), 42),
                   v = random_values(kv_size(full_s), 43);
        MaskData causal;
        const auto full = forward<double>(full_s, causal.get(full_s), q, k, v);
        const int64_t off[2] = {o0, o1};
        const AttentionShape s{.batch = 2, .n_q = chunk, .n_kv = cap, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
        std::vector<double> qc(q_size(s)), kc(2 * KVH * cap * hd, kNaN), vc(2 * KVH * cap * hd, kNaN);
        for (int64_t b = 0; b < 2; ++b) {
          const auto rows = rows_of(q, N, H * hd, b, off[b], chunk);
          std::copy(rows.begin(), rows.end(), qc.begin() + b * chunk * H * hd);
          for (int64_t j = 0; j < off[b] + chunk; ++j)
            for (int64_t g = 0; g < KVH; ++g)
              for (int64_t d = 0; d < hd; ++d) {
                kc[((b * KVH + g) * cap + j) * hd + d] = k[kv_index(full_s, b, j, g, d)];
                vc[((b * KVH + g) * cap + j) * hd + d] = v[kv_index(full_s, b, j, g, d)];
              }
        }
        MaskData md;
        md.q_offset = {o0, o1};
        md.kv_len = {o0 + chunk, o1 + chunk};
        const auto f = forward<double>(s, md.get(s), heads_btHd<const double>(qc.data(), chunk, H, hd),
                                       heads_bHTd<const double>(kc.data(), cap, KVH, hd),
                                       heads_bHTd<const double>(vc.data(), cap, KVH, hd));
        std::vector<test::Compared> outputs;
        for (int64_t b = 0; b < 2; ++b)
          outputs.push_back(test::compared("out", rows_of(f.out, chunk, H * hd, b, 0, chunk),
                                           rows_of(full.out, N, H * hd, b, off[b], chunk), rows_layout(chunk, H, hd),
                                           "b=" + std::to_string(b)));
        return outputs;
      });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  for (int64_t N = 1; N <= 9; ++N) cases.push_back(cached_chunks(N));
  for (auto [o0, o1, c] : {std::tuple<int64_t, int64_t, int64_t>{0, 4, 3}, {5, 1, 2}, {2, 6, 3}, {8, 0, 1}, {3, 0, 6}})
    cases.push_back(different_offsets(o0, o1, c));
  return cases;
}

class AttentionChunkOps : public test::OpCaseTest {};
TEST_P(AttentionChunkOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, AttentionChunkOps, ::testing::ValuesIn(op_cases()), test::case_name);

// Changing key t and value t (every head, both sequences) leaves rows 0..t-1 bit-identical and
// changes row t.
template <typename T>
void check_future_changes_are_invisible() {
  const AttentionShape s{.batch = 2, .n_q = 6, .n_kv = 6, .n_heads = 2, .n_kv_heads = 1, .head_dim = 3};
  const auto q = as<T>(random_values(q_size(s), 51)), k = as<T>(random_values(kv_size(s), 52)),
             v = as<T>(random_values(kv_size(s), 53));
  MaskData md;
  const auto base = forward<T>(s, md.get(s), q, k, v);
  const int64_t w = s.n_heads * s.head_dim;
  for (int64_t t = 1; t < s.n_kv; ++t) {
    auto k2 = k, v2 = v;
    for (int64_t b = 0; b < s.batch; ++b)
      for (int64_t d = 0; d < s.head_dim; ++d) {
        k2[kv_index(s, b, t, 0, d)] = T(3 + d);
        v2[kv_index(s, b, t, 0, d)] = T(100);
      }
    const auto changed = forward<T>(s, md.get(s), q, k2, v2);
    for (int64_t b = 0; b < s.batch; ++b) {
      EXPECT_EQ(rows_of(changed.out, s.n_q, w, b, 0, t), rows_of(base.out, s.n_q, w, b, 0, t)) << "t=" << t;
      EXPECT_NE(rows_of(changed.out, s.n_q, w, b, t, 1), rows_of(base.out, s.n_q, w, b, t, 1)) << "t=" << t;
    }
  }
}

TEST(AttentionCausal, FutureKeyAndValueLeaveEarlierRowsBitIdentical) {
  check_future_changes_are_invisible<double>();
  check_future_changes_are_invisible<float>();
}

// ---------------------------------------------------------------------------------------------
// 2. A case worked out by hand: the symmetric example (attention_test_util.h).

TEST(AttentionHand, SymmetricExampleMatchesHandComputation) {
  const SymmetricExample ex;
  MaskData md;
  const auto f = forward<double>(ex.s, md.get(ex.s), ex.q, ex.q, ex.v);
  EXPECT_TRUE(all_close(f.out, ex.hand_out(), 0, 1e-12));
  EXPECT_TRUE(all_close(f.probs, ex.hand_probs(), 0, 1e-12));
  // The decimals written above, as an independent check of the formulas.
  const std::vector<double> decimals{2, 0, 0.66047690134669, 2.00928464797997, -0.00697968696911, 1.24825507825772};
  EXPECT_TRUE(all_close(f.out, decimals, 0, 1e-13));
  // Float agrees to float precision.
  const auto ff = forward<float>(ex.s, md.get(ex.s), as<float>(ex.q), as<float>(ex.q), as<float>(ex.v));
  EXPECT_TRUE(all_close(ff.out, ex.hand_out(), 0, 1e-6));
}

// A second case worked out by hand, ASYMMETRIC (q != k, so q_i.k_j != q_j.k_i) and grouped: two
// query heads read one kv head (GQA), batch 1, 3 tokens, head_dim 2, causal. In the symmetric
// example above keys = queries, so the score matrix is symmetric and a kernel computing k_i.q_j instead
// of q_i.k_j passes it; this case tells them apart.
//
//   q (token i, head h):  i=0: h0 (2, 1)  h1 (-1, 1)     k (token j, the one kv head):  (1, 0)
//                         i=1: h0 (1, 1)  h1 (1, -1)                                    (0, 2)
//                         i=2: h0 (0, 1)  h1 (2, 0)                                     (1, -1)
//   v: (1, 0), (0, 3), (-1, 1).   scale r = 1/sqrt(2);  e := exp(-r) = 0.49306869139523984,
//   e^2 = exp(-2r) = 0.24311673443421428,  e^3 = exp(-3r) = 0.11987325010376207.
//
//   Head 0 (raw dot products q_i.k_j for j <= i; scores are these times r):
//     row 0: q0.k0 = 2                       -> only key 0: P = (1, 0, 0), out = v0 = (1, 0)
//     row 1: q1.k0 = 1, q1.k1 = 2            -> scores (r, 2r), minus max 2r: (-r, 0) -> (e, 1)
//            P = (e, 1)/(1+e) = (0.330238450673343, 0.669761549326657, 0)
//            out = (e, 3)/(1+e) = (0.330238450673343, 2.009284647979971)
//     row 2: q2.k0 = 0, q2.k1 = 2, q2.k2 = -1 -> scores (0, 2r, -r), minus 2r: (-2r, 0, -3r)
//            -> (e^2, 1, e^3), sum S = 1 + e^2 + e^3 = 1.3629899845379763
//            P = (e^2, 1, e^3)/S = (0.178370154727605, 0.733681106496889, 0.087948738775506)
//            out = (e^2 * 1 + 1 * 0 + e^3 * -1, e^2 * 0 + 1 * 3 + e^3 * 1)/S = (e^2 - e^3, 3 + e^3)/S
//                = (0.090421415952098, 2.288992058266174)
//   Head 1 (same keys and values: the group shares kv head 0):
//     row 0: q0.k0 = -1                      -> P = (1, 0, 0), out = v0 = (1, 0)
//     row 1: q1.k0 = 1, q1.k1 = -2           -> scores (r, -2r), minus r: (0, -3r) -> (1, e^3)
//            P = (1, e^3)/(1+e^3) = (0.892958198534830, 0.107041801465170, 0)
//            out = (1, 3 e^3)/(1+e^3) = (0.892958198534830, 0.321125404395511)
//     row 2: q2.k0 = 2, q2.k1 = 0, q2.k2 = 2  -> scores (2r, 0, 2r), minus 2r: (0, -2r, 0) -> (1, e^2, 1)
//            P = (1, e^2, 1)/(2+e^2) = (0.445808274107603, 0.108383451784794, 0.445808274107603)
//            out = (1 - 1, 3 e^2 + 1)/(2+e^2) = (0, 0.770958629461984)
//
//   The TRANSPOSED variant (score k_i.q_j) gives, for head 0 row 1: k1.q0 = 2, k1.q1 = 2: equal
//   scores, P = (1/2, 1/2), out = (0.5, 1.5), against ours (0.330, 2.009); head 0 row 2:
//   k2.q0 = 1, k2.q1 = 0, k2.q2 = -1, out = (0.436, 0.992) against ours (0.090, 2.289).
struct AsymmetricGqaExample {
  AttentionShape s{.batch = 1, .n_q = 3, .n_kv = 3, .n_heads = 2, .n_kv_heads = 1, .head_dim = 2};
  // [token][head][dim]
  std::vector<double> q{2, 1, -1, 1, /**/ 1, 1, 1, -1, /**/ 0, 1, 2, 0};
  std::vector<double> k{1, 0, 0, 2, 1, -1}, v{1, 0, 0, 3, -1, 1};
  static double e(int n) { return std::exp(-n / std::sqrt(2.0)); }  // e^n = exp(-n r)
  // out: [token][head][dim]
  std::vector<double> hand_out() const {
    const double S = 1 + e(2) + e(3);
    return {1,
            0,
            1,
            0,  // row 0: h0, h1
            e(1) / (1 + e(1)),
            3 / (1 + e(1)),
            1 / (1 + e(3)),
            3 * e(3) / (1 + e(3)),  // row 1
            (e(2) - e(3)) / S,
            (3 + e(3)) / S,
            0,
            (3 * e(2) + 1) / (2 + e(2))};  // row 2
  }
  // probs: [head][row][key]
  std::vector<double> hand_probs() const {
    const double S = 1 + e(2) + e(3);
    return {1,
            0,
            0,
            e(1) / (1 + e(1)),
            1 / (1 + e(1)),
            0,
            e(2) / S,
            1 / S,
            e(3) / S,  // h0
            1,
            0,
            0,
            1 / (1 + e(3)),
            e(3) / (1 + e(3)),
            0,
            1 / (2 + e(2)),
            e(2) / (2 + e(2)),
            1 / (2 + e(2))};  // h1
  }
};

// The WRONG, transposed kernel: score(i, j) = k_i . q_j (head h's queries, the one kv head's
// keys) instead of q_i . k_j, causal, for batch 1, one kv head, head_dim 2. Output laid out as
// the kernel's, [token][head][dim].
std::vector<double> transposed_attention(const std::vector<double>& q, const std::vector<double>& k,
                                         const std::vector<double>& v, int64_t n, int64_t H) {
  std::vector<double> out(n * H * 2, 0.0);
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < n; ++i) {
      std::vector<double> sc(i + 1);
      for (int64_t j = 0; j <= i; ++j)
        sc[j] = (k[2 * i] * q[(j * H + h) * 2] + k[2 * i + 1] * q[(j * H + h) * 2 + 1]) / std::sqrt(2.0);
      double mx = sc[0], sum = 0;
      for (double x : sc) mx = std::max(mx, x);
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j <= i; ++j)
        for (int d = 0; d < 2; ++d) out[(i * H + h) * 2 + d] += sc[j] / sum * v[2 * j + d];
    }
  return out;
}

TEST(AttentionHand, AsymmetricGqaCaseMatchesHandComputation) {
  const AsymmetricGqaExample ex;
  MaskData md;
  const auto f = forward<double>(ex.s, md.get(ex.s), ex.q, ex.k, ex.v);
  EXPECT_TRUE(all_close(f.out, ex.hand_out(), 0, 1e-12));
  EXPECT_TRUE(all_close(f.probs, ex.hand_probs(), 0, 1e-12));
  // The decimals written above, as an independent check of the closed forms.
  const std::vector<double> decimals{1,
                                     0,
                                     1,
                                     0,
                                     0.330238450673343,
                                     2.009284647979971,
                                     0.892958198534830,
                                     0.321125404395511,
                                     0.090421415952098,
                                     2.288992058266174,
                                     0,
                                     0.770958629461984};
  EXPECT_TRUE(all_close(f.out, decimals, 0, 1e-14));
  // The score matrix really is asymmetric: q_1.k_0 = 1 but q_0.k_1 = 2 (head 0).
  ASSERT_NE(ex.q[(1 * 2 + 0) * 2] * ex.k[0] + ex.q[(1 * 2 + 0) * 2 + 1] * ex.k[1],
            ex.q[(0 * 2 + 0) * 2] * ex.k[2] + ex.q[(0 * 2 + 0) * 2 + 1] * ex.k[3]);

  // The transposed variant matches neither the hand values nor the kernel...
  const auto wrong = transposed_attention(ex.q, ex.k, ex.v, 3, 2);
  // ...its head 0 row 1 is the hand-derived (0.5, 1.5) written above,
  EXPECT_NEAR(wrong[(1 * 2 + 0) * 2], 0.5, 1e-15);
  EXPECT_NEAR(wrong[(1 * 2 + 0) * 2 + 1], 1.5, 1e-15);
  // and it differs from ours by far more than the 1e-12 tolerance above, in every row past 0.
  for (int64_t i = 1; i < 3; ++i)
    for (int64_t h = 0; h < 2; ++h) {
      const int64_t o = (i * 2 + h) * 2;
      EXPECT_GT(std::abs(wrong[o] - f.out[o]) + std::abs(wrong[o + 1] - f.out[o + 1]), 0.1) << "i=" << i << " h=" << h;
    }
  EXPECT_FALSE(all_close(wrong, ex.hand_out(), 0, 1e-3));
  // Why the symmetric example could not catch this: with keys = queries the transposed variant agrees.
  const SymmetricExample sym;
  const auto sym_ours = forward<double>(sym.s, md.get(sym.s), sym.q, sym.q, sym.v);
  EXPECT_TRUE(all_close(transposed_attention(sym.q, sym.q, sym.v, 3, 1), sym_ours.out, 0, 1e-15));

  // Float agrees to float precision (every input is exact in float).
  const auto ff = forward<float>(ex.s, md.get(ex.s), as<float>(ex.q), as<float>(ex.k), as<float>(ex.v));
  EXPECT_TRUE(all_close(ff.out, ex.hand_out(), 0, 1e-6));
}

}  // namespace
}  // namespace tformer
