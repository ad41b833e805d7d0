// Sennrich BPE applying: hand-derived segmentations, apply_bpe.py's whitespace and line
// conventions, round trips, a 100,000-character word, and rejected codes files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "test_util.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer {
namespace {

using Pieces = std::vector<std::string>;

// Ranks: 0 (l, o)  1 (lo, w</w>)  2 (e, s)  3 (es, t</w>)  4 (lo, w)
const char* kToyCodes = "#version: 0.2\nl o\nlo w</w>\ne s\nes t</w>\nlo w\n";

std::string fixture(const std::string& name) { return read_file("fixtures/bpe/" + name); }

// Derivations (symbols in brackets, the rank of the merge applied):
//   low     [l][o][w</w>] -0-> [lo][w</w>] -1-> [low</w>]                              -> low
//   lowest  [l][o][w][e][s][t</w>] -0-> [lo][w][e][s][t</w>] -2-> [lo][w][es][t</w>]
//           -3-> [lo][w][est</w>] -4-> [low][est</w>]                                   -> low@@ est
//   slow    [s][l][o][w</w>] -0-> [s][lo][w</w>] -1-> [s][low</w>]                      -> s@@ low
//   lol     [l][o][l</w>] -0-> [lo][l</w>]                                               -> lo@@ l
//   lowlow  [l][o][w][l][o][w</w>] -0-> both: [lo][w][lo][w</w>] -1-> [lo][w][low</w>]
//           -4-> [low][low</w>]                                                          -> low@@ low
//   e       one character                                                                -> e
//   xyz     no merge applies                                                             -> x@@ y@@ z
TEST(BpeApply, HandDerivedSegmentations) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  EXPECT_EQ(bpe.num_merges(), 5);
  EXPECT_EQ(bpe.version_minor(), 2);
  EXPECT_EQ(bpe.segment("low"), (Pieces{"low"}));
  EXPECT_EQ(bpe.segment("lowest"), (Pieces{"low", "est"}));
  EXPECT_EQ(bpe.segment("slow"), (Pieces{"s", "low"}));
  EXPECT_EQ(bpe.segment("lol"), (Pieces{"lo", "l"}));
  EXPECT_EQ(bpe.segment("lowlow"), (Pieces{"low", "low"}));
  EXPECT_EQ(bpe.segment("e"), (Pieces{"e"}));
  EXPECT_EQ(bpe.segment("xyz"), (Pieces{"x", "y", "z"}));
  EXPECT_EQ(bpe.apply_line("lowest slow xyz\n"), "low@@ est s@@ low x@@ y@@ z\n");
}

// Symbols in order of first appearance: l0 o1 lo2 w</w>3 low</w>4 e5 s6 es7 t</w>8 est</w>9 w10 low11.
TEST(BpeApply, SymbolIds) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  ASSERT_EQ(bpe.symbols().size(), 12u);
  EXPECT_EQ(bpe.symbols()[9], "est</w>");
  EXPECT_EQ(bpe.segment_ids("lowest"), (std::vector<int32_t>{11, 9}));
  EXPECT_EQ(bpe.segment_ids("low"), (std::vector<int32_t>{4}));
  // "lo" ends in o</w>, which no merge mentions.
  EXPECT_EQ(bpe.segment_ids("lo"), (std::vector<int32_t>{0, SennrichBpe::kUnknownSymbol}));
}

// apply_bpe.py's process_line: leading and trailing runs of '\r', '\n', ' ' copied as they are,
// words rejoined by single spaces, a blank line copied once; tabs and other separators are word
// characters.
TEST(BpeApply, LineWhitespaceConventions) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  EXPECT_EQ(bpe.apply_line("  low   lowest \n"), "  low low@@ est \n");
  EXPECT_EQ(bpe.apply_line("\n"), "\n");
  EXPECT_EQ(bpe.apply_line("   \r\n"), "   \r\n");
  EXPECT_EQ(bpe.apply_line("low"), "low");
  EXPECT_EQ(bpe.apply_line("\r\n low\r\n"), "\r\n low\r\n");
  EXPECT_EQ(bpe.apply_line("a\tlow\n"), "a@@ \t@@ low\n");        // [a][\t][l][o][w</w>] -> a \t low
  EXPECT_EQ(bpe.apply_line("lo\u00a0w\n"), "lo@@ \u00a0@@ w\n");  // no-break space inside the word
}

// The same bytes read as apply_bpe.py reads an --input file (codecs: lines also end at \f and
// U+2028, which stay in the word before them; \r\n is kept) and as it reads stdin (universal
// newlines). See fixtures/bpe/README.md.
//   file:  "  lowest  low\r\n" -> "  low@@ est low\r\n"
//          "slow\f"            -> [s][l][o][w][\f</w>] -0-> [s][lo][w][\f</w>] -4-> s@@ low@@ \f  (no newline)
//          "low lowlow \n"     -> "low low@@ low \n";  "\n" -> "\n";  "   \n" -> "   \n"
//          "lol e\u2028"       -> "lo@@ l e@@ \u2028";  "low" -> "low"
//   stdin: "slow\flow lowlow \n" is one line: [s][l][o][w][\f][l][o][w</w>] -0-> [s][lo][w][\f][lo][w</w>]
//          -1-> [s][lo][w][\f][low</w>] -4-> [s][low][\f][low</w>] -> "s@@ low@@ \f@@ low low@@ low \n"
//          "lol e\u2028low" -> [e][\u2028][l][o][w</w>] -0-> -1-> [e][\u2028][low</w>] -> "lo@@ l e@@ \u2028@@ low"
TEST(BpeApply, FileAndStdinLineModes) {
  const SennrichBpe bpe = SennrichBpe::load("fixtures/bpe/toy.codes");
  const std::string input = fixture("toy.input.txt");
  EXPECT_EQ(bpe.apply_text(input, text::LineMode::kSplitlines), fixture("toy.expected-file.txt"));
  EXPECT_EQ(bpe.apply_text(input, text::LineMode::kUniversal), fixture("toy.expected-stdin.txt"));
  EXPECT_EQ(bpe.apply_text("", text::LineMode::kSplitlines), "");
  EXPECT_ERROR(bpe.apply_text("ok\n\xff", text::LineMode::kSplitlines, "in.txt"), ErrorKind::BadFile, "in.txt",
               "byte offset 3");
}

// A word of 100,000 'a' (merging it by rescanning the word after every merge would take quadratic
// time). Codes: 0 (a, a), 1 (aa, aa),
// 2 (aaaa, aaaa), 3 (a, a</w>). The word is 99,999 [a] and [a</w>]:
//   rank 0 pairs positions 0-1, 2-3, ..., 99996-99997: 49,999 [aa], one [a] left, [a</w>]
//   rank 1: 24,999 [aaaa] and one [aa];  rank 2: 12,499 [a x 8] and one [aaaa]
//   rank 3: [a][a</w>] -> [aa</w>]
// Pieces: 12,499 x "aaaaaaaa", "aaaa", "aa", "aa"; merges 49,999 + 24,999 + 12,499 + 1 = 87,498.
// The work is counted, not timed: heap pushes stay within a small multiple of the length.
TEST(BpeApply, HundredThousandCharacterWord) {
  const SennrichBpe bpe = SennrichBpe::from_codes("#version: 0.2\na a\naa aa\naaaa aaaa\na a</w>\n", "long");
  bpe.reset_stats();
  const std::vector<std::string> pieces = bpe.segment(std::string(100000, 'a'));
  ASSERT_EQ(pieces.size(), 12499u + 3u);
  for (size_t i = 0; i < 12499; ++i) ASSERT_EQ(pieces[i], "aaaaaaaa") << i;
  EXPECT_EQ(pieces[12499], "aaaa");
  EXPECT_EQ(pieces[12500], "aa");
  EXPECT_EQ(pieces[12501], "aa");
  EXPECT_EQ(bpe.stats().merges_done, 87498);
  EXPECT_LE(bpe.stats().heap_pushes, 3 * 100000);
  // Through the line API too (round trip).
  const std::string line = bpe.apply_line(std::string(100000, 'a') + "\n");
  std::string joined;
  for (size_t i = 0; i < line.size(); ++i) {
    if (line.compare(i, 3, "@@ ") == 0) {
      i += 2;
      continue;
    }
    joined += line[i];
  }
  EXPECT_EQ(joined, std::string(100000, 'a') + "\n");
}

// The rescanning loop (apply_bpe.py's) and the heap path agree, on codes learned from random text
// over a small alphabet (many repeats, overlaps and ties), for words short and long.
TEST(BpeApply, ShortAndLongPathsAgree) {
  Rng rng(7);
  std::string corpus;
  for (int w = 0; w < 3000; ++w) {
    const uint64_t len = 1 + rng.below(12);
    for (uint64_t i = 0; i < len; ++i) corpus += "aabbc"[rng.below(5)];
    corpus += rng.below(10) == 0 ? "\n" : " ";
  }
  BpeLearnOptions options;
  options.merges = 300;
  const BpeLearnResult learned = learn_bpe_from_word_counts(bpe_count_words(corpus, "<random>"), options);
  ASSERT_GT(learned.merges.size(), 50u);
  const SennrichBpe bpe = SennrichBpe::from_merges(learned.merges);
  for (int k = 0; k < 500; ++k) {
    const uint64_t len = 1 + rng.below(k % 10 == 0 ? 300 : 30);
    std::string word;
    for (uint64_t i = 0; i < len; ++i) word += "aabbcd"[rng.below(6)];
    ASSERT_EQ(bpe.segment_for_testing(word, false), bpe.segment_for_testing(word, true)) << word;
  }
}

// Every learned word segments back into itself, and learned codes re-segment their own corpus.
std::string normalise_line(std::string_view line) {
  auto ws = [](char c) { return c == '\r' || c == '\n' || c == ' '; };
  size_t lead = 0;
  while (lead < line.size() && ws(line[lead])) ++lead;
  if (lead == line.size()) return std::string(line);
  size_t end = line.size();
  while (ws(line[end - 1])) --end;
  std::string out(line.substr(0, lead));
  bool first = true;
  for (size_t i = lead; i < end;) {
    size_t j = i;
    while (j < end && line[j] != ' ') ++j;
    if (j > i) {
      if (!first) out += ' ';
      out += line.substr(i, j - i);
      first = false;
    }
    i = j + 1;
  }
  return out + std::string(line.substr(end));
}

std::string remove_separators(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, 3, "@@ ") == 0) {
      i += 2;
      continue;
    }
    out += s[i];
  }
  return out;
}

TEST(BpeApply, RoundTripRemovingSeparatorsGivesNormalisedInput) {
  const SennrichBpe bpe = SennrichBpe::from_codes(kToyCodes, "toy");
  const std::string input = fixture("toy.input.txt");
  for (auto mode : {text::LineMode::kSplitlines, text::LineMode::kUniversal}) {
    std::string normalised;
    text::for_each_line(input, mode, [&](std::string_view line) { normalised += normalise_line(line); });
    EXPECT_EQ(remove_separators(bpe.apply_text(input, mode)), normalised);
  }
}

TEST(BpeApply, RoundTripTinyShakespeare) {
  TF_SKIP_WITHOUT_SHARED("tinyshakespeare.txt", "tinyshakespeare.subword-nmt.s10000.codes");
  const std::string dir = test::shared_data_dir().string() + "/";
  const SennrichBpe bpe = SennrichBpe::load(dir + "tinyshakespeare.subword-nmt.s10000.codes");
  EXPECT_EQ(bpe.num_merges(), 10000);
  std::string input = read_file(dir + "tinyshakespeare.txt");
#if defined(__SANITIZE_ADDRESS__)
  input.resize(input.find('\n', 200000) + 1);
#endif
  const std::string out = bpe.apply_text(input, text::LineMode::kSplitlines);
  std::string normalised;
  text::for_each_line(input, text::LineMode::kSplitlines, [&](std::string_view l) { normalised += normalise_line(l); });
  EXPECT_EQ(remove_separators(out), normalised);
  // Frequent words are whole symbols: "the" is merge-learned on this corpus.
  EXPECT_EQ(bpe.apply_line("the king\n"), "the king\n");
}

// Learn then apply: codes written by learn load back with the same merges.
TEST(BpeApply, LearnedCodesLoadBack) {
  BpeLearnOptions options;
  options.merges = 100;
  const BpeLearnResult r = learn_bpe_from_word_counts(bpe_count_words("aaaa aaaa aaaa ab ab", "<t>"), options);
  const SennrichBpe bpe = SennrichBpe::from_codes(format_bpe_codes(r.merges), "learned");
  EXPECT_EQ(bpe.num_merges(), 4);
  EXPECT_EQ(bpe.segment("aaaa"), (Pieces{"aaaa"}));
  EXPECT_EQ(bpe.segment("aaab"), (Pieces{"aaa", "b"}));  // [a][a][a][b</w>] -0-> [aa][a][b</w>] -1-> [aaa][b</w>]
}

// ---- codes files ----

TEST(BpeCodes, VersionsAndEmptyCodes) {
  // Header only: no merges (subword-nmt refuses this file; we accept it).
  const SennrichBpe none = SennrichBpe::from_codes("#version: 0.2\n", "empty");
  EXPECT_EQ(none.num_merges(), 0);
  EXPECT_EQ(none.segment("abc"), (Pieces{"a", "b", "c"}));
  // "0.2.0" is "0.2" (trailing .0 groups are dropped, as subword-nmt does); \r\n line ends are fine.
  EXPECT_EQ(SennrichBpe::from_codes("#version: 0.2.0\r\na b\r\n", "crlf").num_merges(), 1);
  // No header: subword-nmt's version 0.1, where "</w>" is a symbol of its own.
  //   "ab" -> [a][b][</w>] -0-> [ab][</w>] -1-> [ab</w>] -> ab;  "abc" -> [ab][c][</w>] -> ab@@ c
  const SennrichBpe v1 = SennrichBpe::from_codes("a b\nab </w>\n", "v01");
  EXPECT_EQ(v1.version_minor(), 1);
  EXPECT_EQ(v1.segment("ab"), (Pieces{"ab"}));
  EXPECT_EQ(v1.segment("abc"), (Pieces{"ab", "c"}));
  EXPECT_EQ(v1.apply_line("abc ab\n"), "ab@@ c ab\n");
  // --merges N keeps the first N.
  EXPECT_EQ(SennrichBpe::from_codes(kToyCodes, "toy", 2).segment("lowest"), (Pieces{"lo", "w", "e", "s", "t"}));
}

// Each bad file is a BadFile error about the file (Unsupported for a codes version subword-nmt
// does not write) whose message names the line.
TEST(BpeCodes, BadCodesNameFileAndLine) {
  struct Case {
    const char* codes;
    ErrorKind kind;
    const char* where;
    const char* what;
  };
  const Case cases[] = {
      {"#version: 0.3\na b\n", ErrorKind::Unsupported, "bad.codes:1:", "unsupported"},
      {"#version: 0.2 byte\na b\n", ErrorKind::BadFile, "bad.codes:1:", "byte-level"},
      {"#version: 0.2\na b c\n", ErrorKind::BadFile, "bad.codes:2:", "two symbols"},
      {"#version: 0.2\na b\nc\n", ErrorKind::BadFile, "bad.codes:3:", "two symbols"},
      {"#version: 0.2\na b\n\nc d\n", ErrorKind::BadFile, "bad.codes:3:", "two symbols"},
      {"#version: 0.2\na  b\n", ErrorKind::BadFile, "bad.codes:2:", "two symbols"},
      {"#version: 0.2\nab c\n", ErrorKind::BadFile, "bad.codes:2:", "'ab'"},
      {"#version: 0.2\na bc</w>\n", ErrorKind::BadFile, "bad.codes:2:", "'bc</w>'"},
      {"#version: 0.2\ne </w>\n", ErrorKind::BadFile, "bad.codes:2:", "'</w>'"},
      {"#version: 0.2\na b\nab c\nab c\n", ErrorKind::BadFile,
       "bad.codes:4:", "duplicate merge 'ab c' (first at line 3)"},
      {"", ErrorKind::BadFile, "bad.codes:1:", "empty"},
      {"#version: 0.2\na \xff\n", ErrorKind::BadFile, "bad.codes:", "byte offset 16"},
  };
  for (const Case& c : cases)
    EXPECT_ERROR(SennrichBpe::from_codes(c.codes, "bad.codes"), c.kind, "bad.codes", c.where, c.what) << c.codes;
  // A merge whose parts come from earlier merges is fine, in any order of use.
  EXPECT_NO_THROW(SennrichBpe::from_codes("#version: 0.2\nb c</w>\na bc</w>\n", "ok"));
  EXPECT_ERROR(SennrichBpe::load("fixtures/bpe/no-such.codes"), ErrorKind::BadFile, "fixtures/bpe/no-such.codes");
}

}  // namespace
}  // namespace tformer
