// tokenizer/sentencepiece.h: tformer's SentencePiece BPE against the sentencepiece library. The
// fixtures (tests/fixtures/sentencepiece, tools/reference/gen_sentencepiece_fixtures.py) are models
// Debian's spm_train trained on a corpus in seven scripts (defaults with nmt_nfkc, byte fallback,
// Llama's identity settings with user-defined and control symbols, whitespace as suffix) and the
// ids and decoded text python3-sentencepiece gave for 300 texts each. Also: a hand-worked merge
// order, the JSON form, and broken model files.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "test_util.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/tokenizer.h"

namespace tformer {
namespace {

const char* kDir = "fixtures/sentencepiece";

class SentencePieceFixture : public ::testing::TestWithParam<const char*> {};

TEST_P(SentencePieceFixture, IdsAndDecodedTextEqualTheLibrarys) {
  const std::string base = std::string(kDir) + "/" + GetParam();
  const auto tok = SentencePieceTokenizer::load(base + ".model");
  const auto j = nlohmann::json::parse(read_file(base + ".json"));
  const auto texts = j["texts"].get<std::vector<std::string>>();
  const auto ids = j["ids"].get<std::vector<std::vector<TokenId>>>();
  const auto decoded = j["decoded"].get<std::vector<std::string>>();
  ASSERT_EQ(texts.size(), 300u);
  size_t bad_ids = 0, bad_text = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (tok.encode(texts[i]) != ids[i] && bad_ids++ < 3) ADD_FAILURE() << "ids of text " << i << ": " << texts[i];
    if (tok.decode(ids[i]) != decoded[i] && bad_text++ < 3)
      ADD_FAILURE() << "decoded text " << i << ": '" << tok.decode(ids[i]) << "' vs '" << decoded[i] << "'";
  }
  EXPECT_EQ(bad_ids, 0u);
  EXPECT_EQ(bad_text, 0u);
  // The JSON form (what a model file carries) encodes identically.
  const auto back = tokenizer_from_json(tok.to_json());
  EXPECT_EQ(back->kind(), "sentencepiece");
  for (size_t i = 0; i < texts.size(); i += 7) EXPECT_EQ(back->encode(texts[i]), ids[i]);
  // --tokenizer spm:MODEL
  EXPECT_EQ(tokenizer_by_name("spm:" + base + ".model")->encode(texts[0]), ids[0]);
}

INSTANTIATE_TEST_SUITE_P(Models, SentencePieceFixture, ::testing::Values("multi", "multi_bf", "llamaish", "suffix"));

TEST(SentencePiece, TheFixturesCoverWhatTheyClaim) {
  const auto multi = SentencePieceTokenizer::load(std::string(kDir) + "/multi.model");
  EXPECT_EQ(multi.normalizer().name, "nmt_nfkc");
  EXPECT_FALSE(multi.normalizer().charsmap.empty());
  EXPECT_FALSE(multi.byte_fallback());
  // NFKC through the charsmap: full-width letters and the ﬁ ligature fold; spaces collapse.
  EXPECT_EQ(multi.normalize("  ＦＵＬＬ  ﬁ  "),
            "\xE2\x96\x81"
            "FULL\xE2\x96\x81"
            "fi");
  const auto bf = SentencePieceTokenizer::load(std::string(kDir) + "/multi_bf.model");
  EXPECT_TRUE(bf.byte_fallback());
  const auto llama = SentencePieceTokenizer::load(std::string(kDir) + "/llamaish.model");
  EXPECT_EQ(llama.normalizer().name, "identity");
  EXPECT_FALSE(llama.normalizer().remove_extra_whitespaces);
  EXPECT_EQ(llama.normalize(" a  b"),
            "\xE2\x96\x81\xE2\x96\x81"
            "a\xE2\x96\x81\xE2\x96\x81"
            "b");
  EXPECT_EQ(llama.special_tokens().count("<ctl>"), 1u);
}

// A vocabulary small enough to merge by hand. Scores: "▁a" -1, "ab" -2, "▁ab" -3, "bc" -0.5.
// "abc" normalizes to "▁abc" = [▁ a b c]; candidate pairs ▁a(-1) ab(-2) bc(-0.5): bc first ->
// [▁ a bc]; then ▁a(-1), a+bc is no piece: ▁a -> [▁a bc]; ▁a+bc is no piece: ids {▁a, bc}.
// "ab" -> [▁ a b]: ▁a(-1) beats ab(-2) -> [▁a b]; ▁ab(-3) -> [▁ab].
TEST(SentencePiece, MergesTheHighestScoringPairFirst) {
  using P = SentencePieceTokenizer::PieceType;
  const std::string sp = "\xE2\x96\x81";
  std::vector<SentencePieceTokenizer::Piece> pieces{
      {"<unk>", 0, P::Unknown},   {"<s>", 0, P::Control},  {sp, -10, P::Normal},      {"a", -10, P::Normal},
      {"b", -10, P::Normal},      {"c", -10, P::Normal},   {sp + "a", -1, P::Normal}, {"ab", -2, P::Normal},
      {sp + "ab", -3, P::Normal}, {"bc", -0.5f, P::Normal}};
  SentencePieceTokenizer::Normalizer identity{"identity", "", true, true, true};
  const SentencePieceTokenizer tok(pieces, identity, false);
  EXPECT_EQ(tok.encode("abc"), (std::vector<TokenId>{6, 9}));
  EXPECT_EQ(tok.encode("ab"), (std::vector<TokenId>{8}));
  // Unknown characters: one unknown id for a run of them; decoding gives the unknown surface.
  EXPECT_EQ(tok.encode("a xyz b"), (std::vector<TokenId>{6, 2, 0, 2, 4}));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{6, 9}), "abc");  // the dummy prefix's space goes
  EXPECT_EQ(tok.decode(std::vector<TokenId>{1, 6}), " a");   // only on the first token
  EXPECT_EQ(tok.decode(std::vector<TokenId>{0}), "\xE2\x81\x87 ");
  EXPECT_ERROR(tok.decode(std::vector<TokenId>{10}), ErrorKind::BadInput, "token 10");
}

TEST(SentencePiece, ANonFiniteScoreIsRefused) {
  // A fuzzed tokenizer.model: a NaN score orders no merge, and the JSON form a model file keeps
  // could not hold it (it would be written as null and not read back).
  using P = SentencePieceTokenizer::PieceType;
  SentencePieceTokenizer::Normalizer identity{"identity", "", true, true, true};
  for (const float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    const std::vector<SentencePieceTokenizer::Piece> pieces{
        {"<unk>", 0, P::Unknown}, {"a", -1, P::Normal}, {"b", bad, P::Normal}};
    EXPECT_ERROR(SentencePieceTokenizer(pieces, identity, false), ErrorKind::BadInput, "piece 2", "'b'",
                 "not a finite number");
  }
  // The same in a .model file: pieces "<unk>" (unknown) and "a" with the score bytes of a NaN.
  const std::string model = std::string("\x0a\x0e\x0a\x05<unk>\x15\x00\x00\x00\x00\x18\x02", 16) +
                            std::string(
                                "\x0a\x0a\x0a\x01"
                                "a"
                                "\x15\x00\x00\xc0\x7f\x18\x01",
                                12) +
                            std::string("\x12\x02\x18\x02", 4);
  EXPECT_ERROR(SentencePieceTokenizer::from_model_proto(model, "nan.model"), ErrorKind::BadFile, "piece 1", "nan.model",
               "not a finite number");
}

TEST(SentencePiece, BrokenModelFilesAreErrorsNotCrashes) {
  const std::string bytes = read_file(std::string(kDir) + "/suffix.model");
  // Every cut: an error naming the file (or, cut between whole pieces, a model that still loads).
  size_t errors = 0;
  for (size_t n = 0; n < bytes.size(); n += 97) {
    try {
      SentencePieceTokenizer::from_model_proto(std::string_view(bytes).substr(0, n), "cut.model");
    } catch (const Error& e) {
      ++errors;
      EXPECT_TRUE(e.kind() == ErrorKind::BadFile || e.kind() == ErrorKind::Unsupported) << e.what();
    }
  }
  EXPECT_GT(errors, bytes.size() / 97 / 2);
  // A length that claims more than the file holds.
  std::string lying = "\x0a\xff\xff\xff\xff\x0f";
  EXPECT_ERROR(SentencePieceTokenizer::from_model_proto(lying, "lying.model"), ErrorKind::BadFile, "lying.model",
               "4294967295 bytes with 0 left");
  // A unigram model (trainer_spec.model_type 1) is refused by name: one piece "a", model_type 1.
  const std::string unigram = std::string(
                                  "\x0a\x03\x0a\x01"
                                  "a",
                                  5) +
                              std::string("\x12\x02\x18\x01", 4);
  EXPECT_ERROR(SentencePieceTokenizer::from_model_proto(unigram, "u.model"), ErrorKind::Unsupported, "model_type",
               "unigram");
  EXPECT_ERROR(base64_decode("ab=c", "x"), ErrorKind::BadFile, "x", "padding");
  EXPECT_EQ(base64_decode(base64_encode(bytes.substr(0, 1001)), "x"), bytes.substr(0, 1001));
}

}  // namespace
}  // namespace tformer
