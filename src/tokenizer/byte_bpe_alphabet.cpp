// GPT-2's byte alphabet: every byte as one printable character (bytes_to_unicode in GPT-2's
// encoder.py), and back.
#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "core/utf8.h"
#include "tokenizer/byte_bpe.h"

namespace tformer {
namespace {

struct ByteUnicodeTables {
  std::array<std::string, 256> byte_to_text;
  std::array<int, 512> code_point_to_byte;  // -1: not in the alphabet (every code point used is < 512)
  ByteUnicodeTables() {
    code_point_to_byte.fill(-1);
    const auto self = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const uint32_t cp = self(b) ? static_cast<uint32_t>(b) : next++;
      append_utf8(byte_to_text[b], cp);
      code_point_to_byte[cp] = b;
    }
  }
};

const ByteUnicodeTables& byte_unicode() {
  static const ByteUnicodeTables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& gpt2_byte_to_unicode() { return byte_unicode().byte_to_text; }

std::optional<std::string> gpt2_unicode_to_bytes(std::string_view s) {
  const auto& table = byte_unicode().code_point_to_byte;
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int len = utf8_char_length(s.substr(i));
    if (len <= 0 || len > 2) return std::nullopt;  // the alphabet is U+0021..U+0143: one or two bytes
    const uint32_t cp = next_code_point(s, i);
    if (cp >= table.size() || table[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(table[cp]));
  }
  return out;
}

std::string gpt2_bytes_to_unicode(std::string_view bytes) {
  const auto& table = gpt2_byte_to_unicode();
  std::string out;
  for (char c : bytes) out += table[static_cast<unsigned char>(c)];
  return out;
}

}  // namespace tformer
