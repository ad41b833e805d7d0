// The decoder's parameters: their checkpoint names and shapes, written down once
// (visit_model_tensors), and the typed views a forward or backward pass uses, resolved once from an
// arena laid out under those names (model_params / model_grads). No pass looks a name up.
//
//   tok_embeddings.weight        (vocab, d_model)
//   pos_embeddings.weight        (context_length, d_model)       positions = learned
//   layers.i.attn_norm.weight    (d_model)                       .bias: layernorm only
//   layers.i.attn.wq.weight      (n_heads * hd, d_model)         .bias (n_heads * hd) when bias
//   layers.i.attn.wk.weight      (n_kv_heads * hd, d_model)      .bias when bias
//   layers.i.attn.wv.weight      (n_kv_heads * hd, d_model)      .bias when bias
//   layers.i.attn.wo.weight      (d_model, n_heads * hd)         .bias (d_model) when bias
//   layers.i.ffn_norm.weight     (d_model)                       .bias: layernorm only
//   layers.i.ffn.w1.weight       (d_ff, d_model)                 .bias when bias
//   layers.i.ffn.w2.weight       (d_model, d_ff)                 .bias when bias
//   layers.i.ffn.w3.weight       (d_ff, d_model)                 swiglu only; .bias when bias
//   norm.weight                  (d_model)                       pre-LN only; .bias: layernorm
//   output.weight                (vocab, d_model)                unless tied_embeddings
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/types.h"
#include "kernels/linear.h"
#include "model/config.h"

namespace tformer {

// One decoder layer's weights (hd = head_dim). Absent tensors are null.
template <typename T>
struct LayerParams {
  const T* attn_norm_w = nullptr;  // (d_model)
  const T* attn_norm_b = nullptr;  // (d_model)                  layernorm only
  Weight<T> wq;                    // (n_heads * hd, d_model)
  const T* bq = nullptr;           // (n_heads * hd)             bias only
  Weight<T> wk;                    // (n_kv_heads * hd, d_model)
  const T* bk = nullptr;           // (n_kv_heads * hd)
  Weight<T> wv;                    // (n_kv_heads * hd, d_model)
  const T* bv = nullptr;           // (n_kv_heads * hd)
  Weight<T> wo;                    // (d_model, n_heads * hd)
  const T* bo = nullptr;           // (d_model)
  const T* ffn_norm_w = nullptr;   // (d_model)
  const T* ffn_norm_b = nullptr;   // (d_model)                  layernorm only
  Weight<T> w1;                    // (d_ff, d_model)
  const T* b1 = nullptr;           // (d_ff)
  Weight<T> w2;                    // (d_model, d_ff)
  const T* b2 = nullptr;           // (d_model)
  Weight<T> w3;                    // (d_ff, d_model)            swiglu only
  const T* b3 = nullptr;           // (d_ff)                     swiglu with bias only
};

// The gradients of one layer: the same tensors, dense and writable.
template <typename T>
struct LayerGrads {
  T *attn_norm_w = nullptr, *attn_norm_b = nullptr;
  T *wq = nullptr, *bq = nullptr, *wk = nullptr, *bk = nullptr, *wv = nullptr, *bv = nullptr, *wo = nullptr,
    *bo = nullptr;
  T *ffn_norm_w = nullptr, *ffn_norm_b = nullptr;
  T *w1 = nullptr, *b1 = nullptr, *w2 = nullptr, *b2 = nullptr, *w3 = nullptr, *b3 = nullptr;
};

// The whole model's parameters: the tensors outside the layers, and one LayerParams per layer.
template <typename T>
struct ModelParams {
  const T* tok_embeddings = nullptr;  // (vocab, d_model)
  const T* pos_embeddings = nullptr;  // (context_length, d_model)   learned positions only
  const T* norm_w = nullptr;          // (d_model)                    pre-LN only
  const T* norm_b = nullptr;          // (d_model)                    pre-LN layernorm only
  Weight<T> output;                   // (vocab, d_model)             tok_embeddings when tied
  std::vector<LayerParams<T>> layers;
};

template <typename T>
struct ModelGrads {
  T *tok_embeddings = nullptr, *pos_embeddings = nullptr, *norm_w = nullptr, *norm_b = nullptr;
  T* output = nullptr;  // the same buffer as tok_embeddings when tied: both uses accumulate there
  std::vector<LayerGrads<T>> layers;
};

// The tensors of one layer, in checkpoint order: f(name, shape, field) for each tensor this config
// has, name relative to "layers.i." ("attn.wq.weight"), field the member of `layer` that views it.
// `layer` is a LayerParams or a LayerGrads: the one list of a layer's tensors.
template <typename Layer, typename F>
void visit_layer_tensors(Layer& layer, const ModelConfig& c, F&& f) {
  const int64_t d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const bool layernorm = c.norm == NormKind::LayerNorm;
  auto linear = [&](const char* weight, const char* bias, int64_t out, int64_t in, auto& w, auto& b) {
    f(weight, Shape{out, in}, w);
    if (c.bias) f(bias, Shape{out}, b);
  };
  f("attn_norm.weight", Shape{d}, layer.attn_norm_w);
  if (layernorm) f("attn_norm.bias", Shape{d}, layer.attn_norm_b);
  linear("attn.wq.weight", "attn.wq.bias", dq, d, layer.wq, layer.bq);
  linear("attn.wk.weight", "attn.wk.bias", dkv, d, layer.wk, layer.bk);
  linear("attn.wv.weight", "attn.wv.bias", dkv, d, layer.wv, layer.bv);
  linear("attn.wo.weight", "attn.wo.bias", d, dq, layer.wo, layer.bo);
  f("ffn_norm.weight", Shape{d}, layer.ffn_norm_w);
  if (layernorm) f("ffn_norm.bias", Shape{d}, layer.ffn_norm_b);
  linear("ffn.w1.weight", "ffn.w1.bias", c.d_ff, d, layer.w1, layer.b1);
  linear("ffn.w2.weight", "ffn.w2.bias", d, c.d_ff, layer.w2, layer.b2);
  if (c.activation == Activation::SwiGLU) linear("ffn.w3.weight", "ffn.w3.bias", c.d_ff, d, layer.w3, layer.b3);
}

// Every tensor of the model in checkpoint order, with its full name ("layers.3.ffn.w1.weight").
// `model` is a ModelParams or a ModelGrads whose `layers` has n_layers entries.
template <typename Model, typename F>
void visit_model_tensors(Model& model, const ModelConfig& c, F&& f) {
  const int64_t d = c.d_model;
  f(std::string("tok_embeddings.weight"), Shape{c.vocab_size, d}, model.tok_embeddings);
  if (c.positions == Positions::Learned)
    f(std::string("pos_embeddings.weight"), Shape{c.context_length, d}, model.pos_embeddings);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string prefix = "layers." + std::to_string(i) + ".";
    visit_layer_tensors(model.layers[static_cast<size_t>(i)], c,
                        [&](const char* name, const Shape& shape, auto& field) { f(prefix + name, shape, field); });
  }
  if (c.norm_placement == NormPlacement::Pre) {
    f(std::string("norm.weight"), Shape{d}, model.norm_w);
    if (c.norm == NormKind::LayerNorm) f(std::string("norm.bias"), Shape{d}, model.norm_b);
  }
  if (!c.tied_embeddings) f(std::string("output.weight"), Shape{c.vocab_size, d}, model.output);
}

// Declares (does not allocate) every parameter of a model with this (validated) config under its
// checkpoint name, in the order above: the one definition of the parameter layout, shared by the
// model, the training graph, their double-precision checks and the optimizer's moment arenas.
template <typename T>
void declare_model_params(BasicArena<T>& params, const ModelConfig& config);

// The bytes the config's parameters take as float32, summed in double so that a config as large
// as a file may claim (2^31-wide layers, thousands of them) cannot wrap the sum.
double float32_param_bytes(const ModelConfig& config);
// Refuses, before anything is allocated, a model whose float32 parameters exceed the memory
// available (core/memory.h): a BadFile error about `source` naming both sizes.
void check_params_fit_in_memory(const ModelConfig& config, const std::string& source);
// The same for `bytes` of what the load will hold, described by `what` ("the model's float32
// weights, ..."), in the error.
void check_bytes_fit_in_memory(double bytes, const std::string& source, const std::string& what);

// Views of an allocated arena laid out by declare_model_params(config). The views stay valid as
// long as the arena's storage does (moving an arena keeps it; copying does not).
template <typename T>
ModelParams<T> model_params(BasicArena<T>& params, const ModelConfig& config);
template <typename T>
ModelGrads<T> model_grads(BasicArena<T>& grads, const ModelConfig& config);

}  // namespace tformer
