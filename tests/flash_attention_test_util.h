// Helpers shared by the tiled attention kernel's tests (test_kernels_flash_attention*.cpp): a
// case (shape, mask, layout), its data with NaN in every key slot the mask disallows (a kernel
// that reads one shows NaN), and one call of the reference or the tiled kernel on it, forward and,
// when the case asks, backward. Outputs start as -7 (a value the kernel forgets to write shows),
// gradients start as random values (the backward accumulates).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "test_util.h"

namespace tformer::test {

struct Case {
  int64_t batch = 1, n_q = 1, n_kv = 1, n_heads = 1, n_kv_heads = 1, head_dim = 16;
  bool causal = true;
  std::vector<int64_t> q_offset, kv_len;  // empty = none
  std::vector<uint8_t> key_valid;         // empty = all valid
  bool cache_layout = false;              // k, v as [B, KVH, n_kv, hd]
  bool grads = true;
  uint64_t seed = 1;

  AttentionShape shape() const { return {batch, n_q, n_kv, n_heads, n_kv_heads, head_dim}; }
  AttentionMask mask() const {
    AttentionMask m;
    m.causal = causal;
    m.q_offset = q_offset.empty() ? nullptr : q_offset.data();
    m.kv_len = kv_len.empty() ? nullptr : kv_len.data();
    m.key_valid = key_valid.empty() ? nullptr : key_valid.data();
    m.n_kv = n_kv;
    return m;
  }
};

template <typename T>
struct Data {
  std::vector<T> q, k, v, dout, dq0, dk0, dv0;
  HeadsView<const T> qv, kv, vv, doutv;
};

// Random inputs; k and v hold NaN in every slot no query may read (past kv_len, padding).
template <typename T>
Data<T> make_data(const Case& c) {
  const AttentionShape s = c.shape();
  const AttentionMask m = c.mask();
  const int64_t hd = s.head_dim, qn = s.batch * s.n_q * s.n_heads * hd, kn = s.batch * s.n_kv * s.n_kv_heads * hd;
  Data<T> d;
  d.q = as<T>(random_values(qn, c.seed * 10 + 1));
  d.k = as<T>(random_values(kn, c.seed * 10 + 2));
  d.v = as<T>(random_values(kn, c.seed * 10 + 3));
  d.dout = as<T>(random_values(qn, c.seed * 10 + 4));
  d.dq0 = as<T>(random_values(qn, c.seed * 10 + 5));
  d.dk0 = as<T>(random_values(kn, c.seed * 10 + 6));
  d.dv0 = as<T>(random_values(kn, c.seed * 10 + 7));
  d.qv = heads_btHd<const T>(d.q.data(), s.n_q, s.n_heads, hd);
  d.doutv = heads_btHd<const T>(d.dout.data(), s.n_q, s.n_heads, hd);
  if (c.cache_layout) {
    d.kv = heads_bHTd<const T>(d.k.data(), s.n_kv, s.n_kv_heads, hd);
    d.vv = heads_bHTd<const T>(d.v.data(), s.n_kv, s.n_kv_heads, hd);
  } else {
    d.kv = heads_btHd<const T>(d.k.data(), s.n_kv, s.n_kv_heads, hd);
    d.vv = heads_btHd<const T>(d.v.data(), s.n_kv, s.n_kv_heads, hd);
  }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.n_kv; ++j) {
      const bool readable = (!m.kv_len || j < m.kv_len[b]) && (!m.key_valid || m.key_valid[b * s.n_kv + j]);
      if (readable) continue;
      for (int64_t g = 0; g < s.n_kv_heads; ++g) {
        const int64_t off = d.kv.at(b, j, g) - d.k.data();
        for (int64_t e = 0; e < hd; ++e) d.k[off + e] = d.v[off + e] = std::numeric_limits<T>::quiet_NaN();
      }
    }
  return d;
}

template <typename T>
struct Result {
  std::vector<T> out, lse, dq, dk, dv;
};

template <typename T>
Result<T> run_reference(const Case& c, const Data<T>& d) {
  const AttentionShape s = c.shape();
  const AttentionMask m = c.mask();
  const int64_t hd = s.head_dim;
  Result<T> r{std::vector<T>(d.q.size(), T(-7)), {}, d.dq0, d.dk0, d.dv0};
  std::vector<T> probs(static_cast<size_t>(s.batch * s.n_heads * s.n_q * s.n_kv));
  attention_forward<T>(heads_btHd(r.out.data(), s.n_q, s.n_heads, hd), probs.data(), d.qv, d.kv, d.vv, s, m);
  if (c.grads)
    attention_backward<T>(
        heads_btHd(r.dq.data(), s.n_q, s.n_heads, hd), heads_btHd(r.dk.data(), s.n_kv, s.n_kv_heads, hd),
        heads_btHd(r.dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv, probs.data(), d.qv, d.kv, d.vv, s, m);
  // lse in double, straight from the definition.
  r.lse.assign(static_cast<size_t>(s.batch * s.n_heads * s.n_q), T(0));
  const int64_t group = s.n_heads / s.n_kv_heads;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_heads; ++h)
      for (int64_t i = 0; i < s.n_q; ++i) {
        double mx = -std::numeric_limits<double>::infinity();
        std::vector<double> sc;
        for (int64_t j = 0; j < s.n_kv; ++j) {
          if (!m.allowed(b, i, j)) continue;
          double acc = 0;
          for (int64_t e = 0; e < hd; ++e)
            acc += static_cast<double>(d.qv.at(b, i, h)[e]) * static_cast<double>(d.kv.at(b, j, h / group)[e]);
          sc.push_back(acc / std::sqrt(static_cast<double>(hd)));
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        r.lse[(b * s.n_heads + h) * s.n_q + i] =
            static_cast<T>(sc.empty() ? -std::numeric_limits<double>::infinity() : mx + std::log(sum));
      }
  return r;
}

template <typename T>
Result<T> run_flash(const Case& c, const Data<T>& d) {
  const AttentionShape s = c.shape();
  const AttentionMask m = c.mask();
  const int64_t hd = s.head_dim;
  Result<T> r{std::vector<T>(d.q.size(), T(-7)),
              std::vector<T>(static_cast<size_t>(s.batch * s.n_heads * s.n_q), T(-7)), d.dq0, d.dk0, d.dv0};
  flash_attention_forward<T>(heads_btHd(r.out.data(), s.n_q, s.n_heads, hd), r.lse.data(), d.qv, d.kv, d.vv, s, m);
  if (c.grads)
    flash_attention_backward<T>(
        heads_btHd(r.dq.data(), s.n_q, s.n_heads, hd), heads_btHd(r.dk.data(), s.n_kv, s.n_kv_heads, hd),
        heads_btHd(r.dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv,
        heads_btHd<const T>(r.out.data(), s.n_q, s.n_heads, hd), r.lse.data(), d.qv, d.kv, d.vv, s, m);
  return r;
}

template <typename T>
bool any_nan(const std::vector<T>& v) {
  for (T x : v)
    if (std::isnan(x)) return true;
  return false;
}

// Where an element of q, out, dq ([B, n_q, H, hd]), of k, dk, dv ([B, n_kv, KVH, hd], the default
// layout the gradients use) and of the lse ([B, H, n_q]) sits.
inline Layout q_layout(const Case& c) { return {{{"b", c.batch}, {"i", c.n_q}, {"h", c.n_heads}, {"e", c.head_dim}}}; }
inline Layout kv_layout(const Case& c) {
  return {{{"b", c.batch}, {"j", c.n_kv}, {"g", c.n_kv_heads}, {"e", c.head_dim}}};
}
inline Layout lse_layout(const Case& c) { return {{{"b", c.batch}, {"h", c.n_heads}, {"i", c.n_q}}}; }

inline std::string describe(const Case& c) {
  std::ostringstream os;
  os << "B=" << c.batch << " n_q=" << c.n_q << " n_kv=" << c.n_kv << " H=" << c.n_heads << " KVH=" << c.n_kv_heads
     << " hd=" << c.head_dim << (c.causal ? " causal" : " full") << (c.cache_layout ? " cache-layout" : "");
  if (!c.q_offset.empty()) os << " q_offset[0]=" << c.q_offset[0];
  if (!c.kv_len.empty()) os << " kv_len[0]=" << c.kv_len[0];
  if (!c.key_valid.empty()) os << " padded";
  return os.str();
}

}  // namespace tformer::test
