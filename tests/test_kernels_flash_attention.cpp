// The tiled (FlashAttention) kernel against the reference attention, its oracle: outputs, the
// saved log-sum-exp and all three gradients, over a sweep of sizes (N not a multiple of the
// 64-row/64-key blocks, N = 1), head widths, causal and not, GQA/MQA groups, cached chunks
// (q_offset with n_q < n_kv), padding patterns, per-sequence offsets and lengths, rows without any
// allowed key, the KV-cache [B, H, T, hd] layout, and the decode path (n_q = 1, keys split in
// chunks of 256) over caches of 1..1000 keys. Also double precision at 1e-12, bit-identical
// results for 1 and 2 threads, and dropout on the probabilities against its definition.
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

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/threads.h"
#include "kernels/attention.h"
#include "kernels/flash_attention.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;
using test::random_values;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Case {
  int64_t batch = 1, n_q = 1, n_kv = 1, n_heads = 1, n_kv_heads = 1, head_dim = 16;
  bool causal = true;
  std::vector<int64_t> q_offset, kv_len;  // empty = none
  std::vector<uint8_t> key_valid;         // empty = all valid
  bool cache_layout = false;              // k, v as [B, KVH, n_kv, hd]
  bool grads = true;
  uint64_t seed = 1;

  AttentionShape shape() const { return {batch, n_q, n_kv, n_heads, n_kv_heads, head_dim}; }
  AttentionMask mask() const {
    AttentionMask m;
    m.causal = causal;
    m.q_offset = q_offset.empty() ? nullptr : q_offset.data();
    m.kv_len = kv_len.empty() ? nullptr : kv_len.data();
    m.key_valid = key_valid.empty() ? nullptr : key_valid.data();
    m.n_kv = n_kv;
    return m;
  }
};

struct Tol {
  double out_rtol, out_atol, grad_rtol, grad_atol;
};
constexpr Tol kFloatTol{1e-5, 1e-6, 1e-4, 1e-5};
constexpr Tol kDoubleTol{1e-12, 1e-14, 1e-12, 1e-14};

template <typename T>
struct Data {
  std::vector<T> q, k, v, dout, dq0, dk0, dv0;
  HeadsView<const T> qv, kv, vv, doutv;
};

// Random inputs; k and v hold NaN in every slot no query may read (past kv_len, padding).
template <typename T>
Data<T> make_data(const Case& c) {
  const AttentionShape s = c.shape();
  const AttentionMask m = c.mask();
  const int64_t hd = s.head_dim, qn = s.batch * s.n_q * s.n_heads * hd, kn = s.batch * s.n_kv * s.n_kv_heads * hd;
  Data<T> d;
  auto as = [](const std::vector<double>& x) { return std::vector<T>(x.begin(), x.end()); };
  d.q = as(random_values(qn, c.seed * 10 + 1));
  d.k = as(random_values(kn, c.seed * 10 + 2));
  d.v = as(random_values(kn, c.seed * 10 + 3));
  d.dout = as(random_values(qn, c.seed * 10 + 4));
  d.dq0 = as(random_values(qn, c.seed * 10 + 5));
  d.dk0 = as(random_values(kn, c.seed * 10 + 6));
  d.dv0 = as(random_values(kn, c.seed * 10 + 7));
  d.qv = heads_btHd<const T>(d.q.data(), s.n_q, s.n_heads, hd);
  d.doutv = heads_btHd<const T>(d.dout.data(), s.n_q, s.n_heads, hd);
  if (c.cache_layout) {
    d.kv = heads_bHTd<const T>(d.k.data(), s.n_kv, s.n_kv_heads, hd);
    d.vv = heads_bHTd<const T>(d.v.data(), s.n_kv, s.n_kv_heads, hd);
  } else {
    d.kv = heads_btHd<const T>(d.k.data(), s.n_kv, s.n_kv_heads, hd);
    d.vv = heads_btHd<const T>(d.v.data(), s.n_kv, s.n_kv_heads, hd);
  }
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t j = 0; j < s.n_kv; ++j) {
      const bool readable = (!m.kv_len || j < m.kv_len[b]) && (!m.key_valid || m.key_valid[b * s.n_kv + j]);
      if (readable) continue;
      for (int64_t g = 0; g < s.n_kv_heads; ++g) {
        const int64_t off = d.kv.at(b, j, g) - d.k.data();
        for (int64_t e = 0; e < hd; ++e) d.k[off + e] = d.v[off + e] = static_cast<T>(kNaN);
      }
    }
  return d;
}

template <typename T>
struct Result {
  std::vector<T> out, lse, dq, dk, dv;
};

template <typename T>
Result<T> run_reference(const Case& c, const Data<T>& d) {
  const AttentionShape s = c.shape();
  const AttentionMask m = c.mask();
  const int64_t hd = s.head_dim;
  Result<T> r{std::vector<T>(d.q.size(), T(-7)), {}, d.dq0, d.dk0, d.dv0};
  std::vector<T> probs(static_cast<size_t>(s.batch * s.n_heads * s.n_q * s.n_kv));
  attention_forward<T>(heads_btHd(r.out.data(), s.n_q, s.n_heads, hd), probs.data(), d.qv, d.kv, d.vv, s, m);
  if (c.grads)
    attention_backward<T>(
        heads_btHd(r.dq.data(), s.n_q, s.n_heads, hd), heads_btHd(r.dk.data(), s.n_kv, s.n_kv_heads, hd),
        heads_btHd(r.dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv, probs.data(), d.qv, d.kv, d.vv, s, m);
  // lse in double, straight from the definition.
  r.lse.assign(static_cast<size_t>(s.batch * s.n_heads * s.n_q), T(0));
  const int64_t group = s.n_heads / s.n_kv_heads;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.n_heads; ++h)
      for (int64_t i = 0; i < s.n_q; ++i) {
        double mx = -INFINITY;
        std::vector<double> sc;
        for (int64_t j = 0; j < s.n_kv; ++j) {
          if (!m.allowed(b, i, j)) continue;
          double acc = 0;
          for (int64_t e = 0; e < hd; ++e)
            acc += static_cast<double>(d.qv.at(b, i, h)[e]) * static_cast<double>(d.kv.at(b, j, h / group)[e]);
          sc.push_back(acc / std::sqrt(static_cast<double>(hd)));
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (double x : sc) sum += std::exp(x - mx);
        r.lse[(b * s.n_heads + h) * s.n_q + i] = static_cast<T>(sc.empty() ? -INFINITY : mx + std::log(sum));
      }
  return r;
}

template <typename T>
Result<T> run_flash(const Case& c, const Data<T>& d) {
  const AttentionShape s = c.shape();
  const AttentionMask m = c.mask();
  const int64_t hd = s.head_dim;
  Result<T> r{std::vector<T>(d.q.size(), T(-7)),
              std::vector<T>(static_cast<size_t>(s.batch * s.n_heads * s.n_q), T(-7)), d.dq0, d.dk0, d.dv0};
  flash_attention_forward<T>(heads_btHd(r.out.data(), s.n_q, s.n_heads, hd), r.lse.data(), d.qv, d.kv, d.vv, s, m);
  if (c.grads)
    flash_attention_backward<T>(
        heads_btHd(r.dq.data(), s.n_q, s.n_heads, hd), heads_btHd(r.dk.data(), s.n_kv, s.n_kv_heads, hd),
        heads_btHd(r.dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv,
        heads_btHd<const T>(r.out.data(), s.n_q, s.n_heads, hd), r.lse.data(), d.qv, d.kv, d.vv, s, m);
  return r;
}

template <typename T>
bool any_nan(const std::vector<T>& v) {
  for (T x : v)
    if (std::isnan(x)) return true;
  return false;
}

// The lse: -infinity exactly where the reference has no allowed key, close elsewhere.
template <typename T>
::testing::AssertionResult lse_close(const std::vector<T>& got, const std::vector<T>& want, double rtol, double atol) {
  for (size_t i = 0; i < want.size(); ++i)
    if (std::isinf(want[i]) != std::isinf(got[i]))
      return ::testing::AssertionFailure() << "lse row " << i << ": got " << got[i] << ", expected " << want[i];
  std::vector<T> g = got, w = want;
  for (size_t i = 0; i < w.size(); ++i)
    if (std::isinf(w[i])) g[i] = w[i] = 0;
  return all_close(g, w, rtol, atol);
}

template <typename T>
void check(const Case& c, const Tol& tol) {
  const auto d = make_data<T>(c);
  const auto ref = run_reference<T>(c, d);
  const auto got = run_flash<T>(c, d);
  EXPECT_FALSE(any_nan(got.out)) << "NaN in the output";
  EXPECT_TRUE(all_close(got.out, ref.out, tol.out_rtol, tol.out_atol)) << "out";
  EXPECT_TRUE(lse_close(got.lse, ref.lse, tol.out_rtol, tol.out_atol)) << "lse";
  if (c.grads) {
    EXPECT_FALSE(any_nan(got.dq) || any_nan(got.dk) || any_nan(got.dv)) << "NaN in a gradient";
    EXPECT_TRUE(all_close(got.dq, ref.dq, tol.grad_rtol, tol.grad_atol)) << "dq";
    EXPECT_TRUE(all_close(got.dk, ref.dk, tol.grad_rtol, tol.grad_atol)) << "dk";
    EXPECT_TRUE(all_close(got.dv, ref.dv, tol.grad_rtol, tol.grad_atol)) << "dv";
  }
}

std::string describe(const Case& c) {
  std::ostringstream os;
  os << "B=" << c.batch << " n_q=" << c.n_q << " n_kv=" << c.n_kv << " H=" << c.n_heads << " KVH=" << c.n_kv_heads
     << " hd=" << c.head_dim << (c.causal ? " causal" : " full") << (c.cache_layout ? " cache-layout" : "");
  if (!c.q_offset.empty()) os << " q_offset[0]=" << c.q_offset[0];
  if (!c.kv_len.empty()) os << " kv_len[0]=" << c.kv_len[0];
  if (!c.key_valid.empty()) os << " padded";
  return os.str();
}

// ---------------------------------------------------------------------------------------------

// Self-attention (n_q = n_kv = N), every N, width, mask kind and group size.
TEST(FlashAttention, SweepSizesWidthsGroupsCausal) {
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
          SCOPED_TRACE(describe(c));
          check<float>(c, kFloatTol);
        }
}

// Cached chunks: rows [off, off + n_q) of a longer sequence, n_kv = off + n_q (or a cache with
// kv_len), with per-sequence offsets and lengths in a batch of 2, both layouts.
TEST(FlashAttention, OffsetsAndPerSequenceLengths) {
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
        SCOPED_TRACE(describe(c));
        check<float>(c, kFloatTol);
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
  SCOPED_TRACE(describe(c));
  check<float>(c, kFloatTol);
}

// Key padding at the start, in the middle and at the end (left-padded, holes, right-padded),
// causal and not, across block boundaries.
TEST(FlashAttention, PaddingPatterns) {
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
        SCOPED_TRACE(describe(c) + " pattern " + std::to_string(pattern));
        check<float>(c, kFloatTol);
      }
}

// Rows with no allowed key: a causal row whose only keys are padding, a sequence with kv_len 0, a
// sequence whose keys are all padding. Zero output, zero gradient (dq unchanged), lse -inf, no NaN.
TEST(FlashAttention, AllMaskedRows) {
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
    SCOPED_TRACE(describe(c));
    check<float>(c, kFloatTol);

    const auto d = make_data<float>(c);
    const auto got = run_flash<float>(c, d);
    const int64_t H = c.n_heads, hd = c.head_dim;
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
  }
}

// Decode: one query row per sequence over caches of 1..1000 keys (the decode path splits keys in
// chunks of 256: lengths on and off chunk boundaries), GQA groups, cache layout, batch 2 with
// different offsets and lengths, padding; gradients too (the backward's general path at n_q = 1).
TEST(FlashAttention, DecodeOverLongCaches) {
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
      SCOPED_TRACE(describe(c));
      check<float>(c, kFloatTol);
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
    SCOPED_TRACE(describe(c));
    check<float>(c, kFloatTol);
  }
  // Non-causal decode (a query attending a whole encoder memory) without kv_len.
  Case c;
  c.n_q = 1;
  c.n_kv = 513;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 64;
  c.causal = false;
  SCOPED_TRACE(describe(c));
  check<float>(c, kFloatTol);
}

// Double precision: the tiled and the reference algorithms are the same function in exact
// arithmetic, so they agree to rounding (~1e-15); 1e-12 leaves room for the different orders.
TEST(FlashAttention, DoubleMatchesReferenceTo1e12) {
  std::vector<Case> cases;
  for (int64_t N : {1, 17, 65, 130}) {
    Case c;
    c.batch = 2;
    c.n_q = c.n_kv = N;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.seed = static_cast<uint64_t>(N);
    cases.push_back(c);
    c.causal = false;
    c.head_dim = 64;
    c.n_kv_heads = 1;
    cases.push_back(c);
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
  cases.push_back(chunk);
  Case dec = chunk;
  dec.n_q = 1;
  dec.n_kv = 700;
  dec.q_offset = {600, 299};
  dec.kv_len = {601, 300};
  dec.key_valid.assign(1400, 1);
  cases.push_back(dec);
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    check<double>(c, kDoubleTol);
  }
}

// Dropout on the probabilities (training): the kernel, in double, against the definition written
// out here with every P materialised: P'_ij = P_ij * M_ij / (1 - p), out_i = sum_j P'_ij v_j;
// dv_j = sum_i P'_ij dout_i, dP_ij = (dout_i . v_j) M_ij / (1 - p), D_i = sum_j P_ij dP_ij,
// dS_ij = P_ij (dP_ij - D_i), dq_i = sum_j dS_ij k_j / sqrt(hd), dk_j = sum_i dS_ij q_i / sqrt(hd),
// with M from dropout_kept at index ((b H + h) n_q + i) n_kv + j. Causal and not, GQA, sizes
// across several blocks and a one-row case (which takes the general path, not decode).
TEST(FlashAttention, DropoutMatchesTheDefinitionInDouble) {
  for (const int64_t N : {1, 70, 150})
    for (const bool causal : {true, false}) {
      Case c;
      c.batch = 2;
      c.n_q = c.n_kv = N;
      c.n_heads = 4;
      c.n_kv_heads = 2;
      c.head_dim = 16;
      c.causal = causal;
      c.seed = static_cast<uint64_t>(N) + 3;
      SCOPED_TRACE(describe(c));
      const double p = 0.3;
      const AttentionDropout drop{0x1234abcdULL + static_cast<uint64_t>(N), dropout_threshold(p), 1.0 / (1.0 - p)};
      const Data<double> d = make_data<double>(c);
      const AttentionShape s = c.shape();
      const AttentionMask m = c.mask();
      const int64_t hd = s.head_dim, H = s.n_heads, group = H / s.n_kv_heads;
      std::vector<double> out(d.q.size(), -7.0), lse(static_cast<size_t>(s.batch * H * s.n_q), -7.0);
      std::vector<double> dq = d.dq0, dk = d.dk0, dv = d.dv0;
      flash_attention_forward<double>(heads_btHd(out.data(), s.n_q, H, hd), lse.data(), d.qv, d.kv, d.vv, s, m, drop);
      flash_attention_backward<double>(
          heads_btHd(dq.data(), s.n_q, H, hd), heads_btHd(dk.data(), s.n_kv, s.n_kv_heads, hd),
          heads_btHd(dv.data(), s.n_kv, s.n_kv_heads, hd), d.doutv, heads_btHd<const double>(out.data(), s.n_q, H, hd),
          lse.data(), d.qv, d.kv, d.vv, s, m, drop);

      std::vector<double> want_out(d.q.size(), 0.0), wdq = d.dq0, wdk = d.dk0, wdv = d.dv0;
      auto wq = heads_btHd(wdq.data(), s.n_q, H, hd);
      auto wk = heads_btHd(wdk.data(), s.n_kv, s.n_kv_heads, hd);
      auto wv = heads_btHd(wdv.data(), s.n_kv, s.n_kv_heads, hd);
      auto wo = heads_btHd(want_out.data(), s.n_q, H, hd);
      const double sm = 1.0 / std::sqrt(static_cast<double>(hd));
      int64_t kept = 0, seen = 0;
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < s.n_q; ++i) {
            const int64_t g = h / group;
            std::vector<double> P(static_cast<size_t>(s.n_kv), 0.0), M(static_cast<size_t>(s.n_kv), 0.0);
            double mx = -INFINITY;
            for (int64_t j = 0; j < s.n_kv; ++j) {
              if (!m.allowed(b, i, j)) continue;
              double acc = 0;
              for (int64_t e = 0; e < hd; ++e) acc += d.qv.at(b, i, h)[e] * d.kv.at(b, j, g)[e];
              P[j] = acc * sm;
              mx = std::max(mx, P[j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < s.n_kv; ++j) sum += m.allowed(b, i, j) ? std::exp(P[j] - mx) : 0.0;
            for (int64_t j = 0; j < s.n_kv; ++j) {
              P[j] = m.allowed(b, i, j) ? std::exp(P[j] - mx) / sum : 0.0;
              const auto index = static_cast<uint64_t>(((b * H + h) * s.n_q + i) * s.n_kv + j);
              M[j] = dropout_kept(drop.key, index, drop.threshold) ? drop.scale : 0.0;
              if (m.allowed(b, i, j)) {
                ++seen;
                kept += M[j] > 0;
              }
            }
            double D = 0;
            std::vector<double> dP(static_cast<size_t>(s.n_kv), 0.0);
            for (int64_t j = 0; j < s.n_kv; ++j) {
              if (P[j] == 0.0) continue;
              const double* vj = d.vv.at(b, j, g);
              const double* go = d.doutv.at(b, i, h);
              double dot = 0;
              for (int64_t e = 0; e < hd; ++e) {
                wo.at(b, i, h)[e] += P[j] * M[j] * vj[e];
                wv.at(b, j, g)[e] += P[j] * M[j] * go[e];
                dot += go[e] * vj[e];
              }
              dP[j] = dot * M[j];
              D += P[j] * dP[j];
            }
            for (int64_t j = 0; j < s.n_kv; ++j) {
              if (P[j] == 0.0) continue;
              const double dS = P[j] * (dP[j] - D) * sm;
              for (int64_t e = 0; e < hd; ++e) {
                wq.at(b, i, h)[e] += dS * d.kv.at(b, j, g)[e];
                wk.at(b, j, g)[e] += dS * d.qv.at(b, i, h)[e];
              }
            }
          }
      // The mask really drops about p of the allowed probabilities.
      if (seen > 1000) {
        EXPECT_NEAR(static_cast<double>(kept) / static_cast<double>(seen), 1 - p, 0.03);
      }
      EXPECT_TRUE(all_close(out, want_out, 1e-12, 1e-14)) << "out";
      EXPECT_TRUE(all_close(dq, wdq, 1e-11, 1e-13)) << "dq";
      EXPECT_TRUE(all_close(dk, wdk, 1e-11, 1e-13)) << "dk";
      EXPECT_TRUE(all_close(dv, wdv, 1e-11, 1e-13)) << "dv";
    }
}

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
  EXPECT_THROW(flash_attention_forward<float>(view, lse.data(), view, view, view, s, m), Error);
}

}  // namespace
}  // namespace tformer
