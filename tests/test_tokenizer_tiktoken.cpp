// tiktoken's cl100k_base and o200k_base (ByteBpeTokenizer::from_tiktoken, --tokenizer NAME): ids
// equal to tiktoken's own (npm tiktoken, WASM; tools/reference/gen_tiktoken_fixtures.mjs) on every
// fixture case and on 100 kB of Shakespeare, special tokens only with allow_special, exact round
// trips on any bytes (invalid UTF-8 included, where tiktoken has no say). The vocabularies come
// from scripts/fetch-tiktoken-vocab.sh; without them these tests are skipped, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bytebpe_test_util.h"
#include "core/rng.h"
#include "core/threads.h"
#include "test_util.h"
#include "tokenizer/byte_bpe.h"
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
