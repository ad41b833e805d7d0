// Helpers shared by the tokenizer tests: reading fixtures, finding GPT-2's vocabulary (temp dirs:
// test_util.h's TempDir).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "test_util.h"

namespace tformer::test {

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

inline void write_file(const std::filesystem::path& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// GPT-2's encoder.json + vocab.bpe: $TFORMER_GPT2_DIR, else build-data/gpt2 in the source tree
// (scripts/fetch-gpt2-vocab.sh; `make test` runs it). nullopt when neither has the files.
inline std::optional<std::string> gpt2_dir() {
  namespace fs = std::filesystem;
  const auto has = [](const fs::path& d) {
    return fs::is_regular_file(d / "encoder.json") && fs::is_regular_file(d / "vocab.bpe");
  };
  if (const char* env = std::getenv("TFORMER_GPT2_DIR"); env && *env && has(env)) return std::string(env);
  const fs::path fixed = fs::path(TFORMER_SOURCE_DIR) / "build-data" / "gpt2";
  if (has(fixed)) return fixed.string();
  return std::nullopt;
}

#define TF_SKIP_WITHOUT_GPT2()                                                                                 \
  do {                                                                                                         \
    if (!::tformer::test::gpt2_dir())                                                                          \
      GTEST_SKIP() << "GPT-2's vocabulary is not available: run scripts/fetch-gpt2-vocab.sh (make test does) " \
                      "or set TFORMER_GPT2_DIR to a folder with encoder.json and vocab.bpe";                   \
  } while (0)

}  // namespace tformer::test
