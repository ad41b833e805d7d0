// A small DEFLATE compressor (RFC 1951), enough for tformer's PNG plots: flat colours and straight
// lines repeat whole runs of bytes, which LZ77 matches turn into a few bits each.
//
// The stream is either ONE block with the fixed Huffman codes (BTYPE 01) holding literals and
// LZ77 matches (lengths 3..258 at distances 1..32768, found through hash chains over 3-byte
// prefixes, at most 64 candidates per position, greedy: no lazy matching), or, when that would not
// be smaller (incompressible bytes cost 8 or 9 bits each under the fixed codes), STORED blocks
// (BTYPE 00) of at most 65535 bytes. Either way any inflater (zlib, browsers, image viewers)
// reads it. The zlib wrapper (RFC 1950: header, Adler-32) is the caller's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tformer {

// Raw DEFLATE stream of data[0, n); deterministic.
std::string deflate_compress(const uint8_t* data, size_t n);

}  // namespace tformer
