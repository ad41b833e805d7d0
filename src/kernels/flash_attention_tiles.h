// Tiled exact attention (FlashAttention's algorithm on the CPU), the pieces its passes share:
// the tile sizes, the micro-kernel and tile products, operand packing, the mask facts of a call and
// dropout on a tile. The passes: flash_attention_forward.cpp (online softmax over key blocks),
// flash_attention_decode.cpp (one query row: split keys), flash_attention_backward.cpp
// (FlashAttention-2's recomputing backward). See flash_attention.h for the contract; the reference
// kernel (attention.cpp) is the oracle the tests compare against. Internal to those files.
//
// Tiles. A query block of kBr = 64 rows meets a key block of kBc = 64 keys. With head width 64 in
// float, each tile operand is 64 x 64 x 4 B = 16 KB: the forward's working set per key block is
// Q^T (16 KB, stays), K (16 KB), V (16 KB), the score tile S^T (16 KB) and the output accumulator
// O (16 KB). Each product streams rows of one operand against the other, reused one (16 KB), which
// with a few rows fits a Zen 5 core's 48 KB L1d; the whole working set (~80 KB, ~160 KB in the
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
// forward), so where the build has AVX-512 (__AVX512F__, the default -march=native build on a
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
#pragma once

#include "kernels/attention.h"
#include "kernels/fast_math.h"
#include "kernels/flash_attention.h"

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which its -Wmaybe-uninitialized
// reports once inlined: a false positive (GCC 13 no longer reports it), silenced for the files
// that include this header (the flash attention passes).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/error.h"
#include "core/rng.h"

namespace tformer::flash {

constexpr int64_t kBr = 64;  // query rows per block
constexpr int64_t kBc = 64;  // keys per block
constexpr int64_t kR = 8;    // micro-kernel rows
constexpr int64_t kC = 16;   // micro-kernel columns
constexpr int64_t kDecodeChunk = 256;

inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

template <typename T>
inline constexpr T kInf = std::numeric_limits<T>::infinity();

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

#if defined(__AVX512F__)
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

// The tasks of a pass over query blocks (the forward, the backward's dQ): one per sequence, head
// and block of kBr queries, the last block of each (batch, head) first, since the causal mask
// makes later blocks heavier.
struct QueryBlockTask {
  int64_t b, h, qb;  // sequence, head, query block
};
struct QueryBlockTasks {
  int64_t n_heads, n_blocks, count;
  explicit QueryBlockTasks(const AttentionShape& s)
      : n_heads(s.n_heads), n_blocks((s.n_q + kBr - 1) / kBr), count(s.batch * s.n_heads * n_blocks) {}
  QueryBlockTask operator[](int64_t task) const {
    return {task / (n_heads * n_blocks), (task / n_blocks) % n_heads, n_blocks - 1 - task % n_blocks};
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

inline bool enough_work(const AttentionShape& s) {
  return s.batch * s.n_heads * s.n_q * s.n_kv * s.head_dim >= (int64_t(1) << 15);
}

inline Ctx make_ctx(const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop) {
  validate(s, m);
  TF_CHECK(!drop.active() || (drop.scale > 0 && std::isfinite(drop.scale)),
           "flash attention: dropout scale {} must be positive and finite", drop.scale);
  return {s, m, s.head_dim, round_up(s.head_dim, kC), s.n_heads / s.n_kv_heads, drop};
}

// The decode path (flash_attention_decode.cpp), taken by flash_attention_forward for one query row
// without dropout.
template <typename T>
void forward_decode(const Ctx& c, HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k,
                    HeadsView<const T> v);

}  // namespace tformer::flash
