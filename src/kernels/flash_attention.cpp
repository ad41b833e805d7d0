// Tiled exact attention: FlashAttention's online softmax (forward) and FlashAttention-2's
// recomputing backward, written for a CPU. See flash_attention.h for the contract; the reference
// kernel (attention.cpp) is the oracle the tests compare against.
//
// Tiles. A query block of kBr = 64 rows meets a key block of kBc = 64 keys. With head width 64 in
// float, each tile operand is 64 x 64 x 4 B = 16 KB: the forward's working set per key block is
// Q^T (16 KB, stays), K (16 KB), V (16 KB), the score tile S^T (16 KB) and the output accumulator
// O (16 KB). Each product streams rows of one operand against the other, reused one (16 KB), which
// with a few rows fits this Zen 5 core's 48 KB L1d; the whole working set (~80 KB, ~160 KB in the
// backward) sits in its 1 MB L2. Larger blocks would not make the inner products faster (they are
// already L1-resident) but would leave fewer tasks for load balancing under the causal mask;
// smaller ones would pay more per-block overhead (packing, softmax bookkeeping) per FLOP.
//
// Micro-kernel. Every product here is C[M x N] (+)= op(A)[M x K] B[K x N] on small row-major
// tiles: kR = 8 rows by 2 kC = 32 columns of C live in registers (16 zmm in float; a 16-column
// kernel takes a remainder), the K loop broadcasts one A element per row and loads two 16-wide B
// rows: 16 independent FMA chains, twice what covers the FMA latency on both pipes, at 10 loads
// per 16 FMAs. op(A) is A or A^T read in place (a broadcast reads any address, so a transposed A
// costs nothing), and the kernel either accumulates into C or overwrites it (no zero-fill pass
// for the score tiles). That lets every tile keep the layout it is produced in, with one
// transposing pack per task instead of per tile pair:
//   forward   S^T = K (Q scale)^T against Q^T packed once per query block; the online softmax runs
//             down the columns of S^T (16 queries per vector); O += P V reads P = (S^T)^T;
//   pass 1    S = Q (K scale)^T and dP = dO V^T against K^T, V^T packed once per key block;
//             dV += P^T dO and dK += dS^T Q read P and dS transposed (scale on dK at the end);
//   pass 2    S^T and dP^T against Q^T, dO^T packed once per query block; dQ += dS K reads dS^T.
// The row operands (K, V, Q, dO blocks) are read in place from the caller's tensors when nothing
// needs padding or masking (full block, head width a multiple of kC, every key readable), else
// packed; the next block's rows are prefetched into L2 meanwhile (their rows are a stride apart:
// ~6% on the N = 16k backward, neutral below). Tiles are zero-padded to multiples of kR rows and
// kC columns (queries to kC where they are a vector dimension); padded keys are masked. The backward computes
// lse-with-+inf and D_i = dO_i . O_i once per query row (2 B n_heads n_q values) instead of once per tile pair.
//
// Vectorisation. GCC 12 did not vectorise the plain-C++ versions of the micro-kernel and of the
// softmax loops well (it spilled the accumulators and left exp scalar: 11 GFLOP/s for the N = 1k
// forward), so where the build has AVX-512 (__AVX512F__, the default -march=native build on this
// Zen 5) the float micro-kernel, the online-softmax column update and the dS loops are written
// with AVX-512 intrinsics. Every one has a plain C++ version, used for double
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
#include "core/rng.h"
#include "core/scratch.h"
#include "kernels/fast_math.h"

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
#include <type_traits>
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

using fast::fmadd;

// exp(x) for x <= ~0 (the softmax only exponentiates score - max or score - lse); -inf gives 0.
inline float exp_neg(float x) { return fast::exp_f(x); }
inline double exp_neg(double x) { return std::exp(x); }

// C[kR x NV kC] (+)= op(A)[kR x K] B[K x NV kC]; op(A)(r, k) = a[r * lda + k], or a[k * lda + r] when
// TA (A stored transposed); C is overwritten instead of accumulated into when !ACC.
template <typename T, bool TA, bool ACC, int NV>
inline void micro_kernel_generic(T* __restrict c, int64_t ldc, const T* __restrict a, int64_t lda,
                                 const T* __restrict b, int64_t ldb, int64_t K) {
  constexpr int64_t W = kC * NV;
  T acc[kR][W];
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t j = 0; j < W; ++j) acc[r][j] = ACC ? c[r * ldc + j] : T(0);
  for (int64_t kk = 0; kk < K; ++kk) {
    const T* bk = b + kk * ldb;
    for (int64_t r = 0; r < kR; ++r) {
      const T ar = TA ? a[kk * lda + r] : a[r * lda + kk];
      for (int64_t j = 0; j < W; ++j) acc[r][j] = fmadd(ar, bk[j], acc[r][j]);
    }
  }
  for (int64_t r = 0; r < kR; ++r)
    for (int64_t j = 0; j < W; ++j) c[r * ldc + j] = acc[r][j];
}

// The hot loops of the softmax bookkeeping, generic (any T, any target) ...

// One key block of the forward's online softmax, on a transposed score tile st[nk keys x nq
// queries] (row stride ld): key j is allowed for query i when ok[j] == 0 and i >= first + j.
// Per query i: m_new = max(m[i], allowed scores), alpha[i] = exp(m[i] - m_new) (1 while m_new is
// still -inf), the allowed scores replaced by exp(s - m_new) and the others by 0, l[i] = l[i] alpha
// + their sum, m[i] = m_new.
template <typename T>
void softmax_cols(T* st, int64_t ld, const T* ok, int64_t nk, int64_t nq, int64_t first, T* m, T* l, T* alpha) {
  constexpr T kNaN = std::numeric_limits<T>::quiet_NaN();
  for (int64_t i = 0; i < nq; ++i) {
    T mx = -kInf<T>;
    bool nan = false;
    for (int64_t j = 0; j < nk; ++j)
      if (ok[j] == T(0) && i >= first + j) {
        const T x = st[j * ld + i];
        mx = x > mx ? x : mx;
        nan |= x != x;
      }
    // A NaN score, or one from an earlier tile (m), makes the row NaN (torch's softmax does too).
    const T mn = nan || m[i] != m[i] ? kNaN : std::max(m[i], mx);
    const T al = mn == -kInf<T> ? T(1) : exp_neg(m[i] - mn);
    T sum = 0;
    for (int64_t j = 0; j < nk; ++j) {
      const T p = ok[j] == T(0) && i >= first + j ? exp_neg(st[j * ld + i] - mn) : T(0);
      st[j * ld + i] = p;
      sum += p;
    }
    alpha[i] = al;
    l[i] = fmadd(l[i], al, sum);
    m[i] = mn;
  }
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
// exp of 16 lanes, x <= ~0 (-inf, or NaN from -inf - -inf, gives 0 or a value that the callers
// mask): the same reduction and polynomial as fast::exp_f, with 2^n applied by vscalefps, which
// needs no clamping of n (it underflows to 0 by itself), so the only guard is a floor on x.
inline __m512 exp16(__m512 x) {
  // max(-120, x) returns x when x is NaN (vmaxps returns its second operand then): a NaN score
  // stays NaN, as std::exp keeps it, instead of silently becoming a zero probability.
  const __m512 xc = _mm512_max_ps(_mm512_set1_ps(-120.0f), x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
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
  return _mm512_scalef_ps(p, n);
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
inline void softmax_cols<float>(float* st, int64_t ld, const float* ok, int64_t nk, int64_t nq, int64_t first, float* m,
                                float* l, float* alpha) {
  const __m512 ninf = _mm512_set1_ps(-kInf<float>);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  bool all_ok = first + nk - 1 <= 0;  // every (query >= 0, key) pair passes the causal test
  for (int64_t j = 0; j < nk && all_ok; ++j) all_ok = ok[j] == 0.0f;
  const int64_t f0 = std::clamp<int64_t>(first, -(int64_t(1) << 24), int64_t(1) << 24);
  for (int64_t i = 0; i < nq; i += 16) {
    const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(i)), lane);
    auto allowed = [&](int64_t j) -> __mmask16 {
      if (all_ok) return 0xFFFF;
      if (ok[j] != 0.0f) return 0;
      return _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(static_cast<int32_t>(f0 + j)));
    };
    __m512 mx = ninf;
    __mmask16 nan = 0;  // lanes with a NaN score among the allowed ones
    for (int64_t j = 0; j < nk; ++j) {
      const __m512 x = _mm512_loadu_ps(st + j * ld + i);
      const __mmask16 a = allowed(j);
      mx = _mm512_mask_max_ps(mx, a, mx, x);
      nan |= _mm512_mask_cmp_ps_mask(a, x, x, _CMP_UNORD_Q);
    }
    const __m512 mo = _mm512_loadu_ps(m + i);
    // NaN in this tile's scores or in the running max makes the row NaN (as torch's softmax).
    nan |= _mm512_cmp_ps_mask(mo, mo, _CMP_UNORD_Q);
    const __m512 mn =
        _mm512_mask_mov_ps(_mm512_max_ps(mo, mx), nan, _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN()));
    const __mmask16 none = _mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ);
    const __m512 al = _mm512_mask_mov_ps(exp16(_mm512_sub_ps(mo, mn)), none, _mm512_set1_ps(1.0f));
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < nk; ++j) {
      float* sj = st + j * ld + i;
      const __m512 p = _mm512_maskz_mov_ps(allowed(j), exp16(_mm512_sub_ps(_mm512_loadu_ps(sj), mn)));
      _mm512_storeu_ps(sj, p);
      sum = _mm512_add_ps(sum, p);
    }
    _mm512_storeu_ps(alpha + i, al);
    _mm512_storeu_ps(l + i, _mm512_fmadd_ps(_mm512_loadu_ps(l + i), al, sum));
    _mm512_storeu_ps(m + i, mn);
  }
}

template <>
inline void ds_line<float>(const float* st, const float* dp, const float* ok, int64_t n, int64_t first, int64_t lim,
                           const float* lse, int64_t lse_step, const float* D, int64_t d_step, float* ds_out,
                           float* p_out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 in =
        range_mask(i, first, lim) & _mm512_cmp_ps_mask(_mm512_loadu_ps(ok + i), _mm512_setzero_ps(), _CMP_EQ_OQ);
    const __m512 l = lse_step ? _mm512_loadu_ps(lse + i) : _mm512_set1_ps(lse[0]);
    const __m512 d = d_step ? _mm512_loadu_ps(D + i) : _mm512_set1_ps(D[0]);
    const __m512 p = _mm512_maskz_mov_ps(in, exp16(_mm512_sub_ps(_mm512_loadu_ps(st + i), l)));
    const __m512 ds = _mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(dp + i), d));
    if (p_out) _mm512_storeu_ps(p_out + i, p);
    _mm512_storeu_ps(ds_out + i, ds);
  }
}

// C[kR x 16 NV] (+)= op(A)[kR x K] B[K x 16 NV] in registers (8 NV accumulators).
template <bool TA, bool ACC, int NV>
inline void micro_kernel_f32(float* __restrict c, int64_t ldc, const float* __restrict a, int64_t lda,
                             const float* __restrict b, int64_t ldb, int64_t K) {
  static_assert(kC == 16 && kR == 8);
  __m512 acc[kR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = ACC ? _mm512_loadu_ps(c + r * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t kk = 0; kk < K; ++kk) {
    __m512 bk[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bk[v] = _mm512_loadu_ps(b + kk * ldb + 16 * v);
    const float* ak = TA ? a + kk * lda : a + kk;
#pragma GCC unroll 8
    for (int r = 0; r < kR; ++r) {
      const __m512 ar = _mm512_set1_ps(TA ? ak[r] : ak[r * lda]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bk[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}
#endif

template <typename T, bool TA, bool ACC, int NV>
inline void micro_kernel(T* c, int64_t ldc, const T* a, int64_t lda, const T* b, int64_t ldb, int64_t K) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    micro_kernel_f32<TA, ACC, NV>(c, ldc, a, lda, b, ldb, K);
    return;
  }
#endif
  micro_kernel_generic<T, TA, ACC, NV>(c, ldc, a, lda, b, ldb, K);
}

// C[M x N] (+)= op(A)[M x K] B[K x N], M a multiple of kR, N of kC; op and (+) as micro_kernel's.
// Column strips of 2 kC (16 accumulators), a kC strip for the remainder.
template <bool TA, bool ACC, typename T>
void tile_gemm(T* c, int64_t ldc, const T* a, int64_t lda, const T* b, int64_t ldb, int64_t M, int64_t N, int64_t K) {
  for (int64_t i = 0; i < M; i += kR) {
    const T* ai = TA ? a + i : a + i * lda;
    int64_t j = 0;
    for (; j + 2 * kC <= N; j += 2 * kC) micro_kernel<T, TA, ACC, 2>(c + i * ldc + j, ldc, ai, lda, b + j, ldb, K);
    if (j < N) micro_kernel<T, TA, ACC, 1>(c + i * ldc + j, ldc, ai, lda, b + j, ldb, K);
  }
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
  AttentionDropout drop;

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

// The same rows as a row-major operand of n_p rows of hdp: in place (row stride x.stride_t) when
// there is nothing to pad or mask (n == n_p, hd == hdp, every row readable), else packed into buf.
template <typename T>
const T* rows_operand(T* buf, int64_t& ld, HeadsView<const T> x, int64_t b, int64_t h, int64_t t0, int64_t n,
                      int64_t n_p, int64_t hd, int64_t hdp, const T* bias, bool all_readable) {
  if (n == n_p && hd == hdp && all_readable) {
    ld = x.stride_t;
    return x.at(b, t0, h);
  }
  pack_rows<T>(buf, x, b, h, t0, n, n_p, hd, hdp, T(1), bias);
  ld = hdp;
  return buf;
}

#if defined(__AVX512F__)
// pack_cols for float, n_p a multiple of 16: 16 rows x 16 elements at a time, transposed in
// registers (pairs of rows interleaved by 1, then by 2 elements, then 128-bit lanes regrouped
// twice), so the stores are whole 16-wide columns instead of single elements.
inline void pack_cols_f32(float* dst, int64_t ld, HeadsView<const float> x, int64_t b, int64_t h, int64_t t0, int64_t n,
                          int64_t n_p, int64_t hd, float mul, const float* bias) {
  const __m512 m = _mm512_set1_ps(mul);
  for (int64_t r0 = 0; r0 < n_p; r0 += 16) {
    const float* src[16];
    for (int i = 0; i < 16; ++i) {
      const int64_t r = r0 + i;
      src[i] = r < n && (!bias || bias[r] == 0.0f) ? x.at(b, t0 + r, h) : nullptr;
    }
    for (int64_t e = 0; e < hd; e += 16) {
      const __mmask16 em = hd - e >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (hd - e)) - 1);
      __m512 r[16], a[16];
      for (int i = 0; i < 16; ++i)
        r[i] = src[i] ? _mm512_mul_ps(_mm512_maskz_loadu_ps(em, src[i] + e), m) : _mm512_setzero_ps();
      for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        a[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
      }
      // r[4q + c], lane L: rows 4q..4q+3 of column 4L + c.
      for (int q = 0; q < 4; ++q) {
        const __m512d lo = _mm512_castps_pd(a[4 * q]), hi = _mm512_castps_pd(a[4 * q + 1]);
        const __m512d lo2 = _mm512_castps_pd(a[4 * q + 2]), hi2 = _mm512_castps_pd(a[4 * q + 3]);
        r[4 * q + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
        r[4 * q + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
        r[4 * q + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
        r[4 * q + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
      }
      for (int c = 0; c < 4; ++c) {
        const __m512 t0v = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x44), t1v = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xEE);
        const __m512 u0 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x44);
        const __m512 u1 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xEE);
        const __m512 col[4] = {_mm512_shuffle_f32x4(t0v, u0, 0x88), _mm512_shuffle_f32x4(t0v, u0, 0xDD),
                               _mm512_shuffle_f32x4(t1v, u1, 0x88), _mm512_shuffle_f32x4(t1v, u1, 0xDD)};
        for (int L = 0; L < 4; ++L) {
          const int64_t j = e + 4 * L + c;
          if (j < hd) _mm512_storeu_ps(dst + j * ld + r0, col[L]);
        }
      }
    }
  }
}
#endif

// The same rows transposed: dst[hd x ld], column r = row t0 + r, columns n..n_p zero.
template <typename T>
void pack_cols(T* dst, int64_t ld, HeadsView<const T> x, int64_t b, int64_t h, int64_t t0, int64_t n, int64_t n_p,
               int64_t hd, T mul, const T* bias = nullptr) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    if (n_p % 16 == 0) {
      pack_cols_f32(dst, ld, x, b, h, t0, n, n_p, hd, mul, bias);
      return;
    }
  }
#endif
  for (int64_t r = 0; r < n_p; ++r) {
    if (r < n && (!bias || bias[r] == T(0))) {
      const T* src = x.at(b, t0 + r, h);
      for (int64_t e = 0; e < hd; ++e) dst[e * ld + r] = src[e] * mul;
    } else {
      for (int64_t e = 0; e < hd; ++e) dst[e * ld + r] = T(0);
    }
  }
}

// Hints rows [t0, t0 + n) of head h of x into the cache: the next block's operand rows, a row
// stride apart, which the hardware prefetchers do not run ahead of at large N.
template <typename T>
void prefetch_rows(HeadsView<const T> x, int64_t b, int64_t h, int64_t t0, int64_t n, int64_t hd) {
#if defined(__AVX512F__)
  const int64_t step = 64 / static_cast<int64_t>(sizeof(T));
  for (int64_t r = 0; r < n; ++r) {
    const char* src = reinterpret_cast<const char*>(x.at(b, t0 + r, h));
    for (int64_t e = 0; e < hd; e += step) _mm_prefetch(src + e * sizeof(T), _MM_HINT_T1);
  }
#else
  (void)x, (void)b, (void)h, (void)t0, (void)n, (void)hd;
#endif
}

// The key/value block [j0, j0 + jn) of kv head g: its bias row (key_bias), K and V as tile
// operands (read in place when every key of the block is allowed, else packed with the masked
// rows zeroed), and the next block's rows (up to kend) prefetched. n_ok == 0: no key is allowed.
template <typename T>
struct KvBlock {
  const T* K;
  int64_t ldk;
  const T* V;
  int64_t ldv;
  int64_t n_ok;
};
template <typename T>
KvBlock<T> fetch_kv_block(T* Ks, T* Vs, T* bias, HeadsView<const T> k, HeadsView<const T> v, const Seq& sq, int64_t b,
                          int64_t g, int64_t j0, int64_t jn, int64_t kend, int64_t cols_p, int64_t hd, int64_t hdp) {
  KvBlock<T> kv{nullptr, 0, nullptr, 0, key_bias(bias, sq, j0, jn, cols_p)};
  if (kv.n_ok == 0) return kv;
  kv.K = rows_operand<T>(Ks, kv.ldk, k, b, g, j0, jn, cols_p, hd, hdp, bias, kv.n_ok == jn);
  kv.V = rows_operand<T>(Vs, kv.ldv, v, b, g, j0, jn, cols_p, hd, hdp, bias, kv.n_ok == jn);
  if (j0 + kBc < kend) {
    prefetch_rows<T>(k, b, g, j0 + kBc, std::min(kBc, kend - j0 - kBc), hd);
    prefetch_rows<T>(v, b, g, j0 + kBc, std::min(kBc, kend - j0 - kBc), hd);
  }
  return kv;
}

// Dropout on a tile of probabilities (query rows i0 .. i0 + rows, key slots j0 .. j0 + cols of
// head h): element (r, j) lives at tile[r * ld_r + j * ld_j] and becomes P * scale when kept, 0 when
// dropped (AttentionDropout's rule). The mask is regenerated from the key wherever it is needed;
// `factors` (same layout), when given, receives each element's factor (scale or 0) for reuse.
template <typename T>
void dropout_tile(T* tile, int64_t ld_r, int64_t ld_j, const Ctx& c, int64_t b, int64_t h, int64_t i0, int64_t rows,
                  int64_t j0, int64_t cols, T* factors = nullptr) {
  const T scale = static_cast<T>(c.drop.scale);
  for (int64_t r = 0; r < rows; ++r) {
    const auto base = static_cast<uint64_t>(((b * c.s.n_heads + h) * c.s.n_q + i0 + r) * c.s.n_kv + j0);
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t at = r * ld_r + j * ld_j;
      const T f = dropout_kept(c.drop.key, base + static_cast<uint64_t>(j), c.drop.threshold) ? scale : T(0);
      tile[at] = f == T(0) ? T(0) : tile[at] * f;
      if (factors) factors[at] = f;
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
    using U = typename ScratchBuffer<T>::Unfilled;  // every tile below is written before it is read
    ScratchBuffer<T> QT(0, hd * kBr, U{}), Ks(1, kBc * hdp, U{}), Vs(2, kBc * hdp, U{}), ST(3, kBc * kBr, U{}),
        O(4, kBr * hdp, U{}), mrow(5, kBr, U{}), lrow(6, kBr, U{}), bias(7, kBc, U{}), alpha(8, kBr, U{});
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t b = task / (H * nqb), h = (task / nqb) % H;
      const int64_t qb = nqb - 1 - task % nqb;  // the causal mask makes later blocks heavier: start them first
      const int64_t g = h / c.group;
      const Seq sq = c.seq(b);
      // Queries are the vector dimension of the transposed score tile: padded to kC.
      const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kC);

      pack_cols<T>(QT.data(), kBr, q, b, h, i0, rows, rows_p, hd, scale);
      zero(O.data(), rows_p * hdp);
      std::fill(mrow.begin(), mrow.begin() + rows_p, -kInf<T>);
      std::fill(lrow.begin(), lrow.begin() + rows_p, T(0));

      const int64_t kend = c.key_end(sq, i0 + rows);
      for (int64_t j0 = 0; j0 < kend; j0 += kBc) {
        const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
        const KvBlock<T> kv =
            fetch_kv_block<T>(Ks.data(), Vs.data(), bias.data(), k, v, sq, b, g, j0, jn, kend, cols_p, hd, hdp);
        if (kv.n_ok == 0) continue;
        const T *Kp = kv.K, *Vp = kv.V;
        const int64_t ldk = kv.ldk, ldv = kv.ldv;

        // S^T = K (Q scale)^T, then the softmax down its columns; local key j is allowed for
        // local query i when i >= first + j (causal) and bias[j] == 0.
        tile_gemm<false, false>(ST.data(), kBr, Kp, ldk, QT.data(), kBr, cols_p, rows_p, hd);
        const int64_t first = c.m.causal ? j0 - sq.off - i0 : -(int64_t(1) << 40);
        softmax_cols<T>(ST.data(), kBr, bias.data(), cols_p, rows_p, first, mrow.data(), lrow.data(), alpha.data());
        for (int64_t r = 0; r < rows_p; ++r) {
          if (alpha[r] == T(1)) continue;
          T* o = O.data() + r * hdp;
          const T al = alpha[r];
          for (int64_t e = 0; e < hdp; ++e) o[e] *= al;
        }
        // The row sums l already hold the undropped P; only the product with V sees the mask.
        if (c.drop.active()) dropout_tile<T>(ST.data(), 1, kBr, c, b, h, i0, rows, j0, jn);
        tile_gemm<true, true>(O.data(), hdp, ST.data(), kBr, Vp, ldv, rows_p, hdp, cols_p);  // O += P V
      }

      for (int64_t r = 0; r < rows; ++r) {
        T* dst = out.at(b, i0 + r, h);
        const T* o = O.data() + r * hdp;
        const T l = lrow[r];
        const bool keys = !(l <= T(0));  // l > 0, or NaN (a NaN row stays NaN); 0: no allowed key
        if (keys) {
          const T inv = T(1) / l;
          for (int64_t e = 0; e < hd; ++e) dst[e] = o[e] * inv;
        } else {
          for (int64_t e = 0; e < hd; ++e) dst[e] = T(0);
        }
        if (lse) lse[(b * H + h) * s.n_q + i0 + r] = keys ? mrow[r] + std::log(l) : -kInf<T>;
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
        bool nan = false;
        for (int64_t j = 0; j < n; ++j) nan |= sr[j] != sr[j];
        if (nan) mx = std::numeric_limits<T>::quiet_NaN();  // the row becomes NaN, as in torch
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
      for (int64_t ch = 0; ch < n_chunks; ++ch) M = m_[ch] != m_[ch] || M != M ? m_[ch] + M : std::max(M, m_[ch]);
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
      const bool keys = !(L <= T(0));  // L > 0, or NaN (stays NaN); 0: no allowed key
      if (keys) {
        const T inv = T(1) / L;
        for (int64_t e = 0; e < hd; ++e) dst[e] *= inv;
      } else {
        for (int64_t e = 0; e < hd; ++e) dst[e] = T(0);
      }
      if (lse) lse[bh] = keys ? M + std::log(L) : -kInf<T>;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Backward.

// Per query row of the call, once: lse_use (the saved lse with -inf, a row without keys, turned
// into +inf so every exp gives 0) and D_i = dO_i . O_i (0 for such a row); contiguous
// [B, n_heads, n_q] like lse.
template <typename T>
void row_stats(const Ctx& c, T* lse_use, T* D, const T* lse, HeadsView<const T> dout, HeadsView<const T> out) {
  const AttentionShape& s = c.s;
  const int64_t H = s.n_heads, n = s.batch * H * s.n_q;
#pragma omp parallel for schedule(static) if (enough_work(s))
  for (int64_t x = 0; x < n; ++x) {
    const int64_t b = x / (H * s.n_q), h = (x / s.n_q) % H, i = x % s.n_q;
    const T l = lse[x];
    lse_use[x] = l == -kInf<T> ? kInf<T> : l;
    D[x] = l == -kInf<T> ? T(0) : dot(dout.at(b, i, h), out.at(b, i, h), c.hd);
  }
}

// The rows [i0, i0 + rows) of head h's stats into lse_p[rows_p], D_p[rows_p]; padded rows get +inf
// and 0 (zero probability, zero gradient).
template <typename T>
void block_stats(T* lse_p, T* D_p, const T* lse_use, const T* D, int64_t row0, int64_t rows, int64_t rows_p) {
  for (int64_t r = 0; r < rows_p; ++r) {
    lse_p[r] = r < rows ? lse_use[row0 + r] : kInf<T>;
    D_p[r] = r < rows ? D[row0 + r] : T(0);
  }
}

// Pass 1: dK, dV per key block. Row-major tiles S = Q (K scale)^T and dP = dO V^T against K^T
// (times the scale) and V^T packed once per task, Q and dO read in place where nothing needs
// padding; dV += P^T dO and dK += dS^T Q read P and dS transposed (the scale applied to dK once).
template <typename T>
void backward_dkdv(const Ctx& c, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout, const T* lse_use,
                   const T* Dall, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads, G = s.n_kv_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t nqb = (s.n_q + kBr - 1) / kBr, nkb = (s.n_kv + kBc - 1) / kBc;
  const int64_t n_tasks = s.batch * G * nkb;

#pragma omp parallel if (enough_work(s))
  {
    using U = typename ScratchBuffer<T>::Unfilled;  // every tile below is written before it is read
    ScratchBuffer<T> KT(0, hd * kBc, U{}), VT(1, hd * kBc, U{}), bias(2, kBc, U{}), Qs(3, kBr * hdp, U{}),
        dOs(4, kBr * hdp, U{}), lse_p(5, kBr, U{}), D(6, kBr, U{}), S(7, kBr * kBc, U{}), dP(8, kBr * kBc, U{}),
        dKa(9, kBc * hdp, U{}), dVa(10, kBc * hdp, U{}), F(11, c.drop.active() ? kBr * kBc : 0, U{});
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t b = task / (G * nkb), g = (task / nkb) % G, kb = task % nkb;
      const Seq sq = c.seq(b);
      const int64_t kend = c.key_end(sq, s.n_q), j0 = kb * kBc;
      if (j0 >= kend) continue;
      const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
      if (key_bias(bias.data(), sq, j0, jn, cols_p) == 0) continue;
      pack_cols<T>(KT.data(), kBc, k, b, g, j0, jn, cols_p, hd, scale, bias.data());  // the scale on K here
      pack_cols<T>(VT.data(), kBc, v, b, g, j0, jn, cols_p, hd, T(1), bias.data());
      zero(dKa.data(), cols_p * hdp);
      zero(dVa.data(), cols_p * hdp);
      // The first query row that may see key j0.
      const int64_t i_first = c.m.causal ? std::max<int64_t>(0, j0 - sq.off) : 0;

      for (int64_t h = g * c.group; h < (g + 1) * c.group; ++h) {
        for (int64_t qb = i_first / kBr; qb < nqb; ++qb) {
          const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kR);
          int64_t ldq, ldo;
          const T* Qp = rows_operand<T>(Qs.data(), ldq, q, b, h, i0, rows, rows_p, hd, hdp, nullptr, true);
          const T* dOp = rows_operand<T>(dOs.data(), ldo, dout, b, h, i0, rows, rows_p, hd, hdp, nullptr, true);
          block_stats<T>(lse_p.data(), D.data(), lse_use, Dall, (b * H + h) * s.n_q + i0, rows, rows_p);
          if (i0 + kBr < s.n_q) {
            prefetch_rows<T>(q, b, h, i0 + kBr, std::min(kBr, s.n_q - i0 - kBr), hd);
            prefetch_rows<T>(dout, b, h, i0 + kBr, std::min(kBr, s.n_q - i0 - kBr), hd);
          }

          tile_gemm<false, false>(S.data(), kBc, Qp, ldq, KT.data(), kBc, rows_p, cols_p, hd);    // S
          tile_gemm<false, false>(dP.data(), kBc, dOp, ldo, VT.data(), kBc, rows_p, cols_p, hd);  // dP
          // With dropout the tile above is dP' (the gradient of the dropped P'): dP = dP' * mask * scale.
          if (c.drop.active()) dropout_tile<T>(dP.data(), kBc, 1, c, b, h, i0, rows, j0, jn, F.data());
          for (int64_t r = 0; r < rows_p; ++r) {
            // Row r may read local key j when j <= lim and the key is readable.
            const int64_t lim = c.m.causal ? sq.off + i0 + r - j0 : cols_p;
            ds_line<T>(S.data() + r * kBc, dP.data() + r * kBc, bias.data(), cols_p, 0, lim, &lse_p[r], 0, &D[r], 0,
                       /*dS*/ dP.data() + r * kBc, /*P*/ S.data() + r * kBc);
          }
          // dV += P'^T dO: the dropped probabilities (the factors kept from the dP tile above).
          if (c.drop.active())
            for (int64_t r = 0; r < rows; ++r) {
              T* sr = S.data() + r * kBc;
              const T* fr = F.data() + r * kBc;
              for (int64_t j = 0; j < jn; ++j) sr[j] = fr[j] == T(0) ? T(0) : sr[j] * fr[j];
            }
          tile_gemm<true, true>(dVa.data(), hdp, S.data(), kBc, dOp, ldo, cols_p, hdp, rows_p);  // dV += P^T dO
          tile_gemm<true, true>(dKa.data(), hdp, dP.data(), kBc, Qp, ldq, cols_p, hdp, rows_p);  // dK += dS^T Q
        }
      }
      for (int64_t j = 0; j < jn; ++j) {
        if (bias[j] != T(0)) continue;
        T* dkj = dk.at(b, j0 + j, g);
        T* dvj = dv.at(b, j0 + j, g);
        const T* a = dKa.data() + j * hdp;
        const T* bb = dVa.data() + j * hdp;
        for (int64_t e = 0; e < hd; ++e) {
          dkj[e] += scale * a[e];
          dvj[e] += bb[e];
        }
      }
    }
  }
}

// Pass 2: dQ per query block. Transposed tiles S^T = K (Q scale)^T and dP^T = V dO^T against Q^T
// and dO^T packed once per task; dQ += dS K reads dS transposed.
template <typename T>
void backward_dq(const Ctx& c, HeadsView<T> dq, HeadsView<const T> dout, const T* lse_use, const T* Dall,
                 HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const int64_t nqb = (s.n_q + kBr - 1) / kBr;
  const int64_t n_tasks = s.batch * H * nqb;

#pragma omp parallel if (enough_work(s))
  {
    using U = typename ScratchBuffer<T>::Unfilled;  // every tile below is written before it is read
    ScratchBuffer<T> QT(0, hd * kBr, U{}), dOT(1, hd * kBr, U{}), lse_p(2, kBr, U{}), D(3, kBr, U{}),
        Ks(4, kBc * hdp, U{}), Vs(5, kBc * hdp, U{}), ST(6, kBc * kBr, U{}), dPT(7, kBc * kBr, U{}),
        dQa(8, kBr * hdp, U{}), bias(9, kBc, U{}), zeros(10, kBr, T(0));
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t b = task / (H * nqb), h = (task / nqb) % H, qb = nqb - 1 - task % nqb;
      const int64_t g = h / c.group;
      const Seq sq = c.seq(b);
      // Queries are the vector dimension of the transposed tiles: padded to kC.
      const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kC);
      block_stats<T>(lse_p.data(), D.data(), lse_use, Dall, (b * H + h) * s.n_q + i0, rows, rows_p);
      bool any_row = false;
      for (int64_t r = 0; r < rows; ++r) any_row |= lse_p[r] != kInf<T>;
      if (!any_row) continue;  // every row masked: zero gradient
      pack_cols<T>(QT.data(), kBr, q, b, h, i0, rows, rows_p, hd, scale);
      pack_cols<T>(dOT.data(), kBr, dout, b, h, i0, rows, rows_p, hd, T(1));
      zero(dQa.data(), rows_p * hdp);

      const int64_t kend = c.key_end(sq, i0 + rows);
      for (int64_t j0 = 0; j0 < kend; j0 += kBc) {
        const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
        const KvBlock<T> kv =
            fetch_kv_block<T>(Ks.data(), Vs.data(), bias.data(), k, v, sq, b, g, j0, jn, kend, cols_p, hd, hdp);
        if (kv.n_ok == 0) continue;
        const T *Kp = kv.K, *Vp = kv.V;
        const int64_t ldk = kv.ldk, ldv = kv.ldv;
        tile_gemm<false, false>(ST.data(), kBr, Kp, ldk, QT.data(), kBr, cols_p, rows_p, hd);    // S^T
        tile_gemm<false, false>(dPT.data(), kBr, Vp, ldv, dOT.data(), kBr, cols_p, rows_p, hd);  // dP^T
        if (c.drop.active()) dropout_tile<T>(dPT.data(), 1, kBr, c, b, h, i0, rows, j0, jn);     // dP' -> dP
        for (int64_t j = 0; j < cols_p; ++j) {
          T* dpt = dPT.data() + j * kBr;
          if (bias[j] != T(0)) {  // padding: dS is 0
            zero(dpt, rows_p);
            continue;
          }
          // Local query i may read key j when i >= first.
          const int64_t first = c.m.causal ? j0 + j - sq.off - i0 : -1;
          ds_line<T>(ST.data() + j * kBr, dpt, zeros.data(), rows_p, first, rows_p, lse_p.data(), 1, D.data(), 1,
                     /*dS*/ dpt, nullptr);
        }
        tile_gemm<true, true>(dQa.data(), hdp, dPT.data(), kBr, Kp, ldk, rows_p, hdp, cols_p);  // dQ += dS K
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* dst = dq.at(b, i0 + r, h);
        const T* a = dQa.data() + r * hdp;
        for (int64_t e = 0; e < hd; ++e) dst[e] += scale * a[e];
      }
    }
  }
}

Ctx make_ctx(const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop) {
  validate(s, m);
  TF_CHECK(!drop.active() || (drop.scale > 0 && std::isfinite(drop.scale)),
           "flash attention: dropout scale {} must be positive and finite", drop.scale);
  return {s, m, s.head_dim, round_up(s.head_dim, kC), s.n_heads / s.n_kv_heads, drop};
}

}  // namespace

template <typename T>
void flash_attention_forward(HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                             const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop) {
  const Ctx c = make_ctx(s, m, drop);
  if (s.n_q == 1 && !drop.active())
    forward_decode<T>(c, out, lse, q, k, v);
  else
    forward_tiled<T>(c, out, lse, q, k, v);
}

template <typename T>
void flash_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                              HeadsView<const T> out, const T* lse, HeadsView<const T> q, HeadsView<const T> k,
                              HeadsView<const T> v, const AttentionShape& s, const AttentionMask& m,
                              const AttentionDropout& drop) {
  TF_CHECK(lse != nullptr, "flash_attention_backward: the saved log-sum-exp is required");
  const Ctx c = make_ctx(s, m, drop);
  // The row statistics, shared by both passes (slot 15: the passes number theirs from 0).
  const int64_t n_rows = s.batch * s.n_heads * s.n_q;
  ScratchBuffer<T> stats(15, static_cast<size_t>(2 * n_rows), typename ScratchBuffer<T>::Unfilled{});
  row_stats<T>(c, stats.data(), stats.data() + n_rows, lse, dout, out);
  backward_dkdv<T>(c, dk, dv, dout, stats.data(), stats.data() + n_rows, q, k, v);
  backward_dq<T>(c, dq, dout, stats.data(), stats.data() + n_rows, q, k, v);
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
    const int64_t per_thread = hd * kBr + 2 * kBc * hdp + kBc * kBr + kBr * hdp + 3 * kBr + kBc;
    return t * per_thread * elem_size;
  }
  const int64_t pass1 = 2 * hd * kBc + kBc + 2 * kBr * hdp + 2 * kBr + 2 * kBr * kBc + 2 * kBc * hdp;
  const int64_t pass2 = 2 * hd * kBr + 2 * kBr + 2 * kBc * hdp + 2 * kBc * kBr + kBr * hdp + kBc + kBr;
  const int64_t stats = 2 * s.batch * s.n_heads * s.n_q;  // lse_use and D per query row
  return (t * std::max(pass1, pass2) + stats) * elem_size;
}

template void flash_attention_forward<float>(HeadsView<float>, float*, HeadsView<const float>, HeadsView<const float>,
                                             HeadsView<const float>, const AttentionShape&, const AttentionMask&,
                                             const AttentionDropout&);
template void flash_attention_forward<double>(HeadsView<double>, double*, HeadsView<const double>,
                                              HeadsView<const double>, HeadsView<const double>, const AttentionShape&,
                                              const AttentionMask&, const AttentionDropout&);
template void flash_attention_backward<float>(HeadsView<float>, HeadsView<float>, HeadsView<float>,
                                              HeadsView<const float>, HeadsView<const float>, const float*,
                                              HeadsView<const float>, HeadsView<const float>, HeadsView<const float>,
                                              const AttentionShape&, const AttentionMask&, const AttentionDropout&);
template void flash_attention_backward<double>(HeadsView<double>, HeadsView<double>, HeadsView<double>,
                                               HeadsView<const double>, HeadsView<const double>, const double*,
                                               HeadsView<const double>, HeadsView<const double>,
                                               HeadsView<const double>, const AttentionShape&, const AttentionMask&,
                                               const AttentionDropout&);

}  // namespace tformer
