// A minimal PNG writer: 8-bit RGB, our own DEFLATE (plot/deflate.h), no external library.
//
// The file (all integers big-endian, as PNG wants):
//   the 8-byte signature 89 50 4E 47 0D 0A 1A 0A
//   IHDR  width, height (u32), bit depth 8, colour type 2 (RGB), compression 0, filter 0, interlace 0
//   IDAT  one zlib stream (RFC 1950): header 78 01, then the scanlines (each a filter byte 0 and the
//         row's 3 * width bytes) compressed by deflate_compress (one fixed-Huffman block with LZ77
//         matches; stored blocks of at most 65535 bytes when that is not smaller, e.g. noise),
//         then the Adler-32 of the scanlines
//   IEND
// Each chunk is length (u32), type, data, CRC-32 of type and data (the ISO-HDLC / zlib CRC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tformer {

// CRC-32 as PNG and zlib use it (reflected polynomial 0xEDB88320, init and final xor 0xFFFFFFFF);
// pass the previous result as crc to continue a running CRC. crc32("123456789") == 0xCBF43926.
uint32_t crc32(const uint8_t* data, size_t n, uint32_t crc = 0);
// Adler-32 (RFC 1950); pass the previous result as adler to continue. adler32("Wikipedia") == 0x11E60398.
uint32_t adler32(const uint8_t* data, size_t n, uint32_t adler = 1);

// The bytes of a PNG of width x height pixels; rgb is row-major, 3 bytes per pixel, top row first.
// Throws Error when the sizes do not match or are not positive.
std::string encode_png_rgb(int width, int height, const std::vector<uint8_t>& rgb);
// encode_png_rgb written to path atomically (core/file_io.h); errors name the file.
void write_png_rgb(const std::string& path, int width, int height, const std::vector<uint8_t>& rgb);

}  // namespace tformer
