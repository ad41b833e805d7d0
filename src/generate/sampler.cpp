#include "generate/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "kernels/fast_math.h"

namespace tformer {

void SamplerConfig::validate() const {
  if (!(temperature >= 0.0) || !std::isfinite(temperature))
    fail_input("--temperature", "--temperature must be a finite number >= 0, got {}", temperature);
  if (top_k < 0) fail_input("--top-k", "--top-k must be >= 0, got {}", top_k);
  if (!(top_p > 0.0 && top_p <= 1.0)) fail_input("--top-p", "--top-p must be in (0, 1], got {}", top_p);
}

Sampler::Sampler(SamplerConfig config) : config_(config), rng_(config.seed) { config_.validate(); }

namespace {
TokenId argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<TokenId>(best);
}
bool more_probable(const std::pair<double, TokenId>& a, const std::pair<double, TokenId>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
}  // namespace

bool Sampler::candidates(const float* logits, int64_t vocab, bool materialize) {
  // Softmax at temperature t, in double, max-subtracted. The exponentials use a vectorisable exp
  // (relative error ~3e-16, kernels/fast_math.h) and eight interleaved partial sums.
  probs_.resize(vocab);
  candidates_.reserve(static_cast<size_t>(vocab));  // once: no allocation per token after the first
  const double inv_t = 1.0 / config_.temperature;
  // The largest logit, in sixteen lanes (one chain of scalar maxima over the vocabulary waited on
  // each: a quarter of a draw over 32,000). Lane by lane as std::max does, NaNs passed over; the
  // same maximum in any order.
  float lane_max[16];
  std::fill(std::begin(lane_max), std::end(lane_max), -INFINITY);
  int64_t i16 = 0;
  for (; i16 + 16 <= vocab; i16 += 16)
    for (int j = 0; j < 16; ++j) lane_max[j] = lane_max[j] < logits[i16 + j] ? logits[i16 + j] : lane_max[j];
  float mxf = -INFINITY;
  for (; i16 < vocab; ++i16) mxf = std::max(mxf, logits[i16]);
  for (const float m : lane_max) mxf = std::max(mxf, m);
  const double mx = mxf;
  double* p = probs_.data();
  for (int64_t i = 0; i < vocab; ++i) p[i] = fast::exp_nonpos_d((static_cast<double>(logits[i]) - mx) * inv_t);
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i8 = 0;
  for (; i8 + 8 <= vocab; i8 += 8)
    for (int j = 0; j < 8; ++j) lane[j] += p[i8 + j];
  for (; i8 < vocab; ++i8) lane[0] += p[i8];
  const double inv_sum =
      1.0 / (((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7])));
  // Normalised, and summed in blocks for the draw's walk (sample()).
  block_mass_.resize(static_cast<size_t>((vocab + kBlock - 1) / kBlock));
  for (int64_t b = 0; b * kBlock < vocab; ++b) {
    const int64_t end = std::min(vocab, (b + 1) * kBlock);
    double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = b * kBlock;
    for (; i + 8 <= end; i += 8)
      for (int j = 0; j < 8; ++j) part[j] += p[i + j] *= inv_sum;
    for (; i < end; ++i) part[0] += p[i] *= inv_sum;
    block_mass_[static_cast<size_t>(b)] =
        ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
  }

  candidates_.clear();
  const bool use_k = config_.top_k > 0 && config_.top_k < vocab;
  const bool use_p = config_.top_p < 1.0;
  if (!use_p && !use_k && !materialize) return true;  // nothing cut: sample() draws from probs_ as they are
  if (use_p && !use_k && vocab > 1) {
    nucleus_by_histogram(vocab);
    if (!materialize) return true;
    nucleus_candidates(vocab);
    return false;
  }
  {  // every token; top-k (and top-p after it) select from them
    candidates_.reserve(vocab);
    for (int64_t i = 0; i < vocab; ++i) candidates_.emplace_back(probs_[i], static_cast<TokenId>(i));
  }
  if (use_k && static_cast<int64_t>(candidates_.size()) > config_.top_k) {
    std::nth_element(candidates_.begin(), candidates_.begin() + config_.top_k, candidates_.end(), more_probable);
    candidates_.resize(config_.top_k);
  }
  // The mass top-p is measured against: what top-k kept, or the whole distribution (1) when only
  // the cut-off filtered the candidates (the tokens it dropped still count in the total).
  double kept = 0;
  for (const auto& c : candidates_) kept += c.first;
  if (use_p) {
    // Smallest m such that the m most probable candidates reach top_p of the total, found by a
    // selection descent instead of a sort: [0, lo) holds the most probable lo candidates (all
    // taken, mass below the target), the answer lies in (lo, hi], and each step partitions
    // [lo, hi) at its midpoint with nth_element. Expected O(n). The order "more probable, then
    // lower id" is strict, so the kept set and its order are deterministic.
    double need = config_.top_p * (use_k ? kept : 1.0);
    size_t lo = 0, hi = candidates_.size();
    while (hi - lo > 1) {
      const size_t mid = lo + (hi - lo) / 2;
      std::nth_element(candidates_.begin() + lo, candidates_.begin() + mid, candidates_.begin() + hi, more_probable);
      double mass = 0;
      for (size_t i = lo; i < mid; ++i) mass += candidates_[i].first;
      if (mass >= need) {
        hi = mid;
      } else {
        need -= mass;
        lo = mid;
      }
    }
    candidates_.resize(hi);
    kept = 0;
    for (const auto& c : candidates_) kept += c.first;
  } else {
    std::sort(candidates_.begin(), candidates_.end(), more_probable);
  }
  for (auto& c : candidates_) c.first /= kept;
  return false;
}

// Top-p alone, in two linear passes instead of a selection over the whole vocabulary: bucket the
// probabilities by the top 12 bits of their float representation (8 exponent bits and 4 mantissa
// bits: monotone in the probability, 16 buckets per binade), add up each bucket's mass, and walk
// the buckets from the most probable down. Every bucket above the one where the running mass
// reaches top_p is kept whole; only that boundary bucket's members are ordered (more probable,
// then lower id) to find the exact cut. The kept set is the same as the sort-based definition's:
// the smallest number of most probable tokens whose mass reaches top_p.
void Sampler::nucleus_by_histogram(int64_t vocab) {
  constexpr int kBuckets = 1 << 12;
  const double* p = probs_.data();
  bucket_mass_.assign(kBuckets, 0.0);
  keys_.resize(vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(static_cast<float>(p[i]));  // p >= 0: sign bit 0
    const uint16_t key = static_cast<uint16_t>(bits >> 19);                   // 31 - 12 = 19
    keys_[i] = key;
    bucket_mass_[key] += p[i];
  }
  double need = config_.top_p, taken = 0;
  int boundary = 0;
  for (int k = kBuckets - 1; k >= 0; --k) {
    if (taken + bucket_mass_[k] >= need) {
      boundary = k;
      break;
    }
    taken += bucket_mass_[k];
  }
  // The boundary bucket's members, most probable first, cut where the mass reaches top_p.
  candidates_.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (keys_[i] == boundary) candidates_.emplace_back(p[i], static_cast<TokenId>(i));
  std::sort(candidates_.begin(), candidates_.end(), more_probable);
  size_t end = 0;
  need -= taken;
  double kept = taken;
  while (end < candidates_.size()) {
    need -= candidates_[end].first;
    kept += candidates_[end].first;
    ++end;
    if (need <= 0) break;
  }
  candidates_.resize(end);
  nucleus_boundary_ = boundary;
  nucleus_mass_ = kept;
}

void Sampler::nucleus_candidates(int64_t vocab) {
  // Every token of the buckets above the boundary (in id order), then the boundary's kept ones.
  std::vector<std::pair<double, TokenId>> boundary_kept;
  boundary_kept.swap(candidates_);
  for (int64_t i = 0; i < vocab; ++i)
    if (keys_[i] > nucleus_boundary_) candidates_.emplace_back(probs_[i], static_cast<TokenId>(i));
  candidates_.insert(candidates_.end(), boundary_kept.begin(), boundary_kept.end());
  for (auto& c : candidates_) c.first /= nucleus_mass_;
}

// A temperature so small that 1/t overflows is greedy decoding in the limit (and would otherwise
// turn every probability into NaN).
bool Sampler::greedy() const { return config_.temperature == 0.0 || !std::isfinite(1.0 / config_.temperature); }

TokenId Sampler::sample(const float* logits, int64_t vocab) {
  TF_CHECK(vocab > 0, "sampler: empty vocabulary");
  if (greedy()) return argmax(logits, vocab);
  if (candidates(logits, vocab, /*materialize=*/false)) {
    if (config_.top_p >= 1.0) {
      // Nothing cut (no top-k, no top-p): the whole distribution, walked in id order; no sort of
      // the vocabulary (which cost more than the 15M model's decode step).
      return draw_in_blocks(rng_.uniform_double(), vocab);
    }
    // Top-p alone: draw without building the kept list. Walk the whole buckets in id order
    // (branch-free sums; the exit test is predictable), then the boundary's kept tokens; the
    // same distribution as walking the materialised list, over the same kept set.
    const double u = rng_.uniform_double() * nucleus_mass_;
    const double* p = probs_.data();
    double cum = 0;
    int64_t last = -1;
    for (int64_t i = 0; i < vocab; ++i) {
      const bool whole = keys_[i] > nucleus_boundary_;
      cum += whole ? p[i] : 0.0;
      if (whole) last = i;
      if (u < cum) return static_cast<TokenId>(i);
    }
    for (const auto& c : candidates_) {
      cum += c.first;
      last = c.second;
      if (u < cum) return c.second;
    }
    return static_cast<TokenId>(last);  // rounding left u just above the total
  }
  const double u = rng_.uniform_double();
  double cum = 0;
  for (const auto& c : candidates_) {
    cum += c.first;
    if (u < cum) return c.second;
  }
  return candidates_.back().second;  // rounding left u just above the total
}

// The first token whose cumulative probability (in id order) passes u: the blocks' masses walked
// first, then the probabilities of the block where u falls (two short chains of additions, where
// one over every probability up to u waited on each add: a fifth of a draw over 32,000). The
// sums of a block taken the two ways may differ in their last bits; where u falls in that
// sliver, or past the total, the last token of positive probability before it is drawn.
TokenId Sampler::draw_in_blocks(double u, int64_t vocab) const {
  const double* p = probs_.data();
  double base = 0;
  int64_t last = 0;  // the last token of positive probability seen
  for (int64_t b = 0; b * kBlock < vocab; ++b) {
    const int64_t first = b * kBlock, end = std::min(vocab, first + kBlock);
    const double next = base + block_mass_[static_cast<size_t>(b)];
    if (u < next) {
      double cum = base;
      for (int64_t i = first; i < end; ++i) {
        cum += p[i];
        if (p[i] > 0) last = i;
        if (u < cum) return static_cast<TokenId>(i);
      }
      return static_cast<TokenId>(last);
    }
    if (block_mass_[static_cast<size_t>(b)] > 0)
      for (int64_t i = end - 1; i >= first; --i)
        if (p[i] > 0) {
          last = i;
          break;
        }
    base = next;
  }
  return static_cast<TokenId>(last);  // rounding left u just above the total
}

std::vector<double> Sampler::distribution(const float* logits, int64_t vocab) {
  std::vector<double> out(vocab, 0.0);
  if (greedy()) {
    out[argmax(logits, vocab)] = 1.0;
    return out;
  }
  candidates(logits, vocab);
  for (const auto& c : candidates_) out[c.second] = c.first;
  return out;
}

}  // namespace tformer
