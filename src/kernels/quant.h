// Quantized weight formats, exactly ggml's (GGUF files carry them; llama.cpp reads and writes them):
//
//   BF16  the top 16 bits of a float32, rounded to nearest even (core/float16.h).
//   Q8_0  blocks of 32 values: an fp16 scale d and 32 int8 q; x = d * q. 34 bytes (8.5 bits a value).
//   Q4_0  blocks of 32 values: an fp16 scale d and 16 bytes of 4-bit q, the low nibble of byte j
//         element j and the high nibble element j + 16; x = d * (q - 8). 18 bytes (4.5 bits).
//
// Quantizing follows ggml's reference quantizer (quantize_row_q8_0_ref / q4_0_ref) rule for rule,
// so that a tensor's bytes are identical to ggml's:
//   Q8_0: amax = max |x|; d = amax / 127 (float); id = 1 / d (0 when d is 0); the stored scale is
//         d rounded to fp16 (nearest even); q = roundf(x * id) (halves away from zero), with x * id
//         and 1 / d in float.
//   Q4_0: m = the value of largest magnitude (the first one on a tie of magnitudes), d = m / -8,
//         id = 1 / d (0 when d is 0), scale fp16(d); q = min(15, trunc(x * id + 8.5f)): the value
//         of largest magnitude maps to q = 0 (x * id = -8), and a value at the other end (+8)
//         would give 16, clamped to 15.
// The scale used in x * id is the float d, not its fp16 rounding (as in ggml), so dequantizing
// multiplies by a scale slightly off the one quantizing divided by. Inputs must be finite (the
// callers check; a NaN or infinity has no meaning in a block).
//
// Worked blocks (tests/test_kernels_quant.cpp): Q8_0 of 127, -0.5, 0.5, 2.5, -2.5, 1.49 and zeros
// has d = 1 (fp16 0x3C00) and q = 127, -1, 1, 3, -3, 1, 0, ...; Q4_0 of -8, 7, 7.5, 0, 0.5, -0.5, 1.5
// and zeros has d = 1 and q = 0, 15, 15, 8, 9, 8, 10, 8, ...; an all-zero block has d = 0 and q = 0
// (Q8_0), or d = -0 (0 / -8, fp16 0x8000, as ggml writes it) and q = 8 (Q4_0).
#pragma once

#include <cstdint>
#include <span>

namespace tformer {

constexpr int64_t kQuantBlockValues = 32;

struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQuantBlockValues];
};
struct BlockQ4_0 {
  uint16_t d;  // fp16 scale
  uint8_t qs[kQuantBlockValues / 2];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18, "ggml's block sizes");

// n values (a multiple of 32, else Error naming n) into n / 32 blocks, and back.
void quantize_row_q8_0(std::span<const float> x, std::span<BlockQ8_0> y);
void dequantize_row_q8_0(std::span<const BlockQ8_0> x, std::span<float> y);
void quantize_row_q4_0(std::span<const float> x, std::span<BlockQ4_0> y);
void dequantize_row_q4_0(std::span<const BlockQ4_0> x, std::span<float> y);
// Any n.
void quantize_row_bf16(std::span<const float> x, std::span<uint16_t> y);
void dequantize_row_bf16(std::span<const uint16_t> x, std::span<float> y);

}  // namespace tformer
