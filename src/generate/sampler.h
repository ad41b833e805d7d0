// Choosing the next token from a row of logits: greedy, temperature, top-k, top-p (nucleus), in
// that order, with a seeded Rng so that runs are reproducible.
//
//   temperature 0      greedy: the argmax (the lowest id among equal maxima)
//   temperature t > 0  p_i proportional to exp(logit_i / t)
//   top_k k > 0        keep only the k most probable tokens
//   top_p p < 1        keep the smallest set of most probable tokens whose mass reaches p
// then renormalise and draw one token with one uniform number from the Rng.
//
// Cost: one pass over the vocabulary for the softmax, plus a sort of only the candidates. Top-p
// never sorts the whole vocabulary: a token with probability below (1 - p) / (n - 1) cannot be in
// the nucleus (if it were, every token more probable than it would be too, and they could not
// leave 1 - p of mass outside), so only tokens above that cut-off are sorted.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "core/types.h"

namespace tformer {

struct SamplerConfig {
  double temperature = 1.0;  // 0 = greedy
  int64_t top_k = 0;         // 0 = off
  double top_p = 1.0;        // 1 = off; in (0, 1]
  uint64_t seed = 0;
  // Rejects a negative temperature or top_k and top_p outside (0, 1], naming the option.
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(SamplerConfig config);
  // Draws a token from logits [vocab]. Uses config().seed's Rng state; deterministic.
  TokenId sample(const float* logits, int64_t vocab);
  // The distribution sample() draws from (after temperature, top-k, top-p and renormalisation),
  // as a dense [vocab] vector; for tests.
  std::vector<double> distribution(const float* logits, int64_t vocab);
  const SamplerConfig& config() const { return config_; }
  Rng& rng() { return rng_; }

 private:
  // Fills candidates_ with (probability, id) pairs of the kept tokens, most probable first,
  // probabilities renormalised to sum to 1.
  // materialize = false lets the top-p-only path stop after finding the cut, and the untruncated
  // one (no top-k, no top-p) after the softmax (returns true: sample then draws from probs_, with
  // keys_ and the boundary's kept tokens in candidates_ for top-p).
  bool candidates(const float* logits, int64_t vocab, bool materialize = true);

  SamplerConfig config_;
  Rng rng_;
  bool greedy() const;
  static constexpr int64_t kBlock = 64;                   // tokens a block of block_mass_
  TokenId draw_in_blocks(double u, int64_t vocab) const;  // the untruncated draw (sample())
  void nucleus_by_histogram(int64_t vocab);               // finds the cut: boundary bucket, kept mass
  void nucleus_candidates(int64_t vocab);                 // the kept list, normalised, for distribution()
  int nucleus_boundary_ = 0;
  double nucleus_mass_ = 1;
  std::vector<double> probs_;
  std::vector<double> block_mass_;   // [vocab / kBlock, rounded up] probs_ summed in blocks (the draw's walk)
  std::vector<double> bucket_mass_;  // [4096] top-p histogram (reused, no allocation per token)
  std::vector<uint16_t> keys_;       // [vocab] each token's bucket
  std::vector<std::pair<double, TokenId>> candidates_;
};

}  // namespace tformer
