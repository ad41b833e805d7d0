// The training graph: the decoder's forward pass with every activation the backward needs saved,
// and the hand-written backward beside it. One graph serves one (batch, context) shape; all of
// its memory (activations, gradient scratch) is allocated once by the constructor, so a training
// step allocates nothing.
//
// Forward: the decoder of model/layer.h, whose layer_forward / layer_backward the graph calls per
// layer (the same composition the inference model runs):
//   X[0]   = drop_e(tok[ids] + pos)                    pos: learned row, sinusoidal row or none
//   X[l+1] = layer_l(X[l])                             (model/layer.h: pre- or post-LN)
//   logits = (pre: norm_f(X[L]), post: X[L]) * W_out^T     W_out = tok_embeddings when tied
//   loss   = mean over counted targets of -log softmax(logits)[target]   (target -100 = ignored)
// Every row uses positions 0..context-1 (RoPE angles, causal mask), as generation does for a
// sequence starting at position 0.
//
// Dropout (training only, probability config.dropout): on the embedding sum, on each residual
// branch (after wo and after w2) and on the attention probabilities. Masks are counter-based
// (a pure function of the step's seed, the site and the element index), so the backward
// regenerates them instead of storing them, and results do not depend on the thread count.
// Both attention kernels regenerate the attention mask from the same key, so nothing of size
// [B, H, T, T] is stored for it.
//
// The backward accumulates (+=) into a gradient arena that mirrors the parameters, so gradient
// accumulation over micro-batches is repeated forward/backward calls before one optimizer step.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "model/config.h"
#include "model/layer.h"
#include "model/params.h"

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
  // finished, when set, is told as the gradients become final, from the output towards the input
  // (a distributed step starts reducing them while the rest of the backward runs): with n_layers
  // once the head (the final norm and the output matrix) is done, with l once layer l is, and with
  // -1 once the embeddings are. A tied output matrix's gradient is the embeddings': final at -1.
  void backward(BasicArena<T>& params, BasicArena<T>& grads, T scale = T(1),
                const std::function<void(int64_t)>& finished = nullptr);

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
  // Resolves the parameter (and gradient) views when the graph meets an arena it has not bound.
  void bind_params(BasicArena<T>& params);
  void bind_grads(BasicArena<T>& grads);

  ModelConfig config_;
  int64_t batch_, context_, rows_;
  AttentionKernel kernel_;
  BasicArena<T> acts_;                // every activation and the backward's scratch
  std::vector<LayerActs<T>> layers_;  // kept per layer
  LayerScratch<T> scratch_;           // shared by the layers
  T *x_final_, *uf_, *meanf_, *rstdf_, *logits_, *dlogits_, *dx_, *du_;
  std::vector<TokenId> ids_, targets_;
  std::vector<int64_t> positions_;  // [batch * context]: 0..context-1 per row of windows
  std::vector<T> sinusoidal_;
  const T* bound_params_ = nullptr;
  ModelParams<T> params_;
  ModelGrads<T> grads_;  // the views of the gradient arena of the current backward
  // The views of every gradient arena met so far, by its data: a step accumulating into several
  // buffers (TrainSession's accumulation tree) resolves each once, not at every micro-batch.
  std::vector<std::pair<const T*, ModelGrads<T>>> bound_grads_;
  int64_t count_ = 0;
  bool training_ = false;
  uint64_t seed_ = 0;
  bool forward_done_ = false;
};

// The dropout keep decision of element `index` at `site` for a step's seed: kept with probability
// 1 - p. Exposed for the tests.
bool dropout_keep(uint64_t seed, uint64_t site, uint64_t index, double p);

}  // namespace tformer
