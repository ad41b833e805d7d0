// GPT-2's vocabulary files (encoder.json, vocab.bpe) validated on load: each bad file is a clean
// error naming the file and the line (or the token and id).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "bytebpe_test_util.h"
#include "core/error.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

using Ids = std::vector<TokenId>;
using test::tiny;

// ---------------------------------------------------------------------------------------------
// Bad files: each a BadFile error about the file (or the token at fault), whose message names the
// file and the line (or the token and id).

class ByteBpeBadFiles : public ::testing::Test {
 protected:
  void SetUp() override { tiny().save_gpt2(dir_ / "encoder.json", dir_ / "vocab.bpe"); }
  // Passes when load_gpt2 throws a BadFile error about `field` whose message contains each of `naming`.
  template <typename... Naming>
  ::testing::AssertionResult load_fails(const std::string& field, const Naming&... naming) {
    return test::throws_error([&] { ByteBpeTokenizer::load_gpt2(encoder_path(), vocab_path()); }, ErrorKind::BadFile,
                              field, naming...);
  }
  std::string encoder_path() const { return dir_ / "encoder.json"; }
  std::string vocab_path() const { return dir_ / "vocab.bpe"; }
  std::string encoder() { return test::read_file(dir_ / "encoder.json"); }
  void set_encoder(const std::string& s) { test::write_file(dir_.path() / "encoder.json", s); }
  void set_vocab(const std::string& s) { test::write_file(dir_.path() / "vocab.bpe", s); }
  test::TempDir dir_;
};

TEST_F(ByteBpeBadFiles, TheSavedFilesLoad) {
  const ByteBpeTokenizer tok = ByteBpeTokenizer::load_gpt2(dir_ / "encoder.json", dir_ / "vocab.bpe");
  EXPECT_EQ(tok.encode("abcbc aaa"), (Ids{257, 258, 32, 259, 97}));
  EXPECT_EQ(test::read_file(dir_ / "vocab.bpe"), "#version: 0.2\na b\nab c\nb c\na a\n");
}

TEST_F(ByteBpeBadFiles, TruncatedJson) {
  const std::string e = encoder();
  set_encoder(e.substr(0, e.size() / 2));
  EXPECT_TRUE(load_fails(encoder_path(), "line 1"));
}

TEST_F(ByteBpeBadFiles, BadHeader) {
  set_vocab("version 0.2\na b\n");
  EXPECT_TRUE(load_fails(vocab_path(), "line 1", "header"));
}

TEST_F(ByteBpeBadFiles, MalformedMergeLine) {
  set_vocab("#version: 0.2\na b\nab  c\n");
  EXPECT_TRUE(load_fails(vocab_path(), "line 3", "malformed"));
  set_vocab("#version: 0.2\na b\nabc\n");
  EXPECT_TRUE(load_fails(vocab_path(), "line 3", "malformed"));
  set_vocab("#version: 0.2\na b\n\nab c\n");
  EXPECT_TRUE(load_fails(vocab_path(), "line 3", "malformed"));
}

TEST_F(ByteBpeBadFiles, UnknownMergePart) {
  set_vocab("#version: 0.2\na b\nbc a\n");  // "bc" is not made before line 3
  EXPECT_TRUE(load_fails(vocab_path(), "line 3", "'bc'"));
}

TEST_F(ByteBpeBadFiles, DuplicateMerge) {
  set_vocab("#version: 0.2\na b\nab c\na b\n");
  EXPECT_TRUE(load_fails(vocab_path(), "line 4", "duplicate", "line 2"));
}

TEST_F(ByteBpeBadFiles, MergeResultMissingOrWithTheWrongId) {
  set_vocab("#version: 0.2\na b\nab c\nb c\na a\nc c\n");  // "cc" is not in encoder.json
  EXPECT_TRUE(load_fails(vocab_path(), "line 6", "'cc'", "encoder.json"));
  set_vocab("#version: 0.2\nb c\na b\nab c\na a\n");  // "bc" has id 258 but is the first merge
  EXPECT_TRUE(load_fails(vocab_path(), "line 2", "id 258", "expected 256"));
}

TEST_F(ByteBpeBadFiles, IdsOutsideTheVocabulary) {
  auto j = nlohmann::json::parse(encoder());
  j["<|endoftext|>"] = 9999;  // a gap after the merges
  set_encoder(j.dump());
  EXPECT_TRUE(load_fails("<|endoftext|>", "encoder.json", "9999"));
  j["<|endoftext|>"] = "x";
  set_encoder(j.dump());
  EXPECT_TRUE(load_fails("<|endoftext|>", "encoder.json"));
  j.erase("<|endoftext|>");
  j["zz"] = 260;  // neither a byte, a merge result nor <|special|>
  set_encoder(j.dump());
  EXPECT_TRUE(load_fails("zz", "encoder.json", "260"));
}

TEST_F(ByteBpeBadFiles, SpecialTokensAreSpelledInTheByteAlphabetBothWays) {
  // A fuzzed encoder.json: "<|\u00aa|>" spells the bytes "<|", 0xAA, "|>", which are not UTF-8: no
  // JSON form could hold that special token (saving a model with it threw a JSON exception).
  auto j = nlohmann::json::parse(encoder());
  j.erase("<|endoftext|>");
  j["<|\u00aa|>"] = 260;
  set_encoder(j.dump());
  EXPECT_TRUE(load_fails("special_tokens", "encoder.json", "not valid UTF-8"));
  // A special token of non-ASCII text is written as load_gpt2 reads it back: through the alphabet.
  const ByteBpeTokenizer accented(test::identity_bytes(), {{97, 98}, {256, 99}, {98, 99}, {97, 97}},
                                  {{"<|\u00e9t\u00e9|>", 260}});
  accented.save_gpt2(encoder_path(), vocab_path());
  const ByteBpeTokenizer back = ByteBpeTokenizer::load_gpt2(encoder_path(), vocab_path());
  EXPECT_EQ(back.to_json(), accented.to_json());
  EXPECT_EQ(back.encode("x<|\u00e9t\u00e9|>", true), (Ids{120, 260}));
}

TEST_F(ByteBpeBadFiles, MissingFilesAreNamed) {
  std::filesystem::remove(dir_.path() / "vocab.bpe");
  EXPECT_TRUE(load_fails(vocab_path(), "cannot open"));
}

}  // namespace
}  // namespace tformer
