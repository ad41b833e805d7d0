// Rotary position embedding. The angle pos * theta_i, its cosine and sine, and the rotation are
// computed in double even for float data: at position 10^5 a float angle would already be off by
// about 4e-3 rad.
#include "kernels/rope.h"

#include "core/scratch.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/threads.h"

namespace tformer {

namespace {

void check_rope_args(const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t row_stride,
                     const RopeParams& p) {
  TF_CHECK(p.head_dim > 0 && p.head_dim % 2 == 0, "rope: head_dim {} must be positive and even", p.head_dim);
  TF_CHECK(p.base > 0 && std::isfinite(p.base), "rope: base {} must be positive", p.base);
  TF_CHECK(n_tokens >= 0 && n_heads > 0, "rope: n_tokens {} / n_heads {} out of range", n_tokens, n_heads);
  TF_CHECK(row_stride >= n_heads * p.head_dim, "rope: row_stride {} < n_heads {} * head_dim {}", row_stride, n_heads,
           p.head_dim);
  TF_CHECK(n_tokens == 0 || positions != nullptr, "rope: positions are required");
  for (int64_t t = 0; t < n_tokens; ++t) {
    TF_CHECK(positions[t] >= 0, "rope: position {} of token {} is negative", positions[t], t);
  }
}

// The cosines and sines of one position's angles, as the last call on this thread computed them:
// a decode step rotates q and k at one position in every layer (24 calls a token for the 110M
// shape, each a pow, a cos and a sin per pair in double: 40 us of a token on a Zen 4), so all but
// the first reuse them. Serial calls only (rotate's one-token calls): a parallel pass computes
// its own, as before. The same computation either way, so the same bits.
struct RopeAngles {
  double base = 0, pos = -1, sign = 0;
  int64_t head_dim = 0;
  std::vector<double> cos, sin;  // [head_dim / 2]; grown once, then reused
};

const RopeAngles& rope_angles(const RopeParams& p, const double* theta, double pos, double sign) {
  thread_local RopeAngles last;
  if (last.base == p.base && last.head_dim == p.head_dim && last.pos == pos && last.sign == sign) return last;
  const int64_t half = p.head_dim / 2;
  last.head_dim = 0;  // (invalid until filled)
  last.cos.resize(static_cast<size_t>(half));
  last.sin.resize(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double angle = sign * pos * theta[i];
    last.cos[static_cast<size_t>(i)] = std::cos(angle);
    last.sin[static_cast<size_t>(i)] = std::sin(angle);
  }
  last.base = p.base;
  last.head_dim = p.head_dim;
  last.pos = pos;
  last.sign = sign;
  return last;
}

// Rotates every pair of every head of every token by sign * pos * theta_i.
template <typename T>
void rotate(T* x, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t row_stride, const RopeParams& p,
            double sign) {
  check_rope_args(positions, n_tokens, n_heads, row_stride, p);
  const int64_t hd = p.head_dim, half = hd / 2;
  ScratchBuffer<double> theta(0, static_cast<size_t>(half));  // [half], reused: no allocation per call
  for (int64_t i = 0; i < half; ++i) {
    theta[i] = std::pow(p.base, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  }
  // Pair i is (x[a], x[b]) with a = 2i, b = 2i + 1 (Adjacent) or a = i, b = i + hd/2 (Halves).
  const bool adjacent = p.pairing == RopePairing::Adjacent;
  auto rotate_pair = [&](int64_t t, int64_t i, double c, double s) {
    const int64_t a = adjacent ? 2 * i : i;
    const int64_t b = adjacent ? 2 * i + 1 : i + half;
    for (int64_t h = 0; h < n_heads; ++h) {
      T* head = x + t * row_stride + h * hd;
      const double xa = static_cast<double>(head[a]), xb = static_cast<double>(head[b]);
      head[a] = static_cast<T>(xa * c - xb * s);
      head[b] = static_cast<T>(xa * s + xb * c);
    }
  };

  // Threads only when there is enough work to pay for waking them (a one-token decode step is not).
  if (!fork_pool(n_tokens * n_heads * half >= (int64_t(1) << 14))) {
    for (int64_t t = 0; t < n_tokens; ++t) {
      const RopeAngles& angles = rope_angles(p, theta.data(), static_cast<double>(positions[t]), sign);
      for (int64_t i = 0; i < half; ++i)
        rotate_pair(t, i, angles.cos[static_cast<size_t>(i)], angles.sin[static_cast<size_t>(i)]);
    }
    return;
  }
  parallel_for(n_tokens, true, [&](int64_t t) {
    const double pos = static_cast<double>(positions[t]);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = sign * pos * theta[i];
      rotate_pair(t, i, std::cos(angle), std::sin(angle));
    }
  });
}

}  // namespace

template <typename T>
void rope_forward(T* x, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t row_stride,
                  const RopeParams& p) {
  rotate(x, positions, n_tokens, n_heads, row_stride, p, +1.0);
}

// The forward is y = R(angle) x with R orthogonal, so dL/dx = R(angle)^T dL/dy = R(-angle) dL/dy.
template <typename T>
void rope_backward(T* dx, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t row_stride,
                   const RopeParams& p) {
  rotate(dx, positions, n_tokens, n_heads, row_stride, p, -1.0);
}

template void rope_forward<float>(float*, const int64_t*, int64_t, int64_t, int64_t, const RopeParams&);
template void rope_forward<double>(double*, const int64_t*, int64_t, int64_t, int64_t, const RopeParams&);
template void rope_backward<float>(float*, const int64_t*, int64_t, int64_t, int64_t, const RopeParams&);
template void rope_backward<double>(double*, const int64_t*, int64_t, int64_t, int64_t, const RopeParams&);

}  // namespace tformer
