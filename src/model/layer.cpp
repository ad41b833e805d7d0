#include "model/layer.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/activation.h"
#include "kernels/elementwise.h"
#include "kernels/embedding.h"
#include "kernels/flash_attention.h"
#include "kernels/linear.h"
#include "kernels/norm.h"
#include "kernels/qlinear.h"
#include "kernels/rope.h"

namespace tformer {

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "tiled") return AttentionKernel::Tiled;
  if (name == "reference") return AttentionKernel::Reference;
  fail_input("--attention", "--attention is \"{}\"; expected \"tiled\" or \"reference\"", name);
}

// ---- activations and scratch ------------------------------------------------------------------

template <typename T>
void declare_layer_acts(BasicArena<T>& arena, const std::string& prefix, const ModelConfig& c, int64_t batch, int64_t n,
                        LayerKeep keep) {
  LayerActs<T> layout;
  visit_layer_acts(layout, c, batch, n, keep,
                   [&](const char* name, const Shape& shape, T*&) { arena.add(prefix + name, shape); });
}

template <typename T>
LayerActs<T> bind_layer_acts(BasicArena<T>& arena, const std::string& prefix, const ModelConfig& c, int64_t batch,
                             int64_t n, LayerKeep keep) {
  LayerActs<T> a;
  visit_layer_acts(a, c, batch, n, keep,
                   [&](const char* name, const Shape&, T*& field) { field = arena.get(prefix + name).data(); });
  if (c.norm_placement == NormPlacement::Post) a.h = a.u1;  // post-LN: h is norm_1's output
  return a;
}

namespace {

// The scratch buffers in one list: f(name, elements per row, field, backward only).
template <typename T, typename F>
void visit_layer_scratch(LayerScratch<T>& s, const ModelConfig& c, F&& f) {
  const int64_t d = c.d_model, dq = c.n_heads * c.head_dim(), dkv = c.n_kv_heads * c.head_dim();
  f("branch", d, s.branch, false);
  f("act", c.d_ff, s.act, false);
  f("dbranch", d, s.dbranch, true);
  f("du", d, s.du, true);
  if (c.norm_placement == NormPlacement::Post) f("dsum", d, s.dsum, true);
  f("dq", dq, s.dq, true);
  f("dout", dq, s.dout, true);
  f("dk", dkv, s.dk, true);
  f("dv", dkv, s.dv, true);
  f("da", c.d_ff, s.da, true);
  f("dact", c.d_ff, s.dact, true);
  if (c.activation == Activation::SwiGLU) f("dg", c.d_ff, s.dg, true);
}

}  // namespace

// With a backward, the forward's two buffers are the backward's dbranch and da (a forward is done
// before its backward starts, and the backward recomputes the activation into da).
template <typename T>
void declare_layer_scratch(BasicArena<T>& arena, const ModelConfig& c, int64_t rows, bool backward) {
  LayerScratch<T> layout;
  visit_layer_scratch(layout, c, [&](const char* name, int64_t width, T*&, bool backward_only) {
    if (backward == backward_only) arena.add(std::string("scratch.") + name, {rows, width});
  });
}

template <typename T>
LayerScratch<T> bind_layer_scratch(BasicArena<T>& arena, const ModelConfig& c, bool backward) {
  LayerScratch<T> s;
  visit_layer_scratch(s, c, [&](const char* name, int64_t, T*& field, bool backward_only) {
    if (backward == backward_only) field = arena.get(std::string("scratch.") + name).data();
  });
  if (backward) {
    s.branch = s.dbranch;
    s.act = s.da;
  }
  return s;
}

// ---- dropout ------------------------------------------------------------------------------------

uint64_t dropout_site_key(uint64_t seed, uint64_t site) { return mix64(seed ^ mix64(site + 0x5151)); }

DropoutMask embedding_dropout(uint64_t seed, double p) {
  return DropoutMask::with_probability(dropout_site_key(seed, 0), p);
}

LayerDropout layer_dropout(uint64_t seed, int64_t layer, double p) {
  const auto l = static_cast<uint64_t>(layer);
  return {DropoutMask::with_probability(dropout_site_key(seed, 1 + 3 * l), p),
          DropoutMask::with_probability(dropout_site_key(seed, 2 + 3 * l), p),
          DropoutMask::with_probability(dropout_site_key(seed, 3 + 3 * l), p)};
}

// ---- norms, embeddings, positions ---------------------------------------------------------------

template <typename T>
void decoder_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows,
                          const ModelConfig& c) {
  const T eps = static_cast<T>(c.norm_eps);
  if (c.norm == NormKind::LayerNorm)
    layernorm_forward<T>(y, mean, rstd, x, w, b, rows, c.d_model, eps);
  else
    rmsnorm_forward<T>(y, rstd, x, w, rows, c.d_model, eps);
}

template <typename T>
void decoder_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, const T* w,
                           int64_t rows, const ModelConfig& c) {
  if (c.norm == NormKind::LayerNorm)
    layernorm_backward<T>(dx, dw, db, dy, x, mean, rstd, w, rows, c.d_model);
  else
    rmsnorm_backward<T>(dx, dw, dy, x, rstd, w, rows, c.d_model);
}

template <typename T>
void embed_forward(T* x, const TokenId* ids, const int64_t* positions, int64_t rows, const ModelParams<T>& p,
                   const T* sinusoidal, const ModelConfig& c, const Weight<T>* stored_rows) {
  const int64_t d = c.d_model;
  if (!stored_rows) {
    embedding_forward<T>(x, ids, p.tok_embeddings, rows, c.vocab_size, d);
  } else if constexpr (std::is_same_v<T, float>) {
    for (int64_t r = 0; r < rows; ++r) {
      TF_CHECK(ids[r] >= 0 && ids[r] < c.vocab_size, "embedding: token id {} outside the vocabulary of {}", ids[r],
               c.vocab_size);
      dequantize_weight_rows(x + r * d, *stored_rows, ids[r], ids[r] + 1);
    }
  } else {
    TF_CHECK(false, "embedding: stored rows in a float model only");
  }
  const T* table = c.positions == Positions::Learned      ? p.pos_embeddings
                   : c.positions == Positions::Sinusoidal ? sinusoidal
                                                          : nullptr;
  if (!table) return;
  parallel_for(rows, rows * d >= kElementwiseParallelMin, [&](int64_t r) {
    for (int64_t e = 0; e < d; ++e) x[r * d + e] += table[positions[r] * d + e];
  });
}

template <typename T>
void embed_backward(const ModelGrads<T>& g, const T* dx, const TokenId* ids, const int64_t* positions, int64_t rows,
                    const ModelConfig& c) {
  const int64_t d = c.d_model;
  embedding_backward<T>(g.tok_embeddings, dx, ids, rows, c.vocab_size, d);
  if (c.positions != Positions::Learned) return;
  // A scatter-add like the token table's: threads split the columns, each element sums its rows
  // in row order.
  constexpr int64_t kColumns = 64;
  const int64_t blocks = (d + kColumns - 1) / kColumns;
  parallel_for(blocks, rows * d >= kElementwiseParallelMin, [&](int64_t blk) {
    const int64_t e0 = blk * kColumns, e1 = std::min(d, e0 + kColumns);
    for (int64_t r = 0; r < rows; ++r) {
      T* row = g.pos_embeddings + positions[r] * d;
      for (int64_t e = e0; e < e1; ++e) row[e] += dx[r * d + e];
    }
  });
}

void sinusoidal_positions(float* out, int64_t n_positions, int64_t d_model) {
  TF_CHECK(d_model % 2 == 0, "sinusoidal positions need an even width, got {}", d_model);
  for (int64_t p = 0; p < n_positions; ++p)
    for (int64_t i = 0; i < d_model / 2; ++i) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * i / static_cast<double>(d_model));
      out[p * d_model + 2 * i] = static_cast<float>(std::sin(angle));
      out[p * d_model + 2 * i + 1] = static_cast<float>(std::cos(angle));
    }
}

template <typename T>
std::vector<T> sinusoidal_table(const ModelConfig& c) {
  if (c.positions != Positions::Sinusoidal) return {};
  std::vector<float> table(static_cast<size_t>(c.context_length * c.d_model));
  sinusoidal_positions(table.data(), c.context_length, c.d_model);
  return std::vector<T>(table.begin(), table.end());
}

// ---- the layer ----------------------------------------------------------------------------------

namespace {

GeluKind gelu_kind(const ModelConfig& c) { return c.activation == Activation::Gelu ? GeluKind::Exact : GeluKind::Tanh; }

// act = gelu(a) or swiglu(a, g), the FFN's activation.
template <typename T>
void ffn_activation(T* act, const LayerActs<T>& a, int64_t n, const ModelConfig& c) {
  if (c.activation == Activation::SwiGLU)
    swiglu_forward<T>(act, a.a, a.g, n);
  else
    gelu_forward<T>(act, a.a, n, gelu_kind(c));
}

// out (rows, d_model) = attn(u): projections, RoPE, attention over the keys `kv` says, wo.
template <typename T>
void attention_branch(T* out, const T* u, const LayerActs<T>& a, const LayerParams<T>& p, const ModelConfig& c,
                      const LayerStep& st, const LayerKV<T>& kv, const AttentionDropout& drop) {
  const int64_t B = st.batch, n = st.n, R = B * n, hd = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t dq = H * hd, dkv = Hkv * hd;
  // q (R, dq), k (R, dkv), v (R, dkv): one pass where the kernels allow (linear_forward_shared)
  linear_forward_shared<T>({{a.q, &p.wq, p.bq}, {a.k, &p.wk, p.bk}, {a.v, &p.wv, p.bv}}, u, R);
  if (c.positions == Positions::Rope) {
    const RopeParams rp{hd, c.rope_base, c.rope_pairing};
    rope_forward<T>(a.q, st.positions, R, H, dq, rp);
    rope_forward<T>(a.k, st.positions, R, Hkv, dkv, rp);
  }
  AttentionShape shape{B, n, n, H, Hkv, hd};
  AttentionMask mask;
  mask.causal = true;
  HeadsView<const T> keys = heads_btHd<const T>(a.k, n, Hkv, hd), values = heads_btHd<const T>(a.v, n, Hkv, hd);
  if (kv.keys.data) {
    // The real tokens' keys (after RoPE) and values go to their absolute slots.
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < kv.n_valid[b]; ++t)
        for (int64_t h = 0; h < Hkv; ++h) {
          const T* ks = a.k + (b * n + t) * dkv + h * hd;
          const T* vs = a.v + (b * n + t) * dkv + h * hd;
          std::copy(ks, ks + hd, kv.keys.at(b, kv.start[b] + t, h));
          std::copy(vs, vs + hd, kv.values.at(b, kv.start[b] + t, h));
        }
    keys = kv.keys;
    values = kv.values;
    shape.n_kv = kv.n_kv;
    mask.q_offset = kv.start;
    mask.kv_len = kv.kv_len;
  }
  const auto o = heads_btHd(a.o, n, H, hd);
  const auto q = heads_btHd<const T>(a.q, n, H, hd);
  if (st.kernel == AttentionKernel::Reference)
    attention_forward<T>(o, a.probs, q, keys, values, shape, mask, drop);
  else
    flash_attention_forward<T>(o, a.lse, q, keys, values, shape, mask, drop);
  linear_forward<T>(out, a.o, p.wo, p.bo, R);
}

// out (rows, d_model) = ffn(u); a.a (and a.g) kept, the activation into scratch.
template <typename T>
void ffn_branch(T* out, const T* u, const LayerActs<T>& a, const LayerParams<T>& p, const LayerScratch<T>& s,
                const ModelConfig& c, int64_t rows) {
  if (c.activation == Activation::SwiGLU)  // a, g (rows, d_ff)
    linear_forward_shared<T>({{a.a, &p.w1, p.b1}, {a.g, &p.w3, p.b3}}, u, rows);
  else
    linear_forward<T>(a.a, u, p.w1, p.b1, rows);  // a (rows, d_ff)
  ffn_activation(s.act, a, rows * c.d_ff, c);
  linear_forward<T>(out, s.act, p.w2, p.b2, rows);
}

}  // namespace

template <typename T>
void layer_forward(T* y, const LayerActs<T>& a, const LayerParams<T>& p, const LayerScratch<T>& s, const ModelConfig& c,
                   const LayerStep& st, const LayerKV<T>& kv, const LayerDropout& drop) {
  TF_CHECK(y != a.x, "layer_forward: the output must not alias the input");
  const int64_t R = st.batch * st.n, n = R * c.d_model;
  if (c.norm_placement == NormPlacement::Pre) {
    decoder_norm_forward(a.u1, a.mean1, a.rstd1, a.x, p.attn_norm_w, p.attn_norm_b, R, c);
    attention_branch(s.branch, a.u1, a, p, c, st, kv, drop.probs);
    dropout_apply(s.branch, n, drop.attn_out);
    add(a.h, a.x, s.branch, n);
    decoder_norm_forward(a.u2, a.mean2, a.rstd2, a.h, p.ffn_norm_w, p.ffn_norm_b, R, c);
    ffn_branch(s.branch, a.u2, a, p, s, c, R);
    dropout_apply(s.branch, n, drop.ffn_out);
    add(y, a.h, s.branch, n);
  } else {
    attention_branch(s.branch, a.x, a, p, c, st, kv, drop.probs);
    dropout_apply(s.branch, n, drop.attn_out);
    add(a.n1_in, a.x, s.branch, n);
    decoder_norm_forward(a.u1, a.mean1, a.rstd1, a.n1_in, p.attn_norm_w, p.attn_norm_b, R, c);  // h = u1
    ffn_branch(s.branch, a.h, a, p, s, c, R);
    dropout_apply(s.branch, n, drop.ffn_out);
    add(a.n2_in, a.h, s.branch, n);
    decoder_norm_forward(y, a.mean2, a.rstd2, a.n2_in, p.ffn_norm_w, p.ffn_norm_b, R, c);
  }
}

namespace {

// du = d(ffn(u))/du . dy, with the gradients of w1, w2, w3 and their biases accumulated; u is the
// FFN's input. The activation is recomputed into s.da first (the forward's function of the same
// kept numbers: the same bits).
template <typename T>
void ffn_branch_backward(T* du, const LayerGrads<T>& g, const T* dy, const T* u, const LayerActs<T>& a,
                         const LayerParams<T>& p, const LayerScratch<T>& s, const ModelConfig& c, int64_t rows) {
  const int64_t ff = rows * c.d_ff;
  ffn_activation(s.da, a, ff, c);
  zero(s.dact, ff);
  linear_backward<T>(s.dact, g.w2, g.b2, dy, s.da, p.w2, rows);  // out = w2 act + b2
  zero(s.da, ff);
  if (c.activation == Activation::SwiGLU) {
    zero(s.dg, ff);
    swiglu_backward<T>(s.da, s.dg, s.dact, a.a, a.g, ff);  // act = silu(a) * g
  } else {
    gelu_backward<T>(s.da, s.dact, a.a, ff, gelu_kind(c));  // act = gelu(a)
  }
  zero(du, rows * c.d_model);
  linear_backward<T>(du, g.w1, g.b1, s.da, u, p.w1, rows);                                          // a = w1 u + b1
  if (c.activation == Activation::SwiGLU) linear_backward<T>(du, g.w3, g.b3, s.dg, u, p.w3, rows);  // g = w3 u + b3
}

// du = d(attn(u))/du . dy over the chunk's own keys (the training layout), gradients accumulated.
template <typename T>
void attention_branch_backward(T* du, const LayerGrads<T>& g, const T* dy, const T* u, const LayerActs<T>& a,
                               const LayerParams<T>& p, const LayerScratch<T>& s, const ModelConfig& c,
                               const LayerStep& st, const AttentionDropout& drop) {
  const int64_t B = st.batch, n = st.n, R = B * n, hd = c.head_dim(), H = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t dq = H * hd, dkv = Hkv * hd;
  zero(s.dout, R * dq);
  linear_backward<T>(s.dout, g.wo, g.bo, dy, a.o, p.wo, R);  // out = wo o + bo
  zero(s.dq, R * dq);
  zero(s.dk, R * dkv);
  zero(s.dv, R * dkv);
  const AttentionShape shape{B, n, n, H, Hkv, hd};
  AttentionMask mask;
  mask.causal = true;
  const auto q = heads_btHd<const T>(a.q, n, H, hd);
  const auto k = heads_btHd<const T>(a.k, n, Hkv, hd);
  const auto v = heads_btHd<const T>(a.v, n, Hkv, hd);
  const auto gq = heads_btHd(s.dq, n, H, hd), gk = heads_btHd(s.dk, n, Hkv, hd), gv = heads_btHd(s.dv, n, Hkv, hd);
  const auto gout = heads_btHd<const T>(s.dout, n, H, hd);
  if (st.kernel == AttentionKernel::Reference)
    attention_backward<T>(gq, gk, gv, gout, a.probs, q, k, v, shape, mask, drop);
  else
    flash_attention_backward<T>(gq, gk, gv, gout, heads_btHd<const T>(a.o, n, H, hd), a.lse, q, k, v, shape, mask,
                                drop);
  if (c.positions == Positions::Rope) {
    const RopeParams rp{hd, c.rope_base, c.rope_pairing};
    rope_backward<T>(s.dq, st.positions, R, H, dq, rp);
    rope_backward<T>(s.dk, st.positions, R, Hkv, dkv, rp);
  }
  zero(du, R * c.d_model);
  linear_backward<T>(du, g.wq, g.bq, s.dq, u, p.wq, R);  // q = wq u + bq
  linear_backward<T>(du, g.wk, g.bk, s.dk, u, p.wk, R);  // k = wk u + bk
  linear_backward<T>(du, g.wv, g.bv, s.dv, u, p.wv, R);  // v = wv u + bv
}

}  // namespace

template <typename T>
void layer_backward(T* dx, const LayerGrads<T>& g, const LayerActs<T>& a, const LayerParams<T>& p,
                    const LayerScratch<T>& s, const ModelConfig& c, const LayerStep& st, const LayerDropout& drop) {
  const int64_t R = st.batch * st.n, n = R * c.d_model;
  if (c.norm_placement == NormPlacement::Pre) {
    // y = h + drop(ffn(norm_2(h))): dx = dL/dy on entry.
    copy(s.dbranch, dx, n);
    dropout_apply(s.dbranch, n, drop.ffn_out);
    ffn_branch_backward(s.du, g, s.dbranch, a.u2, a, p, s, c, R);
    decoder_norm_backward(dx, g.ffn_norm_w, g.ffn_norm_b, s.du, a.h, a.mean2, a.rstd2, p.ffn_norm_w, R, c);  // dL/dh
    // h = x + drop(attn(norm_1(x))).
    copy(s.dbranch, dx, n);
    dropout_apply(s.dbranch, n, drop.attn_out);
    attention_branch_backward(s.du, g, s.dbranch, a.u1, a, p, s, c, st, drop.probs);
    decoder_norm_backward(dx, g.attn_norm_w, g.attn_norm_b, s.du, a.x, a.mean1, a.rstd1, p.attn_norm_w, R, c);
  } else {
    // y = norm_2(n2_in), n2_in = h + drop(ffn(h)).
    zero(s.dsum, n);
    decoder_norm_backward(s.dsum, g.ffn_norm_w, g.ffn_norm_b, dx, a.n2_in, a.mean2, a.rstd2, p.ffn_norm_w, R,
                          c);  // dL/dn2_in
    copy(s.dbranch, s.dsum, n);
    dropout_apply(s.dbranch, n, drop.ffn_out);
    ffn_branch_backward(s.du, g, s.dbranch, a.h, a, p, s, c, R);
    add(s.dsum, s.dsum, s.du, n);  // dL/dh
    // h = norm_1(n1_in), n1_in = x + drop(attn(x)).
    zero(dx, n);
    decoder_norm_backward(dx, g.attn_norm_w, g.attn_norm_b, s.dsum, a.n1_in, a.mean1, a.rstd1, p.attn_norm_w, R,
                          c);  // dL/dn1_in
    copy(s.dbranch, dx, n);
    dropout_apply(s.dbranch, n, drop.attn_out);
    attention_branch_backward(s.du, g, s.dbranch, a.x, a, p, s, c, st, drop.probs);
    add(dx, dx, s.du, n);  // dL/dx
  }
}

// ---- instantiations -----------------------------------------------------------------------------

#define TFORMER_LAYER_INSTANTIATE(T)                                                                                 \
  template void declare_layer_acts<T>(BasicArena<T>&, const std::string&, const ModelConfig&, int64_t, int64_t,      \
                                      LayerKeep);                                                                    \
  template LayerActs<T> bind_layer_acts<T>(BasicArena<T>&, const std::string&, const ModelConfig&, int64_t, int64_t, \
                                           LayerKeep);                                                               \
  template void declare_layer_scratch<T>(BasicArena<T>&, const ModelConfig&, int64_t, bool);                         \
  template LayerScratch<T> bind_layer_scratch<T>(BasicArena<T>&, const ModelConfig&, bool);                          \
  template void decoder_norm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int64_t, const ModelConfig&);      \
  template void decoder_norm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int64_t,      \
                                         const ModelConfig&);                                                        \
  template void embed_forward<T>(T*, const TokenId*, const int64_t*, int64_t, const ModelParams<T>&, const T*,       \
                                 const ModelConfig&, const Weight<T>*);                                              \
  template std::vector<T> sinusoidal_table<T>(const ModelConfig&);                                                   \
  template void embed_backward<T>(const ModelGrads<T>&, const T*, const TokenId*, const int64_t*, int64_t,           \
                                  const ModelConfig&);                                                               \
  template void layer_forward<T>(T*, const LayerActs<T>&, const LayerParams<T>&, const LayerScratch<T>&,             \
                                 const ModelConfig&, const LayerStep&, const LayerKV<T>&, const LayerDropout&);      \
  template void layer_backward<T>(T*, const LayerGrads<T>&, const LayerActs<T>&, const LayerParams<T>&,              \
                                  const LayerScratch<T>&, const ModelConfig&, const LayerStep&, const LayerDropout&);
TFORMER_LAYER_INSTANTIATE(float)
TFORMER_LAYER_INSTANTIATE(double)
#undef TFORMER_LAYER_INSTANTIATE

}  // namespace tformer
