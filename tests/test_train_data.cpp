// Training data: where --val-fraction splits a file (nanoGPT's split for a char tokenizer, never
// inside a UTF-8 character), a separate validation file, the token cache (reuse, invalidation,
// damaged files), and the metrics log. The batch sampler: test_train_batch_sampler.cpp.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/hash.h"
#include "core/utf8.h"
#include "test_util.h"
#include "tokenizer/char_tokenizer.h"
#include "train/data.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DataTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string put(const std::string& name, const std::string& bytes) const {
    fs::remove(path(name));
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path(name);
  }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  std::vector<std::string> cache_files(const std::string& cache) const {
    std::vector<std::string> names;
    if (!fs::exists(cache)) return names;
    for (const auto& e : fs::directory_iterator(cache)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  test::TempDir tmp_;  // a fresh folder per test, removed afterwards
  fs::path dir_ = tmp_.path();
};

// Known bytes: 1000 characters of a repeating printable pattern.
std::string known_text(size_t n) {
  std::string s(n, ' ');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + i / 13) % 26);
  return s;
}

// ---- the split --------------------------------------------------------------------------------

TEST_F(DataTest, ValFractionTakesTheLastPartAtFloorOfNineTenths) {
  const std::string text = known_text(1000);
  const std::string file = put("data.txt", text);
  const CharTokenizer tok = CharTokenizer::from_corpus(text);
  const Dataset d = load_dataset(file, "", 0.1, tok, "");
  // nanoGPT: data[:int(n*0.9)], data[int(n*0.9):], each encoded on its own.
  EXPECT_EQ(d.train, tok.encode(text.substr(0, 900)));
  EXPECT_EQ(d.val, tok.encode(text.substr(900)));
  EXPECT_THAT(d.train_source, HasSubstr("bytes [0, 900) of 1000"));
  EXPECT_THAT(d.val_source, HasSubstr("bytes [900, 1000) of 1000"));

  // The cut is floor(n * (1 - f)) as Python computes int(n * 0.9), for every n.
  for (size_t n = 1; n <= 3000; ++n) ASSERT_EQ(val_split_offset(std::string(n, 'x'), 0.1), n * 9 / 10) << n;
  // Tiny Shakespeare's size: nanoGPT's shakespeare_char has 1003854 train characters.
  EXPECT_EQ(val_split_offset(std::string(1115394, 'x'), 0.1), 1003854u);
  EXPECT_EQ(val_split_offset(std::string(1000, 'x'), 0.25), 750u);
  EXPECT_EQ(val_split_offset(std::string(1000, 'x'), 0.0), 1000u);
}

TEST_F(DataTest, SplitMovesForwardToACharacterBoundary) {
  // 10 bytes; floor(10 * 0.9) = 9 falls on the second byte of "é" (C3 A9): the cut moves to 10.
  EXPECT_EQ(val_split_offset("abcdefgh\xC3\xA9", 0.1), 10u);
  // "€" is E2 82 AC at bytes 7..9: 9 is a continuation byte -> 10.
  EXPECT_EQ(val_split_offset("abcdefg\xE2\x82\xAC", 0.1), 10u);
  // A 4-byte character F0 9F 98 80 at bytes 8..11 of 20; the cut at 9 moves to 12.
  const std::string emoji = std::string("abcdefgh") + "\xF0\x9F\x98\x80" + "ijklmnop";
  EXPECT_EQ(val_split_offset(emoji, 0.55), 12u);  // floor(20 * 0.45) = 9
  // On a lead byte or ASCII the cut stays.
  EXPECT_EQ(val_split_offset("abcdefghi\xC3\xA9xxxxxxxxx", 0.55), 9u);
  // Invalid UTF-8 (a run of continuation bytes): at most 3 steps.
  EXPECT_EQ(val_split_offset(std::string(10, '\x80'), 0.5), 8u);

  // Through load_dataset with the byte tokenizer: the parts are whole characters.
  const std::string text =
      "ab\xC3\xA9"
      "cd\xE2\x82\xAC"
      "ef";  // 11 bytes; floor(11 * 0.7) = 7 is inside "€"
  const CharTokenizer tok = CharTokenizer::bytes();
  const Dataset d = load_dataset(put("u.txt", text), "", 0.3, tok, "");
  EXPECT_EQ(tok.decode(d.train),
            "ab\xC3\xA9"
            "cd\xE2\x82\xAC");
  EXPECT_EQ(tok.decode(d.val), "ef");
  EXPECT_TRUE(is_valid_utf8(tok.decode(d.train)));
}

TEST_F(DataTest, SeparateValidationFileAndNoSplit) {
  const std::string train_text = known_text(500), val_text = "validation text";
  const CharTokenizer tok = CharTokenizer::bytes();
  const Dataset d = load_dataset(put("t.txt", train_text), put("v.txt", val_text), 0.1, tok, "");
  EXPECT_EQ(d.train, tok.encode(train_text));  // all of it: --val-fraction does not apply
  EXPECT_EQ(d.val, tok.encode(val_text));
  EXPECT_THAT(d.val_source, HasSubstr("v.txt"));

  const Dataset none = load_dataset(path("t.txt"), "", 0.0, tok, "");
  EXPECT_EQ(none.train, tok.encode(train_text));
  EXPECT_TRUE(none.val.empty());
  EXPECT_TRUE(none.val_source.empty());
}

TEST_F(DataTest, BadInputsAreErrorsNamingTheFile) {
  const CharTokenizer tok = CharTokenizer::bytes();
  const std::string file = put("t.txt", "hello");
  for (double f : {1.0, -0.1, 1.5}) {
    EXPECT_ERROR(load_dataset(file, "", f, tok, ""), ErrorKind::BadInput, "--val-fraction") << f;
  }
  EXPECT_ERROR(load_dataset(path("missing.txt"), "", 0.1, tok, ""), ErrorKind::BadFile, path("missing.txt"));
  put("empty.txt", "");
  EXPECT_ERROR(load_dataset(path("empty.txt"), "", 0.1, tok, ""), ErrorKind::BadFile, path("empty.txt"), "empty file");
  EXPECT_ERROR(load_dataset(file, path("empty.txt"), 0.0, tok, ""), ErrorKind::BadFile, path("empty.txt"),
               "empty file");
  // A byte outside a corpus alphabet: the tokenizer's own error comes through.
  EXPECT_ERROR(load_dataset(file, "", 0.0, CharTokenizer::from_corpus("xyz"), ""), ErrorKind::BadInput, "position 0");
}

// ---- the cache --------------------------------------------------------------------------------

TEST_F(DataTest, CacheIsWrittenAndReused) {
  const std::string text = known_text(2000);
  const std::string file = put("data.txt", text), cache = path("cache");
  const CharTokenizer tok = CharTokenizer::from_corpus(text);
  const Dataset first = load_dataset(file, "", 0.1, tok, cache);
  const auto files = cache_files(cache);
  ASSERT_EQ(files.size(), 2u);  // train part and val part
  for (const auto& f : files) EXPECT_THAT(f, ::testing::MatchesRegex("tokens-[0-9a-f]{16}\\.bin"));
  EXPECT_THAT(first.train_source, ::testing::Not(HasSubstr("cached")));

  const Dataset second = load_dataset(file, "", 0.1, tok, cache);
  EXPECT_THAT(second.train_source, HasSubstr("(cached)"));
  EXPECT_THAT(second.val_source, HasSubstr("(cached)"));
  EXPECT_EQ(second.train, first.train);
  EXPECT_EQ(second.val, first.val);
  EXPECT_EQ(first.train, tok.encode(text.substr(0, 1800)));
  EXPECT_EQ(cache_files(cache), files);

  // The file's layout: magic, version, id width, key, count, ids, checksum.
  const std::string bytes = slurp((fs::path(cache) / files[0]).string());
  EXPECT_EQ(bytes.substr(0, 8), "TFTOKENS");
  EXPECT_EQ(bytes[8], 1);
  EXPECT_EQ(bytes[12], 4);
  const uint64_t count = (bytes.size() - 40) / 4;
  EXPECT_TRUE(count == 1800 || count == 200) << count;
  uint64_t key = 0;
  for (int i = 7; i >= 0; --i) key = (key << 8) | static_cast<unsigned char>(bytes[16 + i]);
  EXPECT_EQ(files[0], fmt::format("tokens-{:016x}.bin", key));
}

TEST_F(DataTest, CacheIsKeyedOnContentTokenizerAndSplit) {
  const std::string text = known_text(1000), cache = path("cache");
  const std::string file = put("data.txt", text);
  const CharTokenizer bytes = CharTokenizer::bytes();
  load_dataset(file, "", 0.1, bytes, cache);
  EXPECT_EQ(cache_files(cache).size(), 2u);

  // Same size, one byte changed: new keys, fresh tokens.
  std::string changed = text;
  changed[950] = changed[950] == 'a' ? 'b' : 'a';
  put("data.txt", changed);
  const Dataset d = load_dataset(file, "", 0.1, bytes, cache);
  EXPECT_THAT(d.val_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(d.val, bytes.encode(changed.substr(900)));
  EXPECT_EQ(cache_files(cache).size(), 4u);

  // Another tokenizer, another split: new keys again.
  const CharTokenizer corpus = CharTokenizer::from_corpus(changed);
  const Dataset c = load_dataset(file, "", 0.1, corpus, cache);
  EXPECT_THAT(c.train_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(c.train, corpus.encode(changed.substr(0, 900)));
  EXPECT_EQ(cache_files(cache).size(), 6u);
  const Dataset s = load_dataset(file, "", 0.2, bytes, cache);
  EXPECT_EQ(s.train, bytes.encode(changed.substr(0, 800)));
  EXPECT_EQ(cache_files(cache).size(), 8u);
  // The same content under another name shares the cache.
  put("copy.txt", changed);
  EXPECT_THAT(load_dataset(path("copy.txt"), "", 0.2, bytes, cache).train_source, HasSubstr("(cached)"));
  EXPECT_EQ(cache_files(cache).size(), 8u);
}

TEST_F(DataTest, DamagedCacheFilesAreRewrittenNeverTrusted) {
  const std::string text = known_text(300), cache = path("cache");
  const std::string file = put("data.txt", text);
  const CharTokenizer tok = CharTokenizer::bytes();
  const Dataset good = load_dataset(file, "", 0.0, tok, cache);
  const auto files = cache_files(cache);
  ASSERT_EQ(files.size(), 1u);
  const std::string cache_file = (fs::path(cache) / files[0]).string();
  const std::string original = slurp(cache_file);

  std::vector<std::string> damaged;
  for (size_t cut : {size_t{0}, size_t{5}, size_t{31}, size_t{32}, original.size() - 1})
    damaged.push_back(original.substr(0, cut));
  damaged.push_back(original + "x");
  for (size_t at : {size_t{0}, size_t{8}, size_t{12}, size_t{16}, size_t{24}, size_t{40}, original.size() - 3}) {
    std::string flipped = original;
    flipped[at] = static_cast<char>(flipped[at] ^ 0x40);
    damaged.push_back(flipped);
  }
  std::string huge_count = original;
  huge_count[31] = '\x7f';
  damaged.push_back(huge_count);
  for (size_t i = 0; i < damaged.size(); ++i) {
    SCOPED_TRACE(i);
    std::ofstream(cache_file, std::ios::binary | std::ios::trunc) << damaged[i];
    const Dataset d = load_dataset(file, "", 0.0, tok, cache);
    EXPECT_EQ(d.train, good.train);
    EXPECT_THAT(d.train_source, ::testing::Not(HasSubstr("cached")));
    EXPECT_EQ(slurp(cache_file), original);  // rewritten
  }
  // An id outside the vocabulary under a valid key and checksum is still refused (alphabet of 3).
  const CharTokenizer small = CharTokenizer::from_corpus("abc");
  const std::string abc = put("abc.txt", "abcabc");
  load_dataset(abc, "", 0.0, small, cache);
  std::string small_file;
  for (const auto& f : cache_files(cache))
    if (f != files[0]) small_file = (fs::path(cache) / f).string();
  ASSERT_FALSE(small_file.empty());
  std::string forged = slurp(small_file);
  ASSERT_EQ(forged.size(), 40u + 4 * 6);
  forged[32] = 5;  // id 0 -> 5
  const uint64_t sum = hash64(std::string_view(forged).substr(32, 4 * 6));
  for (int i = 0; i < 8; ++i) forged[56 + i] = static_cast<char>((sum >> (8 * i)) & 0xff);
  std::ofstream(small_file, std::ios::binary | std::ios::trunc) << forged;
  const Dataset d = load_dataset(abc, "", 0.0, small, cache);
  EXPECT_THAT(d.train_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(d.train, (std::vector<TokenId>{0, 1, 2, 0, 1, 2}));
  EXPECT_THAT(load_dataset(abc, "", 0.0, small, cache).train_source, HasSubstr("(cached)"));
}

// The cache's file names are hash64 keys (core/hash.h) of the content, the tokenizer, the range
// and the options: pinned, so that a cache written by an earlier build is still found.
TEST_F(DataTest, CacheFileNamesAreStable) {
  const std::string file = put("data.txt", known_text(1000));
  const CharTokenizer tok = CharTokenizer::from_corpus(known_text(1000));
  const std::string cache = path("cache");
  load_dataset(file, "", 0.1, tok, cache);
  EXPECT_EQ(cache_files(cache),
            (std::vector<std::string>{"tokens-2febb46946d3c72a.bin", "tokens-8f70dc69b7c38308.bin"}));
}

// ---- metrics ----------------------------------------------------------------------------------

std::vector<nlohmann::json> read_jsonl(const std::string& text) {
  std::vector<nlohmann::json> out;
  size_t start = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    EXPECT_NE(nl, std::string::npos) << "every line ends with a newline";
    if (nl == std::string::npos) break;
    out.push_back(nlohmann::json::parse(text.substr(start, nl - start)));
    start = nl + 1;
  }
  return out;
}

TEST_F(DataTest, MetricsAppendAndTruncate) {
  const std::string m = path("metrics.jsonl");
  truncate_metrics_after(m, 3);  // missing: fine, and nothing created
  EXPECT_FALSE(fs::exists(m));
  append_metrics(m, {{"event", "start"}, {"config", {{"d_model", 64}}}});
  for (int step = 1; step <= 6; ++step) {
    nlohmann::json r = {{"step", step}, {"train_loss", 5.0 - step * 0.5}};
    if (step % 2 == 0) r["val_loss"] = 5.1 - step * 0.5;
    append_metrics(m, r);
  }
  auto lines = read_jsonl(slurp(m));
  ASSERT_EQ(lines.size(), 7u);
  EXPECT_EQ(lines[3]["step"], 3);
  EXPECT_DOUBLE_EQ(lines[3]["train_loss"].get<double>(), 3.5);

  truncate_metrics_after(m, 4);
  lines = read_jsonl(slurp(m));
  ASSERT_EQ(lines.size(), 5u);  // the record without a step, and steps 1..4
  EXPECT_EQ(lines[0]["event"], "start");
  EXPECT_EQ(lines[4]["step"], 4);
  EXPECT_EQ(cache_files(dir_.string()), std::vector<std::string>{"metrics.jsonl"}) << "no temporary is left";
  append_metrics(m, {{"step", 5}, {"train_loss", 1.0}});
  EXPECT_EQ(read_jsonl(slurp(m)).size(), 6u);

  // A run that died while writing its last line: that line goes.
  std::ofstream(m, std::ios::app) << "{\"step\": 6, \"train_lo";
  truncate_metrics_after(m, 100);
  EXPECT_EQ(read_jsonl(slurp(m)).size(), 6u);
  truncate_metrics_after(m, 0);
  EXPECT_EQ(read_jsonl(slurp(m)).size(), 1u);

  // A damaged line in the middle is an error naming the file and line.
  put("bad.jsonl", "{\"step\": 1}\nnot json\n{\"step\": 2}\n");
  EXPECT_ERROR(truncate_metrics_after(path("bad.jsonl"), 1), ErrorKind::BadFile, path("bad.jsonl"),
               path("bad.jsonl") + ":2:");
  EXPECT_ERROR(append_metrics(path("no-such-folder/m.jsonl"), {{"step", 1}}), ErrorKind::BadFile,
               path("no-such-folder/m.jsonl"));
}

}  // namespace
}  // namespace tformer
