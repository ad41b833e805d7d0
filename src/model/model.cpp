#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/memory.h"
#include "core/rng.h"
#include "core/scratch.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "kernels/linear.h"
#include "kernels/qlinear.h"

namespace tformer {

template <typename T>
BasicModel<T>::BasicModel(ModelConfig config) : config_(std::move(config)) {
  config_.validate();
  declare_model_params(params_, config_);
  params_.allocate();
  weights_ = model_params(params_, config_);
  sinusoidal_ = sinusoidal_table<T>(config_);
}

template <typename T>
int64_t BasicModel<T>::n_params() const {
  int64_t n = 0;
  for (const auto& e : params_.entries()) n += e.shape.numel();
  return n;
}

template <typename T>
void BasicModel<T>::set_stored_weight(const std::string& name, WeightType type, std::vector<uint8_t> bytes) {
  if constexpr (!std::is_same_v<T, float>) {
    fail_input(name, "set_stored_weight: {} weights run in float models only", weight_type_name(type));
  } else {
    if (type == WeightType::F64) fail_input(name, "set_stored_weight: f64 is no stored type");
    const WeightType given = type;
    // The checked bytes, in the layout the kernels read (Q8_0 and Q4_0 interleaved sixteen rows at a time:
    // kernels/qlinear.h), stored once whatever number of views they back.
    auto view = [&](int64_t rows, int64_t cols) {
      const bool blocks = is_block_type(given);
      if (blocks && cols % 32 != 0)
        fail_input(name, "{}: rows of {} values are not whole blocks of 32 for {}", name, cols,
                   weight_type_name(given));
      const int64_t want = rows * weight_row_bytes(given, cols);
      if (static_cast<int64_t>(bytes.size()) != want)
        fail_input(name, "{}: {} bytes given, a [{}, {}] {} matrix has {}", name, bytes.size(), rows, cols,
                   weight_type_name(given), want);
      std::vector<uint8_t> packed = repack_weight(type, std::move(bytes), rows, cols);
      stored_placed_ = true;
      const size_t at = (stored_arena_.size() + kAlignment - 1) / kAlignment * kAlignment;
      if (at + packed.size() <= stored_arena_.capacity()) {  // (within capacity: no reallocation)
        stored_arena_.resize(at + packed.size());
        std::memcpy(stored_arena_.data() + at, packed.data(), packed.size());
        return Weight<T>{type, stored_arena_.data() + at, rows, cols};
      }
      stored_.push_back(std::move(packed));
      return Weight<T>{type, stored_.back().data(), rows, cols};
    };
    bool found = false;
    if (name == "tok_embeddings.weight" && config_.tied_embeddings) {
      weights_.output = view(config_.vocab_size, config_.d_model);
      found = true;
    }
    visit_model_tensors(weights_, config_, [&](const std::string& n, const Shape& shape, auto& field) {
      if constexpr (std::is_same_v<std::decay_t<decltype(field)>, Weight<T>>) {
        if (n == name && !found) {
          field = view(shape[0], shape[1]);
          found = true;
        }
      }
    });
    if (!found) fail_input(name, "set_stored_weight: '{}' is not a matrix the forward multiplies", name);
  }
}

template <typename T>
void BasicModel<T>::release_float_copies() {
  TF_CHECK((std::is_same_v<T, float>), "release_float_copies: float models only");
  if (float_copies_released_) return;
  auto give_back = [&](const std::string& name) {
    if (const auto* e = params_.find(name))
      release_pages(params_.data() + e->offset, static_cast<size_t>(e->shape.numel()) * sizeof(T));
  };
  visit_model_tensors(weights_, config_, [&](const std::string& n, const Shape&, auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, Weight<T>>)
      if (field.present() && !field.is_dense()) give_back(n);
  });
  if (config_.tied_embeddings && weights_.output.present() && !weights_.output.is_dense()) {
    give_back("tok_embeddings.weight");
    embed_from_output_ = true;
  }
  float_copies_released_ = true;
}

template <typename T>
void BasicModel<T>::reserve_stored_weights(int64_t bytes) {
  TF_CHECK(bytes >= 0 && !stored_placed_, "reserve_stored_weights: {} bytes after stored weights were set", bytes);
  reserve_on_huge_pages(stored_arena_, static_cast<size_t>(bytes));
}

template <typename T>
double BasicModel<T>::weight_bytes_per_token() const {
  ModelParams<T> w = weights_;
  double bytes = 0;
  visit_model_tensors(w, config_, [&](const std::string&, const Shape& shape, auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, Weight<T>>) {
      bytes += static_cast<double>(field.rows) * static_cast<double>(weight_row_bytes(field.type, field.cols));
    } else if (shape.rank() == 2) {
      bytes += static_cast<double>(shape[1]) * sizeof(T);  // an embedding table: one row
    } else {
      bytes += static_cast<double>(shape.numel()) * sizeof(T);
    }
  });
  if (config_.tied_embeddings)
    bytes += static_cast<double>(w.output.rows) * static_cast<double>(weight_row_bytes(w.output.type, w.output.cols));
  return bytes;
}

template <typename T>
int64_t BasicModel<T>::row_independent_below() const {
  ModelParams<T> w = weights_;
  int64_t below = std::numeric_limits<int64_t>::max();
  visit_model_tensors(w, config_, [&](const std::string&, const Shape&, auto& field) {
    if constexpr (std::is_same_v<std::decay_t<decltype(field)>, Weight<T>>)
      if (field.present()) below = std::min(below, tformer::row_independent_below(field.type));
  });
  return std::min(below, tformer::row_independent_below(w.output.type));
}

template <typename T>
void BasicModel<T>::init_gpt2(uint64_t seed) {
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  uint64_t stream = 0;
  for (const auto& e : params_.entries()) {
    auto v = params_.view(e);
    const std::string& n = e.name;
    const bool is_bias = n.ends_with(".bias");
    const bool is_norm_gain = !is_bias && (n.ends_with("norm.weight"));
    if (is_bias) {
      std::fill(v.begin(), v.end(), T(0));
    } else if (is_norm_gain) {
      std::fill(v.begin(), v.end(), T(1));
    } else {
      const bool residual = n.ends_with("attn.wo.weight") || n.ends_with("ffn.w2.weight");
      fill_normal<T>(v, seed, stream, 0.0, residual ? residual_std : 0.02);
    }
    ++stream;  // one stream per tensor, in declaration order
  }
}

template <typename T>
BasicKVCache<T> BasicModel<T>::make_cache(int64_t batch, int64_t capacity) const {
  return BasicKVCache<T>(config_.n_layers, batch, config_.n_kv_heads, capacity, config_.head_dim());
}

template <typename T>
void BasicModel<T>::forward(T* logits, const TokenId* ids, int64_t batch, int64_t n_tokens) {
  BasicKVCache<T> cache = make_cache(batch, std::max<int64_t>(n_tokens, 1));
  forward_cached(logits, ids, batch, n_tokens, nullptr, cache, true);
}

template <typename T>
void BasicModel<T>::attention_probabilities(T* probs, const TokenId* ids, int64_t n, T* logits) {
  TF_CHECK(n >= 1, "attention_probabilities: {} tokens", n);
  std::vector<T> own;
  if (!logits) {
    own.resize(static_cast<size_t>(n * config_.vocab_size));
    logits = own.data();
  }
  const AttentionKernel kernel = attention_kernel_;
  attention_kernel_ = AttentionKernel::Reference;
  keep_probs_ = probs;
  try {
    forward(logits, ids, 1, n);
  } catch (...) {
    attention_kernel_ = kernel;
    keep_probs_ = nullptr;
    throw;
  }
  attention_kernel_ = kernel;
  keep_probs_ = nullptr;
}

template <typename T>
void BasicModel<T>::reserve(int64_t rows, int64_t batch) {
  rows = std::max<int64_t>(rows, 1);
  Workspace& w = ws_;
  if (rows > w.rows) {
    const ModelConfig& c = config_;
    const LayerKeep keep{.input = false};
    BasicArena<T> arena;
    declare_layer_acts(arena, "", c, 1, rows, keep);
    declare_layer_scratch(arena, c, rows, false);
    for (const char* name : {"x", "y", "final", "final_normed"}) arena.add(name, {rows, c.d_model});
    arena.add("final_mean", {rows});
    arena.add("final_rstd", {rows});
    arena.allocate();
    w.acts = bind_layer_acts(arena, "", c, 1, rows, keep);
    w.scratch = bind_layer_scratch(arena, c, false);
    w.x = arena.get("x").data();
    w.y = arena.get("y").data();
    w.final = arena.get("final").data();
    w.final_normed = arena.get("final_normed").data();
    w.final_mean = arena.get("final_mean").data();
    w.final_rstd = arena.get("final_rstd").data();
    w.arena = std::move(arena);
    w.positions.resize(rows);
    w.ids.resize(rows);
    w.rows = rows;
  }
  if (batch > w.batch) {
    w.start.resize(batch);
    w.n_valid.resize(batch);
    w.kv_len.resize(batch);
    w.batch = batch;
  }
}

template <typename T>
void BasicModel<T>::forward_cached(T* logits, const TokenId* ids, int64_t batch, int64_t n, const int64_t* n_valid,
                                   BasicKVCache<T>& cache, bool all_positions, const int64_t* slots) {
  const ModelConfig& c = config_;
  TF_CHECK(n >= 0 && batch > 0, "forward: batch {} and chunk {} tokens", batch, n);
  TF_CHECK((slots ? cache.batch() >= batch : cache.batch() == batch) && cache.n_layers() == c.n_layers &&
               cache.n_kv_heads() == c.n_kv_heads && cache.head_dim() == c.head_dim(),
           "forward: the KV cache was made for another model or batch");
  auto slot = [&](int64_t b) { return slots ? slots[b] : b; };
  share_scratch_sizes();  // every thread ready for any task of the step's loops (core/scratch.h)
  if (slots) {
    std::vector<uint8_t>& taken = ws_.slot_taken;  // kept: no allocation per step
    taken.assign(static_cast<size_t>(cache.batch()), 0);
    for (int64_t b = 0; b < batch; ++b) {
      TF_CHECK(slots[b] >= 0 && slots[b] < cache.batch() && !taken[static_cast<size_t>(slots[b])],
               "forward: slot {} of sequence {} is outside the cache's {} or taken twice", slots[b], b, cache.batch());
      taken[static_cast<size_t>(slots[b])] = 1;
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t valid = n_valid ? n_valid[b] : n;
    TF_CHECK(valid >= 0 && valid <= n, "forward: sequence {} has {} valid tokens in a chunk of {}", b, valid, n);
    const int64_t end = cache.length(slot(b)) + valid;
    if (end > c.context_length)
      fail_input(fmt::format("sequence {}", b), "sequence {} would reach {} tokens; the model's context_length is {}",
                 b, end, c.context_length);
    if (end > cache.capacity())
      fail_input(fmt::format("sequence {}", b), "sequence {} would reach {} tokens; the KV cache holds {}", b, end,
                 cache.capacity());
  }
  const int64_t d = c.d_model, rows = batch * n;
  reserve(std::max(rows, batch), batch);  // the last rows of each sequence use `batch` rows too
  Workspace& w = ws_;
  if (batch > w.attention_batch || cache.capacity() > w.attention_keys) {
    // Decode's attention scratch grows with the keys: reserved for the whole cache at once.
    const AttentionShape shape{batch, 1, cache.capacity(), c.n_heads, c.n_kv_heads, c.head_dim()};
    flash_attention_reserve<T>(shape);
    attention_reserve<T>(shape);
    w.attention_batch = std::max(w.attention_batch, batch);
    w.attention_keys = std::max(w.attention_keys, cache.capacity());
  }
  int64_t n_kv = 1;
  for (int64_t b = 0; b < batch; ++b) {
    w.n_valid[b] = n_valid ? n_valid[b] : n;
    w.start[b] = cache.length(slot(b));
    w.kv_len[b] = w.start[b] + w.n_valid[b];
    n_kv = std::max(n_kv, w.kv_len[b]);
    for (int64_t t = 0; t < n; ++t) {
      // Padding rows get the positions after the real ones, clamped to the last row the tables
      // have, and id 0 so that the embedding lookup stays in range (their results are not used).
      w.positions[b * n + t] = std::min(w.start[b] + t, c.context_length - 1);
      w.ids[b * n + t] = t < w.n_valid[b] ? ids[b * n + t] : 0;
    }
  }
  embed_forward<T>(w.x, w.ids.data(), w.positions.data(), rows, weights_, sinusoidal_.data(), c,
                   embed_from_output_ ? &weights_.output : nullptr);

  const LayerStep step{batch, n, w.positions.data(), attention_kernel_};
  LayerKV<T> kv{{}, {}, w.start.data(), w.n_valid.data(), w.kv_len.data(), n_kv};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    kv.keys = cache.keys(l);
    kv.values = cache.values(l);
    kv.keys.seq = kv.values.seq = slots;
    w.acts.x = w.x;
    // attention_probabilities: a fresh cache of capacity n, so n_kv = n.
    w.acts.probs = keep_probs_ ? keep_probs_ + l * c.n_heads * n * n_kv : nullptr;
    layer_forward<T>(w.y, w.acts, weights_.layers[l], w.scratch, c, step, kv);
    std::swap(w.x, w.y);
  }
  for (int64_t b = 0; b < batch; ++b) cache.advance(slot(b), w.n_valid[b]);

  // Final norm (pre-LN only) and the vocabulary projection, for every row or only the last valid ones.
  const bool pre = c.norm_placement == NormPlacement::Pre;
  const T* top = w.x;
  int64_t out_rows = rows;
  if (!all_positions) {
    for (int64_t b = 0; b < batch; ++b) {
      if (w.n_valid[b] > 0)
        std::copy_n(w.x + (b * n + w.n_valid[b] - 1) * d, d, w.final + b * d);
      else
        std::fill_n(w.final + b * d, d, T(0));
    }
    top = w.final;
    out_rows = batch;
  }
  if (pre) {
    decoder_norm_forward<T>(w.final_normed, w.final_mean, w.final_rstd, top, weights_.norm_w, weights_.norm_b, out_rows,
                            c);
    top = w.final_normed;
  }
  linear_forward<T>(logits, top, weights_.output, nullptr, out_rows);
  if (!all_positions)
    for (int64_t b = 0; b < batch; ++b)
      if (w.n_valid[b] == 0) std::fill_n(logits + b * c.vocab_size, c.vocab_size, T(0));
}

template class BasicModel<float>;
template class BasicModel<double>;

}  // namespace tformer
