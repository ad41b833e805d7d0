// libFuzzer target: the model loader (model/checkpoint.h, load_model) on a model file: a
// safetensors file whose __metadata__ holds "config" (the model config JSON) and "tokenizer" (a
// tokenizer JSON), and whose tensors must be exactly those the config implies, F32, with their
// shapes (a GGUF file, known by its magic, goes to load_gguf_model). A model it accepts has the
// tokenizer's vocabulary; the tokenizer is run as fuzz_tokenizer_util.h does, and a model small
// enough to be cheap (at most 64 Ki parameters) runs one forward pass over a few token ids, and
// the same file loaded for inference only (model/checkpoint.h: no float copy of a stored matrix)
// must give the same logits, bit for bit.
//
// One allocation is the config's to ask for, not the file's: the table of sinusoidal positions,
// context_length x d_model floats, which a model of few weights may legitimately need. A config
// whose table would pass 256 MiB is skipped (the fuzzer's limit is 512 MiB per allocation).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "fuzz_tokenizer_util.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"

namespace {

bool huge_sinusoidal_table(const std::string& path) {
  bool huge = false;
  try {
    const tformer::SafetensorsFile f = tformer::SafetensorsFile::open(path);
    const auto c = tformer::ModelConfig::from_json(f.metadata_json("config", ""), path);
    huge = c.positions == tformer::Positions::Sinusoidal &&
           static_cast<double>(c.context_length) * static_cast<double>(c.d_model) * 4 > double(1 << 28);
  } catch (const tformer::Error&) {}
  return huge;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tformer::fuzz::input_file(data, size, "safetensors");
  if (huge_sinusoidal_table(path)) return 0;
  tformer::fuzz::expect_clean([&] {
    tformer::LoadedModel m = tformer::load_model(path);
    const tformer::ModelConfig& c = m.model->config();
    if (m.tokenizer) {
      if (m.tokenizer->vocab_size() != c.vocab_size) std::abort();
      tformer::fuzz::check_tokenizer(*m.tokenizer, std::string_view(reinterpret_cast<const char*>(data), size));
    }
    if (m.model->n_params() > (1 << 16)) return;
    const int64_t n = std::min<int64_t>(c.context_length, 4);
    std::vector<tformer::TokenId> ids(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) ids[static_cast<size_t>(t)] = static_cast<tformer::TokenId>((t * 7) % c.vocab_size);
    std::vector<float> logits(static_cast<size_t>(n * c.vocab_size)), lean_logits(logits.size());
    m.model->forward(logits.data(), ids.data(), 1, n);
    tformer::LoadedModel lean = tformer::load_model(path, {.inference_only = true});
    lean.model->forward(lean_logits.data(), ids.data(), 1, n);
    if (std::memcmp(logits.data(), lean_logits.data(), logits.size() * sizeof(float)) != 0) std::abort();
  });
  return 0;
}
