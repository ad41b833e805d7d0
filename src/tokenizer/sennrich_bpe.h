// Sennrich character BPE (Sennrich, Haddow and Birch 2016), learned and applied exactly as
// subword-nmt 0.3.9 does it (learn_bpe.py, apply_bpe.py), and fast.
//
// Learning, in numbered steps (step 1: bpe_count_words.cpp; the rest: bpe_learn.cpp):
//   1. Words. Each input is decoded as UTF-8 (strictly; an error names the file and byte offset) and
//      split into lines as subword-nmt's codecs reader does (learn_bpe.py opens its input with
//      codecs.open, whose lines are str.splitlines(keepends=True), not io's universal newlines;
//      text_lines.h, LineMode::kSplitlines: \n, \r, \r\n, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029). A line loses
//      '\r', '\n' and ' ' at both ends and is split at ' ' only: tabs and no-break spaces stay inside words, empty
//      words are skipped, and a \f (etc.) that ended the line stays at the end of its last word.
//   2. Symbols. A word is its code points, the last one carrying the end-of-word marker:
//      "lower" -> l o w e r</w>, so "r</w>" is ONE symbol, different from "r".
//   3. Pair counts: for each distinct word, frequency x number of adjacent occurrences of the pair,
//      overlapping (the symbols a a a hold (a, a) twice). Counts are 64-bit.
//   4. Merge loop: take the pair with the largest count; among equal counts the pair that is
//      greatest as (first, second) compared by code points (Python's max over (count, pair)), with
//      "</w>" compared as its four characters. Replace its occurrences in every word left to right
//      without overlap ("a a a" -> "aa a"), update the counts of the neighbouring pairs, repeat.
//      Stop after `merges` merges, or when the best count is below min_frequency.
//
//   Worked example, corpus "aaaa aaaa aaaa ab ab" (min_frequency 2):
//     words  aaaa x3 -> a a a a</w>,  ab x2 -> a b</w>
//     step 1  (a, a) 6        (overlapping: 2 per word)   aaaa -> aa a a</w>
//     step 2  (aa, a) 3 ties with (a, a</w>) 3; "aa" > "a", so (aa, a)    -> aaa a</w>
//     step 3  (aaa, a</w>) 3                                               -> aaaa</w>
//     step 4  (a, b</w>) 2                                                -> ab</w>
//     codes:  "a a", "aa a", "aaa a</w>", "a b</w>"   (tests/test_tokenizer_bpe_learn.cpp)
//
// subword-nmt's own bookkeeping is reproduced too, so that its output is matched on every input:
//   - It keeps a pruned copy of the pair counts (pairs below a threshold are set aside and only
//     re-read when the best visible count falls below the threshold). Pruning is exact except
//     after a merge whose result string already exists as a symbol (two merge paths to the same
//     string, e.g. (t, he</w>) after (th, e</w>)): then a set-aside pair can be re-counted from
//     zero and its old count is lost. tformer keeps the same two tables, with the same threshold
//     schedule, so it loses the same counts.
//   - In that same situation subword-nmt also counts the neighbours of the pre-existing copies of
//     the new symbol in the words it rewrites; tformer updates counts with the same rule.
//   Known departures (documented, tested where they can be):
//   - subword-nmt rewrites words with a regex built on \S, which mis-merges symbols that contain
//     Python whitespace (tab, no-break space, \f, \x1c...); tformer merges exactly.
//   - After a merge whose result already existed, subword-nmt's per-word index can still list a
//     word that no longer contains a pair and rescan it; tformer follows the words that contain it.
//   - Empty input (or no pair at all): subword-nmt crashes after writing the header; tformer writes
//     the header alone and reports it (BpeLearnResult::stop_reason).
//
// Applying (the codes: bpe_codes.cpp; a word: bpe_segment.cpp; lines: bpe_apply.cpp): within each word, repeatedly
// merge the adjacent pair of lowest rank (its line number in the codes file), all its non-overlapping occurrences left
// to right, until no adjacent pair is a merge; "</w>" is then removed from the last piece. apply_bpe.py's line
// conventions are kept: leading and trailing runs of '\r', '\n', ' ' are copied as they are, the
// words between are joined by single spaces (runs of spaces collapse), and every piece but a
// word's last gets "@@" appended:  "  the lowest \n" -> "  the low@@ est \n".
//
// Threads: learning counts words on OpenMP threads; the merge loop is sequential. A SennrichBpe is
// immutable after construction and its const methods may be called from several threads at once
// (apply_text keeps its word cache per call and per thread).
//
// Codes file format (what learn writes, what apply reads):
//   #version: 0.2
//   t h
//   th e</w>
// A file without a "#version:" first line is subword-nmt's version 0.1 ("</w>" a symbol of its
// own), which apply accepts as subword-nmt does. Rejected with an Error naming the file and line:
// an unsupported version (or byte-level codes), a line that is not exactly two symbols separated
// by one space, a part that no earlier line can have produced (a part must be one character, one
// character followed by "</w>" (version 0.2) or "</w>" itself (version 0.1), or the result of an
// earlier merge), and a duplicate merge. A header-only file means "no merges" (subword-nmt
// rejects it; tformer accepts it: every word is split into characters).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/text_lines.h"

namespace tformer {

// ------------------------------------------------------------------------------------------
// Learning
// ------------------------------------------------------------------------------------------

struct BpeWordCount {
  std::string word;  // valid UTF-8, no ' ', '\n' or '\r'
  uint64_t count = 0;
};

// One learned merge, as --trace prints it.
struct BpeStep {
  int64_t step = 0;           // 1-based
  std::string first, second;  // the pair
  int64_t count = 0;          // its count when it was chosen (subword-nmt's "frequency")
  std::string symbol;         // first + second
  int64_t vocab_size = 0;     // distinct symbols after this merge (characters, with and without </w>, + merges)
};

struct BpeLearnOptions {
  int64_t merges = 10000;     // at most this many merges
  int64_t min_frequency = 2;  // stop when the best count is below this; >= 1
  // Called after each merge (for --trace); may be empty.
  std::function<void(const BpeStep&)> on_step;
};

struct BpeLearnResult {
  std::vector<std::pair<std::string, std::string>> merges;  // in learned order
  std::vector<int64_t> counts;                              // count of each merge when chosen
  int64_t initial_vocab_size = 0;                           // distinct symbols before any merge
  // Empty when `merges` merges were made; otherwise why learning stopped early, e.g.
  // "no pair has frequency >= 2. Stopping" (subword-nmt's message) or "no symbol pairs in the input".
  std::string stop_reason;
};

// Step 1: word frequencies of UTF-8 text, split as described above. `name` names the text in
// errors ("FILE: invalid UTF-8 at byte offset N"). Multithreaded (OpenMP) over chunks.
// Words come back sorted by string (a deterministic order, independent of the thread count).
std::vector<BpeWordCount> bpe_count_words(std::string_view text, const std::string& name);
// The same over files (counts summed; each file's lines are its own). Reads each file in blocks, so
// memory grows with the number of distinct words, not with the file size. block_size: bytes read
// at a time (tests use tiny blocks so that words and lines cross block boundaries).
std::vector<BpeWordCount> bpe_count_words_in_files(const std::vector<std::string>& paths,
                                                   size_t block_size = size_t{8} << 20);

// Steps 2-4 on given word counts (counts may exceed 2^32; words must be non-empty and contain no
// ' ', '\n' or '\r' - they are not re-split). Throws Error on a bad option.
BpeLearnResult learn_bpe_from_word_counts(const std::vector<BpeWordCount>& words, const BpeLearnOptions& options);
// Steps 1-4.
BpeLearnResult learn_bpe(const std::vector<std::string>& paths, const BpeLearnOptions& options);

// The codes file text: "#version: 0.2\n" then "first second\n" per merge.
std::string format_bpe_codes(const std::vector<std::pair<std::string, std::string>>& merges);

// ------------------------------------------------------------------------------------------
// Applying
// ------------------------------------------------------------------------------------------

class SennrichBpe {
 public:
  static constexpr int32_t kUnknownSymbol = -1;

  // Parses codes text (see the format above); `name` names it in errors ("NAME:LINE: ...").
  // max_merges >= 0 keeps only the first max_merges merges (apply_bpe.py --merges).
  static SennrichBpe from_codes(std::string_view codes, const std::string& name, int64_t max_merges = -1);
  static SennrichBpe load(const std::string& path, int64_t max_merges = -1);
  // From merges in rank order (version 0.2); validated like a file, errors name `name`.
  static SennrichBpe from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                 const std::string& name = "<merges>");

  SennrichBpe(SennrichBpe&&) noexcept;
  SennrichBpe& operator=(SennrichBpe&&) noexcept;
  ~SennrichBpe();

  // The pieces of one word (no spaces or line breaks in it), as apply_bpe.py prints them but
  // without the "@@" separators and with "</w>" removed: segment("lowest") -> {"low", "est"}.
  std::vector<std::string> segment(std::string_view word) const;
  // The same pieces as symbol ids (indexes into symbols()). The symbol of a word's last piece
  // keeps its "</w>" (in version 0.2 codes), so "est" inside a word and "est</w>" at its end are
  // different ids: the word boundary is part of the id. A character that no merge mentions has no
  // id: it comes back as kUnknownSymbol.
  std::vector<int32_t> segment_ids(std::string_view word) const;
  // One piece of a segmented word: its symbol id (kUnknownSymbol for a character that no merge
  // mentions) and the bytes [begin, end) of the word it covers.
  struct Piece {
    int32_t id;
    uint32_t begin, end;
  };
  // The pieces of one word with their byte ranges (what segment() and segment_ids() are made of).
  void segment_pieces(std::string_view word, std::vector<Piece>& out) const;
  // segment() forced through one of its two paths whatever the word's length: the rescanning loop
  // (long_path false; apply_bpe.py's own loop, O(n^2)) or the heap + linked list (long_path true,
  // O(n log n)). Tests check that both agree.
  std::vector<std::string> segment_for_testing(std::string_view word, bool long_path) const;
  // Every symbol the codes mention, parts and results, in order of first appearance.
  const std::vector<std::string>& symbols() const;
  int64_t num_merges() const;
  // The merges in rank order, as the codes file spells them.
  std::vector<std::pair<std::string, std::string>> merges() const;
  // 1 for version 0.1 codes (no header), 2 for "#version: 0.2".
  int version_minor() const;

  // apply_bpe.py's process_line on one line (its terminator included).
  std::string apply_line(std::string_view line) const;
  // Applies to a whole text split into lines under mode: kSplitlines is how apply_bpe.py reads an
  // --input file, kUniversal how it reads standard input. The text must be valid UTF-8 (an
  // Error names `name` and the byte offset otherwise).
  std::string apply_text(std::string_view text, text::LineMode mode, const std::string& name = "<input>") const;
  // The same output as apply_text on the whole input, but streamed: read(buffer, n) fills up to n
  // bytes and returns how many (0 at the end of the input); write(bytes) takes the output as it is
  // produced. The input is read block_size bytes at a time. Whole lines are applied as they
  // arrive; a line still unfinished at the end of the buffer is applied up to the end of its last
  // complete word (apply_bpe.py works word by word: leading and trailing whitespace of the line is
  // copied, the runs of spaces between words become one), so memory is bounded by block_size plus
  // the longest word (or run of spaces), not by the longest line: a 100 MB line without a newline
  // is fine. Invalid UTF-8 is an Error naming `name` and the byte offset in the whole input.
  void apply_stream(const std::function<size_t(char*, size_t)>& read,
                    const std::function<void(std::string_view)>& write, text::LineMode mode,
                    const std::string& name = "<input>", size_t block_size = size_t{8} << 20) const;

  // Counters for tests: merges performed by the long-word path (heap + linked list), so a test
  // can check that a 100,000-character word costs O(n log n) work without timing anything.
  struct Stats {
    int64_t heap_pushes = 0;
    int64_t merges_done = 0;
  };
  Stats stats() const;
  void reset_stats() const;

  struct Impl;

 private:
  explicit SennrichBpe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tformer
