// libFuzzer target: Sennrich codes files (tokenizer/sennrich_bpe.h, SennrichBpe::from_codes: the
// "#version" line, one merge per line, both versions). Codes it accepts segment a few fixed words
// and the input's own first words; the pieces of a word must spell the word.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/sennrich_bpe.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view codes(reinterpret_cast<const char*>(data), size);
  tformer::fuzz::expect_clean([&] {
    const tformer::SennrichBpe bpe = tformer::SennrichBpe::from_codes(codes, "codes");
    std::vector<std::string> words = {"lowest", "newer", "a", "\xc3\xa9t\xc3\xa9", "the"};
    // Words of the input itself (split at whitespace), so merges it names get applied.
    std::string w;
    for (size_t i = 0; i < std::min<size_t>(size, 2048) && words.size() < 64; ++i) {
      const char c = codes[i];
      if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
        if (!w.empty()) words.push_back(w);
        w.clear();
      } else {
        w += c;
      }
    }
    for (const auto& word : words)
      tformer::fuzz::expect_clean([&] {
        std::string spelled;
        for (const auto& piece : bpe.segment(word)) spelled += piece;
        if (spelled != word) std::abort();
      });
  });
  return 0;
}
