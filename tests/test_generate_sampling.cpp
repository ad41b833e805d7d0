// Sampling against hand-computed distributions, and generation: batched equals alone, prefill
// chunk size does not change the text, stop tokens, context limits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/rng.h"
#include "generate/generator.h"
#include "generate/sampler.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;

// logits = ln p for p = [0.5, 0.3, 0.15, 0.05]: softmax at temperature 1 gives p back.
std::vector<float> four_logits() { return {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)}; }

std::vector<double> dist(SamplerConfig c, const std::vector<float>& logits) {
  Sampler s(c);
  return s.distribution(logits.data(), static_cast<int64_t>(logits.size()));
}

// A temperature so small that 1/t overflows is greedy in the limit, not NaN probabilities.
TEST(Sampler, VanishingTemperatureIsGreedy) {
  const std::vector<float> logits{0.1f, 2.0f, -1.0f, 1.9f};
  for (double t : {1e-310, 5e-324}) {
    Sampler s({t, 0, 1.0, 3});
    for (int i = 0; i < 5; ++i) EXPECT_EQ(s.sample(logits.data(), 4), 1) << t;
    const auto d = s.distribution(logits.data(), 4);
    EXPECT_EQ(d, (std::vector<double>{0, 1, 0, 0})) << t;
  }
}

TEST(Sampler, HandComputedDistributions) {
  const auto l = four_logits();
  // Temperature 1, nothing cut: p itself.
  EXPECT_TRUE(all_close(dist({1.0, 0, 1.0, 0}, l), std::vector<double>{0.5, 0.3, 0.15, 0.05}, 1e-6, 1e-7));
  // Top-k 2: keep 0.5 and 0.3, renormalise by 0.8: 0.625, 0.375.
  EXPECT_TRUE(all_close(dist({1.0, 2, 1.0, 0}, l), std::vector<double>{0.625, 0.375, 0, 0}, 1e-6, 1e-7));
  // Top-p 0.7: 0.5 < 0.7, 0.5 + 0.3 = 0.8 >= 0.7: the same two tokens.
  EXPECT_TRUE(all_close(dist({1.0, 0, 0.7, 0}, l), std::vector<double>{0.625, 0.375, 0, 0}, 1e-6, 1e-7));
  // Top-p 0.85: 0.5 + 0.3 + 0.15 = 0.95 >= 0.85: three tokens over 0.95.
  EXPECT_TRUE(
      all_close(dist({1.0, 0, 0.85, 0}, l), std::vector<double>{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 1e-6, 1e-7));
  // Top-p 0.4: the first token alone reaches it.
  EXPECT_TRUE(all_close(dist({1.0, 0, 0.4, 0}, l), std::vector<double>{1, 0, 0, 0}, 1e-6, 1e-7));
  // Temperature 0.5 squares the probabilities: [0.25, 0.09, 0.0225, 0.0025] / 0.365.
  EXPECT_TRUE(all_close(dist({0.5, 0, 1.0, 0}, l),
                        std::vector<double>{0.25 / 0.365, 0.09 / 0.365, 0.0225 / 0.365, 0.0025 / 0.365}, 1e-5, 1e-7));
  // Top-k 3 then top-p 0.9 of what is left (0.95): 0.5 + 0.3 = 0.8 < 0.855, + 0.15 -> all three.
  EXPECT_TRUE(
      all_close(dist({1.0, 3, 0.9, 0}, l), std::vector<double>{0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}, 1e-6, 1e-7));
  // Greedy: the argmax, and the lowest id among equal maxima.
  EXPECT_TRUE(all_close(dist({0.0, 0, 1.0, 0}, l), std::vector<double>{1, 0, 0, 0}, 0, 0));
  Sampler greedy({0.0, 0, 1.0, 0});
  const std::vector<float> tie{1.0f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(greedy.sample(tie.data(), 4), 1);
}

TEST(Sampler, TinyTopPOnAFlatDistributionKeepsOneToken) {
  // Ten equal logits, top_p 0.05 < 1/10: the first token alone (0.1) reaches the mass; among equal
  // probabilities the lowest id comes first. (The cut-off (1-p)/(V-1) = 0.1056 is above every
  // probability here, so the sampler must fall back to all candidates.)
  const std::vector<float> flat(10, 0.0f);
  std::vector<double> expect(10, 0.0);
  expect[0] = 1.0;
  EXPECT_TRUE(all_close(dist({1.0, 0, 0.05, 0}, flat), expect, 1e-12, 1e-12));
}

TEST(Sampler, DrawFrequenciesMatchTheDistribution) {
  const auto l = four_logits();
  Sampler s({1.0, 0, 0.85, 99});
  const int n = 40000;
  std::vector<int> counts(4);
  for (int i = 0; i < n; ++i) counts[s.sample(l.data(), 4)]++;
  const double expected[] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
  for (int i = 0; i < 4; ++i) {
    const double sigma = std::sqrt(expected[i] * (1 - expected[i]) / n);
    EXPECT_NEAR(counts[i] / double(n), expected[i], 5 * sigma + 1e-12) << "token " << i;
  }
  EXPECT_EQ(counts[3], 0);  // outside the nucleus: never drawn
}

// The untruncated draw (no top-k, no top-p: walked in id order, no sort) and top-k's follow the
// distribution too.
TEST(Sampler, UntruncatedAndTopKDrawsMatchTheDistribution) {
  const auto l = four_logits();
  for (const auto& [k, expected] : {std::pair{int64_t{0}, std::vector<double>{0.5, 0.3, 0.15, 0.05}},
                                    std::pair{int64_t{2}, std::vector<double>{0.5 / 0.8, 0.3 / 0.8, 0, 0}}}) {
    Sampler s({1.0, k, 1.0, 99});
    const int n = 40000;
    std::vector<int> counts(4);
    for (int i = 0; i < n; ++i) counts[s.sample(l.data(), 4)]++;
    for (int i = 0; i < 4; ++i) {
      const double sigma = std::sqrt(expected[i] * (1 - expected[i]) / n);
      EXPECT_NEAR(counts[i] / double(n), expected[i], 5 * sigma + 1e-12) << "top_k " << k << " token " << i;
    }
  }
}

// The untruncated draw walks block masses, then one block: token for token the inverse of the
// cumulative distribution taken one probability at a time (the reference below, with the same
// uniform numbers: the sampler's generator replayed), over a vocabulary that is no whole number
// of blocks and has tokens of probability 0 (at block edges, and a whole block of them).
TEST(Sampler, UntruncatedDrawIsTheInverseOfTheCumulativeDistribution) {
  const int64_t V = 1000;
  std::vector<float> logits(V);
  Rng r(11);
  for (auto& x : logits) x = static_cast<float>(2.0 * r.normal());
  for (int64_t i : {0, 63, 64, 127, 999}) logits[static_cast<size_t>(i)] = -INFINITY;
  for (int64_t i = 192; i < 256; ++i) logits[static_cast<size_t>(i)] = -INFINITY;
  logits[500] = 6.0f;  // one token with much of the mass
  const std::vector<double> p = dist({1.0, 0, 1.0, 0}, logits);
  Sampler s({1.0, 0, 1.0, 77});
  Rng replay(77);
  int checked = 0;
  std::vector<int> hits(V);
  for (int d = 0; d < 20000; ++d) {
    const double u = replay.uniform_double();
    const TokenId got = s.sample(logits.data(), V);
    ++hits[static_cast<size_t>(got)];
    double cum = 0;
    int64_t want = V - 1;
    bool near_edge = false;
    for (int64_t i = 0; i < V; ++i) {
      cum += p[static_cast<size_t>(i)];
      near_edge |= std::abs(u - cum) < 1e-12;
      if (u < cum) {
        want = i;
        break;
      }
    }
    if (near_edge) continue;  // where the two ways of summing may round apart
    ++checked;
    ASSERT_EQ(got, want) << "draw " << d << ", u " << u;
  }
  EXPECT_GT(checked, 19900);
  for (int64_t i : {0, 63, 64, 127, 200, 255, 999}) EXPECT_EQ(hits[static_cast<size_t>(i)], 0) << "token " << i;
  EXPECT_GT(hits[500], 20000 * p[500] * 0.9);
}

TEST(Sampler, TopPOverALargeVocabularyEqualsTheFullSort) {
  // The cut-off that avoids sorting the whole vocabulary must not drop a nucleus token. Reference:
  // sort all 32000 probabilities, take the smallest prefix reaching p, renormalise.
  const int64_t V = 32000;
  std::vector<float> logits(V);
  Rng r(5);
  for (auto& x : logits) x = static_cast<float>(3.0 * r.normal());
  for (double p : {0.5, 0.9, 0.99}) {
    std::vector<double> probs(V);
    double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += probs[i] = std::exp(double(logits[i]) - mx);
    for (auto& q : probs) q /= sum;
    std::vector<int64_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return probs[a] > probs[b]; });
    std::vector<double> expect(V, 0.0);
    double cum = 0;
    size_t kept = 0;
    while (kept < order.size() && cum < p) cum += probs[order[kept++]];
    for (size_t i = 0; i < kept; ++i) expect[order[i]] = probs[order[i]] / cum;
    EXPECT_TRUE(all_close(dist({1.0, 0, p, 0}, logits), expect, 1e-9, 1e-12)) << "top_p " << p;
  }
}

TEST(Sampler, SeededRunsRepeatAndSeedsDiffer) {
  const auto l = four_logits();
  auto run = [&](uint64_t seed) {
    Sampler s({1.0, 0, 1.0, seed});
    std::vector<TokenId> out;
    for (int i = 0; i < 50; ++i) out.push_back(s.sample(l.data(), 4));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, BadSettingsAreErrorsNamingTheOption) {
  EXPECT_ERROR(Sampler({-1.0, 0, 1.0, 0}), ErrorKind::BadInput, "--temperature");
  EXPECT_ERROR(Sampler({1.0, -2, 1.0, 0}), ErrorKind::BadInput, "--top-k");
  EXPECT_ERROR(Sampler({1.0, 0, 0.0, 0}), ErrorKind::BadInput, "--top-p");
  EXPECT_ERROR(Sampler({1.0, 0, 1.5, 0}), ErrorKind::BadInput, "--top-p", "got 1.5");
}

Model small_model(const char* overrides = "{}") {
  auto j = nlohmann::json::parse(R"({"vocab_size": 31, "context_length": 48, "d_model": 16, "n_layers": 2,
                                     "n_heads": 4, "n_kv_heads": 2, "positions": "rope", "d_ff": 24})");
  j.update(nlohmann::json::parse(overrides));
  Model m(ModelConfig::from_json(j, "test"));
  uint64_t stream = 0;
  for (const auto& e : m.params().entries()) {
    const bool gain = e.name.ends_with("norm.weight");
    fill_normal<float>(m.params().view(e), 11, stream++, gain ? 1.0 : 0.0, gain ? 0.1 : 0.4);
  }
  return m;
}

TEST(Generate, BatchedEqualsEachPromptAloneAndPrefillChunkDoesNotMatter) {
  Model m = small_model();
  const std::vector<std::vector<TokenId>> prompts{{3, 1, 4}, {1, 5, 9, 2, 6, 5, 3}, {5}, {8, 9, 7, 9, 3}};
  for (double temperature : {0.0, 0.9}) {
    GenerateOptions opt;
    opt.max_new_tokens = 20;
    opt.sampler = {temperature, 0, 0.95, 42};
    const auto batched = generate(m, prompts, opt);
    ASSERT_EQ(batched.size(), prompts.size());
    for (size_t b = 0; b < prompts.size(); ++b) {
      const auto alone = generate(m, {prompts[b]}, opt);
      EXPECT_EQ(batched[b], alone[0]) << "prompt " << b << " temperature " << temperature;
      EXPECT_EQ(batched[b].size(), 20u);
    }
    for (int64_t chunk : {1, 2, 3, 5}) {
      opt.prefill_chunk = chunk;
      EXPECT_EQ(generate(m, prompts, opt), batched) << "prefill chunk " << chunk;
    }
  }
}

TEST(Generate, StopsAfterTheStopTokenAndStreamsEveryToken) {
  Model m = small_model();
  GenerateOptions opt;
  opt.max_new_tokens = 30;
  opt.sampler = {0.0, 0, 1.0, 0};
  const auto free_run = generate(m, {{2, 7}}, opt)[0];
  // Stop at the third generated token's value: generation must end right after its first use.
  const TokenId stop = free_run[2];
  opt.stop_token = stop;
  std::vector<TokenId> streamed;
  const auto stopped = generate(m, {{2, 7}}, opt, [&](int64_t, TokenId id) { streamed.push_back(id); })[0];
  const auto first = std::find(free_run.begin(), free_run.end(), stop) - free_run.begin();
  EXPECT_EQ(stopped, std::vector<TokenId>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(streamed, stopped);
}

TEST(Generate, NeverSamplesTheIdsItIsToldToAvoid) {
  Model m = small_model();
  GenerateOptions opt;
  opt.max_new_tokens = 40;
  opt.sampler = {1.5, 0, 1.0, 5};  // hot: every id has a real chance
  const auto free_run = generate(m, {{2, 7}, {4}}, opt);
  // Ban every id the free run used except one, plus some it did not: none may appear, and greedy
  // picks the best allowed id.
  std::vector<TokenId> banned;
  for (const auto& run : free_run) banned.insert(banned.end(), run.begin(), run.end());
  std::sort(banned.begin(), banned.end());
  banned.erase(std::unique(banned.begin(), banned.end()), banned.end());
  ASSERT_GE(banned.size(), 5u);
  banned.erase(banned.begin());
  for (TokenId id : {0, 30}) banned.push_back(id);
  opt.never_sample = banned;
  for (double temperature : {1.5, 0.0}) {
    opt.sampler.temperature = temperature;
    for (const auto& run : generate(m, {{2, 7}, {4}}, opt))
      for (TokenId id : run) EXPECT_EQ(std::count(banned.begin(), banned.end(), id), 0) << id;
  }
}

TEST(Generate, PromptPlusNewTokensBeyondTheContextIsAnErrorNamingBoth) {
  Model m = small_model();
  GenerateOptions opt;
  opt.max_new_tokens = 40;
  EXPECT_ERROR(generate(m, {std::vector<TokenId>(10, 1)}, opt), ErrorKind::BadInput, "prompt 0", "10 tokens",
               "40 new tokens", "context_length 48");
  opt.max_new_tokens = 38;  // 10 + 38 = 48 fits exactly
  EXPECT_EQ(generate(m, {std::vector<TokenId>(10, 1)}, opt)[0].size(), 38u);
}

TEST(Generate, DropoutInTheConfigNeverAppliesOutsideTraining) {
  // Dropout is a training-time operation: the same weights with dropout 0.5 in the config give
  // identical logits and text.
  Model a = small_model(), b = small_model(R"({"dropout": 0.5})");
  const std::vector<TokenId> ids{4, 8, 15, 16, 23};
  std::vector<float> la(5 * 31), lb(5 * 31);
  a.forward(la.data(), ids.data(), 1, 5);
  b.forward(lb.data(), ids.data(), 1, 5);
  EXPECT_EQ(la, lb);
  GenerateOptions opt;
  opt.max_new_tokens = 10;
  opt.sampler = {0.8, 0, 0.9, 3};
  EXPECT_EQ(generate(a, {ids}, opt), generate(b, {ids}, opt));
}

}  // namespace
}  // namespace tformer
