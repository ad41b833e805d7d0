#include "core/rng.h"
#include "core/threads.h"

#include <cmath>
#include <numbers>

namespace tformer {

namespace {
inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// Box-Muller from two uniforms in [0, 1); u1 is moved to (0, 1] so the log is finite.
inline double box_muller(double u1, double u2) {
  const double r = std::sqrt(-2.0 * std::log(1.0 - u1));
  return r * std::cos(2.0 * std::numbers::pi * u2);
}
}  // namespace

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) {
    w = mix64(x);
    x += 0x9e3779b97f4a7c15ULL;
  }
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Rng::uniform() { return static_cast<float>(next_u64() >> 40) * 0x1.0p-24f; }

double Rng::uniform_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

uint64_t Rng::below(uint64_t n) {
  TF_CHECK(n > 0, "Rng::below(0)");
  // Rejection sampling: draws past the largest multiple of n are redrawn, so there is no modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  for (;;) {
    const uint64_t x = next_u64();
    if (x < limit) return x % n;
  }
}

double Rng::normal() {
  const double u1 = uniform_double();
  const double u2 = uniform_double();
  return box_muller(u1, u2);
}

double uniform_at(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t key = mix64(seed ^ mix64(stream ^ 0x5851f42d4c957f2dULL));
  return static_cast<double>(mix64(key ^ mix64(index)) >> 11) * 0x1.0p-53;
}

double normal_at(uint64_t seed, uint64_t stream, uint64_t index) {
  // Two independent counters per element: 2*index and 2*index+1.
  return box_muller(uniform_at(seed, stream, 2 * index), uniform_at(seed, stream, 2 * index + 1));
}

template <typename T>
void fill_normal(TensorView<T> x, uint64_t seed, uint64_t stream, double mean, double stddev) {
  T* p = x.data();
  const int64_t n = x.numel();
  parallel_for(n, n > 65536, [&](int64_t i) { p[i] = static_cast<T>(mean + stddev * normal_at(seed, stream, i)); });
}

template <typename T>
void fill_uniform(TensorView<T> x, uint64_t seed, uint64_t stream, double lo, double hi) {
  T* p = x.data();
  const int64_t n = x.numel();
  parallel_for(n, n > 65536, [&](int64_t i) { p[i] = static_cast<T>(lo + (hi - lo) * uniform_at(seed, stream, i)); });
}

template void fill_normal<float>(TensorView<float>, uint64_t, uint64_t, double, double);
template void fill_normal<double>(TensorView<double>, uint64_t, uint64_t, double, double);
template void fill_uniform<float>(TensorView<float>, uint64_t, uint64_t, double, double);
template void fill_uniform<double>(TensorView<double>, uint64_t, uint64_t, double, double);

}  // namespace tformer
