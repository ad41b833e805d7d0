// The tiled (FlashAttention) kernel against the reference attention, its oracle: outputs, the
// saved log-sum-exp and all three gradients, over a sweep of sizes (N not a multiple of the
// 64-row/64-key blocks, N = 1), head widths, causal and not, GQA/MQA groups, cached chunks
// (q_offset with n_q < n_kv), padding patterns, per-sequence offsets and lengths, rows without any
// allowed key, the KV-cache [B, H, T, hd] layout, and the decode path (n_q = 1, keys split in
// chunks of 256) over caches of 1..1000 keys; double precision at 1e-12 and the backward against
// central differences, all through the op table. Also the NaN policy, bit-identical results for 1
// and 2 threads and argument checks. Dropout: test_kernels_attention_dropout.cpp; the cases
// and their data: flash_attention_test_util.h.
//
// Every key slot the mask disallows (past kv_len, padding) holds NaN in k and v: a kernel that
// reads one shows NaN. Outputs start as -7 (a value the kernel forgets to write shows), gradients
// start as random values (the backward accumulates).
//
// Tolerances (float). Forward: rtol 1e-5, atol 1e-6. Each output element is a convex combination
// of V entries in [-1, 1], so its rounding error is absolute, a few float ulps of max |v| (ulp(1) =
// 1.2e-7): atol 1e-6 is ~8 ulps of that scale, and it only matters for outputs that nearly cancel
// to 0 where a relative bound is meaningless. The lse uses the same pair. Gradients: rtol 1e-4,
// atol 1e-5: dq, dk, dv are sums over up to 300 rows of products of O(1) terms that cancel (dS sums
// to 0 over a row), so their absolute rounding error is ~sqrt(N) ulps of the terms' scale; the
// atol is again only reached by components that cancel to near 0. (A wrong mask, offset or scale
// changes values by ~1e-2 or more.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "flash_attention_test_util.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::any_nan;
using test::Case;
using test::Data;
using test::describe;
using test::make_data;
using test::random_values;
using test::Result;
using test::run_flash;
using test::run_reference;

// ---------------------------------------------------------------------------------------------
// The op table (the bounds: the head comment). The lse is -infinity exactly where the reference
// has no allowed key (equal values pass, a finite one does not).
constexpr test::Bound kOut{.rtol = 1e-5, .atol = 1e-6}, kGrad{.rtol = 1e-4, .atol = 1e-5};
const test::OpBounds kFlash{"flash_attention<float>",
                            {{"out", kOut}, {"lse", kOut}, {"dq", kGrad}, {"dk", kGrad}, {"dv", kGrad}}};
const test::OpBounds kFlashDecode{"flash_attention<float> decode",
                                  {{"out", kOut}, {"lse", kOut}, {"dq", kGrad}, {"dk", kGrad}, {"dv", kGrad}}};
// Double precision: the tiled and the reference algorithms are the same function in exact
// arithmetic, so they agree to rounding (~1e-15); 1e-12 leaves room for the different orders. The
// double backward against central differences of loss = sum(r * out): 1e-6.
constexpr test::Bound kDouble{.rtol = 1e-12, .atol = 1e-14};
const test::OpBounds kFlashDouble{
    "flash_attention<double>",
    {{"out", kDouble}, {"lse", kDouble}, {"dq", kDouble}, {"dk", kDouble}, {"dv", kDouble}},
    1e-6};

// The tiled kernel and the reference on the same data: out, lse and (when the case asks) the
// three gradients; none may hold a NaN.
template <typename T>
test::OpCase against_reference(const test::OpBounds& op, const Case& c, const std::string& extra = "") {
  return test::compare_case(op, describe(c) + extra, [c] {
    const auto d = make_data<T>(c);
    const auto ref = run_reference<T>(c, d);
    const auto got = run_flash<T>(c, d);
    EXPECT_FALSE(any_nan(got.out)) << "NaN in the output";
    std::vector<test::Compared> out{test::compared("out", got.out, ref.out, test::q_layout(c)),
                                    test::compared("lse", got.lse, ref.lse, test::lse_layout(c))};
    if (c.grads) {
      EXPECT_FALSE(any_nan(got.dq) || any_nan(got.dk) || any_nan(got.dv)) << "NaN in a gradient";
      out.push_back(test::compared("dq", got.dq, ref.dq, test::q_layout(c)));
      out.push_back(test::compared("dk", got.dk, ref.dk, test::kv_layout(c)));
      out.push_back(test::compared("dv", got.dv, ref.dv, test::kv_layout(c)));
    }
    return out;
  });
}

// Self-attention (n_q = n_kv = N), every N, width, mask kind and group size.
void sweep_sizes_widths_groups_causal(std::vector<test::OpCase>& cases) {
  for (int64_t N : {1, 2, 17, 64, 65, 300})
    for (int64_t hd : {16, 64})
      for (bool causal : {true, false})
        for (int64_t kvh : {4, 2, 1}) {
          Case c;
          c.n_q = c.n_kv = N;
          c.n_heads = 4;
          c.n_kv_heads = kvh;
          c.head_dim = hd;
          c.causal = causal;
          // N = 300 at width 64: forward only, one group size (keeps the file fast under the
          // sanitizers; the backward at N = 300 runs at width 16 for every group size).
          if (N == 300 && hd == 64 && kvh != 2) continue;
          c.grads = !(N == 300 && hd == 64);
          c.seed = static_cast<uint64_t>(N * 100 + hd + kvh);
          cases.push_back(against_reference<float>(kFlash, c));
        }
}

// Cached chunks: rows [off, off + n_q) of a longer sequence, n_kv = off + n_q (or a cache with
// kv_len), with per-sequence offsets and lengths in a batch of 2, both layouts.
void offsets_and_per_sequence_lengths(std::vector<test::OpCase>& cases) {
  struct Spec {
    int64_t n_q, n_kv, off0, off1;
  };
  for (const Spec sp : {Spec{1, 9, 8, 3}, Spec{2, 70, 68, 40}, Spec{5, 20, 15, 0}, Spec{17, 150, 133, 100},
                        Spec{70, 140, 70, 66}, Spec{65, 300, 235, 1}})
    for (bool cache : {false, true})
      for (int64_t kvh : {2, 1}) {
        Case c;
        c.batch = 2;
        c.n_q = sp.n_q;
        c.n_kv = sp.n_kv;
        c.n_heads = 4;
        c.n_kv_heads = kvh;
        c.head_dim = 16;
        c.q_offset = {sp.off0, sp.off1};
        c.kv_len = {sp.off0 + sp.n_q, sp.off1 + sp.n_q};  // the second sequence's cache is shorter
        c.cache_layout = cache;
        c.seed = static_cast<uint64_t>(sp.n_q * 7 + sp.n_kv + kvh);
        // n_q = 1 without dropout takes the decode path.
        cases.push_back(against_reference<float>(sp.n_q == 1 ? kFlashDecode : kFlash, c));
      }
  // hd 64 once, with a ragged kv_len that cuts a block.
  Case c;
  c.batch = 2;
  c.n_q = 33;
  c.n_kv = 200;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.q_offset = {150, 10};
  c.kv_len = {183, 43};
  c.cache_layout = true;
  cases.push_back(against_reference<float>(kFlash, c));
}

// Key padding at the start, in the middle and at the end (left-padded, holes, right-padded),
// causal and not, across block boundaries.
void padding_patterns(std::vector<test::OpCase>& cases) {
  for (int64_t N : {17, 65, 140})
    for (bool causal : {true, false})
      for (int pattern = 0; pattern < 3; ++pattern) {
        Case c;
        c.batch = 2;
        c.n_q = c.n_kv = N;
        c.n_heads = 4;
        c.n_kv_heads = 2;
        c.head_dim = 16;
        c.causal = causal;
        c.key_valid.assign(static_cast<size_t>(2 * N), 1);
        for (int64_t j = 0; j < N; ++j) {
          const bool pad = pattern == 0 ? j < N / 3 : pattern == 1 ? (j > N / 3 && j < 2 * N / 3) : j >= N - N / 4;
          if (pad) c.key_valid[j] = 0;
          if (j % 5 == 3) c.key_valid[N + j] = 0;  // the second sequence: scattered holes
        }
        c.seed = static_cast<uint64_t>(N + pattern * 1000 + causal);
        cases.push_back(against_reference<float>(kFlash, c, " pattern " + std::to_string(pattern)));
      }
}

// Rows with no allowed key: a causal row whose only keys are padding, a sequence with kv_len 0, a
// sequence whose keys are all padding. Zero output, zero gradient (dq unchanged), lse -inf, no NaN.
void all_masked_rows(std::vector<test::OpCase>& cases) {
  for (int64_t N : {5, 70}) {
    Case c;
    c.batch = 3;
    c.n_q = c.n_kv = N;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.key_valid.assign(static_cast<size_t>(3 * N), 1);
    for (int64_t j = 0; j < std::min<int64_t>(N, 3); ++j) c.key_valid[j] = 0;  // b 0: rows 0..2 see nothing
    for (int64_t j = 0; j < N; ++j) c.key_valid[2 * N + j] = 0;                // b 2: every key padding
    c.kv_len = {N, 0, N};                                                      // b 1: empty cache
    test::OpCase oc = against_reference<float>(kFlash, c, " rows without keys");
    oc.compare = [c, check = oc.compare] {
      const auto d = make_data<float>(c);
      const auto got = run_flash<float>(c, d);
      const int64_t N = c.n_q, H = c.n_heads, hd = c.head_dim;
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t i = 0; i < N; ++i) {
          const bool empty = b > 0 || i < 3;
          if (!empty) continue;
          for (int64_t h = 0; h < H; ++h) {
            EXPECT_EQ(got.lse[(b * H + h) * N + i], -std::numeric_limits<float>::infinity());
            for (int64_t e = 0; e < hd; ++e) {
              const int64_t at = ((b * N + i) * H + h) * hd + e;
              EXPECT_EQ(got.out[at], 0.0f);
              EXPECT_EQ(got.dq[at], d.dq0[at]);  // nothing added
            }
          }
        }
      return check();
    };
    cases.push_back(oc);
  }
}

// Decode: one query row per sequence over caches of 1..1000 keys (the decode path splits keys in
// chunks of 256: lengths on and off chunk boundaries), GQA groups, cache layout, batch 2 with
// different offsets and lengths, padding; gradients too (the backward's general path at n_q = 1).
void decode_over_long_caches(std::vector<test::OpCase>& cases) {
  for (int64_t kv : {1, 2, 255, 256, 257, 600, 1000})
    for (int64_t kvh : {4, 1}) {
      Case c;
      c.batch = 2;
      c.n_q = 1;
      c.n_kv = kv + 3;  // spare capacity past kv_len (NaN)
      c.n_heads = 4;
      c.n_kv_heads = kvh;
      c.head_dim = kv == 1000 ? 64 : 16;
      c.cache_layout = true;
      c.q_offset = {kv - 1, std::max<int64_t>(0, kv / 2 - 1)};
      c.kv_len = {kv, std::max<int64_t>(1, kv / 2)};
      c.key_valid.assign(static_cast<size_t>(2 * c.n_kv), 1);
      if (kv > 10) c.key_valid[c.n_kv + 3] = c.key_valid[c.n_kv + 4] = 0;  // left padding in sequence 1
      c.seed = static_cast<uint64_t>(kv * 3 + kvh);
      cases.push_back(against_reference<float>(kFlashDecode, c));
    }
  // The float decode's AVX-512 path (head sizes 16 to 128 in steps of 16, no key_valid row): cache
  // layout, every head size it takes and one it does not (72), GQA, lengths below and past 4, 16
  // and a chunk.
  for (int64_t kv : {1, 3, 7, 21, 255, 300})
    for (int64_t hd : {16, 32, 48, 64, 72, 80, 96, 112, 128})
      for (int64_t kvh : {4, 2}) {
        Case c;
        c.batch = 2;
        c.n_q = 1;
        c.n_kv = kv + 5;
        c.n_heads = 4;
        c.n_kv_heads = kvh;
        c.head_dim = hd;
        c.cache_layout = true;
        c.q_offset = {kv - 1, std::max<int64_t>(0, kv / 2 - 1)};
        c.kv_len = {kv, std::max<int64_t>(1, kv / 2)};
        c.seed = static_cast<uint64_t>(kv * 5 + hd + kvh);
        cases.push_back(against_reference<float>(kFlashDecode, c));
      }
  // Causal decode whose cache holds real keys past the query's position (q_offset < kv_len - 1):
  // the causal limit, not kv_len, must stop it; the limit falls inside a chunk and on its edge.
  for (int64_t off : {0, 300, 511}) {
    Case c;
    c.batch = 2;
    c.n_q = 1;
    c.n_kv = 900;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.q_offset = {off, off / 2};
    c.seed = static_cast<uint64_t>(off + 7);
    cases.push_back(against_reference<float>(kFlashDecode, c));
  }
  // Non-causal decode (a query attending a whole encoder memory) without kv_len.
  Case c;
  c.n_q = 1;
  c.n_kv = 513;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.causal = false;
  cases.push_back(against_reference<float>(kFlashDecode, c));
}

// Double precision, self-attention, a cached chunk and decode.
void double_precision(std::vector<test::OpCase>& cases) {
  for (int64_t N : {1, 17, 65, 130}) {
    Case c;
    c.batch = 2;
    c.n_q = c.n_kv = N;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.seed = static_cast<uint64_t>(N);
    cases.push_back(against_reference<double>(kFlashDouble, c));
    c.causal = false;
    c.head_dim = 64;
    c.n_kv_heads = 1;
    cases.push_back(against_reference<double>(kFlashDouble, c));
  }
  Case chunk;
  chunk.batch = 2;
  chunk.n_q = 20;
  chunk.n_kv = 100;
  chunk.n_heads = 4;
  chunk.n_kv_heads = 2;
  chunk.head_dim = 16;
  chunk.q_offset = {70, 30};
  chunk.kv_len = {90, 50};
  chunk.key_valid.assign(200, 1);
  chunk.key_valid[5] = chunk.key_valid[150] = 0;
  chunk.cache_layout = true;
  cases.push_back(against_reference<double>(kFlashDouble, chunk));
  Case dec = chunk;
  dec.n_q = 1;
  dec.n_kv = 700;
  dec.q_offset = {600, 299};
  dec.kv_len = {601, 300};
  dec.key_valid.assign(1400, 1);
  cases.push_back(against_reference<double>(kFlashDouble, dec, " decode"));
}

// The double backward against central differences of loss = sum(r * out), on small shapes with
// offsets, kv_len, padding and GQA (the tiled kernel's own check, beside the reference's).
test::OpCase finite_differences(const Case& c) {
  return test::gradient_case(kFlashDouble, "finite differences " + describe(c), [c] {
    const AttentionShape s = c.shape();
    const int64_t hd = s.head_dim;
    Data<double> d = make_data<double>(c);
    const std::vector<double> r = random_values(static_cast<int64_t>(d.q.size()), c.seed * 10 + 8);
    // Every input as a contiguous copy the loss can replace (NaN stays in the unreadable slots).
    auto loss = [c, r](const std::vector<std::vector<double>>& in) {
      const AttentionShape s = c.shape();
      const int64_t hd = s.head_dim;
      std::vector<double> out(in[0].size());
      flash_attention_forward<double>(heads_btHd(out.data(), s.n_q, s.n_heads, hd), nullptr,
                                      heads_btHd<const double>(in[0].data(), s.n_q, s.n_heads, hd),
                                      heads_btHd<const double>(in[1].data(), s.n_kv, s.n_kv_heads, hd),
                                      heads_btHd<const double>(in[2].data(), s.n_kv, s.n_kv_heads, hd), s, c.mask());
      double sum = 0;
      for (size_t i = 0; i < out.size(); ++i) sum += r[i] * out[i];
      return sum;
    };
    std::vector<double> out(d.q.size()), lse(static_cast<size_t>(s.batch * s.n_heads * s.n_q));
    flash_attention_forward<double>(heads_btHd(out.data(), s.n_q, s.n_heads, hd), lse.data(), d.qv, d.kv, d.vv, s,
                                    c.mask());
    std::vector<double> dq = d.dq0, dk = d.dk0, dv = d.dv0;
    flash_attention_backward<double>(
        heads_btHd(dq.data(), s.n_q, s.n_heads, hd), heads_btHd(dk.data(), s.n_kv, s.n_kv_heads, hd),
        heads_btHd(dv.data(), s.n_kv, s.n_kv_heads, hd), heads_btHd<const double>(r.data(), s.n_q, s.n_heads, hd),
        heads_btHd<const double>(out.data(), s.n_q, s.n_heads, hd), lse.data(), d.qv, d.kv, d.vv, s, c.mask());
    for (size_t i = 0; i < dq.size(); ++i) dq[i] -= d.dq0[i];
    for (size_t i = 0; i < dk.size(); ++i) {
      dk[i] -= d.dk0[i];
      dv[i] -= d.dv0[i];
    }
    // The unreadable slots hold NaN in k and v and get no gradient: the check starts them at 0.
    std::vector<double> k = d.k, v = d.v;
    for (size_t i = 0; i < k.size(); ++i)
      if (std::isnan(k[i])) k[i] = v[i] = 0;
    return test::GradientCheck{
        {{"q", d.q, dq, test::q_layout(c)}, {"k", k, dk, test::kv_layout(c)}, {"v", v, dv, test::kv_layout(c)}}, loss};
  });
}

std::vector<test::OpCase> op_cases() {
  std::vector<test::OpCase> cases;
  sweep_sizes_widths_groups_causal(cases);
  offsets_and_per_sequence_lengths(cases);
  padding_patterns(cases);
  all_masked_rows(cases);
  decode_over_long_caches(cases);
  double_precision(cases);
  Case c;
  c.batch = 2;
  c.n_q = 3;
  c.n_kv = 6;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 3;
  c.q_offset = {2, 1};
  c.kv_len = {5, 6};
  c.key_valid = {1, 1, 1, 0, 1, 1, /**/ 0, 0, 1, 1, 1, 1};
  c.seed = 41;
  cases.push_back(finite_differences(c));
  Case full = c;
  full.causal = false;
  full.n_q = 5;
  full.q_offset.clear();
  full.seed = 42;
  cases.push_back(finite_differences(full));
  return cases;
}

class FlashAttentionOps : public test::OpCaseTest {};
TEST_P(FlashAttentionOps, WithinBounds) { test::check_case(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Table, FlashAttentionOps, ::testing::ValuesIn(op_cases()), test::case_name);

// ---------------------------------------------------------------------------------------------

// A NaN or infinite query makes its row's scores NaN (inf times keys of both signs), and torch's
// softmax then gives a NaN row: so do both kernels (general path, decode path) -- a NaN must not
// turn into zero weights, which would hide an overflow from the training's NaN check. The other
// rows are unaffected, and a row with no allowed key still gives zeros.
TEST(FlashAttention, NonFiniteQueriesGiveNaNRowsLikeTorch) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()})
    for (const int64_t N : {1, 40, 130}) {
      Case c;
      c.batch = 1;
      c.n_q = N;
      c.n_kv = N == 1 ? 300 : N;  // N = 1: the decode path over a 300-key cache
      c.n_heads = 2;
      c.n_kv_heads = 1;
      c.head_dim = 16;
      c.grads = false;
      if (N == 1) c.q_offset = {299};
      SCOPED_TRACE(describe(c) + (std::isnan(bad) ? " NaN" : " inf"));
      Data<float> d = make_data<float>(c);
      const int64_t row = N / 2;  // query row `row` of head 1 gets the bad value in every component
      for (int64_t e = 0; e < c.head_dim; ++e) d.q[(row * c.n_heads + 1) * c.head_dim + e] = bad;
      const Result<float> f = run_flash(c, d), r = run_reference(c, d);
      for (const auto* res : {&f, &r}) {
        const char* who = res == &f ? "tiled" : "reference";
        for (int64_t i = 0; i < N; ++i)
          for (int64_t h = 0; h < c.n_heads; ++h)
            for (int64_t e = 0; e < c.head_dim; ++e) {
              const float o = res->out[(i * c.n_heads + h) * c.head_dim + e];
              if (i == row && h == 1) {
                ASSERT_TRUE(std::isnan(o)) << who << " row " << i << " head " << h;
              } else {
                ASSERT_TRUE(std::isfinite(o)) << who << " row " << i << " head " << h;
              }
            }
      }
      EXPECT_TRUE(std::isnan(f.lse[1 * N + row])) << "lse of the bad row";
    }
}

// 1 and 2 threads give bit-identical outputs, lse and gradients, on shapes big enough for the
// kernels to use threads (general forward, backward, decode).
TEST(FlashAttention, ThreadCountDoesNotChangeResults) {
  Case big;
  big.batch = 2;
  big.n_q = big.n_kv = 200;
  big.n_heads = 4;
  big.n_kv_heads = 2;
  big.head_dim = 64;
  big.q_offset = {0, 0};
  big.kv_len = {200, 150};
  Case dec;
  dec.batch = 1;
  dec.n_q = 1;
  dec.n_kv = 3000;
  dec.n_heads = 4;
  dec.n_kv_heads = 2;
  dec.head_dim = 64;
  dec.q_offset = {2899};
  dec.kv_len = {2900};
  dec.grads = false;
  const int saved = num_threads();
  for (const Case& c : {big, dec}) {
    SCOPED_TRACE(describe(c));
    const auto d = make_data<float>(c);
    set_num_threads(1);
    const auto one = run_flash<float>(c, d);
    set_num_threads(2);
    const auto two = run_flash<float>(c, d);
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    EXPECT_TRUE(same(one.out, two.out));
    EXPECT_TRUE(same(one.lse, two.lse));
    EXPECT_TRUE(same(one.dq, two.dq));
    EXPECT_TRUE(same(one.dk, two.dk));
    EXPECT_TRUE(same(one.dv, two.dv));
  }
  set_num_threads(saved);
}

TEST(FlashAttention, RejectsBadShapes) {
  std::vector<float> x(64, 0.f), lse(4);
  auto view = heads_btHd(x.data(), 4, 1, 16);
  AttentionShape s{1, 4, 4, 3, 2, 16};  // 2 does not divide 3
  AttentionMask m;
  EXPECT_ERROR(flash_attention_forward<float>(view, lse.data(), view, view, view, s, m), ErrorKind::Internal, "");
}

}  // namespace
}  // namespace tformer
