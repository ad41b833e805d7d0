// GPT-2's byte-level BPE: a hand-worked vocabulary, ids equal to tiktoken's (fixtures from
// tools/reference/gen_tiktoken_fixtures.mjs), exact round trips including invalid UTF-8, streaming
// decode, special tokens, long runs and serialisation. The pre-tokenizer:
// test_tokenizer_gpt2_pretokenize.cpp; file validation: test_tokenizer_bytebpe_files.cpp;
// training: test_tokenizer_bytebpe_train.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bytebpe_test_util.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "core/utf8.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

using namespace std::string_literals;
using Ids = std::vector<TokenId>;
using test::gpt2;
using test::identity_bytes;
using test::random_bytes;
using test::random_text;
using test::tiny;

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

// Random vocabularies over a four-letter alphabet (merges of any two earlier tokens, so many
// tokens have splits whose parts outrank them) and random pieces: the scan, the heap and the rank
// buckets give the same tokens.
TEST(ByteBpeWorked, AllThreeMergeOrdersAgreeOnRandomVocabularies) {
  Rng rng(23);
  for (int vocab = 0; vocab < 60; ++vocab) {
    std::vector<std::string> bytes_of;
    for (int b = 0; b < 256; ++b) bytes_of.emplace_back(1, static_cast<char>(b));
    std::vector<ByteBpeTokenizer::Merge> merges;
    std::set<std::string> seen(bytes_of.begin(), bytes_of.end());
    const std::vector<TokenId> letters{'a', 'b', 'c', 'd'};
    for (int tries = 0; tries < 400 && merges.size() < 40; ++tries) {
      const auto pick = [&] {
        const size_t n = letters.size() + merges.size();
        const size_t k = rng.below(n);
        return k < letters.size() ? letters[k] : static_cast<TokenId>(256 + k - letters.size());
      };
      const TokenId a = pick(), b = pick();
      const std::string joined = bytes_of[a] + bytes_of[b];
      if (joined.size() > 6 || !seen.insert(joined).second) continue;
      merges.emplace_back(a, b);
      bytes_of.push_back(joined);
    }
    const ByteBpeTokenizer tok(identity_bytes(), merges, {});
    for (int trial = 0; trial < 40; ++trial) {
      std::string piece(1 + rng.below(70), 'a');
      for (char& c : piece) c = "abcd"[rng.below(4)];
      const Ids scan = tok.encode_piece(piece, 1);
      ASSERT_EQ(tok.encode_piece(piece, 2), scan) << "vocabulary " << vocab << ": " << piece;
      ASSERT_EQ(tok.encode_piece(piece, 3), scan) << "vocabulary " << vocab << ": " << piece;
    }
  }
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
    EXPECT_EQ(tok.encode_piece(piece, 1), tok.encode_piece(piece, 3)) << piece;
  }
}

TEST(ByteBpeWorked, ConstructorRejectsBadVocabularies) {
  auto bytes = identity_bytes();
  // A part not yet a token, the same result twice, a special token on a merge's id, two special
  // tokens on one id, a gap past any use, byte 0 twice.
  EXPECT_ERROR(ByteBpeTokenizer(bytes, {{97, 300}}, {}), ErrorKind::BadInput, "merge 0");
  EXPECT_ERROR(ByteBpeTokenizer(bytes, {{97, 98}, {97, 98}}, {}), ErrorKind::BadInput, "merge 1");
  EXPECT_ERROR(ByteBpeTokenizer(bytes, {{97, 98}}, {{"<|x|>", 256}}), ErrorKind::BadInput, "<|x|>");
  EXPECT_ERROR(ByteBpeTokenizer(bytes, {{97, 98}}, {{"<|x|>", 260}, {"<|y|>", 260}}), ErrorKind::BadInput, "<|y|>",
               "id 260");
  EXPECT_ERROR(ByteBpeTokenizer(bytes, {}, {{"<|x|>", 1 << 24}}), ErrorKind::BadInput, "special_tokens", "gap");
  bytes[1] = 0;
  EXPECT_ERROR(ByteBpeTokenizer(bytes, {}, {}), ErrorKind::BadInput, "byte 0x00");
}

TEST(ByteBpeWorked, SpecialTokensMayLeaveGapsThatAreNoTokens) {
  // tiktoken's cl100k_base numbers its special tokens 100257-100260 and 100276: the ids between
  // are no tokens. Here: merges make 256, specials 258 and 261.
  const ByteBpeTokenizer tok(identity_bytes(), {{97, 98}}, {{"<|a|>", 258}, {"<|b|>", 261}});
  EXPECT_EQ(tok.vocab_size(), 262);
  EXPECT_EQ(tok.encode("ab<|b|>", true), (std::vector<TokenId>{256, 261}));
  EXPECT_EQ(tok.decode(std::vector<TokenId>{258, 256}), "<|a|>ab");
  for (TokenId gap : {257, 259, 260})
    EXPECT_ERROR(tok.decode(std::vector<TokenId>{gap}), ErrorKind::BadInput, "token id " + std::to_string(gap),
                 "not a token (a gap among the special tokens)");
  EXPECT_ERROR(tok.decode(std::vector<TokenId>{262}), ErrorKind::BadInput, "token id 262", "outside the vocabulary");
  // The JSON form keeps them.
  EXPECT_EQ(ByteBpeTokenizer::from_json(tok.to_json()).to_json(), tok.to_json());
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
    ASSERT_EQ(gpt2().encode_piece(piece, 1), gpt2().encode_piece(piece, 3));
  }
}

// Long pieces take the rank buckets (encode_piece's choice past 4096 bytes): they must agree with
// the heap on runs of one character, on runs of short words (where later buckets receive entries
// out of position order and get sorted) and on random letters.
TEST(ByteBpeGpt2, BucketsAndHeapAgreeOnLongPieces) {
  TF_SKIP_WITHOUT_GPT2();
  Rng rng(17);
  std::vector<std::string> pieces = {std::string(9000, 'a'), std::string(5001, ' '), std::string(7000, '0')};
  for (const char* word : {"ab", "the", "ing", "xyzzy"}) {
    std::string p;
    while (p.size() < 6000) p += word;
    pieces.push_back(p);
  }
  for (int trial = 0; trial < 4; ++trial) {
    std::string p(5000 + rng.below(3000), 'a');
    for (char& c : p) c = "etaoinshrdlu"[rng.below(12)];
    pieces.push_back(p);
  }
  for (const std::string& p : pieces) {
    const Ids heap = gpt2().encode_piece(p, 2);
    ASSERT_EQ(heap, gpt2().encode_piece(p, 3)) << p.substr(0, 20);
    ASSERT_EQ(heap, gpt2().encode_piece(p)) << p.substr(0, 20);
    ASSERT_EQ(gpt2().decode(heap), p);
  }
}

TEST(ByteBpeGpt2, StreamingDecodeReproducesFixturesInWholeCharacters) {
  TF_SKIP_WITHOUT_GPT2();
  for (const auto& c : fixture_cases()) {
    ASSERT_TRUE(is_valid_utf8(c.text)) << c.name;
    StreamingDecoder decoder(gpt2());
    std::string joined;
    for (TokenId id : c.ids) {
      const std::string chunk(decoder.feed(id));
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
    EXPECT_ERROR(gpt2().decode(Ids{15496, bad}), ErrorKind::BadInput, "token id " + std::to_string(bad));
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

}  // namespace
}  // namespace tformer
