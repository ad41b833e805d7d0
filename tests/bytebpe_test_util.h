// Helpers shared by the byte-level BPE tests (test_tokenizer_bytebpe*.cpp,
// test_tokenizer_gpt2_pretokenize.cpp): a tiny hand-made vocabulary, GPT-2's real one (loaded
// once), and random bytes and text.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer_test_util.h"

namespace tformer::test {

inline std::array<unsigned char, 256> identity_bytes() {
  std::array<unsigned char, 256> b{};
  for (int i = 0; i < 256; ++i) b[i] = static_cast<unsigned char>(i);
  return b;
}

// Bytes in natural order (so 'a' = 97, ' ' = 32) and four merges:
//   256 = a b ("ab"), 257 = ab c ("abc"), 258 = b c ("bc"), 259 = a a ("aa")
inline ByteBpeTokenizer tiny() {
  return ByteBpeTokenizer(identity_bytes(), {{97, 98}, {256, 99}, {98, 99}, {97, 97}}, {{"<|endoftext|>", 260}});
}

inline const ByteBpeTokenizer& gpt2() {
  static const auto tok = std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::load_gpt2_dir(*test::gpt2_dir()));
  return *tok;
}

inline std::string random_bytes(Rng& rng, size_t max_len) {
  std::string s(rng.below(max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng.below(256));
  return s;
}

// Random text mixing ASCII, multi-byte characters and (optionally) invalid bytes.
inline std::string random_text(Rng& rng, size_t n_atoms, bool invalid) {
  static const std::vector<std::string> atoms = {"a",
                                                 "b",
                                                 "e",
                                                 "the",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\t",
                                                 "'s",
                                                 "'",
                                                 "1",
                                                 "23",
                                                 ".",
                                                 "!",
                                                 "\xc3\xa9",
                                                 "\xe4\xb8\xad",
                                                 "\xf0\x9f\x98\x80",
                                                 "\xc2\xa0",
                                                 "\xe3\x80\x80",
                                                 "<|endoftext|>",
                                                 "A",
                                                 "Z",
                                                 "'LL",
                                                 "\r\n",
                                                 "x"};
  static const std::vector<std::string> bad = {"\xff", "\x80", "\xc3", "\xe4\xb8", "\xed\xa0\x80", "\xc0\xaf"};
  std::string s;
  for (size_t i = 0; i < n_atoms; ++i) {
    if (invalid && rng.below(8) == 0)
      s += bad[rng.below(bad.size())];
    else
      s += atoms[rng.below(atoms.size())];
  }
  return s;
}

}  // namespace tformer::test
