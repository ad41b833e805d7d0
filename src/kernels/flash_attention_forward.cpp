// Tiled exact attention, the forward: FlashAttention's online softmax over 64-key blocks for each
// 64-row query block, one task per (batch, head, query block); the entry point, which hands one
// query row without dropout to the decode path (flash_attention_decode.cpp); and the kernels'
// workspace. The tiles, the micro-kernel and the layout of each product: flash_attention_tiles.h.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/scratch.h"
#include "core/threads.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_tiles.h"

namespace tformer::flash {

namespace {

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

#if defined(__AVX512F__)
// Its AVX-512 float version (nq a multiple of 16, the queries in vectors). Same formulas; only the
// summation order of the row sums differs from the generic loop.
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
#endif

// ---------------------------------------------------------------------------------------------
// Forward, general path.

template <typename T>
void forward_tiled(const Ctx& c, HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k,
                   HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const QueryBlockTasks tasks(s);

  parallel_region(enough_work(s), [&] {
    using U = typename ScratchBuffer<T>::Unfilled;  // every tile below is written before it is read
    ScratchBuffer<T> QT(0, hd * kBr, U{}), Ks(1, kBc * hdp, U{}), Vs(2, kBc * hdp, U{}), ST(3, kBc * kBr, U{}),
        O(4, kBr * hdp, U{}), mrow(5, kBr, U{}), lrow(6, kBr, U{}), bias(7, kBc, U{}), alpha(8, kBr, U{});
    for_dynamic(tasks.count, [&](int64_t task) {
      const auto [b, h, qb] = tasks[task];
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
    });
  });
}

}  // namespace

}  // namespace tformer::flash

namespace tformer {

template <typename T>
void flash_attention_forward(HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                             const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop) {
  const flash::Ctx c = flash::make_ctx(s, m, drop);
  if (s.n_q == 1 && !drop.active())
    flash::forward_decode<T>(c, out, lse, q, k, v);
  else
    flash::forward_tiled<T>(c, out, lse, q, k, v);
}

// The per-thread tiles and partial states of flash_attention_forward (tiled and decode paths) and
// flash_attention_backward (both passes and the row statistics).
int64_t flash_attention_workspace_bytes(const AttentionShape& s, int64_t elem_size, int threads, bool backward) {
  using flash::kBc, flash::kBr, flash::kC, flash::kDecodeChunk, flash::round_up;
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

}  // namespace tformer
