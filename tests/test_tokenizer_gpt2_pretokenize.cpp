// GPT-2's pre-tokenizer (tokenizer/gpt2_pretokenize.h): the pieces of worked examples (contractions,
// numbers, white space runs, invalid bytes, Unicode white space) and pieces that concatenate back to
// any input.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "bytebpe_test_util.h"
#include "core/rng.h"
#include "tokenizer/gpt2_pretokenize.h"

namespace tformer {
namespace {

using test::random_bytes;
using test::random_text;

TEST(Gpt2PreTokenizer, PiecesOfTheHeaderExample) {
  const auto pieces = Gpt2PreTokenizer::instance().split("Hello world's  end\n");
  EXPECT_EQ(pieces, (std::vector<std::string_view>{"Hello", " world", "'s", " ", " end", "\n"}));
  EXPECT_EQ(Gpt2PreTokenizer::instance().split("THEY'RE 12ab  \n x"),
            (std::vector<std::string_view>{"THEY", "'", "RE", " 12", "ab", "  \n", " x"}));
  // Invalid runs are their own pieces; valid runs around them split as if alone.
  EXPECT_EQ(Gpt2PreTokenizer::instance().split("ab\xff\xfe cd  \x80"),
            (std::vector<std::string_view>{"ab", "\xff\xfe", " cd", "  ", "\x80"}));
  // U+0085 and U+00A0 are white space (Unicode White_Space, as in tiktoken's regex).
  EXPECT_EQ(Gpt2PreTokenizer::instance().split("a\xc2\x85\xc2\xa0"
                                               "b"),
            (std::vector<std::string_view>{"a", "\xc2\x85", "\xc2\xa0", "b"}));
}

TEST(Gpt2PreTokenizer, PiecesConcatenateToAnyInput) {
  Rng rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = trial % 2 ? random_bytes(rng, 200) : random_text(rng, 50, true);
    std::string joined;
    for (std::string_view piece : Gpt2PreTokenizer::instance().split(text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

}  // namespace
}  // namespace tformer
