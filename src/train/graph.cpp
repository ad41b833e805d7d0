#include "train/graph.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"

namespace tformer {

bool dropout_keep(uint64_t seed, uint64_t site, uint64_t index, double p) {
  return dropout_kept(dropout_site_key(seed, site), index, dropout_threshold(p));
}

template <typename T>
TrainGraph<T>::TrainGraph(const ModelConfig& config, int64_t batch, int64_t context, AttentionKernel kernel)
    : config_(config), batch_(batch), context_(context), rows_(batch * context), kernel_(kernel) {
  config_.validate();
  const auto& c = config_;
  TF_CHECK(batch > 0 && context > 0, "training graph: batch {} and context {} must be positive", batch, context);
  if (context > c.context_length)
    fail_input("--context", "--context {} exceeds the model's context_length {}", context, c.context_length);

  const int64_t R = rows_, d = c.d_model;
  const bool post = c.norm_placement == NormPlacement::Post;
  const LayerKeep keep{
      .input = true, .lse = kernel == AttentionKernel::Tiled, .probs = kernel == AttentionKernel::Reference};
  auto prefix = [](int64_t l) { return "layers." + std::to_string(l) + "."; };
  for (int64_t l = 0; l < c.n_layers; ++l) declare_layer_acts(acts_, prefix(l), c, batch, context, keep);
  acts_.add("x_final", {R, d});
  if (!post) {
    acts_.add("uf", {R, d});
    acts_.add("meanf", {R});
    acts_.add("rstdf", {R});
  }
  acts_.add("logits", {R, c.vocab_size});
  acts_.add("dlogits", {R, c.vocab_size});
  acts_.add("dx", {R, d});
  declare_layer_scratch(acts_, c, R, true);
  acts_.allocate();

  auto get = [&](const std::string& n) -> T* { return acts_.contains(n) ? acts_.get(n).data() : nullptr; };
  for (int64_t l = 0; l < c.n_layers; ++l)
    layers_.push_back(bind_layer_acts(acts_, prefix(l), c, batch, context, keep));
  scratch_ = bind_layer_scratch(acts_, c, true);
  x_final_ = get("x_final");
  uf_ = get("uf");
  meanf_ = get("meanf");
  rstdf_ = get("rstdf");
  logits_ = get("logits");
  dlogits_ = get("dlogits");
  dx_ = get("dx");
  du_ = scratch_.du;  // the top's norm gradient, before the layers need the scratch

  ids_.resize(R);
  targets_.resize(R);
  positions_.resize(R);
  for (int64_t r = 0; r < R; ++r) positions_[r] = r % context;
  sinusoidal_ = sinusoidal_table<T>(c);
}

template <typename T>
void TrainGraph<T>::bind_params(BasicArena<T>& params) {
  if (params.data() == bound_params_) return;
  params_ = model_params(params, config_);
  bound_params_ = params.data();
}

template <typename T>
void TrainGraph<T>::bind_grads(BasicArena<T>& grads) {
  for (const auto& [data, views] : bound_grads_)
    if (data == grads.data()) {
      grads_ = views;
      return;
    }
  bound_grads_.emplace_back(grads.data(), model_grads(grads, config_));
  grads_ = bound_grads_.back().second;
}

template <typename T>
std::string TrainGraph<T>::first_non_finite_activation() const {
  // Each layer's activations in the order the forward computes them (visit_layer_acts' order),
  // then the top. The lse is left out: -inf is a legal log-sum-exp (a row with no key).
  std::vector<std::string> order;
  const LayerKeep keep{.input = true, .lse = false, .probs = kernel_ == AttentionKernel::Reference};
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    LayerActs<T> names;
    visit_layer_acts(names, config_, batch_, context_, keep, [&](const char* name, const Shape&, T*&) {
      order.push_back("layers." + std::to_string(l) + "." + name);
    });
  }
  for (const char* n : {"x_final", "uf", "meanf", "rstdf", "logits"}) order.emplace_back(n);
  for (const std::string& name : order) {
    const auto* e = acts_.find(name);
    if (!e) continue;  // not kept in this configuration
    const T* p = acts_.data() + e->offset;
    for (int64_t i = 0; i < e->shape.numel(); ++i)
      if (!std::isfinite(p[i])) return fmt::format("{} (element {}: {})", e->name, i, p[i]);
  }
  return "";
}

template <typename T>
double TrainGraph<T>::forward(BasicArena<T>& params, const TokenId* inputs, const TokenId* targets, bool training,
                              uint64_t dropout_seed) {
  const auto& c = config_;
  const int64_t R = rows_, d = c.d_model;
  bind_params(params);
  training_ = training;
  seed_ = dropout_seed;
  const double p = training ? c.dropout : 0.0;
  std::copy(inputs, inputs + R, ids_.begin());
  std::copy(targets, targets + R, targets_.begin());

  T* x0 = layers_.empty() ? x_final_ : layers_[0].x;
  embed_forward<T>(x0, ids_.data(), positions_.data(), R, params_, sinusoidal_.data(), c);
  dropout_apply(x0, R * d, embedding_dropout(seed_, p));

  const LayerStep step{batch_, context_, positions_.data(), kernel_};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    T* next = l + 1 < c.n_layers ? layers_[l + 1].x : x_final_;
    layer_forward<T>(next, layers_[l], params_.layers[l], scratch_, c, step, {}, layer_dropout(seed_, l, p));
  }
  const T* top = x_final_;
  if (c.norm_placement == NormPlacement::Pre) {
    decoder_norm_forward<T>(uf_, meanf_, rstdf_, x_final_, params_.norm_w, params_.norm_b, R, c);
    top = uf_;
  }
  linear_forward<T>(logits_, top, params_.output, nullptr, R);
  const CrossEntropyResult ce = cross_entropy_forward<T>(nullptr, logits_, targets_.data(), R, c.vocab_size);
  count_ = ce.count;
  forward_done_ = true;
  return ce.loss;
}

template <typename T>
void TrainGraph<T>::backward(BasicArena<T>& params, BasicArena<T>& grads, T scale,
                             const std::function<void(int64_t)>& finished) {
  TF_CHECK(forward_done_, "training graph: backward() without a forward()");
  TF_CHECK(grads.size() == params.size(), "training graph: the gradient arena does not mirror the parameters");
  const auto& c = config_;
  const int64_t R = rows_, d = c.d_model, V = c.vocab_size, n = R * d;
  bind_params(params);
  bind_grads(grads);
  const double p = training_ ? c.dropout : 0.0;

  zero(dlogits_, R * V);
  if (count_ > 0) cross_entropy_backward<T>(dlogits_, logits_, targets_.data(), R, V, count_, scale);
  zero(dx_, n);
  if (c.norm_placement == NormPlacement::Pre) {
    zero(du_, n);
    linear_backward<T>(du_, grads_.output, nullptr, dlogits_, uf_, params_.output, R);
    decoder_norm_backward<T>(dx_, grads_.norm_w, grads_.norm_b, du_, x_final_, meanf_, rstdf_, params_.norm_w, R, c);
  } else {
    linear_backward<T>(dx_, grads_.output, nullptr, dlogits_, x_final_, params_.output, R);
  }
  if (finished) finished(c.n_layers);

  const LayerStep step{batch_, context_, positions_.data(), kernel_};
  for (int64_t l = c.n_layers - 1; l >= 0; --l) {
    layer_backward<T>(dx_, grads_.layers[l], layers_[l], params_.layers[l], scratch_, c, step,
                      layer_dropout(seed_, l, p));  // dx_: dL/dX[l+1] -> dL/dX[l]
    if (finished) finished(l);
  }

  // X[0] = drop(tok[ids] + pos).
  dropout_apply(dx_, n, embedding_dropout(seed_, p));
  embed_backward<T>(grads_, dx_, ids_.data(), positions_.data(), R, c);
  if (finished) finished(-1);
}

template class TrainGraph<float>;
template class TrainGraph<double>;

}  // namespace tformer
