// ggml's block formats (kernels/quant.h): tformer's quantization byte-identical to an independent
// implementation of the published rules (tools/reference/gen_quant_fixtures.py, numpy) on 18 rows
// (scales from 1e-6 to 6e4, ties, the largest magnitude negative and positive, equal magnitudes,
// zero blocks); the worked blocks of quant.h by hand; dequantization exact; bad sizes refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/float16.h"
#include "core/rng.h"
#include "kernels/quant.h"
#include "test_util.h"
#include "tokenizer_test_util.h"

namespace tformer {
namespace {

std::vector<uint8_t> from_hex(const std::string& hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return out;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> out(v.size() * sizeof(T));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<float> block(std::initializer_list<float> head) {
  std::vector<float> x(kQuantBlockValues, 0.0f);
  std::copy(head.begin(), head.end(), x.begin());
  return x;
}

TEST(Quant, ByteIdenticalToAnIndependentImplementationOfGgmlsRules) {
  const auto j = nlohmann::json::parse(test::read_file("fixtures/quant/quant_blocks.json"));
  ASSERT_GE(j["cases"].size(), 18u);
  for (const auto& c : j["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    const std::vector<uint8_t> raw = from_hex(c["values_f32_hex"]);
    std::vector<float> x(raw.size() / 4);
    std::memcpy(x.data(), raw.data(), raw.size());
    std::vector<BlockQ8_0> q8(x.size() / kQuantBlockValues);
    quantize_row_q8_0(x, q8);
    EXPECT_EQ(bytes_of(q8), from_hex(c["q8_0_hex"]));
    std::vector<BlockQ4_0> q4(x.size() / kQuantBlockValues);
    quantize_row_q4_0(x, q4);
    EXPECT_EQ(bytes_of(q4), from_hex(c["q4_0_hex"]));
    std::vector<uint16_t> b16(x.size());
    quantize_row_bf16(x, b16);
    EXPECT_EQ(bytes_of(b16), from_hex(c["bf16_hex"]));
  }
}

TEST(Quant, Q8WorkedBlockTiesGoAwayFromZero) {
  const std::vector<float> x = block({127.0f, -0.5f, 0.5f, 2.5f, -2.5f, 1.49f});
  std::vector<BlockQ8_0> y(1);
  quantize_row_q8_0(x, y);
  EXPECT_EQ(y[0].d, 0x3C00);  // d = 127 / 127 = 1
  const int8_t expected[] = {127, -1, 1, 3, -3, 1};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[0].qs[i], expected[i]) << i;
  for (int i = 6; i < 32; ++i) EXPECT_EQ(y[0].qs[i], 0) << i;
  std::vector<float> back(32);
  dequantize_row_q8_0(y, back);
  EXPECT_EQ(back[0], 127.0f);
  EXPECT_EQ(back[3], 3.0f);
  EXPECT_EQ(back[4], -3.0f);
}

TEST(Quant, Q4WorkedBlocksTheLargestMagnitudeSetsTheSign) {
  std::vector<BlockQ4_0> y(1);
  // Largest magnitude negative (-8): d = -8 / -8 = 1, q = trunc(x + 8.5) clamped to 15.
  std::vector<float> x = block({-8.0f, 7.0f, 7.5f, 0.0f, 0.5f, -0.5f, 1.5f});
  x[16] = 3.0f;  // element 16: the high nibble of byte 0
  quantize_row_q4_0(x, y);
  EXPECT_EQ(y[0].d, 0x3C00);
  EXPECT_EQ(y[0].qs[0], 0 | (11 << 4));  // q(-8) = 0, q(3) = 11
  EXPECT_EQ(y[0].qs[1], 15 | (8 << 4));  // q(7) = 15; element 17 is 0 -> 8
  EXPECT_EQ(y[0].qs[2] & 0x0F, 15);      // q(7.5) = 16, clamped
  EXPECT_EQ(y[0].qs[3] & 0x0F, 8);       // q(0) = 8
  EXPECT_EQ(y[0].qs[4] & 0x0F, 9);       // q(0.5) = trunc(9.0): a half rounds up
  EXPECT_EQ(y[0].qs[5] & 0x0F, 8);       // q(-0.5) = trunc(8.0)
  EXPECT_EQ(y[0].qs[6] & 0x0F, 10);      // q(1.5) = 10
  std::vector<float> back(32);
  dequantize_row_q4_0(y, back);
  EXPECT_EQ(back[0], -8.0f);
  EXPECT_EQ(back[16], 3.0f);
  EXPECT_EQ(back[2], 7.0f);
  // Largest magnitude positive (+8): d = -1, so +8 maps to q = 0 and -8 to 16, clamped to 15.
  x = block({8.0f, -8.0f, 4.0f});
  quantize_row_q4_0(x, y);
  EXPECT_EQ(y[0].d, 0xBC00);  // -1
  EXPECT_EQ(y[0].qs[0] & 0x0F, 0);
  EXPECT_EQ(y[0].qs[1] & 0x0F, 15);
  EXPECT_EQ(y[0].qs[2] & 0x0F, 4);  // 4 * -1 + 8.5 = 4.5 -> 4
  dequantize_row_q4_0(y, back);
  EXPECT_EQ(back[0], 8.0f);
  EXPECT_EQ(back[1], -7.0f);  // the clamp costs one step at the far end
  // Equal magnitudes: the first decides (d = 2 / -8 < 0 here).
  x = block({2.0f, -2.0f});
  quantize_row_q4_0(x, y);
  EXPECT_LT(f16_to_f32(y[0].d), 0.0f);
}

TEST(Quant, AllZeroBlocksHaveAZeroScale) {
  const std::vector<float> x(64, 0.0f);
  std::vector<BlockQ8_0> q8(2);
  std::vector<BlockQ4_0> q4(2);
  quantize_row_q8_0(x, q8);
  quantize_row_q4_0(x, q4);
  for (int b = 0; b < 2; ++b) {
    EXPECT_EQ(q8[b].d, 0);
    EXPECT_EQ(q4[b].d, 0x8000);  // -0: ggml's d = 0 / -8
    for (int j = 0; j < 32; ++j) EXPECT_EQ(q8[b].qs[j], 0);
    for (int j = 0; j < 16; ++j) EXPECT_EQ(q4[b].qs[j], 0x88);
  }
  std::vector<float> back(64, 1.0f);
  dequantize_row_q4_0(q4, back);
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

// Dequantizing is d * q exactly, and the error of a round trip is at most half a step (plus the
// scale's fp16 rounding) for Q8_0 and one step for Q4_0's clamped end.
TEST(Quant, RoundTripErrorsStayWithinAStep) {
  Rng rng(5);
  std::vector<float> x(32 * 40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(rng.normal()) * (i % 64 < 32 ? 0.02f : 3.0f);
  std::vector<BlockQ8_0> q8(40);
  std::vector<BlockQ4_0> q4(40);
  quantize_row_q8_0(x, q8);
  quantize_row_q4_0(x, q4);
  std::vector<float> b8(x.size()), b4(x.size());
  dequantize_row_q8_0(q8, b8);
  dequantize_row_q4_0(q4, b4);
  for (size_t b = 0; b < 40; ++b) {
    const float d8 = f16_to_f32(q8[b].d), d4 = std::fabs(f16_to_f32(q4[b].d));
    for (size_t j = 0; j < 32; ++j) {
      const size_t i = b * 32 + j;
      EXPECT_EQ(b8[i], d8 * static_cast<float>(q8[b].qs[j]));
      EXPECT_LE(std::fabs(b8[i] - x[i]), 0.5f * d8 * 1.01f + 127.0f * d8 * 1e-3f) << i;
      EXPECT_LE(std::fabs(b4[i] - x[i]), 1.0f * d4 * 1.01f) << i;
    }
  }
}

TEST(Quant, SizesThatAreNotWholeBlocksAreRefused) {
  const std::vector<float> x(40, 1.0f);
  std::vector<BlockQ8_0> q8(1);
  std::vector<BlockQ4_0> q4(1);
  EXPECT_ERROR(quantize_row_q8_0(x, q8), ErrorKind::BadInput, "n");
  EXPECT_ERROR(quantize_row_q4_0(x, q4), ErrorKind::BadInput, "n");
}

}  // namespace
}  // namespace tformer
