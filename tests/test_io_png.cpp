// The PNG writer, checked by a decoder written here from the PNG and zlib specifications: every
// chunk's CRC-32 against a bitwise CRC (no table), the stored deflate blocks inflated by hand, the
// Adler-32 recomputed naively, and the pixels compared. Also the loss-curve plot end to end.
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
#include "io/png.h"
#include "train/plot.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

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
  int stored_blocks = 0;
};

// Decodes the PNGs encode_png_rgb writes (RGB8, stored deflate blocks, filter 0); any deviation from
// the format is a test failure.
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

  // zlib: CMF FLG, stored deflate blocks, Adler-32.
  EXPECT_GE(idat.size(), 2u + 5u + 4u);
  const auto cmf = static_cast<unsigned char>(idat[0]), flg = static_cast<unsigned char>(idat[1]);
  EXPECT_EQ(cmf & 0x0F, 8) << "deflate";
  EXPECT_EQ((cmf * 256 + flg) % 31, 0) << "FCHECK";
  EXPECT_EQ(flg & 0x20, 0) << "no preset dictionary";
  std::string raw;
  size_t p = 2;
  for (bool final = false; !final;) {
    if (p + 5 > idat.size()) {
      ADD_FAILURE() << "truncated deflate block";
      return d;
    }
    const auto header = static_cast<unsigned char>(idat[p]);
    final = header & 1;
    EXPECT_EQ((header >> 1) & 3, 0) << "stored block";
    const uint32_t len = static_cast<unsigned char>(idat[p + 1]) | (static_cast<unsigned char>(idat[p + 2]) << 8);
    const uint32_t nlen = static_cast<unsigned char>(idat[p + 3]) | (static_cast<unsigned char>(idat[p + 4]) << 8);
    EXPECT_EQ(len ^ 0xFFFFu, nlen);
    p += 5;
    if (p + len > idat.size()) {
      ADD_FAILURE() << "stored block past the end";
      return d;
    }
    raw += idat.substr(p, len);
    p += len;
    ++d.stored_blocks;
  }
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
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("tformer_png_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void put(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  fs::path dir_;
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
  // 28 x 771: the scanlines are exactly 65535 bytes (one full block); 28 x 772 needs a second one.
  const std::vector<std::tuple<int, int, int>> cases = {{1, 1, 1}, {3, 2, 1}, {28, 771, 1}, {28, 772, 2}, {200, 150, 2},
                                                        {640, 480, 15}};
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
    EXPECT_EQ(d.stored_blocks, blocks);
    EXPECT_TRUE(d.rgb == rgb) << "pixels differ";
  }
  EXPECT_FALSE(fs::exists(path("img.png.tmp")));
}

TEST_F(PngTest, BadSizesAreErrors) {
  EXPECT_THROW(encode_png_rgb(0, 1, {}), Error);
  EXPECT_THROW(encode_png_rgb(2, 2, std::vector<uint8_t>(11)), Error);
  try {
    write_png_rgb(path("no-such-folder/x.png"), 1, 1, {1, 2, 3});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no-such-folder"));
  }
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
  try {
    plot_loss_curves(path("bad.jsonl"), path("x.png"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(path("bad.jsonl") + ":2:"));
  }
  put("empty.jsonl", "{\"step\": 1}\n");
  try {
    plot_loss_curves(path("empty.jsonl"), path("x.png"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("empty.jsonl"));
    EXPECT_THAT(e.what(), HasSubstr("no train_loss or val_loss"));
  }
  EXPECT_THROW(plot_loss_curves(path("missing.jsonl"), path("x.png")), Error);
  EXPECT_FALSE(fs::exists(path("x.png")));
}

}  // namespace
}  // namespace tformer
