// Tiled exact attention, the backward: FlashAttention-2's, recomputing the probabilities tile by
// tile from q, k and the saved log-sum-exp. Pass 1 accumulates dK and dV per key block over every
// query head of its group, pass 2 dQ per query block; both recompute the score and dP tiles, in
// exchange for no atomics and no per-thread dQ copies. The tiles, the micro-kernel and the layout
// of each product: flash_attention_tiles.h.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "core/scratch.h"
#include "core/threads.h"
#include "kernels/flash_attention.h"
#include "kernels/flash_attention_tiles.h"

namespace tformer::flash {

namespace {

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
// Lanes j0 + 0..15 with first <= j <= lim, as a mask (first, lim clamped into int32 range).
inline __mmask16 range_mask(int64_t j0, int64_t first, int64_t lim) {
  const __m512i idx = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(j0)),
                                       _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  const int32_t f = static_cast<int32_t>(std::clamp<int64_t>(first, -1, 1 << 20));
  const int32_t l = static_cast<int32_t>(std::clamp<int64_t>(lim, -1, 1 << 20));
  return _mm512_cmpge_epi32_mask(idx, _mm512_set1_epi32(f)) & _mm512_cmple_epi32_mask(idx, _mm512_set1_epi32(l));
}

// ds_line's AVX-512 float version (n a multiple of 16). Same formulas.
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
#endif

// Per query row of the call, once: lse_use (the saved lse with -inf, a row without keys, turned
// into +inf so every exp gives 0) and D_i = dO_i . O_i (0 for such a row); contiguous
// [B, n_heads, n_q] like lse.
template <typename T>
void row_stats(const Ctx& c, T* lse_use, T* D, const T* lse, HeadsView<const T> dout, HeadsView<const T> out) {
  const AttentionShape& s = c.s;
  const int64_t H = s.n_heads, n = s.batch * H * s.n_q;
  parallel_for(n, enough_work(s), [&](int64_t x) {
    const int64_t b = x / (H * s.n_q), h = (x / s.n_q) % H, i = x % s.n_q;
    const T l = lse[x];
    lse_use[x] = l == -kInf<T> ? kInf<T> : l;
    D[x] = l == -kInf<T> ? T(0) : dot(dout.at(b, i, h), out.at(b, i, h), c.hd);
  });
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

  parallel_region(enough_work(s), [&] {
    using U = typename ScratchBuffer<T>::Unfilled;  // every tile below is written before it is read
    ScratchBuffer<T> KT(0, hd * kBc, U{}), VT(1, hd * kBc, U{}), bias(2, kBc, U{}), Qs(3, kBr * hdp, U{}),
        dOs(4, kBr * hdp, U{}), lse_p(5, kBr, U{}), D(6, kBr, U{}), S(7, kBr * kBc, U{}), dP(8, kBr * kBc, U{}),
        dKa(9, kBc * hdp, U{}), dVa(10, kBc * hdp, U{}), F(11, c.drop.active() ? kBr * kBc : 0, U{});
    for_dynamic(n_tasks, [&](int64_t task) {
      const int64_t b = task / (G * nkb), g = (task / nkb) % G, kb = task % nkb;
      const Seq sq = c.seq(b);
      const int64_t kend = c.key_end(sq, s.n_q), j0 = kb * kBc;
      if (j0 >= kend) return;
      const int64_t jn = std::min(kBc, kend - j0), cols_p = round_up(jn, kC);
      if (key_bias(bias.data(), sq, j0, jn, cols_p) == 0) return;
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
    });
  });
}

// Pass 2: dQ per query block. Transposed tiles S^T = K (Q scale)^T and dP^T = V dO^T against Q^T
// and dO^T packed once per task; dQ += dS K reads dS transposed.
template <typename T>
void backward_dq(const Ctx& c, HeadsView<T> dq, HeadsView<const T> dout, const T* lse_use, const T* Dall,
                 HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v) {
  const AttentionShape& s = c.s;
  const int64_t hd = c.hd, hdp = c.hdp, H = s.n_heads;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const QueryBlockTasks tasks(s);

  parallel_region(enough_work(s), [&] {
    using U = typename ScratchBuffer<T>::Unfilled;  // every tile below is written before it is read
    ScratchBuffer<T> QT(0, hd * kBr, U{}), dOT(1, hd * kBr, U{}), lse_p(2, kBr, U{}), D(3, kBr, U{}),
        Ks(4, kBc * hdp, U{}), Vs(5, kBc * hdp, U{}), ST(6, kBc * kBr, U{}), dPT(7, kBc * kBr, U{}),
        dQa(8, kBr * hdp, U{}), bias(9, kBc, U{}), zeros(10, kBr, T(0));
    for_dynamic(tasks.count, [&](int64_t task) {
      const auto [b, h, qb] = tasks[task];
      const int64_t g = h / c.group;
      const Seq sq = c.seq(b);
      // Queries are the vector dimension of the transposed tiles: padded to kC.
      const int64_t i0 = qb * kBr, rows = std::min(kBr, s.n_q - i0), rows_p = round_up(rows, kC);
      block_stats<T>(lse_p.data(), D.data(), lse_use, Dall, (b * H + h) * s.n_q + i0, rows, rows_p);
      bool any_row = false;
      for (int64_t r = 0; r < rows; ++r) any_row |= lse_p[r] != kInf<T>;
      if (!any_row) return;  // every row masked: zero gradient
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
    });
  });
}

}  // namespace

}  // namespace tformer::flash

namespace tformer {

template <typename T>
void flash_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                              HeadsView<const T> out, const T* lse, HeadsView<const T> q, HeadsView<const T> k,
                              HeadsView<const T> v, const AttentionShape& s, const AttentionMask& m,
                              const AttentionDropout& drop) {
  TF_CHECK(lse != nullptr, "flash_attention_backward: the saved log-sum-exp is required");
  const flash::Ctx c = flash::make_ctx(s, m, drop);
  // The row statistics, shared by both passes (slot 15: the passes number theirs from 0).
  const int64_t n_rows = s.batch * s.n_heads * s.n_q;
  ScratchBuffer<T> stats(15, static_cast<size_t>(2 * n_rows), typename ScratchBuffer<T>::Unfilled{});
  flash::row_stats<T>(c, stats.data(), stats.data() + n_rows, lse, dout, out);
  flash::backward_dkdv<T>(c, dk, dv, dout, stats.data(), stats.data() + n_rows, q, k, v);
  flash::backward_dq<T>(c, dq, dout, stats.data(), stats.data() + n_rows, q, k, v);
}

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
