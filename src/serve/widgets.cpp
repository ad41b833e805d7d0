#include "serve/widgets.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>
#include <utility>

#include "core/error.h"
#include "core/utf8.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/rope.h"

namespace tformer::widgets {

namespace {

std::vector<double> flat(const std::vector<Vec2>& v) {
  std::vector<double> f;
  for (const Vec2& x : v) f.insert(f.end(), x.begin(), x.end());
  return f;
}

double dot(const Vec2& a, const Vec2& b) { return a[0] * b[0] + a[1] * b[1]; }

// x rotated by position * theta through rope_forward: the pair of a rotary head whose angle per
// position is theta (theta_i = base^(-2i / head_dim): pair 0 of a 2-wide head turns by 1, pair 1 of
// a 4-wide head with base theta^-2 by theta). A negative position turns the other way: rope_backward
// by -position, which is R(-angle), so the identity can be shown for any shift of both positions.
Vec2 rotate(const Vec2& x, int64_t position, double theta) {
  const bool first = theta == 1.0;
  const RopeParams p{first ? 2 : 4, first ? 10000.0 : std::pow(theta, -2.0), RopePairing::Adjacent};
  double v[4] = {0, 0, 0, 0};
  const int at = first ? 0 : 2;
  v[at] = x[0];
  v[at + 1] = x[1];
  if (position >= 0) {
    rope_forward<double>(v, &position, 1, 1, p.head_dim, p);
  } else {
    const int64_t back = -position;
    rope_backward<double>(v, &back, 1, 1, p.head_dim, p);
  }
  return {v[at], v[at + 1]};
}

}  // namespace

ToyAttention toy_attention(const std::vector<Vec2>& queries, const std::vector<Vec2>& keys,
                           const std::vector<Vec2>& values, int64_t q_offset, MaskRule rule) {
  const auto n_q = static_cast<int64_t>(queries.size()), n_kv = static_cast<int64_t>(keys.size());
  if (n_q == 0 || n_kv == 0 || keys.size() != values.size())
    fail_input("attention",
               "toy attention: {} queries, {} keys and {} values (keys and values must pair up, none empty)", n_q, n_kv,
               values.size());
  if (q_offset < 0 || q_offset + n_q > n_kv)
    fail_input("q_offset", "toy attention: queries at positions {}..{} need keys through position {}, but there are {}",
               q_offset, q_offset + n_q - 1, q_offset + n_q - 1, n_kv);
  ToyAttention r;
  r.out.assign(queries.size(), Vec2{0, 0});
  r.weights.assign(queries.size(), std::vector<double>(keys.size(), 0.0));
  if (rule == MaskRule::Correct) {
    // The kernel the model runs, with the chunk's offset.
    const std::vector<double> q = flat(queries), k = flat(keys), v = flat(values);
    std::vector<double> out(static_cast<size_t>(n_q * 2)), probs(static_cast<size_t>(n_q * n_kv));
    const AttentionShape s{1, n_q, n_kv, 1, 1, 2};
    AttentionMask m;
    m.q_offset = &q_offset;
    attention_forward<double>(heads_btHd(out.data(), n_q, 1, 2), probs.data(), heads_btHd(q.data(), n_q, 1, 2),
                              heads_btHd(k.data(), n_kv, 1, 2), heads_btHd(v.data(), n_kv, 1, 2), s, m);
    for (int64_t i = 0; i < n_q; ++i) {
      r.out[static_cast<size_t>(i)] = {out[static_cast<size_t>(2 * i)], out[static_cast<size_t>(2 * i + 1)]};
      for (int64_t j = 0; j < n_kv; ++j)
        r.weights[static_cast<size_t>(i)][static_cast<size_t>(j)] = probs[static_cast<size_t>(i * n_kv + j)];
    }
    return r;
  }
  // The wrong variants, plainly: every key scored, the softmax over all of them.
  for (int64_t i = 0; i < n_q; ++i) {
    const int64_t last = q_offset + i;  // the last key the row may read
    std::vector<double> s(static_cast<size_t>(n_kv));
    for (int64_t j = 0; j < n_kv; ++j)
      s[static_cast<size_t>(j)] =
          rule == MaskRule::ScoreZero && j > last
              ? 0.0
              : dot(queries[static_cast<size_t>(i)], keys[static_cast<size_t>(j)]) / std::sqrt(2.0);
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    std::vector<double>& w = r.weights[static_cast<size_t>(i)];
    for (int64_t j = 0; j < n_kv; ++j) {
      w[static_cast<size_t>(j)] =
          rule == MaskRule::ZeroAfterSoftmax && j > last ? 0.0 : s[static_cast<size_t>(j)] / sum;
      for (int f = 0; f < 2; ++f)
        r.out[static_cast<size_t>(i)][static_cast<size_t>(f)] +=
            w[static_cast<size_t>(j)] * values[static_cast<size_t>(j)][static_cast<size_t>(f)];
    }
  }
  return r;
}

SpecAttentionChecks spec_attention_example() {
  const std::vector<Vec2> queries{{1, 0}, {0, 1}, {1, 1}};
  std::vector<Vec2> values{{2, 0}, {0, 3}, {-1, 1}};
  SpecAttentionChecks c;
  c.queries = queries;
  c.values = values;
  c.changed_value = {100, 100};
  c.full = toy_attention(queries, queries, values, 0);
  c.cached = toy_attention({queries.back()}, queries, values, 2);
  values.back() = c.changed_value;
  c.changed = toy_attention(queries, queries, values, 0);
  for (int f = 0; f < 2; ++f) {
    c.first_row_error = std::max(c.first_row_error, std::fabs(c.full.out[0][f] - (f == 0 ? 2.0 : 0.0)));
    c.cached_vs_full = std::max(c.cached_vs_full, std::fabs(c.cached.out[0][f] - c.full.out[2][f]));
  }
  c.earlier_row_immune = c.changed.out[1] == c.full.out[1];
  return c;
}

RopeScores rope_scores(const Vec2& q, const Vec2& k, int64_t m, int64_t n, double theta) {
  if (!(theta > 0 && theta <= 1))
    fail_input("theta", "RoPE widget: theta is {}; it must be in (0, 1] radians per position", theta);
  constexpr int64_t kMaxPosition = int64_t{1} << 40;  // far past any context; keeps n - m exact
  if (m < -kMaxPosition || m > kMaxPosition || n < -kMaxPosition || n > kMaxPosition)
    fail_input("position", "RoPE widget: positions {} and {} must be within +-{}", m, n, kMaxPosition);
  RopeScores r;
  r.rotated = dot(rotate(q, m, theta), rotate(k, n, theta));
  r.relative = dot(q, rotate(k, n - m, theta));  // q . R((n - m) theta) k, either sign of n - m
  return r;
}

LayerNormDemo layernorm_demo(const std::vector<double>& x, double shift, double scale, double eps,
                             const std::vector<double>& gain, const std::vector<double>& bias) {
  const auto n = static_cast<int64_t>(x.size());
  if (n == 0) fail_input("x", "LayerNorm widget: the row is empty");
  if (!(scale > 0)) fail_input("scale", "LayerNorm widget: scale is {}; it must be positive", scale);
  if (!(eps > 0)) fail_input("eps", "LayerNorm widget: eps is {}; it must be positive", eps);
  if ((!gain.empty() && gain.size() != x.size()) || (!bias.empty() && bias.size() != x.size()))
    fail_input("gain", "LayerNorm widget: gain and bias must have the row's {} values", n);
  const std::vector<double> ones(x.size(), 1.0);
  auto norm = [&](const std::vector<double>& in, const std::vector<double>& g, const std::vector<double>* b) {
    std::vector<double> y(in.size());
    double mean = 0, rstd = 0;
    layernorm_forward<double>(y.data(), &mean, &rstd, in.data(), g.data(), b ? b->data() : nullptr, 1, n, eps);
    return y;
  };
  LayerNormDemo d;
  d.y = norm(x, ones, nullptr);
  std::vector<double> xs = x, xm = x;
  for (double& v : xs) v += shift;
  for (double& v : xm) v *= scale;
  d.shifted = norm(xs, ones, nullptr);
  d.scaled = norm(xm, ones, nullptr);
  for (size_t i = 0; i < x.size(); ++i) {
    d.shift_error = std::max(d.shift_error, std::fabs(d.shifted[i] - d.y[i]));
    d.scale_error = std::max(d.scale_error, std::fabs(d.scaled[i] - d.y[i]));
  }
  const std::vector<double> zeros(x.size(), 0.0);
  d.affine = norm(x, gain.empty() ? ones : gain, bias.empty() ? &zeros : &bias);
  for (double v : d.affine) d.affine_mean += v / static_cast<double>(n);
  for (double v : d.affine) d.affine_var += (v - d.affine_mean) * (v - d.affine_mean) / static_cast<double>(n);
  return d;
}

BpeWidget bpe_widget(std::string_view corpus, int64_t steps, int64_t min_frequency, std::string_view apply_text) {
  BpeWidget w;
  w.words = bpe_count_words(corpus, "corpus");
  if (w.words.empty()) fail_input("corpus", "BPE widget: the corpus has no words");
  BpeLearnOptions o;
  o.merges = steps;
  o.min_frequency = min_frequency;
  o.on_step = [&](const BpeStep& s) { w.steps.push_back(s); };
  const BpeLearnResult learned = learn_bpe_from_word_counts(w.words, o);
  w.stop_reason = learned.stop_reason;
  const SennrichBpe bpe = SennrichBpe::from_merges(learned.merges, "the widget's merges");
  // A word's pieces as symbols: the last one carries the end-of-word marker.
  auto symbols = [&](std::string_view word) {
    std::vector<std::string> p = bpe.segment(word);
    if (!p.empty()) p.back() += "</w>";
    return p;
  };
  std::map<std::pair<std::string, std::string>, int64_t> counts;
  for (const BpeWordCount& wc : w.words) {
    w.segments.push_back(symbols(wc.word));
    const auto& p = w.segments.back();
    for (size_t i = 0; i + 1 < p.size(); ++i) counts[{p[i], p[i + 1]}] += static_cast<int64_t>(wc.count);
  }
  for (const auto& [pair, n] : counts) w.pairs.push_back({pair.first, pair.second, n});
  // Largest count first; among equal counts the greatest pair (UTF-8 bytes compare as code points).
  std::sort(w.pairs.begin(), w.pairs.end(), [](const BpePairCount& a, const BpePairCount& b) {
    if (a.count != b.count) return a.count > b.count;
    return std::tie(a.first, a.second) > std::tie(b.first, b.second);
  });
  // The new text's words in their order (split at spaces and line breaks, as learning splits).
  if (const auto bad = find_invalid_utf8(apply_text))
    fail_input("apply", "BPE widget: the text to apply is not valid UTF-8 (at byte {})", *bad);
  for (size_t i = 0; i < apply_text.size();) {
    const size_t end = std::min(apply_text.find_first_of(" \n\r", i), apply_text.size());
    if (end > i) w.applied.push_back(symbols(apply_text.substr(i, end - i)));
    i = end + 1;
  }
  return w;
}

int64_t kv_cache_payload_bytes(int64_t layers, int64_t batch, int64_t kv_heads, int64_t tokens, int64_t head_dim,
                               int64_t bytes_per_entry) {
  const std::pair<const char*, int64_t> sizes[] = {{"layers", layers},     {"batch", batch},
                                                   {"kv_heads", kv_heads}, {"tokens", tokens},
                                                   {"head_dim", head_dim}, {"bytes_per_entry", bytes_per_entry}};
  for (const auto& [name, v] : sizes)
    if (v < 0) fail_input(name, "KV cache payload: {} is {}; it must be >= 0", name, v);
  return 2 * layers * batch * kv_heads * tokens * head_dim * bytes_per_entry;
}

}  // namespace tformer::widgets
