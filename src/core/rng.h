// Seeded random numbers that are the same on every run, machine and thread count.
//
// Rng is a sequential xoshiro256** generator (seeded through splitmix64), for sampling and data
// order. For filling tensors in parallel, the *_at functions are counter-based: element i of a
// tensor filled with (seed, stream) is a pure function of (seed, stream, i), so any split of the
// index range across threads produces the same numbers.
#pragma once

#include "core/hash.h"  // mix64
#include "core/tensor.h"

#include <array>
#include <cmath>
#include <cstdint>

namespace tformer {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits (exactly representable as float).
  float uniform();
  // Uniform in [0, 1) with 53 random bits.
  double uniform_double();
  // Uniform integer in [0, n), without modulo bias. n > 0.
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller on two uniform_double draws; no cached second value, so the
  // state is exactly the four words below).
  double normal();

  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_{};
};

// Counter-based draws: pure functions of (seed, stream, index).
double uniform_at(uint64_t seed, uint64_t stream, uint64_t index);  // [0, 1), 53 bits
double normal_at(uint64_t seed, uint64_t stream, uint64_t index);   // standard normal

// Dropout masks, counter-based: element `index` of the mask keyed `key` is kept iff
// (mix64(key + index) >> 11) >= threshold, with threshold = ceil(p * 2^53) for drop probability p
// (p = 0 keeps everything). The same element gets the same decision wherever it is computed (the
// training graph's elementwise dropout, the reference attention's and the tiled kernel's tiles).
inline uint64_t dropout_threshold(double p) {
  return static_cast<uint64_t>(std::ceil(p * 9007199254740992.0));  // p * 2^53
}
inline bool dropout_kept(uint64_t key, uint64_t index, uint64_t threshold) {
  return (mix64(key + index) >> 11) >= threshold;
}

// Fills x with normal(mean, stddev) / uniform[lo, hi); parallel with OpenMP, deterministic.
template <typename T>
void fill_normal(TensorView<T> x, uint64_t seed, uint64_t stream, double mean, double stddev);
template <typename T>
void fill_uniform(TensorView<T> x, uint64_t seed, uint64_t stream, double lo, double hi);

}  // namespace tformer
