// Training data: where --val-fraction splits a file (nanoGPT's split for a char tokenizer, never
// inside a UTF-8 character), a separate validation file, the token cache (reuse, invalidation,
// damaged files), and the metrics log. The batch sampler: test_train_batch_sampler.cpp.
#include <fcntl.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
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
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/sennrich_tokenizer.h"
#include "tokenizer/sentencepiece.h"
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
  EXPECT_EQ(tok.decode(d.train.to_vector()),
            "ab\xC3\xA9"
            "cd\xE2\x82\xAC");
  EXPECT_EQ(tok.decode(d.val.to_vector()), "ef");
  EXPECT_TRUE(is_valid_utf8(tok.decode(d.train.to_vector())));
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

uint64_t u64_at(const std::string& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
uint32_t u32_at(const std::string& b, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}
void set_u64(std::string& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint64_t stream_hash(std::string_view bytes) {
  Hash64Stream h;
  h.update(bytes);
  return h.finish();
}
// A cache file with both checksums recomputed after an edit (a forgery only the id check can see).
void reseal(std::string& b) {
  set_u64(b, 88, hash64(std::string_view(b).substr(0, 88)));
  const size_t payload = b.size() - 96 - 8;
  set_u64(b, 96 + payload, stream_hash(std::string_view(b).substr(96, payload)));
}

struct Messages {
  std::vector<std::string> lines;
  DataLoadOptions options(size_t chunk = size_t{8} << 20) {
    DataLoadOptions o;
    o.chunk_bytes = chunk;
    o.message = [this](const std::string& m) { lines.push_back(m); };
    return o;
  }
  bool any(const std::string& part) const {
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != l.npos; });
  }
};

TEST_F(DataTest, CacheIsWrittenRecordsItsSourceAndIsReused) {
  const std::string text = known_text(2000);
  const std::string file = put("data.txt", text), cache = path("cache");
  const CharTokenizer tok = CharTokenizer::from_corpus(text);
  Messages m;
  const Dataset first = load_dataset(file, "", 0.1, tok, cache, false, m.options());
  EXPECT_TRUE(m.any("tokenizing " + file)) << ::testing::PrintToString(m.lines);
  const auto files = cache_files(cache);
  ASSERT_EQ(files.size(), 2u);  // train part and val part
  for (const auto& f : files) EXPECT_THAT(f, ::testing::MatchesRegex("tokens-[0-9a-f]{16}\\.bin"));
  EXPECT_THAT(first.train_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(first.train.width(), 1);  // a vocabulary of at most 256 ids takes 1 byte per id

  Messages again;
  const Dataset second = load_dataset(file, "", 0.1, tok, cache, false, again.options());
  EXPECT_THAT(second.train_source, HasSubstr("(cached)"));
  EXPECT_THAT(second.val_source, HasSubstr("(cached)"));
  EXPECT_FALSE(again.any("tokenizing")) << ::testing::PrintToString(again.lines);
  EXPECT_EQ(second.train, first.train);
  EXPECT_EQ(second.val, first.val);
  EXPECT_EQ(first.train, tok.encode(text.substr(0, 1800)));
  EXPECT_EQ(first.val, tok.encode(text.substr(1800)));
  EXPECT_EQ(cache_files(cache), files);

  // The layout (data.h): header fields, their checksum, the u8 ids, the ids' checksum.
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::string key_material = fs::absolute(file).lexically_normal().string();
  auto put64 = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) key_material.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) key_material.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  };
  put64(hash64(tok.to_json().dump()));
  put32(0);  // the training part
  const double fraction = 0.1;
  uint64_t fraction_bits;
  std::memcpy(&fraction_bits, &fraction, 8);
  put64(fraction_bits);
  put32(0);  // allow_special
  put32(2);  // version
  const uint64_t train_key = hash64(key_material, 0x746f6b656e73ULL);
  const std::string name = fmt::format("tokens-{:016x}.bin", train_key);
  ASSERT_TRUE(fs::exists(fs::path(cache) / name)) << name;
  const std::string b = slurp((fs::path(cache) / name).string());
  EXPECT_EQ(b.substr(0, 8), "TFTOKENS");
  EXPECT_EQ(u32_at(b, 8), 2u);   // version
  EXPECT_EQ(u32_at(b, 12), 1u);  // bytes per id
  EXPECT_EQ(u64_at(b, 16), train_key);
  EXPECT_EQ(u64_at(b, 24), 1800u);  // count
  EXPECT_EQ(u64_at(b, 32), 2000u);  // source size
  EXPECT_EQ(static_cast<int64_t>(u64_at(b, 40)), mtime);
  EXPECT_EQ(u64_at(b, 48), stream_hash(text));  // the whole file's content
  EXPECT_EQ(u64_at(b, 56), hash64(tok.to_json().dump()));
  EXPECT_EQ(u64_at(b, 64), 0u);
  EXPECT_EQ(u64_at(b, 72), 1800u);
  EXPECT_EQ(u32_at(b, 80), 0u);
  EXPECT_EQ(u32_at(b, 84), static_cast<uint32_t>(tok.vocab_size()));
  EXPECT_EQ(u64_at(b, 88), hash64(std::string_view(b).substr(0, 88)));
  ASSERT_EQ(b.size(), 96u + 1800 + 8);
  const auto ids = tok.encode(text.substr(0, 1800));
  for (size_t i = 0; i < 1800; i += 97) EXPECT_EQ(static_cast<TokenId>(static_cast<unsigned char>(b[96 + i])), ids[i]);
  EXPECT_EQ(u64_at(b, 96 + 1800), stream_hash(std::string_view(b).substr(96, 1800)));
}

// A tokenizer with more than 65,536 ids (only the cache's id width is under test).
class WideTokenizer : public Tokenizer {
 public:
  std::string kind() const override { return "char"; }
  int64_t vocab_size() const override { return 70000; }
  std::vector<TokenId> encode(std::string_view text, bool) const override {
    std::vector<TokenId> ids;
    for (unsigned char c : text) ids.push_back(65600 + c);
    return ids;
  }
  void append_token_bytes(TokenId id, std::string& out) const override { out.push_back(static_cast<char>(id - 65600)); }
  nlohmann::json to_json() const override { return {{"kind", "wide"}}; }
  bool cuts_at_lines() const override { return true; }
};

TEST_F(DataTest, CacheTakesTheSmallestIdWidth) {
  const std::string text = known_text(300);
  const std::string file = put("data.txt", text), cache = path("cache");
  const WideTokenizer wide;
  const Dataset d = load_dataset(file, "", 0.0, wide, cache);
  EXPECT_EQ(d.train.width(), 4);
  EXPECT_EQ(d.train, wide.encode(text, false));
  const Dataset again = load_dataset(file, "", 0.0, wide, cache);
  EXPECT_THAT(again.train_source, HasSubstr("(cached)"));
  EXPECT_EQ(again.train, wide.encode(text, false));
  EXPECT_EQ(fs::file_size(fs::path(cache) / cache_files(cache)[0]), 96u + 4 * 300 + 8);
  // 256 ids (the byte tokenizer): 1 byte; 400 ids: 2 bytes.
  const Dataset bytes = load_dataset(file, "", 0.0, CharTokenizer::bytes(), path("c1"));
  EXPECT_EQ(bytes.train.width(), 1);
  EXPECT_EQ(bytes.train, CharTokenizer::bytes().encode(text));
  const ByteBpeTokenizer bpe = train_byte_bpe(text + text, {.vocab_size = 400, .min_frequency = 1});
  ASSERT_GT(bpe.vocab_size(), 256);
  const Dataset two = load_dataset(file, "", 0.0, bpe, path("c2"));
  EXPECT_EQ(two.train.width(), 2);
  EXPECT_EQ(two.train, bpe.encode(text));
  EXPECT_EQ(load_dataset(file, "", 0.0, bpe, path("c2")).train, bpe.encode(text));
}

TEST_F(DataTest, AChangedSourceIsTokenizedAgainWithAMessage) {
  const std::string text = known_text(1000), cache = path("cache");
  const std::string file = put("data.txt", text);
  const CharTokenizer bytes = CharTokenizer::bytes();
  load_dataset(file, "", 0.1, bytes, cache);
  const auto files = cache_files(cache);
  ASSERT_EQ(files.size(), 2u);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);

  // Same size and modification time, one byte changed: only the content hash tells.
  std::string changed = text;
  changed[950] = changed[950] == 'a' ? 'b' : 'a';
  put("data.txt", changed);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);
  Messages m;
  Dataset d = load_dataset(file, "", 0.1, bytes, cache, false, m.options());
  EXPECT_TRUE(m.any("made from other contents of " + file)) << ::testing::PrintToString(m.lines);
  EXPECT_THAT(d.val_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(d.val, bytes.encode(changed.substr(900)));
  EXPECT_EQ(cache_files(cache), files);  // rewritten in place, under the same names

  // Modified later (same bytes): the time tells, naming both times.
  const struct timespec later[2] = {{st.st_atim.tv_sec + 5, 0}, {st.st_mtim.tv_sec + 5, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), later, 0), 0);
  Messages t;
  d = load_dataset(file, "", 0.1, bytes, cache, false, t.options());
  EXPECT_TRUE(t.any("it was modified at")) << ::testing::PrintToString(t.lines);
  EXPECT_EQ(d.train, bytes.encode(changed.substr(0, 900)));
  EXPECT_THAT(load_dataset(file, "", 0.1, bytes, cache).train_source, HasSubstr("(cached)"));

  // Grown: the size tells.
  put("data.txt", changed + "more");
  Messages g;
  d = load_dataset(file, "", 0.1, bytes, cache, false, g.options());
  EXPECT_TRUE(g.any("made from bytes [0, 900) of " + file + " when it had 1000 bytes; it now has 1004"))
      << ::testing::PrintToString(g.lines);
  const size_t cut = 1004 * 9 / 10;
  EXPECT_EQ(d.train, bytes.encode((changed + "more").substr(0, cut)));
  EXPECT_EQ(cache_files(cache), files);  // the same two files, rewritten

  // Another tokenizer, another split, another path: files of their own.
  const CharTokenizer corpus = CharTokenizer::from_corpus(changed + "more");
  const Dataset c = load_dataset(file, "", 0.1, corpus, cache);
  EXPECT_THAT(c.train_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(c.train, corpus.encode((changed + "more").substr(0, cut)));
  EXPECT_EQ(cache_files(cache).size(), 4u);
  const Dataset s = load_dataset(file, "", 0.2, bytes, cache);
  EXPECT_EQ(s.train, bytes.encode((changed + "more").substr(0, 1004 * 8 / 10)));
  EXPECT_EQ(cache_files(cache).size(), 6u);
  put("copy.txt", changed + "more");
  EXPECT_THAT(load_dataset(path("copy.txt"), "", 0.2, bytes, cache).train_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(cache_files(cache).size(), 8u);
  EXPECT_THAT(load_dataset(path("copy.txt"), "", 0.2, bytes, cache).train_source, HasSubstr("(cached)"));
}

TEST_F(DataTest, DamagedCacheFilesAreRewrittenNeverTrusted) {
  const std::string text = known_text(300), cache = path("cache");
  const std::string file = put("data.txt", text);
  const CharTokenizer tok = CharTokenizer::bytes();
  // The ids copied out: the test replaces the cache file under the mapping (tformer itself only
  // ever replaces a cache file by renaming a new one over it, which leaves a mapping valid).
  const std::vector<TokenId> good = load_dataset(file, "", 0.0, tok, cache).train.to_vector();
  const auto files = cache_files(cache);
  ASSERT_EQ(files.size(), 1u);
  const std::string cache_file = (fs::path(cache) / files[0]).string();
  const std::string original = slurp(cache_file);
  ASSERT_EQ(original.size(), 96u + 300 + 8);

  std::vector<std::string> damaged;
  for (size_t cut : {size_t{0}, size_t{5}, size_t{95}, size_t{96}, size_t{103}, original.size() - 1})
    damaged.push_back(original.substr(0, cut));
  damaged.push_back(original + "x");
  damaged.push_back(original + "xy");
  for (size_t at : {0, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 80, 84, 88, 96, 400})
    for (char bit : {'\x01', '\x40'}) {
      std::string flipped = original;
      flipped[at] = static_cast<char>(flipped[at] ^ bit);
      damaged.push_back(flipped);
    }
  damaged.push_back(original);
  damaged.back()[original.size() - 3] ^= 0x10;  // the ids' checksum
  std::string huge_count = original;
  huge_count[31] = '\x7f';
  reseal(huge_count);
  damaged.push_back(huge_count);
  for (size_t i = 0; i < damaged.size(); ++i) {
    SCOPED_TRACE(i);
    fs::remove(cache_file);
    std::ofstream(cache_file, std::ios::binary | std::ios::trunc) << damaged[i];
    Messages m;
    const Dataset d = load_dataset(file, "", 0.0, tok, cache, false, m.options());
    EXPECT_EQ(d.train, good);
    EXPECT_THAT(d.train_source, ::testing::Not(HasSubstr("cached")));
    EXPECT_TRUE(m.any("token cache " + cache_file + ": ")) << ::testing::PrintToString(m.lines);
    EXPECT_EQ(slurp(cache_file), original);  // rewritten
  }
  // An id outside the vocabulary under valid checksums is still refused (alphabet of 3).
  const CharTokenizer small = CharTokenizer::from_corpus("abc");
  const std::string abc = put("abc.txt", "abcabc");
  load_dataset(abc, "", 0.0, small, cache);
  std::string small_file;
  for (const auto& f : cache_files(cache))
    if (f != files[0]) small_file = (fs::path(cache) / f).string();
  ASSERT_FALSE(small_file.empty());
  std::string forged = slurp(small_file);
  ASSERT_EQ(forged.size(), 96u + 6 + 8);
  forged[96] = 5;  // id 0 -> 5
  reseal(forged);
  fs::remove(small_file);
  std::ofstream(small_file, std::ios::binary | std::ios::trunc) << forged;
  Messages m;
  const Dataset d = load_dataset(abc, "", 0.0, small, cache, false, m.options());
  EXPECT_TRUE(m.any("id 5 at position 0 is outside the vocabulary of 3")) << ::testing::PrintToString(m.lines);
  EXPECT_THAT(d.train_source, ::testing::Not(HasSubstr("cached")));
  EXPECT_EQ(d.train, (std::vector<TokenId>{0, 1, 2, 0, 1, 2}));
  EXPECT_THAT(load_dataset(abc, "", 0.0, small, cache).train_source, HasSubstr("(cached)"));
}

// The source is read once per load, whatever the split and whether the cache is used: the
// progress callback sees its bytes once, in order.
TEST_F(DataTest, TheSourceIsReadOnce) {
  std::string text;
  while (text.size() < (size_t{3} << 20)) text += known_text(997) + "\n";
  const std::string file = put("big.txt", text), cache = path("cache");
  const CharTokenizer tok = CharTokenizer::bytes();
  for (int pass = 0; pass < 2; ++pass) {
    for (double f : {0.0, 0.1}) {
      SCOPED_TRACE(fmt::format("pass {} f {}", pass, f));
      std::vector<uint64_t> seen;
      DataLoadOptions o;
      o.chunk_bytes = 100000;
      o.progress = [&](uint64_t done, uint64_t total) {
        EXPECT_EQ(total, text.size());
        seen.push_back(done);
      };
      const Dataset d = load_dataset(file, "", f, tok, cache, false, o);
      ASSERT_FALSE(seen.empty());
      EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end()) << "no block twice";
      EXPECT_EQ(seen.back(), text.size());
      EXPECT_EQ(d.train_source.find("(cached)") != std::string::npos, pass == 1);
      EXPECT_EQ(d.train.size() + d.val.size(), text.size());
    }
  }
}

// A part is tokenized in pieces cut at next_cut_point, in parallel: the ids equal those of the
// part encoded whole, for every kind of tokenizer, with and without special tokens, with and
// without a cache.
TEST_F(DataTest, PiecesTokenizeToTheIdsOfTheWholeText) {
  std::string corpus = slurp("fixtures/tinyshakespeare_100k.txt").substr(0, 40000);
  // Unicode, spaces before newlines, CRLF, tabs, digits, a special token beside a newline.
  corpus += "caf\xc3\xa9\nna\xc3\xafve  \n\n\tx\r\ny<|endoftext|>\nz 12345\n\xe2\x80\xa8q\n'tis\n";
  corpus += corpus.substr(0, 5000);
  const std::string file = put("c.txt", corpus);
  ASSERT_NE(next_cut_point(corpus, 100), std::string::npos);

  std::vector<std::pair<std::string, std::unique_ptr<Tokenizer>>> toks;
  toks.emplace_back("char", std::make_unique<CharTokenizer>(CharTokenizer::bytes()));
  for (auto pattern : {ByteBpeTokenizer::Pattern::Gpt2, ByteBpeTokenizer::Pattern::Cl100k,
                       ByteBpeTokenizer::Pattern::O200k, ByteBpeTokenizer::Pattern::LlamaCppDefault}) {
    ByteBpeTokenizer t = train_byte_bpe(corpus.substr(0, 20000), {.vocab_size = 400, .pattern = pattern});
    t.set_pattern(pattern);
    toks.emplace_back(std::string("byte-bpe ") + ByteBpeTokenizer::pattern_name(pattern),
                      std::make_unique<ByteBpeTokenizer>(std::move(t)));
  }
  toks.emplace_back("bpe",
                    std::make_unique<SennrichTokenizer>(SennrichTokenizer::load_codes("fixtures/bpe/toy.codes")));
  toks.emplace_back("sentencepiece", std::make_unique<SentencePieceTokenizer>(
                                         SentencePieceTokenizer::load("fixtures/sentencepiece/multi.model")));
  for (const auto& [name, tok] : toks) {
    EXPECT_EQ(tok->cuts_at_lines(), name != "sentencepiece" && name != "byte-bpe llama.cpp-default") << name;
    for (bool special : {false, true}) {
      const auto train = tok->encode(std::string_view(corpus).substr(0, 45000), special);
      const auto val = tok->encode(std::string_view(corpus).substr(45000), special);
      for (size_t chunk : {size_t{1}, size_t{200}, size_t{7000}}) {
        SCOPED_TRACE(fmt::format("{} special {} chunk {}", name, special, chunk));
        const double f = 1.0 - 45000.0 / static_cast<double>(corpus.size());
        ASSERT_EQ(val_split_offset(corpus, f), 45000u);
        Messages m;
        const Dataset mem = load_dataset(file, "", f, *tok, "", special, m.options(chunk));
        EXPECT_TRUE(mem.train == train);
        EXPECT_TRUE(mem.val == val);
        const std::string cache = path(fmt::format("cache-{}-{}", special, chunk));
        const Dataset cached = load_dataset(file, "", f, *tok, cache, special, m.options(chunk));
        EXPECT_TRUE(cached.train == train);
        EXPECT_TRUE(cached.val == val);
      }
    }
  }
}

TEST_F(DataTest, AnErrorInAPieceNamesTheFileAndTheByte) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "xyz\nzyx\n";
  text += "xyQ\n";
  const std::string file = put("t.txt", text);
  Messages m;
  EXPECT_ERROR(load_dataset(file, "", 0.0, CharTokenizer::from_corpus("xyz\n"), "", false, m.options(16)),
               ErrorKind::BadInput, "position 2", file + ": the piece at byte 400: ");
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
