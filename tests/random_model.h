// Tiny models with every parameter drawn at random, for tests that move weights between files or
// layouts (GGUF, key/value head pooling): seeded matrices N(0, 0.3^2), biases U(-0.2, 0.2) and
// norm gains 1 + U(-0.3, 0.3), so that no tensor is symmetric and a swapped one shows.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/config.h"
#include "model/model.h"

namespace tformer::test {

// A 2-layer, width-16, 4-head config over 256 tokens, with `overrides` (JSON) applied.
inline ModelConfig small_config(const char* overrides) {
  auto j = nlohmann::json::parse(R"({"vocab_size": 256, "context_length": 24, "d_model": 16, "n_layers": 2,
                                     "n_heads": 4, "d_ff": 24})");
  j.update(nlohmann::json::parse(overrides));
  ModelConfig c = ModelConfig::from_json(j, "test");
  c.validate();
  return c;
}

inline std::unique_ptr<Model> random_model(const ModelConfig& c, uint64_t seed) {
  auto m = std::make_unique<Model>(c);
  Rng rng(seed);
  for (const auto& e : m->params().entries()) {
    float* p = m->params().data() + e.offset;
    for (int64_t i = 0; i < e.shape.numel(); ++i) {
      if (e.name.ends_with(".bias"))
        p[i] = 0.4f * rng.uniform() - 0.2f;
      else if (e.name.ends_with("norm.weight"))
        p[i] = 1.0f + 0.6f * rng.uniform() - 0.3f;
      else
        p[i] = static_cast<float>(0.3 * rng.normal());
    }
  }
  return m;
}

// n token ids spread over the vocabulary, deterministic.
inline std::vector<TokenId> some_ids(int64_t n, int64_t vocab) {
  std::vector<TokenId> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<TokenId>((i * 37 + 11) % vocab));
  return ids;
}

// The values of a model's parameter (a test failure when the model has none by that name).
inline const float* tensor_of(Model& m, const std::string& name) {
  const auto* e = m.params().find(name);
  EXPECT_NE(e, nullptr) << name;
  return m.params().data() + e->offset;
}

// Logits [ids.size(), vocab] of one sequence.
inline std::vector<float> logits_of(Model& m, const std::vector<TokenId>& ids) {
  std::vector<float> out(ids.size() * static_cast<size_t>(m.config().vocab_size));
  m.forward(out.data(), ids.data(), 1, static_cast<int64_t>(ids.size()));
  return out;
}

}  // namespace tformer::test
