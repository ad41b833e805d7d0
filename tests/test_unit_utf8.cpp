// core/utf8.h, the one strict UTF-8 validator and decoder: hand-picked cases, every one- to
// three-byte sequence and every four-byte lead against the set of encodings of all scalar values
// (an independent definition: a sequence is valid exactly when it encodes a scalar value), the
// offsets find_invalid_utf8 reports, and the decoder and encoder on every scalar value.
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "core/utf8.h"
#include "test_util.h"

namespace tformer {
namespace {

TEST(Utf8, CharLengthClassifiesCompleteUnfinishedAndInvalid) {
  EXPECT_EQ(utf8_char_length("a"), 1);
  EXPECT_EQ(utf8_char_length("\xc3\xa9"), 2);          // é
  EXPECT_EQ(utf8_char_length("\xe4\xb8\xad"), 3);      // 中
  EXPECT_EQ(utf8_char_length("\xf0\x9f\x98\x80"), 4);  // 😀
  EXPECT_EQ(utf8_char_length("\xc3"), -1);             // unfinished
  EXPECT_EQ(utf8_char_length("\xf0\x9f\x98"), -1);
  EXPECT_EQ(utf8_char_length(""), -1);
  EXPECT_EQ(utf8_char_length("\x80"), 0);              // lone continuation byte
  EXPECT_EQ(utf8_char_length("\xc0\xaf"), 0);          // overlong '/'
  EXPECT_EQ(utf8_char_length("\xe0\x80\xaf"), 0);      // overlong
  EXPECT_EQ(utf8_char_length("\xed\xa0\x80"), 0);      // surrogate U+D800
  EXPECT_EQ(utf8_char_length("\xf4\x90\x80\x80"), 0);  // above U+10FFFF
  EXPECT_EQ(utf8_char_length("\xff"), 0);
  EXPECT_EQ(utf8_char_length("\xc3\x41"), 0);  // lead byte followed by ASCII
  EXPECT_EQ(utf8_char_length("\xe4\xb8"), -1);
  EXPECT_TRUE(is_valid_utf8("h\xc3\xa9llo \xf0\x9f\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("h\xc3"));
  EXPECT_FALSE(is_valid_utf8("\xff"));
  EXPECT_TRUE(is_valid_utf8(""));
}

// The encoding of cp by the definition (Unicode table 3-6), written out independently of append_utf8.
std::string encode(uint32_t cp) {
  std::string s;
  auto put = [&](uint32_t b) { s.push_back(static_cast<char>(b)); };
  if (cp < 0x80) {
    put(cp);
  } else if (cp < 0x800) {
    put(0xC0 + cp / 64);
    put(0x80 + cp % 64);
  } else if (cp < 0x10000) {
    put(0xE0 + cp / 4096);
    put(0x80 + cp / 64 % 64);
    put(0x80 + cp % 64);
  } else {
    put(0xF0 + cp / 262144);
    put(0x80 + cp / 4096 % 64);
    put(0x80 + cp / 64 % 64);
    put(0x80 + cp % 64);
  }
  return s;
}

bool is_scalar(uint32_t cp) { return cp < 0x110000 && !(cp >= 0xD800 && cp <= 0xDFFF); }

TEST(Utf8, EveryScalarValueRoundTrips) {
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (!is_scalar(cp)) continue;
    const std::string want = encode(cp);
    std::string s;
    append_utf8(s, cp);
    ASSERT_EQ(s, want) << cp;
    ASSERT_EQ(utf8_char_length(s), static_cast<int>(s.size())) << cp;
    ASSERT_EQ(utf8_sequence_length(static_cast<unsigned char>(s[0])), s.size()) << cp;
    ASSERT_FALSE(find_invalid_utf8(s).has_value()) << cp;
    for (size_t k = 1; k < s.size(); ++k) {
      ASSERT_EQ(utf8_char_length(std::string_view(s).substr(0, k)), -1) << cp << " cut to " << k;
      ASSERT_TRUE(is_utf8_continuation(static_cast<unsigned char>(s[k])));
    }
    ASSERT_FALSE(is_utf8_continuation(static_cast<unsigned char>(s[0])));
    size_t i = 0;
    ASSERT_EQ(next_code_point(s, i), cp);
    ASSERT_EQ(i, s.size());
  }
  std::string s;
  EXPECT_ERROR(append_utf8(s, 0xD800), ErrorKind::Internal, "");
  EXPECT_ERROR(append_utf8(s, 0x110000), ErrorKind::Internal, "");
}

// A byte string of up to 4 bytes as one number (its length in the top byte), for the set below.
uint64_t packed(const std::string& s) {
  uint64_t v = s.size() << 32;
  for (size_t i = 0; i < s.size(); ++i) v |= uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
  return v;
}

// Exhaustive over one and two bytes and over three bytes whose second byte is a continuation; the
// other bytes, which only matter as continuation or not, are sampled at the edges of that range.
TEST(Utf8, ValidExactlyWhenTheBytesEncodeAScalarValue) {
  std::unordered_set<uint64_t> valid;  // the encodings of all scalar values
  for (uint32_t cp = 0; cp < 0x110000; ++cp)
    if (is_scalar(cp)) valid.insert(packed(encode(cp)));
  // How utf8_char_length must classify s: a whole character at its start (its length), an
  // unfinished prefix of one (-1: some continuation completes it; 0x80 or 0xBF fits the second
  // byte of every lead), or invalid (0).
  auto expected = [&](const std::string& s) {
    for (size_t n = 1; n <= s.size(); ++n)
      if (valid.count(packed(s.substr(0, n)))) return static_cast<int>(n);
    for (const char c : {'\x80', '\xBF'})
      for (std::string t = s + c; t.size() <= 4; t += '\x80')
        if (valid.count(packed(t))) return -1;
    return 0;
  };
  std::string s;
  for (int a = 0; a < 256; ++a) {
    s.assign(1, static_cast<char>(a));
    ASSERT_EQ(utf8_char_length(s), expected(s)) << a;
    ASSERT_EQ(is_valid_utf8(s), valid.count(packed(s)) == 1) << a;
    for (int b = 0; b < 256; ++b) {
      s.assign({static_cast<char>(a), static_cast<char>(b)});
      ASSERT_EQ(utf8_char_length(s), expected(s)) << a << " " << b;
      if (a < 0xE0) continue;
      for (int c = 0; c < 256; ++c) {
        // Past a lead of four bytes, or a second byte that is no continuation, the third byte is
        // sampled at the edges of the continuation range.
        const bool sampled = a >= 0xF0 || !is_utf8_continuation(static_cast<unsigned char>(b));
        if (sampled && c != 0x00 && c != 0x7F && c != 0x80 && c != 0xBF && c != 0xC0) continue;
        s.assign({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)});
        ASSERT_EQ(utf8_char_length(s), expected(s)) << a << " " << b << " " << c;
        if (a < 0xF0) continue;
        for (int d : {0x00, 0x41, 0x7F, 0x80, 0x9F, 0xA0, 0xBF, 0xC0, 0xFF}) {
          s.assign({static_cast<char>(a), static_cast<char>(b), static_cast<char>(c), static_cast<char>(d)});
          ASSERT_EQ(utf8_char_length(s), expected(s)) << a << " " << b << " " << c << " " << d;
          ASSERT_EQ(is_valid_utf8(s), valid.count(packed(s)) == 1);
        }
      }
    }
  }
}

TEST(Utf8, FindInvalidReportsTheFirstBadSequence) {
  EXPECT_EQ(find_invalid_utf8(""), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("plain ASCII, more than eight bytes long"), std::nullopt);
  EXPECT_EQ(find_invalid_utf8("abcdefgh\xffxyz"), 8u);                     // after one ASCII word
  EXPECT_EQ(find_invalid_utf8("abcdefghijklmnopq\x80"), 17u);              // a lone continuation byte
  EXPECT_EQ(find_invalid_utf8("caf\xc3\xa9 \xe4\xb8\xad \xe4\xb8"), 10u);  // truncated at the end
  EXPECT_EQ(find_invalid_utf8("\xc3\xa9\xc0\xaf"), 2u);                    // overlong after a valid character
  EXPECT_EQ(find_invalid_utf8("x\xed\xa0\x80"), 1u);                       // a surrogate
  EXPECT_EQ(find_invalid_utf8("\xf4\x8f\xbf\xbf\xf4\x90\x80\x80"), 4u);    // U+10FFFF, then above it
  EXPECT_EQ(find_invalid_utf8("\xef\xbb\xbf"
                              "BOM"),
            std::nullopt);  // a byte-order mark is a character
  // Every position of a bad byte in a long ASCII run (the eight-byte fast path's edges).
  for (size_t at = 0; at < 40; ++at) {
    std::string s(40, 'a');
    s[at] = static_cast<char>(0xFE);
    EXPECT_EQ(find_invalid_utf8(s), at);
    EXPECT_FALSE(is_valid_utf8(s));
  }
}

}  // namespace
}  // namespace tformer
