// The reference attention kernel: the spec's three checks (one-key first row, cached chunk ==
// full pass, future changes invisible) over heads and batches; two hand-computed cases (one
// symmetric, one asymmetric with GQA, the latter against a transposed-score variant); the masking
// traps (score 0 instead of -infinity, zeroing after softmax, padding, empty rows, the cache
// offset); GQA against repeated K/V; gradients against finite differences; precision, threads
// and memory layouts.
//
// Unless a test says otherwise: q is [B, n_q, H, hd], k and v are [B, n_kv, KVH, hd], out is
// [B, n_q, H, hd], probs is [B, H, n_q, n_kv], all row-major. Inputs are random and distinct per
// coordinate (equal keys would give uniform weights and hide transposes and mask errors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::random_values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
std::vector<T> as(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

int64_t q_size(const AttentionShape& s) { return s.batch * s.n_q * s.n_heads * s.head_dim; }
int64_t kv_size(const AttentionShape& s) { return s.batch * s.n_kv * s.n_kv_heads * s.head_dim; }
int64_t p_size(const AttentionShape& s) { return s.batch * s.n_heads * s.n_q * s.n_kv; }
int64_t q_index(const AttentionShape& s, int64_t b, int64_t i, int64_t h, int64_t d = 0) {
  return ((b * s.n_q + i) * s.n_heads + h) * s.head_dim + d;
}
int64_t kv_index(const AttentionShape& s, int64_t b, int64_t j, int64_t g, int64_t d = 0) {
  return ((b * s.n_kv + j) * s.n_kv_heads + g) * s.head_dim + d;
}
int64_t p_index(const AttentionShape& s, int64_t b, int64_t h, int64_t i, int64_t j) {
  return ((b * s.n_heads + h) * s.n_q + i) * s.n_kv + j;
}

// Owns the mask arrays and hands out an AttentionMask pointing at them.
struct MaskData {
  bool causal = true;
  std::vector<int64_t> q_offset, kv_len;
  std::vector<uint8_t> key_valid;
  AttentionMask get(const AttentionShape& s) const {
    AttentionMask m;
    m.causal = causal;
    m.q_offset = q_offset.empty() ? nullptr : q_offset.data();
    m.kv_len = kv_len.empty() ? nullptr : kv_len.data();
    m.key_valid = key_valid.empty() ? nullptr : key_valid.data();
    m.n_kv = s.n_kv;
    return m;
  }
};

template <typename T>
struct Forward {
  std::vector<T> out, probs;
};

// Runs the kernel on arbitrary views; out and probs are contiguous and start as garbage (-7) so a
// value the kernel forgets to write shows.
template <typename T>
Forward<T> forward(const AttentionShape& s, const AttentionMask& m, HeadsView<const T> q, HeadsView<const T> k,
                   HeadsView<const T> v) {
  Forward<T> f{std::vector<T>(q_size(s), T(-7)), std::vector<T>(p_size(s), T(-7))};
  attention_forward<T>(heads_btHd(f.out.data(), s.n_q, s.n_heads, s.head_dim), f.probs.data(), q, k, v, s, m);
  return f;
}

// The same with q, k, v contiguous in the default layouts.
template <typename T>
Forward<T> forward(const AttentionShape& s, const AttentionMask& m, const std::vector<T>& q, const std::vector<T>& k,
                   const std::vector<T>& v) {
  return forward<T>(s, m, heads_btHd(q.data(), s.n_q, s.n_heads, s.head_dim),
                    heads_btHd(k.data(), s.n_kv, s.n_kv_heads, s.head_dim),
                    heads_btHd(v.data(), s.n_kv, s.n_kv_heads, s.head_dim));
}

template <typename T>
struct Grads {
  std::vector<T> dq, dk, dv;
};

// Backward in the default layouts, accumulating into g.
template <typename T>
void backward(const AttentionShape& s, const AttentionMask& m, const std::vector<T>& q, const std::vector<T>& k,
              const std::vector<T>& v, const std::vector<T>& probs, const std::vector<T>& dout, Grads<T>& g) {
  const int64_t hd = s.head_dim;
  attention_backward<T>(
      heads_btHd(g.dq.data(), s.n_q, s.n_heads, hd), heads_btHd(g.dk.data(), s.n_kv, s.n_kv_heads, hd),
      heads_btHd(g.dv.data(), s.n_kv, s.n_kv_heads, hd), heads_btHd(dout.data(), s.n_q, s.n_heads, hd), probs.data(),
      heads_btHd(q.data(), s.n_q, s.n_heads, hd), heads_btHd(k.data(), s.n_kv, s.n_kv_heads, hd),
      heads_btHd(v.data(), s.n_kv, s.n_kv_heads, hd), s, m);
}

template <typename T>
Grads<T> zero_grads(const AttentionShape& s) {
  return {std::vector<T>(q_size(s), T(0)), std::vector<T>(kv_size(s), T(0)), std::vector<T>(kv_size(s), T(0))};
}

// Rows [from, from + count) of sequence b of an output laid out [B, n_rows, H, hd].
template <typename T>
std::vector<T> rows_of(const std::vector<T>& out, int64_t n_rows, int64_t row_width, int64_t b, int64_t from,
                       int64_t count) {
  const auto first = out.begin() + (b * n_rows + from) * row_width;
  return std::vector<T>(first, first + count * row_width);
}

bool any_nan(const std::vector<double>& v) {
  for (double x : v)
    if (std::isnan(x)) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// 1. The spec kernel's three checks, over heads and batches.

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

TEST(AttentionSpec, FirstRowReturnsItsOnlyKeysValueExactly) {
  check_first_row_returns_its_only_key<double>();
  check_first_row_returns_its_only_key<float>();
}

// Every prompt length N in 1..9 and chunk sizes {1, 2, 3, 7, N}: the chunk's rows [s0, s0 + c)
// with q_offset s0 over keys [0, s0 + c) equal rows [s0, s0 + c) of the full causal pass. Two
// ways to pass the keys: n_kv = s0 + c (a view onto the full keys), and a [B, KVH, capacity, hd]
// cache with kv_len = s0 + c whose unused slots hold NaN (they must never be read).
// Tolerance 1e-12 in double on O(1) values: the math is identical, only the summation order may
// legitimately differ in a tiled kernel (this reference happens to be bit-exact here); a wrong
// mask or offset changes a row by ~0.1.
TEST(AttentionSpec, CachedChunksEqualTheFullPass) {
  const int64_t H = 4, KVH = 2, hd = 5, B = 2, N_max = 9, cap = N_max + 2;
  for (int64_t N = 1; N <= N_max; ++N) {
    const AttentionShape full_s{.batch = B, .n_q = N, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto q = random_values(q_size(full_s), 10 + N), k = random_values(kv_size(full_s), 20 + N),
               v = random_values(kv_size(full_s), 30 + N);
    MaskData causal;
    const auto full = forward<double>(full_s, causal.get(full_s), q, k, v);
    for (int64_t c : {int64_t(1), int64_t(2), int64_t(3), int64_t(7), N}) {
      for (int64_t s0 = 0; s0 < N; s0 += c) {
        const int64_t len = std::min(c, N - s0);
        SCOPED_TRACE(::testing::Message() << "N=" << N << " chunk=" << c << " start=" << s0);
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
          EXPECT_TRUE(all_close(rows_of(fa.out, len, H * hd, b, 0, len), want, 0, 1e-12)) << "b=" << b;
          EXPECT_TRUE(all_close(rows_of(fb.out, len, H * hd, b, 0, len), want, 0, 1e-12)) << "b=" << b << " (cache)";
        }
      }
    }
  }
}

// Batch 2 whose sequences sit at different offsets in one call: each row still equals its own
// sequence's full pass.
TEST(AttentionSpec, CachedChunkWithDifferentOffsetsPerSequence) {
  const int64_t H = 3, KVH = 1, hd = 4, N = 9, cap = 12;
  const AttentionShape full_s{.batch = 2, .n_q = N, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
  const auto q = random_values(q_size(full_s), 41), k = random_values(kv_size(full_s), 42),
             v = random_values(kv_size(full_s), 43);
  MaskData causal;
  const auto full = forward<double>(full_s, causal.get(full_s), q, k, v);
  struct Case {
    int64_t o0, o1, c;
  };
  for (const Case cs : {Case{0, 4, 3}, Case{5, 1, 2}, Case{2, 6, 3}, Case{8, 0, 1}, Case{3, 0, 6}}) {
    SCOPED_TRACE(::testing::Message() << "offsets " << cs.o0 << ", " << cs.o1 << " chunk " << cs.c);
    const int64_t off[2] = {cs.o0, cs.o1};
    const AttentionShape s{.batch = 2, .n_q = cs.c, .n_kv = cap, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    std::vector<double> qc(q_size(s)), kc(2 * KVH * cap * hd, kNaN), vc(2 * KVH * cap * hd, kNaN);
    for (int64_t b = 0; b < 2; ++b) {
      const auto rows = rows_of(q, N, H * hd, b, off[b], cs.c);
      std::copy(rows.begin(), rows.end(), qc.begin() + b * cs.c * H * hd);
      for (int64_t j = 0; j < off[b] + cs.c; ++j)
        for (int64_t g = 0; g < KVH; ++g)
          for (int64_t d = 0; d < hd; ++d) {
            kc[((b * KVH + g) * cap + j) * hd + d] = k[kv_index(full_s, b, j, g, d)];
            vc[((b * KVH + g) * cap + j) * hd + d] = v[kv_index(full_s, b, j, g, d)];
          }
    }
    MaskData md;
    md.q_offset = {cs.o0, cs.o1};
    md.kv_len = {cs.o0 + cs.c, cs.o1 + cs.c};
    const auto f = forward<double>(s, md.get(s), heads_btHd<const double>(qc.data(), cs.c, H, hd),
                                   heads_bHTd<const double>(kc.data(), cap, KVH, hd),
                                   heads_bHTd<const double>(vc.data(), cap, KVH, hd));
    for (int64_t b = 0; b < 2; ++b)
      EXPECT_TRUE(
          all_close(rows_of(f.out, cs.c, H * hd, b, 0, cs.c), rows_of(full.out, N, H * hd, b, off[b], cs.c), 0, 1e-12))
          << "b=" << b;
  }
}

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

TEST(AttentionSpec, FutureKeyAndValueLeaveEarlierRowsBitIdentical) {
  check_future_changes_are_invisible<double>();
  check_future_changes_are_invisible<float>();
}

// ---------------------------------------------------------------------------------------------
// 2. A case worked out by hand: the spec's example, keys = queries, head_dim 2.
//
//   q = k = {1,0}, {0,1}, {1,1};  v = {2,0}, {0,3}, {-1,1};  scale 1/sqrt(2) = r = 0.70710678...
//   e := exp(-r) = 0.49306869139523984
//   row 0: only key 0 is legal                         -> out = (2, 0), P = (1, 0, 0)
//   row 1: scores q1.k0 r = 0, q1.k1 r = r; minus the max r: (-r, 0) -> exp (e, 1)
//          P = (e/(1+e), 1/(1+e), 0) = (0.33023845067334, 0.66976154932666, 0)
//          out = (2 e/(1+e), 3/(1+e)) = (0.66047690134669, 2.00928464797997)
//   row 2: scores r, r, 2r; minus 2r: (-r, -r, 0) -> exp (e, e, 1); sum 1 + 2e = 1.98613738279048
//          P = (e, e, 1)/(1+2e) = (0.24825507825772, 0.24825507825772, 0.50348984348455)
//          out = (2 e - 1, 3 e + 1)/(1+2e) = (-0.00697968696911, 1.24825507825772)
struct SpecExample {
  AttentionShape s{.batch = 1, .n_q = 3, .n_kv = 3, .n_heads = 1, .n_kv_heads = 1, .head_dim = 2};
  std::vector<double> q{1, 0, 0, 1, 1, 1}, v{2, 0, 0, 3, -1, 1};
  std::vector<double> hand_out() const {
    const double e = std::exp(-1 / std::sqrt(2.0));
    return {2, 0, 2 * e / (1 + e), 3 / (1 + e), (2 * e - 1) / (1 + 2 * e), (3 * e + 1) / (1 + 2 * e)};
  }
  std::vector<double> hand_probs() const {
    const double e = std::exp(-1 / std::sqrt(2.0));
    return {1, 0, 0, e / (1 + e), 1 / (1 + e), 0, e / (1 + 2 * e), e / (1 + 2 * e), 1 / (1 + 2 * e)};
  }
};

TEST(AttentionHand, SpecExampleMatchesHandComputation) {
  const SpecExample ex;
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
// query heads read one kv head (GQA), batch 1, 3 tokens, head_dim 2, causal. In the spec example
// above keys = queries, so the score matrix is symmetric and a kernel computing k_i.q_j instead
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
  // Why the spec example could not catch this: with keys = queries the transposed variant agrees.
  const SpecExample spec;
  const auto spec_ours = forward<double>(spec.s, md.get(spec.s), spec.q, spec.q, spec.v);
  EXPECT_TRUE(all_close(transposed_attention(spec.q, spec.q, spec.v, 3, 1), spec_ours.out, 0, 1e-15));

  // Float agrees to float precision (every input is exact in float).
  const auto ff = forward<float>(ex.s, md.get(ex.s), as<float>(ex.q), as<float>(ex.k), as<float>(ex.v));
  EXPECT_TRUE(all_close(ff.out, ex.hand_out(), 0, 1e-6));
}

// ---------------------------------------------------------------------------------------------
// 3. Masking traps.

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
  const SpecExample ex;
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
  const SpecExample ex;
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

// TRAPS.md 3: a left-padded batch equals each prompt run alone.
TEST(AttentionMask, LeftPaddedBatchEqualsEachPromptAlone) {
  const int64_t H = 2, KVH = 1, hd = 4, n = 6, pad = 2;
  const AttentionShape s{.batch = 2, .n_q = n, .n_kv = n, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
  const auto q = random_values(q_size(s), 71), k = random_values(kv_size(s), 72), v = random_values(kv_size(s), 73);
  MaskData md;
  md.key_valid = {1, 1, 1, 1, 1, 1, /**/ 0, 0, 1, 1, 1, 1};
  const auto batch = forward<double>(s, md.get(s), q, k, v);
  for (int64_t b = 0; b < 2; ++b) {
    const int64_t start = b == 0 ? 0 : pad, len = n - start;
    const AttentionShape one{.batch = 1, .n_q = len, .n_kv = len, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto qa = rows_of(q, n, H * hd, b, start, len), ka = rows_of(k, n, KVH * hd, b, start, len),
               va = rows_of(v, n, KVH * hd, b, start, len);
    MaskData causal;
    const auto alone = forward<double>(one, causal.get(one), qa, ka, va);
    EXPECT_TRUE(all_close(rows_of(batch.out, n, H * hd, b, start, len), alone.out, 0, 1e-12)) << "b=" << b;
    // The padding rows themselves see no key at all: zeros.
    EXPECT_EQ(rows_of(batch.out, n, H * hd, b, 0, start), std::vector<double>(start * H * hd, 0.0));
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

// TRAPS.md 1: a one-token chunk at absolute position 100 reads keys 0..100, not just key 0 (the
// top-left-aligned triangle of a 1 x 101 mask).
TEST(AttentionMask, OneTokenChunkAtPosition100SeesKeys0Through100) {
  const int64_t N = 101, H = 2, KVH = 1, hd = 4;
  const AttentionShape full_s{.batch = 1, .n_q = N, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
  const auto q = random_values(q_size(full_s), 91), k = random_values(kv_size(full_s), 92),
             v = random_values(kv_size(full_s), 93);
  MaskData causal;
  const auto full = forward<double>(full_s, causal.get(full_s), q, k, v);
  for (int64_t c : {1, 3}) {
    const int64_t s0 = N - c;
    const AttentionShape s{.batch = 1, .n_q = c, .n_kv = N, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    const auto qc = rows_of(q, N, H * hd, 0, s0, c);
    MaskData md;
    md.q_offset = {s0};
    const auto f = forward<double>(s, md.get(s), qc, k, v);
    EXPECT_TRUE(all_close(f.out, rows_of(full.out, N, H * hd, 0, s0, c), 0, 1e-12)) << "chunk " << c;
    // The last row puts positive weight on all 101 keys.
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
  }
}

// ---------------------------------------------------------------------------------------------
// 4. Grouped-query attention.

// MHA (n_kv_heads = n_heads) equals one single-head call per head, made through views that pick
// that head out of the same arrays: the head indexing is right. Identical arithmetic: exact.
TEST(AttentionGqa, MhaEqualsOneSingleHeadCallPerHead) {
  const AttentionShape s{.batch = 2, .n_q = 5, .n_kv = 5, .n_heads = 3, .n_kv_heads = 3, .head_dim = 4};
  const auto q = random_values(q_size(s), 101), k = random_values(kv_size(s), 102), v = random_values(kv_size(s), 103);
  MaskData md;
  md.key_valid = {1, 0, 1, 1, 1, /**/ 1, 1, 1, 0, 1};
  const auto f = forward<double>(s, md.get(s), q, k, v);
  const int64_t hd = 4, H = 3;
  for (int64_t h = 0; h < H; ++h) {
    AttentionShape one = s;
    one.n_heads = one.n_kv_heads = 1;
    auto view = [&](const std::vector<double>& x) {
      return HeadsView<const double>{x.data() + h * hd, 5 * H * hd, H * hd, hd};
    };
    const auto fh = forward<double>(one, md.get(one), view(q), view(k), view(v));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 5; ++i)
        for (int64_t d = 0; d < hd; ++d)
          EXPECT_EQ(fh.out[q_index(one, b, i, 0, d)], f.out[q_index(s, b, i, h, d)]) << "h=" << h;
  }
}

// GQA/MQA equal MHA whose K/V heads are materialised repeated (head h gets kv head h / group),
// forward and backward; the GQA dK/dV are the group sums of the repeated-MHA dK/dV. With causal
// mask, offsets, kv_len and padding in the mix.
TEST(AttentionGqa, GqaAndMqaEqualMhaWithRepeatedKv) {
  const int64_t H = 6, hd = 3, n_q = 4, n_kv = 7;
  for (int64_t KVH : {1, 2, 3, 6}) {
    SCOPED_TRACE(::testing::Message() << "n_kv_heads=" << KVH);
    const int64_t group = H / KVH;
    const AttentionShape s{.batch = 2, .n_q = n_q, .n_kv = n_kv, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
    AttentionShape rep = s;
    rep.n_kv_heads = H;
    const auto q = random_values(q_size(s), 111), k = random_values(kv_size(s), 112 + KVH),
               v = random_values(kv_size(s), 120 + KVH), dout = random_values(q_size(s), 130);
    std::vector<double> kr(kv_size(rep)), vr(kv_size(rep));
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            kr[kv_index(rep, b, j, h, d)] = k[kv_index(s, b, j, h / group, d)];
            vr[kv_index(rep, b, j, h, d)] = v[kv_index(s, b, j, h / group, d)];
          }
    MaskData md;
    md.q_offset = {3, 1};
    md.kv_len = {7, 6};
    md.key_valid = {1, 1, 0, 1, 1, 1, 1, /**/ 1, 1, 1, 1, 0, 1, 1};
    const auto fg = forward<double>(s, md.get(s), q, k, v);
    const auto fr = forward<double>(rep, md.get(rep), q, kr, vr);
    EXPECT_TRUE(all_close(fg.out, fr.out, 0, 1e-14));
    EXPECT_TRUE(all_close(fg.probs, fr.probs, 0, 1e-14));
    auto gg = zero_grads<double>(s);
    auto gr = zero_grads<double>(rep);
    backward<double>(s, md.get(s), q, k, v, fg.probs, dout, gg);
    backward<double>(rep, md.get(rep), q, kr, vr, fr.probs, dout, gr);
    EXPECT_TRUE(all_close(gg.dq, gr.dq, 0, 1e-13));
    std::vector<double> dk_sum(kv_size(s), 0.0), dv_sum(kv_size(s), 0.0);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t j = 0; j < n_kv; ++j)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < hd; ++d) {
            dk_sum[kv_index(s, b, j, h / group, d)] += gr.dk[kv_index(rep, b, j, h, d)];
            dv_sum[kv_index(s, b, j, h / group, d)] += gr.dv[kv_index(rep, b, j, h, d)];
          }
    EXPECT_TRUE(all_close(gg.dk, dk_sum, 0, 1e-13));
    EXPECT_TRUE(all_close(gg.dv, dv_sum, 0, 1e-13));
  }
}

// ---------------------------------------------------------------------------------------------
// 5. Gradients against central finite differences, in double.

// Causal mask, per-sequence offsets, kv_len, padding, GQA, and one fully masked row (seq 1, row
// 0: offset 1 allows slots 0 and 1, both padding). The gradients start non-zero: backward must
// add to them.
TEST(AttentionGrad, BackwardMatchesFiniteDifferences) {
  const AttentionShape s{.batch = 2, .n_q = 3, .n_kv = 6, .n_heads = 4, .n_kv_heads = 2, .head_dim = 3};
  MaskData md;
  md.q_offset = {2, 1};
  md.kv_len = {5, 6};
  md.key_valid = {1, 1, 1, 0, 1, 1, /**/ 0, 0, 1, 1, 1, 1};
  const AttentionMask m = md.get(s);
  std::vector<double> q = random_values(q_size(s), 141), k = random_values(kv_size(s), 142),
                      v = random_values(kv_size(s), 143);
  const std::vector<double> r = random_values(q_size(s), 144);  // loss = sum(r * out)
  auto loss = [&] {
    const auto f = forward<double>(s, m, q, k, v);
    double sum = 0;
    for (int64_t i = 0; i < q_size(s); ++i) sum += r[i] * f.out[i];
    return sum;
  };
  const auto f = forward<double>(s, m, q, k, v);
  Grads<double> g{std::vector<double>(q_size(s), 0.25), std::vector<double>(kv_size(s), -0.5),
                  std::vector<double>(kv_size(s), 1.0)};
  backward<double>(s, m, q, k, v, f.probs, r, g);
  for (auto& x : g.dq) x -= 0.25;
  for (auto& x : g.dk) x += 0.5;
  for (auto& x : g.dv) x -= 1.0;
  EXPECT_LT(test::gradient_error(g.dq, test::numeric_gradient(loss, q)), 1e-6);
  EXPECT_LT(test::gradient_error(g.dk, test::numeric_gradient(loss, k)), 1e-6);
  EXPECT_LT(test::gradient_error(g.dv, test::numeric_gradient(loss, v)), 1e-6);
  // Structural zeros: the fully masked row, and keys no row may read (seq 0: slot 3 is padding,
  // slot 5 is past kv_len).
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(g.dq[q_index(s, 1, 0, h, d)], 0.0);
  for (int64_t j : {3, 5})
    for (int64_t kh = 0; kh < 2; ++kh)
      for (int64_t d = 0; d < 3; ++d) {
        EXPECT_EQ(g.dk[kv_index(s, 0, j, kh, d)], 0.0);
        EXPECT_EQ(g.dv[kv_index(s, 0, j, kh, d)], 0.0);
      }
}

// Non-causal (bidirectional) attention with padding: every row reads every valid key, later keys
// included. Batch 2 with padding in different places (seq 1's first slot, seq 0's last two), kv_len
// on seq 1, n_q != n_kv, GQA. Gradients start non-zero: backward must add to them.
TEST(AttentionGrad, NonCausalWithPaddingMatchesFiniteDifferences) {
  const AttentionShape s{.batch = 2, .n_q = 3, .n_kv = 5, .n_heads = 4, .n_kv_heads = 2, .head_dim = 3};
  MaskData md;
  md.causal = false;
  md.kv_len = {5, 4};
  md.key_valid = {1, 1, 1, 0, 0, /**/ 0, 1, 1, 1, 1};
  const AttentionMask m = md.get(s);
  std::vector<double> q = random_values(q_size(s), 241), k = random_values(kv_size(s), 242),
                      v = random_values(kv_size(s), 243);
  const std::vector<double> r = random_values(q_size(s), 244);  // loss = sum(r * out)
  auto loss = [&] {
    const auto f = forward<double>(s, m, q, k, v);
    double sum = 0;
    for (int64_t i = 0; i < q_size(s); ++i) sum += r[i] * f.out[i];
    return sum;
  };
  const auto f = forward<double>(s, m, q, k, v);
  // Not causal: row 0 of each sequence puts positive weight on a LATER key (seq 0: slot 2; seq 1:
  // slots 2, 3), and every row's weights cover exactly the valid slots.
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          const bool valid = md.key_valid[b * 5 + j] != 0 && j < md.kv_len[b];
          if (valid) {
            EXPECT_GT(f.probs[p_index(s, b, h, i, j)], 0.0) << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
          } else {
            EXPECT_EQ(f.probs[p_index(s, b, h, i, j)], 0.0) << "b=" << b << " h=" << h << " i=" << i << " j=" << j;
          }
        }
  Grads<double> g{std::vector<double>(q_size(s), -0.25), std::vector<double>(kv_size(s), 0.5),
                  std::vector<double>(kv_size(s), 2.0)};
  backward<double>(s, m, q, k, v, f.probs, r, g);
  for (auto& x : g.dq) x += 0.25;
  for (auto& x : g.dk) x -= 0.5;
  for (auto& x : g.dv) x -= 2.0;
  EXPECT_LT(test::gradient_error(g.dq, test::numeric_gradient(loss, q)), 1e-6);
  EXPECT_LT(test::gradient_error(g.dk, test::numeric_gradient(loss, k)), 1e-6);
  EXPECT_LT(test::gradient_error(g.dv, test::numeric_gradient(loss, v)), 1e-6);
  // Structural zeros: padded slots (seq 0: 3, 4; seq 1: 0) and seq 1's slot past kv_len (4 is
  // both valid-flagged and past kv_len = 4) get no gradient. The fixed -0.25/0.5/2.0 offsets were
  // removed above, so "no gradient" reads exactly 0.
  for (auto [b, j] : {std::pair<int64_t, int64_t>{0, 3}, {0, 4}, {1, 0}, {1, 4}})
    for (int64_t kh = 0; kh < 2; ++kh)
      for (int64_t d = 0; d < 3; ++d) {
        EXPECT_EQ(g.dk[kv_index(s, b, j, kh, d)], 0.0) << "b=" << b << " j=" << j;
        EXPECT_EQ(g.dv[kv_index(s, b, j, kh, d)], 0.0) << "b=" << b << " j=" << j;
      }
  // The same data with causal = true is a different function (rows 0 and 1 lose their later keys).
  MaskData causal = md;
  causal.causal = true;
  EXPECT_FALSE(all_close(forward<double>(s, causal.get(s), q, k, v).out, f.out, 0, 1e-3));
}

// Two backward calls accumulate: twice the gradient of one.
TEST(AttentionGrad, BackwardAccumulates) {
  const AttentionShape s{.batch = 1, .n_q = 4, .n_kv = 4, .n_heads = 2, .n_kv_heads = 1, .head_dim = 3};
  MaskData md;
  const auto q = random_values(q_size(s), 151), k = random_values(kv_size(s), 152), v = random_values(kv_size(s), 153),
             dout = random_values(q_size(s), 154);
  const auto f = forward<double>(s, md.get(s), q, k, v);
  auto once = zero_grads<double>(s), twice = zero_grads<double>(s);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, once);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, twice);
  backward<double>(s, md.get(s), q, k, v, f.probs, dout, twice);
  for (auto& x : once.dq) x *= 2;
  for (auto& x : once.dk) x *= 2;
  for (auto& x : once.dv) x *= 2;
  EXPECT_TRUE(all_close(twice.dq, once.dq, 1e-15, 0));
  EXPECT_TRUE(all_close(twice.dk, once.dk, 1e-15, 0));
  EXPECT_TRUE(all_close(twice.dv, once.dv, 1e-15, 0));
}

// ---------------------------------------------------------------------------------------------
// 6. Precision, threads, layouts.

TEST(AttentionNumerics, FloatAgreesWithDouble) {
  const AttentionShape s{.batch = 2, .n_q = 16, .n_kv = 16, .n_heads = 4, .n_kv_heads = 2, .head_dim = 8};
  MaskData md;
  md.q_offset = {0, 0};
  md.key_valid.assign(32, 1);
  md.key_valid[16 + 5] = 0;
  const auto q = random_values(q_size(s), 161), k = random_values(kv_size(s), 162), v = random_values(kv_size(s), 163),
             dout = random_values(q_size(s), 164);
  const auto fd = forward<double>(s, md.get(s), q, k, v);
  const auto ff = forward<float>(s, md.get(s), as<float>(q), as<float>(k), as<float>(v));
  // Inputs rounded to float (relative 6e-8), internal sums in double: output errors ~1e-7.
  EXPECT_TRUE(all_close(ff.out, fd.out, 1e-5, 1e-6));
  EXPECT_TRUE(all_close(ff.probs, fd.probs, 1e-5, 1e-7));
  auto gd = zero_grads<double>(s);
  auto gf = zero_grads<float>(s);
  backward<double>(s, md.get(s), q, k, v, fd.probs, dout, gd);
  backward<float>(s, md.get(s), as<float>(q), as<float>(k), as<float>(v), ff.probs, as<float>(dout), gf);
  EXPECT_TRUE(all_close(gf.dq, gd.dq, 1e-4, 1e-5));
  EXPECT_TRUE(all_close(gf.dk, gd.dk, 1e-4, 1e-5));
  EXPECT_TRUE(all_close(gf.dv, gd.dv, 1e-4, 1e-5));
}

TEST(AttentionNumerics, IdenticalWithOneAndTwoThreads) {
  const AttentionShape s{.batch = 2, .n_q = 48, .n_kv = 48, .n_heads = 4, .n_kv_heads = 2, .head_dim = 16};
  MaskData md;
  const auto q = as<float>(random_values(q_size(s), 171)), k = as<float>(random_values(kv_size(s), 172)),
             v = as<float>(random_values(kv_size(s), 173)), dout = as<float>(random_values(q_size(s), 174));
  std::vector<Forward<float>> fwd;
  std::vector<Grads<float>> grads;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    fwd.push_back(forward<float>(s, md.get(s), q, k, v));
    grads.push_back(zero_grads<float>(s));
    backward<float>(s, md.get(s), q, k, v, fwd.back().probs, dout, grads.back());
  }
  set_num_threads(0);
  EXPECT_EQ(fwd[0].out, fwd[1].out);
  EXPECT_EQ(fwd[0].probs, fwd[1].probs);
  EXPECT_EQ(grads[0].dq, grads[1].dq);
  EXPECT_EQ(grads[0].dk, grads[1].dk);
  EXPECT_EQ(grads[0].dv, grads[1].dv);
}

// Keys and values stored [B, T, H, hd] (projections) and [B, H, T, hd] (the cache): identical
// outputs and identical gradients (same arithmetic, different addresses).
TEST(AttentionNumerics, StridedKvLayoutsGiveIdenticalResults) {
  const int64_t B = 2, T = 5, KVH = 2, H = 4, hd = 3;
  const AttentionShape s{.batch = B, .n_q = T, .n_kv = T, .n_heads = H, .n_kv_heads = KVH, .head_dim = hd};
  MaskData md;
  md.q_offset = {0, 0};
  const auto q = random_values(q_size(s), 181), k = random_values(kv_size(s), 182), v = random_values(kv_size(s), 183),
             dout = random_values(q_size(s), 184);
  std::vector<double> kt(k.size()), vt(v.size());  // [B, KVH, T, hd]
  auto t_index = [&](int64_t b, int64_t j, int64_t g, int64_t d) { return ((b * KVH + g) * T + j) * hd + d; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t g = 0; g < KVH; ++g)
        for (int64_t d = 0; d < hd; ++d) {
          kt[t_index(b, j, g, d)] = k[kv_index(s, b, j, g, d)];
          vt[t_index(b, j, g, d)] = v[kv_index(s, b, j, g, d)];
        }
  const auto a = forward<double>(s, md.get(s), q, k, v);
  const auto qv = heads_btHd(q.data(), T, H, hd);
  const auto kv = heads_bHTd(kt.data(), T, KVH, hd), vv = heads_bHTd(vt.data(), T, KVH, hd);
  const auto bt = forward<double>(s, md.get(s), qv, kv, vv);
  EXPECT_EQ(a.out, bt.out);
  EXPECT_EQ(a.probs, bt.probs);

  auto ga = zero_grads<double>(s);
  backward<double>(s, md.get(s), q, k, v, a.probs, dout, ga);
  std::vector<double> dq(q.size(), 0.0), dk(k.size(), 0.0), dv(v.size(), 0.0);
  attention_backward<double>(heads_btHd(dq.data(), T, H, hd), heads_bHTd(dk.data(), T, KVH, hd),
                             heads_bHTd(dv.data(), T, KVH, hd), heads_btHd(dout.data(), T, H, hd), bt.probs.data(), qv,
                             kv, vv, s, md.get(s));
  EXPECT_EQ(dq, ga.dq);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < T; ++j)
      for (int64_t g = 0; g < KVH; ++g)
        for (int64_t d = 0; d < hd; ++d) {
          EXPECT_EQ(dk[t_index(b, j, g, d)], ga.dk[kv_index(s, b, j, g, d)]);
          EXPECT_EQ(dv[t_index(b, j, g, d)], ga.dv[kv_index(s, b, j, g, d)]);
        }
}

// ---------------------------------------------------------------------------------------------
// 7. Argument checks.

TEST(AttentionValidate, RejectsBadShapesAndMasks) {
  const AttentionShape ok{.batch = 2, .n_q = 3, .n_kv = 4, .n_heads = 6, .n_kv_heads = 2, .head_dim = 8};
  AttentionMask m;
  EXPECT_NO_THROW(validate(ok, m));
  for (int64_t kvh : {4, 5, 7}) {
    AttentionShape s = ok;
    s.n_kv_heads = kvh;
    EXPECT_THROW(validate(s, m), Error) << "n_kv_heads " << kvh;
  }
  for (int field = 0; field < 6; ++field)
    for (int64_t bad : {0, -1}) {
      AttentionShape s = ok;
      int64_t* f[] = {&s.batch, &s.n_q, &s.n_kv, &s.n_heads, &s.n_kv_heads, &s.head_dim};
      *f[field] = bad;
      EXPECT_THROW(validate(s, m), Error) << "field " << field << " = " << bad;
    }
  const std::vector<uint8_t> valid(2 * 4, 1);
  m.key_valid = valid.data();
  m.n_kv = 3;  // wrong stride
  EXPECT_THROW(validate(ok, m), Error);
  m.n_kv = 4;
  EXPECT_NO_THROW(validate(ok, m));
  const std::vector<int64_t> neg_offset{0, -1}, long_kv{4, 5};
  AttentionMask m2;
  m2.q_offset = neg_offset.data();
  EXPECT_THROW(validate(ok, m2), Error);
  AttentionMask m3;
  m3.kv_len = long_kv.data();
  EXPECT_THROW(validate(ok, m3), Error);
  // The kernels check too.
  AttentionShape bad = ok;
  bad.n_kv_heads = 4;
  std::vector<double> x(1024);
  const auto view = heads_btHd(x.data(), 4, 6, 8);
  EXPECT_THROW(attention_forward<double>(view, x.data(), view, view, view, bad, AttentionMask{}), Error);
  EXPECT_THROW(attention_backward<double>(view, view, view, view, x.data(), view, view, view, bad, AttentionMask{}),
               Error);
}

}  // namespace
}  // namespace tformer
