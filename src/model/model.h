// The decoder for inference: token embedding, optional position embedding, n_layers layers
// (model/layer.h, the one composition training uses too), final norm (pre-LN only) and the
// vocabulary projection. Parameters live in one arena under the checkpoint's tensor names
// (model/params.h has the list), so saving is one write per tensor and the optimizer one loop;
// their typed views are resolved once, when the model is built.
//
// Every pass runs through a KV cache (the uncached forward is the same code through a fresh one).
// Its buffers are a workspace the model keeps and grows only when a chunk is larger than any
// before: decoding one token after another allocates nothing, formats nothing, looks nothing up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned.h"
#include "core/arena.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/layer.h"
#include "model/params.h"

namespace tformer {

template <typename T>
class BasicModel {
 public:
  // Validates the config and declares and allocates every parameter (zeros).
  explicit BasicModel(ModelConfig config);
  // The views point into the arena: a copy would point into the original's.
  BasicModel(const BasicModel&) = delete;
  BasicModel& operator=(const BasicModel&) = delete;
  BasicModel(BasicModel&&) noexcept = default;
  BasicModel& operator=(BasicModel&&) noexcept = default;

  const ModelConfig& config() const { return config_; }
  void set_attention_kernel(AttentionKernel k) { attention_kernel_ = k; }
  AttentionKernel attention_kernel() const { return attention_kernel_; }
  // The parameter arena (an Error once release_float_copies has given its stored matrices' values back).
  BasicArena<T>& params() {
    TF_CHECK(!float_copies_released_,
             "the model's parameter arena was given back (release_float_copies: an inference-only load of stored "
             "weights); load the file again to train, export or convert it");
    return params_;
  }
  // Typed views of every parameter (layer i's are weights().layers[i]).
  const ModelParams<T>& weights() const { return weights_; }
  int64_t n_params() const;

  // GPT-2 initialisation: every matrix and embedding normal(0, 0.02), residual output projections
  // (attn.wo, ffn.w2) normal(0, 0.02 / sqrt(2 n_layers)), biases 0, norm gains 1. Deterministic
  // for a seed, whatever the thread count.
  void init_gpt2(uint64_t seed);

  // Uncached forward: ids [batch, T] -> logits [batch, T, vocab], every sequence starting at
  // absolute position 0, causal. T <= context_length; ids in [0, vocab). It is forward_cached
  // through a fresh cache of capacity T: one code path for prefill, decode and full passes.
  void forward(T* logits, const TokenId* ids, int64_t batch, int64_t n_tokens);

  // A cache sized for this model: `capacity` slots per sequence.
  BasicKVCache<T> make_cache(int64_t batch, int64_t capacity) const;

  // The next chunk of each sequence through the KV cache. ids: [batch, n]; token t of sequence b
  // sits at ABSOLUTE position cache.length(b) + t (RoPE angle, learned/sinusoidal row, causal
  // limit). n_valid: [batch], how many of the n tokens of sequence b are real (null: all n); the
  // rest are padding: computed, but never written to the cache nor counted. The chunk's keys and
  // values are stored in the cache and each length advances by n_valid[b].
  //   logits: [batch, n, vocab] when all_positions, else [batch, vocab] for each sequence's last
  //   valid token (a sequence with n_valid 0 gets zeros).
  // Positions past context_length, or past the cache's capacity, are an error naming the numbers.
  // slots: [batch] distinct cache sequences, sequence b of the call being cache sequence slots[b]
  // (a server runs the sequences of this step, wherever they sit in its cache); null: the call's
  // batch is the cache's, sequence b in slot b.
  void forward_cached(T* logits, const TokenId* ids, int64_t batch, int64_t n, const int64_t* n_valid,
                      BasicKVCache<T>& cache, bool all_positions, const int64_t* slots = nullptr);

  // The attention probabilities of one sequence: probs [n_layers, n_heads, n, n] (row t of layer l
  // and head h: the weights query t gives keys 0..n-1; exactly 0 past t), by an uncached forward of
  // ids [n] through the reference kernel, which keeps what its softmax made (the web page's heat
  // maps). The same kernel the model runs with --attention reference; the tiled kernel's output
  // equals it to rounding. logits: [n, vocab] when not null.
  void attention_probabilities(T* probs, const TokenId* ids, int64_t n, T* logits = nullptr);

  // Serves matrix `name` (a linear weight of model/params.h's list, or tok_embeddings.weight for
  // a tied model, whose output projection it is) from `bytes` in a stored type (kernels/qlinear.h:
  // F16, BF16, Q8_0, Q4_0, row-major, [rows][row bytes]) rather than from the arena: the forward
  // then reads the weight as it is stored. The arena keeps its dequantized values, which the
  // embedding lookup, training (--init-from) and export read (until release_float_copies). float
  // models only; an Error for a name that is no matrix or bytes of the wrong size.
  void set_stored_weight(const std::string& name, WeightType type, std::vector<uint8_t> bytes);
  // For inference alone (generate, logits, eval, serve): gives back to the system the pages of the
  // arena's float32 values of every matrix kept in a stored type, which the forward never reads (a
  // tied embedding kept stored is then looked up from its stored rows, dequantized as the arena
  // held them: the same logits, bit for bit). A quantized file then costs its stored bytes, not
  // its float32 size too. After it params() is an Error (training, export and conversion read the
  // float values). Float models only; once is enough.
  void release_float_copies();
  bool float_copies_released() const { return float_copies_released_; }
  // Room for `bytes` of stored weights in one buffer backed by 2 MB pages (core/memory.h), which
  // the set_stored_weight calls that follow fill in order (a loader that knows its files' sizes
  // calls this first): decode reads every stored byte a token, and spread over one allocation a
  // matrix, most of them too small for a 2 MB page, they cost a TLB miss each 4 KB. A weight that
  // does not fit gets its own buffer. Before any set_stored_weight only.
  void reserve_stored_weights(int64_t bytes);
  // Bytes of the weights one decode step reads: every matrix in its type, plus one row of each
  // embedding table and the norm gains and biases.
  double weight_bytes_per_token() const;
  // The least of row_independent_below (kernels/linear.h) over the model's matrices: a forward of
  // fewer token rows than this computes every product as a RowIndependentProducts scope would.
  int64_t row_independent_below() const;

  // Grows the workspace to hold a chunk of `rows` token rows (batch x chunk) and `batch`
  // sequences, so that the first forward of that size allocates nothing either.
  void reserve(int64_t rows, int64_t batch);

 private:
  // Buffers of one forward pass (the same ones for every layer), sized for `rows` token rows.
  struct Workspace {
    int64_t rows = 0, batch = 0;
    BasicArena<T> arena;
    LayerActs<T> acts;
    LayerScratch<T> scratch;
    T *x = nullptr, *y = nullptr;                     // (rows, d_model) the residual stream, in and out of a layer
    T* final = nullptr;                               // (rows, d_model) the final norm's output / the last rows
    T* final_normed = nullptr;                        // (rows, d_model)
    T *final_mean = nullptr, *final_rstd = nullptr;   // (rows)
    std::vector<int64_t> positions;                   // (rows) absolute positions
    std::vector<TokenId> ids;                         // (rows) padding replaced by id 0
    std::vector<int64_t> start, n_valid, kv_len;      // (batch)
    std::vector<uint8_t> slot_taken;                  // (cache batch) forward_cached's check of `slots`
    int64_t attention_batch = 0, attention_keys = 0;  // the attention scratch is reserved for these
  };

  ModelConfig config_;
  BasicArena<T> params_;
  ModelParams<T> weights_;
  std::vector<std::vector<uint8_t>> stored_;  // the buffers of set_stored_weight past the reserved room
  std::vector<uint8_t, AlignedAllocator<uint8_t>> stored_arena_;  // reserve_stored_weights' room
  bool stored_placed_ = false;          // a stored weight was set (the room may no longer move)
  bool float_copies_released_ = false;  // release_float_copies ran
  bool embed_from_output_ = false;      // token rows from the stored (tied) output matrix
  std::vector<T> sinusoidal_;           // [context_length, d_model] when positions = sinusoidal
  AttentionKernel attention_kernel_ = AttentionKernel::Tiled;
  T* keep_probs_ = nullptr;  // attention_probabilities' output while it runs
  Workspace ws_;
};

using Model = BasicModel<float>;

}  // namespace tformer
