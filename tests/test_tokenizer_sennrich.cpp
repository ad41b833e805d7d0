// Sennrich BPE as a Tokenizer (sennrich_tokenizer.h): the worked example's exact ids, exact round
// trips on random bytes, ids equal to `bpe apply`'s pieces, JSON and name forms, bad input; and
// the streaming apply (SennrichBpe::apply_stream) against the whole-text apply.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/utf8.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/sennrich_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

using Ids = std::vector<TokenId>;
using namespace std::string_literals;

// Ranks: 0 (l, o)  1 (lo, w</w>)  2 (e, s)  3 (es, t</w>)  4 (lo, w)
const char* kToyCodes = "#version: 0.2\nl o\nlo w</w>\ne s\nes t</w>\nlo w\n";

std::vector<std::string> chars_of(std::string_view s) {
  std::set<std::string> chars;
  for (size_t i = 0; i < s.size();) {
    const size_t start = i;
    i += utf8_sequence_length(static_cast<unsigned char>(s[i]));
    if (s[start] != ' ' && s[start] != '\n' && s[start] != '\r') chars.emplace(s.substr(start, i - start));
  }
  return {chars.begin(), chars.end()};
}

// The header's worked example, id by id.
TEST(SennrichTokenizer, WorkedExample) {
  const SennrichTokenizer tok = SennrichTokenizer::from_codes(kToyCodes, "toy");
  EXPECT_EQ(tok.kind(), "bpe");
  EXPECT_EQ(tok.vocab_size(), 293);
  EXPECT_EQ(tok.symbol_id("e"), 276);
  EXPECT_EQ(tok.symbol_id("e</w>"), 277);
  EXPECT_EQ(tok.symbol_id("w</w>"), 287);
  EXPECT_EQ(tok.symbol_id("lo"), 288);
  EXPECT_EQ(tok.symbol_id("low</w>"), 289);
  EXPECT_EQ(tok.symbol_id("est</w>"), 291);
  EXPECT_EQ(tok.symbol_id("low"), 292);
  EXPECT_FALSE(tok.symbol_id("x").has_value());
  const std::string text = "lowest low\n  slow xy\n";
  const Ids ids = tok.encode(text);
  EXPECT_EQ(ids, (Ids{292, 291, 289, 272, 257, 282, 289, 256, 120, 121, 272}));
  EXPECT_EQ(tok.decode(ids), text);
  // The implied space lives between 291 and 289 only: single tokens never carry it.
  std::string alone;
  for (TokenId id : ids) tok.append_token_bytes(id, alone);
  EXPECT_EQ(alone, "lowestlow\n  slow xy\n");
  EXPECT_EQ(tok.token_name(291), "est</w>");
  EXPECT_EQ(tok.token_name(257), "<space x2>");
  EXPECT_EQ(tok.token_name(120), "<0x78>");
  EXPECT_EQ(tok.token_name(275), "<\\r\\n>");
  // The two separators that are usually free: one space between words, nothing at all inside.
  EXPECT_EQ(tok.encode("low low low"), (Ids{289, 289, 289}));
  EXPECT_EQ(tok.encode("low  low"), (Ids{289, 257, 289}));
  EXPECT_EQ(tok.encode(" low"), (Ids{256, 289}));
  EXPECT_EQ(tok.encode("low "), (Ids{289, 256}));
  EXPECT_EQ(tok.encode("lo"), (Ids{278, 281}));  // l o</w>: both characters have ids
  EXPECT_EQ(tok.encode("\r\n\n\n\r"), (Ids{275, 273, 274}));
  EXPECT_EQ(tok.encode(std::string(35, ' ')), (Ids{271, 271, 258}));
  EXPECT_TRUE(tok.encode("").empty());
}

// Unknown characters and invalid bytes fall back to byte ids; a word ending in a kept line break
// (\f) does not imply a space before the next word.
TEST(SennrichTokenizer, ByteFallbackAndKeptBreaks) {
  const SennrichTokenizer tok = SennrichTokenizer::from_codes(kToyCodes, "toy");
  // "é" (c3 a9) has no id; "low" follows it without a space.
  EXPECT_EQ(tok.encode("\xc3\xa9low"), (Ids{0xc3, 0xa9, 289}));
  // An invalid byte cuts the word into two stretches segmented on their own: low</w> \xff low</w>.
  EXPECT_EQ(tok.encode("low\xfflow"), (Ids{289, 0xff, 289}));
  EXPECT_EQ(tok.decode(Ids{289, 0xff, 289}), "low\xfflow");
  // "low\f" + "low": the \f ends the first word (as in bpe learn); \f has no id here.
  EXPECT_EQ(tok.encode("low\flow"), (Ids{292, 0x0c, 289}));
  // With \f in the alphabet it is a word-final symbol, but one that implies no space.
  const SennrichTokenizer with_ff = SennrichTokenizer::from_codes(kToyCodes, "toy", {"\f"});
  // \f sorts first in the alphabet: \f=276 \f</w>=277, and every later id moves up by two.
  const TokenId ff_final = *with_ff.symbol_id("\f</w>");
  EXPECT_EQ(ff_final, 277);
  EXPECT_EQ(with_ff.symbol_id("low"), 294);
  EXPECT_EQ(with_ff.encode("low\flow"), (Ids{294, ff_final, 291}));
  EXPECT_EQ(with_ff.decode(with_ff.encode("low\flow")), "low\flow");
  EXPECT_EQ(with_ff.encode("low\f low"), (Ids{294, ff_final, 256, 291}));
  EXPECT_FALSE(with_ff.ends_word(ff_final));
  EXPECT_TRUE(with_ff.ends_word(291));  // low</w>
}

// Random byte strings, weighted towards the characters that matter, round-trip exactly through
// encode/decode and through the streaming decoder, with several codes files.
TEST(SennrichTokenizer, RoundTripsRandomBytes) {
  // Codes whose merges spell "</w>" and "a</w>" as text, so that a word can contain a piece whose
  // symbol string equals a word-final symbol's.
  const char* literal_codes = "#version: 0.2\n< /\n</ w\n</w >\na </w>\nl o\nlo w</w>\n";
  std::vector<SennrichTokenizer> toks;
  toks.push_back(SennrichTokenizer::from_codes(kToyCodes, "toy"));
  toks.push_back(SennrichTokenizer::from_codes(kToyCodes, "toy", {"\t", "\f", "x", "\xc3\xa9"}));
  toks.push_back(SennrichTokenizer::from_codes(literal_codes, "literal"));
  toks.push_back(SennrichTokenizer::from_codes("a b\nab </w>\nl o\n", "v0.1"));
  const std::vector<std::string> atoms = {" ",
                                          " ",
                                          " ",
                                          "  ",
                                          "\n",
                                          "\n",
                                          "\r",
                                          "\r\n",
                                          "\t",
                                          "l",
                                          "o",
                                          "w",
                                          "e",
                                          "s",
                                          "t",
                                          "low",
                                          "lowest",
                                          "a",
                                          "b",
                                          "ab",
                                          "<",
                                          "/",
                                          "w>",
                                          "</w>",
                                          "a</w>",
                                          "x",
                                          "\f",
                                          "\x0b",
                                          "\x1c",
                                          "\xc2\x85",
                                          "\xe2\x80\xa8",
                                          "\xc3\xa9",
                                          "\xe4\xb8\xad",
                                          "\xff",
                                          "\x80",
                                          "\xc3",
                                          "\xe2\x80",
                                          "\xc2\xa0",
                                          std::string(1, '\0')};
  Rng rng(11);
  for (const auto& tok : toks) {
    for (int trial = 0; trial < 300; ++trial) {
      std::string text;
      const uint64_t n = rng.below(24);
      for (uint64_t k = 0; k < n; ++k) {
        if (rng.below(8) == 0)
          text += static_cast<char>(rng.below(256));
        else if (rng.below(30) == 0)
          text += std::string(rng.below(40), ' ');
        else
          text += atoms[rng.below(atoms.size())];
      }
      const Ids ids = tok.encode(text);
      ASSERT_EQ(tok.decode(ids), text) << "trial " << trial;
      for (TokenId id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
      StreamingDecoder stream(tok);
      std::string joined;
      for (TokenId id : ids) joined += stream.feed(id);
      joined += stream.flush();
      ASSERT_EQ(joined, text) << "trial " << trial;
    }
  }
}

// Continuing a prompt: the decoder given the prompt's last id writes the space between words.
TEST(SennrichTokenizer, StreamingDecoderContinuesAPrompt) {
  const SennrichTokenizer tok = SennrichTokenizer::from_codes(kToyCodes, "toy");
  const Ids prompt = tok.encode("lowest");
  const Ids more = tok.encode("low");
  StreamingDecoder after(tok, prompt.back());
  EXPECT_EQ(after.feed(more[0]), " low");
  StreamingDecoder fresh(tok);
  EXPECT_EQ(fresh.feed(more[0]), "low");
}

// On ordinary text the symbol ids are exactly `bpe apply`'s pieces: a word's last piece as its
// "</w>" symbol, the others as they are; separators add only whitespace ids.
TEST(SennrichTokenizer, IdsAreApplysPieces) {
  const std::string corpus =
      test::read_file(std::string(TFORMER_SOURCE_DIR) + "/tests/fixtures/tinyshakespeare_100k.txt");
  ASSERT_FALSE(corpus.empty());
  BpeLearnOptions options;
  options.merges = 500;
  const BpeLearnResult learned = learn_bpe_from_word_counts(bpe_count_words(corpus, "<corpus>"), options);
  const SennrichTokenizer tok = SennrichTokenizer::from_merges(learned.merges, chars_of(corpus));
  const std::string text = corpus.substr(0, 30000);
  const std::string applied = tok.bpe().apply_text(text, text::LineMode::kSplitlines);
  Ids expected;
  size_t i = 0;
  while (i < applied.size()) {
    while (i < applied.size() && (applied[i] == ' ' || applied[i] == '\n' || applied[i] == '\r')) ++i;
    size_t j = i;
    while (j < applied.size() && applied[j] != ' ' && applied[j] != '\n' && applied[j] != '\r') ++j;
    if (j == i) break;
    std::string piece = applied.substr(i, j - i);
    if (piece.ends_with("@@"))
      piece.resize(piece.size() - 2);
    else
      piece += "</w>";
    const auto id = tok.symbol_id(piece);
    ASSERT_TRUE(id.has_value()) << piece;
    expected.push_back(*id);
    i = j;
  }
  const Ids ids = tok.encode(text);
  Ids symbols;
  for (TokenId id : ids) {
    ASSERT_GE(id, SennrichTokenizer::kFirstWhitespace) << "no byte fallback expected";
    if (tok.is_symbol(id)) symbols.push_back(id);
  }
  EXPECT_EQ(symbols, expected);
  EXPECT_EQ(tok.decode(ids), text);
  // Most single spaces cost nothing: far fewer whitespace ids than spaces.
  const auto spaces = std::count(text.begin(), text.end(), ' ');
  EXPECT_LT(static_cast<int64_t>(ids.size() - symbols.size()), spaces / 2);
}

TEST(SennrichTokenizer, JsonAndNamesRoundTrip) {
  const SennrichTokenizer tok = SennrichTokenizer::from_codes(kToyCodes, "toy", {"x", "\xc3\xa9", "a"});
  EXPECT_EQ(tok.extra_alphabet(), (std::vector<std::string>{"a", "x", "\xc3\xa9"}));
  const std::string text = "lowest xa \xc3\xa9\xff  low\r\n";
  const auto back = tokenizer_from_json(tok.to_json());
  EXPECT_EQ(back->kind(), "bpe");
  EXPECT_EQ(back->vocab_size(), tok.vocab_size());
  EXPECT_EQ(back->encode(text), tok.encode(text));
  EXPECT_EQ(back->decode(tok.encode(text)), text);

  test::TempDir dir;
  save_tokenizer_file(tok, dir / "tok.json");
  EXPECT_EQ(tokenizer_by_name(dir / "tok.json")->encode(text), tok.encode(text));
  test::write_file(dir.path() / "toy.codes", kToyCodes);
  const auto by_codes = tokenizer_by_name("bpe:" + (dir / "toy.codes"));
  EXPECT_EQ(by_codes->kind(), "bpe");
  EXPECT_EQ(by_codes->encode("lowest low\n  slow xy\n"), (Ids{292, 291, 289, 272, 257, 282, 289, 256, 120, 121, 272}));
  // Version 0.1 codes survive the JSON form too.
  const SennrichTokenizer v1 = SennrichTokenizer::from_codes("a b\nab </w>\n", "v0.1");
  EXPECT_EQ(tokenizer_from_json(v1.to_json())->encode("ab abc"), v1.encode("ab abc"));
}

TEST(SennrichTokenizer, BadInputNamesTheFileLineOrId) {
  const SennrichTokenizer tok = SennrichTokenizer::from_codes(kToyCodes, "toy");
  EXPECT_ERROR(tok.decode(Ids{289, 293}), ErrorKind::BadInput, "token id 293");
  EXPECT_ERROR(tok.decode(Ids{-1}), ErrorKind::BadInput, "token id -1");
  test::TempDir dir;
  test::write_file(dir.path() / "bad.codes", "#version: 0.2\nl o\nlo w x\n");
  EXPECT_ERROR(tokenizer_by_name("bpe:" + (dir / "bad.codes")), ErrorKind::BadFile, dir / "bad.codes", "bad.codes:3:");
  test::write_file(dir.path() / "empty.codes", "");
  EXPECT_ERROR(tokenizer_by_name("bpe:" + (dir / "empty.codes")), ErrorKind::BadFile, dir / "empty.codes",
               "empty.codes:1: empty");
  EXPECT_ERROR(tokenizer_by_name("bpe:" + (dir / "none.codes")), ErrorKind::BadFile, dir / "none.codes");
  EXPECT_ERROR(tokenizer_by_name("bpe:"), ErrorKind::BadInput, "bpe:", "bpe:CODES");
  // JSON forms: wrong vocab_size, a malformed merge, a merge part not yet a symbol, a duplicate,
  // an alphabet entry that is not one character, a truncated file.
  auto j = tok.to_json();
  j["vocab_size"] = 7;
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "vocab_size");
  j = tok.to_json();
  j["merges"][1] = {"lo"};
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "merges", "\"merges\"[1]");
  j = tok.to_json();
  j["merges"][0] = {"lo", "w"};
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "merges", ":2: 'lo w'");
  j = tok.to_json();
  j["merges"].push_back({"l", "o"});
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "merges", "duplicate merge 'l o'");
  j = tok.to_json();
  j["alphabet"] = {"ab"};
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "ab", "alphabet entry");
  const std::string full = tok.to_json().dump();
  test::write_file(dir.path() / "cut.json", full.substr(0, full.size() / 2));
  EXPECT_ERROR(load_tokenizer_file(dir / "cut.json"), ErrorKind::BadFile, dir / "cut.json");
}

// `byte-bpe:VOCAB` names a trained byte-level vocabulary: its JSON file or a GPT-2-form folder.
TEST(TokenizerByName, ByteBpeVocabularyFileOrFolder) {
  ByteBpeTrainOptions options;
  options.vocab_size = 256 + 10 + 1;
  const ByteBpeTokenizer trained = train_byte_bpe("low lower lowest newer newest low low", options);
  test::TempDir dir;
  save_tokenizer_file(trained, dir / "byte.json");
  trained.save_gpt2(dir / "encoder.json", dir / "vocab.bpe");
  const std::string text = "lowest newer";
  EXPECT_EQ(tokenizer_by_name("byte-bpe:" + (dir / "byte.json"))->encode(text), trained.encode(text));
  EXPECT_EQ(tokenizer_by_name("byte-bpe:" + dir.path().string())->encode(text), trained.encode(text));
  save_tokenizer_file(SennrichTokenizer::from_codes(kToyCodes, "toy"), dir / "bpe.json");
  EXPECT_ERROR(tokenizer_by_name("byte-bpe:" + (dir / "bpe.json")), ErrorKind::BadFile, dir / "bpe.json",
               "not a byte-level");
  EXPECT_ERROR(tokenizer_by_name("byte-bpe:" + (dir / "nope.json")), ErrorKind::BadFile, dir / "nope.json");
}

// The byte-level JSON form rejects what the GPT-2 files reject: ids outside the vocabulary, malformed
// merges, duplicate merges, a byte table that is not a permutation; decode names a bad id.
TEST(ByteBpeJson, BadFormsAndIdsAreErrors) {
  ByteBpeTrainOptions options;
  options.vocab_size = 256 + 4 + 1;
  const ByteBpeTokenizer tok = train_byte_bpe("abab abab abc", options);
  ASSERT_GE(tok.merges().size(), 2u);
  const auto outside = static_cast<TokenId>(tok.vocab_size());
  EXPECT_ERROR(tok.decode(Ids{97, outside}), ErrorKind::BadInput, "token id " + std::to_string(outside));
  auto j = tok.to_json();
  j["merges"][0] = {97, 300};
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "merges", "\"merges\"[0]");
  j = tok.to_json();
  j["merges"][1] = {97};
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "merges", "\"merges\"[1]");
  j = tok.to_json();
  j["merges"][1] = j["merges"][0];
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, "merge 1", "which token 256 already is");
  j = tok.to_json();
  j["bytes"][0] = j["bytes"][1];
  EXPECT_ERROR(tokenizer_from_json(j), ErrorKind::BadFile, fmt::format("byte 0x{:02x}", j["bytes"][1].get<int>()),
               "has two ids, 0 and 1");
  test::TempDir dir;
  const std::string full = tok.to_json().dump();
  test::write_file(dir.path() / "cut.json", full.substr(0, full.size() - 3));
  EXPECT_ERROR(load_tokenizer_file(dir / "cut.json"), ErrorKind::BadFile, dir / "cut.json");
}

// ---------------------------------------------------------------------------------------------
// Streaming apply: equal to apply_text for every block size, with lines far longer than a block.

std::string apply_streamed(const SennrichBpe& bpe, const std::string& input, text::LineMode mode, size_t block) {
  size_t at = 0;
  std::string out;
  bpe.apply_stream(
      [&](char* buffer, size_t n) {
        const size_t k = std::min(n, input.size() - at);
        std::copy_n(input.data() + at, k, buffer);
        at += k;
        return k;
      },
      [&](std::string_view bytes) { out += bytes; }, mode, "<test>", block);
  return out;
}

TEST(BpeApplyStream, EqualsWholeTextApplyForEveryBlockSize) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  const std::vector<std::string> inputs = {
      "",
      "lowest low\n",
      "  lowest   low  slow \n\n   \nlow",
      "a\r\nb\rc\r\n\r\n  low \r",
      "low\flow \x0b low\xc2\x85 lowest\xe2\x80\xa8x  y\xe2\x80\xa9",
      "   ",
      "lowest",
      "\xc3\xa9t\xc3\xa9 lowest\tlow \xe4\xb8\xad  \n",
  };
  for (const std::string& input : inputs)
    for (auto mode : {text::LineMode::kSplitlines, text::LineMode::kUniversal})
      for (size_t block : {1, 2, 3, 5, 8, 64, 1 << 16})
        EXPECT_EQ(apply_streamed(bpe, input, mode, block), bpe.apply_text(input, mode))
            << "block " << block << " input '" << input << "'";
}

TEST(BpeApplyStream, ALineOfManyBlocksAndRandomText) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  // One 200 KB line with no newline at all, read 1 KB at a time: leading spaces, words, runs of
  // spaces, trailing spaces.
  Rng rng(5);
  const std::vector<std::string> words = {"low", "lowest", "slow", "xyz", "e", "lol", "\xc3\xa9"};
  std::string line = "   ";
  while (line.size() < 200000) {
    line += words[rng.below(words.size())];
    line += std::string(1 + rng.below(3), ' ');
  }
  line += "lowest   ";
  for (auto mode : {text::LineMode::kSplitlines, text::LineMode::kUniversal}) {
    EXPECT_EQ(apply_streamed(bpe, line, mode, 1024), bpe.apply_text(line, mode));
    EXPECT_EQ(apply_streamed(bpe, line + "\n", mode, 1000), bpe.apply_text(line + "\n", mode));
  }
  // A word longer than the block.
  const std::string long_word = "  " + std::string(5000, 'l') + "ow lowest\n";
  EXPECT_EQ(apply_streamed(bpe, long_word, text::LineMode::kSplitlines, 100),
            bpe.apply_text(long_word, text::LineMode::kSplitlines));
  // Random text over the tricky characters.
  const std::vector<std::string> atoms = {" ",    " ",        "  ",           "\n",       "\r",
                                          "\r\n", "\t",       "low",          "est",      "s",
                                          "\f",   "\xc2\x85", "\xe2\x80\xa8", "\xc3\xa9", "\xe4\xb8\xad"};
  for (int trial = 0; trial < 200; ++trial) {
    std::string input;
    const uint64_t n = rng.below(40);
    for (uint64_t k = 0; k < n; ++k) input += atoms[rng.below(atoms.size())];
    for (auto mode : {text::LineMode::kSplitlines, text::LineMode::kUniversal})
      for (size_t block : {1, 3, 7})
        ASSERT_EQ(apply_streamed(bpe, input, mode, block), bpe.apply_text(input, mode)) << "trial " << trial;
  }
}

TEST(BpeApplyStream, InvalidUtf8NamesTheOffsetInTheWholeInput) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  const std::string input = "low low\nlowest \xff low\n";
  for (size_t block : {1, 4, 100}) {
    EXPECT_ERROR(apply_streamed(bpe, input, text::LineMode::kSplitlines, block), ErrorKind::BadFile, "<test>",
                 "<test>: invalid UTF-8 at byte offset 15")
        << "block " << block;
  }
}

}  // namespace
}  // namespace tformer
