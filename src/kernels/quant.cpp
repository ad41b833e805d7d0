#include "kernels/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/float16.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// reports once inlined (GCC bug 105593, fixed in 13): a false positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

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
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__F16C__)
  // The same rules sixteen values at a time (the kernels quantize every activation row with it):
  // the maximum is order-free, d and 1 / d are the same float operations, and roundf's halves
  // away from zero are truncation plus one step away from zero where the cut part is >= 0.5.
  // The fixture test holds both forms to the same bytes (the portable build runs the loop).
  for (size_t b = 0; b < y.size(); ++b) {
    const float* v = x.data() + b * kQuantBlockValues;
    const __m512 lo = _mm512_loadu_ps(v), hi = _mm512_loadu_ps(v + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    const __m512 vid = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f);
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(0x80000000u)));
    auto round_away = [&](__m512 u) {
      const __m512 p = _mm512_mul_ps(u, vid);
      const __m512 t = _mm512_roundscale_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(p, t)), half, _CMP_GE_OQ);
      const __m512 step = _mm512_or_ps(_mm512_and_ps(p, sign), one);  // copysign(1, p)
      return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(_mm512_mask_add_ps(t, up, t, step)));
    };
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs), round_away(lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[b].qs + 16), round_away(hi));
  }
#else
  for (size_t b = 0; b < y.size(); ++b) {
    const float* v = x.data() + b * kQuantBlockValues;
    float amax = 0.0f;
    for (int64_t j = 0; j < kQuantBlockValues; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = f32_to_f16(d);
    for (int64_t j = 0; j < kQuantBlockValues; ++j) y[b].qs[j] = static_cast<int8_t>(std::round(v[j] * id));
  }
#endif
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
