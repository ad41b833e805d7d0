// Tiled exact attention: FlashAttention's online softmax (forward) and FlashAttention-2's
// recomputing backward, written for a CPU. See flash_attention.h for the contract; the reference
// kernel (attention.cpp) is the oracle the tests compare against.
//
// Tiles. A query block of kBr = 64 rows meets a key block of kBc = 64 keys. With head width 64 in
// float, each tile operand is 64 x 64 x 4 B = 16 KB: the forward's working set per key block is
// Q (16 KB, stays), K^T (16 KB), V (16 KB), the score tile S (16 KB) and the output accumulator O
// (16 KB). The score product streams Q rows against K^T, the PV product P rows against V, so the
// operand being reused (K^T or V, 16 KB) plus a few rows fits this Zen 5 core's 48 KB L1d, and the
// whole working set (~80 KB, ~160 KB in the backward) sits in its 1 MB L2. Larger blocks would not
// make the inner products faster (they are already L1-resident) but would leave fewer tasks for
// load balancing under the causal mask; smaller ones would pay more per-block overhead (packing,
// softmax bookkeeping) per FLOP.
//
// Micro-kernel. Every product here is C[M x N] += A[M x K] B[K x N] on small packed row-major
// tiles: kR = 8 rows by kC = 16 columns of C live in registers (8 zmm in float), the K loop
// broadcasts one A element per row and loads one 16-wide B row: 8 independent FMA chains, enough
// to cover the FMA latency on both pipes. Tiles are zero-padded to multiples of kR rows and kC
// columns; padded keys are masked.
//
// Vectorisation. GCC 12 did not vectorise the plain-C++ versions of the micro-kernel and of the
// softmax loops well (it spilled the accumulators and left exp scalar: 11 GFLOP/s for the N = 1k
// forward), so where the build has AVX-512 (__AVX512F__, the default -march=native build on this
// Zen 5) the float micro-kernel, the masked row max, the exp-and-sum and the dS loops are written
// with AVX-512 intrinsics (about 70 GFLOP/s). Every one has a plain C++ version, used for double
// and by any build without AVX-512 (-DTFORMER_NATIVE=OFF, x86-64-v2): same formulas, multiply-adds
// fused with std::fma where the target has FMA (ISO mode does not contract a*b+c), results equal
// up to the summation order of the row sums.
//
// exp. The float path uses its own branch-free exp (range reduction to [-ln2/2, ln2/2], degree-7
// polynomial, exponent by bit construction; relative error a few 1e-7 in float) so that the
// softmax loops vectorise; libm's expf is a scalar call that would cost more than the products.
// The double instantiation uses std::exp (it exists for checking, at 1e-12).
//
// Precision (float). Scores, the running max and sum, and the rescaled accumulator are float:
// each output element is a convex combination of V entries, summed in tiles of 64 FMAs and
// rescaled per tile, so its absolute error stays a few float ulps of max |V| for any N the tests
// and benchmarks use; the log-sum-exp is float too. The tests hold it to 1e-5 relative of the
// double-accumulating reference.
//
// Threads. Forward: one task per (batch, head, query block), dynamic schedule (heaviest causal
// blocks first). Backward: pass 1, one task per (batch, kv head, key block), accumulates dK and dV
// for that block over every query head of the group and every query block that can see it; pass
// 2, one task per (batch, head, query block), accumulates dQ. Each output element is written by
// one task, in a fixed order, so the results are bit-identical for any thread count. The
// backward recomputes the score and dP tiles in both passes (7 tile products per tile pair instead
// of 5) in exchange for having no atomics and no per-thread dQ copies.
//
// Decode (n_q == 1): the keys are cut into fixed chunks of kDecodeChunk = 256 (independent of the
// thread count), one task per (batch, kv head, chunk) computes the chunk's partial softmax state
// (max, sum, unnormalised accumulator) for every query head of the group, reading each key and
// value once for the whole group; the states are then merged per (batch, head) in chunk order.
#include "kernels/flash_attention.h"
#include "kernels/fast_math.h"
#include "core/scratch.h"

#include <omp.h>

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which its -Wmaybe-uninitialized
// reports once inlined (GCC bug 105593, fixed in 13): a false positive, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"

namespace tformer {

namespace {

constexpr int64_t kBr = 64;  // query rows per block
constexpr int64_t kBc = 64;  // keys per block
constexpr int64_t kR = 8;    // micro-kernel rows
constexpr int64_t kC = 16;   // micro-kernel columns
constexpr int64_t kDecodeChunk = 256;

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <typename T>
constexpr T kInf = std::numeric_limits<T>::infinity();

template <typename T>
inline T fmadd(T a, T b, T c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// exp(x) for x <= ~0 (the softmax only exponentiates score - max or score - lse); -inf gives 0.
inline float exp_neg(float x) { return fast::exp_f(x); }
inline double exp_neg(double x) { return std::exp(x); }

// C[kR x kC] += A[kR x K] B[K x kC]; row strides ldc, lda, ldb.
template <typename T>
inline void micro_kernel(T* __restrict c, int64_t ldc, const T* __restrict a, int64_t lda, const T* __restrict b,
                         int64_t ldb, int64_t K) {
  T acc[kR][kC];
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t j = 0; j < kC; ++j) acc[r][j] = c[r * ldc + j];
  for (int64_t kk = 0; kk < K; ++kk) {
    const T* bk = b + kk * ldb;
    for (int64_t r = 0; r < kR; ++r) {
      const T ar = a[r * lda + kk];
      for (int64_t j = 0; j < kC; ++j) acc[r][j] = fmadd(ar, bk[j], acc[r][j]);
    }
  }
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t j = 0; j < kC; ++j) c[r * ldc + j] = acc[r][j];
}

// The hot loops of the softmax bookkeeping, generic (any T, any target) ...

// Masks row sr[0, n) (key j allowed when j <= lim and bias[j] == 0; others -inf) and returns its max.
template <typename T>
T mask_row_max(T* sr, const T* bias, int64_t n, int64_t lim) {
  T mx = -kInf<T>;
  for (int64_t j = 0; j < n; ++j) {
    const T x = j <= lim ? sr[j] + bias[j] : -kInf<T>;
    sr[j] = x;
    mx = x > mx ? x : mx;
  }
  return mx;
}
// sr[j] = exp(sr[j] - m); returns the sum.
template <typename T>
T exp_row_sum(T* sr, int64_t n, T m) {
  T sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const T p = exp_neg(sr[j] - m);
    sr[j] = p;
    sum += p;
  }
  return sum;
}
// Backward: P = allowed ? exp(s - lse) : 0, then s = dS = P (dp - D). Element j is allowed when
// first <= j <= lim and ok[j] == 0 (a bias), with lse and D per element (pass 1: a column of S^T)
// or scalars (pass 2: a row of S) given as stride-0 arrays.
// Writes dS to ds_out and, when given, P to p_out (either may alias st or dp: element i is read
// before it is written).
template <typename T>
void ds_line(const T* st, const T* dp, const T* ok, int64_t n, int64_t first, int64_t lim, const T* lse,
             int64_t lse_step, const T* D, int64_t d_step, T* ds_out, T* p_out) {
  for (int64_t i = 0; i < n; ++i) {
    const T l = lse[i * lse_step], d = D[i * d_step];
    const T p = (i >= first && i <= lim && ok[i] == T(0)) ? exp_neg(st[i] - l) : T(0);
    const T ds = p * (dp[i] - d);
    if (p_out) p_out[i] = p;
    ds_out[i] = ds;
  }
}

#if defined(__AVX512F__)
// ... and their AVX-512 float versions (n a multiple of 16). Same formulas; only the summation
// order of the row sums differs from the generic loops.
inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_GT_OQ);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), xc);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

// Lanes j0 + 0..15 with first <= j <= lim, as a mask (first, lim clamped into int32 range).
inline __mmask16 range_mask(int64_t j0, int64_t first, int64_t lim) {
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(j0)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const int32_t f = static_cast<int32_t>(std::clamp<int64_t>(first, -1, 1 << 20));
  const int32_t l = static_cast<int32_t>(std::clamp<int64_t>(lim, -1, 1 << 20));
  return _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(f)) & _mm512_cmple_epi32_mask(idx, _mm512_set1_epi32(l));
}

template <>
inline float mask_row_max<float>(float* sr, const float* bias, int64_t n, int64_t lim) {
  const __m512 ninf = _mm512_set1_ps(-kInf<float>);
  __m512 mx = ninf;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 in = range_mask(j, 0, lim);
    const __m512 x = _mm512_mask_add_ps(ninf, in, _mm512_loadu_ps(sr + j), _mm512_loadu_ps(bias + j));
    _mm512_storeu_ps(sr + j, x);
    mx = _mm512_max_ps(mx, x);
  }
  alignas(64) float t[16];
  _mm512_store_ps(t, mx);
  float r = t[0];
  for (int i = 1; i < 16; ++i) r = t[i] > r ? t[i] : r;
  return r;
}

template <>
inline float exp_row_sum<float>(float* sr, int64_t n, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __m512 p = exp16(_mm512_sub_ps(_mm512_loadu_ps(sr + j), mv));
    _mm512_storeu_ps(sr + j, p);
    sum = _mm512_add_ps(sum, p);
  }
  alignas(64) float t[16];  // (GCC 12's _mm512_reduce_* trip -Wmaybe-uninitialized)
  _mm512_store_ps(t, sum);
  float r = 0;
  for (int i = 0; i < 16; ++i) r += t[i];
  return r;
}

template <>
inline void ds_line<float>(const float* st, const float* dp, const float* ok, int64_t n, int64_t first, int64_t lim,
                           const float* lse, int64_t lse_step, const float* D, int64_t d_step, float* ds_out,
                           float* p_out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in = range_mask(i, first, lim) &
                         _mm512_cmp_ps_mask(_mm512_loadu_ps(ok + i), _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __m512 l = lse_step ? _mm512_loadu_ps(lse + i) : _mm512_set1_ps(lse[0]);
    const __m512 d = d_step ? _mm512_loadu_ps(D + i) : _mm512_set1_ps(D[0]);
    const __m512 p = _mm512_maskz_mov_ps(in, exp16(_mm512_sub_ps(_mm512_loadu_ps(st + i), l)));
    const __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + i), d));
    if (p_out) _mm512_storeu_ps(p_out + i, p);
    _mm512_storeu_ps(ds_out + i, ds);
  }
}

// C[kR x 16] += A[kR x K] B[K x 16] in registers.
template <>
inline void micro_kernel<float>(float* __restrict c, int64_t ldc, const float* __restrict a, int64_t lda,
                                const float* __restrict b, int64_t ldb, int64_t K) {
  static_assert(kC == 16 && kR == 8);
  __m512 c0 = _mm512_loadu_ps(c), c1 = _mm512_loadu_ps(c + ldc), c2 = _mm512_loadu_ps(c + 2 * ldc),
         c3 = _mm512_loadu_ps(c + 3 * ldc), c4 = _mm512_loadu_ps(c + 4 * ldc), c5 = _mm512_loadu_ps(c + 5 * ldc),
         c6 = _mm512_loadu_ps(c + 6 * ldc), c7 = _mm512_loadu_ps(c + 7 * ldc);
  for (int64_t kk = 0; kk < K; ++kk) {
    const __m512 bk = _mm512_loadu_ps(b + kk * ldb);
    const float* ak = a + kk;
    c0 = _mm512_fmadd_ps(_mm512_set1_ps(ak[0]), bk, c0);
    c1 = _mm512_fmadd_ps(_mm512_set1_ps(ak[lda]), bk, c1);
    c2 = _mm512_fmadd_ps(_mm512_set1_ps(ak[2 * lda]), bk, c2);
    c3 = _mm512_fmadd_ps(_mm512_set1_ps(ak[3 * lda]), bk, c3);
    c4 = _mm512_fmadd_ps(_mm512_set1_ps(ak[4 * lda]), bk, c4);
    c5 = _mm512_fmadd_ps(_mm512_set1_ps(ak[5 * lda]), bk, c5);
    c6 = _mm512_fmadd_ps(_mm512_set1_ps(ak[6 * lda]), bk, c6);
    c7 = _mm512_fmadd_ps(_mm512_set1_ps(ak[7 * lda]), bk, c7);
  }
  _mm512_storeu_ps(c, c0);
  _mm512_storeu_ps(c + ldc, c1);
  _mm512_storeu_ps(c + 2 * ldc, c2);
  _mm512_storeu_ps(c + 3 * ldc, c3);
  _mm512_storeu_ps(c + 4 * ldc, c4);
  _mm512_storeu_ps(c + 5 * ldc, c5);
  _mm512_storeu_ps(c + 6 * ldc, c6);
  _mm512_storeu_ps(c + 7 * ldc, c7);
}
#endif

// C[M x N] += A[M x K] B[K x N], M a multiple of kR, N of kC.
template <typename T>
void tile_gemm(T* c, int64_t ldc, const T* a, int64_t lda, const T* b, int64_t ldb, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; i += kR)
    for (int64_t j = 0; j < N; j += kC) micro_kernel(c + i * ldc + j, ldc, a + i * lda, lda, b + j, ldb, K);
}

template <typename T>
void zero(T* p, int64_t n) {
  std::fill(p, p + n, T(0));
}

// Per-sequence mask facts.
struct Seq {
  int64_t off, kvl;
  const uint8_t* valid;  // key_valid row of this sequence, or null
};

struct Ctx {
  AttentionShape s;
  AttentionMask m;
  int64_t hd, hdp, group;

  Seq seq(int64_t b) const {
    return {m.q_offset ? m.q_offset[b] : 0, m.kv_len ? m.kv_len[b] : s.n_kv,
            m.key_valid ? m.key_valid + b * s.n_kv : nullptr};
  }
  // One past the last key any of the query rows [0, i_end) of sequence b may read.
  int64_t key_end(const Seq& q, int64_t i_end) const {
    int64_t e = q.kvl;
    if (m.causal) e = std::min(e, q.off + i_end);
    return std::max<int64_t>(e, 0);
  }
};

// bias[j] = 0 for a readable key of block [j0, j0 + jn), -inf for padding and columns jn..cols_p.
// Returns the number of readable keys.
template <typename T>
int64_t key_bias(T* bias, const Seq& q, int64_t j0, int64_t jn, int64_t cols_p) {
  int64_t n = 0;
  for (int64_t j = 0; j < cols_p; ++j) {
    const bool ok = j < jn && (!q.valid || q.valid[j0 + j] != 0);
    bias[j] = ok ? T(0) : -kInf<T>;
    n += ok;
  }
  return n;
}

// rows [t0, t0 + n) of head h of x, times mul, into dst[n_p x hdp] (row-major; zero padding).
// Rows whose bias is -inf are not read (zeros), when bias is given.
template <typename T>
void pack_rows(T* dst, HeadsView<const T> x, int64_t b, int64_t h, int64_t t0, int64_t n, int64_t n_p, int64_t hd,
               int64_t hdp, T mul, const T* bias = nullptr) {
  for (int64_t r = 0; r < n_p; ++r) {
    T* d = dst + r * hdp;
    if (r < n && (!bias || bias[r] == T(0))) {
      const T* src = x.at(b, t0 + r, h);
      for (int64_t e = 0; e < hd; ++e) d[e] = src[e] * mul;
      for (int64_t e = hd; e < hdp; ++e) d[e] = T(0);
    } else {
      zero(d, hdp);
    }
  }
}

// The same rows transposed: dst[hd x ld], column r = row t0 + r, columns n..n_p zero.
template <typename T>
void pack_cols(T* dst, int64_t ld, HeadsView<const T> x, int64_t b, int64_t h, int64_t t0, int64_t n, int64_t n_p,
               int64_t hd, T mul, const T* bias = nullptr) {
  for (int64_t r = 0; r < n_p; ++r) {
    if (r < n && (!bias || bias[r] == T(0))) {
      const T* src = x.at(b, t0 + r, h);
      for (int64_t e = 0; e < hd; ++e) dst[e * ld + r] = src[e] * mul;
    } else {
      for (int64_t e = 0; e < hd; ++e) dst[e * ld + r] = T(0);
    }
  }
}

template <typename T>
T dot(const T* a, const T* b, int64_t n) {
  T acc = 0;
#pragma omp simd reduction(+ : acc)
  for (int64_t e = 0; e < n; ++e) acc = fmadd(a[e], b[e], acc);
  return acc;
}

bool enough_work(const AttentionShape& s) {
  return s.batch * s.n_heads * s.n_q * s.n_kv * s.head_dim >= (int64_t(1) << 15);
}

// ---------------------------------------------------------------------------------------------
// Forward, general path.

template <typename T>
void forward_tiled(const Ctx& c, HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k,
                   HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t nqb = (s.n_q + kBr - 1) / kBr;
  const int64_t n_tasks = s.batch * H * nqb;

#pragma omp parallel if (enough_work(s))
  {
    ScratchBuffer<T> Qs(0, kBr * hdp), KT(1, hd * kBc), Vs(2, kBc * hdp), S(3, kBr * kBc), O(4, kBr * hdp),
        mrow(5, kBr), lrow(6, kBr), bias(7, kBc);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t b = task / (H * nqb), h = (task / nqb) % H;
      const int64_t qb = nqb - 1 - task % nqb;  // the causal mask makes later blocks heavier: start them first
      const int64_t g = h / c.group;
      const Seq sq = c.seq(b);
      const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kR);

      pack_rows<T>(Qs.data(), q, b, h, i0, rows, rows_p, hd, hdp, scale);
      zero(O.data(), rows_p * hdp);
      std::fill(mrow.begin(), mrow.end(), -kInf<T>);
      std::fill(lrow.begin(), lrow.end(), T(0));

      const int64_t kend = c.key_end(sq, i0 + rows);
      for (int64_t j0 = 0; j0 < kend; j0 += kBc) {
        const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
        if (key_bias(bias.data(), sq, j0, jn, cols_p) == 0) continue;
        pack_cols<T>(KT.data(), kBc, k, b, g, j0, jn, cols_p, hd, T(1), bias.data());
        pack_rows<T>(Vs.data(), v, b, g, j0, jn, cols_p, hd, hdp, T(1), bias.data());

        for (int64_t r = 0; r < rows_p; ++r) zero(S.data() + r * kBc, cols_p);
        tile_gemm(S.data(), kBc, Qs.data(), hdp, KT.data(), kBc, rows_p, cols_p, hd);

        for (int64_t r = 0; r < rows_p; ++r) {
          T* sr = S.data() + r * kBc;
          if (r >= rows) {
            zero(sr, cols_p);
            continue;
          }
          // Local key j is allowed for this row when j <= lim (causal) and bias[j] == 0.
          const int64_t lim = c.m.causal ? sq.off + i0 + r - j0 : cols_p;
          const T mx = mask_row_max(sr, bias.data(), cols_p, lim);
          if (mx == -kInf<T>) {  // nothing allowed in this block for this row
            zero(sr, cols_p);
            continue;
          }
          const T m_new = std::max(mrow[r], mx);
          const T alpha = exp_neg(mrow[r] - m_new);
          const T sum = exp_row_sum(sr, cols_p, m_new);
          lrow[r] = fmadd(lrow[r], alpha, sum);
          mrow[r] = m_new;
          if (alpha != T(1)) {
            T* o = O.data() + r * hdp;
            for (int64_t e = 0; e < hdp; ++e) o[e] *= alpha;
          }
        }
        tile_gemm(O.data(), hdp, S.data(), kBc, Vs.data(), hdp, rows_p, hdp, cols_p);
      }

      for (int64_t r = 0; r < rows; ++r) {
        T* dst = out.at(b, i0 + r, h);
        const T* o = O.data() + r * hdp;
        const T l = lrow[r];
        if (l > T(0)) {
          const T inv = T(1) / l;
          for (int64_t e = 0; e < hd; ++e) dst[e] = o[e] * inv;
        } else {
          for (int64_t e = 0; e < hd; ++e) dst[e] = T(0);
        }
        if (lse) lse[(b * H + h) * s.n_q + i0 + r] = l > T(0) ? mrow[r] + std::log(l) : -kInf<T>;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Forward, decode path (one query row per sequence).

template <typename T>
void forward_decode(const Ctx& c, HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k,
                    HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, H = s.n_heads, G = s.n_kv_heads, group = c.group;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t n_chunks = (s.n_kv + kDecodeChunk - 1) / kDecodeChunk;
  // Partial states per (b, h, chunk).
  ScratchBuffer<T> pm(0, static_cast<size_t>(s.batch * H * n_chunks)), pl(1, pm.size()), pacc(2, pm.size() * hd);
  const bool parallel = s.batch * H * s.n_kv * hd >= (int64_t(1) << 15);

#pragma omp parallel if (parallel)
  {
    ScratchBuffer<T> qs(3, group * hd), sc(4, group * kDecodeChunk), acc(5, group * hd);  // 0-2: above
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < s.batch * G * n_chunks; ++task) {
      const int64_t b = task / (G * n_chunks), g = (task / n_chunks) % G, ch = task % n_chunks;
      const Seq sq = c.seq(b);
      const int64_t kend = c.key_end(sq, 1);
      const int64_t c0 = ch * kDecodeChunk, c1 = std::min(c0 + kDecodeChunk, kend), n = c1 - c0;
      auto slot = [&](int64_t hh) { return (b * H + g * group + hh) * n_chunks + ch; };
      if (n <= 0) {
        for (int64_t hh = 0; hh < group; ++hh) {
          pm[slot(hh)] = -kInf<T>;
          pl[slot(hh)] = T(0);
        }
        continue;
      }
      for (int64_t hh = 0; hh < group; ++hh) {
        const T* src = q.at(b, 0, g * group + hh);
        for (int64_t e = 0; e < hd; ++e) qs[hh * hd + e] = src[e] * scale;
      }
      for (int64_t j = 0; j < n; ++j) {
        if (sq.valid && sq.valid[c0 + j] == 0) {
          for (int64_t hh = 0; hh < group; ++hh) sc[hh * kDecodeChunk + j] = -kInf<T>;
          continue;
        }
        const T* kj = k.at(b, c0 + j, g);
        for (int64_t hh = 0; hh < group; ++hh) sc[hh * kDecodeChunk + j] = dot(qs.data() + hh * hd, kj, hd);
      }
      for (int64_t hh = 0; hh < group; ++hh) {
        T* sr = sc.data() + hh * kDecodeChunk;
        T mx = -kInf<T>;
#pragma omp simd reduction(max : mx)
        for (int64_t j = 0; j < n; ++j) mx = sr[j] > mx ? sr[j] : mx;
        T sum = 0;
        if (mx != -kInf<T>) {
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < n; ++j) {
            const T p = exp_neg(sr[j] - mx);
            sr[j] = p;
            sum += p;
          }
        }
        pm[slot(hh)] = mx;
        pl[slot(hh)] = sum;
      }
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t j = 0; j < n; ++j) {
        if (sq.valid && sq.valid[c0 + j] == 0) continue;
        const T* vj = v.at(b, c0 + j, g);
        for (int64_t hh = 0; hh < group; ++hh) {
          if (pm[slot(hh)] == -kInf<T>) continue;
          const T p = sc[hh * kDecodeChunk + j];
          T* a = acc.data() + hh * hd;
#pragma omp simd
          for (int64_t e = 0; e < hd; ++e) a[e] = fmadd(p, vj[e], a[e]);
        }
      }
      for (int64_t hh = 0; hh < group; ++hh)
        std::copy(acc.begin() + hh * hd, acc.begin() + (hh + 1) * hd, pacc.begin() + slot(hh) * hd);
    }

    // Merge the chunks of each (b, h) in chunk order.
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const T* m_ = pm.data() + bh * n_chunks;
      const T* l_ = pl.data() + bh * n_chunks;
      T M = -kInf<T>;
      for (int64_t ch = 0; ch < n_chunks; ++ch) M = std::max(M, m_[ch]);
      T* dst = out.at(b, 0, h);
      T L = 0;
      if (M != -kInf<T>) {
        for (int64_t e = 0; e < hd; ++e) dst[e] = T(0);
        for (int64_t ch = 0; ch < n_chunks; ++ch) {
          if (m_[ch] == -kInf<T>) continue;
          const T w = exp_neg(m_[ch] - M);
          L = fmadd(l_[ch], w, L);
          const T* a = pacc.data() + (bh * n_chunks + ch) * hd;
          for (int64_t e = 0; e < hd; ++e) dst[e] = fmadd(a[e], w, dst[e]);
        }
      }
      if (L > T(0)) {
        const T inv = T(1) / L;
        for (int64_t e = 0; e < hd; ++e) dst[e] *= inv;
      } else {
        for (int64_t e = 0; e < hd; ++e) dst[e] = T(0);
      }
      if (lse) lse[bh] = L > T(0) ? M + std::log(L) : -kInf<T>;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward.

// Per query block: lse (with -inf, a row without keys, turned into +inf so every exp gives 0) and
// D_i = dO_i . O_i; padded rows get +inf and 0.
template <typename T>
void row_stats(T* lse_use, T* D, const T* lse, HeadsView<const T> dout, HeadsView<const T> out, int64_t b,
               int64_t h, int64_t H, int64_t n_q, int64_t i0, int64_t rows, int64_t rows_p, int64_t hd) {
  for (int64_t r = 0; r < rows_p; ++r) {
    if (r < rows) {
      const T l = lse[(b * H + h) * n_q + i0 + r];
      lse_use[r] = l == -kInf<T> ? kInf<T> : l;
      D[r] = lse_use[r] == kInf<T> ? T(0) : dot(dout.at(b, i0 + r, h), out.at(b, i0 + r, h), hd);
    } else {
      lse_use[r] = kInf<T>;
      D[r] = T(0);
    }
  }
}

template <typename T>
void backward_dkdv(const Ctx& c, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout, HeadsView<const T> out,
                   const T* lse, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads, G = s.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t nqb = (s.n_q + kBr - 1) / kBr, nkb = (s.n_kv + kBc - 1) / kBc;
  const int64_t n_tasks = s.batch * G * nkb;

#pragma omp parallel if (enough_work(s))
  {
    ScratchBuffer<T> Ks(0, kBc * hdp), Vs(1, kBc * hdp), bias(2, kBc), QT(3, hd * kBr), Qs(4, kBr * hdp),
        dOT(5, hd * kBr), dOs(6, kBr * hdp), lse_use(7, kBr), D(8, kBr), ST(9, kBc * kBr), dPT(10, kBc * kBr),
        dKa(11, kBc * hdp), dVa(12, kBc * hdp), zeros(13, kBr, T(0));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t b = task / (G * nkb), g = (task / nkb) % G, kb = task % nkb;
      const Seq sq = c.seq(b);
      const int64_t kend = c.key_end(sq, s.n_q), j0 = kb * kBc;
      if (j0 >= kend) continue;
      const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
      if (key_bias(bias.data(), sq, j0, jn, cols_p) == 0) continue;
      pack_rows<T>(Ks.data(), k, b, g, j0, jn, cols_p, hd, hdp, T(1), bias.data());
      pack_rows<T>(Vs.data(), v, b, g, j0, jn, cols_p, hd, hdp, T(1), bias.data());
      zero(dKa.data(), cols_p * hdp);
      zero(dVa.data(), cols_p * hdp);
      // The first query row that may see key j0.
      const int64_t i_first = c.m.causal ? std::max<int64_t>(0, j0 - sq.off) : 0;

      for (int64_t h = g * c.group; h < (g + 1) * c.group; ++h) {
        for (int64_t qb = i_first / kBr; qb < nqb; ++qb) {
          const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kR);
          pack_cols<T>(QT.data(), kBr, q, b, h, i0, rows, rows_p, hd, scale);
          pack_rows<T>(Qs.data(), q, b, h, i0, rows, rows_p, hd, hdp, scale);
          pack_cols<T>(dOT.data(), kBr, dout, b, h, i0, rows, rows_p, hd, T(1));
          pack_rows<T>(dOs.data(), dout, b, h, i0, rows, rows_p, hd, hdp, T(1));
          row_stats<T>(lse_use.data(), D.data(), lse, dout, out, b, h, H, s.n_q, i0, rows, rows_p, hd);

          for (int64_t j = 0; j < cols_p; ++j) {
            zero(ST.data() + j * kBr, rows_p);
            zero(dPT.data() + j * kBr, rows_p);
          }
          tile_gemm(ST.data(), kBr, Ks.data(), hdp, QT.data(), kBr, cols_p, rows_p, hd);   // S^T
          tile_gemm(dPT.data(), kBr, Vs.data(), hdp, dOT.data(), kBr, cols_p, rows_p, hd);  // dP^T
          for (int64_t j = 0; j < cols_p; ++j) {
            T* st = ST.data() + j * kBr;
            T* dpt = dPT.data() + j * kBr;
            // Row i (local) may read key j when i >= first, and the key is readable.
            const int64_t first = c.m.causal ? j0 + j - sq.off - i0 : -1;
            if (bias[j] != T(0)) {  // padding: P and dS are 0
              zero(st, rows_p);
              zero(dpt, rows_p);
              continue;
            }
            ds_line<T>(st, dpt, zeros.data(), rows_p, first, rows_p, lse_use.data(), 1, D.data(), 1, /*dS*/ dpt,
                       /*P*/ st);
          }
          tile_gemm(dVa.data(), hdp, ST.data(), kBr, dOs.data(), hdp, cols_p, hdp, rows_p);  // dV += P^T dO
          tile_gemm(dKa.data(), hdp, dPT.data(), kBr, Qs.data(), hdp, cols_p, hdp, rows_p);  // dK += dS^T (Q scale)
        }
      }
      for (int64_t j = 0; j < jn; ++j) {
        if (bias[j] != T(0)) continue;
        T* dkj = dk.at(b, j0 + j, g);
        T* dvj = dv.at(b, j0 + j, g);
        const T* a = dKa.data() + j * hdp;
        const T* bb = dVa.data() + j * hdp;
        for (int64_t e = 0; e < hd; ++e) {
          dkj[e] += a[e];
          dvj[e] += bb[e];
        }
      }
    }
  }
}

template <typename T>
void backward_dq(const Ctx& c, HeadsView<T> dq, HeadsView<const T> dout, HeadsView<const T> out, const T* lse,
                 HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t nqb = (s.n_q + kBr - 1) / kBr;
  const int64_t n_tasks = s.batch * H * nqb;

#pragma omp parallel if (enough_work(s))
  {
    ScratchBuffer<T> Qs(0, kBr * hdp), dOs(1, kBr * hdp), lse_use(2, kBr), D(3, kBr), KT(4, hd * kBc),
        VT(5, hd * kBc), Ks(6, kBc * hdp), S(7, kBr * kBc), dP(8, kBr * kBc), dQa(9, kBr * hdp), bias(10, kBc);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t b = task / (H * nqb), h = (task / nqb) % H, qb = nqb - 1 - task % nqb;
      const int64_t g = h / c.group;
      const Seq sq = c.seq(b);
      const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kR);
      row_stats<T>(lse_use.data(), D.data(), lse, dout, out, b, h, H, s.n_q, i0, rows, rows_p, hd);
      bool any_row = false;
      for (int64_t r = 0; r < rows; ++r) any_row |= lse_use[r] != kInf<T>;
      if (!any_row) continue;  // every row masked: zero gradient
      pack_rows<T>(Qs.data(), q, b, h, i0, rows, rows_p, hd, hdp, scale);
      pack_rows<T>(dOs.data(), dout, b, h, i0, rows, rows_p, hd, hdp, T(1));
      zero(dQa.data(), rows_p * hdp);

      const int64_t kend = c.key_end(sq, i0 + rows);
      for (int64_t j0 = 0; j0 < kend; j0 += kBc) {
        const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
        if (key_bias(bias.data(), sq, j0, jn, cols_p) == 0) continue;
        pack_cols<T>(KT.data(), kBc, k, b, g, j0, jn, cols_p, hd, T(1), bias.data());
        pack_cols<T>(VT.data(), kBc, v, b, g, j0, jn, cols_p, hd, T(1), bias.data());
        pack_rows<T>(Ks.data(), k, b, g, j0, jn, cols_p, hd, hdp, T(1), bias.data());
        for (int64_t r = 0; r < rows_p; ++r) {
          zero(S.data() + r * kBc, cols_p);
          zero(dP.data() + r * kBc, cols_p);
        }
        tile_gemm(S.data(), kBc, Qs.data(), hdp, KT.data(), kBc, rows_p, cols_p, hd);
        tile_gemm(dP.data(), kBc, dOs.data(), hdp, VT.data(), kBc, rows_p, cols_p, hd);
        for (int64_t r = 0; r < rows_p; ++r) {
          T* sr = S.data() + r * kBc;
          const T* dpr = dP.data() + r * kBc;
          const int64_t lim = c.m.causal ? sq.off + i0 + r - j0 : cols_p;
          ds_line<T>(sr, dpr, bias.data(), cols_p, 0, lim, &lse_use[r], 0, &D[r], 0, /*dS*/ sr, nullptr);
        }
        tile_gemm(dQa.data(), hdp, S.data(), kBc, Ks.data(), hdp, rows_p, hdp, cols_p);
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* dst = dq.at(b, i0 + r, h);
        const T* a = dQa.data() + r * hdp;
        for (int64_t e = 0; e < hd; ++e) dst[e] += scale * a[e];
      }
    }
  }
}

Ctx make_ctx(const AttentionShape& s, const AttentionMask& m) {
  validate(s, m);
  return {s, m, s.head_dim, round_up(s.head_dim, kC), s.n_heads / s.n_kv_heads};
}

}  // namespace

template <typename T>
void flash_attention_forward(HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k,
                             HeadsView<const T> v, const AttentionShape& s, const AttentionMask& m) {
  const Ctx c = make_ctx(s, m);
  if (s.n_q == 1)
    forward_decode<T>(c, out, lse, q, k, v);
  else
    forward_tiled<T>(c, out, lse, q, k, v);
}

template <typename T>
void flash_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                              HeadsView<const T> out, const T* lse, HeadsView<const T> q, HeadsView<const T> k,
                              HeadsView<const T> v, const AttentionShape& s, const AttentionMask& m) {
  TF_CHECK(lse != nullptr, "flash_attention_backward: the saved log-sum-exp is required");
  const Ctx c = make_ctx(s, m);
  backward_dkdv<T>(c, dk, dv, dout, out, lse, q, k, v);
  backward_dq<T>(c, dq, dout, out, lse, q, k, v);
}

int64_t flash_attention_workspace_bytes(const AttentionShape& s, int64_t elem_size, int threads, bool backward) {
  const int64_t hd = s.head_dim, hdp = round_up(hd, kC), group = s.n_heads / std::max<int64_t>(1, s.n_kv_heads);
  const int64_t t = std::max(1, threads);
  if (!backward) {
    if (s.n_q == 1) {
      const int64_t n_chunks = (s.n_kv + kDecodeChunk - 1) / kDecodeChunk;
      const int64_t partials = s.batch * s.n_heads * n_chunks * (hd + 2);
      const int64_t per_thread = group * hd * 2 + group * kDecodeChunk;
      return (partials + t * per_thread) * elem_size;
    }
    const int64_t per_thread = kBr * hdp * 2 + hd * kBc + kBc * hdp + kBr * kBc + 2 * kBr + kBc;
    return t * per_thread * elem_size;
  }
  const int64_t pass1 = 4 * kBc * hdp + kBc + 2 * hd * kBr + 2 * kBr * hdp + 2 * kBr + 2 * kBc * kBr;
  const int64_t pass2 = 3 * kBr * hdp + 2 * kBr + 2 * hd * kBc + kBc * hdp + 2 * kBr * kBc + kBc;
  return t * std::max(pass1, pass2) * elem_size;
}

template void flash_attention_forward<float>(HeadsView<float>, float*, HeadsView<const float>,
                                             HeadsView<const float>, HeadsView<const float>, const AttentionShape&,
                                             const AttentionMask&);
template void flash_attention_forward<double>(HeadsView<double>, double*, HeadsView<const double>,
                                              HeadsView<const double>, HeadsView<const double>,
                                              const AttentionShape&, const AttentionMask&);
template void flash_attention_backward<float>(HeadsView<float>, HeadsView<float>, HeadsView<float>,
                                              HeadsView<const float>, HeadsView<const float>, const float*,
                                              HeadsView<const float>, HeadsView<const float>,
                                              HeadsView<const float>, const AttentionShape&, const AttentionMask&);
template void flash_attention_backward<double>(HeadsView<double>, HeadsView<double>, HeadsView<double>,
                                               HeadsView<const double>, HeadsView<const double>, const double*,
                                               HeadsView<const double>, HeadsView<const double>,
                                               HeadsView<const double>, const AttentionShape&,
                                               const AttentionMask&);

}  // namespace tformer
