// GPT-2's pre-tokenizer (tokenizer/gpt2_pretokenize.h): the pieces of worked examples (contractions,
// numbers, white space runs, invalid bytes, Unicode white space) and pieces that concatenate back to
// any input; llama.cpp's "default" chain of four patterns on hand-cut examples.
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

// Every piece non-empty, and the pieces concatenate back to the input, for any bytes.
template <typename Pre>
void expect_pieces_concatenate(const Pre& pre, uint64_t seed) {
  Rng rng(seed);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string text = trial % 2 ? random_bytes(rng, 200) : random_text(rng, 50, true);
    std::string joined;
    for (std::string_view piece : pre.split(text)) {
      EXPECT_FALSE(piece.empty());
      joined += piece;
    }
    EXPECT_EQ(joined, text);
  }
}

TEST(Gpt2PreTokenizer, PiecesConcatenateToAnyInput) { expect_pieces_concatenate(Gpt2PreTokenizer::instance(), 5); }

// tiktoken's patterns on hand-cut examples, invalid UTF-8 handled as for GPT-2's: an invalid run is
// one piece, the valid runs around it split as if alone.
TEST(Gpt2PreTokenizer, Cl100kAndO200kPiecesOfHandCutExamples) {
  const auto& cl = Gpt2PreTokenizer::cl100k();
  const auto& o2 = Gpt2PreTokenizer::o200k();
  EXPECT_EQ(cl.split("THEY'RE 12345  \n x"),
            (std::vector<std::string_view>{"THEY", "'RE", " ", "123", "45", "  \n", " x"}));
  EXPECT_EQ(o2.split("CamelCase THEY'RE x.\n/y"),
            (std::vector<std::string_view>{"Camel", "Case", " THEY'RE", " x", ".\n/", "y"}));
  for (const Gpt2PreTokenizer* pre : {&cl, &o2}) {
    EXPECT_EQ(pre->split("ab\xff\xfe cd  \x80"),
              (std::vector<std::string_view>{"ab", "\xff\xfe", " cd", "  ", "\x80"}));
    EXPECT_EQ(pre->split("x\xc3'S"), (std::vector<std::string_view>{"x", "\xc3", "'S"}));
  }
}

TEST(Gpt2PreTokenizer, Cl100kAndO200kPiecesConcatenateToAnyInput) {
  expect_pieces_concatenate(Gpt2PreTokenizer::cl100k(), 7);
  expect_pieces_concatenate(Gpt2PreTokenizer::o200k(), 8);
}

using Pieces = std::vector<std::string_view>;

TEST(LlamaCppDefaultPreTokenizer, PiecesOfHandCutExamples) {
  const auto& pre = LlamaCppDefaultPreTokenizer::instance();
  // The header's example: the apostrophe is punctuation (pattern 1), so no contraction survives;
  // "$" is one of the listed symbols; digits go in threes from the left.
  EXPECT_EQ(pre.split("don't pay $1234.50!"), (Pieces{"don", "'", "t", " pay", " ", "$", "123", "4", ".", "50", "!"}));
  // GPT-2's pattern alone keeps " $" and " 1234" together; the chain cuts the space off the
  // number (pattern 3 after pattern 2) and the punctuation off the space (pattern 1 first).
  EXPECT_EQ(Gpt2PreTokenizer::instance().split("a $ 1234567"), (Pieces{"a", " $", " 1234567"}));
  EXPECT_EQ(pre.split("a $ 1234567"), (Pieces{"a", " ", "$", " ", "123", "456", "7"}));
  // '`' is a symbol the first pattern does not list: it stays with the space before it.
  EXPECT_EQ(pre.split("x `y` z"), (Pieces{"x", " `", "y", "`", " z"}));
  // A space run before punctuation: GPT-2's \s+(?!\S) sees the end of its piece, so the whole
  // run stays together.
  EXPECT_EQ(pre.split("end  (x)\n"), (Pieces{"end", "  ", "(", "x", ")", "\n"}));
  // Non-ASCII categories: U+00BF (Po) is punctuation, U+0665 (Nd) and U+00BD (No) are numbers,
  // U+00E9 a letter.
  EXPECT_EQ(pre.split("\xc2\xbf"
                      "caf\xc3\xa9 \xd9\xa5\xc2\xbd"),
            (Pieces{"\xc2\xbf", "caf\xc3\xa9", " ", "\xd9\xa5\xc2\xbd"}));
  // Invalid bytes are pieces of their own, as for GPT-2's pattern.
  EXPECT_EQ(pre.split("ab\xff, cd"), (Pieces{"ab", "\xff", ",", " cd"}));
}

TEST(LlamaCppDefaultPreTokenizer, PiecesConcatenateToAnyInput) {
  expect_pieces_concatenate(LlamaCppDefaultPreTokenizer::instance(), 7);
}

}  // namespace
}  // namespace tformer
