// Helpers shared by the PNG and loss-plot tests (test_plot_*.cpp): a PNG decoder written from the
// PNG, zlib and DEFLATE specifications, independent of src/plot (a bitwise CRC-32 without a
// table, a naive Adler-32, stored and fixed-Huffman blocks inflated bit by bit), random pixels, and
// a fixture with a fresh folder per test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "test_util.h"

namespace tformer::test {

// ---- an independent decoder -------------------------------------------------------------------

// CRC-32 bit by bit, straight from the definition (reflected 0xEDB88320, init and xorout ~0).
inline uint32_t bitwise_crc32(const std::string& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0xEDB88320u : 0u);
  }
  return ~c;
}

// Adler-32 reduced after every byte.
inline uint32_t naive_adler32(const std::string& bytes) {
  uint32_t a = 1, b = 0;
  for (unsigned char x : bytes) {
    a = (a + x) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

inline uint32_t be32(const std::string& s, size_t at) {
  return (uint32_t{static_cast<unsigned char>(s[at])} << 24) | (uint32_t{static_cast<unsigned char>(s[at + 1])} << 16) |
         (uint32_t{static_cast<unsigned char>(s[at + 2])} << 8) | uint32_t{static_cast<unsigned char>(s[at + 3])};
}

struct Decoded {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  std::vector<std::string> chunk_types;
  int stored_blocks = 0, fixed_blocks = 0;
};

// Inflating, from RFC 1951: bits come from each byte's least significant end; Huffman codes are
// read most significant bit first, one bit at a time, against the fixed code's ranges (3.2.6).
struct BitReader {
  const std::string& s;
  size_t pos = 0;
  int bit = 0;
  bool overrun = false;
  uint32_t bit1() {
    if (pos >= s.size()) {
      overrun = true;
      return 0;
    }
    const uint32_t b = (static_cast<unsigned char>(s[pos]) >> bit) & 1u;
    if (++bit == 8) {
      bit = 0;
      ++pos;
    }
    return b;
  }
  uint32_t bits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) v |= bit1() << i;
    return v;
  }
  void to_byte() {
    if (bit != 0) {
      bit = 0;
      ++pos;
    }
  }
};

inline int fixed_literal_or_length(BitReader& r) {
  uint32_t code = 0;
  for (int len = 1; len <= 9; ++len) {
    code = (code << 1) | r.bit1();
    if (len == 7 && code <= 0x17) return static_cast<int>(256 + code);                         // 0000000-0010111
    if (len == 8 && code >= 0x30 && code <= 0xBF) return static_cast<int>(code - 0x30);        // 00110000-10111111
    if (len == 8 && code >= 0xC0 && code <= 0xC7) return static_cast<int>(280 + code - 0xC0);  // 11000000-11000111
    if (len == 9 && code >= 0x190) return static_cast<int>(144 + code - 0x190);                // 110010000-111111111
  }
  return -1;
}

// Appends one fixed-Huffman block's output to out; false on a malformed block.
inline bool inflate_fixed(BitReader& r, std::string& out) {
  static const int len_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                   31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
  static const int len_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                    2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
  static const int dist_base[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                    33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                    1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
  static const int dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                     6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
  for (;;) {
    const int sym = fixed_literal_or_length(r);
    if (sym < 0 || sym > 285 || r.overrun) return false;
    if (sym < 256) {
      out.push_back(static_cast<char>(sym));
    } else if (sym == 256) {
      return true;
    } else {
      const int li = sym - 257;
      const int len = len_base[li] + static_cast<int>(r.bits(len_extra[li]));
      uint32_t dcode = 0;
      for (int i = 0; i < 5; ++i) dcode = (dcode << 1) | r.bit1();
      if (dcode > 29) return false;
      const int dist = dist_base[dcode] + static_cast<int>(r.bits(dist_extra[dcode]));
      if (dist > static_cast<int>(out.size()) || dist > 32768) return false;
      for (int k = 0; k < len; ++k) out.push_back(out[out.size() - dist]);  // overlapping copies allowed
    }
  }
}

// Inflates the blocks of a raw DEFLATE stream into out, counting each type; ADD_FAILURE and false on
// anything malformed. r ends just past the final block's last bit.
inline bool inflate_blocks(BitReader& r, std::string& out, int& stored, int& fixed) {
  for (bool final = false; !final;) {
    final = r.bits(1) != 0;
    const uint32_t type = r.bits(2);
    if (r.overrun) {
      ADD_FAILURE() << "truncated deflate stream";
      return false;
    }
    if (type == 0) {
      r.to_byte();
      const size_t p = r.pos;
      if (p + 4 > r.s.size()) {
        ADD_FAILURE() << "truncated stored block";
        return false;
      }
      const uint32_t len = static_cast<unsigned char>(r.s[p]) | (static_cast<unsigned char>(r.s[p + 1]) << 8);
      const uint32_t nlen = static_cast<unsigned char>(r.s[p + 2]) | (static_cast<unsigned char>(r.s[p + 3]) << 8);
      EXPECT_EQ(len ^ 0xFFFFu, nlen);
      if (p + 4 + len > r.s.size()) {
        ADD_FAILURE() << "stored block past the end";
        return false;
      }
      out += r.s.substr(p + 4, len);
      r.pos = p + 4 + len;
      ++stored;
    } else if (type == 1) {
      if (!inflate_fixed(r, out)) {
        ADD_FAILURE() << "malformed fixed-Huffman block";
        return false;
      }
      ++fixed;
    } else {
      ADD_FAILURE() << "unexpected block type " << type;
      return false;
    }
  }
  return true;
}

// Decodes the PNGs encode_png_rgb writes (RGB8, filter 0, stored or fixed-Huffman deflate blocks);
// any deviation from the format is a test failure.
inline Decoded decode_png(const std::string& png) {
  Decoded d;
  EXPECT_GE(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::string idat;
  size_t at = 8;
  while (at < png.size()) {
    EXPECT_LE(at + 12, png.size()) << "truncated chunk at " << at;
    if (at + 12 > png.size()) return d;
    const uint32_t len = be32(png, at);
    EXPECT_LE(at + 12 + len, png.size());
    if (at + 12 + len > png.size()) return d;
    const std::string type = png.substr(at + 4, 4);
    const std::string data = png.substr(at + 8, len);
    EXPECT_EQ(be32(png, at + 8 + len), bitwise_crc32(type + data)) << "CRC of chunk " << type;
    d.chunk_types.push_back(type);
    if (type == "IHDR") {
      EXPECT_EQ(len, 13u);
      d.width = static_cast<int>(be32(data, 0));
      d.height = static_cast<int>(be32(data, 4));
      EXPECT_EQ(data.substr(8), std::string("\x08\x02\x00\x00\x00", 5));  // RGB8, no interlace
    } else if (type == "IDAT") {
      idat += data;
    } else {
      EXPECT_EQ(type, "IEND");
      EXPECT_EQ(len, 0u);
    }
    at += 12 + len;
  }
  EXPECT_EQ(at, png.size());

  // zlib: CMF FLG, deflate blocks, Adler-32.
  EXPECT_GE(idat.size(), 2u + 2u + 4u);
  const auto cmf = static_cast<unsigned char>(idat[0]), flg = static_cast<unsigned char>(idat[1]);
  EXPECT_EQ(cmf & 0x0F, 8) << "deflate";
  EXPECT_EQ((cmf * 256 + flg) % 31, 0) << "FCHECK";
  EXPECT_EQ(flg & 0x20, 0) << "no preset dictionary";
  std::string raw;
  BitReader r{idat, 2};
  if (!inflate_blocks(r, raw, d.stored_blocks, d.fixed_blocks)) return d;
  r.to_byte();
  const size_t p = r.pos;
  EXPECT_EQ(p + 4, idat.size());
  if (p + 4 <= idat.size()) {
    EXPECT_EQ(be32(idat, p), naive_adler32(raw)) << "Adler-32";
  }

  const size_t row = 3 * static_cast<size_t>(d.width);
  EXPECT_EQ(raw.size(), (row + 1) * static_cast<size_t>(d.height));
  if (raw.size() != (row + 1) * static_cast<size_t>(d.height)) return d;
  for (int y = 0; y < d.height; ++y) {
    EXPECT_EQ(raw[y * (row + 1)], '\0') << "filter byte of row " << y;
    for (size_t i = 0; i < row; ++i) d.rgb.push_back(static_cast<uint8_t>(raw[y * (row + 1) + 1 + i]));
  }
  return d;
}

inline std::vector<uint8_t> random_pixels(int w, int h, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> rgb(static_cast<size_t>(w) * h * 3);
  for (auto& v : rgb) v = static_cast<uint8_t>(rng.next_u64() & 0xff);
  return rgb;
}

class PngTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void put(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  test::TempDir tmp_;  // a fresh folder per test, removed afterwards
  std::filesystem::path dir_ = tmp_.path();
};

}  // namespace tformer::test
