#include "kernels/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/float16.h"

namespace tformer {
namespace {

// n values into n / 32 blocks: both sizes must agree.
void check_blocks(size_t values, size_t blocks, const char* what) {
  if (values % kQuantBlockValues != 0)
    fail_input("n", "{}: {} values are not a whole number of blocks of {}", what, values, kQuantBlockValues);
  TF_CHECK(blocks == values / kQuantBlockValues, "{}: {} values need {} blocks, given {}", what, values,
           values / kQuantBlockValues, blocks);
}

}  // namespace

void quantize_row_q8_0(std::span<const float> x, std::span<BlockQ8_0> y) {
  check_blocks(x.size(), y.size(), "q8_0");
  for (size_t b = 0; b < y.size(); ++b) {
    const float* v = x.data() + b * kQuantBlockValues;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int64_t j = 0; j < kQuantBlockValues; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(v[j] * id));
  }
}

void dequantize_row_q8_0(std::span<const BlockQ8_0> x, std::span<float> y) {
  check_blocks(y.size(), x.size(), "q8_0");
  for (size_t b = 0; b < x.size(); ++b) {
    const float d = f16_to_f32(x[b].d);
    for (int64_t j = 0; j < kQuantBlockValues; ++j) y[b * kQuantBlockValues + j] = d * static_cast<float>(x[b].qs[j]);
  }
}

void quantize_row_q4_0(std::span<const float> x, std::span<BlockQ4_0> y) {
  check_blocks(x.size(), y.size(), "q4_0");
  constexpr int64_t kHalf = kQuantBlockValues / 2;
  for (size_t b = 0; b < y.size(); ++b) {
    const float* v = x.data() + b * kQuantBlockValues;
    float amax = 0.0f, m = 0.0f;
    for (int64_t j = 0; j < kQuantBlockValues; ++j) {
      if (amax < std::fabs(v[j])) {  // strict: the first of equal magnitudes keeps its sign
        amax = std::fabs(v[j]);
        m = v[j];
      }
    }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    const auto q = [&](float value) {
      const float shifted = value * id + 8.5f;  // in [0.5, 16.5]: truncation rounds halves up
      return static_cast<uint8_t>(std::min(15, static_cast<int>(shifted)));
    };
    for (int64_t j = 0; j < kHalf; ++j) y[b].qs[j] = static_cast<uint8_t>(q(v[j]) | (q(v[j + kHalf]) << 4));
  }
}

void dequantize_row_q4_0(std::span<const BlockQ4_0> x, std::span<float> y) {
  check_blocks(y.size(), x.size(), "q4_0");
  constexpr int64_t kHalf = kQuantBlockValues / 2;
  for (size_t b = 0; b < x.size(); ++b) {
    const float d = f16_to_f32(x[b].d);
    float* out = y.data() + b * kQuantBlockValues;
    for (int64_t j = 0; j < kHalf; ++j) {
      out[j] = d * static_cast<float>((x[b].qs[j] & 0x0F) - 8);
      out[j + kHalf] = d * static_cast<float>((x[b].qs[j] >> 4) - 8);
    }
  }
}

void quantize_row_bf16(std::span<const float> x, std::span<uint16_t> y) {
  TF_CHECK(x.size() == y.size(), "bf16: {} values into {}", x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = f32_to_bf16(x[i]);
}

void dequantize_row_bf16(std::span<const uint16_t> x, std::span<float> y) {
  TF_CHECK(x.size() == y.size(), "bf16: {} values into {}", x.size(), y.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_to_f32(x[i]);
}

}  // namespace tformer
