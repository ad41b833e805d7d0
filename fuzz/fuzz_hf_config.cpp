// libFuzzer target: a Hugging Face folder's config.json (model/hf_import.h, import_hf: model_type
// "gpt2" or "llama", every size and flag checked for its type, the settings tformer does not
// compute refused by name, the result validated as a tformer config and its size checked before
// any weight is read). The input is config.json; the folder's weights are a fixed tiny GPT-2, or a
// tiny Llama when the input names "llama" (fuzz_hf_util.h), so a config that keeps their sizes is
// imported whole. An imported model runs one forward pass of two tokens.
#include <string_view>
#include <vector>

#include "fuzz_hf_util.h"
#include "model/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string gpt2 = tformer::fuzz::hf_folder("config", false, false, false);
  static const std::string llama = tformer::fuzz::hf_folder("config", true, false, false);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string& dir = tformer::fuzz::hf_input_in(gpt2, llama, input, "llama", "config.json");
  tformer::fuzz::expect_clean([&] {
    tformer::HfModel m = tformer::import_hf(dir);
    const tformer::ModelConfig& c = m.model->config();
    const std::vector<tformer::TokenId> ids = {1, 2};
    if (c.context_length < 2 || m.model->n_params() > (1 << 16)) return;
    std::vector<float> logits(static_cast<size_t>(2 * c.vocab_size));
    m.model->forward(logits.data(), ids.data(), 1, 2);
  });
  return 0;
}
