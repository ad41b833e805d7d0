// Strict UTF-8, the one validator and decoder of the project, with the rules of Unicode and of
// Python's 'utf-8' codec: no overlong forms, no surrogates (U+D800..U+DFFF), nothing above
// U+10FFFF, no truncated sequences. A byte-order mark (U+FEFF) is an ordinary character.
//
//   well-formed sequences      first byte   second byte   third, fourth
//   U+0000..U+007F             00..7F
//   U+0080..U+07FF             C2..DF       80..BF
//   U+0800..U+0FFF             E0           A0..BF        80..BF
//   U+1000..U+CFFF, E000..FFFF E1..EC, EE..EF 80..BF      80..BF
//   U+D000..U+D7FF             ED           80..9F        80..BF
//   U+10000..U+3FFFF           F0           90..BF        80..BF, 80..BF
//   U+40000..U+FFFFF           F1..F3       80..BF        80..BF, 80..BF
//   U+100000..U+10FFFF         F4           80..8F        80..BF, 80..BF
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tformer {

// Length of the complete, valid UTF-8 character at the start of s (1-4); 0 when s starts with a
// byte sequence that is invalid UTF-8 (a continuation byte, C0, C1, F5..FF, a lead byte followed
// by a byte outside its range); -1 when s is empty or a valid but unfinished prefix of a character
// ("\xE4\xB8" of "中"). Streaming decoders wait for more bytes on -1.
inline int utf8_char_length(std::string_view s) {
  if (s.empty()) return -1;
  const auto b0 = static_cast<unsigned char>(s[0]);
  if (b0 < 0x80) return 1;
  int n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;  // no overlong forms
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;  // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  for (int i = 1; i < n; ++i) {
    if (static_cast<size_t>(i) >= s.size()) return -1;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) return 0;
  }
  return n;
}

// Byte offset of the first byte that makes s invalid UTF-8 (the start of the first invalid or
// truncated sequence), or nullopt when all of s is valid.
std::optional<size_t> find_invalid_utf8(std::string_view s);

// True when s is entirely valid UTF-8.
inline bool is_valid_utf8(std::string_view s) { return !find_invalid_utf8(s).has_value(); }

// True for the bytes 10xxxxxx, which continue a character (and never start one).
inline bool is_utf8_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// The functions below assume valid UTF-8 (checked before, by the functions above).

// Length in bytes of the character whose first byte is lead.
inline size_t utf8_sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Decodes the code point starting at s[i] and advances i past it.
inline uint32_t next_code_point(std::string_view s, size_t& i) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k])); };
  const uint32_t b0 = b(0);
  if (b0 < 0x80) {
    i += 1;
    return b0;
  }
  if (b0 < 0xE0) {
    const uint32_t cp = ((b0 & 0x1Fu) << 6) | (b(1) & 0x3Fu);
    i += 2;
    return cp;
  }
  if (b0 < 0xF0) {
    const uint32_t cp = ((b0 & 0x0Fu) << 12) | ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);
    i += 3;
    return cp;
  }
  const uint32_t cp = ((b0 & 0x07u) << 18) | ((b(1) & 0x3Fu) << 12) | ((b(2) & 0x3Fu) << 6) | (b(3) & 0x3Fu);
  i += 4;
  return cp;
}

// Appends the UTF-8 form of code point cp (< 0x110000, not a surrogate) to out.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace tformer
