// tiktoken's cl100k_base and o200k_base (ByteBpeTokenizer::from_tiktoken, --tokenizer NAME): ids
// equal to tiktoken's own (npm tiktoken, WASM; tools/reference/gen_tiktoken_fixtures.mjs) on every
// fixture case and on 100 kB of Shakespeare, special tokens only with allow_special, exact round
// trips on any bytes (invalid UTF-8 included, where tiktoken has no say). The vocabularies come
// from scripts/fetch-tiktoken-vocab.sh; without them these tests are skipped, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "bytebpe_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "test_util.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/gpt2_pretokenize.h"
#include "tokenizer/tokenizer.h"

namespace tformer {
namespace {

using Ids = std::vector<TokenId>;

struct Encoding {
  const char* name;
  int64_t vocab_size;
  TokenId endoftext;
};

class Tiktoken : public ::testing::TestWithParam<Encoding> {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(std::string(TFORMER_SOURCE_DIR) + "/build-data/tiktoken/" + GetParam().name + ".json"))
      GTEST_SKIP() << GetParam().name << " is not in build-data/tiktoken (scripts/fetch-tiktoken-vocab.sh)";
    tok_ = tokenizer_by_name(GetParam().name);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_P(Tiktoken, LoadsWithItsSizeAndSpecialTokens) {
  EXPECT_EQ(tok_->kind(), "byte-bpe");
  EXPECT_EQ(tok_->vocab_size(), GetParam().vocab_size);
  EXPECT_EQ(tok_->eot_id(), GetParam().endoftext);
  const auto& bpe = dynamic_cast<const ByteBpeTokenizer&>(*tok_);
  EXPECT_EQ(bpe.pattern(), std::string(GetParam().name) == "cl100k_base" ? ByteBpeTokenizer::Pattern::Cl100k
                                                                         : ByteBpeTokenizer::Pattern::O200k);
  // The JSON form (a model file's tokenizer) reads back to the same tokenizer.
  EXPECT_EQ(tokenizer_from_json(tok_->to_json())->encode("Hello world, I'M 12345!"),
            tok_->encode("Hello world, I'M 12345!"));
}

TEST_P(Tiktoken, IdsEqualTiktokenOnEveryFixture) {
  const auto j = nlohmann::json::parse(test::read_file(std::string("fixtures/tiktoken_") + GetParam().name + ".json"));
  ASSERT_GE(j["cases"].size(), 50u);
  size_t checked = 0;
  for (const auto& c : j["cases"]) {
    std::string text;
    if (c.contains("text")) {
      text = c["text"].get<std::string>();
    } else {
      for (int i = 0; i < c["count"].get<int>(); ++i) text += c["repeat"].get<std::string>();
    }
    const bool allow = c["allow_special"].get<bool>();
    EXPECT_EQ(tok_->encode(text, allow), c["ids"].get<Ids>()) << c["name"].get<std::string>();
    EXPECT_EQ(tok_->decode(tok_->encode(text, allow)), text) << c["name"].get<std::string>();
    ++checked;
  }
  for (const auto& f : j["files"]) {
    const std::string text = test::read_file(f["path"].get<std::string>());
    EXPECT_EQ(tok_->encode(text), f["ids"].get<Ids>()) << f["name"].get<std::string>();
    ++checked;
  }
  EXPECT_EQ(checked, j["cases"].size() + j["files"].size());
}

// How each alternation of the two patterns is verified: the fixture's ids are tiktoken's, and for
// every alternation a mutant pattern (that alternation removed or weakened, everything else as
// compiled) gives ids that differ from tiktoken's on at least one fixture case. So no alternation
// can be wrong, missing or superfluous without some fixture case failing. (The mutant's ids: its
// pieces, each encoded by the real vocabulary.) The cases that catch each mutant are listed in
// docs/tokenizers.md. One part of each pattern no ids can pin: that a word's one-character prefix
// is not a line end ([^\r\n\p{L}\p{N}]?) -- neither vocabulary has a token holding a line end
// followed by a letter, so "\nword" as one piece or two gives the same ids.
TEST_P(Tiktoken, EveryAlternationOfThePatternIsPinnedByAFixtureCase) {
  const auto& bpe = dynamic_cast<const ByteBpeTokenizer&>(*tok_);
  const bool cl100k = std::string(GetParam().name) == "cl100k_base";
  const std::string pattern = (cl100k ? Gpt2PreTokenizer::cl100k() : Gpt2PreTokenizer::o200k()).pattern();
  // The white-space class as compiled: the text between "|[" and "]+" at the end of the pattern.
  const size_t last = pattern.rfind("|[");
  const std::string ws = pattern.substr(last + 2, pattern.size() - last - 4);
  const std::string contractions = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
  const std::string prefix = "[^\\r\\n\\p{L}\\p{N}]?";
  const std::string upper = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]", lower = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]";
  const std::string punct = " ?[^" + ws + "\\p{L}\\p{N}]+";
  const std::string newline_run = "|[" + ws + "]*[\\r\\n]+", trailing_ws = "|[" + ws + "]+(?![^" + ws + "])";
  // Each mutant: a name and (from, to) replacements, each `from` required to occur (all
  // occurrences replaced).
  struct Mutant {
    std::string name;
    std::vector<std::pair<std::string, std::string>> edits;
  };
  std::vector<Mutant> mutants;
  const auto add = [&](std::string name, std::vector<std::pair<std::string, std::string>> edits) {
    mutants.push_back({std::move(name), std::move(edits)});
  };
  if (cl100k) {
    add("contractions removed", {{contractions + "|", ""}});
    add("contractions case-sensitive", {{"(?i:", "(?:"}});
    add("letters without their one-character prefix", {{prefix + "\\p{L}+", "\\p{L}+"}});
    add("punctuation without trailing line ends", {{punct + "[\\r\\n]*", punct}});
  } else {
    add("words ending in lower case removed", {{prefix + upper + "*" + lower + "+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|", ""}});
    add("words of upper case first removed",
        {{"|" + prefix + upper + "+" + lower + "*(?i:'s|'t|'re|'ve|'m|'ll|'d)?", ""}});
    add("words without contractions", {{"(?i:'s|'t|'re|'ve|'m|'ll|'d)?", ""}});
    add("contractions case-sensitive", {{"(?i:", "(?:"}});
    add("marks not part of words", {{"\\p{Lo}\\p{M}]", "\\p{Lo}]"}});
    add("words without their one-character prefix", {{prefix, ""}});
    add("punctuation without trailing line ends and slashes", {{punct + "[\\r\\n/]*", punct}});
    add("punctuation without trailing slashes", {{punct + "[\\r\\n/]*", punct + "[\\r\\n]*"}});
  }
  add("digits in runs of any length", {{"\\p{N}{1,3}", "\\p{N}+"}});
  add("digits one at a time", {{"\\p{N}{1,3}", "\\p{N}"}});
  add("punctuation without its optional space", {{punct, "[^" + ws + "\\p{L}\\p{N}]+"}});
  add("white space then line ends removed", {{newline_run, ""}});
  add("white space not before a non-space removed", {{trailing_ws, ""}});
  add("the last white-space run one character at a time", {{"|[" + ws + "]+", "|[" + ws + "]"}});
  // \s is Unicode's White_Space in tiktoken's regex crate; PCRE2's own \s would leave out U+0085.
  add("white space without U+0085", {{"\\x{85}", ""}});

  const auto j = nlohmann::json::parse(test::read_file(std::string("fixtures/tiktoken_") + GetParam().name + ".json"));
  for (const Mutant& m : mutants) {
    std::string mutant = pattern;
    for (const auto& [from, to] : m.edits) {
      ASSERT_NE(mutant.find(from), std::string::npos) << m.name << ": '" << from << "' is not in the pattern";
      for (size_t at = mutant.find(from); at != std::string::npos; at = mutant.find(from, at + to.size()))
        mutant.replace(at, from.size(), to);
    }
    ASSERT_NE(mutant, pattern) << m.name;
    // Any one character where the mutant matches nothing (a pattern must match everywhere).
    mutant += "|(?s:.)";
    const Gpt2PreTokenizer split(mutant.c_str());
    std::vector<std::string> caught;
    for (const auto& c : j["cases"]) {
      if (!c.contains("text") || c["allow_special"].get<bool>()) continue;
      const std::string text = c["text"].get<std::string>();
      Ids ids;
      split.for_each_piece(text, [&](std::string_view piece) {
        const Ids p = bpe.encode_piece(piece);
        ids.insert(ids.end(), p.begin(), p.end());
      });
      if (ids != c["ids"].get<Ids>()) caught.push_back(c["name"].get<std::string>());
    }
    EXPECT_FALSE(caught.empty()) << "no fixture case tells the pattern from the mutant: " << m.name;
    std::string list;
    for (const auto& name : caught) list += (list.empty() ? "" : ", ") + name;
    std::cout << GetParam().name << ", mutant \"" << m.name << "\": caught by " << list << "\n";
  }
}

// The difference of Unicode versions (docs/tokenizers.md): tiktoken's regex crate knows Unicode
// 16.0's categories, PCRE2 10.42 Unicode 14.0's. A letter, digit or mark added in 15.0 or 16.0
// followed by a contraction ("'s", "'S", "'ll", ...): tiktoken takes the character as a letter,
// number or mark, then the contraction; PCRE2 sees an unassigned character, which its punctuation
// alternative takes together with the "'".
// The test pins the difference as explained, so a PCRE2 with newer tables makes it fail (and the
// documentation change).
TEST_P(Tiktoken, CharactersNewerThanPcre2sUnicodeDifferOnlyAsDocumented) {
  const auto j = nlohmann::json::parse(test::read_file(std::string("fixtures/tiktoken_") + GetParam().name + ".json"));
  ASSERT_EQ(j["known_differences"].size(), std::string(GetParam().name) == "o200k_base" ? 4u : 3u);
  for (const auto& d : j["known_differences"]) {
    SCOPED_TRACE(d["name"].get<std::string>());
    const std::string chars = d["chars"].get<std::string>(), contraction = d["contraction"].get<std::string>();
    ASSERT_EQ(d["text"].get<std::string>(), chars + contraction);
    // tiktoken: the new characters, then the contraction.
    Ids theirs = d["ids_of_the_new_characters"].get<Ids>();
    for (TokenId id : d["ids_of_contraction"].get<Ids>()) theirs.push_back(id);
    EXPECT_EQ(d["ids"].get<Ids>(), theirs);
    // tformer: the new characters with the apostrophe, then the rest of the contraction.
    Ids ours = tok_->encode(chars + "'");
    for (TokenId id : tok_->encode(contraction.substr(1))) ours.push_back(id);
    EXPECT_EQ(tok_->encode(chars + contraction), ours);
    EXPECT_NE(tok_->encode(chars + contraction), d["ids"].get<Ids>());
    // The characters alone, and the contraction alone, agree.
    EXPECT_EQ(tok_->encode(chars), d["ids_of_the_new_characters"].get<Ids>());
    EXPECT_EQ(tok_->encode(contraction), d["ids_of_contraction"].get<Ids>());
  }
}

TEST_P(Tiktoken, AnyBytesRoundTrip) {
  Rng rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const std::string text = trial % 2 ? test::random_bytes(rng, 300) : test::random_text(rng, 80, true);
    EXPECT_EQ(tok_->decode(tok_->encode(text)), text);
    EXPECT_EQ(tok_->decode(tok_->encode(text, true)), text);
  }
}

TEST(TiktokenFiles, AMissingVocabularyNamesTheCommandThatFetchesIt) {
  ASSERT_EQ(setenv("TFORMER_TIKTOKEN_DIR", "/nonexistent-tformer", 1), 0);
  const Error e = test::error_of([] { tokenizer_by_name("o200k_base"); });
  unsetenv("TFORMER_TIKTOKEN_DIR");
  EXPECT_EQ(e.kind(), ErrorKind::BadFile);
  EXPECT_NE(std::string(e.what()).find("/nonexistent-tformer/o200k_base.json"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("scripts/fetch-tiktoken-vocab.sh"), std::string::npos) << e.what();
  // A file that is not an encoder file, or holds another pattern, is refused by name.
  EXPECT_ERROR(ByteBpeTokenizer::from_tiktoken(nlohmann::json::object(), "x.json"), ErrorKind::BadFile, "x.json",
               "not a tiktoken encoder file");
  EXPECT_ERROR(ByteBpeTokenizer::from_tiktoken({{"pat_str", "\\w+"}, {"bpe_ranks", "! 0 YQ=="}}, "y.json"),
               ErrorKind::Unsupported, "pat_str");
}

// The unused ids among the special tokens are no tokens: decoding names them, generation never
// samples them (non_token_ids), and every other id below the vocabulary size is a token.
TEST_P(Tiktoken, GapsAmongTheSpecialTokensAreNotTokens) {
  // Expected: every id from the end of the merges' ids that no special token has, then the ids
  // past the vocabulary.
  const auto& bpe = dynamic_cast<const ByteBpeTokenizer&>(*tok_);
  const TokenId ordinary_end = 256 + static_cast<TokenId>(bpe.merges().size());
  const auto specials = tok_->special_tokens();
  std::vector<TokenId> gaps;
  for (TokenId id = ordinary_end; id < tok_->vocab_size(); ++id)
    if (std::none_of(specials.begin(), specials.end(), [&](const auto& s) { return s.second == id; }))
      gaps.push_back(id);
  std::vector<TokenId> expected = gaps;
  for (int k = 0; k < 3; ++k) expected.push_back(static_cast<TokenId>(tok_->vocab_size() + k));
  EXPECT_EQ(non_token_ids(*tok_, tok_->vocab_size() + 3), expected);
  if (std::string(GetParam().name) == "cl100k_base") {
    // tiktoken's cl100k_base: 100256 and 100261..100275 are unused.
    ASSERT_EQ(gaps.size(), 16u);
    EXPECT_EQ(gaps.front(), 100256);
    EXPECT_EQ(gaps[1], 100261);
    EXPECT_EQ(gaps.back(), 100275);
  }
  for (TokenId id : gaps)
    EXPECT_ERROR(tok_->decode(std::vector<TokenId>{id}), ErrorKind::BadInput, "token id " + std::to_string(id));
  EXPECT_TRUE(tok_->is_token(0));
  EXPECT_TRUE(tok_->is_token(ordinary_end - 1));
  EXPECT_FALSE(tok_->is_token(-1));
}

// A long text is split over threads at newlines (byte_bpe_encode.cpp); every pattern must give the
// same ids as one thread, also where a piece runs on past a newline: o200k's punctuation pieces
// take newlines and '/' after them (".\n/"), cl100k's take newlines (".\n").
TEST_P(Tiktoken, ParallelEncodingEqualsSerial) {
  // In the first unit the only newline between two printable characters is the one in ".\n/"; the
  // second has many.
  const std::string units[] = {"Lines end.\n/usr/bin \n",
                               "x.\n//y\n(a)\n\"b\"\nIt'S\n12345\n \n\t.\n\xe4\xb8\xad.\n/\n!?\n-- \n"};
  std::string big;
  while (big.size() < (9u << 20)) big += units[big.size() < (5u << 20) ? 0 : 1];
  const int saved = num_threads();
  set_num_threads(1);
  const Ids serial = tok_->encode(big);
  set_num_threads(4);
  const Ids parallel = tok_->encode(big);
  set_num_threads(saved);
  EXPECT_EQ(parallel, serial);
  EXPECT_EQ(tok_->decode(parallel), big);
}

INSTANTIATE_TEST_SUITE_P(Encodings, Tiktoken,
                         ::testing::Values(Encoding{"cl100k_base", 100277, 100257},
                                           Encoding{"o200k_base", 200019, 199999}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tformer
