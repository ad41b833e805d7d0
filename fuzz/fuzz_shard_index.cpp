// libFuzzer target: a Hugging Face folder's shard index, model.safetensors.index.json
// (model/hf_import.h, import_hf: "weight_map" from tensor name to a file of the folder, every
// tensor of every shard listed for its own file). The input is the index, beside config.json and
// two shards of the fixed tiny GPT-2 of fuzz_hf_util.h (model-00001-of-00002.safetensors holds its
// first four tensors, model-00002-of-00002.safetensors the rest), or of the tiny Llama when the
// input names "model.layers" (Llama's tensor names).
#include <string_view>

#include "fuzz_hf_util.h"
#include "model/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string gpt2 = tformer::fuzz::hf_folder("index", false, true, true);
  static const std::string llama = tformer::fuzz::hf_folder("index", true, true, true);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::string& dir =
      tformer::fuzz::hf_input_in(gpt2, llama, input, "model.layers", "model.safetensors.index.json");
  tformer::fuzz::expect_clean([&] {
    const tformer::HfModel m = tformer::import_hf(dir);
    if (m.model->config().vocab_size != 260) std::abort();
  });
  return 0;
}
