#include "model/block.h"

#include <vector>

#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"

namespace tformer {

namespace {

template <typename T>
void norm_forward(T* y, const T* x, const T* w, const T* b, int64_t rows, const BlockShape& s) {
  std::vector<T> mean(rows), rstd(rows);
  if (s.norm == NormKind::LayerNorm)
    layernorm_forward<T>(y, mean.data(), rstd.data(), x, w, b, rows, s.d_model, static_cast<T>(s.norm_eps));
  else
    rmsnorm_forward<T>(y, rstd.data(), x, w, rows, s.d_model, static_cast<T>(s.norm_eps));
}

// out[B*T, d] = attn(u) for u [B*T, d].
template <typename T>
void attn_branch(T* out, const T* u, int64_t batch, int64_t n_tokens, const BlockShape& s, const BlockWeights<T>& w) {
  const int64_t rows = batch * n_tokens, hd = s.head_dim();
  const int64_t dq = s.n_heads * hd, dkv = s.n_kv_heads * hd;
  std::vector<T> q(rows * dq), k(rows * dkv), v(rows * dkv), o(rows * dq);
  linear_forward<T>(q.data(), u, w.wq, w.bq, rows, s.d_model, dq);
  linear_forward<T>(k.data(), u, w.wk, w.bk, rows, s.d_model, dkv);
  linear_forward<T>(v.data(), u, w.wv, w.bv, rows, s.d_model, dkv);
  if (s.rope) {
    std::vector<int64_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = r % n_tokens;
    rope_forward<T>(q.data(), pos.data(), rows, s.n_heads, dq, *s.rope);
    rope_forward<T>(k.data(), pos.data(), rows, s.n_kv_heads, dkv, *s.rope);
  }
  std::vector<T> probs(batch * s.n_heads * n_tokens * n_tokens);
  const AttentionShape as{batch, n_tokens, n_tokens, s.n_heads, s.n_kv_heads, hd};
  AttentionMask mask;  // causal, offset 0, no padding
  attention_forward<T>(heads_btHd(o.data(), n_tokens, s.n_heads, hd), probs.data(),
                       heads_btHd<const T>(q.data(), n_tokens, s.n_heads, hd),
                       heads_btHd<const T>(k.data(), n_tokens, s.n_kv_heads, hd),
                       heads_btHd<const T>(v.data(), n_tokens, s.n_kv_heads, hd), as, mask);
  linear_forward<T>(out, o.data(), w.wo, w.bo, rows, dq, s.d_model);
}

template <typename T>
void ffn_branch(T* out, const T* u, int64_t rows, const BlockShape& s, const BlockWeights<T>& w) {
  std::vector<T> a(rows * s.d_ff), act(rows * s.d_ff);
  linear_forward<T>(a.data(), u, w.w1, w.b1, rows, s.d_model, s.d_ff);
  if (s.activation == Activation::SwiGLU) {
    std::vector<T> b(rows * s.d_ff);
    linear_forward<T>(b.data(), u, w.w3, w.b3, rows, s.d_model, s.d_ff);
    swiglu_forward<T>(act.data(), a.data(), b.data(), rows * s.d_ff);
  } else {
    gelu_forward<T>(act.data(), a.data(), rows * s.d_ff,
                    s.activation == Activation::Gelu ? GeluKind::Exact : GeluKind::Tanh);
  }
  linear_forward<T>(out, act.data(), w.w2, w.b2, rows, s.d_ff, s.d_model);
}

}  // namespace

template <typename T>
void block_forward(T* y, const T* x, int64_t batch, int64_t n_tokens, const BlockShape& s, const BlockWeights<T>& w) {
  TF_CHECK(s.d_model > 0 && s.n_heads > 0 && s.d_model % s.n_heads == 0,
           "block: d_model {} not divisible by n_heads {}", s.d_model, s.n_heads);
  TF_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "block: n_kv_heads {} does not divide n_heads {}",
           s.n_kv_heads, s.n_heads);
  TF_CHECK(y != x, "block: y must not alias x");
  const int64_t rows = batch * n_tokens, d = s.d_model, n = rows * d;
  std::vector<T> u(n), branch(n), h(n);
  if (s.placement == NormPlacement::Pre) {
    norm_forward<T>(u.data(), x, w.attn_norm_w, w.attn_norm_b, rows, s);
    attn_branch<T>(branch.data(), u.data(), batch, n_tokens, s, w);
    for (int64_t i = 0; i < n; ++i) h[i] = x[i] + branch[i];
    norm_forward<T>(u.data(), h.data(), w.ffn_norm_w, w.ffn_norm_b, rows, s);
    ffn_branch<T>(branch.data(), u.data(), rows, s, w);
    for (int64_t i = 0; i < n; ++i) y[i] = h[i] + branch[i];
  } else {
    attn_branch<T>(branch.data(), x, batch, n_tokens, s, w);
    for (int64_t i = 0; i < n; ++i) u[i] = x[i] + branch[i];
    norm_forward<T>(h.data(), u.data(), w.attn_norm_w, w.attn_norm_b, rows, s);
    ffn_branch<T>(branch.data(), h.data(), rows, s, w);
    for (int64_t i = 0; i < n; ++i) u[i] = h[i] + branch[i];
    norm_forward<T>(y, u.data(), w.ffn_norm_w, w.ffn_norm_b, rows, s);
  }
}

template void block_forward<float>(float*, const float*, int64_t, int64_t, const BlockShape&,
                                   const BlockWeights<float>&);
template void block_forward<double>(double*, const double*, int64_t, int64_t, const BlockShape&,
                                    const BlockWeights<double>&);

}  // namespace tformer
