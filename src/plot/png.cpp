#include "plot/png.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "core/file_io.h"
#include "plot/deflate.h"

namespace tformer {

namespace {

constexpr std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrcTable = make_crc_table();

void put_be32(std::string& out, uint32_t v) {
  for (int i = 3; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Appends one chunk: length, type, data, CRC-32 of type and data.
void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_be32(out, static_cast<uint32_t>(data.size()));
  const size_t type_at = out.size();
  out.append(type, 4);
  out.append(data);
  const auto* p = reinterpret_cast<const uint8_t*>(out.data() + type_at);
  put_be32(out, crc32(p, 4 + data.size()));
}

}  // namespace

uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc) {
  uint32_t c = crc ^ 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = kCrcTable[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler) {
  constexpr uint32_t kMod = 65521;
  uint32_t a = adler & 0xffff, b = adler >> 16;
  while (n > 0) {
    // 5552 bytes is the most that keeps b below 2^32 before the reduction (zlib's NMAX).
    const size_t block = std::min<size_t>(n, 5552);
    for (size_t i = 0; i < block; ++i) {
      a += data[i];
      b += a;
    }
    a %= kMod;
    b %= kMod;
    data += block;
    n -= block;
  }
  return (b << 16) | a;
}

std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb) {
  if (width <= 0 || height <= 0)
    fail_input(width <= 0 ? "width" : "height", "PNG size must be positive, got {}x{}", width, height);
  const size_t row = 3 * static_cast<size_t>(width);
  if (rgb.size() != row * static_cast<size_t>(height))
    fail_input("rgb", "PNG of {}x{} needs {} RGB bytes, got {}", width, height, row * static_cast<size_t>(height),
               rgb.size());

  // The scanlines: a filter byte (0, none) before each row.
  std::string raw;
  raw.reserve((row + 1) * static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(rgb.data()) + y * row, row);
  }

  // zlib stream: CMF 0x78 (deflate, 32K window), FLG 0x01 (no dictionary; 0x7801 % 31 == 0), the
  // deflate stream (fixed-Huffman LZ77, or stored blocks when that is not smaller), Adler-32.
  const auto* raw_bytes = reinterpret_cast<const uint8_t*>(raw.data());
  std::string z("\x78\x01", 2);
  z += deflate_compress(raw_bytes, raw.size());
  put_be32(z, adler32(raw_bytes, raw.size()));

  std::string ihdr;
  put_be32(ihdr, static_cast<uint32_t>(width));
  put_be32(ihdr, static_cast<uint32_t>(height));
  ihdr += std::string{8, 2, 0, 0, 0};  // bit depth 8, colour type 2 (RGB), compression, filter, interlace

  std::string png("\x89PNG\r\n\x1a\n", 8);
  put_chunk(png, "IHDR", ihdr);
  put_chunk(png, "IDAT", z);
  put_chunk(png, "IEND", "");
  return png;
}

void write_png_rgb(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb) {
  write_file_atomic(path, encode_png_rgb(width, height, rgb));
}

}  // namespace tformer
