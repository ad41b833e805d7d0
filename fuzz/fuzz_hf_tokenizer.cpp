// libFuzzer target: a Hugging Face folder's tokenizer.json (model/hf_import.h, import_hf: a
// byte-level BPE "model" with its vocab, merges as "a b" or ["a", "b"], added_tokens; normalizers,
// other model types and pre-tokenizers refused by name; the vocabulary must be the model's
// vocab_size). The input is tokenizer.json, beside the fixed tiny GPT-2 of fuzz_hf_util.h (vocab
// 260: the 256 bytes, three merges and one added token fit it). A tokenizer the import accepts is
// run as fuzz_tokenizer_util.h does.
#include <string_view>

#include "fuzz_hf_util.h"
#include "fuzz_tokenizer_util.h"
#include "model/hf_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = tformer::fuzz::hf_folder("tokenizer", false, false, true);
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tformer::fuzz::write_in(dir, "tokenizer.json", input);
  tformer::fuzz::expect_clean([&] {
    const tformer::HfModel m = tformer::import_hf(dir);
    if (m.tokenizer) tformer::fuzz::check_tokenizer(*m.tokenizer, input);
  });
  return 0;
}
