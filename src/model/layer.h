// One decoder layer, composed once: the inference model (a chunk of each sequence through the KV
// cache) and the training graph (a batch of windows, activations kept for the backward, dropout)
// both run layer_forward, and training runs layer_backward beside it. Float and double.
//
//   pre-LN  (x + F(LN(x))):   h = x + drop(attn(norm_1(x)));   y = h + drop(ffn(norm_2(h)))
//   post-LN (LN(x + F(x))):   h = norm_1(x + drop(attn(x)));   y = norm_2(h + drop(ffn(h)))
//   attn(u) = wo attention(rope(wq u + bq), rope(wk u + bk), wv u + bv) + bo
//             causal on ABSOLUTE positions; RoPE only when positions = rope
//   ffn(u)  = w2 act(w1 u + b1) + b2                         gelu, gelu_tanh
//           = w2 (silu(w1 u + b1) * (w3 u + b3)) + b2        swiglu
//   drop    = dropout on each residual branch (training only); attention dropout on the
//             probabilities as they weight the values
//
// Where the keys and values live (LayerKV): by default the chunk's own k and v (a window whose
// first token is at position 0: training, and any uncached check); with a cache, the chunk's keys
// (after RoPE) and values are stored at their absolute slots and attention reads every filled slot.
//
// The backward restates the forward in reverse and accumulates (+=) into the gradients; it
// recomputes the FFN activation from the kept pre-activation instead of keeping it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "kernels/attention.h"
#include "kernels/dropout.h"
#include "model/config.h"
#include "model/params.h"

namespace tformer {

// Which attention kernel a forward runs: the tiled exact kernel (kernels/flash_attention.h, the
// default) or the plain reference that materialises every score (kernels/attention.h), for
// debugging and cross-checks. A run-time setting, not part of the model (checkpoints don't store it).
enum class AttentionKernel { Tiled, Reference };
// "tiled" | "reference"; anything else is an Error naming the value.
AttentionKernel parse_attention_kernel(const std::string& name);

// The activations of one layer for rows = batch * n token rows (hd = head_dim). Training keeps one
// set per layer for the backward; inference reuses one set for every layer. Null: not kept.
template <typename T>
struct LayerActs {
  T* x = nullptr;      // (rows, d_model)         the layer's input
  T* u1 = nullptr;     // (rows, d_model)         pre: norm_1(x), the attention's input; post: norm_1(n1_in) = h
  T* n1_in = nullptr;  // (rows, d_model)         post: x + attention branch, norm_1's input
  T* mean1 = nullptr;  // (rows)                  norm_1's statistics (mean: layernorm)
  T* rstd1 = nullptr;  // (rows)
  T* q = nullptr;      // (rows, n_heads * hd)    after RoPE
  T* k = nullptr;      // (rows, n_kv_heads * hd) after RoPE
  T* v = nullptr;      // (rows, n_kv_heads * hd)
  T* o = nullptr;      // (rows, n_heads * hd)    the attention's output, wo's input
  T* lse = nullptr;    // (batch, n_heads, n)     the tiled kernel's log-sum-exp (its backward needs it)
  T* probs = nullptr;  // (batch, n_heads, n, n)  the reference kernel's probabilities (its backward)
  T* h = nullptr;      // (rows, d_model)         pre: x + attention branch; post: the same buffer as u1
  T* u2 = nullptr;     // (rows, d_model)         pre: norm_2(h), the FFN's input
  T* n2_in = nullptr;  // (rows, d_model)         post: h + FFN branch, norm_2's input
  T* mean2 = nullptr;  // (rows)
  T* rstd2 = nullptr;  // (rows)
  T* a = nullptr;      // (rows, d_ff)            w1 u + b1
  T* g = nullptr;      // (rows, d_ff)            w3 u + b3 (swiglu)
};

// Which optional activations a set keeps.
struct LayerKeep {
  bool input = true;   // x: training keeps every layer's input; inference passes its own buffer
  bool lse = false;    // the tiled kernel's backward
  bool probs = false;  // the reference kernel's backward
};

// The activations of one layer in compute order: f(name, shape, field) for each one this config
// and `keep` have ("x", "u1", ..., post-LN's own order). The one list of what a layer keeps.
template <typename T, typename F>
void visit_layer_acts(LayerActs<T>& a, const ModelConfig& c, int64_t batch, int64_t n, LayerKeep keep, F&& f) {
  const int64_t R = batch * n, d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const bool post = c.norm_placement == NormPlacement::Post;
  const bool swiglu = c.activation == Activation::SwiGLU;
  if (keep.input) f("x", Shape{R, d}, a.x);
  auto norm1 = [&] {
    f("u1", Shape{R, d}, a.u1);
    f("mean1", Shape{R}, a.mean1);
    f("rstd1", Shape{R}, a.rstd1);
  };
  auto attention = [&] {
    f("q", Shape{R, dq}, a.q);
    f("k", Shape{R, dkv}, a.k);
    f("v", Shape{R, dkv}, a.v);
    f("o", Shape{R, dq}, a.o);
    if (keep.lse) f("lse", Shape{batch, c.n_heads, n}, a.lse);
    if (keep.probs) f("probs", Shape{batch, c.n_heads, n, n}, a.probs);
  };
  auto ffn = [&] {
    f("a", Shape{R, c.d_ff}, a.a);
    if (swiglu) f("g", Shape{R, c.d_ff}, a.g);
  };
  if (!post) {
    norm1();
    attention();
    f("h", Shape{R, d}, a.h);
    f("u2", Shape{R, d}, a.u2);
    f("mean2", Shape{R}, a.mean2);
    f("rstd2", Shape{R}, a.rstd2);
    ffn();
  } else {
    attention();
    f("n1_in", Shape{R, d}, a.n1_in);
    norm1();
    ffn();
    f("n2_in", Shape{R, d}, a.n2_in);
    f("mean2", Shape{R}, a.mean2);
    f("rstd2", Shape{R}, a.rstd2);
  }
}

// Declares one layer's activations in `arena` under prefix + name, and binds them once allocated.
template <typename T>
void declare_layer_acts(BasicArena<T>& arena, const std::string& prefix, const ModelConfig& c, int64_t batch, int64_t n,
                        LayerKeep keep);
template <typename T>
LayerActs<T> bind_layer_acts(BasicArena<T>& arena, const std::string& prefix, const ModelConfig& c, int64_t batch,
                             int64_t n, LayerKeep keep);

// Buffers a pass uses and does not keep (rows = batch * n). One set serves every layer.
template <typename T>
struct LayerScratch {
  // forward
  T* branch = nullptr;  // (rows, d_model)          a residual branch's output
  T* act = nullptr;     // (rows, d_ff)             the FFN activation
  // backward
  T* dbranch = nullptr;  // (rows, d_model)         gradient of a branch's output (after its dropout)
  T* du = nullptr;       // (rows, d_model)         gradient of a branch's input
  T* dsum = nullptr;     // (rows, d_model)         post-LN: gradient of norm_2's input, then of h
  T* dq = nullptr;       // (rows, n_heads * hd)
  T* dout = nullptr;     // (rows, n_heads * hd)    gradient of the attention output o
  T* dk = nullptr;       // (rows, n_kv_heads * hd)
  T* dv = nullptr;       // (rows, n_kv_heads * hd)
  T* da = nullptr;       // (rows, d_ff)            also holds the recomputed activation
  T* dact = nullptr;     // (rows, d_ff)
  T* dg = nullptr;       // (rows, d_ff)            swiglu
};
// Declares the scratch (forward only, or forward and backward) in `arena` and binds it. With the
// backward, the forward's branch and act share the backward's dbranch and da.
template <typename T>
void declare_layer_scratch(BasicArena<T>& arena, const ModelConfig& c, int64_t rows, bool backward);
template <typename T>
LayerScratch<T> bind_layer_scratch(BasicArena<T>& arena, const ModelConfig& c, bool backward);

// The dropout masks of one layer in one training step (all inactive: no dropout).
struct LayerDropout {
  AttentionDropout probs;  // on the attention probabilities
  DropoutMask attn_out;    // on the attention branch's output (after wo)
  DropoutMask ffn_out;     // on the FFN branch's output (after w2)
};
// The masks of a step's seed with drop probability p: the embeddings' (site 0) and layer l's
// (sites 1 + 3 l, 2 + 3 l, 3 + 3 l). A mask's key is a function of (seed, site) only.
DropoutMask embedding_dropout(uint64_t seed, double p);
LayerDropout layer_dropout(uint64_t seed, int64_t layer, double p);
uint64_t dropout_site_key(uint64_t seed, uint64_t site);

// What every layer of one pass shares.
struct LayerStep {
  int64_t batch = 1, n = 1;            // rows = batch * n: n tokens of each sequence
  const int64_t* positions = nullptr;  // (batch * n) absolute positions (RoPE)
  AttentionKernel kernel = AttentionKernel::Tiled;
};

// Where attention finds the keys and values. Default (keys.data null): the chunk's own k and v,
// every sequence starting at position 0 (n_kv = n, causal). With a cache: one layer's
// [batch, capacity, kv_heads, hd] views; the chunk's first n_valid[b] keys and values are stored at
// slots start[b]..start[b] + n_valid[b] - 1 and the queries read slots [0, kv_len[b]).
template <typename T>
struct LayerKV {
  HeadsView<T> keys, values;
  const int64_t* start = nullptr;    // (batch) cached tokens before the chunk = the query offset
  const int64_t* n_valid = nullptr;  // (batch) real tokens of the chunk; the rest is padding
  const int64_t* kv_len = nullptr;   // (batch) start + n_valid
  int64_t n_kv = 1;                  // max over the batch of kv_len (at least 1)
};

// y (rows, d_model) = the layer applied to a.x; every other field of `a` is written. y must not
// alias a.x. `drop` applies only when given (training).
template <typename T>
void layer_forward(T* y, const LayerActs<T>& a, const LayerParams<T>& p, const LayerScratch<T>& s, const ModelConfig& c,
                   const LayerStep& step, const LayerKV<T>& kv = {}, const LayerDropout& drop = {});

// dx: on entry the gradient of the layer's output y, on return the gradient of its input x
// (replaced, not accumulated). Parameter gradients accumulate (+=) into g. Needs the kept
// activations of the last layer_forward with the default LayerKV and the same step and dropout.
template <typename T>
void layer_backward(T* dx, const LayerGrads<T>& g, const LayerActs<T>& a, const LayerParams<T>& p,
                    const LayerScratch<T>& s, const ModelConfig& c, const LayerStep& step,
                    const LayerDropout& drop = {});

// The norms the decoder uses (layer norms and the final one): LayerNorm or RMSNorm per the config.
// mean is not written by RMSNorm. The backward accumulates into dx, dw, db.
template <typename T>
void decoder_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows,
                          const ModelConfig& c);
template <typename T>
void decoder_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, const T* w,
                           int64_t rows, const ModelConfig& c);

// The decoder's input: x (rows, d_model) = tok_embeddings[ids] + the position's row of the
// learned table or of `sinusoidal` (context_length, d_model); nothing added for rope / none. With
// `stored_rows` (float models whose tied embedding is kept only as a stored matrix), the token rows
// are that matrix's rows dequantized (dequantize_weight_rows: the values the arena held).
template <typename T>
void embed_forward(T* x, const TokenId* ids, const int64_t* positions, int64_t rows, const ModelParams<T>& p,
                   const T* sinusoidal, const ModelConfig& c, const Weight<T>* stored_rows = nullptr);
// Its backward: dtok_embeddings[ids] += dx; dpos_embeddings[positions] += dx (learned).
template <typename T>
void embed_backward(const ModelGrads<T>& g, const T* dx, const TokenId* ids, const int64_t* positions, int64_t rows,
                    const ModelConfig& c);

// Vaswani et al.'s sinusoidal table: PE[p][2i] = sin(p / 10000^(2i/d)), PE[p][2i+1] = cos(same),
// computed in double and rounded to float (the table every model and graph uses, whatever its T).
// out: (n_positions, d_model), d_model even.
void sinusoidal_positions(float* out, int64_t n_positions, int64_t d_model);
// The table embed_forward takes for config c: (context_length, d_model) of sinusoidal_positions'
// float values in T when c.positions is sinusoidal, else empty.
template <typename T>
std::vector<T> sinusoidal_table(const ModelConfig& c);

}  // namespace tformer
