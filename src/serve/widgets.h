// The numbers behind the explorable page's toy widgets (the web-page issue; docs/serve.md): the
// spec's small examples, computed in double precision by the kernels the model runs (attention,
// RoPE, LayerNorm), so that what a learner sees is the engine's own arithmetic. The two wrong
// masking variants are the exception: they are deliberately not what the kernel does, and are
// computed here, plainly, to show where probability mass leaks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/sennrich_bpe.h"

namespace tformer::widgets {

using Vec2 = std::array<double, 2>;

// How the causal mask is applied (spec section 03): Correct excludes later keys before the
// softmax (the kernel's rule); ScoreZero replaces a masked score by 0 (exp(0) = 1: the future key
// still gets weight); ZeroAfterSoftmax normalises over every key, then zeroes the later ones
// without renormalising (the row no longer sums to one).
enum class MaskRule { Correct, ScoreZero, ZeroAfterSoftmax };

// One head of width 2 over keys/values [n_kv] and queries [n_q] at absolute positions
// q_offset .. q_offset + n_q - 1 (a cached chunk's offset), scores q.k / sqrt(2).
struct ToyAttention {
  std::vector<Vec2> out;                     // [n_q]
  std::vector<std::vector<double>> weights;  // [n_q][n_kv]: the mixing weights each row used
};
ToyAttention toy_attention(const std::vector<Vec2>& queries, const std::vector<Vec2>& keys,
                           const std::vector<Vec2>& values, int64_t q_offset, MaskRule rule = MaskRule::Correct);

// Section 07's example (queries = keys = {1,0},{0,1},{1,1}; values {2,0},{0,3},{-1,1}) and its
// three checks: the first row has one legal key (its output is the first value); the last row
// computed alone from the cache (offset 2) equals the full pass's; a changed future value
// ({100,100} for the third) leaves row one as it was.
struct SpecAttentionChecks {
  std::vector<Vec2> queries, values;  // the example's inputs (the keys are the queries)
  Vec2 changed_value{};               // what the third value becomes for `changed`
  ToyAttention full, cached, changed;
  double first_row_error = 0;       // |full.out[0] - values[0]|, largest coordinate
  double cached_vs_full = 0;        // |cached.out[0] - full.out[2]|, largest coordinate
  bool earlier_row_immune = false;  // changed.out[1] == full.out[1], bit for bit
};
SpecAttentionChecks spec_attention_example();

// RoPE on one coordinate pair (section 04): q at position m and k at position n, rotated by
// theta radians per position (0 < theta <= 1: the pair of a rotary head whose angle is theta),
// both ways: rotate each by its position and take the dot product; or rotate by the gap alone,
// q . R((n - m) theta) k. Each side is computed by tformer's rotation (rope_forward).
struct RopeScores {
  double rotated = 0;   // R(m theta) q . R(n theta) k
  double relative = 0;  // q . R((n - m) theta) k
};
RopeScores rope_scores(const Vec2& q, const Vec2& k, int64_t m, int64_t n, double theta);

// LayerNorm's invariances (section 05) on one row x, by tformer's layernorm_forward (biased
// variance, eps inside the square root), gain 1 and bias 0 unless given.
struct LayerNormDemo {
  std::vector<double> y;                   // LayerNorm(x)
  std::vector<double> shifted;             // LayerNorm(x + shift): equal to y up to rounding
  std::vector<double> scaled;              // LayerNorm(scale * x): equal to y only as far as eps allows
  double shift_error = 0;                  // max |shifted - y|
  double scale_error = 0;                  // max |scaled - y|
  std::vector<double> affine;              // y * gain + bias
  double affine_mean = 0, affine_var = 0;  // of affine (no longer 0 and 1)
};
LayerNormDemo layernorm_demo(const std::vector<double>& x, double shift, double scale, double eps,
                             const std::vector<double>& gain = {}, const std::vector<double>& bias = {});

// The BPE widget (section 01): `steps` merges learned from a toy corpus by tformer's learner
// (subword-nmt's rules, tokenizer/sennrich_bpe.h), the words' frequencies, every step as
// `bpe learn --trace` prints it, the pair counts recounted over the words as the merges so far
// segment them (the candidates of the next step, in the order the learner breaks ties: the largest
// count, then the greatest pair by code points), and the learned merges applied to new text.
struct BpePairCount {
  std::string first, second;
  int64_t count = 0;
};
struct BpeWidget {
  std::vector<BpeWordCount> words;                 // sorted by word
  std::vector<BpeStep> steps;                      // the merges learned, in order
  std::vector<std::vector<std::string>> segments;  // each word's pieces after them ("</w>" kept)
  std::vector<BpePairCount> pairs;                 // the next step's candidates, best first
  std::string stop_reason;                         // why fewer than `steps` were learned
  std::vector<std::vector<std::string>> applied;   // the words of apply_text, segmented
};
BpeWidget bpe_widget(std::string_view corpus, int64_t steps, int64_t min_frequency, std::string_view apply_text);

// A dense KV cache's payload (section 06): 2 x layers x batch x kv_heads x tokens x head_dim x
// bytes per entry (keys and values; no allocator overhead or metadata).
int64_t kv_cache_payload_bytes(int64_t layers, int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                               int64_t bytes_per_entry);

}  // namespace tformer::widgets
