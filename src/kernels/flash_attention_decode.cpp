// Tiled exact attention, the decode path: one query row per sequence (n_q == 1, no dropout), the
// keys split into fixed chunks and the partial softmax states merged in chunk order.
//
// Decode (n_q == 1): the keys are cut into fixed chunks of kDecodeChunk = 256 (independent of the
// thread count), one task per (batch, kv head, chunk) computes the chunk's partial softmax state
// (max, sum, unnormalised accumulator) for every query head of the group, reading each key and
// value once for the whole group (the float AVX-512 path, below, takes the group's heads one after
// another, the chunk's rows then coming from the L2 cache for the second and later heads); the
// states are then merged per (batch, head) in chunk order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "core/scratch.h"
#include "core/threads.h"
#include "kernels/flash_attention_tiles.h"

namespace tformer::flash {

#if defined(__AVX512F__)
// One task's chunk in float with AVX-512, for head sizes of 16 to 128 in steps of 16 and no
// key_valid row: the generic loops below reduced each score's 16 lanes through a chain of scalar
// adds from the stack (GCC's omp simd reduction), and waited on every key and value row that the
// step's weight reads had pushed out of the caches (perf of a 110M decode on a Zen 4: attention
// 11% of the step at 129 keys). Here each score is a register reduction, four keys at a time,
// with the key and value rows prefetched a few keys ahead; the softmax state and the accumulator
// leave in the generic path's form. scores: [group][kDecodeChunk], max / sum / acc at
// slot0 + hh * slot_step (acc: times hd).
constexpr int64_t kPrefetchKeys = 8;
template <int NV>
void decode_chunk_avx512(const float* qs, int64_t group, const float* k0, const float* v0, int64_t row_stride,
                         int64_t n, float* scores, float* pm, float* pl, float* pacc, int64_t slot0,
                         int64_t slot_step) {
  constexpr int64_t hd = 16 * NV;
  auto prefetch_row = [&](const float* row) {
    for (int v = 0; v < NV; ++v) _mm_prefetch(reinterpret_cast<const char*>(row + 16 * v), _MM_HINT_T0);
  };
  for (int64_t j = 0; j < std::min(n, kPrefetchKeys); ++j) prefetch_row(k0 + j * row_stride);
  for (int64_t hh = 0; hh < group; ++hh) {
    __m512 q[NV];
    for (int v = 0; v < NV; ++v) q[v] = _mm512_loadu_ps(qs + hh * hd + 16 * v);
    float* sr = scores + hh * kDecodeChunk;
    auto score = [&](int64_t j) {
      const float* kj = k0 + j * row_stride;
      __m512 a = _mm512_mul_ps(q[0], _mm512_loadu_ps(kj));
      for (int v = 1; v < NV; ++v) a = _mm512_fmadd_ps(q[v], _mm512_loadu_ps(kj + 16 * v), a);
      return a;
    };
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
      if (hh == 0)
        for (int64_t t = j; t < j + 4; ++t) {
          if (t + kPrefetchKeys < n) prefetch_row(k0 + (t + kPrefetchKeys) * row_stride);
          prefetch_row(v0 + t * row_stride);  // read after the softmax
        }
      const __m512 a0 = score(j), a1 = score(j + 1), a2 = score(j + 2), a3 = score(j + 3);
      sr[j] = _mm512_reduce_add_ps(a0);
      sr[j + 1] = _mm512_reduce_add_ps(a1);
      sr[j + 2] = _mm512_reduce_add_ps(a2);
      sr[j + 3] = _mm512_reduce_add_ps(a3);
    }
    for (; j < n; ++j) {
      if (hh == 0) prefetch_row(v0 + j * row_stride);
      sr[j] = _mm512_reduce_add_ps(score(j));
    }
    float mx = -kInf<float>;
    bool nan = false;
    for (j = 0; j < n; ++j) {
      mx = sr[j] > mx ? sr[j] : mx;
      nan |= sr[j] != sr[j];
    }
    if (nan) mx = std::numeric_limits<float>::quiet_NaN();  // the row becomes NaN, as in torch
    const int64_t slot = slot0 + hh * slot_step;
    pm[slot] = mx;
    float sum = 0;
    __m512 acc[NV];
    for (auto& a : acc) a = _mm512_setzero_ps();
    if (mx != -kInf<float>) {
      const __m512 m = _mm512_set1_ps(mx);
      __m512 s16 = _mm512_setzero_ps();
      for (j = 0; j < n; j += 16) {
        const auto mask = static_cast<__mmask16>(n - j >= 16 ? 0xFFFF : (1u << (n - j)) - 1);
        const __m512 p = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, sr + j), m));
        _mm512_mask_storeu_ps(sr + j, mask, p);
        s16 = _mm512_add_ps(s16, _mm512_maskz_mov_ps(mask, p));
      }
      sum = _mm512_reduce_add_ps(s16);
      for (j = 0; j < n; ++j) {
        const __m512 p = _mm512_set1_ps(sr[j]);
        const float* vj = v0 + j * row_stride;
        for (int v = 0; v < NV; ++v) acc[v] = _mm512_fmadd_ps(p, _mm512_loadu_ps(vj + 16 * v), acc[v]);
      }
    }
    pl[slot] = sum;
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(pacc + slot * hd + 16 * v, acc[v]);
  }
}

template <int NV = 1>
bool decode_chunk_fast(int64_t hd, const float* qs, int64_t group, const float* k0, const float* v0, int64_t row_stride,
                       int64_t n, float* scores, float* pm, float* pl, float* pacc, int64_t slot0, int64_t slot_step) {
  if constexpr (NV > 8) {
    return false;
  } else {
    if (hd != 16 * NV)
      return decode_chunk_fast<NV + 1>(hd, qs, group, k0, v0, row_stride, n, scores, pm, pl, pacc, slot0, slot_step);
    decode_chunk_avx512<NV>(qs, group, k0, v0, row_stride, n, scores, pm, pl, pacc, slot0, slot_step);
    return true;
  }
}
#endif

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
#if defined(__AVX512F__)
      if constexpr (std::is_same_v<T, float>) {
        // (k and v share strides: both are the cache's views, or both the chunk's own layout)
        if (!sq.valid && k.stride_t == v.stride_t &&
            decode_chunk_fast(hd, qs.data(), group, k.at(b, c0, g), v.at(b, c0, g), k.stride_t, n, sc.data(), pm.data(),
                              pl.data(), pacc.data(), slot(0), n_chunks))
          return;
      }
#endif
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
