#include "plot/deflate.h"

#include <algorithm>
#include <vector>

namespace tformer {

namespace {

// Bits are packed starting at each byte's least significant bit (RFC 1951 3.1.1); Huffman codes
// are sent most significant bit first, hence put_code's reversal.
class BitWriter {
 public:
  void put(uint32_t value, int n) {
    acc_ |= static_cast<uint64_t>(value) << nbits_;
    nbits_ += n;
    while (nbits_ >= 8) {
      out_.push_back(static_cast<char>(acc_ & 0xff));
      acc_ >>= 8;
      nbits_ -= 8;
    }
  }
  void put_code(uint32_t code, int len) {
    uint32_t r = 0;
    for (int i = 0; i < len; ++i) r |= ((code >> i) & 1u) << (len - 1 - i);
    put(r, len);
  }
  std::string finish() {
    if (nbits_ > 0) out_.push_back(static_cast<char>(acc_ & 0xff));
    acc_ = 0;
    nbits_ = 0;
    return std::move(out_);
  }

 private:
  std::string out_;
  uint64_t acc_ = 0;
  int nbits_ = 0;
};

// The fixed literal/length code (RFC 1951 3.2.6).
void put_symbol(BitWriter& w, int sym) {
  if (sym < 144)
    w.put_code(0x30 + sym, 8);
  else if (sym < 256)
    w.put_code(0x190 + (sym - 144), 9);
  else if (sym < 280)
    w.put_code(sym - 256, 7);
  else
    w.put_code(0xC0 + (sym - 280), 8);
}

constexpr uint16_t kLenBase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                   31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
constexpr uint8_t kLenExtra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                   2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
constexpr uint16_t kDistBase[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                    33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                    1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
constexpr uint8_t kDistExtra[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                    6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

void put_match(BitWriter& w, int len, int dist) {
  int i = 28;
  while (kLenBase[i] > len) --i;
  put_symbol(w, 257 + i);
  w.put(static_cast<uint32_t>(len - kLenBase[i]), kLenExtra[i]);
  int j = 29;
  while (kDistBase[j] > dist) --j;
  w.put_code(static_cast<uint32_t>(j), 5);  // the fixed distance code: 5 bits, the code's value
  w.put(static_cast<uint32_t>(dist - kDistBase[j]), kDistExtra[j]);
}

std::string fixed_block(const uint8_t* data, size_t n) {
  constexpr int kHashBits = 15, kMaxChain = 64, kMinMatch = 3, kMaxMatch = 258;
  constexpr int64_t kWindow = 32768;
  std::vector<int64_t> head(size_t{1} << kHashBits, -1), prev(static_cast<size_t>(kWindow), -1);
  auto hash3 = [&](size_t i) {
    const uint32_t v = data[i] | (uint32_t{data[i + 1]} << 8) | (uint32_t{data[i + 2]} << 16);
    return (v * 2654435761u) >> (32 - kHashBits);
  };
  auto insert = [&](size_t i) {
    if (i + kMinMatch > n) return;
    const uint32_t h = hash3(i);
    prev[i & (kWindow - 1)] = head[h];
    head[h] = static_cast<int64_t>(i);
  };

  BitWriter w;
  w.put(1, 1);  // BFINAL
  w.put(1, 2);  // BTYPE 01: fixed Huffman codes
  size_t i = 0;
  while (i < n) {
    int best_len = 0;
    int64_t best_dist = 0;
    if (i + kMinMatch <= n) {
      const int max_len = static_cast<int>(std::min<size_t>(kMaxMatch, n - i));
      int64_t cand = head[hash3(i)];
      for (int chain = 0; cand >= 0 && static_cast<int64_t>(i) - cand <= kWindow && chain < kMaxChain; ++chain) {
        int len = 0;
        while (len < max_len && data[cand + len] == data[i + len]) ++len;
        if (len > best_len) {
          best_len = len;
          best_dist = static_cast<int64_t>(i) - cand;
          if (len == max_len) break;
        }
        const int64_t next = prev[cand & (kWindow - 1)];
        if (next >= cand) break;  // never walk forward (a slot reused by a newer position)
        cand = next;
      }
    }
    if (best_len >= kMinMatch) {
      put_match(w, best_len, static_cast<int>(best_dist));
      for (int k = 0; k < best_len; ++k) insert(i + k);
      i += best_len;
    } else {
      put_symbol(w, data[i]);
      insert(i);
      ++i;
    }
  }
  put_symbol(w, 256);  // end of block
  return w.finish();
}

std::string stored_blocks(const uint8_t* data, size_t n) {
  std::string z;
  z.reserve(n + n / 65535 * 5 + 5);
  size_t at = 0;
  do {
    const size_t len = std::min<size_t>(n - at, 65535);
    const bool last = at + len == n;
    z.push_back(last ? 0x01 : 0x00);  // BFINAL, BTYPE 00 (stored); the rest of the byte is padding
    z.push_back(static_cast<char>(len & 0xff));
    z.push_back(static_cast<char>(len >> 8));
    z.push_back(static_cast<char>(~len & 0xff));
    z.push_back(static_cast<char>((~len >> 8) & 0xff));
    z.append(reinterpret_cast<const char*>(data) + at, len);
    at += len;
  } while (at < n);
  return z;
}

}  // namespace

std::string deflate_compress(const uint8_t* data, size_t n) {
  std::string fixed = fixed_block(data, n);
  const size_t stored_size = n + 5 * std::max<size_t>(1, (n + 65534) / 65535);
  return fixed.size() < stored_size ? fixed : stored_blocks(data, n);
}

}  // namespace tformer
