// The KV cache: chunked prefill and one-token decode through the cache equal the uncached pass,
// for every prefix length, chunk size and batch of mixed prompt lengths (spec section 06: "a cached
// implementation can return plausible numbers while using the wrong tokens").
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/model.h"
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
  EXPECT_THROW(parse_attention_kernel("flash"), Error);
}

TEST(KVCache, PayloadBytesFollowTheSpecFormula) {
  // 2 x layers x batch x kv_heads x tokens x head_dim x 4 bytes.
  // GQA: 2 layers, batch 3, 2 kv heads, 10 slots, head width 4: 2*2*3*2*10*4*4 = 3840.
  KVCache gqa(2, 3, 2, 10, 4);
  EXPECT_EQ(gqa.payload_bytes(), 3840);
  // MHA with 4 kv heads: twice as much; MQA with 1: half.
  EXPECT_EQ(KVCache(2, 3, 4, 10, 4).payload_bytes(), 7680);
  EXPECT_EQ(KVCache(2, 3, 1, 10, 4).payload_bytes(), 1920);
  // Filled slots: sequence lengths 5, 0, 2 -> 7 tokens: 2*2*2*7*4*4 = 896.
  gqa.advance(0, 5);
  gqa.advance(2, 2);
  EXPECT_EQ(gqa.used_bytes(), 896);
  EXPECT_THROW(gqa.advance(0, 6), Error);  // 11 > capacity 10
  // A model's cache has its config's kv heads and head width.
  Model m = make_model(R"({"n_kv_heads": 2})");
  EXPECT_EQ(m.make_cache(1, 80).payload_bytes(), 2 * 2 * 1 * 2 * 80 * 4 * 4);
}

TEST(KVCache, PastTheContextOrCapacityIsAnErrorNamingTheNumbers) {
  Model m = make_model(R"({"context_length": 8})");
  KVCache cache = m.make_cache(1, 20);
  const auto ids = tokens(9, 4);
  std::vector<float> logits(9 * 29);
  try {
    m.forward_cached(logits.data(), ids.data(), 1, 9, nullptr, cache, true);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("9 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("context_length is 8"), std::string::npos) << e.what();
  }
  EXPECT_EQ(cache.length(0), 0);  // nothing was stored
  KVCache small = m.make_cache(1, 4);
  EXPECT_THROW(m.forward_cached(logits.data(), ids.data(), 1, 5, nullptr, small, true), Error);
}

TEST(KVCache, ModelForwardEqualsTheReferenceBlockComposition) {
  // The model's own layer loop (through the cache) against block_forward, the composition of
  // reference kernels that tests/test_reference_block.cpp checks against PyTorch.
  const int64_t T = 9, V = 29, d = 16;
  for (const char* cfg : kConfigs) {
    Model m = make_model(cfg);
    m.set_attention_kernel(AttentionKernel::Reference);
    const auto& c = m.config();
    const auto ids = tokens(T, 8);
    std::vector<float> logits(T * V);
    m.forward(logits.data(), ids.data(), 1, T);
    // Reference: embedding (+ positions), block_forward per layer, final norm, projection.
    std::vector<float> x(T * d), y(T * d);
    const float* emb = m.params().get("tok_embeddings.weight").data();
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < d; ++k) x[t * d + k] = emb[ids[t] * d + k];
    if (c.positions == Positions::Learned || c.positions == Positions::Sinusoidal) {
      std::vector<float> pe(T * d);
      if (c.positions == Positions::Sinusoidal)
        sinusoidal_positions(pe.data(), T, d);
      else
        std::copy_n(m.params().get("pos_embeddings.weight").data(), T * d, pe.data());
      for (int64_t i = 0; i < T * d; ++i) x[i] += pe[i];
    }
    for (int64_t l = 0; l < c.n_layers; ++l) {
      block_forward<float>(y.data(), x.data(), 1, T, c.block_shape(), m.layer_weights(l));
      std::swap(x, y);
    }
    std::vector<float> ref(T * V);
    if (c.norm_placement == NormPlacement::Pre) {
      std::vector<float> mean(T), rstd(T);
      if (c.norm == NormKind::LayerNorm)
        layernorm_forward<float>(y.data(), mean.data(), rstd.data(), x.data(), m.params().get("norm.weight").data(),
                                 m.params().get("norm.bias").data(), T, d, 1e-5f);
      else
        rmsnorm_forward<float>(y.data(), rstd.data(), x.data(), m.params().get("norm.weight").data(), T, d, 1e-5f);
      std::swap(x, y);
    }
    const float* out_w = m.params().get(c.tied_embeddings ? "tok_embeddings.weight" : "output.weight").data();
    linear_forward<float>(ref.data(), x.data(), out_w, nullptr, T, d, V);
    EXPECT_TRUE(all_close(logits, ref, 1e-5, 1e-5)) << cfg;
  }
}

// RoPE through the cache, on the whole model: a cached chunk's queries and keys are rotated at
// their ABSOLUTE positions (cached length + t). This test recomputes a one-layer model's cached
// chunk from the model's own weights and the public kernels, with the chunk's positions given
// explicitly: at the absolute positions it reproduces the model's uncached logits; with the
// positions restarted at zero (the classic cache bug: each chunk rotated as if it began the
// sequence, while the prefix's keys keep their positions) the logits are clearly different.
TEST(KVCache, RestartingRopePositionsAtZeroForACachedChunkGivesWrongLogits) {
  Model m = make_model(R"({"positions": "rope", "n_kv_heads": 2, "rope_pairing": "adjacent", "n_layers": 1})");
  const auto& c = m.config();
  const int64_t L = 7, n = 3, T = L + n, V = 29, d = 16, hd = c.head_dim();
  const int64_t dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  const auto ids = tokens(T, 21);
  std::vector<float> want(T * V);
  m.forward(want.data(), ids.data(), 1, T);  // uncached, positions 0..T-1

  auto P = [&](const std::string& name) { return m.params().get(name).data(); };
  const BlockWeights<float> w = m.layer_weights(0);
  const RopeParams rp{hd, c.rope_base, c.rope_pairing};
  auto norm = [&](float* y, const float* x, const float* g, const float* b, int64_t rows) {
    std::vector<float> mean(rows), rstd(rows);
    layernorm_forward<float>(y, mean.data(), rstd.data(), x, g, b, rows, d, 1e-5f);
  };
  // Keys and values of all T tokens; the prefix's always at positions 0..L-1 (as cached).
  auto chunk_logits = [&](int64_t chunk_first_position) {
    std::vector<float> x(T * d), u(T * d), q(T * dq), k(T * dkv), v(T * dkv);
    const float* emb = P("tok_embeddings.weight");
    for (int64_t t = 0; t < T; ++t) std::copy_n(emb + ids[t] * d, d, x.data() + t * d);
    norm(u.data(), x.data(), w.attn_norm_w, w.attn_norm_b, T);
    linear_forward<float>(q.data(), u.data(), w.wq, w.bq, T, d, dq);
    linear_forward<float>(k.data(), u.data(), w.wk, w.bk, T, d, dkv);
    linear_forward<float>(v.data(), u.data(), w.wv, w.bv, T, d, dkv);
    std::vector<int64_t> pos(T);
    for (int64_t t = 0; t < T; ++t) pos[t] = t < L ? t : chunk_first_position + (t - L);
    rope_forward<float>(q.data(), pos.data(), T, c.n_heads, dq, rp);
    rope_forward<float>(k.data(), pos.data(), T, c.n_kv_heads, dkv, rp);
    // The chunk's n queries against all T cached slots, causal on the slot index (offset L).
    std::vector<float> o(n * dq), br(n * d), h(n * d), u2(n * d), a(n * c.d_ff), act(n * c.d_ff), y(n * d);
    const AttentionShape shape{1, n, T, c.n_heads, c.n_kv_heads, hd};
    AttentionMask mask;
    const int64_t offset = L;
    mask.q_offset = &offset;
    attention_forward<float>(heads_btHd(o.data(), n, c.n_heads, hd), nullptr,
                             heads_btHd<const float>(q.data() + L * dq, n, c.n_heads, hd),
                             heads_btHd<const float>(k.data(), T, c.n_kv_heads, hd),
                             heads_btHd<const float>(v.data(), T, c.n_kv_heads, hd), shape, mask);
    linear_forward<float>(br.data(), o.data(), w.wo, w.bo, n, dq, d);
    for (int64_t i = 0; i < n * d; ++i) h[i] = x[L * d + i] + br[i];
    norm(u2.data(), h.data(), w.ffn_norm_w, w.ffn_norm_b, n);
    linear_forward<float>(a.data(), u2.data(), w.w1, w.b1, n, d, c.d_ff);
    gelu_forward<float>(act.data(), a.data(), n * c.d_ff, GeluKind::Exact);
    linear_forward<float>(br.data(), act.data(), w.w2, w.b2, n, c.d_ff, d);
    for (int64_t i = 0; i < n * d; ++i) h[i] += br[i];
    norm(y.data(), h.data(), P("norm.weight"), P("norm.bias"), n);
    std::vector<float> logits(n * V);
    linear_forward<float>(logits.data(), y.data(), P("tok_embeddings.weight"), nullptr, n, d, V);
    return logits;
  };
  const std::vector<float> want_chunk(want.begin() + L * V, want.end());
  EXPECT_TRUE(all_close(chunk_logits(L), want_chunk, 1e-5, 1e-5));  // absolute positions: right
  const auto restarted = chunk_logits(0);
  double worst = 0;
  for (int64_t i = 0; i < n * V; ++i)
    worst = std::max(worst, static_cast<double>(std::abs(restarted[i] - want_chunk[i])));
  EXPECT_GT(worst, 0.05) << "restarting the chunk's positions at zero should change its logits";
  // And the model's own cached path (prefill L, then the chunk) agrees with the uncached pass.
  KVCache cache = m.make_cache(1, T);
  std::vector<float> prefill(L * V), chunk(n * V);
  m.forward_cached(prefill.data(), ids.data(), 1, L, nullptr, cache, true);
  m.forward_cached(chunk.data(), ids.data() + L, 1, n, nullptr, cache, true);
  EXPECT_TRUE(all_close(chunk, want_chunk, 1e-5, 1e-5));
}

}  // namespace
}  // namespace tformer
