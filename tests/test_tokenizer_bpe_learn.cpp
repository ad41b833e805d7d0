// Sennrich BPE learning: hand-derived toy corpora (ties, overlaps, </w>, Unicode, separators,
// min-frequency, 64-bit counts) and equality with subword-nmt 0.3.9's real output.
#include <gtest/gtest.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "core/threads.h"
#include "test_util.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer {
namespace {

using Merges = std::vector<std::pair<std::string, std::string>>;

// A file `name` holding `bytes` in dir.
std::string temp_file(const test::TempDir& dir, const std::string& name, const std::string& bytes) {
  std::string path = dir / name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  EXPECT_TRUE(f != nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

BpeLearnResult learn_text(const std::string& text, int64_t merges, int64_t min_frequency = 2) {
  BpeLearnOptions options;
  options.merges = merges;
  options.min_frequency = min_frequency;
  return learn_bpe_from_word_counts(bpe_count_words(text, "<test>"), options);
}

std::vector<std::pair<std::string, uint64_t>> counts_of(const std::string& text) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& w : bpe_count_words(text, "<test>")) out.emplace_back(w.word, w.count);
  return out;
}

// Words "aaaa" x3 and "ab" x2 (the header's worked example):
//   a a a a</w> x3, a b</w> x2
//   1. (a, a) = 2 per word (overlapping) x3 = 6            -> aa a a</w>
//   2. (aa, a) = 3 and (a, a</w>) = 3 tie; "aa" > "a"        -> aaa a</w>   ((a, a</w>) drops to 0)
//   3. (aaa, a</w>) = 3                                      -> aaaa</w>
//   4. (a, b</w>) = 2                                        -> ab</w>
//   then every count is 0 < 2: stop.
TEST(BpeLearn, WorkedExampleOverlapsAndTies) {
  const BpeLearnResult r = learn_text("aaaa aaaa aaaa ab ab", 100);
  EXPECT_EQ(r.merges, (Merges{{"a", "a"}, {"aa", "a"}, {"aaa", "a</w>"}, {"a", "b</w>"}}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{6, 3, 3, 2}));
  EXPECT_EQ(r.stop_reason, "no pair has frequency >= 2. Stopping");
  EXPECT_EQ(format_bpe_codes(r.merges), "#version: 0.2\na a\naa a\naaa a</w>\na b</w>\n");
}

// "aaaaa" x2: a a a a a</w> (four a's and a</w>).
//   1. (a, a) occurs 3 times per word, overlapping (0-1, 1-2, 2-3): count 6. Merged left to right
//      without overlap: [aa][aa][a</w>]; (a, a</w>) drops from 2 to 0.
//   2. (aa, aa) 2 and (aa, a</w>) 2 tie; the second symbols compare "aa" > "a</w>" ('a' 0x61 >
//      '<' 0x3C), so (aa, aa)                          -> [aaaa][a</w>]
//   3. (aaaa, a</w>) 2                                 -> [aaaaa</w>]
TEST(BpeLearn, OverlappingRunIsMergedLeftToRight) {
  const BpeLearnResult r = learn_text("aaaaa aaaaa", 100);
  EXPECT_EQ(r.merges, (Merges{{"a", "a"}, {"aa", "aa"}, {"aaaa", "a</w>"}}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{6, 2, 2}));
}

// Ties resolve to the greatest (first, second) by code points, "</w>" compared as characters.
//   "ab ab ac ac": (a, b</w>) 2 and (a, c</w>) 2; "c</w>" > "b</w>"  -> (a, c</w>) first.
//   "ab abx" (min 1): (a, b</w>) 1, (a, b) 1, (b, x</w>) 1: first symbols a, a, b -> (b, x</w>);
//     then (a, b</w>) 1 and (a, bx</w>) 1: "bx</w>" > "b</w>" ('x' > '<') -> (a, bx</w>); then (a, b</w>).
TEST(BpeLearn, TieBreakIsGreatestPairByCodePoints) {
  EXPECT_EQ(learn_text("ab ab ac ac", 100).merges, (Merges{{"a", "c</w>"}, {"a", "b</w>"}}));
  const BpeLearnResult r = learn_text("ab abx", 100, 1);
  EXPECT_EQ(r.merges, (Merges{{"b", "x</w>"}, {"a", "bx</w>"}, {"a", "b</w>"}}));
  EXPECT_EQ(r.stop_reason, "no pair has frequency >= 1. Stopping");
  // "ba ab": (b, a</w>) 1 and (a, b</w>) 1 -> 'b' > 'a'.
  EXPECT_EQ(learn_text("ab ba", 100, 1).merges, (Merges{{"b", "a</w>"}, {"a", "b</w>"}}));
}

// The end-of-word marker belongs to the last character: "e</w>" is one symbol, different from "e".
//   "the the the then": t h e</w> x3, t h e n</w> x1
//   1. (t, h) 4   2. (th, e</w>) 3   3. (th, e) 1 < 2 -> stop
TEST(BpeLearn, EndOfWordIsPartOfTheLastSymbol) {
  const BpeLearnResult r = learn_text("the the the then", 100);
  EXPECT_EQ(r.merges, (Merges{{"t", "h"}, {"th", "e</w>"}}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{4, 3}));
}

// Code-point order, not UTF-16 order: U+FF01 (fullwidth '!', EF BC 81) < U+1F600 (F0 9F 98 80),
// although in UTF-16 the emoji's surrogate D83D sorts before FF01.
//   "中文" x3: (中, 文</w>) 3;  "x😀" x2: (x, 😀</w>) 2;  "x！" x2: (x, ！</w>) 2  -> emoji pair first.
TEST(BpeLearn, UnicodeCodePointsAndOrder) {
  const BpeLearnResult r = learn_text("中文 中文 中文 x！ x😀 x😀 x！", 100);
  EXPECT_EQ(r.merges, (Merges{{"中", "文</w>"}, {"x", "😀</w>"}, {"x", "！</w>"}}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{3, 2, 2}));
  EXPECT_EQ(r.initial_vocab_size, 5);  // 中, 文</w>, x, ！</w>, 😀</w>
}

// Tabs and no-break spaces are word characters; only ' ' separates words.
//   "a\tb a\tb": a \t b</w> x2: (a, \t) 2 and (\t, b</w>) 2 tie; 'a' > '\t'   -> (a, \t), then (a\t, b</w>).
//   "a\u00a0b" x2 likewise: (a, \u00a0) vs (\u00a0, b</w>): U+00A0 > 'a'         -> (\u00a0, b</w>) first.
TEST(BpeLearn, TabsAndNoBreakSpacesStayInsideWords) {
  EXPECT_EQ(learn_text("a\tb a\tb", 100).merges, (Merges{{"a", "\t"}, {"a\t", "b</w>"}}));
  EXPECT_EQ(learn_text("a\u00a0b a\u00a0b", 100).merges, (Merges{{"\u00a0", "b</w>"}, {"a", "\u00a0b</w>"}}));
}

// Empty lines, runs of spaces, \r\n and leading/trailing spaces produce no empty words.
TEST(BpeLearn, WordSplittingSpacesAndEmptyLines) {
  EXPECT_EQ(counts_of("  a  b  \n\n\n  \r\n a\r\nb\r"),
            (std::vector<std::pair<std::string, uint64_t>>{{"a", 2}, {"b", 2}}));
  EXPECT_TRUE(counts_of("").empty());
  EXPECT_TRUE(counts_of(" \n \r\n").empty());
}

// subword-nmt reads files through codecs.open, whose lines are str.splitlines(keepends=True): a
// line also ends at \v, \f, \x1c, \x1d, \x1e, U+0085, U+2028, U+2029, and since strip('\r\n ')
// keeps those characters, each stays at the end of the word before it.
//   "ab\fab ab"  -> lines "ab\f", "ab ab" -> words "ab\f" x1, "ab" x2
//   (io.open's universal newlines would instead give "ab\fab" x1, "ab" x1.)
TEST(BpeLearn, PythonLineBreaksSplitWordsAndStayInThem) {
  EXPECT_EQ(counts_of("ab\fab ab"), (std::vector<std::pair<std::string, uint64_t>>{{"ab", 2}, {"ab\f", 1}}));
  for (const std::string sep : {"\v", "\f", "\x1c", "\x1d", "\x1e", "\u0085", "\u2028", "\u2029"}) {
    EXPECT_EQ(counts_of("x" + sep + "y"), (std::vector<std::pair<std::string, uint64_t>>{{"x" + sep, 1}, {"y", 1}}))
        << "separator bytes " << sep.size();
    std::vector<std::pair<std::string, uint64_t>> want = {{"x", 1}, {sep, 2}, {"y", 1}};
    std::sort(want.begin(), want.end());  // words come back sorted by bytes
    EXPECT_EQ(counts_of("x " + sep + sep + "y"), want);
  }
  EXPECT_EQ(counts_of("ab\rcd\r\nab"), (std::vector<std::pair<std::string, uint64_t>>{{"ab", 2}, {"cd", 1}}));
  // U+00A0 and U+2027 share lead bytes with the breaks but are not breaks.
  EXPECT_EQ(counts_of("a\u00a0b\u2027c"), (std::vector<std::pair<std::string, uint64_t>>{{"a\u00a0b\u2027c", 1}}));
  // A case where the split changes the merges. "ab\fab\fab" is read as "ab\f" x2 and "ab" x1:
  //   (a, b) 2, (b, \f</w>) 2, (a, b</w>) 1; tie at 2, 'b' > 'a'   -> (b, \f</w>)
  //   then (a, b\f</w>) 2                                         -> ab\f</w>;  (a, b</w>) 1 < 2: stop.
  // Read as one word (universal newlines) it would be a b \f a b \f a b</w>, whose first merge is (b, \f).
  const BpeLearnResult r = learn_text("ab\fab\fab", 100);
  EXPECT_EQ(r.merges, (Merges{{"b", "\f</w>"}, {"a", "b\f</w>"}}));
}

TEST(BpeLearn, MinFrequencyStopsEarly) {
  // (a, b</w>) 3, (c, d</w>) 2: min 3 keeps one merge.
  const BpeLearnResult r = learn_text("ab ab ab cd cd", 100, 3);
  EXPECT_EQ(r.merges, (Merges{{"a", "b</w>"}}));
  EXPECT_EQ(r.stop_reason, "no pair has frequency >= 3. Stopping");
  // The merge limit stops first when reached.
  const BpeLearnResult two = learn_text("ab ab ab cd cd", 1, 2);
  EXPECT_EQ(two.merges.size(), 1u);
  EXPECT_EQ(two.stop_reason, "");
  EXPECT_EQ(learn_text("ab ab ab cd cd", 0).merges.size(), 0u);
}

TEST(BpeLearn, EmptyInputGivesHeaderOnly) {
  const BpeLearnResult r = learn_text("", 10);
  EXPECT_TRUE(r.merges.empty());
  EXPECT_EQ(r.stop_reason, "no symbol pairs in the input");
  EXPECT_EQ(format_bpe_codes(r.merges), "#version: 0.2\n");
  EXPECT_TRUE(learn_text("a b c\n", 10).merges.empty());  // single characters: no pairs
}

// Counts above 2^32 (32-bit counts would wrap: 4.3e9 mod 2^32 = 5,032,704).
//   words: ab 3e9, ac 4.3e9, xyz 2e9, xyw 2e9
//   1. (a, c</w>) 4.3e9      vocab 7 + 1 = 8   (a, b</w>, c</w>, x, y, z</w>, w</w>)
//   2. (x, y) 4e9 (a sum)     vocab 9
//   3. (a, b</w>) 3e9        vocab 10
//   4. (xy, z</w>) 2e9 ties (xy, w</w>) 2e9; 'z' > 'w'   vocab 11
//   5. (xy, w</w>) 2e9       vocab 12
TEST(BpeLearn, CountsAbove2To32) {
  std::vector<BpeWordCount> words = {
      {"ab", 3'000'000'000ULL}, {"ac", 4'300'000'000ULL}, {"xyz", 2'000'000'000ULL}, {"xyw", 2'000'000'000ULL}};
  std::vector<BpeStep> steps;
  BpeLearnOptions options;
  options.merges = 100;
  options.on_step = [&](const BpeStep& s) { steps.push_back(s); };
  const BpeLearnResult r = learn_bpe_from_word_counts(words, options);
  EXPECT_EQ(r.merges, (Merges{{"a", "c</w>"}, {"x", "y"}, {"a", "b</w>"}, {"xy", "z</w>"}, {"xy", "w</w>"}}));
  EXPECT_EQ(r.counts, (std::vector<int64_t>{4'300'000'000LL, 4'000'000'000LL, 3'000'000'000LL, 2'000'000'000LL,
                                            2'000'000'000LL}));
  EXPECT_EQ(r.initial_vocab_size, 7);
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps[1].step, 2);
  EXPECT_EQ(steps[1].first, "x");
  EXPECT_EQ(steps[1].second, "y");
  EXPECT_EQ(steps[1].symbol, "xy");
  EXPECT_EQ(steps[1].count, 4'000'000'000LL);
  EXPECT_EQ(steps[1].vocab_size, 9);
  EXPECT_EQ(steps[4].symbol, "xyw</w>");
  EXPECT_EQ(steps[4].vocab_size, 12);
}

TEST(BpeLearn, BadInputAndOptions) {
  const test::TempDir dir;
  const std::string path = temp_file(dir, "bad.txt", "good line\nbad \xff byte\n");
  EXPECT_ERROR(learn_bpe({path}, BpeLearnOptions{}), ErrorKind::BadFile, path, "byte offset 14");
  // Surrogates and overlong forms are invalid, as in Python.
  EXPECT_ERROR(bpe_count_words("a \xed\xa0\x80", "<t>"), ErrorKind::BadFile, "<t>", "byte offset 2");
  EXPECT_ERROR(bpe_count_words("a \xc0\xaf", "<t>"), ErrorKind::BadFile, "<t>", "byte offset 2");
  EXPECT_ERROR(bpe_count_words("a \xf4\x90\x80\x80", "<t>"), ErrorKind::BadFile, "<t>", "byte offset 2");
  EXPECT_ERROR(learn_bpe({path + ".missing"}, BpeLearnOptions{}), ErrorKind::BadFile, path + ".missing");
  BpeLearnOptions bad;
  bad.min_frequency = 0;
  EXPECT_ERROR(learn_bpe_from_word_counts({{"ab", 1}}, bad), ErrorKind::BadInput, "min_frequency");
  EXPECT_ERROR(learn_bpe_from_word_counts({{"a b", 1}}, BpeLearnOptions{}), ErrorKind::BadInput, "a b");
}

// Files: counts summed, each file's lines its own; the result equals counting the text.
TEST(BpeLearn, SeveralInputFiles) {
  const test::TempDir dir;
  const std::string a = temp_file(dir, "a.txt", "ab ab\nxy"), b = temp_file(dir, "b.txt", "z ab\n");
  const auto words = bpe_count_words_in_files({a, b});
  ASSERT_EQ(words.size(), 3u);
  EXPECT_EQ(words[0].word, "ab");
  EXPECT_EQ(words[0].count, 3u);
  EXPECT_EQ(words[1].word, "xy");  // not "xyz": the files are not glued together
  EXPECT_EQ(words[2].word, "z");
}

// ---- equality with subword-nmt's own output ----

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// subword-nmt's loop never looks at the requested number of merges, so its output for N merges is
// the first N lines of its output for more (checked on the fixtures: s1000 is a prefix of s10000).
void expect_same_as_subword_nmt(const std::string& corpus, const std::string& codes, int64_t merges) {
  TF_SKIP_WITHOUT_SHARED(corpus.c_str(), codes.c_str());
  const std::string dir = test::shared_data_dir().string() + "/";
  if (kSanitized) merges = std::min<int64_t>(merges, 2000);
  BpeLearnOptions options;
  options.merges = merges;
  const BpeLearnResult r = learn_bpe({dir + corpus}, options);
  const std::string expected = read_file(dir + codes);
  std::vector<std::string> want = text::split_lines(expected, text::LineMode::kUniversal);
  want.resize(std::min<size_t>(want.size(), static_cast<size_t>(merges) + 1));
  const std::vector<std::string> got = text::split_lines(format_bpe_codes(r.merges), text::LineMode::kUniversal);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "codes line " << i + 1;
}

TEST(BpeLearn, SameAsSubwordNmtTinyShakespeare1000) {
  expect_same_as_subword_nmt("tinyshakespeare.txt", "tinyshakespeare.subword-nmt.s1000.codes", 1000);
}
TEST(BpeLearn, SameAsSubwordNmtTinyShakespeare10000) {
  expect_same_as_subword_nmt("tinyshakespeare.txt", "tinyshakespeare.subword-nmt.s10000.codes", 10000);
}
TEST(BpeLearn, SameAsSubwordNmtMix10000) {
  expect_same_as_subword_nmt("mix.txt", "mix.subword-nmt.s10000.codes", 10000);
}

}  // namespace
}  // namespace tformer

namespace tformer {
namespace {

std::vector<std::pair<std::string, uint64_t>> as_pairs(const std::vector<BpeWordCount>& v) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& w : v) out.emplace_back(w.word, w.count);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(BpeCount, FileBlocksOfAnySizeGiveTheSameCountsAsTheWholeText) {
  // Words, runs of spaces, \r\n, a form feed (a Python line break kept in the word), multi-byte
  // characters: every one of them crosses a block boundary for some block size below.
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text += "the quick  brown fox\r\n";
    text += "jümps över " + std::to_string(i % 17) + " lazy\tdogs\f again\n";
    if (i % 7 == 0) text += "\n   \n";
    text += "日本語 words " + std::string(static_cast<size_t>(i % 5), 'x') + "\n";
  }
  const auto whole = as_pairs(bpe_count_words(text, "text"));
  ASSERT_GT(whole.size(), 20u);
  const test::TempDir dir;
  const std::string path = dir / "text.txt";
  {
    std::ofstream out(path, std::ios::binary);
    out << text;
  }
  for (size_t block : {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}, size_t{1000}, size_t{8} << 20})
    EXPECT_EQ(as_pairs(bpe_count_words_in_files({path}, block)), whole) << "block size " << block;
}

TEST(BpeCount, OneAndTwoThreadsCountTheSame) {
  std::string text;
  Rng r(9);
  const char* words[] = {"a", "bb", "ccc", "über", "x y", "z\tz", "日"};
  for (int i = 0; i < 200000; ++i) {
    text += words[r.below(7)];
    text += r.below(10) == 0 ? "\n" : " ";
  }
  set_num_threads(1);
  const auto one = as_pairs(bpe_count_words(text, "text"));
  set_num_threads(2);
  const auto two = as_pairs(bpe_count_words(text, "text"));
  EXPECT_EQ(one, two);
  BpeLearnOptions o;
  o.merges = 20;
  set_num_threads(1);
  const auto l1 = learn_bpe_from_word_counts(bpe_count_words(text, "text"), o).merges;
  set_num_threads(2);
  EXPECT_EQ(learn_bpe_from_word_counts(bpe_count_words(text, "text"), o).merges, l1);
}

}  // namespace
}  // namespace tformer
