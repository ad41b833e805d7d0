// The oracle of the decoder layer: one transformer block composed plainly from the reference
// kernels (the attention that materialises every score, the norms, activations and a linear layer
// through gemm), independent of model/layer.h. The tests check it against PyTorch's
// nn.TransformerEncoderLayer (test_reference_block.cpp) and check the one layer (model/layer.h),
// the inference model and the training graph against it, in double precision.
//
//   pre-LN  (x + F(LN(x))):   h = x + attn(norm_1(x));   y = h + ffn(norm_2(h))
//   post-LN (LN(x + F(x))):   h = norm_1(x + attn(x));   y = norm_2(h + ffn(h))
//   attn(u) = wo( attention(rope(wq u), rope(wk u), wv u) ),  causal on absolute positions
//   ffn(u)  = w2(act(w1 u + b1)) + b2            for gelu / gelu_tanh
//           = w2(silu(w1 u + b1) * (w3 u + b3)) + b2   for swiglu
// Linear weights are [out, in] (torch.nn.Linear); biases are null when the block has none.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/types.h"
#include "kernels/activation.h"
#include "kernels/rope.h"
#include "model/config.h"

namespace tformer {

struct BlockShape {
  int64_t d_model = 0, n_heads = 0, n_kv_heads = 0, d_ff = 0;
  NormKind norm = NormKind::LayerNorm;
  NormPlacement placement = NormPlacement::Pre;
  Activation activation = Activation::Gelu;
  double norm_eps = 1e-5;
  std::optional<RopeParams> rope;  // none: positions are added outside the block
  int64_t head_dim() const { return d_model / n_heads; }
};

template <typename T>
struct BlockWeights {
  const T* attn_norm_w = nullptr;  // [d_model]
  const T* attn_norm_b = nullptr;  // [d_model] (LayerNorm with bias only)
  const T* wq = nullptr;           // [n_heads * hd, d_model]
  const T* wk = nullptr;           // [n_kv_heads * hd, d_model]
  const T* wv = nullptr;           // [n_kv_heads * hd, d_model]
  const T* wo = nullptr;           // [d_model, n_heads * hd]
  const T *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  const T* ffn_norm_w = nullptr;  // [d_model]
  const T* ffn_norm_b = nullptr;  // [d_model]
  const T* w1 = nullptr;          // [d_ff, d_model]
  const T* w2 = nullptr;          // [d_model, d_ff]
  const T* w3 = nullptr;          // [d_ff, d_model] (swiglu only)
  const T* b3 = nullptr;          // [d_ff] (swiglu with bias only)
  const T *b1 = nullptr, *b2 = nullptr;
};

// y, x: [batch, T, d_model]; every sequence is causal on the token index (key j is read by query i
// iff j <= i). positions: [T] the RoPE position of each token (null: 0..T-1). y must not alias x.
// probs: when given, [batch, n_heads, T, T] the attention weights (0 past the diagonal).
template <typename T>
void block_forward(T* y, const T* x, int64_t batch, int64_t n_tokens, const BlockShape& s, const BlockWeights<T>& w,
                   const int64_t* positions = nullptr, T* probs = nullptr);

// The block's view of a model config.
BlockShape block_shape(const ModelConfig& c);

// Layer i's weights by their checkpoint names ("layers.i.attn.wq.weight", ...); `tensor` returns
// null for a name that is absent.
template <typename T>
BlockWeights<T> block_weights(const std::function<const T*(const std::string&)>& tensor, int64_t layer);

// Every tensor of a float arena, converted to double, by name.
std::map<std::string, std::vector<double>> arena_in_double(Arena& params);

// The whole decoder in double, composed from block_forward and the reference kernels with the
// weights read by name: logits [T, vocab] of one sequence whose token t sits at positions[t]
// (null: t) for its position embedding and RoPE angle; probs, when given, gets every layer's
// attention weights [n_layers, n_heads, T, T].
std::vector<double> reference_decoder_logits(const ModelConfig& c,
                                             const std::map<std::string, std::vector<double>>& weights,
                                             const std::vector<TokenId>& ids, const int64_t* positions = nullptr,
                                             std::vector<double>* probs = nullptr);

}  // namespace tformer
