#include "model/config.h"

#include <limits>
#include <set>

#include "core/error.h"
#include "core/file_io.h"

namespace tformer {

std::string to_string(NormKind v) { return v == NormKind::LayerNorm ? "layernorm" : "rmsnorm"; }
std::string to_string(NormPlacement v) { return v == NormPlacement::Pre ? "pre" : "post"; }
std::string to_string(Positions v) {
  switch (v) {
    case Positions::Learned:
      return "learned";
    case Positions::Sinusoidal:
      return "sinusoidal";
    case Positions::Rope:
      return "rope";
    case Positions::None:
      return "none";
  }
  return "?";
}
std::string to_string(RopePairing v) { return v == RopePairing::Adjacent ? "adjacent" : "halves"; }
std::string to_string(Activation v) {
  switch (v) {
    case Activation::Gelu:
      return "gelu";
    case Activation::GeluTanh:
      return "gelu_tanh";
    case Activation::SwiGLU:
      return "swiglu";
  }
  return "?";
}

namespace {

// One enumerated key: the JSON string must be one of `names`; returns its index.
size_t choice(const nlohmann::json& v, const std::string& source, const char* key,
              std::initializer_list<const char*> names) {
  if (!v.is_string()) fail_config(key, "{}: \"{}\" must be a string, got {}", source, key, v.dump());
  const auto s = v.get<std::string>();
  size_t i = 0;
  std::string allowed;
  for (const char* n : names) {
    if (s == n) return i;
    allowed += (i ? ", \"" : "\"") + std::string(n) + "\"";
    ++i;
  }
  fail_config(key, "{}: \"{}\" is \"{}\"; expected one of {}", source, key, s, allowed);
}

// Every integer key is a size or a count: beyond 2^31 no model is, and products of two of them
// (a matrix's elements, 4 * d_model) then stay far inside int64.
constexpr int64_t kMaxInteger = int64_t{1} << 31;

int64_t integer(const nlohmann::json& v, const std::string& source, const char* key) {
  if (!v.is_number_integer()) fail_config(key, "{}: \"{}\" must be an integer, got {}", source, key, v.dump());
  if ((v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(kMaxInteger)) ||
      (!v.is_number_unsigned() && (v.get<int64_t>() > kMaxInteger || v.get<int64_t>() < -kMaxInteger)))
    fail_config(key, "{}: \"{}\" is {}, beyond {} (2^31)", source, key, v.dump(), kMaxInteger);
  return v.get<int64_t>();
}

double number(const nlohmann::json& v, const std::string& source, const char* key) {
  if (!v.is_number()) fail_config(key, "{}: \"{}\" must be a number, got {}", source, key, v.dump());
  return v.get<double>();
}

bool boolean(const nlohmann::json& v, const std::string& source, const char* key) {
  if (!v.is_boolean()) fail_config(key, "{}: \"{}\" must be true or false, got {}", source, key, v.dump());
  return v.get<bool>();
}

}  // namespace

ModelConfig ModelConfig::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail_config(source, "{}: the model config must be a JSON object", source);
  ModelConfig c;
  for (const auto& [key, v] : j.items()) {
    const char* k = key.c_str();
    if (key == "vocab_size")
      c.vocab_size = integer(v, source, k);
    else if (key == "context_length")
      c.context_length = integer(v, source, k);
    else if (key == "d_model")
      c.d_model = integer(v, source, k);
    else if (key == "n_layers")
      c.n_layers = integer(v, source, k);
    else if (key == "n_heads")
      c.n_heads = integer(v, source, k);
    else if (key == "n_kv_heads")
      c.n_kv_heads = integer(v, source, k);
    else if (key == "d_ff")
      c.d_ff = integer(v, source, k);
    else if (key == "norm")
      c.norm = static_cast<NormKind>(choice(v, source, k, {"layernorm", "rmsnorm"}));
    else if (key == "norm_placement")
      c.norm_placement = static_cast<NormPlacement>(choice(v, source, k, {"pre", "post"}));
    else if (key == "positions")
      c.positions = static_cast<Positions>(choice(v, source, k, {"learned", "sinusoidal", "rope", "none"}));
    else if (key == "rope_base")
      c.rope_base = number(v, source, k);
    else if (key == "rope_pairing")
      c.rope_pairing = static_cast<RopePairing>(choice(v, source, k, {"adjacent", "halves"}));
    else if (key == "activation")
      c.activation = static_cast<Activation>(choice(v, source, k, {"gelu", "gelu_tanh", "swiglu"}));
    else if (key == "bias")
      c.bias = boolean(v, source, k);
    else if (key == "tied_embeddings")
      c.tied_embeddings = boolean(v, source, k);
    else if (key == "dropout")
      c.dropout = number(v, source, k);
    else if (key == "norm_eps")
      c.norm_eps = number(v, source, k);
    else
      fail_config(key, "{}: unknown key \"{}\"", source, key);
  }
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  const std::string text = read_file(path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse errors and number overflows (1e400)
    fail_file(path, "{}: not valid JSON: {}", path, e.what());
  }
  return from_json(j, path);
}

nlohmann::json ModelConfig::to_json() const {
  return nlohmann::json{
      {"vocab_size", vocab_size},
      {"context_length", context_length},
      {"d_model", d_model},
      {"n_layers", n_layers},
      {"n_heads", n_heads},
      {"n_kv_heads", n_kv_heads == 0 ? n_heads : n_kv_heads},
      {"d_ff", d_ff == 0 ? 4 * d_model : d_ff},
      {"norm", to_string(norm)},
      {"norm_placement", to_string(norm_placement)},
      {"positions", to_string(positions)},
      {"rope_base", rope_base},
      {"rope_pairing", to_string(rope_pairing)},
      {"activation", to_string(activation)},
      {"bias", bias},
      {"tied_embeddings", tied_embeddings},
      {"dropout", dropout},
      {"norm_eps", norm_eps},
  };
}

void ModelConfig::validate() {
  if (n_kv_heads == 0) n_kv_heads = n_heads;
  if (d_ff == 0) d_ff = 4 * d_model;
  auto positive = [](int64_t v, const char* key) {
    if (v <= 0) fail_config(key, "model config: \"{}\" must be positive, got {}", key, v);
  };
  positive(vocab_size, "vocab_size");
  positive(context_length, "context_length");
  positive(d_model, "d_model");
  positive(n_layers, "n_layers");
  positive(n_heads, "n_heads");
  positive(n_kv_heads, "n_kv_heads");
  positive(d_ff, "d_ff");
  if (vocab_size > std::numeric_limits<int32_t>::max())
    fail_config("vocab_size", "model config: \"vocab_size\" {} exceeds the int32 token id range", vocab_size);
  if (d_model % n_heads != 0)
    fail_config("d_model", "model config: \"d_model\" {} is not divisible by \"n_heads\" {}", d_model, n_heads);
  if (n_heads % n_kv_heads != 0)
    fail_config("n_heads", "model config: \"n_heads\" {} is not divisible by \"n_kv_heads\" {}", n_heads, n_kv_heads);
  if (positions == Positions::Rope && head_dim() % 2 != 0)
    fail_config("positions", "model config: \"positions\" is \"rope\" but the head width d_model/n_heads = {} is odd",
                head_dim());
  if (positions == Positions::Sinusoidal && d_model % 2 != 0)
    fail_config("positions", "model config: \"positions\" is \"sinusoidal\" but \"d_model\" {} is odd", d_model);
  if (!(rope_base > 1.0)) fail_config("rope_base", "model config: \"rope_base\" must be > 1, got {}", rope_base);
  if (!(dropout >= 0.0 && dropout < 1.0))
    fail_config("dropout", "model config: \"dropout\" must be in [0, 1), got {}", dropout);
  if (!(norm_eps > 0.0)) fail_config("norm_eps", "model config: \"norm_eps\" must be positive, got {}", norm_eps);
}

}  // namespace tformer
