// libFuzzer target: GPT-2's vocabulary files (tokenizer/byte_bpe.h, ByteBpeTokenizer::load_gpt2:
// encoder.json and vocab.bpe). The input is the two files one after the other, split at its first
// NUL byte (neither file holds one): the bytes before it are encoder.json, those after it vocab.bpe;
// an input without a NUL is an encoder.json beside an empty vocab.bpe. Both are written to a folder
// of this process and read as `--tokenizer byte-bpe:DIR` reads them; a tokenizer load_gpt2 accepts
// is run as fuzz_tokenizer_util.h does, and must read back the same from the files save_gpt2 writes.
#include <cstdlib>
#include <string_view>

#include "fuzz_tokenizer_util.h"
#include "tokenizer/byte_bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string dir = tformer::fuzz::input_dir();
  const std::string encoder = tformer::fuzz::write_in(dir, "encoder.json", input.substr(0, nul));
  const std::string vocab =
      tformer::fuzz::write_in(dir, "vocab.bpe", nul == std::string_view::npos ? "" : input.substr(nul + 1));
  tformer::fuzz::expect_clean([&] {
    const tformer::ByteBpeTokenizer tok = tformer::ByteBpeTokenizer::load_gpt2(encoder, vocab);
    tformer::fuzz::check_tokenizer(tok, input);
    tok.save_gpt2(dir + "/encoder2.json", dir + "/vocab2.bpe");
    const tformer::ByteBpeTokenizer back =
        tformer::ByteBpeTokenizer::load_gpt2(dir + "/encoder2.json", dir + "/vocab2.bpe");
    if (back.to_json() != tok.to_json()) std::abort();
  });
  return 0;
}
