// The model's configuration: everything a checkpoint needs to rebuild the network, and nothing
// about how it is trained or run (those settings live with train/ and generate/). It is stored as
// JSON in every checkpoint and read from the file given to `tformer init --config`.
//
// JSON keys (exactly these; an unknown key is an error) and their defaults when left out:
//   vocab_size       0 = take it from the tokenizer (must be > 0 once the model is built)
//   context_length   256        longest sequence, in tokens
//   d_model          128
//   n_layers         4
//   n_heads          4
//   n_kv_heads       = n_heads  (MHA); fewer for GQA, 1 for MQA; must divide n_heads
//   d_ff             4 * d_model
//   norm             "layernorm" | "rmsnorm"                          default "layernorm"
//   norm_placement   "pre" | "post"                                    default "pre"
//   positions        "learned" | "sinusoidal" | "rope" | "none"        default "learned"
//   rope_base        10000
//   rope_pairing     "adjacent" | "halves"                             default "halves"
//   activation       "gelu" | "gelu_tanh" | "swiglu"                   default "gelu"
//   bias             true
//   tied_embeddings  true
//   dropout          0.0        training only; never applied in eval or generation
//   norm_eps         1e-5
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "kernels/rope.h"

namespace tformer {

enum class NormKind { LayerNorm, RMSNorm };
enum class NormPlacement { Pre, Post };
enum class Positions { Learned, Sinusoidal, Rope, None };
enum class Activation { Gelu, GeluTanh, SwiGLU };

struct ModelConfig {
  int64_t vocab_size = 0;
  int64_t context_length = 256;
  int64_t d_model = 128;
  int64_t n_layers = 4;
  int64_t n_heads = 4;
  int64_t n_kv_heads = 0;  // 0 while unset: validate() makes it n_heads
  int64_t d_ff = 0;        // 0 while unset: validate() makes it 4 * d_model
  NormKind norm = NormKind::LayerNorm;
  NormPlacement norm_placement = NormPlacement::Pre;
  Positions positions = Positions::Learned;
  double rope_base = 10000.0;
  RopePairing rope_pairing = RopePairing::Halves;
  Activation activation = Activation::Gelu;
  bool bias = true;
  bool tied_embeddings = true;
  double dropout = 0.0;
  double norm_eps = 1e-5;

  int64_t head_dim() const { return d_model / n_heads; }

  // Parses a JSON object. `source` names the file in error messages. Unknown keys, wrong types
  // and invalid values are errors naming the key. Does not call validate() (vocab_size may be
  // filled in from the tokenizer first).
  static ModelConfig from_json(const nlohmann::json& j, const std::string& source = "config");
  static ModelConfig from_file(const std::string& path);
  // Every key, defaults filled in.
  nlohmann::json to_json() const;
  // Fills the derived defaults (n_kv_heads, d_ff) and rejects invalid combinations with an error
  // naming the field: non-positive sizes, d_model not divisible by n_heads, n_heads not divisible
  // by n_kv_heads, odd head width with rope, odd d_model with sinusoidal positions, dropout outside
  // [0, 1), norm_eps <= 0, rope_base <= 1, vocab_size beyond the int32 token id range.
  void validate();
};

std::string to_string(NormKind v);
std::string to_string(NormPlacement v);
std::string to_string(Positions v);
std::string to_string(RopePairing v);
std::string to_string(Activation v);

}  // namespace tformer
