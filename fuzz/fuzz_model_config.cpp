// libFuzzer target: the model config JSON (model/config.h, ModelConfig::from_json and validate: what
// `tformer init --config` reads and every model file carries as "config"). Bytes that are not JSON
// are skipped (nlohmann's parser is not under test). A config from_json accepts must survive
// to_json and back unchanged; one validate() accepts has positive sizes that divide as promised, and
// its parameter count is computed (float32_param_bytes, check_params_fit_in_memory) without
// allocating anything.
#include <nlohmann/json.hpp>

#include <cstdlib>

#include "fuzz_util.h"
#include "model/config.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  tformer::fuzz::expect_clean([&] {
    tformer::ModelConfig c = tformer::ModelConfig::from_json(j, "config.json");
    if (tformer::ModelConfig::from_json(c.to_json(), "round trip").to_json() != c.to_json()) std::abort();
    if (c.vocab_size == 0) c.vocab_size = 256;  // as `tformer init` fills it from the tokenizer
    c.validate();
    if (c.d_model <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.d_ff <= 0 || c.n_layers <= 0 ||
        c.context_length <= 0 || c.d_model % c.n_heads != 0 || c.n_heads % c.n_kv_heads != 0)
      std::abort();
    if (!(tformer::float32_param_bytes(c) > 0)) std::abort();
    tformer::check_params_fit_in_memory(c, "config.json");
  });
  return 0;
}
