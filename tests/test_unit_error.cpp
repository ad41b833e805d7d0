// tformer::Error: its kind, field and message, to_string of every kind, the fail helpers, the
// context a caller adds, TF_CHECK (an Internal error naming file, line and condition) and the
// test helper EXPECT_ERROR itself.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "test_util.h"

namespace tformer {
namespace {

TEST(Error, CarriesKindFieldAndMessage) {
  const Error e(ErrorKind::BadConfig, "vocab_size", "model config: \"vocab_size\" must be positive, got 0");
  EXPECT_EQ(e.kind(), ErrorKind::BadConfig);
  EXPECT_EQ(e.field(), "vocab_size");
  EXPECT_STREQ(e.what(), "model config: \"vocab_size\" must be positive, got 0");
  const std::runtime_error& base = e;  // still a std::runtime_error for code that catches those
  EXPECT_STREQ(base.what(), e.what());
}

TEST(Error, ToStringNamesEveryKind) {
  EXPECT_EQ(to_string(ErrorKind::BadFile), "bad file");
  EXPECT_EQ(to_string(ErrorKind::BadInput), "bad input");
  EXPECT_EQ(to_string(ErrorKind::BadConfig), "bad config");
  EXPECT_EQ(to_string(ErrorKind::Unsupported), "unsupported");
  EXPECT_EQ(to_string(ErrorKind::Internal), "internal");
}

TEST(Error, FailHelpersStateKindAndFieldAndFormatTheMessage) {
  const Error file =
      test::error_of([] { fail_file("/tmp/x.codes", "{}: line {}: expected two symbols", "/tmp/x.codes", 3); });
  EXPECT_EQ(file.kind(), ErrorKind::BadFile);
  EXPECT_EQ(file.field(), "/tmp/x.codes");
  EXPECT_STREQ(file.what(), "/tmp/x.codes: line 3: expected two symbols");

  const Error input =
      test::error_of([] { fail_input("--max-new-tokens", "--max-new-tokens must be >= 0, got {}", -1); });
  EXPECT_EQ(input.kind(), ErrorKind::BadInput);
  EXPECT_EQ(input.field(), "--max-new-tokens");
  EXPECT_STREQ(input.what(), "--max-new-tokens must be >= 0, got -1");

  const Error config = test::error_of([] { fail_config("n_heads", "model config: \"n_heads\" must be positive"); });
  EXPECT_EQ(config.kind(), ErrorKind::BadConfig);
  EXPECT_EQ(config.field(), "n_heads");

  const Error unsupported = test::error_of([] { fail_unsupported("kind", "unknown kind '{}'", "wordpiece"); });
  EXPECT_EQ(unsupported.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(unsupported.field(), "kind");
  EXPECT_STREQ(unsupported.what(), "unknown kind 'wordpiece'");

  const Error general = test::error_of([] { fail(ErrorKind::BadFile, "model.safetensors", "{} + {} = {}", 1, 2, 3); });
  EXPECT_EQ(general.kind(), ErrorKind::BadFile);
  EXPECT_EQ(general.field(), "model.safetensors");
  EXPECT_STREQ(general.what(), "1 + 2 = 3");
}

TEST(Error, WithContextKeepsKindAndFieldAndPrefixesTheMessage) {
  const Error inner(ErrorKind::Unsupported, "kind", "tokenizer JSON: unknown kind 'x'");
  const Error outer = inner.with_context("/tmp/tok.json");
  EXPECT_EQ(outer.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(outer.field(), "kind");
  EXPECT_STREQ(outer.what(), "/tmp/tok.json: tokenizer JSON: unknown kind 'x'");
}

TEST(Error, CheckIsInternalAndNamesFileLineAndMessage) {
  const Error e = test::error_of([] { TF_CHECK(1 + 1 == 3, "arithmetic is off by {}", 1); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_EQ(e.field(), "");
  const std::string what = e.what();
  EXPECT_NE(what.find("arithmetic is off by 1"), std::string::npos) << what;
  EXPECT_NE(what.find("test_unit_error.cpp"), std::string::npos) << what;
  EXPECT_NE(what.find("1 + 1 == 3"), std::string::npos) << what;
  EXPECT_NO_THROW(TF_CHECK(1 + 1 == 2, "never formatted"));
}

TEST(Error, ExpectErrorChecksKindFieldAndNamedText) {
  EXPECT_ERROR(fail_config("d_model", "model config: \"d_model\" is {}, not a multiple of {}", 10, 3),
               ErrorKind::BadConfig, "d_model");
  EXPECT_ERROR(fail_config("d_model", "\"d_model\" is {}, not a multiple of {}", 10, 3), ErrorKind::BadConfig,
               "d_model", "is 10", "of 3");
  const auto thrower = [] { fail_input("position 4", "token id 9 at position 4 is out of range"); };
  EXPECT_FALSE(test::throws_error(thrower, ErrorKind::BadFile, "position 4"));   // wrong kind
  EXPECT_FALSE(test::throws_error(thrower, ErrorKind::BadInput, "position 5"));  // wrong field
  EXPECT_FALSE(test::throws_error(thrower, ErrorKind::BadInput, "position 4", "out of bounds"));
  EXPECT_TRUE(test::throws_error(thrower, ErrorKind::BadInput, "position 4", "token id 9"));
  EXPECT_FALSE(test::throws_error([] {}, ErrorKind::BadInput, "x"));                                  // nothing
  EXPECT_FALSE(test::throws_error([] { throw std::runtime_error("x"); }, ErrorKind::BadInput, "x"));  // not Error
}

}  // namespace
}  // namespace tformer
