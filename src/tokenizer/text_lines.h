// Text the way Python 3 reads it, for tools that must agree with Python scripts byte for byte
// (subword-nmt's learn_bpe.py and apply_bpe.py).
//
// UTF-8 is decoded strictly, as Python's 'utf-8' codec does (core/utf8.h): no overlong forms, no
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequences. A U+FEFF byte-order
// mark is an ordinary character.
//
// Two ways of splitting text into lines, because Python has two:
//
//   LineMode::kSplitlines  codecs.open(path, encoding='utf-8') and codecs.getreader, which is how
//                          subword-nmt opens its --input files. Iterating such a reader yields
//                          str.splitlines(keepends=True) of the whole text: a line ends at \n, \r,
//                          \r\n (one break), \v, \f, \x1c, \x1d, \x1e, U+0085, U+2028, U+2029, and
//                          the terminator stays at the end of the line.
//   LineMode::kUniversal   io.TextIOWrapper with newline=None (open(..., encoding='utf-8') and
//                          sys.stdin): \r\n and \r become \n, and lines end only at \n.
//
//   "a\fb c\r\nd"  kSplitlines: "a\f", "b c\r\n", "d"     kUniversal: "a\fb c\n", "d"
//
// subword-nmt then strips '\r', '\n' and ' ' from both ends of a line and splits it at ' ' only,
// so a \f that ended a line stays at the end of the line's last word ("a\f" above is a word).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tformer::text {

enum class LineMode { kSplitlines, kUniversal };

// Length in bytes of the line break that starts at s[i] under str.splitlines (0 when s[i] does not
// start one; 2 for \r\n and for U+0085, 3 for U+2028 / U+2029). Valid UTF-8 assumed.
size_t splitlines_break_at(std::string_view s, size_t i);
// True for the line breaks that subword-nmt's strip('\r\n ') leaves in place (\v, \f, \x1c, \x1d,
// \x1e, U+0085, U+2028, U+2029): they end a line under kSplitlines but stay part of its last word.
inline bool is_kept_break(size_t break_length, char first) {
  return break_length > 0 && first != '\n' && first != '\r';
}

// Calls fn(line) for each line of s under mode, the line's terminator included. Under kUniversal
// the terminator is always "\n" (\r\n and \r are translated), so the line is passed as a fresh
// string; under kSplitlines it is a view into s. The last line may lack a terminator.
template <typename Fn>
void for_each_line(std::string_view s, LineMode mode, Fn&& fn);

// The lines of s under mode, terminators included (for tests and small inputs).
std::vector<std::string> split_lines(std::string_view s, LineMode mode);

// ---- implementation of the template ----

template <typename Fn>
void for_each_line(std::string_view s, LineMode mode, Fn&& fn) {
  size_t start = 0;
  const size_t n = s.size();
  if (mode == LineMode::kSplitlines) {
    size_t i = 0;
    while (i < n) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      // Fast path: ordinary bytes never start a break.
      if (c > 0x1E && c != 0xC2 && c != 0xE2) {
        ++i;
        continue;
      }
      const size_t b = splitlines_break_at(s, i);
      if (b == 0) {
        ++i;
        continue;
      }
      fn(std::string_view(s.data() + start, i + b - start));
      i += b;
      start = i;
    }
    if (start < n) fn(std::string_view(s.data() + start, n - start));
    return;
  }
  std::string line;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[i];
    if (c == '\n' || c == '\r') {
      line.append(s.data() + start, i - start);
      line.push_back('\n');
      if (c == '\r' && i + 1 < n && s[i + 1] == '\n') ++i;
      fn(std::string_view(line));
      line.clear();
      start = i + 1;
    }
  }
  if (start < n) {
    line.append(s.data() + start, n - start);
    fn(std::string_view(line));
  }
}

}  // namespace tformer::text
