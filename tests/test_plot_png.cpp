// The PNG writer, checked by a decoder written here from the PNG, zlib and DEFLATE specifications:
// every chunk's CRC-32 against a bitwise CRC (no table), the stored and fixed-Huffman deflate blocks
// inflated by hand (bit by bit), the Adler-32 recomputed naively, and the pixels compared. Also
// the loss-curve plot end to end, compressed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "plot/deflate.h"
#include "plot/loss_curves.h"
#include "plot/png.h"
#include "test_util.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;

// ---- an independent decoder -------------------------------------------------------------------

// CRC-32 bit by bit, straight from the definition (reflected 0xEDB88320, init and xorout ~0).
uint32_t bitwise_crc32(const std::string& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0xEDB88320u : 0u);
  }
  return ~c;
}

// Adler-32 reduced after every byte.
uint32_t naive_adler32(const std::string& bytes) {
  uint32_t a = 1, b = 0;
  for (unsigned char x : bytes) {
    a = (a + x) % 65521;
    b = (b + a) % 65521;
  }
  return (b << 16) | a;
}

uint32_t be32(const std::string& s, size_t at) {
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

int fixed_literal_or_length(BitReader& r) {
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
bool inflate_fixed(BitReader& r, std::string& out) {
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
bool inflate_blocks(BitReader& r, std::string& out, int& stored, int& fixed) {
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
Decoded decode_png(const std::string& png) {
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

std::vector<uint8_t> random_pixels(int w, int h, uint64_t seed) {
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
  fs::path dir_ = tmp_.path();
};

// ---- checksums --------------------------------------------------------------------------------

TEST(PngChecksums, KnownVectors) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32(reinterpret_cast<const uint8_t*>(s.data()), s.size()), 0xCBF43926u);
  EXPECT_EQ(bitwise_crc32(s), 0xCBF43926u);
  EXPECT_EQ(crc32(nullptr, 0), 0u);
  const std::string w = "Wikipedia";
  EXPECT_EQ(adler32(reinterpret_cast<const uint8_t*>(w.data()), w.size()), 0x11E60398u);
  EXPECT_EQ(adler32(nullptr, 0), 1u);
}

TEST(PngChecksums, RunningValuesAndLongInputsMatchTheIndependentOnes) {
  Rng rng(3);
  std::string s(200000, '\0');
  for (auto& c : s) c = static_cast<char>(rng.next_u64() & 0xff);
  std::string ones(100000, '\xff');  // the worst case for Adler-32's deferred reduction
  for (const std::string* in : {&s, &ones}) {
    const auto* p = reinterpret_cast<const uint8_t*>(in->data());
    EXPECT_EQ(crc32(p, in->size()), bitwise_crc32(*in));
    EXPECT_EQ(adler32(p, in->size()), naive_adler32(*in));
    EXPECT_EQ(crc32(p + 777, in->size() - 777, crc32(p, 777)), bitwise_crc32(*in));
    EXPECT_EQ(adler32(p + 777, in->size() - 777, adler32(p, 777)), naive_adler32(*in));
  }
}

// ---- the writer -------------------------------------------------------------------------------

TEST_F(PngTest, PixelsRoundTripThroughTheIndependentDecoder) {
  // Random pixels do not compress: stored blocks. 28 x 771: the scanlines are exactly 65535 bytes
  // (one full block); 28 x 772 needs a second one. (1 x 1 and 3 x 2 are so short that one fixed
  // block beats a stored block's 5-byte header: -1 = either.)
  const std::vector<std::tuple<int, int, int>> cases = {{1, 1, -1},   {3, 2, -1},    {28, 771, 1},
                                                        {28, 772, 2}, {200, 150, 2}, {640, 480, 15}};
  for (const auto& [w, h, blocks] : cases) {
    SCOPED_TRACE(std::to_string(w) + "x" + std::to_string(h));
    const auto rgb = random_pixels(w, h, static_cast<uint64_t>(w * 1000 + h));
    const std::string file = path("img.png");
    write_png_rgb(file, w, h, rgb);
    const std::string bytes = slurp(file);
    EXPECT_EQ(bytes, encode_png_rgb(w, h, rgb));
    const Decoded d = decode_png(bytes);
    EXPECT_EQ(d.width, w);
    EXPECT_EQ(d.height, h);
    EXPECT_EQ(d.chunk_types, (std::vector<std::string>{"IHDR", "IDAT", "IEND"}));
    if (blocks >= 0) {
      EXPECT_EQ(d.stored_blocks, blocks);
      EXPECT_EQ(d.fixed_blocks, 0);
    }
    EXPECT_TRUE(d.rgb == rgb) << "pixels differ";
  }
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"img.png"}) << "no temporary is left";
}

// Images with structure (what plots are) take one fixed-Huffman block and shrink by orders of
// magnitude; the independent inflater gives back every pixel.
TEST_F(PngTest, StructuredImagesCompress) {
  const int w = 300, h = 200;
  std::vector<std::vector<uint8_t>> images;
  images.emplace_back(static_cast<size_t>(w) * h * 3, 255);  // flat white
  std::vector<uint8_t> stripes(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c)
        stripes[(static_cast<size_t>(y) * w + x) * 3 + c] = static_cast<uint8_t>((x / 7 + y / 5 + c * 40) % 3 * 100);
  images.push_back(stripes);
  std::vector<uint8_t> ramp(static_cast<size_t>(w) * h * 3);  // every row different, columns repeat
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<uint8_t>((i / 3 % w + i / (3 * w)) & 0xff);
  images.push_back(ramp);
  for (size_t k = 0; k < images.size(); ++k) {
    SCOPED_TRACE("image " + std::to_string(k));
    const std::string png = encode_png_rgb(w, h, images[k]);
    const Decoded d = decode_png(png);
    EXPECT_EQ(d.fixed_blocks, 1);
    EXPECT_EQ(d.stored_blocks, 0);
    EXPECT_LT(png.size(), images[k].size() / 10) << png.size() << " bytes";
    EXPECT_TRUE(d.rgb == images[k]) << "pixels differ";
  }
}

// The compressor alone on the edges of LZ77: empty and 1-2 byte inputs (no match possible), runs
// longer than the longest match (258), overlapping copies at distance 1, a repeat exactly 32768
// bytes back (the largest distance) and one 32769 back (out of reach), random bytes (stored).
TEST(Deflate, EdgeCasesInflateBackExactly) {
  Rng rng(9);
  auto random_bytes = [&](size_t n) {
    std::string x(n, '\0');
    for (auto& c : x) c = static_cast<char>(rng.next_u64() & 0xff);
    return x;
  };
  const std::string block = random_bytes(1000);
  std::vector<std::pair<std::string, std::string>> cases = {
      {"empty", ""},
      {"one byte", "x"},
      {"two bytes", "xy"},
      {"run of 1000", std::string(1000, 'a')},
      {"run of 259", std::string(259, 'b')},
      {"abc x 400",
       [] {
         std::string x;
         for (int i = 0; i < 400; ++i) x += "abc";
         return x;
       }()},
      {"repeat at 32768", block + random_bytes(32768 - 1000) + block},
      {"repeat at 32769", block + random_bytes(32769 - 1000) + block},
      {"random 70000", random_bytes(70000)},
  };
  for (const auto& [name, in] : cases) {
    SCOPED_TRACE(name);
    const std::string z = deflate_compress(reinterpret_cast<const uint8_t*>(in.data()), in.size());
    BitReader r{z};
    std::string out;
    int stored = 0, fixed = 0;
    ASSERT_TRUE(inflate_blocks(r, out, stored, fixed));
    r.to_byte();
    EXPECT_EQ(r.pos, z.size()) << "bytes after the final block";
    EXPECT_TRUE(out == in) << "inflated " << out.size() << " bytes of " << in.size();
    if (name == std::string("random 70000")) {
      EXPECT_EQ(stored, 2);  // never larger than storing
    }
    if (name == std::string("run of 1000")) {
      EXPECT_LT(z.size(), 20u);
    }
  }
  // With a filler that costs nothing (zeros), the repeat 32768 back is found (the second copy of
  // the random block costs a few matches); 32769 back it is not (the block is paid for twice).
  const std::string near = block + std::string(32768 - 1000, '\0') + block;
  const std::string far = block + std::string(32769 - 1000, '\0') + block;
  const size_t zn = deflate_compress(reinterpret_cast<const uint8_t*>(near.data()), near.size()).size();
  const size_t zf = deflate_compress(reinterpret_cast<const uint8_t*>(far.data()), far.size()).size();
  EXPECT_LT(zn + 500, zf) << zn << " vs " << zf;
  for (const std::string* x : {&near, &far}) {
    const std::string z = deflate_compress(reinterpret_cast<const uint8_t*>(x->data()), x->size());
    BitReader r{z};
    std::string out;
    int stored = 0, fixed = 0;
    ASSERT_TRUE(inflate_blocks(r, out, stored, fixed));
    EXPECT_EQ(fixed, 1);
    EXPECT_TRUE(out == *x);
  }
}

TEST_F(PngTest, BadSizesAreErrors) {
  EXPECT_ERROR(encode_png_rgb(0, 1, {}), ErrorKind::BadInput, "width");
  EXPECT_ERROR(encode_png_rgb(2, 1, {}), ErrorKind::BadInput, "rgb", "needs 6 RGB bytes, got 0");
  EXPECT_ERROR(encode_png_rgb(2, 2, std::vector<uint8_t>(11)), ErrorKind::BadInput, "rgb", "got 11");
  EXPECT_ERROR(write_png_rgb(path("no-such-folder/x.png"), 1, 1, {1, 2, 3}), ErrorKind::BadFile,
               path("no-such-folder/x.png"));
}

// ---- the loss plot ----------------------------------------------------------------------------

int64_t count_color(const std::vector<uint8_t>& rgb, const std::array<uint8_t, 3>& c) {
  int64_t n = 0;
  for (size_t i = 0; i + 2 < rgb.size(); i += 3)
    if (rgb[i] == c[0] && rgb[i + 1] == c[1] && rgb[i + 2] == c[2]) ++n;
  return n;
}

TEST_F(PngTest, PlotOfThreePointsHasBothCurves) {
  put("metrics.jsonl",
      "{\"step\": 0, \"train_loss\": 5.5, \"val_loss\": 5.6}\n"
      "{\"step\": 100, \"train_loss\": 3.1, \"val_loss\": null, \"lr\": 0.001}\n"
      "{\"step\": 200, \"train_loss\": 2.2, \"val_loss\": 2.5}\n");
  const LossCurves curves = read_loss_curves(path("metrics.jsonl"));
  EXPECT_EQ(curves.train.size(), 3u);
  EXPECT_EQ(curves.val.size(), 2u);
  plot_loss_curves(path("metrics.jsonl"), path("loss.png"));
  const Decoded d = decode_png(slurp(path("loss.png")));
  EXPECT_EQ(d.width, 800);
  EXPECT_EQ(d.height, 500);
  // A line from (0, 5.5) to (200, 2.2) across ~750 pixels is hundreds of pixels of each colour.
  EXPECT_GT(count_color(d.rgb, kTrainCurveColor), 500);
  EXPECT_GT(count_color(d.rgb, kValCurveColor), 300);
  // Mostly background, and some dark pixels (axes, labels).
  EXPECT_GT(count_color(d.rgb, {255, 255, 255}), 800 * 500 / 2);
  EXPECT_GT(count_color(d.rgb, {0, 0, 0}), 1000);

  // Another size; a train-only file has no val colour.
  put("train-only.jsonl", "{\"step\": 1, \"train_loss\": 4}\n{\"step\": 2, \"train_loss\": 3}\n");
  plot_loss_curves(path("train-only.jsonl"), path("t.png"), 320, 200);
  const Decoded t = decode_png(slurp(path("t.png")));
  EXPECT_EQ(t.width, 320);
  EXPECT_EQ(t.height, 200);
  EXPECT_GT(count_color(t.rgb, kTrainCurveColor), 100);
  EXPECT_EQ(count_color(t.rgb, kValCurveColor), 0);
}

TEST_F(PngTest, PlotDegenerateInputs) {
  // One point, a flat curve, huge step numbers: all render without error.
  for (const std::string& text : {std::string("{\"step\": 5, \"train_loss\": 1.5}\n"),
                                  std::string("{\"step\": 1, \"val_loss\": 2}\n{\"step\": 2, \"val_loss\": 2}\n"),
                                  std::string("{\"step\": 100000000, \"train_loss\": 1e-9}\n"
                                              "{\"step\": 300000000, \"train_loss\": 2e-9}\n")}) {
    put("m.jsonl", text);
    plot_loss_curves(path("m.jsonl"), path("m.png"), 400, 300);
    const Decoded d = decode_png(slurp(path("m.png")));
    EXPECT_EQ(d.width, 400);
    EXPECT_GT(count_color(d.rgb, kTrainCurveColor) + count_color(d.rgb, kValCurveColor), 10) << text;
  }
}

TEST_F(PngTest, PlotErrorsNameFileAndLine) {
  put("bad.jsonl", "{\"step\": 1, \"train_loss\": 2}\n{\"step\": 2, \"train_loss\": \n");
  EXPECT_ERROR(plot_loss_curves(path("bad.jsonl"), path("x.png")), ErrorKind::BadFile, path("bad.jsonl"),
               path("bad.jsonl") + ":2:");
  put("empty.jsonl", "{\"step\": 1}\n");
  EXPECT_ERROR(plot_loss_curves(path("empty.jsonl"), path("x.png")), ErrorKind::BadFile, path("empty.jsonl"),
               "no train_loss or val_loss");
  EXPECT_ERROR(plot_loss_curves(path("missing.jsonl"), path("x.png")), ErrorKind::BadFile, path("missing.jsonl"));
  // The plot of curves that are not drawable: no values, a size out of range.
  EXPECT_ERROR(render_loss_curves(LossCurves{}, 800, 500), ErrorKind::BadInput, "curves");
  const LossCurves one{{{1.0, 2.0}}, {}};
  EXPECT_ERROR(render_loss_curves(one, 100, 500), ErrorKind::BadInput, "width", "got 100x500");
  EXPECT_ERROR(render_loss_curves(one, 800, 9000), ErrorKind::BadInput, "height", "got 800x9000");
  EXPECT_FALSE(fs::exists(path("x.png")));
}

}  // namespace
}  // namespace tformer
