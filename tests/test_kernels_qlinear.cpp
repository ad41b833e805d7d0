// The linear layer over stored weight types (kernels/qlinear.h): every kernel (few rows, the
// tiled many-row product, the F16/BF16 panels through the sgemm, the portable loops in a build
// without AVX-512 VNNI) against the plain reference, on asymmetric shapes with every tail (weight
// rows not a multiple of 4, activation rows not a multiple of 8 or 16, one block per row); the
// reference itself against hand-worked blocks and against the float product of the dequantized
// weights within the activation quantization's own error; the same bits for 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/float16.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/linear.h"
#include "kernels/qlinear.h"
#include "kernels/quant.h"
#include "test_util.h"

namespace tformer {
namespace {

// A weight matrix in one stored type, made from float values (rows of differing scales).
struct StoredWeight {
  WeightType type;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;
  std::vector<float> dequantized;  // [rows, cols]: the values the stored weight means
  Weight<float> view() const { return {type, bytes.data(), rows, cols}; }
};

// ggml's blocks (each a 2-byte scale and its values) regrouped as Q4_0_R8 / Q8_0_R8 are laid out,
// written here from the layout's description (kernels/qlinear.h), apart from repack_weight: per
// row, per whole group of eight blocks, the eight scales, then the eight blocks' values (Q8_0's 32
// bytes, Q4_0's 16 bytes of nibbles) in rounds of four bytes, round k taking bytes 4k..4k + 3 of
// each block in block order. The blocks past the last whole group as they were.
std::vector<uint8_t> regroup_by_eight(const std::vector<uint8_t>& ggml, int64_t rows, int64_t cols, size_t block) {
  std::vector<uint8_t> out;
  const int64_t nb = cols / 32, whole = nb / 8 * 8;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = ggml.data() + static_cast<size_t>(r * nb) * block;
    for (int64_t g = 0; g < whole; g += 8) {
      for (int64_t k = g; k < g + 8; ++k) out.insert(out.end(), row + k * block, row + k * block + 2);
      for (int64_t round = 0; round < static_cast<int64_t>(block - 2) / 4; ++round)
        for (int64_t k = g; k < g + 8; ++k)
          out.insert(out.end(), row + k * block + 2 + 4 * round, row + k * block + 2 + 4 * round + 4);
    }
    out.insert(out.end(), row + whole * block, row + nb * block);
  }
  return out;
}

// ggml's blocks interleaved as Q4_0_X16 / Q8_0_X16 are laid out, written here from the layout's
// description (kernels/qlinear.h), apart from repack_weight: per whole group of sixteen rows, per
// block b, the sixteen rows' scales of block b in row order, then their values in rounds of four
// bytes, round k taking bytes 4k..4k + 3 of each row's block b in row order. The rows past the
// last whole group each as a lone row is kept: regrouped by eight (Q4_0; Q8_0 wider than 512
// values) or as they were.
std::vector<uint8_t> interleave_by_sixteen(const std::vector<uint8_t>& ggml, int64_t rows, int64_t cols, size_t block) {
  std::vector<uint8_t> out;
  const int64_t nb = cols / 32, whole = rows / 16 * 16;
  auto at = [&](int64_t r, int64_t b) { return ggml.data() + static_cast<size_t>(r * nb + b) * block; };
  for (int64_t g = 0; g < whole; g += 16)
    for (int64_t b = 0; b < nb; ++b) {
      for (int64_t r = g; r < g + 16; ++r) out.insert(out.end(), at(r, b), at(r, b) + 2);
      for (int64_t round = 0; round < static_cast<int64_t>(block - 2) / 4; ++round)
        for (int64_t r = g; r < g + 16; ++r) out.insert(out.end(), at(r, b) + 2 + 4 * round, at(r, b) + 6 + 4 * round);
    }
  const std::vector<uint8_t> rest(at(whole, 0), ggml.data() + ggml.size());
  const bool regroup = block == sizeof(BlockQ4_0) || cols > 512;
  const std::vector<uint8_t> tail = regroup ? regroup_by_eight(rest, rows - whole, cols, block) : rest;
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

StoredWeight make_weight(WeightType type, int64_t rows, int64_t cols, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const double scale = 0.02 * (1.0 + static_cast<double>(r % 5));
    for (int64_t k = 0; k < cols; ++k) w[static_cast<size_t>(r * cols + k)] = static_cast<float>(scale * rng.normal());
  }
  StoredWeight s{type, rows, cols, {}, {}};
  s.bytes.resize(static_cast<size_t>(rows * weight_row_bytes(type, cols)));
  const auto n = static_cast<size_t>(rows * cols);
  switch (type) {
    case WeightType::F32:
      std::memcpy(s.bytes.data(), w.data(), n * 4);
      break;
    case WeightType::F16:
      for (size_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(w[i]);
        std::memcpy(s.bytes.data() + 2 * i, &h, 2);
      }
      break;
    case WeightType::BF16:
      quantize_row_bf16(w, std::span<uint16_t>(reinterpret_cast<uint16_t*>(s.bytes.data()), n));
      break;
    case WeightType::Q8_0:
    case WeightType::Q8_0_R8:  // ggml's blocks, then regrouped or interleaved as the kernels keep them
    case WeightType::Q8_0_X16:
      quantize_row_q8_0(w, std::span<BlockQ8_0>(reinterpret_cast<BlockQ8_0*>(s.bytes.data()), n / 32));
      if (type == WeightType::Q8_0_R8) s.bytes = regroup_by_eight(s.bytes, rows, cols, sizeof(BlockQ8_0));
      if (type == WeightType::Q8_0_X16) s.bytes = interleave_by_sixteen(s.bytes, rows, cols, sizeof(BlockQ8_0));
      break;
    case WeightType::Q4_0:
    case WeightType::Q4_0_R8:
    case WeightType::Q4_0_X16:
      quantize_row_q4_0(w, std::span<BlockQ4_0>(reinterpret_cast<BlockQ4_0*>(s.bytes.data()), n / 32));
      if (type == WeightType::Q4_0_R8) s.bytes = regroup_by_eight(s.bytes, rows, cols, sizeof(BlockQ4_0));
      if (type == WeightType::Q4_0_X16) s.bytes = interleave_by_sixteen(s.bytes, rows, cols, sizeof(BlockQ4_0));
      break;
    case WeightType::F64:
      ADD_FAILURE() << "no f64 stored weights";
  }
  s.dequantized.resize(n);
  dequantize_weight_rows(s.dequantized.data(), s.view(), 0, rows);
  return s;
}

std::vector<float> random_acts(int64_t n, int64_t cols, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x(static_cast<size_t>(n * cols));
  for (auto& v : x) v = static_cast<float>(rng.normal() * (1.0 + rng.uniform_double()));
  return x;
}

const WeightType kTypes[] = {WeightType::F32,     WeightType::F16,      WeightType::BF16,
                             WeightType::Q8_0,    WeightType::Q4_0,     WeightType::Q4_0_R8,
                             WeightType::Q8_0_R8, WeightType::Q4_0_X16, WeightType::Q8_0_X16};

TEST(StoredLinear, EveryKernelEqualsTheReferenceOnEveryTail) {
  // (Q4_0_R8, Q8_0_R8: 288 = one group of eight blocks and a block past it; 544, two groups and a
  // block; 2048 = eight whole groups. Q4_0_X16, Q8_0_X16: 37, 67 and 35 rows are whole groups of
  // sixteen and rows past them, 16 and 32 whole groups alone, the others rows past none.)
  const std::pair<int64_t, int64_t> shapes[] = {{5, 32},  {13, 96}, {37, 288}, {67, 768}, {9, 2048}, {6, 544},
                                                {5, 576}, {3, 800}, {16, 32},  {32, 544}, {35, 2048}};
  const int64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 24, 40, 135};
  for (const WeightType type : kTypes) {
    for (const auto& [rows, cols] : shapes) {
      const StoredWeight w = make_weight(type, rows, cols, static_cast<uint64_t>(rows * 131 + cols));
      for (const int64_t n : ns) {
        SCOPED_TRACE(std::string(weight_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                     " n=" + std::to_string(n));
        const auto x = random_acts(n, cols, static_cast<uint64_t>(n + 7));
        std::vector<float> y(static_cast<size_t>(n * rows), std::nanf("")), ref(y.size());
        stored_linear(y.data(), x.data(), w.view(), n);
        stored_linear_reference(ref.data(), x.data(), w.view(), n);
        for (int64_t r = 0; r < n; ++r)
          for (int64_t o = 0; o < rows; ++o) {
            // Float sums of `cols` terms in some order: a few ulps of the sum of |terms|.
            double mag = 0;
            for (int64_t k = 0; k < cols; ++k)
              mag += std::fabs(static_cast<double>(w.dequantized[static_cast<size_t>(o * cols + k)]) *
                               x[static_cast<size_t>(r * cols + k)]);
            const auto i = static_cast<size_t>(r * rows + o);
            ASSERT_NEAR(y[i], ref[i], 2e-6 * mag + 1e-30) << "row " << r << " output " << o;
          }
      }
    }
  }
}

TEST(StoredLinear, ReferenceOfHandWorkedBlocks) {
  // Q8_0: one block, d_w = 0.5, q_w[j] = (j % 7) - 3; activations integers with max |x| = 127,
  // so their Q8_0 scale is exactly 1 and q_x = x: y = 0.5 * sum q_w[j] x[j].
  std::vector<uint8_t> q8(sizeof(BlockQ8_0));
  auto* b8 = reinterpret_cast<BlockQ8_0*>(q8.data());
  b8->d = f32_to_f16(0.5f);
  std::vector<float> x(32);
  int64_t dot = 0;
  for (int j = 0; j < 32; ++j) {
    b8->qs[j] = static_cast<int8_t>(j % 7 - 3);
    x[static_cast<size_t>(j)] = j == 5 ? -127.0f : static_cast<float>((j * 11) % 23 - 11);
    dot += (j % 7 - 3) * static_cast<int64_t>(x[static_cast<size_t>(j)]);
  }
  float y = 0;
  stored_linear_reference(&y, x.data(), {WeightType::Q8_0, q8.data(), 1, 32}, 1);
  EXPECT_EQ(y, 0.5f * static_cast<float>(dot));
  stored_linear(&y, x.data(), {WeightType::Q8_0, q8.data(), 1, 32}, 1);
  EXPECT_EQ(y, 0.5f * static_cast<float>(dot));
  // Q4_0: d_w = 0.25, byte j = (j) | (15 - j) << 4: element j is j - 8, element j + 16 is 7 - j.
  std::vector<uint8_t> q4(sizeof(BlockQ4_0));
  auto* b4 = reinterpret_cast<BlockQ4_0*>(q4.data());
  b4->d = f32_to_f16(0.25f);
  dot = 0;
  for (int j = 0; j < 16; ++j) {
    b4->qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    dot += (j - 8) * static_cast<int64_t>(x[static_cast<size_t>(j)]) +
           (7 - j) * static_cast<int64_t>(x[static_cast<size_t>(j) + 16]);
  }
  stored_linear_reference(&y, x.data(), {WeightType::Q4_0, q4.data(), 1, 32}, 1);
  EXPECT_EQ(y, 0.25f * static_cast<float>(dot));
  stored_linear(&y, x.data(), {WeightType::Q4_0, q4.data(), 1, 32}, 1);
  EXPECT_EQ(y, 0.25f * static_cast<float>(dot));
}

// Q4_0 and Q8_0 as repack_weight keeps them: 17 rows (Q4_0_X16, Q8_0_X16: a whole group of
// sixteen interleaved and one row past it, kept regrouped by eight as Q4_0_R8 / Q8_0_R8) of 9 and
// 17 blocks (whole groups of eight blocks and one block past them), each block b of row r with its
// own power-of-two scale d = 2^((b + r) % 3 - 1) and its own values, against integer activations
// whose largest magnitude in each block is 127 (so d_x = 1 and x_q = x), for one activation row
// and for three: every product and sum is exact in float, so the kernels must give
// sum_b d * sum_j w_bj x_bj exactly, a sum worked here in integers. A lane of one row or block met
// with another's activations or scale, a nibble half taken for the other, or a start counted twice
// changes it.
TEST(StoredLinear, InterleavedAndRegroupedBlocksOfHandWorkedValues) {
  for (const bool q8 : {false, true}) {
    const int rows = 17, blocks = q8 ? 17 : 9, cols = 32 * blocks;
    const size_t block_bytes = q8 ? sizeof(BlockQ8_0) : sizeof(BlockQ4_0);
    std::vector<uint8_t> ggml(block_bytes * static_cast<size_t>(rows * blocks));
    std::vector<float> x(static_cast<size_t>(cols));
    for (int b = 0; b < blocks; ++b)
      for (int j = 0; j < 32; ++j)
        x[static_cast<size_t>(32 * b) + static_cast<size_t>(j)] =
            static_cast<float>(j == (b * 5) % 32 ? (b % 2 ? -127 : 127) : (j * 7 + b * 13) % 41 - 20);
    auto xv = [&](int b, int j) {
      return static_cast<int64_t>(x[32 * static_cast<size_t>(b) + static_cast<size_t>(j)]);
    };
    std::vector<double> expect(static_cast<size_t>(rows), 0.0);
    for (int r = 0; r < rows; ++r)
      for (int b = 0; b < blocks; ++b) {
        const double d = std::ldexp(1.0, (b + r) % 3 - 1);
        const uint16_t dh = f32_to_f16(static_cast<float>(d));
        uint8_t* blk = ggml.data() + block_bytes * static_cast<size_t>(r * blocks + b);
        std::memcpy(blk, &dh, 2);
        int64_t dot = 0;
        if (q8) {
          for (int j = 0; j < 32; ++j) {
            const int w = (j * 11 + b * 29 + r * 37) % 255 - 127;
            blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(w));
            dot += w * xv(b, j);
          }
        } else {
          for (int j = 0; j < 16; ++j) {
            const int lo = (j * 3 + b + r) % 16, hi = (j * 5 + 2 * b + 7 + 3 * r) % 16;
            blk[2 + j] = static_cast<uint8_t>(lo | hi << 4);
            dot += (lo - 8) * xv(b, j) + (hi - 8) * xv(b, j + 16);
          }
        }
        expect[static_cast<size_t>(r)] += d * static_cast<double>(dot);
      }
    WeightType type = q8 ? WeightType::Q8_0 : WeightType::Q4_0;
    const std::vector<uint8_t> packed = repack_weight(type, ggml, rows, cols);
    ASSERT_EQ(type, q8 ? WeightType::Q8_0_X16 : WeightType::Q4_0_X16);
    // The row past the group alone, regrouped by eight as Q4_0_R8 / Q8_0_R8 keep a row.
    const size_t rb = block_bytes * static_cast<size_t>(blocks);
    const std::vector<uint8_t> last(packed.end() - static_cast<std::ptrdiff_t>(rb), packed.end());
    const WeightType lone = q8 ? WeightType::Q8_0_R8 : WeightType::Q4_0_R8;
    // (n = 9: the tiled product, four rows of a cell at a time, whose sums are as exact.)
    for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{9}}) {
      SCOPED_TRACE(std::string(weight_type_name(type)) + " n=" + std::to_string(n));
      std::vector<float> xs;
      for (int64_t r = 0; r < n; ++r) xs.insert(xs.end(), x.begin(), x.end());
      std::vector<float> y(static_cast<size_t>(n * rows), std::nanf(""));
      for (const bool reference : {false, true}) {
        if (reference)
          stored_linear_reference(y.data(), xs.data(), {type, packed.data(), rows, cols}, n);
        else
          stored_linear(y.data(), xs.data(), {type, packed.data(), rows, cols}, n);
        for (int64_t i = 0; i < n * rows; ++i)
          EXPECT_EQ(y[static_cast<size_t>(i)], static_cast<float>(expect[static_cast<size_t>(i % rows)]))
              << (reference ? "reference " : "") << "row " << i / rows << " output " << i % rows;
      }
      std::vector<float> one(static_cast<size_t>(n), std::nanf(""));
      stored_linear(one.data(), xs.data(), {lone, last.data(), 1, cols}, n);
      for (const float v : one) EXPECT_EQ(v, static_cast<float>(expect[rows - 1])) << weight_type_name(lone);
    }
  }
}

TEST(StoredLinear, BlockTypesDifferFromTheFloatProductOnlyByTheActivationRounding) {
  // Quantizing x to Q8_0 moves each value by at most half its block's scale, so the result is
  // within sum_b d_x[b] / 2 * sum |w| of the dequantized weights times the float activations.
  for (const WeightType type :
       {WeightType::Q8_0, WeightType::Q4_0, WeightType::Q8_0_R8, WeightType::Q4_0_X16, WeightType::Q8_0_X16}) {
    const int64_t rows = 19, cols = 256, n = 3;
    const StoredWeight w = make_weight(type, rows, cols, 5);
    const auto x = random_acts(n, cols, 6);
    std::vector<float> ref(static_cast<size_t>(n * rows));
    stored_linear_reference(ref.data(), x.data(), w.view(), n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < rows; ++o) {
        double exact = 0, bound = 0;
        for (int64_t b = 0; b < cols / 32; ++b) {
          double amax = 0, wabs = 0;
          for (int64_t j = 0; j < 32; ++j) {
            const auto k = static_cast<size_t>(b * 32 + j);
            const double wv = w.dequantized[static_cast<size_t>(o * cols) + k],
                         xv = x[static_cast<size_t>(r * cols) + k];
            exact += wv * xv;
            amax = std::max(amax, std::fabs(xv));
            wabs += std::fabs(wv);
          }
          bound += (amax / 127 * 1.001 / 2 + 1e-7) * wabs;
        }
        const double got = ref[static_cast<size_t>(r * rows + o)];
        EXPECT_NEAR(got, exact, bound) << weight_type_name(type) << " row " << r << " output " << o;
        EXPECT_GT(std::fabs(got - exact), 0.0) << "activations were not quantized";
      }
  }
}

TEST(StoredLinear, SameBitsWithOneAndTwoThreads) {
  for (const WeightType type : kTypes) {
    for (const int64_t cols : {int64_t{512}, int64_t{800}}) {  // 800: wider than the four-row calls
      const StoredWeight w = make_weight(type, 301, cols, 9);
      for (const int64_t n : {int64_t{1}, int64_t{5}, int64_t{37}}) {
        const auto x = random_acts(n, cols, 10);
        auto run = [&](int threads) {
          set_num_threads(threads);
          std::vector<float> y(static_cast<size_t>(n * 301));
          stored_linear(y.data(), x.data(), w.view(), n);
          return y;
        };
        const auto one = run(1), two = run(2);
        set_num_threads(0);
        EXPECT_EQ(one, two) << weight_type_name(type) << " " << cols << " n=" << n;
      }
    }
  }
}

// Under RowIndependentProducts every row of a product has the bits of that row alone (n = 1),
// whatever n: for every type, for row counts that take each tile (1 to 4 activation rows with one
// weight row; from 8 rows on, four weight rows at a time against six activation rows and the rest
// in fours to ones: 6 + 2, 6 + 3, 6 + 4 + 1, 6 + 6, 6 + 6 + 4, 6 + 6 + 6 + 1; with the weight rows'
// tail of 1 to 3) and widths with and without a masked tail.
TEST(StoredLinear, RowIndependentRowsHaveTheBitsOfEachRowAlone) {
  // (800: three groups of eight blocks and one past them, wider than the four-row calls take;
  // 1024: F32 rows 4 KB apart, whose ten streams fall in few sets of the L1 cache.)
  const std::pair<int64_t, int64_t> shapes[] = {{13, 96}, {38, 288}, {7, 200}, {16, 64},
                                                {9, 800}, {6, 1024}, {35, 800}};
  for (const WeightType type : kTypes) {
    for (const auto& [rows, cols] : shapes) {
      if (type != WeightType::F32 && type != WeightType::F16 && type != WeightType::BF16 && cols % 32 != 0) continue;
      const StoredWeight w = make_weight(type, rows, cols, static_cast<uint64_t>(rows + 3 * cols));
      for (const int64_t n : {int64_t{3}, int64_t{8}, int64_t{9}, int64_t{11}, int64_t{12}, int64_t{16}, int64_t{19}}) {
        SCOPED_TRACE(std::string(weight_type_name(type)) + " " + std::to_string(rows) + "x" + std::to_string(cols) +
                     " n=" + std::to_string(n));
        const auto x = random_acts(n, cols, static_cast<uint64_t>(5 * n + 1));
        std::vector<float> y(static_cast<size_t>(n * rows)), alone(static_cast<size_t>(rows));
        {
          const RowIndependentProducts scope;
          linear_forward<float>(y.data(), x.data(), w.view(), nullptr, n);
        }
        for (int64_t r = 0; r < n; ++r) {
          linear_forward<float>(alone.data(), x.data() + r * cols, w.view(), nullptr, 1);
          ASSERT_EQ(std::memcmp(alone.data(), y.data() + r * rows, alone.size() * sizeof(float)), 0) << "row " << r;
        }
        // And the tiles did the arithmetic the reference states (not just the same wrong sums).
        std::vector<float> ref(y.size());
        stored_linear_reference(ref.data(), x.data(), w.view(), n);
        for (size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 1e-4 * (1 + std::fabs(ref[i]))) << i;
      }
    }
  }
}

// Products of one input (decode's q, k, v and w1, w3 in one pass): each part's result has the bits
// of linear_forward on that weight alone, for every type, few rows and many, with and without
// row-independent products, parts of different heights (rows not a multiple of 4) and biases;
// weights of two types or widths are refused.
TEST(StoredLinear, SharedInputProductsHaveTheBitsOfSeparateProducts) {
  for (const WeightType type : kTypes) {
    // Narrow rows (the four-row calls) and 768-wide ones with a tall part, over the threads' split
    for (const int64_t cols : {int64_t{96}, int64_t{288}, int64_t{768}}) {
      // (Q4_0_X16, Q8_0_X16: 16 rows a whole group, 38 and 301 groups and rows past them, 7 none.)
      const int64_t heights[] = {16, cols == 768 ? int64_t{301} : int64_t{38}, 7};
      std::vector<StoredWeight> w;
      std::vector<std::vector<float>> bias;
      for (size_t i = 0; i < 3; ++i) {
        w.push_back(make_weight(type, heights[i], cols, 100 + 7 * i + static_cast<uint64_t>(cols)));
        bias.emplace_back(random_acts(1, heights[i], 40 + i));
      }
      const Weight<float> v0 = w[0].view(), v1 = w[1].view(), v2 = w[2].view();
      for (const int64_t n : {int64_t{1}, int64_t{3}, int64_t{9}}) {
        for (const bool independent : {false, true}) {
          SCOPED_TRACE(std::string(weight_type_name(type)) + " cols=" + std::to_string(cols) +
                       " n=" + std::to_string(n) + (independent ? " row-independent" : ""));
          const auto x = random_acts(n, cols, static_cast<uint64_t>(9 * n + cols));
          std::vector<std::vector<float>> shared(3), alone(3);
          for (size_t i = 0; i < 3; ++i) {
            shared[i].assign(static_cast<size_t>(n * heights[i]), -1.0f);
            alone[i].assign(shared[i].size(), -2.0f);
          }
          {
            const RowIndependentProducts scope(independent);
            linear_forward_shared<float>({{shared[0].data(), &v0, bias[0].data()},
                                          {shared[1].data(), &v1, nullptr},
                                          {shared[2].data(), &v2, bias[2].data()}},
                                         x.data(), n);
            linear_forward<float>(alone[0].data(), x.data(), v0, bias[0].data(), n);
            linear_forward<float>(alone[1].data(), x.data(), v1, nullptr, n);
            linear_forward<float>(alone[2].data(), x.data(), v2, bias[2].data(), n);
          }
          for (size_t i = 0; i < 3; ++i) {
            ASSERT_EQ(std::memcmp(shared[i].data(), alone[i].data(), shared[i].size() * sizeof(float)), 0)
                << "part " << i;
            // and they are products, not two copies of one wrong answer
            std::vector<float> ref(shared[i].size());
            stored_linear_reference(ref.data(), x.data(), w[i].view(), n);
            for (size_t k = 0; k < ref.size(); ++k) {
              const float b = i == 1 ? 0.0f : bias[i][k % static_cast<size_t>(heights[i])];
              ASSERT_NEAR(shared[i][k], ref[k] + b, 1e-4 * (1 + std::fabs(ref[k]))) << "part " << i << " at " << k;
            }
          }
        }
      }
    }
  }
  const StoredWeight a = make_weight(WeightType::Q8_0, 4, 64, 1), b = make_weight(WeightType::Q4_0, 4, 64, 2),
                     c = make_weight(WeightType::Q8_0, 4, 96, 3);
  const auto x = random_acts(1, 96, 5);
  std::vector<float> y0(4), y1(4);
  const Weight<float> va = a.view(), vb = b.view(), vc = c.view();
  EXPECT_ERROR(stored_linear_shared(std::vector<StoredProduct>{{y0.data(), &va}, {y1.data(), &vb}}, x.data(), 1),
               ErrorKind::Internal, "", "one type and width");
  EXPECT_ERROR(stored_linear_shared(std::vector<StoredProduct>{{y0.data(), &va}, {y1.data(), &vc}}, x.data(), 1),
               ErrorKind::Internal, "", "one type and width");
}

TEST(StoredLinear, LinearForwardAddsTheBiasAndRefusesABackward) {
  const StoredWeight w = make_weight(WeightType::Q4_0, 6, 64, 3);
  const auto x = random_acts(2, 64, 4);
  const std::vector<float> b = {1, -2, 3, -4, 5, -6};
  std::vector<float> y(12), ref(12);
  linear_forward<float>(y.data(), x.data(), w.view(), b.data(), 2);
  stored_linear_reference(ref.data(), x.data(), w.view(), 2);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i] + b[i % 6], 1e-4) << i;
  std::vector<float> dy(12, 1.0f), dx(128, 0.0f);
  EXPECT_ERROR(linear_backward<float>(dx.data(), nullptr, nullptr, dy.data(), x.data(), w.view(), 2),
               ErrorKind::Internal, "", "no backward through a q4_0 weight");
}

TEST(StoredLinear, RepackingInterleavesTheSameBytesAndMeansTheSameValues) {
  for (const auto& [from, r8, x16, block] :
       {std::tuple{WeightType::Q4_0, WeightType::Q4_0_R8, WeightType::Q4_0_X16, 18},
        std::tuple{WeightType::Q8_0, WeightType::Q8_0_R8, WeightType::Q8_0_X16, 34}}) {
    for (const int64_t rows : {int64_t{3}, int64_t{19}}) {
      for (const int64_t cols : {int64_t{32}, int64_t{224}, int64_t{256}, int64_t{288}, int64_t{768}, int64_t{800}}) {
        SCOPED_TRACE(std::string(weight_type_name(x16)) + " " + std::to_string(rows) + "x" + std::to_string(cols));
        const StoredWeight plain = make_weight(from, rows, cols, 21);
        const StoredWeight packed = make_weight(x16, rows, cols, 21);
        const StoredWeight regrouped = make_weight(r8, rows, cols, 21);
        // repack_weight lays every Q4_0 and Q8_0 matrix out so.
        WeightType t = from;
        const std::vector<uint8_t> repacked = repack_weight(t, plain.bytes, rows, cols);
        EXPECT_EQ(t, x16);
        EXPECT_EQ(repacked, packed.bytes);
        // The same values, the same bytes in another order.
        EXPECT_EQ(packed.dequantized, plain.dequantized);
        EXPECT_EQ(regrouped.dequantized, plain.dequantized);
        auto sorted = [](std::vector<uint8_t> v) {
          std::sort(v.begin(), v.end());
          return v;
        };
        EXPECT_EQ(packed.bytes.size(), plain.bytes.size());
        EXPECT_EQ(sorted(packed.bytes), sorted(plain.bytes));
        const int values = block - 2;
        const int64_t nb = cols / 32;
        // Rows 0..15 (19 rows): block 0's cell holds row l's scale at 2 l, then its value byte j at
        // 32 + 64 (j / 4) + 4 l + j % 4; block 1's cell follows.
        if (rows == 19) {
          for (int l = 0; l < 16; ++l)
            for (int b = 0; b < std::min<int>(2, static_cast<int>(nb)); ++b) {
              const uint8_t* cell = packed.bytes.data() + static_cast<ptrdiff_t>(b) * 16 * block;
              const uint8_t* src = plain.bytes.data() + (l * nb + b) * block;
              EXPECT_EQ(std::memcmp(cell + 2 * l, src, 2), 0) << l << " " << b;
              for (int j = 0; j < values; ++j)
                EXPECT_EQ(cell[32 + 64 * (j / 4) + 4 * l + j % 4], src[2 + j]) << l << " " << b << " " << j;
            }
        }
        // The rows past the whole groups of sixteen, each as a lone row: regrouped by eight (Q4_0,
        // and Q8_0 wider than 512 values) or as they were; where a row has fewer than eight blocks
        // nothing moves. Group 0 of such a row: block k's scale at 2 k, its byte j at 16 + 32 (j /
        // 4) + 4 k + j % 4.
        const int64_t whole = rows / 16 * 16, rb = nb * block;
        const bool regroups = from == WeightType::Q4_0 || cols > 512;
        for (int64_t r = whole; r < rows; ++r) {
          const uint8_t* row = packed.bytes.data() + r * rb;
          const uint8_t* src = plain.bytes.data() + r * rb;
          EXPECT_EQ(std::memcmp(row, regrouped.bytes.data() + r * rb, static_cast<size_t>(rb)) == 0, regroups || nb < 8)
              << r;
          EXPECT_EQ(std::memcmp(row, src, static_cast<size_t>(rb)) == 0, !regroups || nb < 8) << r;
          if (regroups && nb >= 8)
            for (int k = 0; k < 8; ++k) {
              EXPECT_EQ(std::memcmp(row + 2 * k, src + block * k, 2), 0) << k;
              for (int j = 0; j < values; ++j)
                EXPECT_EQ(row[16 + 32 * (j / 4) + 4 * k + j % 4], src[block * k + 2 + j]) << k << " " << j;
            }
        }
      }
    }
  }
  WeightType other = WeightType::BF16;
  const std::vector<uint8_t> bf(128, 7);
  EXPECT_EQ(repack_weight(other, bf, 1, 64), bf);
  EXPECT_EQ(other, WeightType::BF16);
}

TEST(StoredLinear, RowBytesAreGgmlsBlockSizes) {
  EXPECT_EQ(weight_row_bytes(WeightType::F32, 64), 256);
  EXPECT_EQ(weight_row_bytes(WeightType::F16, 64), 128);
  EXPECT_EQ(weight_row_bytes(WeightType::BF16, 64), 128);
  EXPECT_EQ(weight_row_bytes(WeightType::Q8_0, 64), 68);
  EXPECT_EQ(weight_row_bytes(WeightType::Q4_0, 64), 36);
  EXPECT_EQ(weight_row_bytes(WeightType::Q8_0_R8, 64), 68);  // regrouped: the same bytes
  EXPECT_EQ(weight_row_bytes(WeightType::Q4_0_R8, 64), 36);
  EXPECT_EQ(weight_row_bytes(WeightType::Q8_0_X16, 64), 68);  // interleaved: the same bytes
  EXPECT_EQ(weight_row_bytes(WeightType::Q4_0_X16, 64), 36);
}

}  // namespace
}  // namespace tformer
