// The char-level (byte) tokenizer: exact round trips, nanoGPT's corpus vocabulary, errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/utf8.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

TEST(CharTokenizer, BytesAreTheirOwnIds) {
  const CharTokenizer tok = CharTokenizer::bytes();
  EXPECT_EQ(tok.vocab_size(), 256);
  EXPECT_EQ(tok.kind(), "char");
  const std::string text = "A\n\xc3\xa9\xff";
  EXPECT_EQ(tok.encode(text), (std::vector<TokenId>{65, 10, 0xc3, 0xa9, 0xff}));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{104, 105}), "hi");
  EXPECT_TRUE(tok.encode("").empty());
}

TEST(CharTokenizer, RoundTripsRandomBytesIncludingInvalidUtf8) {
  const CharTokenizer tok = CharTokenizer::bytes();
  Rng rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    std::string text(rng.below(300), '\0');
    for (char& c : text) c = static_cast<char>(rng.below(256));
    EXPECT_EQ(tok.decode(tok.encode(text)), text);
  }
}

TEST(CharTokenizer, FromCorpusWorkedExample) {
  // Sorted distinct bytes of "hello": e h l o -> 0 1 2 3.
  const CharTokenizer tok = CharTokenizer::from_corpus("hello");
  EXPECT_EQ(tok.vocab_size(), 4);
  EXPECT_EQ(tok.encode("hole"), (std::vector<TokenId>{1, 3, 2, 0}));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{1, 0, 2, 2, 3}), "hello");
}

TEST(CharTokenizer, FromCorpusUnknownByteNamesItsPosition) {
  const CharTokenizer tok = CharTokenizer::from_corpus("abc");
  EXPECT_ERROR(tok.encode("abxc"), ErrorKind::BadInput, "position 2", "0x78");
}

TEST(CharTokenizer, DecodeOutOfRangeNamesTheId) {
  const CharTokenizer tok = CharTokenizer::from_corpus("abc");
  for (TokenId bad : {3, -1, 1000}) {
    EXPECT_ERROR(tok.decode(std::vector<TokenId>{0, bad}), ErrorKind::BadInput, "token id " + std::to_string(bad));
  }
}

// nanoGPT's shakespeare_char: 65 symbols, "\n !$&',-.3:;?ABC...xyz" (the whole corpus, from
// ../shared).
TEST(CharTokenizer, TinyShakespeareHasNanoGptsSixtyFiveSymbols) {
  TF_SKIP_WITHOUT_SHARED("tinyshakespeare.txt");
  const std::string excerpt = test::read_file("fixtures/tinyshakespeare_100k.txt");
  const CharTokenizer tok =
      CharTokenizer::from_corpus(test::read_file(test::shared_data_dir() / "tinyshakespeare.txt"));
  EXPECT_EQ(tok.vocab_size(), 65);
  EXPECT_EQ(tok.encode("\n !A"), (std::vector<TokenId>{0, 1, 2, 13}));
  EXPECT_EQ(tok.encode("az"), (std::vector<TokenId>{39, 64}));
  EXPECT_EQ(tok.decode(tok.encode(excerpt)), excerpt);
}

// The committed excerpt (fixtures/tinyshakespeare_100k.txt): at most those 65 symbols, newline
// and space first, and an exact round trip.
TEST(CharTokenizer, TinyShakespeareExcerptRoundTrips) {
  const std::string excerpt = test::read_file("fixtures/tinyshakespeare_100k.txt");
  const CharTokenizer small = CharTokenizer::from_corpus(excerpt);
  EXPECT_LE(small.vocab_size(), 65);
  EXPECT_EQ(small.encode("\n "), (std::vector<TokenId>{0, 1}));
  EXPECT_EQ(small.decode(small.encode(excerpt)), excerpt);
}

TEST(CharTokenizer, JsonRoundTripGivesIdenticalIds) {
  const std::string corpus = "the quick brown fox \xc3\xa9\n";
  const CharTokenizer tok = CharTokenizer::from_corpus(corpus);
  const CharTokenizer back = CharTokenizer::from_json(tok.to_json());
  EXPECT_EQ(back.alphabet(), tok.alphabet());
  EXPECT_EQ(back.encode(corpus), tok.encode(corpus));
  const CharTokenizer all = CharTokenizer::from_json(CharTokenizer::bytes().to_json());
  EXPECT_EQ(all.vocab_size(), 256);
}

TEST(CharTokenizer, StreamedUtf8ComesOutInWholeCharacters) {
  const CharTokenizer tok = CharTokenizer::bytes();
  const std::string text = "na\xc3\xafve \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd end";
  StreamingDecoder decoder(tok);
  std::string joined;
  for (TokenId id : tok.encode(text)) {
    const std::string chunk(decoder.feed(id));
    EXPECT_TRUE(is_valid_utf8(chunk));
    joined += chunk;
  }
  joined += decoder.flush();
  EXPECT_EQ(joined, text);
}

}  // namespace
}  // namespace tformer
