// GPT-2's byte-level BPE: a hand-worked vocabulary, ids equal to tiktoken's (fixtures from
// tools/reference/gen_tiktoken_fixtures.mjs), exact round trips including invalid UTF-8, streaming
// decode, special tokens, long runs, the pre-tokenizer, file validation and serialisation.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/utf8.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

using namespace std::string_literals;
using Ids = std::vector<TokenId>;

std::array<unsigned char, 256> identity_bytes() {
  std::array<unsigned char, 256> b{};
  for (int i = 0; i < 256; ++i) b[i] = static_cast<unsigned char>(i);
  return b;
}

// Bytes in natural order (so 'a' = 97, ' ' = 32) and four merges:
//   256 = a b ("ab"), 257 = ab c ("abc"), 258 = b c ("bc"), 259 = a a ("aa")
ByteBpeTokenizer tiny() {
  return ByteBpeTokenizer(identity_bytes(), {{97, 98}, {256, 99}, {98, 99}, {97, 97}}, {{"<|endoftext|>", 260}});
}

const ByteBpeTokenizer& gpt2() {
  static const auto tok = std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::load_gpt2_dir(*test::gpt2_dir()));
  return *tok;
}

std::string random_bytes(Rng& rng, size_t max_len) {
  std::string s(rng.below(max_len + 1), '\0');
  for (char& c : s) c = static_cast<char>(rng.below(256));
  return s;
}

// Random text mixing ASCII, multi-byte characters and (optionally) invalid bytes.
std::string random_text(Rng& rng, size_t n_atoms, bool invalid) {
  static const std::vector<std::string> atoms = {"a",
                                                 "b",
                                                 "e",
                                                 "the",
                                                 " ",
                                                 "  ",
                                                 "\n",
                                                 "\t",
                                                 "'s",
                                                 "'",
                                                 "1",
                                                 "23",
                                                 ".",
                                                 "!",
                                                 "\xc3\xa9",
                                                 "\xe4\xb8\xad",
                                                 "\xf0\x9f\x98\x80",
                                                 "\xc2\xa0",
                                                 "\xe3\x80\x80",
                                                 "<|endoftext|>",
                                                 "A",
                                                 "Z",
                                                 "'LL",
                                                 "\r\n",
                                                 "x"};
  static const std::vector<std::string> bad = {"\xff", "\x80", "\xc3", "\xe4\xb8", "\xed\xa0\x80", "\xc0\xaf"};
  std::string s;
  for (size_t i = 0; i < n_atoms; ++i) {
    if (invalid && rng.below(8) == 0)
      s += bad[rng.below(bad.size())];
    else
      s += atoms[rng.below(atoms.size())];
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Hand-worked examples (no files needed)

TEST(ByteBpeWorked, ByteToUnicodeTable) {
  const auto& table = gpt2_byte_to_unicode();
  EXPECT_EQ(table['!'], "!");
  EXPECT_EQ(table['a'], "a");
  EXPECT_EQ(table[' '], "\xc4\xa0");   // U+0120 'Ġ': the 33rd byte without a printable self (0..32)
  EXPECT_EQ(table['\n'], "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(table[0], "\xc4\x80");     // U+0100
  EXPECT_EQ(table[0xAD], "\xc5\x83");  // U+0143, the last one
  EXPECT_EQ(table[0xE9], "\xc3\xa9");  // 'é' stands for itself
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  EXPECT_EQ(gpt2_unicode_to_bytes(gpt2_bytes_to_unicode(all)), all);
  EXPECT_FALSE(gpt2_unicode_to_bytes(" ").has_value());  // a raw space is not in the alphabet
  EXPECT_FALSE(gpt2_unicode_to_bytes("\xe4\xb8\xad").has_value());
}

TEST(ByteBpeWorked, MergesByLowestIdLeftmostFirst) {
  const ByteBpeTokenizer tok = tiny();
  // [a b c b c] -> ab(256) first -> [ab c b c] -> abc(257) -> [abc b c] -> bc(258) -> [abc bc]
  EXPECT_EQ(tok.encode_piece("abcbc"), (Ids{257, 258}));
  // [a a a]: both pairs are aa(259); the left one merges -> [aa a]
  EXPECT_EQ(tok.encode_piece("aaa"), (Ids{259, 97}));
  EXPECT_EQ(tok.encode_piece("aaaa"), (Ids{259, 259}));
  EXPECT_EQ(tok.encode_piece("abc"), (Ids{257}));  // a whole token
  EXPECT_EQ(tok.encode_piece("cab"), (Ids{99, 256}));
  // Pre-tokenized first: "abcbc" " aaa" -> [257 258] [32 259 97]
  EXPECT_EQ(tok.encode("abcbc aaa"), (Ids{257, 258, 32, 259, 97}));
  EXPECT_EQ(tok.decode(Ids{257, 258, 32, 259, 97}), "abcbc aaa");
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.eot_id(), 260);
}

TEST(ByteBpeWorked, AnySplitOfATokenMerges) {
  // tiktoken's rule: adjacent parts merge when their concatenation is a token, whichever merge made
  // it. 256 = b c, 257 = a b, 258 = ab c. "abcd": bc(256) first -> [a bc d]; a+bc = "abc" = 258,
  // although the listed merge is (ab, c) -> [abc d]. (Merging only listed pairs would stop at
  // [a bc d].)
  const ByteBpeTokenizer tok(identity_bytes(), {{98, 99}, {97, 98}, {257, 99}}, {});
  EXPECT_EQ(tok.encode_piece("abcd"), (Ids{258, 100}));
  EXPECT_EQ(tok.encode_piece("abcd", 1), (Ids{258, 100}));
  EXPECT_EQ(tok.encode_piece("abcd", 2), (Ids{258, 100}));
}

TEST(ByteBpeWorked, SpecialTokensOnlyWhenAllowed) {
  const ByteBpeTokenizer tok = tiny();
  const std::string text = "ab<|endoftext|>c";
  EXPECT_EQ(tok.encode(text, true), (Ids{256, 260, 99}));
  const Ids plain = tok.encode(text, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 260), 0);
  EXPECT_EQ(tok.decode(plain), text);
  EXPECT_EQ(tok.decode(tok.encode(text, true)), text);
}

TEST(ByteBpeWorked, ScanAndHeapAgreeOnRandomPieces) {
  const ByteBpeTokenizer tok = tiny();
  Rng rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    std::string piece(1 + rng.below(60), 'a');
    for (char& c : piece) c = "aabc"[rng.below(4)];
    EXPECT_EQ(tok.encode_piece(piece, 1), tok.encode_piece(piece, 2)) << piece;
  }
}

TEST(ByteBpeWorked, ConstructorRejectsBadVocabularies) {
  auto bytes = identity_bytes();
  EXPECT_THROW(ByteBpeTokenizer(bytes, {{97, 300}}, {}), Error);               // part not yet a token
  EXPECT_THROW(ByteBpeTokenizer(bytes, {{97, 98}, {97, 98}}, {}), Error);      // same result twice
  EXPECT_THROW(ByteBpeTokenizer(bytes, {{97, 98}}, {{"<|x|>", 300}}), Error);  // gap before special
  bytes[1] = 0;
  EXPECT_THROW(ByteBpeTokenizer(bytes, {}, {}), Error);  // byte 0 twice
}

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

// ---------------------------------------------------------------------------------------------
// GPT-2's real vocabulary

struct FixtureCase {
  std::string name, text;
  bool allow_special;
  Ids ids;
};

std::vector<FixtureCase> fixture_cases() {
  const auto j = nlohmann::json::parse(test::read_file("fixtures/tiktoken_gpt2.json"));
  std::vector<FixtureCase> cases;
  for (const auto& c : j["cases"]) {
    FixtureCase fc;
    fc.name = c["name"].get<std::string>();
    if (c.contains("text")) {
      fc.text = c["text"].get<std::string>();
    } else {
      const std::string unit = c["repeat"].get<std::string>();
      for (int i = 0; i < c["count"].get<int>(); ++i) fc.text += unit;
    }
    fc.allow_special = c["allow_special"].get<bool>();
    fc.ids = c["ids"].get<Ids>();
    cases.push_back(std::move(fc));
  }
  for (const auto& f : j["files"]) {
    FixtureCase fc;
    fc.name = f["name"].get<std::string>();
    fc.text = test::read_file(f["path"].get<std::string>());
    fc.allow_special = false;
    fc.ids = f["ids"].get<Ids>();
    cases.push_back(std::move(fc));
  }
  return cases;
}

TEST(ByteBpeGpt2, LoadsTheRealVocabulary) {
  TF_SKIP_WITHOUT_GPT2();
  const auto& tok = gpt2();
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.merges().size(), 50000u);
  EXPECT_EQ(tok.eot_id(), 50256);
  EXPECT_EQ(tok.kind(), "byte-bpe");
  EXPECT_EQ(tok.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(tok.token_bytes(220), " ");
}

TEST(ByteBpeGpt2, IdsEqualTiktokenOnEveryFixture) {
  TF_SKIP_WITHOUT_GPT2();
  const auto cases = fixture_cases();
  ASSERT_GE(cases.size(), 40u);
  for (const auto& c : cases) {
    const Ids ids = gpt2().encode(c.text, c.allow_special);
    EXPECT_EQ(ids, c.ids) << "case " << c.name;
    EXPECT_EQ(gpt2().decode(ids), c.text) << "case " << c.name;
  }
}

TEST(ByteBpeGpt2, ScanAndHeapAgreeOnFixturePieces) {
  TF_SKIP_WITHOUT_GPT2();
  for (const auto& c : fixture_cases()) {
    if (c.text.size() > 20000) continue;
    for (std::string_view piece : Gpt2PreTokenizer::instance().split(c.text))
      ASSERT_EQ(gpt2().encode_piece(piece, 1), gpt2().encode_piece(piece, 2)) << "case " << c.name;
  }
  Rng rng(13);
  for (int trial = 0; trial < 300; ++trial) {
    const std::string piece = random_bytes(rng, 80);
    ASSERT_EQ(gpt2().encode_piece(piece, 1), gpt2().encode_piece(piece, 2));
  }
}

TEST(ByteBpeGpt2, StreamingDecodeReproducesFixturesInWholeCharacters) {
  TF_SKIP_WITHOUT_GPT2();
  for (const auto& c : fixture_cases()) {
    ASSERT_TRUE(is_valid_utf8(c.text)) << c.name;
    StreamingDecoder decoder(gpt2());
    std::string joined;
    for (TokenId id : c.ids) {
      const std::string chunk = decoder.feed(id);
      ASSERT_TRUE(is_valid_utf8(chunk)) << "case " << c.name << ": a chunk splits a character";
      joined += chunk;
    }
    joined += decoder.flush();
    EXPECT_EQ(joined, c.text) << "case " << c.name;
  }
}

TEST(ByteBpeGpt2, RoundTripsRandomBytesIncludingInvalidUtf8) {
  TF_SKIP_WITHOUT_GPT2();
  Rng rng(17);
  for (int trial = 0; trial < 400; ++trial) {
    const std::string text = trial % 2 ? random_bytes(rng, 300) : random_text(rng, 80, true);
    for (bool allow : {false, true}) {
      const Ids ids = gpt2().encode(text, allow);
      ASSERT_EQ(gpt2().decode(ids), text);
      std::string streamed;
      StreamingDecoder decoder(gpt2());
      for (TokenId id : ids) streamed += decoder.feed(id);
      streamed += decoder.flush();
      ASSERT_EQ(streamed, text);
    }
  }
}

TEST(ByteBpeGpt2, InvalidBytesSplitTheTextIntoIndependentStretches) {
  TF_SKIP_WITHOUT_GPT2();
  const auto& tok = gpt2();
  const std::string a = "Hello world", b = " it's here";
  for (const std::string& bad : {"\xff"s, "\x80\x80"s, "\xe2\x80"s, "\xed\xa0\x80"s}) {
    Ids expected = tok.encode(a);
    const Ids mid = tok.encode_piece(bad);
    const Ids tail = tok.encode(b);
    expected.insert(expected.end(), mid.begin(), mid.end());
    expected.insert(expected.end(), tail.begin(), tail.end());
    EXPECT_EQ(tok.encode(a + bad + b), expected);
    EXPECT_EQ(tok.decode(tok.encode(a + bad + b)), a + bad + b);
  }
  // A lone invalid byte is one piece and every byte is a token: one id.
  EXPECT_EQ(tok.encode("\xff").size(), 1u);
}

TEST(ByteBpeGpt2, SpecialTokenOnlyWhenAllowed) {
  TF_SKIP_WITHOUT_GPT2();
  const auto& tok = gpt2();
  EXPECT_EQ(tok.encode("<|endoftext|>", true), (Ids{50256}));
  const Ids plain = tok.encode("<|endoftext|>", false);
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok.decode(Ids{50256}), "<|endoftext|>");
  EXPECT_EQ(tok.special_tokens().size(), 1u);
}

TEST(ByteBpeGpt2, DecodeOutOfRangeNamesTheId) {
  TF_SKIP_WITHOUT_GPT2();
  for (TokenId bad : {50257, -1, 1 << 30}) {
    try {
      gpt2().decode(Ids{15496, bad});
      FAIL() << "expected an error for " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(bad)), std::string::npos) << e.what();
    }
  }
}

TEST(ByteBpeGpt2, LongRunsOfOneCharacterComplete) {
  TF_SKIP_WITHOUT_GPT2();
  // One piece each; the heap keeps them O(n log n). No timing: they must simply finish.
  for (const std::string& unit : {"a"s, " "s, "\n"s, "\xe4\xb8\xad"s, "7"s, "!"s}) {
    std::string text;
    for (int i = 0; i < 300000; ++i) text += unit;
    const Ids ids = gpt2().encode(text);
    EXPECT_EQ(gpt2().decode(ids), text);
  }
}

TEST(ByteBpeGpt2, ParallelEncodingEqualsSerial) {
  TF_SKIP_WITHOUT_GPT2();
  const std::string excerpt = test::read_file("fixtures/tinyshakespeare_100k.txt");
  std::string big;
  while (big.size() < (9u << 20)) big += excerpt + "\xff \xc3" + "<|endoftext|>\n";
  const int saved = num_threads();
  set_num_threads(1);
  const Ids serial = gpt2().encode(big, true);
  set_num_threads(4);
  const Ids parallel = gpt2().encode(big, true);
  set_num_threads(saved);
  EXPECT_EQ(parallel, serial);
  EXPECT_EQ(gpt2().decode(parallel), big);
}

TEST(ByteBpeGpt2, JsonRoundTripGivesIdenticalIds) {
  TF_SKIP_WITHOUT_GPT2();
  const auto back = tokenizer_from_json(gpt2().to_json());
  EXPECT_EQ(back->kind(), "byte-bpe");
  EXPECT_EQ(back->vocab_size(), 50257);
  EXPECT_EQ(back->eot_id(), 50256);
  for (const auto& c : fixture_cases()) EXPECT_EQ(back->encode(c.text, c.allow_special), c.ids) << c.name;
}

TEST(ByteBpeGpt2, SavedGpt2FilesLoadBackIdentically) {
  TF_SKIP_WITHOUT_GPT2();
  test::TempDir dir;
  gpt2().save_gpt2(dir / "encoder.json", dir / "vocab.bpe");
  // The same bytes as OpenAI's files, up to JSON formatting.
  EXPECT_EQ(test::read_file(dir / "vocab.bpe"), test::read_file(*test::gpt2_dir() + "/vocab.bpe"));
  const ByteBpeTokenizer back = ByteBpeTokenizer::load_gpt2_dir(dir.path().string());
  EXPECT_EQ(back.merges(), gpt2().merges());
  const std::string excerpt = test::read_file("fixtures/tinyshakespeare_100k.txt");
  EXPECT_EQ(back.encode(excerpt), gpt2().encode(excerpt));
}

TEST(ByteBpeGpt2, TokenizerByNameFindsGpt2) {
  TF_SKIP_WITHOUT_GPT2();
  const auto tok = tokenizer_by_name("gpt2", *test::gpt2_dir());
  EXPECT_EQ(tok->encode("Hello world"), (Ids{15496, 995}));
}

// ---------------------------------------------------------------------------------------------
// Bad files: each error names the file and the line (or the token and id).

class ByteBpeBadFiles : public ::testing::Test {
 protected:
  void SetUp() override { tiny().save_gpt2(dir_ / "encoder.json", dir_ / "vocab.bpe"); }
  // Expects load_gpt2 to throw an Error whose message contains every one of needles.
  void expect_error(std::initializer_list<std::string> needles) {
    try {
      ByteBpeTokenizer::load_gpt2(dir_ / "encoder.json", dir_ / "vocab.bpe");
      FAIL() << "expected an error";
    } catch (const Error& e) {
      for (const auto& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
  }
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
  expect_error({"encoder.json", "line 1"});
}

TEST_F(ByteBpeBadFiles, BadHeader) {
  set_vocab("version 0.2\na b\n");
  expect_error({"vocab.bpe", "line 1", "header"});
}

TEST_F(ByteBpeBadFiles, MalformedMergeLine) {
  set_vocab("#version: 0.2\na b\nab  c\n");
  expect_error({"vocab.bpe", "line 3", "malformed"});
  set_vocab("#version: 0.2\na b\nabc\n");
  expect_error({"vocab.bpe", "line 3", "malformed"});
  set_vocab("#version: 0.2\na b\n\nab c\n");
  expect_error({"vocab.bpe", "line 3", "malformed"});
}

TEST_F(ByteBpeBadFiles, UnknownMergePart) {
  set_vocab("#version: 0.2\na b\nbc a\n");  // "bc" is not made before line 3
  expect_error({"vocab.bpe", "line 3", "'bc'"});
}

TEST_F(ByteBpeBadFiles, DuplicateMerge) {
  set_vocab("#version: 0.2\na b\nab c\na b\n");
  expect_error({"vocab.bpe", "line 4", "duplicate", "line 2"});
}

TEST_F(ByteBpeBadFiles, MergeResultMissingOrWithTheWrongId) {
  set_vocab("#version: 0.2\na b\nab c\nb c\na a\nc c\n");  // "cc" is not in encoder.json
  expect_error({"vocab.bpe", "line 6", "'cc'", "encoder.json"});
  set_vocab("#version: 0.2\nb c\na b\nab c\na a\n");  // "bc" has id 258 but is the first merge
  expect_error({"vocab.bpe", "line 2", "id 258", "expected 256"});
}

TEST_F(ByteBpeBadFiles, IdsOutsideTheVocabulary) {
  auto j = nlohmann::json::parse(encoder());
  j["<|endoftext|>"] = 9999;  // a gap after the merges
  set_encoder(j.dump());
  expect_error({"encoder.json", "9999"});
  j["<|endoftext|>"] = "x";
  set_encoder(j.dump());
  expect_error({"encoder.json", "<|endoftext|>"});
  j.erase("<|endoftext|>");
  j["zz"] = 260;  // neither a byte, a merge result nor <|special|>
  set_encoder(j.dump());
  expect_error({"encoder.json", "zz", "260"});
}

TEST_F(ByteBpeBadFiles, MissingFilesAreNamed) {
  std::filesystem::remove(dir_.path() / "vocab.bpe");
  expect_error({"vocab.bpe", "cannot open"});
}

// ---------------------------------------------------------------------------------------------
// Training

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
