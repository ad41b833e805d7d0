// The PNG writer and its DEFLATE compressor, checked by an independent decoder (png_test_util.h:
// written from the PNG, zlib and DEFLATE specifications): every chunk's CRC-32 against a bitwise
// CRC (no table), the stored and fixed-Huffman deflate blocks inflated by hand (bit by bit), the
// Adler-32 recomputed naively, and the pixels compared. The loss plot: test_plot_loss_curves.cpp.
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
#include "plot/png.h"
#include "png_test_util.h"
#include "test_util.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;

using test::BitReader;
using test::bitwise_crc32;
using test::decode_png;
using test::Decoded;
using test::inflate_blocks;
using test::naive_adler32;
using test::random_pixels;
using PngTest = test::PngTest;

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
    const auto rgb = random_pixels(w, h, static_cast<uint64_t>(w) * 1000 + static_cast<uint64_t>(h));
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

}  // namespace
}  // namespace tformer
