#include "reference_block.h"

#include <cmath>
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
void attn_branch(T* out, const T* u, int64_t batch, int64_t n_tokens, const BlockShape& s, const BlockWeights<T>& w,
                 const int64_t* positions, T* probs_out) {
  const int64_t rows = batch * n_tokens, hd = s.head_dim();
  const int64_t dq = s.n_heads * hd, dkv = s.n_kv_heads * hd;
  std::vector<T> q(rows * dq), k(rows * dkv), v(rows * dkv), o(rows * dq);
  linear_forward<T>(q.data(), u, w.wq, w.bq, rows, s.d_model, dq);
  linear_forward<T>(k.data(), u, w.wk, w.bk, rows, s.d_model, dkv);
  linear_forward<T>(v.data(), u, w.wv, w.bv, rows, s.d_model, dkv);
  if (s.rope) {
    std::vector<int64_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r) pos[r] = positions ? positions[r % n_tokens] : r % n_tokens;
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
  if (probs_out) std::copy(probs.begin(), probs.end(), probs_out);
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
void block_forward(T* y, const T* x, int64_t batch, int64_t n_tokens, const BlockShape& s, const BlockWeights<T>& w,
                   const int64_t* positions, T* probs) {
  TF_CHECK(s.d_model > 0 && s.n_heads > 0 && s.d_model % s.n_heads == 0,
           "block: d_model {} not divisible by n_heads {}", s.d_model, s.n_heads);
  TF_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0, "block: n_kv_heads {} does not divide n_heads {}",
           s.n_kv_heads, s.n_heads);
  TF_CHECK(y != x, "block: y must not alias x");
  const int64_t rows = batch * n_tokens, d = s.d_model, n = rows * d;
  std::vector<T> u(n), branch(n), h(n);
  if (s.placement == NormPlacement::Pre) {
    norm_forward<T>(u.data(), x, w.attn_norm_w, w.attn_norm_b, rows, s);
    attn_branch<T>(branch.data(), u.data(), batch, n_tokens, s, w, positions, probs);
    for (int64_t i = 0; i < n; ++i) h[i] = x[i] + branch[i];
    norm_forward<T>(u.data(), h.data(), w.ffn_norm_w, w.ffn_norm_b, rows, s);
    ffn_branch<T>(branch.data(), u.data(), rows, s, w);
    for (int64_t i = 0; i < n; ++i) y[i] = h[i] + branch[i];
  } else {
    attn_branch<T>(branch.data(), x, batch, n_tokens, s, w, positions, probs);
    for (int64_t i = 0; i < n; ++i) u[i] = x[i] + branch[i];
    norm_forward<T>(h.data(), u.data(), w.attn_norm_w, w.attn_norm_b, rows, s);
    ffn_branch<T>(branch.data(), h.data(), rows, s, w);
    for (int64_t i = 0; i < n; ++i) u[i] = h[i] + branch[i];
    norm_forward<T>(y, u.data(), w.ffn_norm_w, w.ffn_norm_b, rows, s);
  }
}

template void block_forward<float>(float*, const float*, int64_t, int64_t, const BlockShape&,
                                   const BlockWeights<float>&, const int64_t*, float*);
template void block_forward<double>(double*, const double*, int64_t, int64_t, const BlockShape&,
                                    const BlockWeights<double>&, const int64_t*, double*);

BlockShape block_shape(const ModelConfig& c) {
  BlockShape s;
  s.d_model = c.d_model;
  s.n_heads = c.n_heads;
  s.n_kv_heads = c.n_kv_heads == 0 ? c.n_heads : c.n_kv_heads;
  s.d_ff = c.d_ff == 0 ? 4 * c.d_model : c.d_ff;
  s.norm = c.norm;
  s.placement = c.norm_placement;
  s.activation = c.activation;
  s.norm_eps = c.norm_eps;
  if (c.positions == Positions::Rope) s.rope = RopeParams{c.d_model / c.n_heads, c.rope_base, c.rope_pairing};
  return s;
}

template <typename T>
BlockWeights<T> block_weights(const std::function<const T*(const std::string&)>& tensor, int64_t layer) {
  auto p = [&](const char* rest) { return tensor("layers." + std::to_string(layer) + "." + rest); };
  BlockWeights<T> w;
  w.attn_norm_w = p("attn_norm.weight");
  w.attn_norm_b = p("attn_norm.bias");
  w.wq = p("attn.wq.weight");
  w.wk = p("attn.wk.weight");
  w.wv = p("attn.wv.weight");
  w.wo = p("attn.wo.weight");
  w.bq = p("attn.wq.bias");
  w.bk = p("attn.wk.bias");
  w.bv = p("attn.wv.bias");
  w.bo = p("attn.wo.bias");
  w.ffn_norm_w = p("ffn_norm.weight");
  w.ffn_norm_b = p("ffn_norm.bias");
  w.w1 = p("ffn.w1.weight");
  w.b1 = p("ffn.w1.bias");
  w.w2 = p("ffn.w2.weight");
  w.b2 = p("ffn.w2.bias");
  w.w3 = p("ffn.w3.weight");
  w.b3 = p("ffn.w3.bias");
  return w;
}
template BlockWeights<float> block_weights<float>(const std::function<const float*(const std::string&)>&, int64_t);
template BlockWeights<double> block_weights<double>(const std::function<const double*(const std::string&)>&, int64_t);

std::map<std::string, std::vector<double>> arena_in_double(Arena& params) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& e : params.entries()) {
    const auto v = params.view(e);
    out[e.name].assign(v.begin(), v.end());
  }
  return out;
}

std::vector<double> reference_decoder_logits(const ModelConfig& config,
                                             const std::map<std::string, std::vector<double>>& weights,
                                             const std::vector<TokenId>& ids, const int64_t* positions,
                                             std::vector<double>* probs) {
  ModelConfig c = config;
  c.validate();
  const int64_t T = static_cast<int64_t>(ids.size()), d = c.d_model, V = c.vocab_size;
  auto tensor = [&](const std::string& name) -> const double* {
    auto it = weights.find(name);
    return it == weights.end() ? nullptr : it->second.data();
  };
  auto pos = [&](int64_t t) { return positions ? positions[t] : t; };
  // Embedding and absolute positions, written out.
  std::vector<double> x(T * d), y(T * d);
  const double* tok = tensor("tok_embeddings.weight");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < d; ++k) x[t * d + k] = tok[ids[t] * d + k];
  if (c.positions == Positions::Learned) {
    const double* pe = tensor("pos_embeddings.weight");
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < d; ++k) x[t * d + k] += pe[pos(t) * d + k];
  } else if (c.positions == Positions::Sinusoidal) {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < d / 2; ++i) {
        const double angle = static_cast<double>(pos(t)) / std::pow(10000.0, 2.0 * i / static_cast<double>(d));
        x[t * d + 2 * i] += static_cast<double>(static_cast<float>(std::sin(angle)));  // the model's float table
        x[t * d + 2 * i + 1] += static_cast<double>(static_cast<float>(std::cos(angle)));
      }
  }
  std::vector<int64_t> rope_positions(T);
  for (int64_t t = 0; t < T; ++t) rope_positions[t] = pos(t);
  const BlockShape shape = block_shape(c);
  if (probs) probs->assign(static_cast<size_t>(c.n_layers * c.n_heads * T * T), 0.0);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    block_forward<double>(y.data(), x.data(), 1, T, shape, block_weights<double>(tensor, l), rope_positions.data(),
                          probs ? probs->data() + l * c.n_heads * T * T : nullptr);
    std::swap(x, y);
  }
  if (c.norm_placement == NormPlacement::Pre) {
    norm_forward<double>(y.data(), x.data(), tensor("norm.weight"), tensor("norm.bias"), T, shape);
    std::swap(x, y);
  }
  const double* out_w = tensor(c.tied_embeddings ? "tok_embeddings.weight" : "output.weight");
  std::vector<double> logits(T * V);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double acc = 0;
      for (int64_t k = 0; k < d; ++k) acc += x[t * d + k] * out_w[v * d + k];
      logits[t * V + v] = acc;
    }
  return logits;
}

}  // namespace tformer
