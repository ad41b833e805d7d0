// The reference attention: every score of every row is materialised, one (batch, head) at a time.
// Plain loops, double accumulation, fixed summation order; it is the oracle, not the fast path.
//
// Masked keys are never read: a disallowed slot (future, past kv_len, padding) contributes neither
// its key nor its value, so an empty KV-cache slot may hold anything (even NaN) without effect.
//
// Threads: the forward splits (b, h) across threads, the backward (b, kv head); every output
// element is written by exactly one thread in a fixed order, so results do not depend on the
// thread count.
#include "kernels/attention.h"

#include "core/scratch.h"
#include "core/threads.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/rng.h"

namespace tformer {

void validate(const AttentionShape& s, const AttentionMask& m) {
  TF_CHECK(s.batch > 0 && s.n_q > 0 && s.n_kv > 0 && s.n_heads > 0 && s.n_kv_heads > 0 && s.head_dim > 0,
           "attention: sizes must be positive (batch {}, n_q {}, n_kv {}, n_heads {}, n_kv_heads {}, head_dim {})",
           s.batch, s.n_q, s.n_kv, s.n_heads, s.n_kv_heads, s.head_dim);
  TF_CHECK(s.n_heads % s.n_kv_heads == 0, "attention: n_kv_heads {} does not divide n_heads {}", s.n_kv_heads,
           s.n_heads);
  if (m.key_valid) {
    TF_CHECK(m.n_kv == s.n_kv, "attention: key_valid row stride {} != n_kv {}", m.n_kv, s.n_kv);
  }
  for (int64_t b = 0; b < s.batch; ++b) {
    if (m.q_offset) TF_CHECK(m.q_offset[b] >= 0, "attention: q_offset[{}] = {} is negative", b, m.q_offset[b]);
    if (m.kv_len) {
      TF_CHECK(m.kv_len[b] >= 0 && m.kv_len[b] <= s.n_kv, "attention: kv_len[{}] = {} outside [0, n_kv = {}]", b,
               m.kv_len[b], s.n_kv);
    }
  }
}

namespace {

template <typename T>
double dot(const T* a, const T* b, int64_t n) {
  double acc = 0;
  for (int64_t d = 0; d < n; ++d) acc += static_cast<double>(a[d]) * static_cast<double>(b[d]);
  return acc;
}

// Threads only when the call is big enough to pay for waking them (tiny test shapes and short
// decode steps run on the calling thread; the result is the same either way).
bool enough_work(const AttentionShape& s) {
  return s.batch * s.n_heads * s.n_q * s.n_kv * s.head_dim >= (int64_t(1) << 15);
}

}  // namespace

namespace {
// The factor probability (b, h, i, j) carries into the output: 1 without dropout, else 0 or 1/(1-p).
double dropout_factor(const AttentionDropout& drop, const AttentionShape& s, int64_t b, int64_t h, int64_t i,
                      int64_t j) {
  if (!drop.active()) return 1.0;
  const auto index = static_cast<uint64_t>(((b * s.n_heads + h) * s.n_q + i) * s.n_kv + j);
  return dropout_kept(drop.key, index, drop.threshold) ? drop.scale : 0.0;
}
}  // namespace

template <typename T>
void attention_forward(HeadsView<T> out, T* probs, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                       const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop) {
  validate(s, m);
  const int64_t hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();

  const bool parallel = enough_work(s);
  parallel_for(s.batch * s.n_heads, parallel, [&](int64_t task) {
    const int64_t b = task / s.n_heads, h = task % s.n_heads;
    const int64_t g = h / group;                              // the kv head this query head reads
    ScratchBuffer<double> p(0, static_cast<size_t>(s.n_kv));  // per-thread, reused across calls
    ScratchBuffer<double> acc(1, static_cast<size_t>(hd));
    for (int64_t i = 0; i < s.n_q; ++i) {
      const T* qi = q.at(b, i, h);
      // Scores; a disallowed key gets -infinity before softmax (and is not read).
      double max_score = kNegInf;
      bool nan = false;
      for (int64_t j = 0; j < s.n_kv; ++j) {
        p[j] = m.allowed(b, i, j) ? dot(qi, k.at(b, j, g), hd) * scale : kNegInf;
        if (p[j] > max_score) max_score = p[j];
        nan |= std::isnan(p[j]);
      }
      // A NaN score (a NaN or infinite q or k) makes the whole row NaN, as torch's softmax does;
      // so does a +infinite one (exp(inf - inf)).
      if (nan) max_score = std::numeric_limits<double>::quiet_NaN();
      // Softmax over the allowed scores. max_score is -infinity only when no key is allowed:
      // that row's policy is all-zero weights and a zero output.
      const bool any_allowed = max_score != kNegInf;
      double sum = 0;
      for (int64_t j = 0; j < s.n_kv; ++j) {
        p[j] = (any_allowed && p[j] != kNegInf) ? std::exp(p[j] - max_score) : 0.0;
        sum += p[j];
      }
      if (any_allowed) {
        for (int64_t j = 0; j < s.n_kv; ++j) p[j] /= sum;
      }
      if (probs) {
        T* prow = probs + ((b * s.n_heads + h) * s.n_q + i) * s.n_kv;
        for (int64_t j = 0; j < s.n_kv; ++j) prow[j] = static_cast<T>(p[j]);
      }
      // out_i = sum_j P'_ij v_j over the allowed j (P' = P with dropout's mask and scale).
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t j = 0; j < s.n_kv; ++j) {
        if (!m.allowed(b, i, j)) continue;
        const double pj = drop.active() ? p[j] * dropout_factor(drop, s, b, h, i, j) : p[j];
        const T* vj = v.at(b, j, g);
        for (int64_t d = 0; d < hd; ++d) acc[d] += pj * static_cast<double>(vj[d]);
      }
      T* oi = out.at(b, i, h);
      for (int64_t d = 0; d < hd; ++d) oi[d] = static_cast<T>(acc[d]);
    }
  });
}

// The forward, restated (per batch b, query head h, kv head g = h / (n_heads / n_kv_heads)):
//   S_ij = q_i . k_j / sqrt(hd)              for allowed j, -infinity otherwise
//   P_ij = exp(S_ij - max_j S_ij) / sum_j exp(S_ij - max_j S_ij)   (row of zeros if none allowed)
//   o_i  = sum_j P_ij v_j
// and its gradient, from the saved P:
//   dV_j += sum_i P'_ij dO_i                 P'_ij = P_ij M_ij (M: dropout's 0 or 1/(1-p); 1 without)
//   dP_ij = (dO_i . V_j) M_ij
//   dS_ij = P_ij (dP_ij - sum_j' P_ij' dP_ij')
//   dQ_i += scale * sum_j dS_ij K_j
//   dK_j += scale * sum_i dS_ij Q_i
// The sums over i and over the query heads of one group are accumulated in double, per kv head,
// then added once to dk and dv.
template <typename T>
void attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout, const T* probs,
                        HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const AttentionShape& s,
                        const AttentionMask& m, const AttentionDropout& drop) {
  validate(s, m);
  TF_CHECK(probs != nullptr, "attention_backward: the saved probabilities are required");
  const int64_t hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));

  const bool parallel = enough_work(s);
  parallel_for(s.batch * s.n_kv_heads, parallel, [&](int64_t task) {
    const int64_t b = task / s.n_kv_heads, g = task % s.n_kv_heads;
    ScratchBuffer<double> dk_acc(0, static_cast<size_t>(s.n_kv * hd));  // per-thread, zeroed, reused
    ScratchBuffer<double> dv_acc(1, static_cast<size_t>(s.n_kv * hd));
    ScratchBuffer<double> ds(2, static_cast<size_t>(s.n_kv));
    ScratchBuffer<double> dq_acc(3, static_cast<size_t>(hd));
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      for (int64_t i = 0; i < s.n_q; ++i) {
        const T* prow = probs + ((b * s.n_heads + h) * s.n_q + i) * s.n_kv;
        const T* doi = dout.at(b, i, h);
        const T* qi = q.at(b, i, h);
        // dP_ij and the row's sum_j P_ij dP_ij (only allowed keys are read).
        double row_dot = 0;
        for (int64_t j = 0; j < s.n_kv; ++j) {
          ds[j] = m.allowed(b, i, j) ? dot(doi, v.at(b, j, g), hd) * dropout_factor(drop, s, b, h, i, j) : 0.0;
          row_dot += static_cast<double>(prow[j]) * ds[j];
        }
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (int64_t j = 0; j < s.n_kv; ++j) {
          if (!m.allowed(b, i, j)) continue;
          const double pij = static_cast<double>(prow[j]);
          const double dsij = pij * (ds[j] - row_dot);
          const double pdrop = drop.active() ? pij * dropout_factor(drop, s, b, h, i, j) : pij;
          const T* kj = k.at(b, j, g);
          double* dkj = dk_acc.data() + j * hd;
          double* dvj = dv_acc.data() + j * hd;
          for (int64_t d = 0; d < hd; ++d) {
            dq_acc[d] += dsij * static_cast<double>(kj[d]);
            dkj[d] += dsij * static_cast<double>(qi[d]);
            dvj[d] += pdrop * static_cast<double>(doi[d]);
          }
        }
        T* dqi = dq.at(b, i, h);
        for (int64_t d = 0; d < hd; ++d) dqi[d] += static_cast<T>(scale * dq_acc[d]);
      }
    }
    for (int64_t j = 0; j < s.n_kv; ++j) {
      T* dkj = dk.at(b, j, g);
      T* dvj = dv.at(b, j, g);
      for (int64_t d = 0; d < hd; ++d) {
        dkj[d] += static_cast<T>(scale * dk_acc[j * hd + d]);
        dvj[d] += static_cast<T>(dv_acc[j * hd + d]);
      }
    }
  });
}

template <typename T>
void attention_reserve(const AttentionShape& s) {
  // Slots 0 and 1 of each thread, as attention_forward takes them.
  parallel_region(true, [&] {
    const ScratchBuffer<double> p(0, static_cast<size_t>(s.n_kv)), acc(1, static_cast<size_t>(s.head_dim));
  });
}
template void attention_reserve<float>(const AttentionShape&);
template void attention_reserve<double>(const AttentionShape&);

template void attention_forward<float>(HeadsView<float>, float*, HeadsView<const float>, HeadsView<const float>,
                                       HeadsView<const float>, const AttentionShape&, const AttentionMask&,
                                       const AttentionDropout&);
template void attention_forward<double>(HeadsView<double>, double*, HeadsView<const double>, HeadsView<const double>,
                                        HeadsView<const double>, const AttentionShape&, const AttentionMask&,
                                        const AttentionDropout&);
template void attention_backward<float>(HeadsView<float>, HeadsView<float>, HeadsView<float>, HeadsView<const float>,
                                        const float*, HeadsView<const float>, HeadsView<const float>,
                                        HeadsView<const float>, const AttentionShape&, const AttentionMask&,
                                        const AttentionDropout&);
template void attention_backward<double>(HeadsView<double>, HeadsView<double>, HeadsView<double>,
                                         HeadsView<const double>, const double*, HeadsView<const double>,
                                         HeadsView<const double>, HeadsView<const double>, const AttentionShape&,
                                         const AttentionMask&, const AttentionDropout&);

}  // namespace tformer
