// The decoder: token embedding, optional position embedding, n_layers blocks, final norm (pre-LN
// only) and the vocabulary projection. Parameters live in one Arena under the checkpoint's tensor
// names (docs/checkpoint-format.md), so saving is one write per tensor and the optimizer one loop.
//
//   tok_embeddings.weight        [vocab, d_model]
//   pos_embeddings.weight        [context_length, d_model]       (positions = learned)
//   layers.i.attn_norm.weight    [d_model]    .bias (layernorm only)
//   layers.i.attn.wq.weight      [n_heads * hd, d_model]          .bias when bias
//   layers.i.attn.wk.weight      [n_kv_heads * hd, d_model]       .bias when bias
//   layers.i.attn.wv.weight      [n_kv_heads * hd, d_model]       .bias when bias
//   layers.i.attn.wo.weight      [d_model, n_heads * hd]          .bias when bias
//   layers.i.ffn_norm.weight     [d_model]    .bias (layernorm only)
//   layers.i.ffn.w1.weight       [d_ff, d_model]                  .bias when bias
//   layers.i.ffn.w2.weight       [d_model, d_ff]                  .bias when bias
//   layers.i.ffn.w3.weight       [d_ff, d_model]                  (swiglu only) .bias when bias
//   norm.weight                  [d_model]    .bias (layernorm)   (pre-LN only)
//   output.weight                [vocab, d_model]                 (unless tied_embeddings)
#pragma once

#include <cstdint>
#include <string>

#include "core/arena.h"
#include "kernels/embedding.h"
#include "model/block.h"
#include "model/config.h"
#include "model/kv_cache.h"

namespace tformer {

// Which attention kernel the model runs: the tiled exact kernel (kernels/flash_attention.h, the
// default) or the plain reference that materialises every score (kernels/attention.h), for
// debugging and cross-checks. A run-time setting, not part of the model (checkpoints don't store it).
enum class AttentionKernel { Tiled, Reference };
// "tiled" | "reference"; anything else is an Error naming the value.
AttentionKernel parse_attention_kernel(const std::string& name);

class Model {
 public:
  // Validates the config and declares and allocates every parameter (zeros).
  explicit Model(ModelConfig config);

  const ModelConfig& config() const { return config_; }
  void set_attention_kernel(AttentionKernel k) { attention_kernel_ = k; }
  AttentionKernel attention_kernel() const { return attention_kernel_; }
  Arena& params() { return params_; }
  int64_t n_params() const;

  // GPT-2 initialisation: every matrix and embedding normal(0, 0.02), residual output projections
  // (attn.wo, ffn.w2) normal(0, 0.02 / sqrt(2 n_layers)), biases 0, norm gains 1. Deterministic
  // for a seed, whatever the thread count.
  void init_gpt2(uint64_t seed);

  // Uncached forward: ids [batch, T] -> logits [batch, T, vocab], every sequence starting at
  // absolute position 0, causal. T <= context_length; ids in [0, vocab). It is forward_cached
  // through a fresh cache of capacity T: one code path for prefill, decode and full passes.
  void forward(float* logits, const TokenId* ids, int64_t batch, int64_t n_tokens);

  // A cache sized for this model: `capacity` slots per sequence.
  KVCache make_cache(int64_t batch, int64_t capacity) const;

  // The next chunk of each sequence through the KV cache. ids: [batch, n]; token t of sequence b
  // sits at ABSOLUTE position cache.length(b) + t (RoPE angle, learned/sinusoidal row, causal
  // limit). n_valid: [batch], how many of the n tokens of sequence b are real (null: all n); the
  // rest are padding: computed, but never written to the cache nor counted. The chunk's keys and
  // values are stored in the cache and each length advances by n_valid[b].
  //   logits: [batch, n, vocab] when all_positions, else [batch, vocab] for each sequence's last
  //   valid token (a sequence with n_valid 0 gets zeros).
  // Positions past context_length, or past the cache's capacity, are an error naming the numbers.
  void forward_cached(float* logits, const TokenId* ids, int64_t batch, int64_t n, const int64_t* n_valid,
                      KVCache& cache, bool all_positions);

  // The block weights of layer i, as views into the arena.
  BlockWeights<float> layer_weights(int64_t i);

 private:
  // One sublayer of layer i; out may not alias u. positions [batch*n] are absolute.
  void attention_sublayer(float* out, const float* u, int64_t layer, int64_t batch, int64_t n, const int64_t* positions,
                          const int64_t* n_valid, KVCache& cache);
  void ffn_sublayer(float* out, const float* u, int64_t layer, int64_t rows);
  // norm_1 / norm_2 / final norm by name prefix ("layers.3.attn_norm", "norm").
  void norm(float* y, const float* x, const std::string& prefix, int64_t rows);

  ModelConfig config_;
  Arena params_;
  std::vector<float> sinusoidal_;  // [context_length, d_model] when positions = sinusoidal
  AttentionKernel attention_kernel_ = AttentionKernel::Tiled;
};

// Declares (does not allocate) every parameter of a model with this (validated) config under its
// checkpoint name, in the order above: the one definition of the parameter layout, shared by Model
// (float) and the training graph's double-precision checks.
template <typename T>
void declare_model_params(BasicArena<T>& params, const ModelConfig& config);

// Vaswani et al.'s sinusoidal table: PE[p][2i] = sin(p / 10000^(2i/d)), PE[p][2i+1] = cos(same),
// computed in double. out: [n_positions, d_model], d_model even.
void sinusoidal_positions(float* out, int64_t n_positions, int64_t d_model);

}  // namespace tformer
