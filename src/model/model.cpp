#include "model/model.h"

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"

namespace tformer {

namespace {
std::string layer_name(int64_t i, const char* rest) { return fmt::format("layers.{}.{}", i, rest); }
}  // namespace

template <typename T>
void declare_model_params(BasicArena<T>& params, const ModelConfig& c) {
  const int64_t d = c.d_model, hd = c.head_dim();
  const bool layernorm = c.norm == NormKind::LayerNorm;
  params.add("tok_embeddings.weight", {c.vocab_size, d});
  if (c.positions == Positions::Learned) params.add("pos_embeddings.weight", {c.context_length, d});
  auto linear = [&](int64_t i, const char* name, int64_t out, int64_t in, bool with_bias) {
    params.add(layer_name(i, name) + ".weight", {out, in});
    if (with_bias) params.add(layer_name(i, name) + ".bias", {out});
  };
  auto norm = [&](const std::string& name) {
    params.add(name + ".weight", {d});
    if (layernorm) params.add(name + ".bias", {d});
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    norm(layer_name(i, "attn_norm"));
    linear(i, "attn.wq", c.n_heads * hd, d, c.bias);
    linear(i, "attn.wk", c.n_kv_heads * hd, d, c.bias);
    linear(i, "attn.wv", c.n_kv_heads * hd, d, c.bias);
    linear(i, "attn.wo", d, c.n_heads * hd, c.bias);
    norm(layer_name(i, "ffn_norm"));
    linear(i, "ffn.w1", c.d_ff, d, c.bias);
    linear(i, "ffn.w2", d, c.d_ff, c.bias);
    if (c.activation == Activation::SwiGLU) linear(i, "ffn.w3", c.d_ff, d, c.bias);
  }
  if (c.norm_placement == NormPlacement::Pre) norm("norm");
  if (!c.tied_embeddings) params.add("output.weight", {c.vocab_size, d});
}
template void declare_model_params<float>(BasicArena<float>&, const ModelConfig&);
template void declare_model_params<double>(BasicArena<double>&, const ModelConfig&);

Model::Model(ModelConfig config) : config_(std::move(config)) {
  config_.validate();
  declare_model_params(params_, config_);
  params_.allocate();
  if (config_.positions == Positions::Sinusoidal) {
    sinusoidal_.resize(config_.context_length * config_.d_model);
    sinusoidal_positions(sinusoidal_.data(), config_.context_length, config_.d_model);
  }
}

int64_t Model::n_params() const {
  int64_t n = 0;
  for (const auto& e : params_.entries()) n += e.shape.numel();
  return n;
}

void Model::init_gpt2(uint64_t seed) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  uint64_t stream = 0;
  for (const auto& e : params_.entries()) {
    auto v = params_.view(e);
    const std::string& n = e.name;
    const bool is_bias = n.ends_with(".bias");
    const bool is_norm_gain = !is_bias && (n.ends_with("norm.weight"));
    if (is_bias) {
      std::fill(v.begin(), v.end(), 0.0f);
    } else if (is_norm_gain) {
      std::fill(v.begin(), v.end(), 1.0f);
    } else {
      const bool residual = n.ends_with("attn.wo.weight") || n.ends_with("ffn.w2.weight");
      fill_normal<float>(v, seed, stream, 0.0, residual ? residual_std : 0.02);
    }
    ++stream;  // one stream per tensor, in declaration order
  }
}

BlockWeights<float> Model::layer_weights(int64_t i) {
  auto p = [&](const char* rest) -> const float* {
    const std::string name = layer_name(i, rest);
    return params_.contains(name) ? params_.get(name).data() : nullptr;
  };
  BlockWeights<float> w;
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

void sinusoidal_positions(float* out, int64_t n_positions, int64_t d_model) {
  TF_CHECK(d_model % 2 == 0, "sinusoidal positions need an even width, got {}", d_model);
  for (int64_t p = 0; p < n_positions; ++p)
    for (int64_t i = 0; i < d_model / 2; ++i) {
      const double angle = static_cast<double>(p) / std::pow(10000.0, 2.0 * i / static_cast<double>(d_model));
      out[p * d_model + 2 * i] = static_cast<float>(std::sin(angle));
      out[p * d_model + 2 * i + 1] = static_cast<float>(std::cos(angle));
    }
}

AttentionKernel parse_attention_kernel(const std::string& name) {
  if (name == "tiled") return AttentionKernel::Tiled;
  if (name == "reference") return AttentionKernel::Reference;
  fail("--attention is \"{}\"; expected \"tiled\" or \"reference\"", name);
}

KVCache Model::make_cache(int64_t batch, int64_t capacity) const {
  return KVCache(config_.n_layers, batch, config_.n_kv_heads, capacity, config_.head_dim());
}

void Model::forward(float* logits, const TokenId* ids, int64_t batch, int64_t n_tokens) {
  KVCache cache = make_cache(batch, std::max<int64_t>(n_tokens, 1));
  forward_cached(logits, ids, batch, n_tokens, nullptr, cache, true);
}

void Model::norm(float* y, const float* x, const std::string& prefix, int64_t rows) {
  const auto& c = config_;
  std::vector<float> mean(rows), rstd(rows);
  const float* w = params_.get(prefix + ".weight").data();
  if (c.norm == NormKind::LayerNorm)
    layernorm_forward<float>(y, mean.data(), rstd.data(), x, w, params_.get(prefix + ".bias").data(), rows, c.d_model,
                             static_cast<float>(c.norm_eps));
  else
    rmsnorm_forward<float>(y, rstd.data(), x, w, rows, c.d_model, static_cast<float>(c.norm_eps));
}

void Model::attention_sublayer(float* out, const float* u, int64_t layer, int64_t batch, int64_t n,
                               const int64_t* positions, const int64_t* n_valid, KVCache& cache) {
  const auto& c = config_;
  const BlockWeights<float> w = layer_weights(layer);
  const int64_t rows = batch * n, hd = c.head_dim();
  const int64_t dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  std::vector<float> q(rows * dq), k(rows * dkv), v(rows * dkv), o(rows * dq);
  linear_forward<float>(q.data(), u, w.wq, w.bq, rows, c.d_model, dq);   // q [B*n, Hq*hd]
  linear_forward<float>(k.data(), u, w.wk, w.bk, rows, c.d_model, dkv);  // k [B*n, Hkv*hd]
  linear_forward<float>(v.data(), u, w.wv, w.bv, rows, c.d_model, dkv);  // v [B*n, Hkv*hd]
  if (c.positions == Positions::Rope) {
    const RopeParams rp{hd, c.rope_base, c.rope_pairing};
    rope_forward<float>(q.data(), positions, rows, c.n_heads, dq, rp);
    rope_forward<float>(k.data(), positions, rows, c.n_kv_heads, dkv, rp);
  }
  // Store the real tokens' keys (after RoPE) and values at their absolute slots.
  HeadsView<float> kc = cache.keys(layer), vc = cache.values(layer);
  std::vector<int64_t> q_offset(batch), kv_len(batch);
  int64_t n_kv = 1;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = n_valid ? n_valid[b] : n;
    q_offset[b] = cache.length(b);
    kv_len[b] = cache.length(b) + valid;
    n_kv = std::max(n_kv, kv_len[b]);
    for (int64_t t = 0; t < valid; ++t)
      for (int64_t h = 0; h < c.n_kv_heads; ++h) {
        const float* ks = k.data() + (b * n + t) * dkv + h * hd;
        const float* vs = v.data() + (b * n + t) * dkv + h * hd;
        std::copy(ks, ks + hd, kc.at(b, q_offset[b] + t, h));
        std::copy(vs, vs + hd, vc.at(b, q_offset[b] + t, h));
      }
  }
  const AttentionShape shape{batch, n, n_kv, c.n_heads, c.n_kv_heads, hd};
  AttentionMask mask;
  mask.causal = true;
  mask.q_offset = q_offset.data();
  mask.kv_len = kv_len.data();
  if (attention_kernel_ == AttentionKernel::Tiled)
    flash_attention_forward<float>(heads_btHd(o.data(), n, c.n_heads, hd), nullptr,
                                   heads_btHd<const float>(q.data(), n, c.n_heads, hd), kc, vc, shape, mask);
  else
    attention_forward<float>(heads_btHd(o.data(), n, c.n_heads, hd), nullptr,
                             heads_btHd<const float>(q.data(), n, c.n_heads, hd), kc, vc, shape, mask);
  linear_forward<float>(out, o.data(), w.wo, w.bo, rows, dq, c.d_model);
}

void Model::ffn_sublayer(float* out, const float* u, int64_t layer, int64_t rows) {
  const auto& c = config_;
  const BlockWeights<float> w = layer_weights(layer);
  std::vector<float> a(rows * c.d_ff), act(rows * c.d_ff);
  linear_forward<float>(a.data(), u, w.w1, w.b1, rows, c.d_model, c.d_ff);  // a [rows, d_ff]
  if (c.activation == Activation::SwiGLU) {
    std::vector<float> g(rows * c.d_ff);
    linear_forward<float>(g.data(), u, w.w3, w.b3, rows, c.d_model, c.d_ff);
    swiglu_forward<float>(act.data(), a.data(), g.data(), rows * c.d_ff);
  } else {
    gelu_forward<float>(act.data(), a.data(), rows * c.d_ff,
                        c.activation == Activation::Gelu ? GeluKind::Exact : GeluKind::Tanh);
  }
  linear_forward<float>(out, act.data(), w.w2, w.b2, rows, c.d_ff, c.d_model);
}

void Model::forward_cached(float* logits, const TokenId* ids, int64_t batch, int64_t n, const int64_t* n_valid,
                           KVCache& cache, bool all_positions) {
  const auto& c = config_;
  TF_CHECK(n >= 0 && batch > 0, "forward: batch {} and chunk {} tokens", batch, n);
  TF_CHECK(cache.batch() == batch && cache.n_layers() == c.n_layers && cache.n_kv_heads() == c.n_kv_heads &&
               cache.head_dim() == c.head_dim(),
           "forward: the KV cache was made for another model or batch");
  std::vector<int64_t> positions(batch * n);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = n_valid ? n_valid[b] : n;
    TF_CHECK(valid >= 0 && valid <= n, "forward: sequence {} has {} valid tokens in a chunk of {}", b, valid, n);
    const int64_t end = cache.length(b) + valid;
    if (end > c.context_length)
      fail("sequence {} would reach {} tokens; the model's context_length is {}", b, end, c.context_length);
    if (end > cache.capacity())
      fail("sequence {} would reach {} tokens; the KV cache holds {}", b, end, cache.capacity());
    // Padding rows get the positions after the real ones, clamped to the last row the tables have.
    for (int64_t t = 0; t < n; ++t) positions[b * n + t] = std::min(cache.length(b) + t, c.context_length - 1);
  }
  const int64_t d = c.d_model, rows = batch * n;
  // Padding ids may be anything; they are replaced by 0 so the embedding lookup stays in range.
  std::vector<TokenId> safe_ids(ids, ids + rows);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = n_valid ? n_valid[b] : n; t < n; ++t) safe_ids[b * n + t] = 0;
  std::vector<float> x(rows * d), u(rows * d), branch(rows * d), h(rows * d);
  embedding_forward<float>(x.data(), safe_ids.data(), params_.get("tok_embeddings.weight").data(), rows, c.vocab_size,
                           d);
  if (c.positions == Positions::Learned || c.positions == Positions::Sinusoidal) {
    const float* pe =
        c.positions == Positions::Learned ? params_.get("pos_embeddings.weight").data() : sinusoidal_.data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < d; ++k) x[r * d + k] += pe[positions[r] * d + k];
  }
  const int64_t n_all = rows * d;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const std::string prefix = fmt::format("layers.{}.", l);
    if (c.norm_placement == NormPlacement::Pre) {
      // h = x + attn(norm_1(x)); x = h + ffn(norm_2(h))
      norm(u.data(), x.data(), prefix + "attn_norm", rows);
      attention_sublayer(branch.data(), u.data(), l, batch, n, positions.data(), n_valid, cache);
      for (int64_t i = 0; i < n_all; ++i) h[i] = x[i] + branch[i];
      norm(u.data(), h.data(), prefix + "ffn_norm", rows);
      ffn_sublayer(branch.data(), u.data(), l, rows);
      for (int64_t i = 0; i < n_all; ++i) x[i] = h[i] + branch[i];
    } else {
      // h = norm_1(x + attn(x)); x = norm_2(h + ffn(h))
      attention_sublayer(branch.data(), x.data(), l, batch, n, positions.data(), n_valid, cache);
      for (int64_t i = 0; i < n_all; ++i) u[i] = x[i] + branch[i];
      norm(h.data(), u.data(), prefix + "attn_norm", rows);
      ffn_sublayer(branch.data(), h.data(), l, rows);
      for (int64_t i = 0; i < n_all; ++i) u[i] = h[i] + branch[i];
      norm(x.data(), u.data(), prefix + "ffn_norm", rows);
    }
  }
  for (int64_t b = 0; b < batch; ++b) cache.advance(b, n_valid ? n_valid[b] : n);

  // Final norm (pre-LN only) and the vocabulary projection, for every row or only the last valid ones.
  const float* out_w = params_.get(c.tied_embeddings ? "tok_embeddings.weight" : "output.weight").data();
  if (all_positions) {
    if (c.norm_placement == NormPlacement::Pre) {
      norm(u.data(), x.data(), "norm", rows);
      std::swap(x, u);
    }
    linear_forward<float>(logits, x.data(), out_w, nullptr, rows, d, c.vocab_size);
    return;
  }
  std::vector<float> last(batch * d, 0.0f), last_normed(batch * d);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = n_valid ? n_valid[b] : n;
    if (valid > 0) std::copy_n(x.data() + (b * n + valid - 1) * d, d, last.data() + b * d);
  }
  if (c.norm_placement == NormPlacement::Pre) {
    norm(last_normed.data(), last.data(), "norm", batch);
    std::swap(last, last_normed);
  }
  linear_forward<float>(logits, last.data(), out_w, nullptr, batch, d, c.vocab_size);
  for (int64_t b = 0; b < batch; ++b)
    if ((n_valid ? n_valid[b] : n) == 0) std::fill_n(logits + b * c.vocab_size, c.vocab_size, 0.0f);
}

}  // namespace tformer
