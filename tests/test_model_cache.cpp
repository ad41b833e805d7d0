// The KV cache: chunked prefill and one-token decode through the cache equal the uncached pass,
// for every prefix length, chunk size and batch of mixed prompt lengths (a cached implementation
// can return plausible numbers while using the wrong tokens, so only equality shows it is right).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/model.h"
#include "reference_block.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;

// Weights large enough that logits differ clearly between positions (GPT-2's 0.02 init would
// make every row nearly the same and hide position mistakes).
Model make_model(const char* overrides, uint64_t seed = 5) {
  auto j = nlohmann::json::parse(R"({"vocab_size": 29, "context_length": 80, "d_model": 16, "n_layers": 2,
                                     "n_heads": 4, "d_ff": 24})");
  j.update(nlohmann::json::parse(overrides));
  Model m(ModelConfig::from_json(j, "test"));
  uint64_t stream = 0;
  for (const auto& e : m.params().entries()) {
    auto v = m.params().view(e);
    const bool gain = e.name.ends_with("norm.weight");
    fill_normal<float>(v, seed, stream++, gain ? 1.0 : 0.0, gain ? 0.1 : 0.3);
  }
  return m;
}

const char* kConfigs[] = {
    R"({})",                                                                                 // learned, MHA
    R"({"positions": "rope", "n_kv_heads": 2, "rope_pairing": "adjacent"})",                 // RoPE, GQA
    R"({"positions": "rope", "n_kv_heads": 1, "norm": "rmsnorm", "activation": "swiglu"})",  // MQA
    R"({"positions": "sinusoidal", "norm_placement": "post", "bias": false})",               // post-LN
};

std::vector<TokenId> tokens(int64_t n, uint64_t seed) {
  std::vector<TokenId> ids(n);
  Rng r(seed);
  for (auto& id : ids) id = static_cast<TokenId>(r.below(29));
  return ids;
}

TEST(KVCache, ChunkedPrefillEqualsTheUncachedPassForEveryPrefixAndChunkSize) {
  const int64_t N = 11, V = 29;
  for (const char* cfg : kConfigs) {
    Model m = make_model(cfg);
    const auto ids = tokens(N, 1);
    for (int64_t len = 1; len <= N; ++len) {
      std::vector<float> full(len * V);
      m.forward(full.data(), ids.data(), 1, len);
      for (int64_t chunk : {int64_t{1}, int64_t{2}, int64_t{5}, len}) {
        KVCache cache = m.make_cache(1, N);
        std::vector<float> cached(len * V);
        for (int64_t s = 0; s < len; s += chunk) {
          const int64_t c = std::min(chunk, len - s);
          m.forward_cached(cached.data() + s * V, ids.data() + s, 1, c, nullptr, cache, true);
          ASSERT_EQ(cache.length(0), s + c);
        }
        // Same arithmetic in a different grouping (BLAS blocks by row count): float rounding only.
        EXPECT_TRUE(all_close(cached, full, 1e-5, 1e-5)) << cfg << " len " << len << " chunk " << chunk;
      }
    }
  }
}

TEST(KVCache, BatchOfMixedPromptLengthsEqualsEachPromptAlone) {
  const int64_t V = 29;
  const std::vector<int64_t> lengths{3, 7, 5};
  for (const char* cfg : kConfigs) {
    Model m = make_model(cfg);
    const int64_t B = 3, n = 7;
    std::vector<TokenId> batch_ids(B * n, 28);  // padding id; must not matter
    std::vector<std::vector<TokenId>> prompts;
    for (int64_t b = 0; b < B; ++b) {
      prompts.push_back(tokens(lengths[b], 10 + b));
      std::copy(prompts[b].begin(), prompts[b].end(), batch_ids.begin() + b * n);
    }
    KVCache cache = m.make_cache(B, 20);
    std::vector<float> last(B * V);
    m.forward_cached(last.data(), batch_ids.data(), B, n, lengths.data(), cache, false);
    // Then three decode steps, one token per sequence.
    std::vector<std::vector<float>> steps;
    for (int step = 0; step < 3; ++step) {
      std::vector<TokenId> next{TokenId(step + 1), TokenId(2 * step + 3), TokenId(27 - step)};
      std::vector<float> out(B * V);
      m.forward_cached(out.data(), next.data(), B, 1, nullptr, cache, false);
      steps.push_back(out);
      for (int64_t b = 0; b < B; ++b) prompts[b].push_back(next[b]);
    }
    for (int64_t b = 0; b < B; ++b) {
      EXPECT_EQ(cache.length(b), lengths[b] + 3);
      // Alone, uncached: the prompt then the prompt plus each decoded token.
      for (int step = -1; step < 3; ++step) {
        const int64_t len = lengths[b] + step + 1;
        std::vector<float> alone(len * V);
        m.forward(alone.data(), prompts[b].data(), 1, len);
        const float* got = step < 0 ? last.data() + b * V : steps[step].data() + b * V;
        EXPECT_TRUE(all_close(got, alone.data() + (len - 1) * V, V, 1e-5, 1e-5))
            << cfg << " sequence " << b << " step " << step;
      }
    }
  }
}

// Greedy decoding: the next token is the argmax of the last row.
TokenId argmax(const float* row, int64_t n) { return static_cast<TokenId>(std::max_element(row, row + n) - row); }

TEST(KVCache, GreedyDecodeOf64TokensIsTheSameWithAndWithoutTheCache) {
  const int64_t V = 29, prompt_len = 6, steps = 64;
  for (const char* cfg : kConfigs) {
    Model m = make_model(cfg);
    std::vector<TokenId> uncached = tokens(prompt_len, 3), cached = uncached;
    // Without the cache: recompute the whole sequence for every new token.
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t len = static_cast<int64_t>(uncached.size());
      std::vector<float> logits(len * V);
      m.forward(logits.data(), uncached.data(), 1, len);
      uncached.push_back(argmax(logits.data() + (len - 1) * V, V));
    }
    // With the cache: prefill once, then one token at a time.
    KVCache cache = m.make_cache(1, prompt_len + steps);
    std::vector<float> row(V);
    m.forward_cached(row.data(), cached.data(), 1, prompt_len, nullptr, cache, false);
    for (int64_t s = 0; s < steps; ++s) {
      const TokenId next = argmax(row.data(), V);
      cached.push_back(next);
      if (s + 1 < steps) m.forward_cached(row.data(), &next, 1, 1, nullptr, cache, false);
    }
    EXPECT_EQ(cached, uncached) << cfg;
    // The sequence is not constant (random models soon fall into short cycles; two symbols suffice).
    std::vector<TokenId> distinct(uncached.begin() + prompt_len, uncached.end());
    std::sort(distinct.begin(), distinct.end());
    EXPECT_GE(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 2) << cfg;
  }
}

TEST(AttentionKernelSwitch, TiledAndReferenceGiveTheSameLogitsAndText) {
  // The tiled kernel is the default; the reference is the oracle. Whole-model logits through a
  // full pass, a chunked prefill and decode must agree within float rounding, and greedy text
  // must be identical.
  const int64_t N = 23, V = 29;
  for (const char* cfg : kConfigs) {
    Model tiled = make_model(cfg), ref = make_model(cfg);
    ASSERT_EQ(tiled.attention_kernel(), AttentionKernel::Tiled);
    ref.set_attention_kernel(AttentionKernel::Reference);
    const auto ids = tokens(N, 21);
    std::vector<float> a(N * V), b(N * V);
    tiled.forward(a.data(), ids.data(), 1, N);
    ref.forward(b.data(), ids.data(), 1, N);
    EXPECT_TRUE(all_close(a, b, 1e-5, 1e-5)) << cfg;
    KVCache ca = tiled.make_cache(1, N), cb = ref.make_cache(1, N);
    for (int64_t s = 0; s < N; s += 4) {
      const int64_t c = std::min<int64_t>(4, N - s);
      tiled.forward_cached(a.data() + s * V, ids.data() + s, 1, c, nullptr, ca, true);
      ref.forward_cached(b.data() + s * V, ids.data() + s, 1, c, nullptr, cb, true);
    }
    EXPECT_TRUE(all_close(a, b, 1e-5, 1e-5)) << cfg << " chunked";
  }
  EXPECT_EQ(parse_attention_kernel("reference"), AttentionKernel::Reference);
  EXPECT_ERROR(parse_attention_kernel("flash"), ErrorKind::BadInput, "--attention");
}

TEST(KVCache, PayloadBytesCountKeysAndValuesOfEverySlot) {
  // 2 x layers x batch x kv_heads x tokens x head_dim x 4 bytes.
  // GQA: 2 layers, batch 3, 2 kv heads, 10 slots, head width 4: 2*2*3*2*10*4*4 = 3840.
  KVCache gqa(2, 3, 2, 10, 4);
  EXPECT_EQ(gqa.payload_bytes(), 3840);
  EXPECT_EQ(gqa.allocated_bytes(), 3840) << "the arrays hold what the formula says";
  EXPECT_EQ(BasicKVCache<double>(2, 3, 2, 10, 4).allocated_bytes(), 7680) << "8-byte entries";
  // MHA with 4 kv heads: twice as much; MQA with 1: half.
  EXPECT_EQ(KVCache(2, 3, 4, 10, 4).payload_bytes(), 7680);
  EXPECT_EQ(KVCache(2, 3, 1, 10, 4).payload_bytes(), 1920);
  // Filled slots: sequence lengths 5, 0, 2 -> 7 tokens: 2*2*2*7*4*4 = 896.
  gqa.advance(0, 5);
  gqa.advance(2, 2);
  EXPECT_EQ(gqa.used_bytes(), 896);
  EXPECT_ERROR(gqa.advance(0, 6), ErrorKind::Internal, "");  // 11 > capacity 10
  // A model's cache has its config's kv heads and head width.
  Model m = make_model(R"({"n_kv_heads": 2})");
  EXPECT_EQ(m.make_cache(1, 80).payload_bytes(), 2 * 2 * 1 * 2 * 80 * 4 * 4);
}

TEST(KVCache, PastTheContextOrCapacityIsAnErrorNamingTheNumbers) {
  Model m = make_model(R"({"context_length": 8})");
  KVCache cache = m.make_cache(1, 20);
  const auto ids = tokens(9, 4);
  std::vector<float> logits(9 * 29);
  EXPECT_ERROR(m.forward_cached(logits.data(), ids.data(), 1, 9, nullptr, cache, true), ErrorKind::BadInput,
               "sequence 0", "9 tokens", "context_length is 8");
  EXPECT_EQ(cache.length(0), 0);  // nothing was stored
  KVCache small = m.make_cache(1, 4);
  EXPECT_ERROR(m.forward_cached(logits.data(), ids.data(), 1, 5, nullptr, small, true), ErrorKind::BadInput,
               "sequence 0", "the KV cache holds 4");
}

TEST(KVCache, ModelForwardEqualsTheReferenceBlockComposition) {
  // The model (through the cache, the one layer of model/layer.h) against the reference decoder:
  // block_forward, the plain composition of reference kernels that tests/test_reference_block.cpp
  // checks against PyTorch, with the weights read by their checkpoint names. Float model against
  // the double reference; the same model in double against it to round-off.
  const int64_t T = 9, V = 29;
  for (const char* cfg : kConfigs) {
    Model m = make_model(cfg);
    m.set_attention_kernel(AttentionKernel::Reference);
    const auto ids = tokens(T, 8);
    std::vector<float> logits(T * V);
    m.forward(logits.data(), ids.data(), 1, T);
    const auto weights = arena_in_double(m.params());
    const std::vector<double> ref = reference_decoder_logits(m.config(), weights, ids);
    EXPECT_TRUE(all_close(logits, ref, 1e-5, 1e-5)) << cfg;

    for (AttentionKernel kernel : {AttentionKernel::Reference, AttentionKernel::Tiled}) {
      BasicModel<double> md(m.config());
      md.set_attention_kernel(kernel);
      for (const auto& e : md.params().entries()) {
        const auto& w = weights.at(e.name);
        std::copy(w.begin(), w.end(), md.params().view(e).begin());
      }
      std::vector<double> got(T * V);
      md.forward(got.data(), ids.data(), 1, T);
      EXPECT_TRUE(all_close(got, ref, 1e-12, 1e-12)) << cfg << " in double";
      // Through the cache in chunks of 2: the same function.
      BasicKVCache<double> cache = md.make_cache(1, T);
      for (int64_t s = 0; s < T; s += 2) {
        const int64_t n = std::min<int64_t>(2, T - s);
        md.forward_cached(got.data() + s * V, ids.data() + s, 1, n, nullptr, cache, true);
      }
      EXPECT_TRUE(all_close(got, ref, 1e-12, 1e-12)) << cfg << " in double, chunked";
    }
  }
}

// The web page's heat maps (Model::attention_probabilities): every layer's and head's weights
// equal the reference decoder's (the plain block composition), in float to 1e-5 and in double to
// round-off; each row sums to one over keys 0..t and is exactly 0 past t; the logits it returns
// are the ordinary forward's; and the model's own kernel setting is left as it was.
TEST(KVCache, AttentionProbabilitiesEqualTheReferenceDecoders) {
  const int64_t T = 7, V = 29;
  for (const char* cfg : kConfigs) {
    Model m = make_model(cfg);
    const ModelConfig& c = m.config();
    const auto ids = tokens(T, 13);
    const auto weights = arena_in_double(m.params());
    std::vector<double> ref_probs;
    reference_decoder_logits(c, weights, ids, nullptr, &ref_probs);
    std::vector<float> probs(c.n_layers * c.n_heads * T * T, -1.f), logits(T * V), plain(T * V);
    m.attention_probabilities(probs.data(), ids.data(), T, logits.data());
    EXPECT_EQ(m.attention_kernel(), AttentionKernel::Tiled) << cfg;
    EXPECT_TRUE(all_close(probs, ref_probs, 1e-5, 1e-5)) << cfg;
    m.forward(plain.data(), ids.data(), 1, T);
    EXPECT_TRUE(all_close(logits, plain, 1e-5, 1e-5)) << cfg;
    for (int64_t r = 0; r < c.n_layers * c.n_heads * T; ++r) {
      const int64_t t = r % T;
      double sum = 0;
      for (int64_t j = 0; j < T; ++j) {
        const float p = probs[r * T + j];
        if (j > t)
          EXPECT_EQ(p, 0.f) << cfg << " row " << r << " key " << j;
        else
          sum += p;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << cfg << " row " << r;
    }
    BasicModel<double> md(c);
    for (const auto& e : md.params().entries()) {
      const auto& w = weights.at(e.name);
      std::copy(w.begin(), w.end(), md.params().view(e).begin());
    }
    std::vector<double> dprobs(probs.size());
    md.attention_probabilities(dprobs.data(), ids.data(), T);
    EXPECT_TRUE(all_close(dprobs, ref_probs, 1e-12, 1e-12)) << cfg << " in double";
  }
}

// RoPE through the cache, on the whole model: a cached chunk's queries and keys are rotated at
// their ABSOLUTE positions (cached length + t). The reference decoder, given every token's
// position explicitly, reproduces the model's cached chunk when the chunk keeps its absolute
// positions; with the chunk's positions restarted at zero (the classic cache bug: each chunk
// rotated as if it began the sequence, while the prefix's keys keep their positions) the logits
// are clearly different.
TEST(KVCache, RestartingRopePositionsAtZeroForACachedChunkGivesWrongLogits) {
  Model m = make_model(R"({"positions": "rope", "n_kv_heads": 2, "rope_pairing": "adjacent", "n_layers": 1})");
  const int64_t L = 7, n = 3, T = L + n, V = 29;
  const auto ids = tokens(T, 21);
  const auto weights = arena_in_double(m.params());
  // The model's own cached path: prefill L, then the chunk.
  KVCache cache = m.make_cache(1, T);
  std::vector<float> prefill(L * V), chunk(n * V);
  m.forward_cached(prefill.data(), ids.data(), 1, L, nullptr, cache, true);
  m.forward_cached(chunk.data(), ids.data() + L, 1, n, nullptr, cache, true);

  auto chunk_logits = [&](int64_t chunk_first_position) {
    std::vector<int64_t> pos(T);
    for (int64_t t = 0; t < T; ++t) pos[t] = t < L ? t : chunk_first_position + (t - L);
    const std::vector<double> all = reference_decoder_logits(m.config(), weights, ids, pos.data());
    return std::vector<double>(all.begin() + L * V, all.end());
  };
  EXPECT_TRUE(all_close(chunk, chunk_logits(L), 1e-5, 1e-5));  // absolute positions: right
  const auto restarted = chunk_logits(0);
  double worst = 0;
  for (int64_t i = 0; i < n * V; ++i) worst = std::max(worst, std::abs(restarted[i] - static_cast<double>(chunk[i])));
  EXPECT_GT(worst, 0.05) << "restarting the chunk's positions at zero should change its logits";
}

}  // namespace
}  // namespace tformer
