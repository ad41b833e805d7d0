// Training a GPT-2-style byte-level BPE vocabulary (tokenizer/byte_bpe_train.h): the worked
// example, GPT-2's byte order, the minimum frequency and the tie-break, and a trained vocabulary
// through both file forms.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tformer
