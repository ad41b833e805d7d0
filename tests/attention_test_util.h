// Helpers shared by the reference attention kernel's tests (test_kernels_attention*.cpp): sizes
// and indices of the default layouts, masks that own their arrays, forward and backward calls on
// contiguous inputs or arbitrary views, and a symmetric example worked out by hand.
//
// Unless a test says otherwise: q is [B, n_q, H, hd], k and v are [B, n_kv, KVH, hd], out is
// [B, n_q, H, hd], probs is [B, H, n_q, n_kv], all row-major. Inputs are random and distinct per
// coordinate (equal keys would give uniform weights and hide transposes and mask errors).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/attention.h"

namespace tformer::test {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline int64_t q_size(const AttentionShape& s) { return s.batch * s.n_q * s.n_heads * s.head_dim; }
inline int64_t kv_size(const AttentionShape& s) { return s.batch * s.n_kv * s.n_kv_heads * s.head_dim; }
inline int64_t p_size(const AttentionShape& s) { return s.batch * s.n_heads * s.n_q * s.n_kv; }
inline int64_t q_index(const AttentionShape& s, int64_t b, int64_t i, int64_t h, int64_t d = 0) {
  return ((b * s.n_q + i) * s.n_heads + h) * s.head_dim + d;
}
inline int64_t kv_index(const AttentionShape& s, int64_t b, int64_t j, int64_t g, int64_t d = 0) {
  return ((b * s.n_kv + j) * s.n_kv_heads + g) * s.head_dim + d;
}
inline int64_t p_index(const AttentionShape& s, int64_t b, int64_t h, int64_t i, int64_t j) {
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

inline bool any_nan(const std::vector<double>& v) {
  for (double x : v)
    if (std::isnan(x)) return true;
  return false;
}

// A case worked out by hand, symmetric: keys = queries, head_dim 2.
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
struct SymmetricExample {
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

}  // namespace tformer::test
