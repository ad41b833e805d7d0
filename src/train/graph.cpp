#include "train/graph.h"

#include <cmath>
#include <span>
#include <string>
#include <unordered_map>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/flash_attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace tformer {

namespace {

// Element-wise helpers; OpenMP only pays for itself on large arrays.
constexpr int64_t kParallelMin = 1 << 15;

template <typename T>
void zero(T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = T(0);
}
template <typename T>
void copy(T* y, const T* x, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i];
}
template <typename T>
void add(T* y, const T* a, const T* b, int64_t n) {  // y = a + b (y may alias a or b)
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

// Sites of the dropout masks: 0 = embeddings, then three per layer.
uint64_t site_attn_probs(int64_t l) { return 1 + 3 * static_cast<uint64_t>(l); }
uint64_t site_attn_resid(int64_t l) { return 2 + 3 * static_cast<uint64_t>(l); }
uint64_t site_ffn_resid(int64_t l) { return 3 + 3 * static_cast<uint64_t>(l); }

uint64_t site_key(uint64_t seed, uint64_t site) { return mix64(seed ^ mix64(site + 0x5151)); }

}  // namespace

bool dropout_keep(uint64_t seed, uint64_t site, uint64_t index, double p) {
  return dropout_kept(site_key(seed, site), index, dropout_threshold(p));
}

template <typename T>
TrainGraph<T>::TrainGraph(const ModelConfig& config, int64_t batch, int64_t context, AttentionKernel kernel)
    : config_(config), batch_(batch), context_(context), rows_(batch * context), kernel_(kernel) {
  config_.validate();
  const auto& c = config_;
  TF_CHECK(batch > 0 && context > 0, "training graph: batch {} and context {} must be positive", batch, context);
  if (context > c.context_length) fail("--context {} exceeds the model's context_length {}", context, c.context_length);

  // Parameter offsets from the one layout definition.
  BasicArena<T> layout;
  declare_model_params(layout, c);
  std::unordered_map<std::string, int64_t> off;
  for (const auto& e : layout.entries()) off[e.name] = e.offset;
  auto at = [&](const std::string& name) -> int64_t {
    auto it = off.find(name);
    return it == off.end() ? -1 : it->second;
  };
  tok_ = at("tok_embeddings.weight");
  pos_ = at("pos_embeddings.weight");
  nfw_ = at("norm.weight");
  nfb_ = at("norm.bias");
  out_ = c.tied_embeddings ? tok_ : at("output.weight");

  const int64_t R = rows_, d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const bool post = c.norm_placement == NormPlacement::Post;
  const bool probs = kernel == AttentionKernel::Reference;
  layers_.resize(c.n_layers);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto name = [&](const char* rest) { return fmt::format("layers.{}.{}", l, rest); };
    Layer& L = layers_[l];
    L.n1w = at(name("attn_norm.weight"));
    L.n1b = at(name("attn_norm.bias"));
    L.wq = at(name("attn.wq.weight"));
    L.bq = at(name("attn.wq.bias"));
    L.wk = at(name("attn.wk.weight"));
    L.bk = at(name("attn.wk.bias"));
    L.wv = at(name("attn.wv.weight"));
    L.bv = at(name("attn.wv.bias"));
    L.wo = at(name("attn.wo.weight"));
    L.bo = at(name("attn.wo.bias"));
    L.n2w = at(name("ffn_norm.weight"));
    L.n2b = at(name("ffn_norm.bias"));
    L.w1 = at(name("ffn.w1.weight"));
    L.b1 = at(name("ffn.w1.bias"));
    L.w2 = at(name("ffn.w2.weight"));
    L.b2 = at(name("ffn.w2.bias"));
    L.w3 = at(name("ffn.w3.weight"));
    L.b3 = at(name("ffn.w3.bias"));

    acts_.add(name("x"), {R, d});
    if (post) acts_.add(name("n1_in"), {R, d});
    acts_.add(name("u1"), {R, d});
    acts_.add(name("mean1"), {R});
    acts_.add(name("rstd1"), {R});
    acts_.add(name("q"), {R, dq});
    acts_.add(name("k"), {R, dkv});
    acts_.add(name("v"), {R, dkv});
    acts_.add(name("o"), {R, dq});
    acts_.add(name("lse"), {batch, c.n_heads, context});
    if (probs) acts_.add(name("probs"), {batch, c.n_heads, context, context});
    if (!post) acts_.add(name("h"), {R, d});
    if (post) acts_.add(name("n2_in"), {R, d});
    if (!post) acts_.add(name("u2"), {R, d});
    acts_.add(name("mean2"), {R});
    acts_.add(name("rstd2"), {R});
    acts_.add(name("a"), {R, c.d_ff});
    if (c.activation == Activation::SwiGLU) acts_.add(name("g"), {R, c.d_ff});
    // The FFN activation act = gelu(a) (or swiglu(a, g)) is not saved: the forward writes it into
    // the backward's scratch da, and the backward recomputes it there from the saved a (and g) --
    // the same function of the same numbers, so the same bits -- saving 4 d_model floats per row
    // per layer (a quarter of what a layer keeps) for one more elementwise pass.
  }
  acts_.add("x_final", {R, d});
  if (!post) {
    acts_.add("uf", {R, d});
    acts_.add("meanf", {R});
    acts_.add("rstdf", {R});
  }
  acts_.add("logits", {R, c.vocab_size});
  acts_.add("dlogits", {R, c.vocab_size});
  for (const char* s : {"dx", "dy", "du", "dbr"}) acts_.add(s, {R, d});
  acts_.add("dq", {R, dq});
  acts_.add("do", {R, dq});
  acts_.add("dk", {R, dkv});
  acts_.add("dv", {R, dkv});
  acts_.add("da", {R, c.d_ff});
  acts_.add("dact", {R, c.d_ff});
  if (c.activation == Activation::SwiGLU) acts_.add("dg", {R, c.d_ff});
  acts_.allocate();

  auto get = [&](const std::string& n) -> T* { return acts_.contains(n) ? acts_.get(n).data() : nullptr; };
  x_final_ = get("x_final");
  for (int64_t l = 0; l < c.n_layers; ++l) {
    auto name = [&](const char* rest) { return fmt::format("layers.{}.{}", l, rest); };
    Layer& L = layers_[l];
    L.x = get(name("x"));
    L.u1 = get(name("u1"));
    L.n1_in = post ? get(name("n1_in")) : L.x;
    L.mean1 = get(name("mean1"));
    L.rstd1 = get(name("rstd1"));
    L.q = get(name("q"));
    L.k = get(name("k"));
    L.v = get(name("v"));
    L.o = get(name("o"));
    L.lse = get(name("lse"));
    L.probs = get(name("probs"));
    L.h = post ? L.u1 : get(name("h"));  // post-LN: h is norm_1's output
    L.n2_in = post ? get(name("n2_in")) : L.h;
    L.mean2 = get(name("mean2"));
    L.rstd2 = get(name("rstd2"));
    L.a = get(name("a"));
    L.g = get(name("g"));
  }
  // post-LN: norm_2's output is the next layer's input.
  for (int64_t l = 0; l < c.n_layers; ++l) {
    T* next = l + 1 < c.n_layers ? layers_[l + 1].x : x_final_;
    layers_[l].u2 = post ? next : get(fmt::format("layers.{}.u2", l));
  }
  uf_ = get("uf");
  meanf_ = get("meanf");
  rstdf_ = get("rstdf");
  logits_ = get("logits");
  dlogits_ = get("dlogits");
  dx_ = get("dx");
  dy_ = get("dy");
  du_ = get("du");
  dbr_ = get("dbr");
  dq_ = get("dq");
  do_ = get("do");
  dk_ = get("dk");
  dv_ = get("dv");
  da_ = get("da");
  dact_ = get("dact");
  dg_ = get("dg");

  ids_.resize(R);
  targets_.resize(R);
  positions_.resize(R);
  for (int64_t r = 0; r < R; ++r) positions_[r] = r % context;
  if (c.positions == Positions::Sinusoidal) {
    std::vector<float> table(context * d);
    sinusoidal_positions(table.data(), context, d);
    sinusoidal_.assign(table.begin(), table.end());
  }
}

template <typename T>
std::string TrainGraph<T>::first_non_finite_activation() const {
  // The order the forward computes them in (the arena's order differs for post-LN). The lse is
  // left out: -inf is a legal log-sum-exp (a row with no key).
  static constexpr const char* kPre[] = {"x",     "u1", "mean1", "rstd1", "q",     "k", "v", "o",
                                         "probs", "h",  "u2",    "mean2", "rstd2", "a", "g"};
  static constexpr const char* kPost[] = {"x",     "q",     "k", "v", "o",     "probs", "n1_in", "u1",
                                          "mean1", "rstd1", "a", "g", "n2_in", "mean2", "rstd2"};
  std::vector<std::string> order;
  const bool post = config_.norm_placement == NormPlacement::Post;
  for (int64_t l = 0; l < config_.n_layers; ++l)
    for (const char* n : post ? std::span<const char* const>(kPost) : std::span<const char* const>(kPre))
      order.push_back(fmt::format("layers.{}.{}", l, n));
  for (const char* n : {"x_final", "uf", "meanf", "rstdf", "logits"}) order.emplace_back(n);
  for (const std::string& name : order) {
    const auto* e_ptr = acts_.find(name);
    if (!e_ptr) continue;  // not saved in this configuration
    const auto& e = *e_ptr;
    const T* p = acts_.data() + e.offset;
    for (int64_t i = 0; i < e.shape.numel(); ++i)
      if (!std::isfinite(p[i])) return fmt::format("{} (element {}: {})", e.name, i, p[i]);
  }
  return "";
}

template <typename T>
void TrainGraph<T>::dropout_(T* x, int64_t n, uint64_t site) const {
  const uint64_t key = site_key(seed_, site), thr = dropout_threshold(config_.dropout);
  const T scale = T(1.0 / (1.0 - config_.dropout));
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) x[i] = dropout_kept(key, static_cast<uint64_t>(i), thr) ? x[i] * scale : T(0);
}

template <typename T>
void TrainGraph<T>::norm_forward_(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t rows) {
  const T eps = static_cast<T>(config_.norm_eps);
  if (config_.norm == NormKind::LayerNorm)
    layernorm_forward<T>(y, mean, rstd, x, w, b, rows, config_.d_model, eps);
  else
    rmsnorm_forward<T>(y, rstd, x, w, rows, config_.d_model, eps);
}

template <typename T>
void TrainGraph<T>::norm_backward_(T* dx, T* dw, T* db, const T* dy, const T* x, const T* mean, const T* rstd,
                                   const T* w, int64_t rows) {
  if (config_.norm == NormKind::LayerNorm)
    layernorm_backward<T>(dx, dw, db, dy, x, mean, rstd, w, rows, config_.d_model);
  else
    rmsnorm_backward<T>(dx, dw, dy, x, rstd, w, rows, config_.d_model);
}

namespace {

// Causal attention over [B, T] with dropout on the probabilities: P is the softmax (saved,
// undropped), the output uses P * keep / (1 - p).
template <typename T>
void dropout_attention_output(HeadsView<T> o, const T* P, HeadsView<const T> v, const AttentionShape& s, uint64_t key,
                              uint64_t thr, T scale) {
  const int64_t B = s.batch, H = s.n_heads, Tn = s.n_q, hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tn; ++i) {
        T* out = o.at(b, i, h);
        for (int64_t e = 0; e < hd; ++e) out[e] = T(0);
        const int64_t row = ((b * H + h) * Tn + i) * Tn;
        for (int64_t j = 0; j <= i; ++j) {
          if (!dropout_kept(key, static_cast<uint64_t>(row + j), thr)) continue;
          const T p = P[row + j] * scale;
          const T* vj = v.at(b, j, h / group);
          for (int64_t e = 0; e < hd; ++e) out[e] += p * vj[e];
        }
      }
}

// Its backward (FlashAttention-2's form with a dropout mask): with P' = P * M / (1 - p),
//   dv_j += sum_i P'_ij dout_i;  dP_ij = (dout_i . v_j) M_ij / (1 - p);
//   dS_ij = P_ij (dP_ij - sum_j P_ij dP_ij);  dq_i += sum_j dS_ij k_j / sqrt(hd);  dk_j += dS_ij q_i / sqrt(hd).
// Parallel over (batch, kv head): a kv head's dk, dv are written by one thread only.
template <typename T>
void dropout_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout, const T* P,
                                HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                                const AttentionShape& s, uint64_t key, uint64_t thr, T scale) {
  const int64_t B = s.batch, H = s.n_heads, Tn = s.n_q, hd = s.head_dim, Hkv = s.n_kv_heads, group = H / Hkv;
  const T sm = T(1) / std::sqrt(static_cast<T>(hd));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t g = 0; g < Hkv; ++g) {
      thread_local std::vector<T> dP;  // grows once per thread, not per step
      if (static_cast<int64_t>(dP.size()) < Tn) dP.resize(Tn);
      for (int64_t h = g * group; h < (g + 1) * group; ++h)
        for (int64_t i = 0; i < Tn; ++i) {
          const int64_t row = ((b * H + h) * Tn + i) * Tn;
          const T* go = dout.at(b, i, h);
          T D = T(0);
          for (int64_t j = 0; j <= i; ++j) {
            const bool kept = dropout_kept(key, static_cast<uint64_t>(row + j), thr);
            const T* vj = v.at(b, j, g);
            T dot = T(0);
            for (int64_t e = 0; e < hd; ++e) dot += go[e] * vj[e];
            dP[j] = kept ? dot * scale : T(0);
            D += P[row + j] * dP[j];
            if (kept) {
              const T pp = P[row + j] * scale;
              T* dvj = dv.at(b, j, g);
              for (int64_t e = 0; e < hd; ++e) dvj[e] += pp * go[e];
            }
          }
          const T* qi = q.at(b, i, h);
          T* dqi = dq.at(b, i, h);
          for (int64_t j = 0; j <= i; ++j) {
            const T ds = P[row + j] * (dP[j] - D) * sm;
            const T* kj = k.at(b, j, g);
            T* dkj = dk.at(b, j, g);
            for (int64_t e = 0; e < hd; ++e) {
              dqi[e] += ds * kj[e];
              dkj[e] += ds * qi[e];
            }
          }
        }
    }
}

}  // namespace

// The tiled kernel's dropout for layer l: the same key, threshold and scale as the reference path's
// mask (site_attn_probs), so both kernels drop the same probabilities.
template <typename T>
AttentionDropout TrainGraph<T>::attention_dropout_(int64_t l, bool on) const {
  if (!on) return {};
  return {site_key(seed_, site_attn_probs(l)), dropout_threshold(config_.dropout), 1.0 / (1.0 - config_.dropout)};
}

template <typename T>
void TrainGraph<T>::attention_forward_(Layer& L, int64_t l, bool training) {
  const auto& c = config_;
  const int64_t hd = c.head_dim(), Tn = context_;
  const AttentionShape shape{batch_, Tn, Tn, c.n_heads, c.n_kv_heads, hd};
  AttentionMask mask;
  mask.causal = true;
  auto o = heads_btHd(L.o, Tn, c.n_heads, hd);
  auto q = heads_btHd<const T>(L.q, Tn, c.n_heads, hd);
  auto k = heads_btHd<const T>(L.k, Tn, c.n_kv_heads, hd);
  auto v = heads_btHd<const T>(L.v, Tn, c.n_kv_heads, hd);
  const bool drop = training && c.dropout > 0;
  if (kernel_ == AttentionKernel::Reference) {
    attention_forward<T>(o, L.probs, q, k, v, shape, mask);
    if (drop)
      dropout_attention_output<T>(o, L.probs, v, shape, site_key(seed_, site_attn_probs(l)),
                                  dropout_threshold(c.dropout), T(1.0 / (1.0 - c.dropout)));
  } else {
    flash_attention_forward<T>(o, L.lse, q, k, v, shape, mask, attention_dropout_(l, drop));
  }
}

template <typename T>
void TrainGraph<T>::attention_backward_(Layer& L, int64_t l, T* dq, T* dk, T* dv, const T* dout) {
  const auto& c = config_;
  const int64_t hd = c.head_dim(), Tn = context_;
  const AttentionShape shape{batch_, Tn, Tn, c.n_heads, c.n_kv_heads, hd};
  AttentionMask mask;
  mask.causal = true;
  auto vq = heads_btHd<const T>(L.q, Tn, c.n_heads, hd);
  auto vk = heads_btHd<const T>(L.k, Tn, c.n_kv_heads, hd);
  auto vv = heads_btHd<const T>(L.v, Tn, c.n_kv_heads, hd);
  auto gq = heads_btHd(dq, Tn, c.n_heads, hd);
  auto gk = heads_btHd(dk, Tn, c.n_kv_heads, hd);
  auto gv = heads_btHd(dv, Tn, c.n_kv_heads, hd);
  auto go = heads_btHd<const T>(dout, Tn, c.n_heads, hd);
  const bool drop = training_ && c.dropout > 0;
  if (kernel_ == AttentionKernel::Reference && drop)
    dropout_attention_backward<T>(gq, gk, gv, go, L.probs, vq, vk, vv, shape, site_key(seed_, site_attn_probs(l)),
                                  dropout_threshold(c.dropout), T(1.0 / (1.0 - c.dropout)));
  else if (kernel_ == AttentionKernel::Reference)
    attention_backward<T>(gq, gk, gv, go, L.probs, vq, vk, vv, shape, mask);
  else
    flash_attention_backward<T>(gq, gk, gv, go, heads_btHd<const T>(L.o, Tn, c.n_heads, hd), L.lse, vq, vk, vv, shape,
                                mask, attention_dropout_(l, drop));
}

template <typename T>
double TrainGraph<T>::forward(BasicArena<T>& params, const TokenId* inputs, const TokenId* targets, bool training,
                              uint64_t dropout_seed) {
  const auto& c = config_;
  const int64_t R = rows_, d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const int64_t ff = c.d_ff, n = R * d;
  const bool post = c.norm_placement == NormPlacement::Post;
  T* base = params.data();
  auto P = [&](int64_t off) -> const T* { return off < 0 ? nullptr : base + off; };
  training_ = training;
  seed_ = dropout_seed;
  std::copy(inputs, inputs + R, ids_.begin());
  std::copy(targets, targets + R, targets_.begin());

  // Embeddings.
  T* x0 = layers_.empty() ? x_final_ : layers_[0].x;
  embedding_forward<T>(x0, ids_.data(), P(tok_), R, c.vocab_size, d);
  if (c.positions == Positions::Learned || c.positions == Positions::Sinusoidal) {
    const T* pe = c.positions == Positions::Learned ? P(pos_) : sinusoidal_.data();
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t e = 0; e < d; ++e) x0[r * d + e] += pe[positions_[r] * d + e];
  }
  if (dropout_on()) dropout_(x0, n, 0);

  const RopeParams rp{hd, c.rope_base, c.rope_pairing};
  T* br = dy_;  // the branch output (scratch; the backward's buffers are free during the forward)
  for (int64_t l = 0; l < c.n_layers; ++l) {
    Layer& L = layers_[l];
    T* next = l + 1 < c.n_layers ? layers_[l + 1].x : x_final_;
    // Attention sublayer: input u = norm_1(x) (pre) or x (post).
    const T* u = L.x;
    if (!post) {
      norm_forward_(L.u1, L.mean1, L.rstd1, L.x, P(L.n1w), P(L.n1b), R);
      u = L.u1;
    }
    linear_forward<T>(L.q, u, P(L.wq), P(L.bq), R, d, dq);
    linear_forward<T>(L.k, u, P(L.wk), P(L.bk), R, d, dkv);
    linear_forward<T>(L.v, u, P(L.wv), P(L.bv), R, d, dkv);
    if (c.positions == Positions::Rope) {
      rope_forward<T>(L.q, positions_.data(), R, c.n_heads, dq, rp);
      rope_forward<T>(L.k, positions_.data(), R, c.n_kv_heads, dkv, rp);
    }
    attention_forward_(L, l, training);
    linear_forward<T>(br, L.o, P(L.wo), P(L.bo), R, dq, d);
    if (dropout_on()) dropout_(br, n, site_attn_resid(l));
    if (!post) {
      add(L.h, L.x, br, n);
      norm_forward_(L.u2, L.mean2, L.rstd2, L.h, P(L.n2w), P(L.n2b), R);
    } else {
      add(L.n1_in, L.x, br, n);
      norm_forward_(L.u1, L.mean1, L.rstd1, L.n1_in, P(L.n1w), P(L.n1b), R);  // h = u1
    }
    // FFN sublayer: input norm_2(h) (pre) or h (post).
    const T* f = post ? L.h : L.u2;
    linear_forward<T>(L.a, f, P(L.w1), P(L.b1), R, d, ff);
    if (c.activation == Activation::SwiGLU) {
      linear_forward<T>(L.g, f, P(L.w3), P(L.b3), R, d, ff);
      swiglu_forward<T>(da_, L.a, L.g, R * ff);  // act, into scratch
    } else {
      gelu_forward<T>(da_, L.a, R * ff, c.activation == Activation::Gelu ? GeluKind::Exact : GeluKind::Tanh);
    }
    linear_forward<T>(br, da_, P(L.w2), P(L.b2), R, ff, d);
    if (dropout_on()) dropout_(br, n, site_ffn_resid(l));
    if (!post) {
      add(next, L.h, br, n);
    } else {
      add(L.n2_in, L.h, br, n);
      norm_forward_(next, L.mean2, L.rstd2, L.n2_in, P(L.n2w), P(L.n2b), R);  // u2 = next
    }
  }
  const T* top = x_final_;
  if (!post) {
    norm_forward_(uf_, meanf_, rstdf_, x_final_, P(nfw_), P(nfb_), R);
    top = uf_;
  }
  linear_forward<T>(logits_, top, P(out_), nullptr, R, d, c.vocab_size);
  const CrossEntropyResult ce = cross_entropy_forward<T>(nullptr, logits_, targets_.data(), R, c.vocab_size);
  count_ = ce.count;
  forward_done_ = true;
  return ce.loss;
}

template <typename T>
void TrainGraph<T>::backward(BasicArena<T>& params, BasicArena<T>& grads, T scale) {
  TF_CHECK(forward_done_, "training graph: backward() without a forward()");
  TF_CHECK(grads.size() == params.size(), "training graph: the gradient arena does not mirror the parameters");
  const auto& c = config_;
  const int64_t R = rows_, d = c.d_model, hd = c.head_dim(), dqd = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const int64_t ff = c.d_ff, n = R * d, V = c.vocab_size;
  const bool post = c.norm_placement == NormPlacement::Post;
  T* base = params.data();
  T* gbase = grads.data();
  auto P = [&](int64_t off) -> const T* { return off < 0 ? nullptr : base + off; };
  auto G = [&](int64_t off) -> T* { return off < 0 ? nullptr : gbase + off; };
  const RopeParams rp{hd, c.rope_base, c.rope_pairing};

  zero(dlogits_, R * V);
  if (count_ > 0) cross_entropy_backward<T>(dlogits_, logits_, targets_.data(), R, V, count_, scale);
  zero(dx_, n);
  if (!post) {
    zero(du_, n);
    linear_backward<T>(du_, G(out_), nullptr, dlogits_, uf_, P(out_), R, d, V);
    norm_backward_(dx_, G(nfw_), G(nfb_), du_, x_final_, meanf_, rstdf_, P(nfw_), R);
  } else {
    linear_backward<T>(dx_, G(out_), nullptr, dlogits_, x_final_, P(out_), R, d, V);
  }

  // dy (the gradient of a branch's output) -> du (the gradient of the branch's input).
  auto ffn_backward = [&](Layer& L, const T* f, const T* dy, T* du) {
    // act recomputed into da_ (the same function of the same saved inputs: the forward's bits).
    if (c.activation == Activation::SwiGLU)
      swiglu_forward<T>(da_, L.a, L.g, R * ff);
    else
      gelu_forward<T>(da_, L.a, R * ff, c.activation == Activation::Gelu ? GeluKind::Exact : GeluKind::Tanh);
    zero(dact_, R * ff);
    linear_backward<T>(dact_, G(L.w2), G(L.b2), dy, da_, P(L.w2), R, ff, d);
    zero(da_, R * ff);
    if (c.activation == Activation::SwiGLU) {
      zero(dg_, R * ff);
      swiglu_backward<T>(da_, dg_, dact_, L.a, L.g, R * ff);
    } else {
      gelu_backward<T>(da_, dact_, L.a, R * ff, c.activation == Activation::Gelu ? GeluKind::Exact : GeluKind::Tanh);
    }
    zero(du, n);
    linear_backward<T>(du, G(L.w1), G(L.b1), da_, f, P(L.w1), R, d, ff);
    if (c.activation == Activation::SwiGLU) linear_backward<T>(du, G(L.w3), G(L.b3), dg_, f, P(L.w3), R, d, ff);
  };
  auto attn_backward = [&](Layer& L, int64_t l, const T* u, const T* dy, T* du) {
    zero(do_, R * dqd);
    linear_backward<T>(do_, G(L.wo), G(L.bo), dy, L.o, P(L.wo), R, dqd, d);
    zero(dq_, R * dqd);
    zero(dk_, R * dkv);
    zero(dv_, R * dkv);
    attention_backward_(L, l, dq_, dk_, dv_, do_);
    if (c.positions == Positions::Rope) {
      rope_backward<T>(dq_, positions_.data(), R, c.n_heads, dqd, rp);
      rope_backward<T>(dk_, positions_.data(), R, c.n_kv_heads, dkv, rp);
    }
    zero(du, n);
    linear_backward<T>(du, G(L.wq), G(L.bq), dq_, u, P(L.wq), R, d, dqd);
    linear_backward<T>(du, G(L.wk), G(L.bk), dk_, u, P(L.wk), R, d, dkv);
    linear_backward<T>(du, G(L.wv), G(L.bv), dv_, u, P(L.wv), R, d, dkv);
  };

  for (int64_t l = c.n_layers - 1; l >= 0; --l) {
    Layer& L = layers_[l];
    if (!post) {
      // dx = dL/dX'; X' = h + drop(ffn(norm_2(h))).
      copy(dbr_, dx_, n);
      if (dropout_on()) dropout_(dbr_, n, site_ffn_resid(l));
      ffn_backward(L, L.u2, dbr_, du_);
      norm_backward_(dx_, G(L.n2w), G(L.n2b), du_, L.h, L.mean2, L.rstd2, P(L.n2w), R);  // dx = dL/dh
      // h = x + drop(wo attn(norm_1(x))).
      copy(dbr_, dx_, n);
      if (dropout_on()) dropout_(dbr_, n, site_attn_resid(l));
      attn_backward(L, l, L.u1, dbr_, du_);
      norm_backward_(dx_, G(L.n1w), G(L.n1b), du_, L.x, L.mean1, L.rstd1, P(L.n1w), R);  // dx = dL/dx
    } else {
      // dx = dL/dX'; X' = norm_2(s2), s2 = h + drop(ffn(h)).
      zero(dy_, n);
      norm_backward_(dy_, G(L.n2w), G(L.n2b), dx_, L.n2_in, L.mean2, L.rstd2, P(L.n2w), R);  // dy = dL/ds2
      copy(dbr_, dy_, n);
      if (dropout_on()) dropout_(dbr_, n, site_ffn_resid(l));
      ffn_backward(L, L.h, dbr_, du_);
      add(dy_, dy_, du_, n);  // dy = dL/dh
      // h = norm_1(s1), s1 = x + drop(wo attn(x)).
      zero(dx_, n);
      norm_backward_(dx_, G(L.n1w), G(L.n1b), dy_, L.n1_in, L.mean1, L.rstd1, P(L.n1w), R);  // dx = dL/ds1
      copy(dbr_, dx_, n);
      if (dropout_on()) dropout_(dbr_, n, site_attn_resid(l));
      attn_backward(L, l, L.x, dbr_, du_);
      add(dx_, dx_, du_, n);  // dx = dL/dx
    }
  }

  // Embeddings: X[0] = drop(tok[ids] + pos).
  if (dropout_on()) dropout_(dx_, n, 0);
  embedding_backward<T>(G(tok_), dx_, ids_.data(), R, V, d);
  if (c.positions == Positions::Learned) {
    T* gp = G(pos_);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
    for (int64_t t = 0; t < context_; ++t)
      for (int64_t b = 0; b < batch_; ++b)
        for (int64_t e = 0; e < d; ++e) gp[t * d + e] += dx_[(b * context_ + t) * d + e];
  }
}

template class TrainGraph<float>;
template class TrainGraph<double>;

}  // namespace tformer
