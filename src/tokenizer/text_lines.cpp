#include "tokenizer/text_lines.h"

namespace tformer::text {

size_t splitlines_break_at(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  switch (c) {
    case '\n':
    case 0x0B:
    case 0x0C:
    case 0x1C:
    case 0x1D:
    case 0x1E:
      return 1;
    case '\r':
      return i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
    case 0xC2:  // U+0085 NEXT LINE
      return i + 1 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x85 ? 2 : 0;
    case 0xE2:  // U+2028 LINE SEPARATOR, U+2029 PARAGRAPH SEPARATOR
      if (i + 2 < s.size() && static_cast<unsigned char>(s[i + 1]) == 0x80) {
        const unsigned char c2 = static_cast<unsigned char>(s[i + 2]);
        if (c2 == 0xA8 || c2 == 0xA9) return 3;
      }
      return 0;
    default:
      return 0;
  }
}

std::vector<std::string> split_lines(std::string_view s, LineMode mode) {
  std::vector<std::string> lines;
  for_each_line(s, mode, [&](std::string_view line) { lines.emplace_back(line); });
  return lines;
}

}  // namespace tformer::text
