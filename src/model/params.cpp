#include "model/params.h"

#include <type_traits>

#include "core/error.h"
#include "core/memory.h"

namespace tformer {

double float32_param_bytes(const ModelConfig& config) {
  // The tensors outside the layers, plus n_layers times one layer's: no list of n_layers entries
  // is built, so a config claiming 2^31 layers costs nothing to size.
  auto bytes = [](const ModelConfig& c) {
    ModelParams<float> layout;
    layout.layers.resize(static_cast<size_t>(c.n_layers));
    double total = 0;
    visit_model_tensors(layout, c, [&](const std::string&, const Shape& s, auto&) {
      double n = sizeof(float);
      for (int k = 0; k < s.rank(); ++k) n *= static_cast<double>(s[k]);
      total += n;
    });
    return total;
  };
  ModelConfig outside = config, one = config;
  outside.n_layers = 0;
  one.n_layers = 1;
  const double rest = bytes(outside);
  return rest + static_cast<double>(config.n_layers) * (bytes(one) - rest);
}

void check_params_fit_in_memory(const ModelConfig& config, const std::string& source) {
  check_bytes_fit_in_memory(float32_param_bytes(config), source, "the model's float32 weights");
}

void check_bytes_fit_in_memory(double bytes, const std::string& source, const std::string& what) {
  const uint64_t available = available_memory_bytes();
  if (bytes > static_cast<double>(available))
    // (the byte count as a double: a fuzzed config's can pass 2^64, which no integer cast may take)
    fail_file(source, "{}: {} take {:.0f} bytes ({:.3g} GB) but only {} bytes of memory are available", source, what,
              bytes, bytes / 1e9, available);
}

namespace {

// Points one field at its tensor: a const or writable pointer, or a dense weight view.
template <typename T, typename Field>
void bind(Field& field, const TensorView<T>& view) {
  if constexpr (std::is_same_v<Field, Weight<T>>)
    field = Weight<T>::dense(view.data(), view.dim(0), view.dim(1));
  else
    field = view.data();
}

template <typename T, typename Model>
void bind_all(Model& model, BasicArena<T>& arena, const ModelConfig& c) {
  model.layers.resize(static_cast<size_t>(c.n_layers));
  visit_model_tensors(model, c, [&](const std::string& name, const Shape& shape, auto& field) {
    const TensorView<T> view = arena.get(name);
    TF_CHECK(view.shape() == shape, "parameter {} has shape {}; the config needs {}", name, view.shape().str(),
             shape.str());
    bind<T>(field, view);
  });
}

}  // namespace

template <typename T>
void declare_model_params(BasicArena<T>& params, const ModelConfig& c) {
  ModelGrads<T> layout;
  layout.layers.resize(static_cast<size_t>(c.n_layers));
  visit_model_tensors(layout, c, [&](const std::string& name, const Shape& shape, auto&) { params.add(name, shape); });
}

template <typename T>
ModelParams<T> model_params(BasicArena<T>& params, const ModelConfig& c) {
  ModelParams<T> p;
  bind_all(p, params, c);
  if (c.tied_embeddings) p.output = Weight<T>::dense(p.tok_embeddings, c.vocab_size, c.d_model);
  return p;
}

template <typename T>
ModelGrads<T> model_grads(BasicArena<T>& grads, const ModelConfig& c) {
  ModelGrads<T> g;
  bind_all(g, grads, c);
  if (c.tied_embeddings) g.output = g.tok_embeddings;
  return g;
}

template void declare_model_params<float>(BasicArena<float>&, const ModelConfig&);
template void declare_model_params<double>(BasicArena<double>&, const ModelConfig&);
template ModelParams<float> model_params<float>(BasicArena<float>&, const ModelConfig&);
template ModelParams<double> model_params<double>(BasicArena<double>&, const ModelConfig&);
template ModelGrads<float> model_grads<float>(BasicArena<float>&, const ModelConfig&);
template ModelGrads<double> model_grads<double>(BasicArena<double>&, const ModelConfig&);

}  // namespace tformer
