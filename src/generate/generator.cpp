#include "generate/generator.h"

#include <algorithm>
#include <chrono>
#include <limits>

#include "core/error.h"
#include "core/threads.h"

namespace tformer {

std::vector<std::vector<TokenId>> generate(Model& model, const std::vector<std::vector<TokenId>>& prompts,
                                           const GenerateOptions& options,
                                           const std::function<void(int64_t, TokenId)>& on_token,
                                           GenerateStats* stats) {
  options.sampler.validate();
  const auto& c = model.config();
  const int64_t B = static_cast<int64_t>(prompts.size());
  if (B == 0) return {};
  if (options.max_new_tokens < 0)
    fail_input("--max-new-tokens", "--max-new-tokens must be >= 0, got {}", options.max_new_tokens);
  int64_t longest = 0;
  std::vector<int64_t> lengths(B);
  for (int64_t b = 0; b < B; ++b) {
    lengths[b] = static_cast<int64_t>(prompts[b].size());
    if (lengths[b] == 0)
      fail_input(fmt::format("prompt {}", b), "prompt {} is empty: generation needs at least one token to condition on",
                 b);
    if (lengths[b] + options.max_new_tokens > c.context_length)
      fail_input(fmt::format("prompt {}", b),
                 "prompt {} has {} tokens and {} new tokens were asked for: {} > the model's context_length {}", b,
                 lengths[b], options.max_new_tokens, lengths[b] + options.max_new_tokens, c.context_length);
    longest = std::max(longest, lengths[b]);
  }
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  KVCache cache = model.make_cache(B, longest + std::max<int64_t>(options.max_new_tokens, 1));
  const int64_t V = c.vocab_size;
  std::vector<float> logits(B * V);

  // Prefill in chunks: chunk k carries tokens [s, s + n) of every prompt; a prompt already done
  // contributes no valid token, and its last logits are kept from the chunk that finished it.
  const int64_t chunk = options.prefill_chunk > 0 ? options.prefill_chunk : longest;
  std::vector<float> chunk_logits(B * V);
  for (int64_t s = 0; s < longest; s += chunk) {
    const int64_t n = std::min(chunk, longest - s);
    std::vector<TokenId> ids(B * n, 0);
    std::vector<int64_t> valid(B);
    for (int64_t b = 0; b < B; ++b) {
      valid[b] = std::clamp<int64_t>(lengths[b] - s, 0, n);
      std::copy_n(prompts[b].begin() + std::min(s, lengths[b]), valid[b], ids.begin() + b * n);
    }
    model.forward_cached(chunk_logits.data(), ids.data(), B, n, valid.data(), cache, false);
    for (int64_t b = 0; b < B; ++b)
      if (valid[b] > 0) std::copy_n(chunk_logits.data() + b * V, V, logits.data() + b * V);
  }
  const auto t1 = clock::now();

  std::vector<Sampler> samplers;
  for (int64_t b = 0; b < B; ++b) samplers.emplace_back(options.sampler);  // each as if alone
  std::vector<std::vector<TokenId>> out(B);
  for (auto& o : out) o.reserve(static_cast<size_t>(options.max_new_tokens));  // no growth per token
  std::vector<bool> done(B, false);
  std::vector<TokenId> next(B, 0);
  std::vector<int64_t> valid(B);
  int64_t generated = 0;
  for (int64_t step = 0; step < options.max_new_tokens; ++step) {
    bool any = false;
    // The draws in parallel (a softmax over the vocabulary each; every sequence has its own
    // generator, so the tokens do not depend on the threads), then each token in order.
    parallel_for_dynamic(B, B > 1, [&](int64_t b) {
      if (done[b]) return;
      for (const TokenId id : options.never_sample)
        if (id >= 0 && id < V) logits[b * V + id] = -std::numeric_limits<float>::infinity();
      next[b] = samplers[b].sample(logits.data() + b * V, V);
    });
    for (int64_t b = 0; b < B; ++b) {
      valid[b] = done[b] ? 0 : 1;
      if (done[b]) continue;
      out[b].push_back(next[b]);
      ++generated;
      if (on_token) on_token(b, next[b]);
      if (options.stop_token && next[b] == *options.stop_token) done[b] = true, valid[b] = 0;
      any = any || !done[b];
    }
    if (!any || step + 1 == options.max_new_tokens) break;
    model.forward_cached(logits.data(), next.data(), B, 1, valid.data(), cache, false);
  }
  if (stats) {
    stats->prompt_tokens = 0;
    for (int64_t l : lengths) stats->prompt_tokens += l;
    stats->generated_tokens = generated;
    stats->prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
    stats->decode_seconds = std::chrono::duration<double>(clock::now() - t1).count();
    stats->kv_cache_bytes = cache.payload_bytes();
    stats->kv_capacity = cache.capacity();
  }
  return out;
}

}  // namespace tformer
