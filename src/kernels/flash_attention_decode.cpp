// Tiled exact attention, the decode path: one query row per sequence (n_q == 1, no dropout), the
// keys split into fixed chunks and the partial softmax states merged in chunk order.
//
// Decode (n_q == 1): the keys are cut into fixed chunks of kDecodeChunk = 256 (independent of the
// thread count), one task per (batch, kv head, chunk) computes the chunk's partial softmax state
// (max, sum, unnormalised accumulator) for every query head of the group, reading each key and
// value once for the whole group; the states are then merged per (batch, head) in chunk order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/scratch.h"
#include "core/threads.h"
#include "kernels/flash_attention_tiles.h"

namespace tformer::flash {

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

  parallel_region(parallel, [&] {
    ScratchBuffer<T> qs(3, group * hd), sc(4, group * kDecodeChunk), acc(5, group * hd);  // 0-2: above
    for_dynamic(s.batch * G * n_chunks, [&](int64_t task) {
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
        return;
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
    });

    // Merge the chunks of each (b, h) in chunk order.
    for_static(s.batch * H, [&](int64_t bh) {
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
    });
  });
}

}  // namespace tformer::flash

namespace tformer {

template <typename T>
void flash_attention_reserve(const AttentionShape& s) {
  const int64_t n_chunks = (s.n_kv + flash::kDecodeChunk - 1) / flash::kDecodeChunk;
  const auto n = static_cast<size_t>(s.batch * s.n_heads * n_chunks);
  using U = typename ScratchBuffer<T>::Unfilled;
  // The calling thread's slots 0-2, as forward_decode takes them.
  const ScratchBuffer<T> pm(0, n, U{}), pl(1, n, U{}), pacc(2, n * static_cast<size_t>(s.head_dim), U{});
}
template void flash_attention_reserve<float>(const AttentionShape&);
template void flash_attention_reserve<double>(const AttentionShape&);

}  // namespace tformer

namespace tformer::flash {

template void forward_decode<float>(const Ctx&, HeadsView<float>, float*, HeadsView<const float>,
                                    HeadsView<const float>, HeadsView<const float>);
template void forward_decode<double>(const Ctx&, HeadsView<double>, double*, HeadsView<const double>,
                                     HeadsView<const double>, HeadsView<const double>);

}  // namespace tformer::flash
