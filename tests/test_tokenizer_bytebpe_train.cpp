// Training a GPT-2-style byte-level BPE vocabulary (tokenizer/byte_bpe_train.h): the worked
// example, GPT-2's byte order, the minimum frequency and the tie-break, and a trained vocabulary
// through both file forms.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "bytebpe_test_util.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

using Ids = std::vector<TokenId>;
using test::gpt2;

TEST(ByteBpeTrain, WorkedExample) {
  // byte_bpe_train.h: "ab ab ab abc" -> merges a+b (4 times), then ' '+ab (3 times).
  const ByteBpeTokenizer tok = train_byte_bpe("ab ab ab abc", {.vocab_size = 259, .min_frequency = 1});
  EXPECT_EQ(tok.merges(), (std::vector<ByteBpeTokenizer::Merge>{{64, 65}, {220, 256}}));
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.eot_id(), 258);
  EXPECT_EQ(tok.encode("ab ab abc"), (Ids{256, 257, 257, 66}));
}

TEST(ByteBpeTrain, GptByteOrderMatchesTheRealVocabulary) {
  TF_SKIP_WITHOUT_GPT2();
  EXPECT_EQ(gpt2_byte_order(), gpt2().byte_of_id());
}

TEST(ByteBpeTrain, StopsAtMinFrequencyAndTiesGoToTheSmallerPair) {
  // Every pair occurs once: nothing reaches min_frequency 2.
  EXPECT_EQ(train_byte_bpe("abcdef", {.vocab_size = 300, .min_frequency = 2}).merges().size(), 0u);
  // "ba" and "dc" both once; with min_frequency 1 the first merge is the smaller pair of ids:
  // 'b' (65) 'a' (64) vs 'd' (67) 'c' (66) -> (65, 64).
  const auto tok = train_byte_bpe("ba dc", {.vocab_size = 258, .min_frequency = 1});
  EXPECT_EQ(tok.merges(), (std::vector<ByteBpeTokenizer::Merge>{{65, 64}}));
}

TEST(ByteBpeTrain, TrainedVocabularyRoundTripsThroughBothFileForms) {
  const std::string corpus = test::read_file("fixtures/tinyshakespeare_100k.txt");
  const ByteBpeTokenizer tok = train_byte_bpe(corpus, {.vocab_size = 600});
  EXPECT_EQ(tok.vocab_size(), 600);
  EXPECT_EQ(tok.eot_id(), 599);
  const Ids ids = tok.encode(corpus);
  EXPECT_LT(ids.size(), corpus.size() / 2);  // it compresses
  EXPECT_EQ(tok.decode(ids), corpus);
  test::TempDir dir;
  tok.save_gpt2(dir / "encoder.json", dir / "vocab.bpe");
  const ByteBpeTokenizer back = ByteBpeTokenizer::load_gpt2(dir / "encoder.json", dir / "vocab.bpe");
  EXPECT_EQ(back.encode(corpus), ids);
  save_tokenizer_file(tok, dir / "tok.json");
  EXPECT_EQ(load_tokenizer_file(dir / "tok.json")->encode(corpus), ids);
}

// Training with each pre-tokenizer pattern (tokenizer train --pattern): no learned token crosses a
// piece of that pattern, the pattern is kept in the JSON form, and the patterns really differ on a
// corpus of digit runs and upper-case contractions.
TEST(ByteBpeTrain, EachPatternLearnsWithinItsOwnPieces) {
  using P = ByteBpeTokenizer::Pattern;
  std::string corpus = test::read_file("fixtures/tinyshakespeare_100k.txt");
  for (int i = 0; i < 200; ++i) corpus += " 12345678 DON'T WON'T\n";
  std::map<P, ByteBpeTokenizer> trained;
  for (const P p : {P::Gpt2, P::Cl100k, P::O200k, P::LlamaCppDefault}) {
    ByteBpeTokenizer tok = train_byte_bpe(corpus, {.vocab_size = 700, .pattern = p});
    EXPECT_EQ(tok.pattern(), p);
    ASSERT_EQ(tok.merges().size(), 700u - 257u) << ByteBpeTokenizer::pattern_name(p);
    // Every merged token lies within one piece of its pattern.
    for (TokenId id = 256; id < 256 + static_cast<TokenId>(tok.merges().size()); ++id) {
      int pieces = 0;
      ByteBpeTokenizer::for_each_piece(p, tok.token_bytes(id), [&](std::string_view) { ++pieces; });
      EXPECT_EQ(pieces, 1) << ByteBpeTokenizer::pattern_name(p) << " token " << id << " '" << tok.token_bytes(id)
                           << "'";
    }
    // The JSON form keeps the pattern; the ids round-trip.
    const auto back = tokenizer_from_json(tok.to_json());
    EXPECT_EQ(dynamic_cast<const ByteBpeTokenizer&>(*back).pattern(), p);
    const Ids ids = tok.encode(corpus);
    EXPECT_EQ(back->encode(corpus), ids);
    EXPECT_EQ(tok.decode(ids), corpus);
    trained.emplace(p, std::move(tok));
  }
  const auto has_token = [](const ByteBpeTokenizer& tok, const std::string& bytes) {
    for (TokenId id = 0; id < tok.vocab_size(); ++id)
      if (tok.token_bytes(id) == bytes) return true;
    return false;
  };
  // GPT-2's pattern keeps " 12345678" one piece, and its contractions are lower-case only.
  EXPECT_TRUE(has_token(trained.at(P::Gpt2), " 12345678"));
  EXPECT_FALSE(has_token(trained.at(P::Gpt2), "'T"));
  // cl100k and o200k: digits in runs of at most three, no space before them; "'T" is a piece.
  for (const P p : {P::Cl100k, P::O200k}) {
    EXPECT_TRUE(has_token(trained.at(p), "123")) << ByteBpeTokenizer::pattern_name(p);
    EXPECT_FALSE(has_token(trained.at(p), "1234")) << ByteBpeTokenizer::pattern_name(p);
    EXPECT_FALSE(has_token(trained.at(p), " 1")) << ByteBpeTokenizer::pattern_name(p);
    EXPECT_TRUE(has_token(trained.at(p), "'T")) << ByteBpeTokenizer::pattern_name(p);
  }
  // o200k's letter pieces end a word at a case change, and take its contraction: "DON'T" is one
  // piece there (cl100k: "DON", "'T").
  EXPECT_TRUE(has_token(trained.at(P::O200k), " DON'T"));
  EXPECT_FALSE(has_token(trained.at(P::Cl100k), " DON'T"));
}

}  // namespace
}  // namespace tformer
