// The linear layer over weights kept in their stored type (GGUF's F16, BF16, Q8_0 and Q4_0): the
// weights are read as they are, 2, 2, 1.0625 and 0.5625 bytes a value, never expanded into a
// float copy, because a decode step's time is the time it takes to read them.
//
//   y[n, out] = x[n, in] W[out, in]^T            (overwrites y; the bias is linear_forward's)
//
// What each type multiplies:
//   F16         the weights converted to float (exactly) times the float activations, summed in
//               float. Few rows (n < 8): every weight read once, converted in registers. More rows
//               (prefill, eval): panels of 2048 weight rows converted to float, each through the
//               sgemm (kernels/matmul.h), whose FLOPs then outweigh the conversion.
//   BF16        as llama.cpp does (its vec_dot_type for BF16 is BF16): the activations rounded to
//               bf16 (nearest even), then products of bf16 pairs summed in float. With AVX-512
//               BF16, vdpbf16ps takes 32 pairs an instruction: few rows, each weight row against
//               each activation row; more rows (n >= 8), a register tile of 4 weight rows x 32
//               activation rows whose lanes are activation rows (a weight row's pair broadcast),
//               twice the float sgemm's multiply-adds per instruction. Without it, the rounded
//               activations in float through the F16 paths. (vcvtne2ps2bf16 flushes subnormal
//               activations, below 1.2e-38, to zero, where the reference rounds them.)
//   Q8_0, Q4_0  as llama.cpp does (its vec_dot_type is Q8_0 for both): each row of x is first
//               quantized to Q8_0 blocks by ggml's reference rule (kernels/quant.h), then each
//               block pair is an exact integer dot product scaled by d_w * d_x:
//                 y = sum_b d_w[b] d_x[b] sum_j w[b][j] x_q[b][j]     (w = q - 8 for Q4_0)
//               With AVX-512 VNNI (vpdpbusd: unsigned bytes times signed bytes, four at a time
//               into int32) the integer sums take one instruction per 32 values; vpdpbusd wants
//               one operand unsigned, so Q4_0's nibbles (0..15) are that operand and the -8 goes
//               into the accumulator's start (-8 * sum x_q, from the activations), while Q8_0's
//               activations are offset by +128 and the accumulator starts at -128 * sum w.
//               Few rows: each weight row read front to back, block by block, against up to
//               four activation rows, each (weight row, activation row) sum in four chains of
//               float multiply-adds (block i into chain i % 4; Q4_0_R8's whole groups of
//               eight into chains 0 and 1 in turn) added at the end; rows of at most
//               512 values four weight rows a call against a single activation row (the same
//               sums: only the set-up is shared).
//               More rows (n >= 8): a register tile of 4 weight rows x 16 activation rows whose
//               lanes are activation rows: the activations are packed 8 rows x 4 bytes per
//               vector, a weight row's 4 bytes are broadcast, so 8 vpdpbusd finish a block for
//               8 rows and one float multiply-add scales it.
//               Q4_0_R8 (Q4_0 regrouped, repack_weight), few rows: eight blocks' scales convert
//               as one vector, and their nibbles are interleaved so that 32-bit lane l of every
//               32 bytes is block l's: each 512-bit load holds four bytes of each of the eight
//               blocks twice over, the activations are arranged to match, and four vpdpbusd
//               (two integer chains) leave each block's integer sum in its own lanes (l and 8 + l), so
//               a group of eight blocks takes one conversion and one multiply-add, with no
//               permutation.
//               Q8_0_R8 (Q8_0 regrouped, rows wider than 512), few rows: likewise eight scales a
//               vector and the values interleaved so that lane l is block l's; the weights are
//               the unsigned operand (w + 128, an xor) against the activations as they are, the
//               accumulator starting at -128 * each block's activation sum, so a group of eight
//               blocks takes four xors, four 512-bit vpdpbusd, one conversion and one
//               multiply-add, with no permutation.
//               Q4_0_X16, Q8_0_X16 (what repack_weight makes of every Q4_0 and Q8_0 matrix),
//               few rows: sixteen weight rows at a time, whose blocks are interleaved so that
//               32-bit lane l of each 64-byte load is row l's, four values of one block; each load
//               meets four activation values broadcast to all lanes (vpdpbusd's embedded
//               broadcast), so eight vpdpbusd finish a block for sixteen rows, and one conversion
//               and one multiply-add by the sixteen scales times d_x scale it: no sum crosses
//               lanes, and sixteen outputs are stored at once. (Q8_0's weights are the unsigned
//               operand, w + 128, an xor, as in Q8_0_R8; both start at -c times the block's
//               activation sum.) The rows past the last whole group of sixteen run as their
//               lone-row layout does (Q4_0_R8; Q8_0_R8 or Q8_0).
//               Without VNNI (the portable build) the same integer sums in plain loops.
//
// Every output element is computed by one thread in a fixed order: results do not depend on the
// thread count. stored_linear_reference is the plain oracle the tests hold the kernels to: the
// same activation quantization, each dot product accumulated in double.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/linear.h"

namespace tformer {

// Fewer rows than this take the few-row kernels (each weight row streamed once against every
// activation row, each pair summed as the one-row product sums it); more, the tiled products.
inline constexpr int64_t kStoredFewRows = 8;

// True for the block types (Q8_0, Q4_0 and their regrouped and interleaved layouts): rows of
// whole blocks of 32 values.
bool is_block_type(WeightType t);

// Bytes of one row of `cols` values in `type` (for Q8_0 / Q4_0 cols must be a multiple of 32).
int64_t weight_row_bytes(WeightType type, int64_t cols);

// y: [n, W.rows], overwritten; x: [n, W.cols]. Any WeightType but F64.
void stored_linear(float* y, const float* x, const Weight<float>& W, int64_t n);

// Products of one input: parts[i].y = x parts[i].W^T for every part (each y [n, W.rows],
// overwritten), the weights of one type and width. Each part's result has the bits of
// stored_linear on it alone; for few rows (n < 8, or row-independent) the parts share one
// quantization (or rounding) of x and, below 8 rows or for the block types, one parallel pass over
// all their rows (decode's q, k, v); dense row-independent batches of 8 or more go part by part.
struct StoredProduct {
  float* y = nullptr;
  const Weight<float>* W = nullptr;
};
void stored_linear_shared(std::span<const StoredProduct> parts, const float* x, int64_t n);

// The oracle: the contract above in plain loops, double accumulation.
void stored_linear_reference(float* y, const float* x, const Weight<float>& W, int64_t n);

// The bytes of a [rows, cols] matrix of `type` (ggml's layout) as the kernels keep them: Q4_0
// becomes Q4_0_X16 and Q8_0 Q8_0_X16, the same bytes in another order. Per whole group of sixteen
// rows, per block b, a cell: the sixteen rows' fp16 scales of block b in row order, then their
// values in rounds of 64 bytes, round k holding bytes 4k..4k + 3 of each row's block b in row
// order (Q4_0: 4 rounds of nibbles; Q8_0: 8 rounds of values). The rows past the last whole group
// (a height that is no multiple of 16) follow, each as a lone row is kept: Q4_0 rows as Q4_0_R8,
// their blocks regrouped by eight (per group the 8 fp16 scales, then the 8 x 16 bytes of nibbles
// in four rounds, round k holding bytes 4k..4k + 3 of each block in block order; the blocks past
// the last whole group as they are); Q8_0 rows of more than 512 values as Q8_0_R8 likewise (8
// scales, then 8 x 32 bytes of values in eight rounds), narrower ones in ggml's layout, where
// decode's four-row calls were faster (a 288-wide row is one group and a block: on a Zen 4 core
// 15.5 ns a row as ggml's, 17 regrouped; 768-wide, 38 and 27). Every other type is kept as it is.
// `type` is updated.
std::vector<uint8_t> repack_weight(WeightType& type, std::vector<uint8_t> bytes, int64_t rows, int64_t cols);

// Rows [r0, r1) of W as float: out[r1 - r0, W.cols] (exact for every type).
void dequantize_weight_rows(float* out, const Weight<float>& W, int64_t r0, int64_t r1);

}  // namespace tformer
