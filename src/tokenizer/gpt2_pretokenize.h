// GPT-2's pre-tokenizer: cuts text into the pieces that byte-level BPE then merges separately.
//
// The pattern is GPT-2's (and tiktoken's "gpt2" / r50k_base):
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// tried left to right at each position, first alternative that matches wins, as in Perl. It is run
// by PCRE2 (UTF, UCP, JIT) with real Unicode general categories for \p{L} and \p{N}. \s is spelled
// out as Unicode's White_Space property (what tiktoken's Rust regex means by \s; PCRE2's own \s
// leaves out U+0085). Contractions are lowercase only: "THEY'RE" gives "THEY", "'", "RE".
//
//   "Hello world's  end\n"  ->  "Hello" " world" "'s" " " " end" "\n"
//   (the run of two spaces keeps its last space for the following word: \s+(?!\S))
//
// Invalid UTF-8 (tiktoken cannot even receive it: its encode takes a string). tformer cuts the
// input into maximal runs of valid UTF-8 and maximal runs of bytes that are not part of any valid
// character (strict UTF-8: no overlong forms, no surrogates, nothing above U+10FFFF). Each valid run
// is pre-tokenized by the pattern as if it were the whole text; each invalid run is one piece. So
// valid UTF-8 input gets exactly GPT-2's pieces, and "ab\xff cd" gives "ab" "\xff" " cd". The
// pieces always concatenate back to the input.
//
// llama.cpp's "default" pre-tokenizer (LlamaCppDefaultPreTokenizer below) is a chain of four
// patterns, each cutting every piece the previous one left (matches and the text between them both
// become pieces; later patterns never see across a cut):
//   1. [\p{P}$+<=>^~|]+                     runs of punctuation (and those ASCII symbols; not '`')
//   2. GPT-2's pattern above                   on each piece of 1, matched within that piece alone
//   3. \p{N}+                                 runs of numbers
//   4. [0-9][0-9][0-9]                        ASCII digits in threes, from the left
//   "don't pay $1234.50!"  ->  "don" "'" "t" " pay" " " "$" "123" "4" "." "50" "!"
// This is what llama.cpp runs for tokenizer.ggml.pre "default" or a file that names none
// (unicode_regex_split in its src/unicode.cpp: pattern 2 by its hand-written GPT-2 splitter,
// 1 and 3 by std::regex over text whose non-ASCII characters stand for their categories, 4 by
// std::wregex). Here all four are PCRE2 with real Unicode categories; invalid UTF-8 is handled as
// for GPT-2's pattern.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tformer {

class Gpt2PreTokenizer {
 public:
  // Compiles the pattern (and JIT-compiles it when the platform allows). It must match at every
  // position of valid UTF-8 (each of the three below does: letters, numbers, white space and the
  // rest each have an alternative), so that matching anchored at each piece's end is the same as
  // searching for the leftmost match.
  explicit Gpt2PreTokenizer(const char* pattern);
  ~Gpt2PreTokenizer();
  Gpt2PreTokenizer(const Gpt2PreTokenizer&) = delete;
  Gpt2PreTokenizer& operator=(const Gpt2PreTokenizer&) = delete;

  // The process-wide instances (thread-safe; split() may run on many threads at once): GPT-2's
  // pattern, and tiktoken's cl100k_base and o200k_base patterns (\s and \S as Unicode White_Space
  // there too; (?i:...) contractions by Unicode simple case folding, as in tiktoken's regex crate).
  static const Gpt2PreTokenizer& instance();
  static const Gpt2PreTokenizer& cl100k();
  static const Gpt2PreTokenizer& o200k();

  // Calls f(piece) for each piece of text, in order; pieces are views into text. Any bytes.
  template <typename F>
  void for_each_piece(std::string_view text, F&& f) const {
    size_t i = 0;
    while (i < text.size()) {
      const size_t j = valid_run_end(text, i);
      const std::string_view valid = text.substr(i, j - i);
      for (size_t at = 0; at < valid.size();) {
        const size_t end = match_end(valid, at);
        f(valid.substr(at, end - at));
        at = end;
      }
      const size_t k = invalid_run_end(text, j);
      if (k > j) f(text.substr(j, k - j));
      i = k;
    }
  }
  std::vector<std::string_view> split(std::string_view text) const {
    std::vector<std::string_view> out;
    for_each_piece(text, [&](std::string_view piece) { out.push_back(piece); });
    return out;
  }
  // The pieces of valid UTF-8 text, the pattern matched within `valid` alone (its lookahead ends
  // at valid's end).
  template <typename F>
  void for_each_valid_piece(std::string_view valid, F&& f) const {
    for (size_t at = 0; at < valid.size();) {
      const size_t end = match_end(valid, at);
      f(valid.substr(at, end - at));
      at = end;
    }
  }

  // End of the maximal valid UTF-8 run starting at i / of the maximal invalid run starting at i.
  static size_t valid_run_end(std::string_view text, size_t i);
  static size_t invalid_run_end(std::string_view text, size_t i);

  // The pattern as compiled (\s spelled out as above).
  const std::string& pattern() const { return pattern_; }

 private:
  // End of the pattern's match at `at` in valid (valid UTF-8, at < valid.size()).
  size_t match_end(std::string_view valid, size_t at) const;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

// llama.cpp's "default" chain (top of this file).
class LlamaCppDefaultPreTokenizer {
 public:
  LlamaCppDefaultPreTokenizer();
  ~LlamaCppDefaultPreTokenizer();
  LlamaCppDefaultPreTokenizer(const LlamaCppDefaultPreTokenizer&) = delete;
  LlamaCppDefaultPreTokenizer& operator=(const LlamaCppDefaultPreTokenizer&) = delete;

  static const LlamaCppDefaultPreTokenizer& instance();  // thread-safe, like Gpt2PreTokenizer's

  // Calls f(piece) for each piece of text, in order; pieces are views into text. Any bytes.
  void for_each_piece(std::string_view text, const std::function<void(std::string_view)>& f) const;
  std::vector<std::string_view> split(std::string_view text) const {
    std::vector<std::string_view> out;
    for_each_piece(text, [&](std::string_view piece) { out.push_back(piece); });
    return out;
  }

 private:
  // Cuts s at each match of pattern `which` (0: punctuation, 1: numbers, 2: three digits): f gets
  // the text before a match, the match, ..., the text after the last one.
  void cut(int which, std::string_view s, const std::function<void(std::string_view)>& f) const;
  void* code_[3] = {nullptr, nullptr, nullptr};  // pcre2_code_8*
  bool jit_[3] = {false, false, false};
};

}  // namespace tformer
