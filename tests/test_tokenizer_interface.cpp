// The tokenizer interface: the streaming decoder, JSON (de)serialisation and the
// factory by name. Tokenizer-specific behaviour is in test_tokenizer_char / test_tokenizer_bytebpe.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

using namespace std::string_literals;

// Feeds ids one at a time; returns the chunks, then the flush as the last element.
std::vector<std::string> stream(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  StreamingDecoder decoder(tok);
  std::vector<std::string> chunks;
  for (TokenId id : ids) chunks.emplace_back(decoder.feed(id));
  chunks.emplace_back(decoder.flush());
  return chunks;
}

TEST(StreamingDecoder, HoldsAnUnfinishedCharacterUntilItCompletes) {
  const CharTokenizer tok = CharTokenizer::bytes();
  const std::string text = "a\xc3\xa9 \xf0\x9f\x98\x80!";  // "aé 😀!"
  const auto chunks = stream(tok, tok.encode(text));
  const std::vector<std::string> expected = {"a", "", "\xc3\xa9", " ", "", "", "", "\xf0\x9f\x98\x80", "!", ""};
  EXPECT_EQ(chunks, expected);
}

TEST(StreamingDecoder, InvalidBytesComeOutAsTheyAreAndFlushReturnsTheRest) {
  const CharTokenizer tok = CharTokenizer::bytes();
  // 0xff is invalid at once; 0xc3 then 'x' turns out invalid when 'x' arrives; 0xe4 0xb8 at the end
  // is unfinished and comes out at flush.
  const std::string text =
      "\xff"
      "a\xc3x\xe4\xb8"s;
  const auto chunks = stream(tok, tok.encode(text));
  const std::vector<std::string> expected = {"\xff", "a", "", "\xc3x", "", "", "\xe4\xb8"};
  EXPECT_EQ(chunks, expected);
}

TEST(StreamingDecoder, ConcatenationEqualsDecodeForRandomBytes) {
  const CharTokenizer tok = CharTokenizer::bytes();
  Rng rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::string text(rng.below(64), '\0');
    for (char& c : text) c = static_cast<char>(rng.below(256));
    std::string joined;
    for (const auto& chunk : stream(tok, tok.encode(text))) joined += chunk;
    EXPECT_EQ(joined, text);
  }
}

TEST(TokenizerJson, RoundTripThroughTheFactoryAndAFile) {
  const CharTokenizer tok = CharTokenizer::from_corpus("hello world");
  const auto back = tokenizer_from_json(tok.to_json());
  EXPECT_EQ(back->kind(), "char");
  EXPECT_EQ(back->vocab_size(), tok.vocab_size());
  EXPECT_EQ(back->encode("low herd"), tok.encode("low herd"));

  test::TempDir dir;
  save_tokenizer_file(tok, dir / "tok.json");
  const auto loaded = load_tokenizer_file(dir / "tok.json");
  EXPECT_EQ(loaded->encode("hello"), tok.encode("hello"));
  const auto by_name = tokenizer_by_name(dir / "tok.json");
  EXPECT_EQ(by_name->encode("hello"), tok.encode("hello"));
}

TEST(TokenizerJson, UnknownKindAndMalformedFilesAreErrors) {
  EXPECT_ERROR(tokenizer_from_json(nlohmann::json{{"kind", "nope"}}), ErrorKind::Unsupported, "kind", "'nope'");
  EXPECT_ERROR(tokenizer_from_json(nlohmann::json::array()), ErrorKind::BadFile, "kind");
  EXPECT_ERROR(tokenizer_from_json(nlohmann::json{{"kind", "char"}, {"version", 1}, {"bytes", {1, 1}}}),
               ErrorKind::BadFile, "byte 1", "appears twice");
  test::TempDir dir;
  test::write_file(dir.path() / "bad.json", "{\"kind\": \"char\", \"version\": 1, \"bytes\": [1, 2");
  EXPECT_ERROR(load_tokenizer_file(dir / "bad.json"), ErrorKind::BadFile, dir / "bad.json");
  // An error inside the JSON keeps its kind and field, and the message gains the file's name.
  test::write_file(dir.path() / "nope.json", "{\"kind\": \"nope\"}");
  EXPECT_ERROR(load_tokenizer_file(dir / "nope.json"), ErrorKind::Unsupported, "kind", dir / "nope.json");
}

TEST(TokenizerByName, CharAndMissingFile) {
  const auto tok = tokenizer_by_name("char");
  EXPECT_EQ(tok->kind(), "char");
  EXPECT_EQ(tok->vocab_size(), 256);
  EXPECT_FALSE(tok->eot_id().has_value());
  EXPECT_TRUE(tok->special_tokens().empty());
  EXPECT_ERROR(tokenizer_by_name("no/such/tokenizer.json"), ErrorKind::BadInput, "no/such/tokenizer.json");
}

TEST(TokenizerByName, Gpt2WithAMissingFolderNamesIt) {
  EXPECT_ERROR(tokenizer_by_name("gpt2", "/no/such/gpt2/dir"), ErrorKind::BadFile, "/no/such/gpt2/dir");
}

}  // namespace
}  // namespace tformer
