#include "model/model.h"

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"

namespace tformer {

namespace {
std::string layer_name(int64_t i, const char* rest) { return fmt::format("layers.{}.{}", i, rest); }
}  // namespace

Model::Model(ModelConfig config) : config_(std::move(config)) {
  config_.validate();
  const auto& c = config_;
  const int64_t d = c.d_model, hd = c.head_dim();
  const bool layernorm = c.norm == NormKind::LayerNorm;
  params_.add("tok_embeddings.weight", {c.vocab_size, d});
  if (c.positions == Positions::Learned) params_.add("pos_embeddings.weight", {c.context_length, d});
  auto linear = [&](int64_t i, const char* name, int64_t out, int64_t in, bool with_bias) {
    params_.add(layer_name(i, name) + ".weight", {out, in});
    if (with_bias) params_.add(layer_name(i, name) + ".bias", {out});
  };
  auto norm = [&](const std::string& name) {
    params_.add(name + ".weight", {d});
    if (layernorm) params_.add(name + ".bias", {d});
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
    if (c.activation == Activation::SwiGLU) linear(i, "ffn.w3", c.d_ff, d, false);
  }
  if (c.norm_placement == NormPlacement::Pre) norm("norm");
  if (!c.tied_embeddings) params_.add("output.weight", {c.vocab_size, d});
  params_.allocate();
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

void Model::forward(float* logits, const TokenId* ids, int64_t batch, int64_t n_tokens) {
  const auto& c = config_;
  if (n_tokens > c.context_length)
    fail("forward: {} tokens exceed the model's context_length {}", n_tokens, c.context_length);
  const int64_t d = c.d_model, rows = batch * n_tokens;
  std::vector<float> x(rows * d), y(rows * d);
  embedding_forward<float>(x.data(), ids, params_.get("tok_embeddings.weight").data(), rows, c.vocab_size, d);
  if (c.positions == Positions::Learned || c.positions == Positions::Sinusoidal) {
    std::vector<float> table;
    const float* pe = nullptr;
    if (c.positions == Positions::Learned) {
      pe = params_.get("pos_embeddings.weight").data();
    } else {
      table.resize(n_tokens * d);
      sinusoidal_positions(table.data(), n_tokens, d);
      pe = table.data();
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < d; ++k) x[r * d + k] += pe[(r % n_tokens) * d + k];
  }
  const BlockShape shape = c.block_shape();
  for (int64_t i = 0; i < c.n_layers; ++i) {
    block_forward<float>(y.data(), x.data(), batch, n_tokens, shape, layer_weights(i));
    std::swap(x, y);
  }
  if (c.norm_placement == NormPlacement::Pre) {
    std::vector<float> mean(rows), rstd(rows);
    const float* b = params_.contains("norm.bias") ? params_.get("norm.bias").data() : nullptr;
    if (c.norm == NormKind::LayerNorm)
      layernorm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), params_.get("norm.weight").data(), b,
                               rows, d, static_cast<float>(c.norm_eps));
    else
      rmsnorm_forward<float>(y.data(), rstd.data(), x.data(), params_.get("norm.weight").data(), rows, d,
                             static_cast<float>(c.norm_eps));
    std::swap(x, y);
  }
  const float* out_w = params_.get(c.tied_embeddings ? "tok_embeddings.weight" : "output.weight").data();
  linear_forward<float>(logits, x.data(), out_w, nullptr, rows, d, c.vocab_size);
}

}  // namespace tformer
