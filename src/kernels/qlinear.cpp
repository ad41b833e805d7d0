#include "kernels/qlinear.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/float16.h"
#include "core/scratch.h"
#include "core/threads.h"
#include "kernels/matmul.h"
#include "kernels/quant.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wmaybe-uninitialized
// (and, in a tile of sixteen reductions, -Wuninitialized) reports once inlined (GCC bug 105593,
// fixed in 13): a false positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512VNNI__) && \
    defined(__F16C__)
#define TFORMER_QLINEAR_VNNI 1
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512BF16__)
#define TFORMER_QLINEAR_BF16 1
#endif

namespace tformer {
namespace {

constexpr int64_t QK = kQuantBlockValues;
constexpr int64_t kFewRows = kStoredFewRows;       // n below this: the weights are streamed once, rows against rows
constexpr int64_t kPanelRows = 2048;               // F16 / BF16 weight rows converted per sgemm call (its NC)
constexpr int64_t kGroupsPerPass = 16;             // activation groups of 8 rows a pass of the tiled product covers
constexpr int64_t kActsPerPassBytes = 512 * 1024;  // at least; the block types' passes take this much
constexpr int64_t kNarrowCols = 512;               // rows this wide or less: decode's four-row calls (below)

const uint8_t* row_ptr(const Weight<float>& W, int64_t r) {
  return static_cast<const uint8_t*>(W.data) + r * weight_row_bytes(W.type, W.cols);
}

// Block b of a Q4_0 row (nb blocks) in ggml's layout or regrouped (Q4_0_R8: per group of eight,
// the 8 fp16 scales, then the 8 blocks' 16 bytes of nibbles interleaved four bytes at a time:
// byte 4k + e of block l at 32k + 4l + e, k < 4, e < 4, so that 32-bit lane l of each 32 bytes
// is block l's; the blocks past the last whole group as ggml's). A copy: a regrouped block's
// bytes are not contiguous.
constexpr int64_t kR8 = 8, kR8GroupBytes = kR8 * static_cast<int64_t>(sizeof(BlockQ4_0));
constexpr int64_t r8_offset(int64_t l, int64_t j) { return 2 * kR8 + 32 * (j / 4) + 4 * l + j % 4; }
struct Q4Block {
  uint16_t d;
  uint8_t qs[QK / 2];
};
constexpr bool is_q4(WeightType t) {
  return t == WeightType::Q4_0 || t == WeightType::Q4_0_R8 || t == WeightType::Q4_0_X16;
}
inline Q4Block q4_block(const uint8_t* row, int64_t b, int64_t nb, bool r8) {
  Q4Block out{};
  const int64_t full = r8 ? nb / kR8 * kR8 : 0;
  if (b < full) {
    const uint8_t* group = row + b / kR8 * kR8GroupBytes;
    const int64_t l = b % kR8;
    std::memcpy(&out.d, group + 2 * l, 2);
    for (int64_t k = 0; k < 4; ++k) std::memcpy(out.qs + 4 * k, group + r8_offset(l, 4 * k), 4);
    return out;
  }
  const uint8_t* at = row + full / kR8 * kR8GroupBytes + (b - full) * static_cast<int64_t>(sizeof(BlockQ4_0));
  std::memcpy(&out.d, at, 2);
  std::memcpy(out.qs, at + 2, sizeof(out.qs));
  return out;
}

// Block b of a Q8_0 row in ggml's layout or regrouped (Q8_0_R8: per group of eight, 8 fp16 scales
// then the 8 blocks' 32 values interleaved four at a time as Q4_0_R8's bytes are, value 4k + e of
// block l at r8_offset(l, 4k + e), k < 8; the blocks past the last whole group as ggml's). A copy.
constexpr int64_t kQ8GroupBytes = kR8 * static_cast<int64_t>(sizeof(BlockQ8_0));
struct Q8Block {
  uint16_t d;
  int8_t qs[QK];
};
inline Q8Block q8_block(const uint8_t* row, int64_t b, int64_t nb, bool r8) {
  Q8Block out{};
  const int64_t full = r8 ? nb / kR8 * kR8 : 0;
  const uint8_t* at = nullptr;
  if (b < full) {
    const uint8_t* group = row + b / kR8 * kQ8GroupBytes;
    const int64_t l = b % kR8;
    std::memcpy(&out.d, group + 2 * l, 2);
    for (int64_t k = 0; k < QK / 4; ++k) std::memcpy(out.qs + 4 * k, group + r8_offset(l, 4 * k), 4);
    return out;
  }
  at = row + full / kR8 * kQ8GroupBytes + (b - full) * static_cast<int64_t>(sizeof(BlockQ8_0));
  std::memcpy(&out.d, at, 2);
  std::memcpy(out.qs, at + 2, sizeof(out.qs));
  return out;
}

// Q4_0_X16 / Q8_0_X16 (repack_weight: what a Q4_0 or Q8_0 matrix becomes): per whole group of
// sixteen rows, per block b, a cell of the sixteen rows' block b: their 16 fp16 scales in row
// order, then their values in rounds of 64 bytes, round k holding bytes 4k..4k + 3 of each row's
// block in row order (Q4_0's 16 bytes of nibbles: 4 rounds; Q8_0's 32 values: 8), so that 32-bit
// lane l of every round is row l's. A group's cells follow one another (a group is 16 rows' bytes),
// so the rows past the last whole group start where they would in ggml's layout, each as the
// type keeps a lone row (x16_tail_type: Q4_0_R8; Q8_0_R8 wider than kNarrowCols, else Q8_0).
constexpr int64_t kX16 = 16;
constexpr int64_t x16_offset(int64_t l, int64_t j) { return 2 * kX16 + 64 * (j / 4) + 4 * l + j % 4; }
constexpr bool is_x16(WeightType t) { return t == WeightType::Q4_0_X16 || t == WeightType::Q8_0_X16; }
WeightType x16_tail_type(WeightType t, int64_t cols) {
  if (t == WeightType::Q4_0_X16) return WeightType::Q4_0_R8;
  return cols > kNarrowCols ? WeightType::Q8_0_R8 : WeightType::Q8_0;
}
// The cell of block b of the group of sixteen rows that row r (in a whole group) belongs to.
inline const uint8_t* x16_cell(const Weight<float>& W, int64_t r, int64_t b) {
  const int64_t nb = W.cols / QK, cell = kX16 * weight_row_bytes(W.type, QK);
  return static_cast<const uint8_t*>(W.data) + (r / kX16 * nb + b) * cell;
}
// Row l of a cell: its scale and its values (n bytes), gathered into out.
inline void x16_gather(const uint8_t* cell, int64_t l, uint16_t* d, uint8_t* values, int64_t n) {
  std::memcpy(d, cell + 2 * l, 2);
  for (int64_t j = 0; j < n; j += 4) std::memcpy(values + j, cell + x16_offset(l, j), 4);
}

// Block b of row r of a Q4_0 weight in any of its layouts, and of a Q8_0 one. A copy.
Q4Block q4_at(const Weight<float>& W, int64_t r, int64_t b) {
  const int64_t nb = W.cols / QK;
  if (W.type == WeightType::Q4_0_X16 && r < W.rows / kX16 * kX16) {
    Q4Block out{};
    x16_gather(x16_cell(W, r, b), r % kX16, &out.d, out.qs, QK / 2);
    return out;
  }
  return q4_block(row_ptr(W, r), b, nb, W.type != WeightType::Q4_0);
}
Q8Block q8_at(const Weight<float>& W, int64_t r, int64_t b) {
  const int64_t nb = W.cols / QK;
  if (W.type == WeightType::Q8_0_X16 && r < W.rows / kX16 * kX16) {
    Q8Block out{};
    x16_gather(x16_cell(W, r, b), r % kX16, &out.d, reinterpret_cast<uint8_t*>(out.qs), QK);
    return out;
  }
  const bool r8 = W.type == WeightType::Q8_0_R8 || (W.type == WeightType::Q8_0_X16 && W.cols > kNarrowCols);
  return q8_block(row_ptr(W, r), b, nb, r8);
}

// A block found by q4_block / q8_block, put back together in ggml's layout.
template <typename Block, typename At>
Block as_ggml_block(const At& at) {
  Block blk{at.d, {}};
  std::memcpy(blk.qs, at.qs, sizeof(blk.qs));
  return blk;
}

// f(std::integral_constant<int, C>{}, r) over the activation rows from r on: four at a time, then
// the one to three left, so that each tile's row count is a constant its registers are laid out by.
template <typename F>
void for_row_tiles(int64_t n, int64_t r, F&& f) {
  for (; r + 4 <= n; r += 4) f(std::integral_constant<int, 4>{}, r);
  switch (n - r) {
    case 3:
      return f(std::integral_constant<int, 3>{}, r);
    case 2:
      return f(std::integral_constant<int, 2>{}, r);
    case 1:
      return f(std::integral_constant<int, 1>{}, r);
    default:
      return;
  }
}

// f(std::integral_constant<int, I>{}) for I = 0 .. N - 1, written out: each index a constant from
// the start, so that arrays indexed by it can live in registers.
template <int N, typename F>
[[gnu::always_inline]] inline void unrolled(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

// The products of one input (stored_linear_shared): every part's rows, in order, in units of up
// to U consecutive rows of one part, as one range split over the threads: f(part, first row, rows
// in the unit). One row's work does not depend on which call or which thread computes it, so the
// results are the bits of separate calls.
template <int64_t U, typename F>
void for_part_units(std::span<const StoredProduct> parts, F&& f) {
  auto units = [](const StoredProduct& p) { return (p.W->rows + U - 1) / U; };
  int64_t total = 0;
  for (const StoredProduct& p : parts) total += units(p);
  parallel_for(total, total * U * parts[0].W->cols >= 65536, [&](int64_t i) {
    size_t k = 0;
    while (i >= units(parts[k])) i -= units(parts[k++]);
    const int64_t o = i * U;
    f(parts[k], o, std::min(U, parts[k].W->rows - o));
  });
}
// One row at a time: f(part, row of that part).
template <typename F>
void for_part_rows(std::span<const StoredProduct> parts, F&& f) {
  for_part_units<1>(parts, [&](const StoredProduct& part, int64_t o, int64_t) { f(part, o); });
}

// ---------------------------------------------------------------------------------------------
// Activations quantized to Q8_0 (ggml's reference rule), one row at a time.
//   q    [n, in]     int8 values
//   u    [n, in]     q + 128 as unsigned bytes (the unsigned operand against Q8_0 weights)
//   d    [n, nb]     the fp16-rounded scale, as float
//   lane [n, nb, 8]  -c * (sum of the 4 values of each vpdpbusd lane): the accumulator start of
//                    Q4_0 (c = 8, the nibbles' offset) and of Q8_0_R8 (c = 128, the weights')
struct QuantActs {
  int64_t n = 0, in = 0, nb = 0;
  const int8_t* q = nullptr;
  const uint8_t* u = nullptr;
  const float* d = nullptr;
  const int32_t* lane = nullptr;
  // For Q4_0_R8 (few rows): per row, per whole group of eight blocks, its 256 values arranged as
  // the group's interleaved nibbles (r8_offset) meet them, 128 bytes per half h of the nibbles:
  // the low-nibble values, then the high, each as [k = 2h | k = 2h + 1] x 8 lanes x 4 values, lane
  // l holding block l's values 4k..4k + 3 (low) or 16 + 4k..16 + 4k + 3 (high); and per block -8
  // times the sum of its values, the start of its integer sum. For Q8_0_R8 (ActsNeed::q8_groups)
  // the group's values as its weights lie, value 4k + e of block l at 32k + 4l + e (k < 8), and
  // the starts -128 times the sums.
  int64_t groups = 0;
  const int8_t* group_q = nullptr;       // [n][groups][256]
  const int32_t* block_start = nullptr;  // [n][nb]
};

// Slots of this file's scratch buffers (their own per element type; see core/scratch.h).
enum : size_t {
  kSlotQ = 0,
  kSlotU = 1,
  kSlotD = 20,
  kSlotLane = 0,
  kSlotBlocks = 0,
  kSlotPanel = 21,
  kSlotGroupQ = 4,
  kSlotBlockStart = 3
};

// What a kernel reads beside q and d: the unsigned copy (Q8_0, few rows), the lane starts (Q4_0,
// Q4_0_R8 and Q8_0_R8, few rows; lane_scale their c), the group arrangement with its per-block
// starts (Q4_0_R8 and, with q8_groups, Q8_0_R8, few rows) and the per-block starts alone (starts:
// Q4_0_X16 and Q8_0_X16, few rows). The tiled kernels and the portable loops read q and d only.
struct ActsNeed {
  bool unsigned_copy = false, lanes = false, groups = false, q8_groups = false, starts = false;
  int32_t lane_scale = 8;
};

QuantActs quantize_acts(const float* x, int64_t n, int64_t in, ActsNeed need = {}) {
  QuantActs a;
  a.n = n;
  a.in = in;
  a.nb = in / QK;
  const auto total = static_cast<size_t>(n * in), blocks = static_cast<size_t>(n * a.nb);
  const ScratchBuffer<int8_t> q(kSlotQ, total, ScratchBuffer<int8_t>::Unfilled{});
  const ScratchBuffer<uint8_t> u(kSlotU, need.unsigned_copy ? total : 0, ScratchBuffer<uint8_t>::Unfilled{});
  const ScratchBuffer<float> d(kSlotD, blocks, ScratchBuffer<float>::Unfilled{});
  const ScratchBuffer<int32_t> lane(kSlotLane, need.lanes ? blocks * 8 : 0, ScratchBuffer<int32_t>::Unfilled{});
  const int8_t* qp = q.data();
  uint8_t* up = u.data();
  float* dp = d.data();
  int32_t* lp = lane.data();
  parallel_for(n, n * in >= (1 << 15), [&](int64_t r) {
    const ScratchBuffer<BlockQ8_0> blk(kSlotBlocks, static_cast<size_t>(a.nb), ScratchBuffer<BlockQ8_0>::Unfilled{});
    quantize_row_q8_0(std::span<const float>(x + r * in, static_cast<size_t>(in)),
                      std::span<BlockQ8_0>(blk.data(), static_cast<size_t>(a.nb)));
    for (int64_t b = 0; b < a.nb; ++b) {
      const BlockQ8_0& bq = blk[static_cast<size_t>(b)];
      dp[r * a.nb + b] = f16_to_f32(bq.d);
      auto* qrow = const_cast<int8_t*>(qp) + r * in + b * QK;
      std::memcpy(qrow, bq.qs, QK);
      // (the buffers a kernel does not read are empty: no pointer into them is formed)
      uint8_t* urow = need.unsigned_copy ? up + r * in + b * QK : nullptr;
      int32_t* lanes = need.lanes ? lp + (r * a.nb + b) * 8 : nullptr;
#if defined(TFORMER_QLINEAR_VNNI)
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bq.qs));
      if (need.unsigned_copy)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(urow),
                            _mm256_xor_si256(v, _mm256_set1_epi8(static_cast<char>(0x80))));
      if (need.lanes) {
        // c * lane sums (c = 8 or 128, an unsigned byte)
        const __m256i sums =
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(need.lane_scale)), v);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), _mm256_sub_epi32(_mm256_setzero_si256(), sums));
      }
#else
      if (need.unsigned_copy)
        for (int64_t j = 0; j < QK; ++j) urow[j] = static_cast<uint8_t>(static_cast<int>(bq.qs[j]) + 128);
      if (need.lanes)
        for (int64_t l = 0; l < 8; ++l)
          lanes[l] = -need.lane_scale * (qrow[4 * l] + qrow[4 * l + 1] + qrow[4 * l + 2] + qrow[4 * l + 3]);
#endif
    }
  });
  a.q = qp;
  a.u = up;
  a.d = dp;
  a.lane = lp;
  if (need.groups || need.starts) {
    a.groups = need.groups ? a.nb / kR8 : 0;
    const ScratchBuffer<int8_t> gq(kSlotGroupQ, static_cast<size_t>(n * a.groups * 256),
                                   ScratchBuffer<int8_t>::Unfilled{});
    const ScratchBuffer<int32_t> bs(kSlotBlockStart, blocks, ScratchBuffer<int32_t>::Unfilled{});
    int8_t* gqp = gq.data();
    int32_t* bsp = bs.data();
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t b = 0; b < a.nb; ++b) {
        const int8_t* q = qp + r * in + b * QK;
        int32_t sum = 0;
        for (int64_t e = 0; e < QK; ++e) sum += q[e];
        bsp[r * a.nb + b] = -need.lane_scale * sum;
      }
      // Values 4c..4c + 3 of block l at at(c) + 4l: Q8_0_R8 as its weights lie (32c); Q4_0_R8 the
      // low nibbles' values (c < 4) in the first 64 bytes of half c % 4 / 2, the high nibbles' in
      // the next 64, each at 32 (c % 2) within.
      auto at = [&](int64_t c) { return need.q8_groups ? 32 * c : 128 * (c % 4 / 2) + 64 * (c / 4) + 32 * (c % 2); };
      for (int64_t g = 0; g < a.groups; ++g)
        for (int64_t l = 0; l < kR8; ++l)
          for (int64_t c = 0; c < QK / 4; ++c)
            std::memcpy(gqp + (r * a.groups + g) * 256 + at(c) + 4 * l, qp + r * in + (g * kR8 + l) * QK + 4 * c, 4);
    }
    a.group_q = gqp;
    a.block_start = bsp;
  }
  return a;
}

// The integer dot product of weight block b of a Q8_0 / Q4_0 row with 32 activation values, and
// the block's scale: the plain form every kernel computes.
int32_t block_dot(const Weight<float>& W, int64_t r, int64_t b, const int8_t* xq, float* dw) {
  int32_t s = 0;
  if (!is_q4(W.type)) {
    const Q8Block blk = q8_at(W, r, b);
    *dw = f16_to_f32(blk.d);
    for (int64_t j = 0; j < QK; ++j) s += static_cast<int32_t>(blk.qs[j]) * xq[j];
  } else {
    const Q4Block blk = q4_at(W, r, b);
    *dw = f16_to_f32(blk.d);
    for (int64_t j = 0; j < QK / 2; ++j) {
      s += (static_cast<int32_t>(blk.qs[j] & 0x0F) - 8) * xq[j];
      s += (static_cast<int32_t>(blk.qs[j] >> 4) - 8) * xq[j + QK / 2];
    }
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Portable forms (also the reference's building blocks).

[[maybe_unused]] void block_rows_plain(std::span<const StoredProduct> parts, const QuantActs& a) {
  for_part_rows(parts, [&](const StoredProduct& part, int64_t o) {
    float* y = part.y;
    const int64_t out = part.W->rows;
    for (int64_t r = 0; r < a.n; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < a.nb; ++b) {
        float dw = 0;
        const int32_t s = block_dot(*part.W, o, b, a.q + r * a.in + b * QK, &dw);
        acc += static_cast<float>(s) * (dw * a.d[r * a.nb + b]);
      }
      y[r * out + o] = acc;
    }
  });
}

float dense_value(WeightType t, const uint8_t* row, int64_t k) {
  switch (t) {
    case WeightType::F32: {
      float v;
      std::memcpy(&v, row + 4 * k, 4);
      return v;
    }
    case WeightType::F16:
    case WeightType::BF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return t == WeightType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
    default:
      break;
  }
  TF_CHECK(false, "qlinear: {} is not a dense type", weight_type_name(t));
  return 0;
}

// F32 / F16 / BF16, few rows, portable: each weight row converted once into a float row buffer.
[[maybe_unused]] void dense_rows_plain(std::span<const StoredProduct> parts, const float* x, int64_t n) {
  const int64_t in = parts[0].W->cols;
  for_part_rows(parts, [&](const StoredProduct& part, int64_t o) {
    float* y = part.y;
    const int64_t out = part.W->rows;
    const ScratchBuffer<float> wr(kSlotPanel, static_cast<size_t>(in), ScratchBuffer<float>::Unfilled{});
    float* w = wr.data();
    dequantize_weight_rows(w, *part.W, o, o + 1);
    for (int64_t r = 0; r < n; ++r) {
      float acc = 0;
      const float* xr = x + r * in;
#pragma omp simd reduction(+ : acc)
      for (int64_t k = 0; k < in; ++k) acc += w[k] * xr[k];
      y[r * out + o] = acc;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// AVX-512 forms.

#if defined(__AVX512F__)
// The few-row kernels read one weight row at a time, front to back, so that each thread's share
// of a matrix (a contiguous run of rows) is one sequential stream, which the hardware prefetcher
// follows at the full read bandwidth; every activation row of the tile meets the weight row while
// it is in L1. They used to interleave four weight rows (sharing each activation load and, for
// the block types, one scale conversion), with a software prefetch of the next four: four short
// streams a thread (a 768-wide Q4_0 row is 7 cache lines), which a Zen 4 read at 15-20 GB/s
// against 28 GB/s sequentially (BF16 768 x 768 matrices, 2 threads: 19 GB/s interleaved, 28 one
// row at a time). Each (weight row, activation row) pair is summed in the same order as before,
// so the results are the same bits.

// The sum of v's sixteen lanes in _mm512_reduce_add_ps's order (halves, quarters, then pairs: the
// same bits), spelled out beside hsum16x4, which does the same adds for four vectors at once (the
// tests hold every tile's rows to the one-row kernel's bits).
inline float hsum16(__m512 v) {
  const __m256 h =
      _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  const __m128 p = _mm_add_ps(q, _mm_shuffle_ps(q, q, _MM_SHUFFLE(1, 0, 3, 2)));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_shuffle_ps(p, p, _MM_SHUFFLE(2, 3, 0, 1))));
}

// hsum16 of four vectors at once, the same adds on the same lanes (so the same bits as four
// hsum16), a quarter of the shuffles and adds: [a, b, c, d]'s sums.
inline __m128 hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d) {
  // Halves: [a.lo + a.hi, b.lo + b.hi] and [c.lo + c.hi, d.lo + d.hi] (256 bits each).
  const __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(1, 0, 1, 0)),
                                  _mm512_shuffle_f32x4(c, d, _MM_SHUFFLE(3, 2, 3, 2)));
  // Quarters: one 128-bit lane per vector, [a, b, c, d].
  const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_f32x4(ab, cd, _MM_SHUFFLE(3, 1, 3, 1)));
  // Pairs, then the last two, within each lane; element 0 of each lane is its vector's sum.
  const __m512 p = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 t = _mm512_add_ps(p, _mm512_permute_ps(p, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), t));
}

// Sixteen weights of a dense row as floats: whole (load16) or a masked tail (load16_masked). Two
// functions, not a mask of all ones: with a masked load in the loop, GCC 12 stored every
// accumulator to the stack at each multiply-add, and the stores, not the multiply-adds, set the
// pace (4 accumulators, 4 stores of 64 bytes a step).
template <WeightType kT>
__m512 load16(const uint8_t* row, int64_t k) {
  if constexpr (kT == WeightType::F32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(row) + k));
    if constexpr (kT == WeightType::BF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
  }
}
template <WeightType kT>
__m512 load16_masked(const uint8_t* row, int64_t k, __mmask16 mk) {
  if constexpr (kT == WeightType::F32) {
    return _mm512_maskz_loadu_ps(mk, reinterpret_cast<const float*>(row) + k);
  } else if constexpr (kT == WeightType::BF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(row) + k);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(mk, reinterpret_cast<const uint16_t*>(row) + k);
    return _mm512_cvtph_ps(h);
  }
}

// y[j, o] for j < C (<= 4 activation rows; 6 instantiated, never called): weight row o, converted once, meets every
// activation row.
template <WeightType kT, int C>
void dense_row_avx512(float* y, int64_t ldy, const Weight<float>& W, int64_t o, const float* x, int64_t ldx) {
  const int64_t in = W.cols;
  const uint8_t* w = row_ptr(W, o);
  __m512 acc[C];
  unrolled<C>([&](auto j) { acc[j] = _mm512_setzero_ps(); });  // constant indices: see dense_quad_avx512
  // Whole vectors, then the masked tail, written out (a lambda for the step, too, made GCC 12
  // keep the accumulators on the stack; see load16).
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    const __m512 v = load16<kT>(w, k);
    unrolled<C>([&](auto j) { acc[j] = _mm512_fmadd_ps(v, _mm512_loadu_ps(x + j * ldx + k), acc[j]); });
  }
  if (k < in) {
    const auto mk = __mmask16((1u << (in - k)) - 1);
    const __m512 v = load16_masked<kT>(w, k, mk);
    unrolled<C>([&](auto j) { acc[j] = _mm512_fmadd_ps(v, _mm512_maskz_loadu_ps(mk, x + j * ldx + k), acc[j]); });
  }
  unrolled<C>([&](auto j) { y[j * ldy + o] = hsum16(acc[j]); });
}

// y[j, o + i] for i < 4 weight rows and j < C activation rows: the same sums as dense_row_avx512
// (each pair's sixteen lanes accumulated over k in order, then reduced alike), a register tile of
// 4 x C accumulators that loads each activation vector once for four weight rows. Each step also
// prefetches pf_step cache lines of [pf, pf_end) into L2 (dense_quads_avx512: a quad ahead).
template <WeightType kT, int C>
void dense_quad_avx512(float* y, int64_t ldy, const Weight<float>& W, int64_t o, const float* x, int64_t ldx,
                       const char* pf, const char* pf_end, int64_t pf_step) {
  const int64_t in = W.cols;
  const uint8_t* w[4] = {row_ptr(W, o), row_ptr(W, o + 1), row_ptr(W, o + 2), row_ptr(W, o + 3)};
  // Every index below is a constant (unrolled): with loops over i and j, GCC 12 kept the 4 x C
  // accumulators in a stack array (zeroed by a memset, stored after the loop and loaded again for
  // the sums), about 100 cycles a call beside the 432 of the multiply-adds of a 4 x 6 tile at 288
  // values a row.
  __m512 acc[4 * C];  // [i][j] at i * C + j
  unrolled<4 * C>([&](auto t) { acc[t] = _mm512_setzero_ps(); });
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {  // whole vectors, then the masked tail (see dense_row_avx512)
    for (int64_t p = 0; p < pf_step && pf < pf_end; ++p, pf += std::min<int64_t>(64, pf_end - pf))
      _mm_prefetch(pf, _MM_HINT_T1);
    __m512 v[4];
    unrolled<4>([&](auto i) { v[i] = load16<kT>(w[i], k); });
    unrolled<C>([&](auto j) {
      __m512 xv = _mm512_loadu_ps(x + j * ldx + k);
      asm("" : "+v"(xv));  // in a register: not a memory operand of each multiply-add (see below)
      unrolled<4>([&](auto i) { acc[i * C + j] = _mm512_fmadd_ps(v[i], xv, acc[i * C + j]); });
    });
  }
  if (k < in) {
    const auto mk = __mmask16((1u << (in - k)) - 1);
    __m512 v[4];
    unrolled<4>([&](auto i) { v[i] = load16_masked<kT>(w[i], k, mk); });
    unrolled<C>([&](auto j) {
      const __m512 xv = _mm512_maskz_loadu_ps(mk, x + j * ldx + k);
      unrolled<4>([&](auto i) { acc[i * C + j] = _mm512_fmadd_ps(v[i], xv, acc[i * C + j]); });
    });
  }
  unrolled<C>(
      [&](auto j) { _mm_storeu_ps(y + j * ldy + o, hsum16x4(acc[j], acc[C + j], acc[2 * C + j], acc[3 * C + j])); });
}

// Many rows (the row-independent products of a batch): the multiply-adds, not the weight
// stream, set the pace; four weight rows against six activation rows load 10 vectors for 24
// multiply-adds where one weight row took 5 for 4, and reduce four sums at a time (the rows past
// the sixes in tiles of 4 to 1). Each activation vector is loaded once into a register for its
// four multiply-adds: left to itself, GCC 12 folded the load into each of them (a memory operand
// costs it nothing), 28 loads of 64 bytes for 24 multiply-adds, and a Zen 4 core, which loads 64
// bytes a cycle, then waited on its loads: 768 x 768 products of 16 to 512 rows at 90-130 GFLOP/s
// on 2 threads, 155-190 with the loads kept (OpenBLAS's sgemm, in the same runs: 105-200). Ten
// rows 4 KB apart (the stories110M w2, 2048 F32 values wide) then also tile by sixes: the 30%
// they lost to it was the folded loads' (768 x 2048, 16 to 512 rows: 65-140 in fours, 155-205 in
// sixes).
// While a quad is multiplied, the quad after the next one (its rows contiguous, as dense rows
// are) is prefetched into L2, spread over every row tile's steps: four streams a thread, each read
// in a burst and then idle while the other tiles compute, left the hardware prefetcher behind. A
// 16-row decode step of the stories110M shape, F32, row-independent, 2 threads on a Zen 4,
// alternating in one process: 50.4-51.7 -> 37.3-38.0 ms with the next quad prefetched during the
// first tile (T1 or T0 alike; 15M 10.3 -> 6.8-7.1 ms); two quads ahead over every tile, a later
// run, 32.5 -> 29.9 ms (medians of 18 steps; 15M 4.58 -> 4.34 ms). The arithmetic is unchanged:
// the same bits.
template <WeightType kT>
void dense_quads_avx512(float* y, const Weight<float>& W, const float* x, int64_t n) {
  const int64_t out = W.rows, in = W.cols;
  const int64_t row_bytes = weight_row_bytes(W.type, in);
  const int64_t steps = std::max<int64_t>(in / 16, 1);
  parallel_for((out + 3) / 4, out * in >= 65536, [&](int64_t q) {
    const int64_t o = 4 * q;
    // The quad after the next one: its bytes, spread over this quad's row tiles by their rows.
    const char* ahead = reinterpret_cast<const char*>(row_ptr(W, std::min(o + 8, out)));
    const int64_t ahead_bytes = (std::min(out, o + 12) - std::min(out, o + 8)) * row_bytes;
    auto tile = [&](auto c, int64_t r) {
      constexpr int kC = decltype(c)::value;
      const int64_t from = r * ahead_bytes / n / 64 * 64,
                    to = r + kC == n ? ahead_bytes : (r + kC) * ahead_bytes / n / 64 * 64;
      const int64_t pf_step = ((to - from) / 64 + steps - 1) / steps;
      if (o + 4 <= out)
        return dense_quad_avx512<kT, kC>(y + r * out, out, W, o, x + r * in, in, ahead + from, ahead + to, pf_step);
      for (int64_t i = o; i < out; ++i) dense_row_avx512<kT, kC>(y + r * out, out, W, i, x + r * in, in);
    };
    int64_t r = 0;
    if (o + 4 <= out)
      for (; r + 6 <= n; r += 6) tile(std::integral_constant<int, 6>{}, r);
    for_row_tiles(n, r, tile);
  });
}

template <WeightType kT>
void dense_rows_avx512(std::span<const StoredProduct> parts, const float* x, int64_t n) {
  const int64_t in = parts[0].W->cols;
  if (n < kFewRows) {
    for_part_rows(parts, [&](const StoredProduct& part, int64_t o) {
      const int64_t out = part.W->rows;
      for_row_tiles(n, 0, [&](auto c, int64_t r) {
        dense_row_avx512<kT, decltype(c)::value>(part.y + r * out, out, *part.W, o, x + r * in, in);
      });
    });
    return;
  }
  for (const StoredProduct& part : parts) dense_quads_avx512<kT>(part.y, *part.W, x, n);
}
#endif

#if defined(TFORMER_QLINEAR_VNNI) || defined(TFORMER_QLINEAR_BF16)
// A tiled product's result: acc[i][g] lane l is weight row o0 + i (i < m) for activation row
// (g0 + g) * 8 + l (rows past n are padding).
template <int NG>
void store_lane_tile(float* y, int64_t ldy, int64_t n, int64_t o0, int64_t m, const __m256 (&acc)[4][NG], int64_t g0) {
  for (int g = 0; g < NG; ++g) {
    alignas(32) float lanes[4][8];
    for (int i = 0; i < 4; ++i) _mm256_store_ps(lanes[i], acc[i][g]);
    for (int64_t l = 0; l < 8; ++l) {
      const int64_t r = (g0 + g) * 8 + l;
      if (r >= n) break;
      for (int64_t i = 0; i < m; ++i) y[r * ldy + o0 + i] = lanes[i][l];
    }
  }
}
#endif

#if defined(TFORMER_QLINEAR_VNNI)
inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Few rows: y[r0 + j, o + r] for j < C activation rows and r < R weight rows, each weight row block
// by block. Each (weight row, activation row) sum keeps kChains float accumulators, the blocks of
// each run of four adding into chains 0..3 and the last nb % 4 blocks into chain 0 (Q4_0_R8: its
// whole groups of eight alternately into chains 0 and 1, then its remaining blocks so), summed
// at the end: with one chain a block waited for the previous block's
// multiply-add (4 cycles on a Zen 4), which held one core to 17-19 GB/s of Q4_0 and Q8_0 from
// L2, below what a decode needs from each of two cores to stream the weights at the read
// bandwidth. R only shares the activation loads and the set-up: the sums are the same for any R.
constexpr int kChains = 4;
template <WeightType kT, int C, int R = 1>
void block_row_vnni(float* y, int64_t ldy, const Weight<float>& W, int64_t o, const QuantActs& a, int64_t r0) {
  constexpr bool kQ4 = is_q4(kT);
  constexpr bool kR8Layout = kT == WeightType::Q4_0_R8;
  const uint8_t* wr[R];  // weight rows o .. o + R - 1
  for (int r = 0; r < R; ++r) wr[r] = row_ptr(W, o + r);
  __m256 acc[R][C][kChains];
  for (auto& wrow : acc)
    for (auto& row : wrow)
      for (auto& v : row) v = _mm256_setzero_ps();
  const __m256i c128 = _mm256_set1_epi8(static_cast<char>(0x80)), low4 = _mm256_set1_epi8(0x0F);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i high_half_by_4 = _mm256_set_epi64x(4, 4, 0, 0);  // Q4_0: the high nibbles to the upper half
  const int8_t* xq[C];  // the activation rows' values, unsigned values, scales and Q4_0 starts
  const uint8_t* xu[C];
  const float* xd[C];
  const int32_t* xl[C];
  for (int j = 0; j < C; ++j) {
    xq[j] = a.q + (r0 + j) * a.in;
    xd[j] = a.d + (r0 + j) * a.nb;
    xu[j] = kQ4 ? nullptr : a.u + (r0 + j) * a.in;         // built for Q8_0 only (of these types)
    xl[j] = kQ4 ? a.lane + (r0 + j) * a.nb * 8 : nullptr;  // built for Q4_0 (and Q8_0_R8, not here)
  }
  const int64_t nb = a.nb;
  int64_t b0 = 0;
  if constexpr (kR8Layout) {
    // Whole groups of eight blocks: the group's scales as one vector; each 64-byte half h of its
    // nibbles holds, in 32-bit lane 8i + l, block l's bytes 4k..4k + 3 (k = 2h + i), whose low
    // nibbles meet the activations of QuantActs::group_q's first 64 bytes of that half and whose
    // high nibbles its next 64. The low and high sums go in two chains (the low one starting at
    // -8 x each block's activation sum), lanes l and 8 + l are added, and block l's integer sum
    // is lane l: one conversion and one multiply-add by the eight d_w * d_x a group (the 256-bit
    // form with ggml's block order took a permutation of the scales and a multiply-add for every
    // two blocks: one Zen 4 core, one process, 2048-wide rows from L2 0.84 -> 0.55 ns a block,
    // 768-wide 1.11 -> 0.74, where a loop with only the loads takes 0.54 and 0.61). Group g adds
    // into chain g % 2 (a constant; see block below).
    const __m512i low4z = _mm512_set1_epi8(0x0F);
    auto group = [&](int64_t g, auto chain) {
      constexpr int kChain = decltype(chain)::value;
      __m512i lo[R][2], hi[R][2];
      __m256 dwg[R];
      for (int r = 0; r < R; ++r) {
        const uint8_t* grp = wr[r] + g * kR8GroupBytes;
        dwg[r] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp)));
        for (int h = 0; h < 2; ++h) {
          __m512i v = _mm512_loadu_si512(grp + 2 * kR8 + 64 * h);
          asm("" : "+v"(v));  // loaded once: GCC 12 made it a memory operand of both the and and the shift
          lo[r][h] = _mm512_and_si512(v, low4z);
          hi[r][h] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4z);
        }
      }
      for (int j = 0; j < C; ++j) {
        const int8_t* xg = a.group_q + ((r0 + j) * a.groups + g) * 256;
        const __m512i start = _mm512_zextsi256_si512(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.block_start + (r0 + j) * nb + g * kR8)));
        const __m256 dx = _mm256_loadu_ps(xd[j] + g * kR8);
        for (int r = 0; r < R; ++r) {
          // Lanes l and 8 + l: block l's partial sums (the low and high nibbles in two chains).
          __m512i s_lo = start, s_hi = _mm512_setzero_si512();
          for (int h = 0; h < 2; ++h) {
            s_lo = _mm512_dpbusd_epi32(s_lo, lo[r][h], _mm512_loadu_si512(xg + 128 * h));
            s_hi = _mm512_dpbusd_epi32(s_hi, hi[r][h], _mm512_loadu_si512(xg + 128 * h + 64));
          }
          const __m512i s = _mm512_add_epi32(s_lo, s_hi);
          const __m256i sums = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
          acc[r][j][kChain] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dwg[r], dx), acc[r][j][kChain]);
        }
      }
    };
    int64_t g = 0;
    for (; g + 2 <= a.groups; g += 2) {
      group(g, std::integral_constant<int, 0>{});
      group(g + 1, std::integral_constant<int, 1>{});
    }
    if (g < a.groups) group(g, std::integral_constant<int, 0>{});
    b0 = a.groups * kR8;
  }
  // Per block: the row's values (and for Q8_0 their 128 * sum, lane by lane) and its scale; then per
  // activation row the scale times its own, broadcast, scales the integer sum.
  // Block b into chain kChain (a constant: a chain index known only at run time kept the
  // accumulators on the stack, a store and a reload a block).
  auto block = [&](int64_t b, auto chain) {
    constexpr int kChain = decltype(chain)::value;
    for (int r = 0; r < R; ++r) {
      const uint8_t* w = wr[r];
      __m256i wv, neg = zero;
      float dw = 0;
      if constexpr (kQ4) {
        const Q4Block blk = q4_block(w, b, nb, kR8Layout);
        // Both halves hold the 16 bytes; the upper one shifted by 4: elements 0..15, then 16..31.
        const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)));
        wv = _mm256_and_si256(_mm256_srlv_epi64(q, high_half_by_4), low4);
        dw = _cvtsh_ss(blk.d);  // F16C: exact, as f16_to_f32, without its branches
      } else {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(w) + b;
        wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
        neg = _mm256_dpbusd_epi32(zero, c128, wv);  // 128 * sum w, lane by lane
        dw = _cvtsh_ss(blk->d);
      }
      for (int j = 0; j < C; ++j) {
        const __m256 scale = _mm256_set1_ps(dw * xd[j][b]);
        __m256i s;
        if constexpr (kQ4) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[j] + b * QK));
          s = _mm256_dpbusd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl[j] + b * 8)), wv, xv);
        } else {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xu[j] + b * QK));
          s = _mm256_sub_epi32(_mm256_dpbusd_epi32(zero, xv, wv), neg);
        }
        acc[r][j][kChain] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[r][j][kChain]);
      }
    }
  };
  using C0 = std::integral_constant<int, 0>;
  using C1 = std::integral_constant<int, 1>;
  using C2 = std::integral_constant<int, 2>;
  using C3 = std::integral_constant<int, 3>;
  int64_t b = b0;
  for (; b + kChains <= nb; b += kChains) {
    static_assert(kChains == 4);
    block(b, C0{});
    block(b + 1, C1{});
    block(b + 2, C2{});
    block(b + 3, C3{});
  }
  for (; b < nb; ++b) block(b, C0{});  // the last nb % 4 blocks into chain 0
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j)
      y[(r0 + j) * ldy + o + r] =
          hsum8(_mm256_add_ps(_mm256_add_ps(acc[r][j][0], acc[r][j][1]), _mm256_add_ps(acc[r][j][2], acc[r][j][3])));
}

// Q8_0_R8, few rows: y[r0 + j, o + r] for j < C activation rows and r < R weight rows. Per whole
// group of eight blocks the eight scales convert as one vector, and the values are interleaved
// (r8_offset) so that lane 8i + l of each 512-bit load is block l's. vpdpbusd wants one operand
// unsigned: here the weights, offset by 128 (w ^ 0x80 = w + 128), against the signed activations,
// the accumulator starting at -128 * each block's activation sum, so the integer sums are exact and
// a group takes four xors, four vpdpbusd, one conversion and one multiply-add. Before, in the
// blocks' own order, a block pair took one vpdpbusd, a conversion, a scale permutation and a
// multiply-add (one Zen 4 core from L2: 768-wide rows 23-25 -> 18-24 ns, 2048-wide 55-56 -> 49-50;
// a 110M Q8_0 decode step 4.3-5.0 -> 3.7-4.7 ms in alternating runs); and ggml's layout two
// vpdpbusd, a subtraction and a scalar scale a block (768- and 2048-wide rows from L2 1.6 and 1.5
// ns a block, the pairs 1.1 and 0.9). The blocks past the last whole group, 256 bits a block, add
// into one more accumulator. R only shares the loads and the set-up: the sums are the same for any
// R or C. (repack_weight regroups only rows wider than the four-row calls take, so R = 4 serves a
// Q8_0_R8 weight made otherwise, as the tests make them.)
template <int C, int R = 1>
void q8r8_row_vnni(float* y, int64_t ldy, const Weight<float>& W, int64_t o, const QuantActs& a, int64_t r0) {
  static_assert(kChains == 4 && (R == 1 || R == 4));
  const uint8_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = row_ptr(W, o + r);
  const int8_t* xq[C];
  const float* xd[C];
  const int32_t* xl[C];
  for (int j = 0; j < C; ++j) {
    xq[j] = a.q + (r0 + j) * a.in;
    xd[j] = a.d + (r0 + j) * a.nb;
    xl[j] = a.lane + (r0 + j) * a.nb * 8;
  }
  __m256 acc[R][C][2];  // the groups' two chains
  __m256 tail[R][C];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j) {
      for (auto& v : acc[r][j]) v = _mm256_setzero_ps();
      tail[r][j] = _mm256_setzero_ps();
    }
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  const int64_t nb = a.nb, groups = nb / kR8;
  // Group g into chain g % 2: each 512-bit load h of its values holds, in lane 8i + l, block l's
  // values 4k..4k + 3 (k = 2h + i), against QuantActs::group_q's matching bytes; two integer chains
  // (the first starting at -128 x each block's activation sum), the halves added: lane l is block
  // l's integer sum, one conversion and one multiply-add by the eight d_w * d_x.
  auto group = [&](int64_t g, auto chain) {
    constexpr int kChain = decltype(chain)::value;
    __m256 dwg[R];
    __m512i wv[R][4];
    for (int r = 0; r < R; ++r) {
      const uint8_t* grp = wr[r] + g * kQ8GroupBytes;
      dwg[r] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(grp)));
      for (int h = 0; h < 4; ++h) wv[r][h] = _mm512_xor_si512(_mm512_loadu_si512(grp + 2 * kR8 + 64 * h), offset);
    }
    for (int j = 0; j < C; ++j) {
      const int8_t* xg = a.group_q + ((r0 + j) * a.groups + g) * 256;
      const __m512i start = _mm512_zextsi256_si512(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.block_start + (r0 + j) * nb + g * kR8)));
      const __m256 dx = _mm256_loadu_ps(xd[j] + g * kR8);
      __m512i xv[4];
      for (int h = 0; h < 4; ++h) xv[h] = _mm512_loadu_si512(xg + 64 * h);
      for (int r = 0; r < R; ++r) {
        const __m512i s0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(start, wv[r][0], xv[0]), wv[r][2], xv[2]);
        const __m512i s1 =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), wv[r][1], xv[1]), wv[r][3], xv[3]);
        const __m512i s = _mm512_add_epi32(s0, s1);
        const __m256i sums = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
        acc[r][j][kChain] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dwg[r], dx), acc[r][j][kChain]);
      }
    }
  };
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    group(g, std::integral_constant<int, 0>{});
    group(g + 1, std::integral_constant<int, 1>{});
  }
  if (g < groups) group(g, std::integral_constant<int, 0>{});
  for (int64_t b = groups * kR8; b < nb; ++b) {
    for (int r = 0; r < R; ++r) {
      const auto* blk = reinterpret_cast<const BlockQ8_0*>(wr[r] + groups * kQ8GroupBytes) + (b - groups * kR8);
      const __m256i wv = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs)),
                                          _mm512_castsi512_si256(offset));
      const float dw = _cvtsh_ss(blk->d);
      for (int j = 0; j < C; ++j) {
        const __m256i sum = _mm256_dpbusd_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xl[j] + b * 8)), wv,
                                                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq[j] + b * QK)));
        tail[r][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(dw * xd[j][b]), tail[r][j]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < C; ++j)
      y[(r0 + j) * ldy + o + r] = hsum8(_mm256_add_ps(_mm256_add_ps(acc[r][j][0], acc[r][j][1]), tail[r][j]));
}

// Narrow rows (at most kNarrowCols values: the 15M shape's 288) go four weight rows a call for a
// single activation row, sharing its loads and the call's set-up: at 288 values a Q4_0 row is one
// group and a block, and the set-up and the final reduction cost more than the blocks (a 32000 x
// 288 Q4_0 product, the 15M output matrix, on a Zen 4: one core 13.0-13.5 -> 7.5-7.6 ns a row, two
// 316-326 -> 172-222 us; 15M Q4_0 decode ~1,650 -> ~2,000 tok/s). Wider rows stay one a call: four
// 768-wide rows read side by side were four short streams to the prefetcher, and a 110M decode
// from DRAM ran slower; two (Q4_0_R8, sharing the activation loads: from L2 a 768-wide row
// 21-23 -> 17-19 ns) made a 110M Q4_0 decode step 10% slower (one row a call 2.52-2.81 ms, two
// 2.80-3.06, alternating in one process). Each (weight row, activation row) sum is the same either way.
// Q4_0_X16 / Q8_0_X16, few rows: the sixteen weight rows o..o + 15 (one whole group) against C
// activation rows, y[r0 + j, o .. o + 15] for j < C: the 32-bit lanes are the weight rows, so no
// sum ever crosses lanes. Per block, each of the 64-byte rounds of the cell meets four activation
// values broadcast to every lane (Q4_0: round k's low nibbles values 4k..4k + 3 and its high ones
// 16 + 4k..16 + 4k + 3; Q8_0: round k values 4k..4k + 3, the weights offset by 128 to be
// vpdpbusd's unsigned operand, an xor), eight vpdpbusd a block in two integer chains, the first
// starting at the block's -c * sum x_q (QuantActs::block_start); then one conversion and one
// multiply-add by the sixteen d_w times d_x, block b into float chain b % 2, the two added at the
// end and stored as sixteen outputs. The set-up, the scales and the stores are paid once for
// sixteen rows, where a row at a time paid a horizontal sum per row: one Zen 4 core from L2, a
// 768 x 768 Q4_0 product 0.80 -> 0.29 ns a block (Q4_0_R8 -> this), 768 x 2048 0.51 -> 0.28. Each
// output's operations do not depend on C or on the rows beside it.
template <WeightType kT, int C>
void x16_rows_vnni(float* y, int64_t ldy, const Weight<float>& W, int64_t o, const QuantActs& a, int64_t r0) {
  constexpr bool kQ4 = kT == WeightType::Q4_0_X16;
  constexpr int64_t kCell = kX16 * static_cast<int64_t>(kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
  const int64_t nb = a.nb;
  const uint8_t* cells = x16_cell(W, o, 0);
  const int32_t* xq[C];  // the activation values four at a time
  const float* xd[C];
  const int32_t* xs[C];
  for (int j = 0; j < C; ++j) {
    xq[j] = reinterpret_cast<const int32_t*>(a.q + (r0 + j) * a.in);
    xd[j] = a.d + (r0 + j) * nb;
    xs[j] = a.block_start + (r0 + j) * nb;
  }
  __m512 acc[C][2];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F), offset = _mm512_set1_epi8(static_cast<char>(0x80));
  auto block = [&](int64_t b, auto chain) {
    constexpr int kChain = decltype(chain)::value;
    const uint8_t* cell = cells + b * kCell;
    __m512i w[8];  // w[i] meets activation values 4i..4i + 3
    if constexpr (kQ4) {
      for (int k = 0; k < 4; ++k) {
        __m512i v = _mm512_loadu_si512(cell + 2 * kX16 + 64 * k);
        asm("" : "+v"(v));  // loaded once (see block_row_vnni)
        w[k] = _mm512_and_si512(v, low4);
        w[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
      }
    } else {
      for (int k = 0; k < 8; ++k) w[k] = _mm512_xor_si512(_mm512_loadu_si512(cell + 2 * kX16 + 64 * k), offset);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(cell)));
    for (int j = 0; j < C; ++j) {
      const int32_t* xb = xq[j] + b * (QK / 4);
      __m512i s0 = _mm512_set1_epi32(xs[j][b]), s1 = _mm512_setzero_si512();
      for (int i = 0; i < 8; i += 2) {
        s0 = _mm512_dpbusd_epi32(s0, w[i], _mm512_set1_epi32(xb[i]));
        s1 = _mm512_dpbusd_epi32(s1, w[i + 1], _mm512_set1_epi32(xb[i + 1]));
      }
      acc[j][kChain] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                       _mm512_mul_ps(dw, _mm512_set1_ps(xd[j][b])), acc[j][kChain]);
    }
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    block(b, std::integral_constant<int, 0>{});
    block(b + 1, std::integral_constant<int, 1>{});
  }
  if (b < nb) block(b, std::integral_constant<int, 0>{});
  for (int j = 0; j < C; ++j) _mm512_storeu_ps(y + (r0 + j) * ldy + o, _mm512_add_ps(acc[j][0], acc[j][1]));
}

template <WeightType kT>
void block_rows_vnni(std::span<const StoredProduct> parts, const QuantActs& a) {
  if constexpr (is_x16(kT)) {
    // Whole groups of sixteen rows a unit; the rows past them (the last unit of a part whose
    // height is no multiple of 16) one at a time, as their tail type's kernel takes a lone row.
    for_part_units<kX16>(parts, [&](const StoredProduct& part, int64_t o, int64_t count) {
      const Weight<float>& W = *part.W;
      const int64_t ldy = W.rows;
      if (count == kX16) {
        for_row_tiles(a.n, 0,
                      [&](auto c, int64_t r0) { x16_rows_vnni<kT, decltype(c)::value>(part.y, ldy, W, o, a, r0); });
        return;
      }
      for (int64_t i = o; i < o + count; ++i)
        for_row_tiles(a.n, 0, [&](auto c, int64_t r0) {
          constexpr int C = decltype(c)::value;
          if constexpr (kT == WeightType::Q4_0_X16) {
            block_row_vnni<WeightType::Q4_0_R8, C>(part.y, ldy, W, i, a, r0);
          } else if (W.cols > kNarrowCols) {
            q8r8_row_vnni<C>(part.y, ldy, W, i, a, r0);
          } else {
            block_row_vnni<WeightType::Q8_0, C>(part.y, ldy, W, i, a, r0);
          }
        });
    });
    return;
  }
  // (Q8_0_R8 has its own kernel; the others share block_row_vnni.)
  auto row = [&]<int C, int R = 1>(const StoredProduct& part, int64_t o, int64_t r0) {
    if constexpr (kT == WeightType::Q8_0_R8) {
      q8r8_row_vnni<C, R>(part.y, part.W->rows, *part.W, o, a, r0);
    } else {
      block_row_vnni<kT, C, R>(part.y, part.W->rows, *part.W, o, a, r0);
    }
  };
  if (a.n == 1 && a.in <= kNarrowCols) {
    constexpr int64_t kR = 4;
    for_part_units<kR>(parts, [&](const StoredProduct& part, int64_t o, int64_t count) {
      if (count == kR) return row.template operator()<1, kR>(part, o, 0);
      for (int64_t i = 0; i < count; ++i) row.template operator()<1>(part, o + i, 0);
    });
    return;
  }
  for_part_rows(parts, [&](const StoredProduct& part, int64_t o) {
    for_row_tiles(a.n, 0, [&](auto c, int64_t r0) { row.template operator()<decltype(c)::value>(part, o, r0); });
  });
}

// Many rows. The activations packed for lanes = rows: group g of 8 rows, block b, quad k (values
// 4k..4k+3 of the block): 32 bytes, row l's four at bytes 4l..4l+3 (unsigned q + 128 against
// Q8_0, signed q against Q4_0); their scales [g][b][8] and Q4_0's starts -8 * sum q [g][b][8].
struct PackedActs {
  int64_t groups = 0, nb = 0;
  const uint8_t* x = nullptr;
  const float* d = nullptr;
  const int32_t* start = nullptr;
};

enum : size_t { kSlotPacked = 2, kSlotPackedD = 22, kSlotStart = 1, kSlotWeights = 3, kSlotWd = 23, kSlotWneg = 2 };

PackedActs pack_acts(const QuantActs& a, bool q4) {
  PackedActs p;
  p.groups = (a.n + 7) / 8;
  p.nb = a.nb;
  const auto cells = static_cast<size_t>(p.groups * p.nb * 8);
  const ScratchBuffer<uint8_t> x(kSlotPacked, cells * 32, ScratchBuffer<uint8_t>::Unfilled{});
  const ScratchBuffer<float> d(kSlotPackedD, cells, ScratchBuffer<float>::Unfilled{});
  const ScratchBuffer<int32_t> start(kSlotStart, cells, ScratchBuffer<int32_t>::Unfilled{});
  uint8_t* xp = x.data();
  float* dp = d.data();
  int32_t* sp = start.data();
  parallel_for(p.groups, a.n * a.in >= (1 << 15), [&](int64_t g) {
    for (int64_t b = 0; b < p.nb; ++b) {
      uint8_t* cell = xp + (g * p.nb + b) * 8 * 32;
      for (int64_t l = 0; l < 8; ++l) {
        const int64_t r = g * 8 + l;
        const size_t at = static_cast<size_t>((g * p.nb + b) * 8 + l);
        if (r >= a.n) {  // padding rows: value 0, scale 0
          for (int64_t k = 0; k < 8; ++k)
            for (int64_t e = 0; e < 4; ++e) cell[k * 32 + l * 4 + e] = q4 ? 0 : 128;
          dp[at] = 0;
          sp[at] = 0;
          continue;
        }
        const int8_t* q = a.q + r * a.in + b * QK;
        int32_t sum = 0;
        for (int64_t k = 0; k < 8; ++k)
          for (int64_t e = 0; e < 4; ++e) {
            const int8_t v = q[4 * k + e];
            sum += v;
            cell[k * 32 + l * 4 + e] = q4 ? static_cast<uint8_t>(v) : static_cast<uint8_t>(static_cast<int>(v) + 128);
          }
        dp[at] = a.d[r * a.nb + b];
        sp[at] = -8 * sum;
      }
    }
  });
  p.x = xp;
  p.d = dp;
  p.start = sp;
  return p;
}

// 4 weight rows (unpacked: wq [4][in] bytes in value order, Q8_0 signed, Q4_0 nibbles 0..15; wd
// [4][nb] scales; wneg [4][nb] -128 * sum w for Q8_0) against NG groups of 8 activation rows.
template <WeightType kT, int NG>
void block_gemm_tile(float* y, int64_t ldy, int64_t n, const uint8_t* wq, const float* wd, const int32_t* wneg,
                     int64_t in, int64_t o0, int64_t m, const PackedActs& p, int64_t g0) {
  constexpr bool kQ4 = is_q4(kT);
  const int64_t nb = p.nb;
  __m256 acc[4][NG];
  for (auto& row : acc)
    for (auto& v : row) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i ia[4][NG];
    for (int i = 0; i < 4; ++i)
      for (int g = 0; g < NG; ++g)
        ia[i][g] = kQ4 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.start + ((g0 + g) * nb + b) * 8))
                       : _mm256_set1_epi32(wneg[i * nb + b]);
    const uint8_t* xb[NG];
    for (int g = 0; g < NG; ++g) xb[g] = p.x + ((g0 + g) * nb + b) * 256;
    for (int k = 0; k < 8; ++k) {
      __m256i xv[NG];
      for (int g = 0; g < NG; ++g) xv[g] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb[g] + 32 * k));
      for (int i = 0; i < 4; ++i) {
        int32_t four;
        std::memcpy(&four, wq + i * in + b * QK + 4 * k, 4);
        const __m256i wb = _mm256_set1_epi32(four);
        for (int g = 0; g < NG; ++g)
          ia[i][g] = kQ4 ? _mm256_dpbusd_epi32(ia[i][g], wb, xv[g]) : _mm256_dpbusd_epi32(ia[i][g], xv[g], wb);
      }
    }
    for (int g = 0; g < NG; ++g) {
      const __m256 dx = _mm256_loadu_ps(p.d + ((g0 + g) * nb + b) * 8);
      for (int i = 0; i < 4; ++i)
        acc[i][g] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia[i][g]), _mm256_mul_ps(_mm256_set1_ps(wd[i * nb + b]), dx), acc[i][g]);
    }
  }
  store_lane_tile<NG>(y, ldy, n, o0, m, acc, g0);
}

// Weight rows o0.. (m <= 4; missing ones repeat the last) unpacked for block_gemm_tile.
template <WeightType kT>
void unpack_weight_rows(uint8_t* wq, float* wd, int32_t* wneg, const Weight<float>& W, int64_t o0, int64_t m) {
  const int64_t in = W.cols, nb = in / QK;
  if constexpr (is_x16(kT)) {
    if (m == 4 && o0 + 4 <= W.rows / kX16 * kX16) {
      // Four rows of one group (o0 is a multiple of 4): in every 64-byte round of a cell, their
      // four bytes side by side, 16 bytes that a 4 x 4 transpose of 32-bit lanes turns into four
      // bytes of each row.
      constexpr int64_t kCell = kX16 * static_cast<int64_t>(is_q4(kT) ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
      const uint8_t* cells = x16_cell(W, o0, 0);
      const int64_t l0 = o0 % kX16;
      auto transpose = [](const uint8_t* at, __m128i(&row)[4]) {
        const __m128i r0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at)),
                      r1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 64)),
                      r2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 128)),
                      r3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 192));
        const __m128i t0 = _mm_unpacklo_epi32(r0, r1), t1 = _mm_unpacklo_epi32(r2, r3), t2 = _mm_unpackhi_epi32(r0, r1),
                      t3 = _mm_unpackhi_epi32(r2, r3);
        row[0] = _mm_unpacklo_epi64(t0, t1);
        row[1] = _mm_unpackhi_epi64(t0, t1);
        row[2] = _mm_unpacklo_epi64(t2, t3);
        row[3] = _mm_unpackhi_epi64(t2, t3);
      };
      const __m128i low4 = _mm_set1_epi8(0x0F);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* cell = cells + b * kCell;
        for (int64_t i = 0; i < 4; ++i) {
          uint16_t d = 0;
          std::memcpy(&d, cell + 2 * (l0 + i), 2);
          wd[i * nb + b] = _cvtsh_ss(d);
        }
        __m128i lo[4];
        transpose(cell + 2 * kX16 + 4 * l0, lo);  // bytes 0..15 of each row's block
        if constexpr (is_q4(kT)) {
          for (int64_t i = 0; i < 4; ++i) {
            uint8_t* dst = wq + i * in + b * QK;
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_and_si128(lo[i], low4));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + QK / 2), _mm_and_si128(_mm_srli_epi16(lo[i], 4), low4));
            wneg[i * nb + b] = 0;
          }
        } else {
          __m128i hi[4];
          transpose(cell + 2 * kX16 + 256 + 4 * l0, hi);  // bytes 16..31
          for (int64_t i = 0; i < 4; ++i) {
            uint8_t* dst = wq + i * in + b * QK;
            const __m256i v = _mm256_set_m128i(hi[i], lo[i]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v);
            const __m256i lanes = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v);
            const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
            const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
            wneg[i * nb + b] = -128 * _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, 0xB1)));
          }
        }
      }
      return;
    }
  }
  for (int64_t i = 0; i < 4; ++i) {
    const int64_t row = o0 + std::min<int64_t>(i, m - 1);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* dst = wq + i * in + b * QK;
      if constexpr (!is_q4(kT)) {
        const Q8Block blk = q8_at(W, row, b);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), v);
        // -128 * sum w: vpdpbusd of the bytes against -128 would need a signed first operand;
        // 128 * (lane sums), summed, negated.
        const __m256i lanes = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), v);
        const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
        const __m128i q = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        wneg[i * nb + b] = -128 * _mm_cvtsi128_si32(_mm_add_epi32(q, _mm_shuffle_epi32(q, 0xB1)));
        wd[i * nb + b] = _cvtsh_ss(blk.d);
      } else {
        const Q4Block blk = q4_at(W, row, b);
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs)), low4 = _mm_set1_epi8(0x0F);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_and_si128(q, low4));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + QK / 2), _mm_and_si128(_mm_srli_epi16(q, 4), low4));
        wneg[i * nb + b] = 0;
        wd[i * nb + b] = _cvtsh_ss(blk.d);
      }
    }
  }
}

template <WeightType kT>
void block_gemm_vnni(float* y, const Weight<float>& W, const QuantActs& a) {
  const PackedActs p = pack_acts(a, is_q4(kT));
  const int64_t out = W.rows, in = W.cols, nb = a.nb, quads = (out + 3) / 4;
  parallel_region(out * in * a.n >= (1 << 20), [&] {
    const ScratchBuffer<uint8_t> wq(kSlotWeights, static_cast<size_t>(4 * in), ScratchBuffer<uint8_t>::Unfilled{});
    const ScratchBuffer<float> wd(kSlotWd, static_cast<size_t>(4 * nb), ScratchBuffer<float>::Unfilled{});
    const ScratchBuffer<int32_t> wneg(kSlotWneg, static_cast<size_t>(4 * nb), ScratchBuffer<int32_t>::Unfilled{});
    // Passes over the activations a slice of groups at a time, so that the slice stays in L2
    // while every weight tile of this thread meets it; each pass unpacks the tiles again, so a
    // slice is as large as half the L2 allows (all 512 rows of a prompt when a row is at most
    // 1,024 values).
    const int64_t per_pass = std::max(kGroupsPerPass, kActsPerPassBytes / (nb * 256));
    for (int64_t g_begin = 0; g_begin < p.groups; g_begin += per_pass) {
      const int64_t g_end = std::min(p.groups, g_begin + per_pass);
      for_static(quads, [&](int64_t qd) {
        const int64_t o0 = 4 * qd, m = std::min<int64_t>(4, out - o0);
        unpack_weight_rows<kT>(wq.data(), wd.data(), wneg.data(), W, o0, m);
        int64_t g = g_begin;
        for (; g + 2 <= g_end; g += 2)
          block_gemm_tile<kT, 2>(y, out, a.n, wq.data(), wd.data(), wneg.data(), in, o0, m, p, g);
        if (g < g_end) block_gemm_tile<kT, 1>(y, out, a.n, wq.data(), wd.data(), wneg.data(), in, o0, m, p, g);
      });
    }
  });
}
#endif

// BF16: the activations rounded to bf16 (as llama.cpp's vec_dot_bf16 takes them), back in
// float: x_r[n, in] (the portable build's form of bf16_rows / bf16_gemm).
enum : size_t { kSlotRounded = 24, kSlotBf16 = 0 };
[[maybe_unused]] const float* round_acts_bf16(const float* x, int64_t n, int64_t in) {
  const auto total = static_cast<size_t>(n * in);
  const ScratchBuffer<float> r(kSlotRounded, total, ScratchBuffer<float>::Unfilled{});
  float* rp = r.data();
  parallel_for(n, n * in >= (1 << 15), [&](int64_t row) {
    for (int64_t k = row * in; k < (row + 1) * in; ++k) rp[k] = bf16_to_f32(f32_to_bf16(x[k]));
  });
  return rp;
}

#if defined(TFORMER_QLINEAR_BF16)
// The activations as bf16 (vcvtne2ps2bf16: nearest even, as f32_to_bf16, denormals flushed):
// row-major [n, in], for the few-row kernel.
const uint16_t* bf16_acts(const float* x, int64_t n, int64_t in) {
  const ScratchBuffer<uint16_t> b(kSlotBf16, static_cast<size_t>(n * in + 32), ScratchBuffer<uint16_t>::Unfilled{});
  uint16_t* bp = b.data();
  parallel_for(n, n * in >= (1 << 15), [&](int64_t row) {
    const float* xr = x + row * in;
    uint16_t* o = bp + row * in;
    int64_t k = 0;
    for (; k + 32 <= in; k += 32)
      _mm512_storeu_si512(
          o + k, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + k + 16), _mm512_loadu_ps(xr + k))));
    for (; k < in; ++k) o[k] = f32_to_bf16(xr[k]);
  });
  return bp;
}

// Few rows: y[j, o] for j < C activation rows (bf16, [C][in]): vdpbf16ps multiplies 32 pairs of
// bf16 into 16 float sums per instruction.
template <int C>
void bf16_row(float* y, int64_t ldy, const Weight<float>& W, int64_t o, const uint16_t* xb, int64_t in) {
  const auto* w = reinterpret_cast<const uint16_t*>(row_ptr(W, o));
  __m512 acc[C];
  for (auto& v : acc) v = _mm512_setzero_ps();
  // Whole vectors, then the masked tail (see load16: a mask in the loop kept the accumulators of
  // the 2- and 3-row tiles on the stack).
  int64_t k = 0;
  for (; k + 32 <= in; k += 32) {
    const auto v = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + k));
    for (int j = 0; j < C; ++j)
      acc[j] = _mm512_dpbf16_ps(acc[j], v, reinterpret_cast<__m512bh>(_mm512_loadu_si512(xb + j * in + k)));
  }
  if (k < in) {
    const auto mk = (__mmask32(1) << (in - k)) - 1;
    const auto v = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mk, w + k));
    for (int j = 0; j < C; ++j)
      acc[j] = _mm512_dpbf16_ps(acc[j], v, reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(mk, xb + j * in + k)));
  }
  for (int j = 0; j < C; ++j) y[j * ldy + o] = hsum16(acc[j]);
}

void bf16_rows(std::span<const StoredProduct> parts, const float* x, int64_t n) {
  const int64_t in = parts[0].W->cols;
  const uint16_t* xb = bf16_acts(x, n, in);
  for_part_rows(parts, [&](const StoredProduct& part, int64_t o) {
    const int64_t out = part.W->rows;
    for_row_tiles(n, 0, [&](auto c, int64_t r) {
      bf16_row<decltype(c)::value>(part.y + r * out, out, *part.W, o, xb + r * in, in);
    });
  });
}

// Many rows (even `in`): lanes = activation rows, in 512-bit vectors (a vdpbf16ps on 256 bits
// ran at half the FP32 sgemm's rate on an Intel Xeon, whose 512-bit units take one per cycle; on a
// Zen 4 the two widths run alike). The activations packed as group g of 16 rows, pair p (values 2p,
// 2p + 1): 64 bytes, row l's pair at bytes 4l..4l+3; a weight row's pair (4 contiguous bytes of
// the row) is broadcast, so one vdpbf16ps advances 16 rows by a pair. Each lane sums its own row's
// pairs in order, so the result does not depend on the vector width or on how rows are grouped.
enum : size_t { kSlotBf16Packed = 1 };
constexpr int64_t kBf16Lanes = 16;
template <int NG>
void bf16_gemm_tile(float* y, int64_t ldy, int64_t n, const uint16_t* const* w, int64_t in, int64_t o0, int64_t m,
                    const uint16_t* xp, int64_t g0) {
  const int64_t pairs = in / 2;
  __m512 acc[4][NG];
  for (auto& row : acc)
    for (auto& v : row) v = _mm512_setzero_ps();
  const uint16_t* xg[NG];
  for (int g = 0; g < NG; ++g) xg[g] = xp + (g0 + g) * pairs * 2 * kBf16Lanes;
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh xv[NG];
    for (int g = 0; g < NG; ++g) xv[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xg[g] + p * 2 * kBf16Lanes));
    for (int i = 0; i < 4; ++i) {
      int32_t pair;
      std::memcpy(&pair, w[i] + 2 * p, 4);
      const __m512bh wb = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      for (int g = 0; g < NG; ++g) acc[i][g] = _mm512_dpbf16_ps(acc[i][g], xv[g], wb);
    }
  }
  for (int g = 0; g < NG; ++g) {
    alignas(64) float lanes[4][kBf16Lanes];
    for (int i = 0; i < 4; ++i) _mm512_store_ps(lanes[i], acc[i][g]);
    for (int64_t l = 0; l < kBf16Lanes; ++l) {
      const int64_t r = (g0 + g) * kBf16Lanes + l;
      if (r >= n) break;
      for (int64_t i = 0; i < m; ++i) y[r * ldy + o0 + i] = lanes[i][l];
    }
  }
}

void bf16_gemm(float* y, const Weight<float>& W, const float* x, int64_t n) {
  const int64_t out = W.rows, in = W.cols, pairs = in / 2, groups = (n + kBf16Lanes - 1) / kBf16Lanes,
                quads = (out + 3) / 4;
  const uint16_t* xb = bf16_acts(x, n, in);
  const ScratchBuffer<uint16_t> packed(kSlotBf16Packed, static_cast<size_t>(groups * pairs * 2 * kBf16Lanes),
                                       ScratchBuffer<uint16_t>::Unfilled{});
  uint16_t* xp = packed.data();
  parallel_for(groups, n * in >= (1 << 15), [&](int64_t g) {
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t l = 0; l < kBf16Lanes; ++l) {
        const int64_t r = g * kBf16Lanes + l;
        uint16_t* cell = xp + (g * pairs + p) * 2 * kBf16Lanes + 2 * l;
        cell[0] = r < n ? xb[r * in + 2 * p] : 0;
        cell[1] = r < n ? xb[r * in + 2 * p + 1] : 0;
      }
  });
  constexpr int64_t kGroups = 4;                              // activation groups per tile: 4 x 16 rows
  constexpr int64_t kPass = kGroupsPerPass * 8 / kBf16Lanes;  // groups a pass covers: 128 rows
  parallel_region(out * in * n >= (1 << 20), [&] {
    for (int64_t g_begin = 0; g_begin < groups; g_begin += kPass) {
      const int64_t g_end = std::min(groups, g_begin + kPass);
      for_static(quads, [&](int64_t qd) {
        const int64_t o0 = 4 * qd, m = std::min<int64_t>(4, out - o0);
        const uint16_t* w[4];
        for (int64_t i = 0; i < 4; ++i)
          w[i] = reinterpret_cast<const uint16_t*>(row_ptr(W, o0 + std::min<int64_t>(i, m - 1)));
        int64_t g = g_begin;
        for (; g + kGroups <= g_end; g += kGroups) bf16_gemm_tile<4>(y, out, n, w, in, o0, m, xp, g);
        switch (g_end - g) {
          case 3:
            bf16_gemm_tile<3>(y, out, n, w, in, o0, m, xp, g);
            break;
          case 2:
            bf16_gemm_tile<2>(y, out, n, w, in, o0, m, xp, g);
            break;
          case 1:
            bf16_gemm_tile<1>(y, out, n, w, in, o0, m, xp, g);
            break;
          default:
            break;
        }
      });
    }
  });
}
#endif

// F16 / BF16 with many rows: panels of weight rows converted to float, each through the sgemm.
void dense_panels_gemm(float* y, const Weight<float>& W, const float* x, int64_t n) {
  const int64_t out = W.rows, in = W.cols;
  const ScratchBuffer<float> panel(kSlotPanel, static_cast<size_t>(std::min(out, kPanelRows) * in),
                                   ScratchBuffer<float>::Unfilled{});
  for (int64_t p0 = 0; p0 < out; p0 += kPanelRows) {
    const int64_t rows = std::min(kPanelRows, out - p0);
    float* pw = panel.data();
    parallel_for(rows, rows * in >= 65536,
                 [&](int64_t r) { dequantize_weight_rows(pw + r * in, W, p0 + r, p0 + r + 1); });
#if defined(__AVX512F__)
    gemm<float>(y + p0, out, x, in, false, pw, in, true, n, rows, in);  // our sgemm: the same bits at any thread count
#else
    // OpenBLAS's threaded sgemm gives other bits for another thread count (its split moves the
    // edge tiles): fixed blocks of weight rows instead, each one single-threaded product (OpenBLAS
    // runs on one thread inside a parallel region), the blocks in parallel.
    constexpr int64_t kBlock = 128;
    parallel_for((rows + kBlock - 1) / kBlock, true, [&](int64_t b) {
      const int64_t r0 = b * kBlock, m = std::min(kBlock, rows - r0);
      gemm<float>(y + p0 + r0, out, x, in, false, pw + r0 * in, in, true, n, m, in);
    });
#endif
  }
}

void check_weight(const Weight<float>& W, const char* what) {
  TF_CHECK(W.present() && W.type != WeightType::F64, "{}: a {} weight of {}x{}", what, weight_type_name(W.type), W.rows,
           W.cols);
  TF_CHECK(!is_block_type(W.type) || W.cols % QK == 0, "{}: {} rows of {} values are not whole blocks", what,
           weight_type_name(W.type), W.cols);
}

}  // namespace

bool is_block_type(WeightType t) {
  return t == WeightType::Q8_0 || t == WeightType::Q4_0 || t == WeightType::Q4_0_R8 || t == WeightType::Q8_0_R8 ||
         t == WeightType::Q4_0_X16 || t == WeightType::Q8_0_X16;
}

const char* weight_type_name(WeightType type) {
  switch (type) {
    case WeightType::F32:
      return "f32";
    case WeightType::F64:
      return "f64";
    case WeightType::F16:
      return "f16";
    case WeightType::BF16:
      return "bf16";
    case WeightType::Q8_0:
      return "q8_0";
    case WeightType::Q4_0:
      return "q4_0";
    case WeightType::Q4_0_R8:
      return "q4_0_r8";
    case WeightType::Q8_0_R8:
      return "q8_0_r8";
    case WeightType::Q4_0_X16:
      return "q4_0_x16";
    case WeightType::Q8_0_X16:
      return "q8_0_x16";
  }
  return "unknown";
}

int64_t weight_row_bytes(WeightType type, int64_t cols) {
  switch (type) {
    case WeightType::F32:
      return 4 * cols;
    case WeightType::F64:
      return 8 * cols;
    case WeightType::F16:
    case WeightType::BF16:
      return 2 * cols;
    case WeightType::Q8_0:
    case WeightType::Q8_0_R8:
    case WeightType::Q8_0_X16:
      return cols / QK * static_cast<int64_t>(sizeof(BlockQ8_0));
    case WeightType::Q4_0:
    case WeightType::Q4_0_R8:
    case WeightType::Q4_0_X16:
      return cols / QK * static_cast<int64_t>(sizeof(BlockQ4_0));
  }
  return 0;
}

std::vector<uint8_t> repack_weight(WeightType& type, std::vector<uint8_t> bytes, int64_t rows, int64_t cols) {
  if (type != WeightType::Q4_0 && type != WeightType::Q8_0) return bytes;
  TF_CHECK(cols % QK == 0 && static_cast<int64_t>(bytes.size()) == rows * weight_row_bytes(type, cols),
           "repack_weight: {} bytes for a [{}, {}] {} matrix", bytes.size(), rows, cols, weight_type_name(type));
  // A block is its 2-byte scale and `values` bytes; a cell, sixteen rows' block b (x16_offset); a
  // lone row's group, eight blocks' scales then their values.
  const bool q8 = type == WeightType::Q8_0;
  const int64_t block = q8 ? static_cast<int64_t>(sizeof(BlockQ8_0)) : static_cast<int64_t>(sizeof(BlockQ4_0));
  const int64_t values = block - 2, group = kR8 * block;
  const int64_t nb = cols / QK, groups = nb / kR8, rb = weight_row_bytes(type, cols);
  const int64_t whole = rows / kX16 * kX16;
  std::vector<uint8_t> out(bytes.size());
  for (int64_t r = 0; r < whole; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = bytes.data() + r * rb + b * block;
      uint8_t* cell = out.data() + (r / kX16 * nb + b) * kX16 * block;
      const int64_t l = r % kX16;
      std::memcpy(cell + 2 * l, blk, 2);
      for (int64_t j = 0; j < values; j += 4) std::memcpy(cell + x16_offset(l, j), blk + 2 + j, 4);
    }
  type = q8 ? WeightType::Q8_0_X16 : WeightType::Q4_0_X16;
  const bool regroup = x16_tail_type(type, cols) != WeightType::Q8_0;
  for (int64_t r = whole; r < rows; ++r) {
    const uint8_t* src = bytes.data() + r * rb;
    uint8_t* dst = out.data() + r * rb;
    if (!regroup) {
      std::memcpy(dst, src, static_cast<size_t>(rb));
      continue;
    }
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t k = 0; k < kR8; ++k) {
        const uint8_t* blk = src + (g * kR8 + k) * block;
        std::memcpy(dst + g * group + 2 * k, blk, 2);
        for (int64_t j = 0; j < values; j += 4) std::memcpy(dst + g * group + r8_offset(k, j), blk + 2 + j, 4);
      }
    std::memcpy(dst + groups * group, src + groups * group, static_cast<size_t>((nb - groups * kR8) * block));
  }
  return out;
}

void dequantize_weight_rows(float* out, const Weight<float>& W, int64_t r0, int64_t r1) {
  check_weight(W, "dequantize_weight_rows");
  const int64_t in = W.cols;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* row = row_ptr(W, r);
    float* dst = out + (r - r0) * in;
    const std::span<float> o(dst, static_cast<size_t>(in));
    switch (W.type) {
      case WeightType::Q8_0:
        dequantize_row_q8_0(std::span<const BlockQ8_0>(reinterpret_cast<const BlockQ8_0*>(row), in / QK), o);
        break;
      case WeightType::Q4_0:
        dequantize_row_q4_0(std::span<const BlockQ4_0>(reinterpret_cast<const BlockQ4_0*>(row), in / QK), o);
        break;
      case WeightType::Q8_0_R8:  // each block back in ggml's layout, then as ggml's
      case WeightType::Q8_0_X16:
        for (int64_t b = 0; b < in / QK; ++b) {
          const auto blk = as_ggml_block<BlockQ8_0>(q8_at(W, r, b));
          dequantize_row_q8_0(std::span<const BlockQ8_0>(&blk, 1), o.subspan(static_cast<size_t>(b * QK), QK));
        }
        break;
      case WeightType::Q4_0_R8:
      case WeightType::Q4_0_X16:
        for (int64_t b = 0; b < in / QK; ++b) {
          const auto blk = as_ggml_block<BlockQ4_0>(q4_at(W, r, b));
          dequantize_row_q4_0(std::span<const BlockQ4_0>(&blk, 1), o.subspan(static_cast<size_t>(b * QK), QK));
        }
        break;
      case WeightType::F32:
        std::memcpy(dst, row, static_cast<size_t>(4 * in));
        break;
      default:
        for (int64_t k = 0; k < in; ++k) dst[k] = dense_value(W.type, row, k);
        break;
    }
  }
}

void stored_linear(float* y, const float* x, const Weight<float>& W, int64_t n) {
  const StoredProduct part{y, &W};
  stored_linear_shared(std::span<const StoredProduct>(&part, 1), x, n);
}

void stored_linear_shared(std::span<const StoredProduct> parts, const float* x, int64_t n) {
  if (parts.empty()) return;
  const Weight<float>& W = *parts[0].W;
  int64_t rows = 0;
  for (const StoredProduct& p : parts) {
    check_weight(*p.W, "stored_linear");
    TF_CHECK(p.W->type == W.type && p.W->cols == W.cols,
             "stored_linear: products of one input need one type and width ({} x {} {} beside {} x {} {})", p.W->rows,
             p.W->cols, weight_type_name(p.W->type), W.rows, W.cols, weight_type_name(W.type));
    rows += p.W->rows;
  }
  if (n <= 0 || rows == 0) return;
  // Below kFewRows rows (or row-independent), one quantization of x for every part and, but for the
  // dense row-independent batches of kFewRows or more, one parallel region over every part's rows
  // (decode's q, k and v, or w1 and w3: a 768 x 768 Q4_0 product alone ran at 19 GB/s on 2 threads
  // of a Zen 4, three as one pass at 27, the fixed cost of a pass, about 6 us, paid once). The
  // tiled products, compute-bound, run part by part.
  const bool few = n < kFewRows || row_independent_products();
  auto each = [&](auto&& one) {
    for (const StoredProduct& p : parts) one(p.y, *p.W);
  };
  if (is_block_type(W.type)) {
#if defined(TFORMER_QLINEAR_VNNI)
    // The layout a lone row is kept in: the type's own, or for the interleaved types, that of the
    // rows past the last whole group of sixteen where a part has any (their kernels' needs too).
    WeightType lone = W.type;
    if (is_x16(W.type)) {
      const bool tail =
          std::any_of(parts.begin(), parts.end(), [](const StoredProduct& p) { return p.W->rows % kX16; });
      lone = tail ? x16_tail_type(W.type, W.cols) : W.type;
    }
    const bool q8_lane = lone == WeightType::Q8_0_R8 || W.type == WeightType::Q8_0_X16;
    const QuantActs a = quantize_acts(x, n, W.cols,
                                      {.unsigned_copy = few && lone == WeightType::Q8_0,
                                       .lanes = few && lone != WeightType::Q8_0 && !is_x16(lone),
                                       .groups = few && (lone == WeightType::Q4_0_R8 || lone == WeightType::Q8_0_R8),
                                       .q8_groups = lone == WeightType::Q8_0_R8,
                                       .starts = few && is_x16(W.type),
                                       .lane_scale = q8_lane ? 128 : 8});
    switch (W.type) {
      case WeightType::Q8_0:
        if (few) return block_rows_vnni<WeightType::Q8_0>(parts, a);
        return each([&](float* y, const Weight<float>& w) { block_gemm_vnni<WeightType::Q8_0>(y, w, a); });
      case WeightType::Q8_0_R8:
        if (few) return block_rows_vnni<WeightType::Q8_0_R8>(parts, a);
        return each([&](float* y, const Weight<float>& w) { block_gemm_vnni<WeightType::Q8_0_R8>(y, w, a); });
      case WeightType::Q4_0:
        if (few) return block_rows_vnni<WeightType::Q4_0>(parts, a);
        return each([&](float* y, const Weight<float>& w) { block_gemm_vnni<WeightType::Q4_0>(y, w, a); });
      case WeightType::Q4_0_X16:
        if (few) return block_rows_vnni<WeightType::Q4_0_X16>(parts, a);
        return each([&](float* y, const Weight<float>& w) { block_gemm_vnni<WeightType::Q4_0_X16>(y, w, a); });
      case WeightType::Q8_0_X16:
        if (few) return block_rows_vnni<WeightType::Q8_0_X16>(parts, a);
        return each([&](float* y, const Weight<float>& w) { block_gemm_vnni<WeightType::Q8_0_X16>(y, w, a); });
      default:
        if (few) return block_rows_vnni<WeightType::Q4_0_R8>(parts, a);
        return each([&](float* y, const Weight<float>& w) { block_gemm_vnni<WeightType::Q4_0_R8>(y, w, a); });
    }
#else
    return block_rows_plain(parts, quantize_acts(x, n, W.cols));
#endif
  }
#if defined(TFORMER_QLINEAR_BF16)
  if (W.type == WeightType::BF16) {
    if (!few && W.cols % 2 == 0) return each([&](float* y, const Weight<float>& w) { bf16_gemm(y, w, x, n); });
    return bf16_rows(parts, x, n);
  }
#endif
  // F16: the float activations times the weights converted to float (no rounding: Zen 4 has no
  // f16 dot product for rounded activations to feed, and exact products keep F16 files at float32
  // accuracy). BF16 without the instruction: its rounded activations in float, each product
  // exact, so only the float sums' order differs from bf16_rows / bf16_gemm.
  const float* xr = W.type == WeightType::BF16 ? round_acts_bf16(x, n, W.cols) : x;
  if (!few && W.type != WeightType::F32)
    return each([&](float* y, const Weight<float>& w) { dense_panels_gemm(y, w, xr, n); });
#if defined(__AVX512F__)
  switch (W.type) {
    case WeightType::F32:
      return dense_rows_avx512<WeightType::F32>(parts, xr, n);
    case WeightType::F16:
      return dense_rows_avx512<WeightType::F16>(parts, xr, n);
    default:
      return dense_rows_avx512<WeightType::BF16>(parts, xr, n);
  }
#else
  dense_rows_plain(parts, xr, n);
#endif
}

void stored_linear_reference(float* y, const float* x, const Weight<float>& W, int64_t n) {
  check_weight(W, "stored_linear_reference");
  const int64_t out = W.rows, in = W.cols, nb = in / QK;
  std::vector<BlockQ8_0> xq(static_cast<size_t>(is_block_type(W.type) ? nb : 0));
  for (int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * in;
    if (is_block_type(W.type))
      quantize_row_q8_0(std::span<const float>(xr, static_cast<size_t>(in)), std::span<BlockQ8_0>(xq));
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      if (is_block_type(W.type)) {
        for (int64_t b = 0; b < nb; ++b) {
          float dw = 0;
          const int32_t s = block_dot(W, o, b, xq[static_cast<size_t>(b)].qs, &dw);
          acc += static_cast<double>(dw) * f16_to_f32(xq[static_cast<size_t>(b)].d) * s;
        }
      } else {
        for (int64_t k = 0; k < in; ++k) {
          // BF16 multiplies the activations rounded to bf16; F16 and F32 the float ones.
          const float xv = W.type == WeightType::BF16 ? bf16_to_f32(f32_to_bf16(xr[k])) : xr[k];
          acc += static_cast<double>(dense_value(W.type, row_ptr(W, o), k)) * xv;
        }
      }
      y[r * out + o] = static_cast<float>(acc);
    }
  }
}

}  // namespace tformer
