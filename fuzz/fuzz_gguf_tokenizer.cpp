// libFuzzer target: the tokenizer a GGUF file carries (model/gguf_model.h, load_gguf_tokenizer:
// tokenizer.ggml.model "gpt2" with tokens, token types, merges and pre, or "llama" with pieces,
// scores, types, BOS/EOS/unknown ids and add_bos_token / add_space_prefix). The input is the whole
// GGUF file (the GGUF reader itself is fuzz_gguf's); its seeds are files holding the tokenizer keys
// and no tensor. A tokenizer it accepts is run as fuzz_tokenizer_util.h does.
#include <string_view>

#include "fuzz_tokenizer_util.h"
#include "model/gguf_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tformer::fuzz::input_file(data, size, "gguf");
  tformer::fuzz::expect_clean([&] {
    const auto tok = tformer::load_gguf_tokenizer(path);
    if (tok) tformer::fuzz::check_tokenizer(*tok, std::string_view(reinterpret_cast<const char*>(data), size));
  });
  return 0;
}
