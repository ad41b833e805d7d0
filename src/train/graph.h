// The training graph: the decoder's forward pass with every activation the backward needs saved,
// and the hand-written backward beside it. One graph serves one (batch, context) shape; all of
// its memory (activations, gradient scratch) is allocated once by the constructor, so a training
// step allocates nothing.
//
// Forward (per layer; the same composition as Model, docs/architecture.md):
//   X[0]   = drop_e(tok[ids] + pos)                    pos: learned row, sinusoidal row or none
//   pre:   h = X + drop_a(wo attn(norm_1(X)))          X' = h + drop_f(ffn(norm_2(h)))
//   post:  h = norm_1(X + drop_a(wo attn(X)))          X' = norm_2(h + drop_f(ffn(h)))
//   logits = (pre: norm_f(X[L]), post: X[L]) * W_out^T     W_out = tok_embeddings when tied
//   loss   = mean over counted targets of -log softmax(logits)[target]   (target -100 = ignored)
// attn uses positions 0..context-1 for every row (RoPE angles, causal mask), as generation does
// for a sequence starting at position 0.
//
// Dropout (training only, probability config.dropout): on the embedding sum, on each residual
// branch (after wo and after w2) and on the attention probabilities. Masks are counter-based
// (a pure function of the step's seed, the site and the element index), so the backward
// regenerates them instead of storing them, and results do not depend on the thread count.
// Attention dropout: the tiled kernel regenerates the mask tile by tile from the same key
// (kernels/flash_attention.h, AttentionDropout), so nothing of size [B, H, T, T] is stored; with
// the reference kernel the graph applies the same mask to the saved probabilities.
//
// The backward accumulates (+=) into a gradient arena that mirrors the parameters, so gradient
// accumulation over micro-batches is repeated forward/backward calls before one optimizer step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "kernels/embedding.h"
#include "kernels/flash_attention.h"
#include "model/config.h"
#include "model/model.h"

namespace tformer {

template <typename T>
class TrainGraph {
 public:
  // config: validated (vocab_size set). context <= config.context_length.
  TrainGraph(const ModelConfig& config, int64_t batch, int64_t context,
             AttentionKernel kernel = AttentionKernel::Tiled);

  // params: an arena laid out by declare_model_params(config) (Model::params() or a double copy).
  // inputs, targets: [batch, context]; a target of -100 is ignored. Returns the mean loss over
  // the counted targets (0 when none). training: apply dropout with masks drawn from dropout_seed.
  double forward(BasicArena<T>& params, const TokenId* inputs, const TokenId* targets, bool training = false,
                 uint64_t dropout_seed = 0);
  // grads += d(scale * loss)/d(params) for the last forward (grads mirrors params).
  void backward(BasicArena<T>& params, BasicArena<T>& grads, T scale = T(1));

  int64_t count() const { return count_; }     // counted targets in the last forward
  const T* logits() const { return logits_; }  // [batch * context, vocab] of the last forward
  int64_t activation_bytes() const { return static_cast<int64_t>(acts_.size() * sizeof(T)); }
  // The first saved activation of the last forward holding a NaN or an infinity, in the order the
  // forward computes them (per layer: its input x, the norm's output u1, q, k, v, the attention
  // output o, h, u2, the FFN's a (and g); post-LN in its own order; then the final norm and the
  // logits), as "layers.1.a (element 5: inf)"; "" when every one is finite.
  std::string first_non_finite_activation() const;
  int64_t batch() const { return batch_; }
  int64_t context() const { return context_; }

 private:
  struct Layer {
    // parameter offsets in the arena (-1: absent)
    int64_t n1w = -1, n1b = -1, wq = -1, bq = -1, wk = -1, bk = -1, wv = -1, bv = -1, wo = -1, bo = -1;
    int64_t n2w = -1, n2b = -1, w1 = -1, b1 = -1, w2 = -1, b2 = -1, w3 = -1, b3 = -1;
    // saved activations
    T *x, *n1_in, *u1, *mean1, *rstd1, *q, *k, *v, *o, *lse, *probs, *h, *n2_in, *u2, *mean2, *rstd2, *a, *g;
  };
  AttentionDropout attention_dropout_(int64_t layer, bool on) const;
  void attention_forward_(Layer& L, int64_t layer, bool training);
  void attention_backward_(Layer& L, int64_t layer, T* dq, T* dk, T* dv, const T* dout);
  void norm_forward_(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows);
  void norm_backward_(T* dx, T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd, const T* w,
                      int64_t rows);
  void dropout_(T* x, int64_t n, uint64_t site) const;  // x *= mask / (1 - p), mask from (seed, site)
  bool dropout_on() const { return training_ && config_.dropout > 0; }

  ModelConfig config_;
  int64_t batch_, context_, rows_;
  AttentionKernel kernel_;
  int64_t tok_ = -1, pos_ = -1, nfw_ = -1, nfb_ = -1, out_ = -1;  // parameter offsets
  std::vector<Layer> layers_;
  BasicArena<T> acts_;
  std::vector<TokenId> ids_, targets_;
  std::vector<int64_t> positions_;
  std::vector<T> sinusoidal_;
  T *x_final_, *uf_, *meanf_, *rstdf_, *logits_;
  // backward scratch
  T *dx_, *dy_, *du_, *dbr_, *dq_, *dk_, *dv_, *do_, *da_, *dg_, *dact_, *dlogits_;
  int64_t count_ = 0;
  bool training_ = false;
  uint64_t seed_ = 0;
  bool forward_done_ = false;
};

// The dropout keep decision of element `index` at `site` for a step's seed: kept with probability
// 1 - p. Exposed for the tests.
bool dropout_keep(uint64_t seed, uint64_t site, uint64_t index, double p);

}  // namespace tformer
