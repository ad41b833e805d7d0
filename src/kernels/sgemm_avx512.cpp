// AVX-512 sgemm: packing, micro-kernel, the five loops, the thread split. See sgemm_avx512.h for
// the design, the block sizes and why.
#include "kernels/sgemm_avx512.h"

#include "core/scratch.h"

#include <omp.h>

#if defined(__AVX512F__)
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which its -Wmaybe-uninitialized
// and (for the unpack and shuffle intrinsics) -Wuninitialized report once inlined (GCC bug
// 105593, fixed in 13): false positives, silenced for this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#else
#include <cblas.h>
#endif

#include <algorithm>

namespace tformer {

#if defined(__AVX512F__)

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Cache blocking (sgemm_avx512.h explains the sizes).
struct Blocking {
  int64_t kc = 768;   // K per block
  int64_t mc = 168;   // rows of A per packed block
  int64_t nc = 2048;  // columns of B per packed block
};

// Splits [0, n) into ceil(n / limit) equal blocks, each rounded up to a multiple of `unit`.
int64_t even_step(int64_t n, int64_t limit, int64_t unit) { return round_up(ceil_div(n, ceil_div(n, limit)), unit); }

// Rows of a row-major block that the packing routines read together (see pack_a).
constexpr int64_t kPackRows = 8;

// The low n of 16 lanes (n clamped to 0..16).
inline __mmask16 lanes(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// In-place transpose of the 16 x 16 floats held in r[0..15] (row i = r[i]).
inline void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {  // within 128-bit lanes: pairs of rows interleaved
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int g = 0; g < 4; ++g) {  // u[4g + j], 128-bit lane L: column 4L + j of rows 4g..4g+3
    u[4 * g + 0] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
    u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
    u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
    u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {  // gather lane L of u[j], u[4 + j], u[8 + j], u[12 + j]
    const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);  // lanes 0, 2 of each
    const __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);  // lanes 1, 3
    const __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);       // column j      (lane 0)
    r[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);   // column 4 + j  (lane 1)
    r[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);   // column 8 + j  (lane 2)
    r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);  // column 12 + j (lane 3)
  }
}

// Copies `rows` (<= 16) rows of `width` (<= 16) contiguous floats at src, src + ld, ... into
// dst[w * dst_ld + i] for w < width, i < 16 (rows past `rows` as zero), writing `dst_lanes`
// lanes of each of the `width` output rows: a 16 x 16 tile transposed.
inline void transpose_tile(float* dst, int64_t dst_ld, __mmask16 dst_lanes, const float* src, int64_t ld, int64_t rows,
                           int64_t width) {
  __m512 r[16];
  const __mmask16 in = lanes(width);
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(in, src + i * ld) : _mm512_setzero_ps();
  transpose16(r);
  for (int64_t w = 0; w < width; ++w) _mm512_mask_storeu_ps(dst + w * dst_ld, dst_lanes, r[w]);
}

// Packs rows [i0, i0 + m) x columns [k0, k0 + kc) of op(A) into ceil(m / MR) panels of MR rows:
// panel p starts at dst + p * MR * kc and holds [kc][MR] (k major, the MR rows of one k
// adjacent); rows past m are zero.
template <int MR>
void pack_a(float* dst, const float* A, int64_t lda, bool trans_a, int64_t i0, int64_t m, int64_t k0, int64_t kc) {
  static_assert(MR <= 16);
  const __mmask16 out = lanes(MR);
  if (trans_a) {
    // op(A)(i, k) = A[k * lda + i]: row k of the block is m contiguous values. A few rows at a
    // time, each read from start to end across all panels: a handful of sequential streams that
    // the hardware prefetcher follows (one panel at a time would be kc streams of 56 bytes).
    for (int64_t kb = 0; kb < kc; kb += kPackRows) {
      const int64_t kn = std::min(kPackRows, kc - kb);
      for (int64_t p = 0; p < m; p += MR) {
        const __mmask16 in = lanes(m - p);
        const float* s = A + (k0 + kb) * lda + i0 + p;
        float* d = dst + p * kc + kb * MR;
        for (int64_t k = 0; k < kn; ++k) _mm512_mask_storeu_ps(d + k * MR, out, _mm512_maskz_loadu_ps(in, s + k * lda));
      }
    }
    return;
  }
  // op(A)(i, k) = A[i * lda + k]: mr rows per panel, transposed 16 values of k at a time.
  for (int64_t p = 0; p < m; p += MR) {
    const int64_t mr = std::min<int64_t>(MR, m - p);
    const float* s = A + (i0 + p) * lda + k0;
    float* d = dst + p * kc;
    for (int64_t kb = 0; kb < kc; kb += 16)
      transpose_tile(d + kb * MR, MR, out, s + kb, lda, mr, std::min<int64_t>(16, kc - kb));
  }
}

// Packs rows [k0, k0 + kc) x columns [j0, j0 + n) of op(B) into ceil(n / NR) panels of NR
// columns: panel q starts at dst + q * NR * kc and holds [kc][NR]; columns past n are zero.
// dst must be 64-byte aligned.
template <int NV>
void pack_b(float* dst, const float* B, int64_t ldb, bool trans_b, int64_t j0, int64_t n, int64_t k0, int64_t kc) {
  constexpr int NR = 16 * NV;
  if (!trans_b) {
    // op(B)(k, j) = B[k * ldb + j]: row k of the block is n contiguous values; read a few rows
    // at a time from start to end, as in pack_a.
    for (int64_t kb = 0; kb < kc; kb += kPackRows) {
      const int64_t kn = std::min(kPackRows, kc - kb);
      for (int64_t q = 0; q < n; q += NR) {
        __mmask16 in[NV];
        for (int v = 0; v < NV; ++v) in[v] = lanes(n - q - 16 * v);
        const float* s = B + (k0 + kb) * ldb + j0 + q;
        float* d = dst + q * kc + kb * NR;
        for (int64_t k = 0; k < kn; ++k)
          for (int v = 0; v < NV; ++v)
            _mm512_store_ps(d + k * NR + 16 * v, _mm512_maskz_loadu_ps(in[v], s + k * ldb + 16 * v));
      }
    }
    return;
  }
  // op(B)(k, j) = B[j * ldb + k]: nr rows of B per panel, transposed 16 x 16 at a time.
  for (int64_t q = 0; q < n; q += NR) {
    const int64_t nr = std::min<int64_t>(NR, n - q);
    float* d = dst + q * kc;
    for (int v = 0; v < NV; ++v) {
      const int64_t rows = std::clamp<int64_t>(nr - 16 * v, 0, 16);
      const float* s = rows > 0 ? B + (j0 + q + 16 * v) * ldb + k0 : B;  // rows == 0: zeros only
      for (int64_t kb = 0; kb < kc; kb += 16)
        transpose_tile(d + kb * NR + 16 * v, NR, lanes(16), s + kb, ldb, rows, std::min<int64_t>(16, kc - kb));
    }
  }
}

// C[m x n] = alpha * (A panel [kc][MR]) (B panel [kc][NR]) + beta * C, for m <= MR, n <= NR
// (beta == 0: C is not read). The full MR x NR tile is computed in registers; only the C
// accesses are limited to m rows and masked to n columns.
template <int MR, int NV>
inline void micro_kernel(int64_t kc, const float* __restrict a, const float* __restrict b, float* c, int64_t ldc,
                         int64_t m, int64_t n, float alpha, float beta) {
  constexpr int NR = 16 * NV;
  __m512 acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int r = 0; r < MR; ++r) {  // the C tile is wanted at the end: start bringing it in
    if (r < m) {
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(c + r * ldc + NR - 1), _MM_HINT_T0);
    }
  }
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_load_ps(b + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512 ar = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
    a += MR;
    b += NR;
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  __mmask16 cols[NV];
  for (int v = 0; v < NV; ++v) cols[v] = lanes(n - 16 * v);
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= m) break;
    float* cr = c + r * ldc;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 x = _mm512_mul_ps(acc[r][v], va);
      if (beta != 0.0f) x = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(cols[v], cr + 16 * v), vb, x);
      _mm512_mask_storeu_ps(cr + 16 * v, cols[v], x);
    }
  }
}

// The five loops over one slab of C: rows [m0, m1) x columns [n0, n1), all of K. Pack buffers
// are this thread's scratch slots 0 (A) and 1 (B), grown once and reused.
template <int MR, int NV>
void gemm_slab(float* C, int64_t ldc, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
               bool trans_b, int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, float alpha, float beta,
               const Blocking& blk) {
  constexpr int NR = 16 * NV;
  if (m1 <= m0 || n1 <= n0) return;
  const int64_t kc_step = even_step(K, blk.kc, 1);
  const int64_t mc_step = even_step(m1 - m0, blk.mc, MR);
  const int64_t nc_step = even_step(n1 - n0, blk.nc, NR);
  const ScratchBuffer<float> ap(0, static_cast<size_t>(mc_step * kc_step), ScratchBuffer<float>::Unfilled{});
  const ScratchBuffer<float> bp(1, static_cast<size_t>(nc_step * kc_step), ScratchBuffer<float>::Unfilled{});
  for (int64_t jc = n0; jc < n1; jc += nc_step) {
    const int64_t nc = std::min(nc_step, n1 - jc);
    for (int64_t pc = 0; pc < K; pc += kc_step) {
      const int64_t kc = std::min(kc_step, K - pc);
      const float beta_block = pc == 0 ? beta : 1.0f;
      pack_b<NV>(bp.data(), B, ldb, trans_b, jc, nc, pc, kc);
      for (int64_t ic = m0; ic < m1; ic += mc_step) {
        const int64_t mc = std::min(mc_step, m1 - ic);
        pack_a<MR>(ap.data(), A, lda, trans_a, ic, mc, pc, kc);
        for (int64_t jr = 0; jr < nc; jr += NR)
          for (int64_t ir = 0; ir < mc; ir += MR)
            micro_kernel<MR, NV>(kc, ap.data() + ir * kc, bp.data() + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc,
                                 std::min<int64_t>(MR, mc - ir), std::min<int64_t>(NR, nc - jr), alpha, beta_block);
      }
    }
  }
}

// C = beta * C (K == 0 or alpha == 0: no products; as in BLAS, A and B are not read).
void scale_c(float* C, int64_t ldc, int64_t M, int64_t N, float beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

// Splits C into one slab per thread (rows when M >= N, else columns; whole panels each) and runs
// the five loops on each.
template <int MR, int NV>
void sgemm_threads(float* C, int64_t ldc, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                   bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, float beta, const Blocking& blk) {
  constexpr int NR = 16 * NV;
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return scale_c(C, ldc, M, N, beta);
  const bool by_rows = M >= N;
  const int64_t units = by_rows ? ceil_div(M, MR) : ceil_div(N, NR);
  // Below ~1 MFLOP a fork-join costs more than a second thread saves. Measured with the OpenMP
  // threads spinning between regions (libgomp's default while regions follow each other); with
  // OMP_WAIT_POLICY=passive every fork wakes a sleeping thread (~35 us here), which only pays
  // off above ~15 MFLOP, for OpenBLAS as for us.
  const bool small = 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) < 1e6;
  const int64_t want = small || omp_in_parallel() ? 1 : std::min<int64_t>(omp_get_max_threads(), units);
  if (want <= 1) return gemm_slab<MR, NV>(C, ldc, A, lda, trans_a, B, ldb, trans_b, 0, M, 0, N, K, alpha, beta, blk);
#pragma omp parallel num_threads(static_cast <int>(want))
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t u0 = units * t / nt, u1 = units * (t + 1) / nt;
    if (by_rows)
      gemm_slab<MR, NV>(C, ldc, A, lda, trans_a, B, ldb, trans_b, u0 * MR, std::min(M, u1 * MR), 0, N, K, alpha, beta,
                        blk);
    else
      gemm_slab<MR, NV>(C, ldc, A, lda, trans_a, B, ldb, trans_b, 0, M, u0 * NR, std::min(N, u1 * NR), K, alpha, beta,
                        blk);
  }
}

constexpr int kMR = 14;  // micro-tile rows
constexpr int kNV = 2;   // micro-tile columns, in vectors of 16 (NR = 32)

}  // namespace

bool sgemm_avx512_compiled() { return true; }

void sgemm_avx512(float* C, int64_t ldc, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                  bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
  sgemm_threads<kMR, kNV>(C, ldc, A, lda, trans_a, B, ldb, trans_b, M, N, K, alpha, beta, Blocking{});
}

#else  // no AVX-512: OpenBLAS

bool sgemm_avx512_compiled() { return false; }

void sgemm_avx512(float* C, int64_t ldc, const float* A, int64_t lda, bool trans_a, const float* B, int64_t ldb,
                  bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, float beta) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

#endif

}  // namespace tformer
