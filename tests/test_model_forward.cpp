// The decoder's parameter layout, initialisation, config validation, and properties of the
// uncached forward that hold for every configuration.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "kernels/cross_entropy.h"
#include "model/model.h"
#include "test_util.h"

namespace tformer {
namespace {

ModelConfig tiny(const char* overrides = "{}") {
  auto j = nlohmann::json::parse(R"({"vocab_size": 37, "context_length": 16, "d_model": 12, "n_layers": 2,
                                     "n_heads": 3, "d_ff": 20})");
  j.update(nlohmann::json::parse(overrides));
  return ModelConfig::from_json(j, "test");
}

TEST(ModelConfig, DefaultsAndRoundTrip) {
  auto c = ModelConfig::from_json(nlohmann::json::parse(R"({"vocab_size": 10})"));
  c.validate();
  EXPECT_EQ(c.n_kv_heads, c.n_heads);
  EXPECT_EQ(c.d_ff, 4 * c.d_model);
  auto again = ModelConfig::from_json(c.to_json());
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(ModelConfig, ErrorsNameTheField) {
  // Parses and validates a config: every problem is a BadConfig error about one key.
  auto check = [](const char* json) {
    auto c = ModelConfig::from_json(nlohmann::json::parse(json), "cfg.json");
    c.validate();
  };
  EXPECT_ERROR(check(R"({"vocab_size": 10, "colour": 1})"), ErrorKind::BadConfig, "colour", "cfg.json");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "n_heads": 4, "n_kv_heads": 3})"), ErrorKind::BadConfig, "n_heads",
               "\"n_kv_heads\" 3");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "d_model": 130, "n_heads": 4})"), ErrorKind::BadConfig, "d_model",
               "\"n_heads\" 4");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "d_model": 12, "n_heads": 4, "positions": "rope"})"), ErrorKind::BadConfig,
               "positions", "= 3 is odd");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "norm": "batchnorm"})"), ErrorKind::BadConfig, "norm");
  EXPECT_ERROR(check(R"({"vocab_size": "ten"})"), ErrorKind::BadConfig, "vocab_size", "must be an integer");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "dropout": 1.5})"), ErrorKind::BadConfig, "dropout");
  EXPECT_ERROR(check(R"({})"), ErrorKind::BadConfig, "vocab_size", "must be positive, got 0");
  // Sizes beyond 2^31 are refused as they are read: 4 * d_model (the default d_ff) would overflow.
  EXPECT_ERROR(check(R"({"vocab_size": 10, "d_model": 4611686018427387904})"), ErrorKind::BadConfig, "d_model",
               "beyond 2147483648");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "n_layers": 18446744073709551615})"), ErrorKind::BadConfig, "n_layers");
  EXPECT_ERROR(check(R"({"vocab_size": 10, "n_heads": -4294967296})"), ErrorKind::BadConfig, "n_heads");
}

TEST(ModelConfig, ParamBytesOfAnyLayerCountCostNothingToCompute) {
  // 2^31 layers (a fuzzed config): sized without a list of 2^31 layers, and refused by memory.
  auto c = ModelConfig::from_json(nlohmann::json::parse(R"({"vocab_size": 10, "d_model": 8, "n_heads": 2,
                                                            "n_layers": 2147483648})"));
  c.validate();
  auto one = c;
  one.n_layers = 1;
  auto none = c;
  none.n_layers = 0;
  const double layer = float32_param_bytes(one) - float32_param_bytes(none);
  EXPECT_GT(layer, 0);
  EXPECT_DOUBLE_EQ(float32_param_bytes(c), float32_param_bytes(none) + 2147483648.0 * layer);
  auto t = tiny();
  t.validate();
  EXPECT_EQ(float32_param_bytes(t), 4.0 * static_cast<double>(Model(t).n_params()));
  EXPECT_ERROR(check_params_fit_in_memory(c, "big.json"), ErrorKind::BadFile, "big.json");
}

TEST(Model, TensorNamesFollowTheCheckpointFormat) {
  Model m(tiny(R"({"activation": "swiglu", "tied_embeddings": false, "n_kv_heads": 1})"));
  std::set<std::string> names;
  for (const auto& e : m.params().entries()) names.insert(e.name);
  for (const char* n :
       {"tok_embeddings.weight", "pos_embeddings.weight", "layers.0.attn_norm.weight", "layers.0.attn_norm.bias",
        "layers.1.attn.wq.weight", "layers.1.attn.wk.bias", "layers.1.attn.wo.weight", "layers.1.ffn.w3.weight",
        "layers.1.ffn.w2.bias", "norm.weight", "norm.bias", "output.weight"})
    EXPECT_TRUE(names.contains(n)) << n;
  EXPECT_TRUE(names.contains("layers.0.ffn.w3.bias"));                           // swiglu with bias: w3 has one too
  EXPECT_EQ(m.params().get("layers.0.attn.wk.weight").shape(), (Shape{4, 12}));  // 1 kv head of width 4
  Model post(tiny(R"({"norm_placement": "post", "norm": "rmsnorm", "bias": false, "positions": "rope"})"));
  for (const auto& e : post.params().entries()) {
    EXPECT_FALSE(e.name.ends_with(".bias")) << e.name;
    EXPECT_NE(e.name, "norm.weight");
    EXPECT_NE(e.name, "pos_embeddings.weight");
    EXPECT_NE(e.name, "output.weight");
  }
}

TEST(Model, Gpt2InitStatistics) {
  Model m(tiny(R"({"n_layers": 8, "d_model": 48, "vocab_size": 500})"));
  m.init_gpt2(7);
  auto stddev = [](TensorView<float> v) {
    double s = 0, s2 = 0;
    for (float x : v) s += x, s2 += double(x) * x;
    const double n = static_cast<double>(v.numel());
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stddev(m.params().get("tok_embeddings.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(m.params().get("layers.3.ffn.w1.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(m.params().get("layers.3.ffn.w2.weight")), 0.02 / 4.0, 0.0003);  // 0.02 / sqrt(2 * 8)
  for (float x : m.params().get("layers.0.attn_norm.weight")) EXPECT_EQ(x, 1.0f);
  for (float x : m.params().get("layers.0.attn.wq.bias")) EXPECT_EQ(x, 0.0f);
}

TEST(Model, InitialLossIsNearLogVocab) {
  // With weights of std 0.02 the logits are nearly equal, so the loss is close to ln(vocab).
  Model m(tiny(R"({"vocab_size": 257})"));
  m.init_gpt2(1);
  const int64_t B = 2, T = 16, V = 257;
  std::vector<TokenId> tokens(B * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<TokenId>((i * 31 + 7) % V);
  std::vector<TokenId> inputs(B * T), targets(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) inputs[b * T + t] = tokens[b * (T + 1) + t];
  shift_targets(targets.data(), tokens.data(), B, T);
  std::vector<float> logits(B * T * V);
  m.forward(logits.data(), inputs.data(), B, T);
  const auto r = cross_entropy_forward<float>(nullptr, logits.data(), targets.data(), B * T, V);
  EXPECT_EQ(r.count, B * T);
  EXPECT_NEAR(r.loss, std::log(257.0), 0.05);
}

TEST(Model, ChangingTheLastTokenChangesNoEarlierLogits) {
  for (const char* cfg : {R"({})", R"({"positions": "rope", "d_model": 12, "n_heads": 3, "n_kv_heads": 1})",
                          R"({"norm_placement": "post", "positions": "sinusoidal", "activation": "swiglu"})"}) {
    Model m(tiny(cfg));
    m.init_gpt2(3);
    const int64_t T = 9, V = 37;
    std::vector<TokenId> ids{3, 1, 4, 1, 5, 9, 2, 6, 5};
    std::vector<float> a(T * V), b(T * V);
    m.forward(a.data(), ids.data(), 1, T);
    ids.back() = 30;
    m.forward(b.data(), ids.data(), 1, T);
    for (int64_t i = 0; i < (T - 1) * V; ++i) ASSERT_EQ(a[i], b[i]) << cfg << " position " << i / V;
    bool last_changed = false;
    for (int64_t i = (T - 1) * V; i < T * V; ++i) last_changed |= a[i] != b[i];
    EXPECT_TRUE(last_changed) << cfg;
  }
}

TEST(Model, ContextAndIdsAreChecked) {
  Model m(tiny());
  std::vector<TokenId> ids(17, 1);
  std::vector<float> logits(17 * 37);
  EXPECT_ERROR(m.forward(logits.data(), ids.data(), 1, 17), ErrorKind::BadInput, "sequence 0", "context_length is 16");
  ids[3] = 37;
  EXPECT_ERROR(m.forward(logits.data(), ids.data(), 1, 16), ErrorKind::BadInput, "position 3", "id 37");
}

TEST(Model, SinusoidalTableMatchesTheFormula) {
  // PE[p][2i] = sin(p / 10000^(2i/d)), PE[p][2i+1] = cos(same); d = 4:
  // p = 3, i = 0: sin(3) = 0.1411200080598672, cos(3) = -0.9899924966004454
  // p = 3, i = 1: 3 / 10000^(2/4) = 0.03: sin = 0.02999550020249566, cos = 0.9995500337489875
  std::vector<float> pe(4 * 4);
  sinusoidal_positions(pe.data(), 4, 4);
  EXPECT_FLOAT_EQ(pe[12], 0.1411200080598672f);
  EXPECT_FLOAT_EQ(pe[13], -0.9899924966004454f);
  EXPECT_FLOAT_EQ(pe[14], 0.02999550020249566f);
  EXPECT_FLOAT_EQ(pe[15], 0.9995500337489875f);
}

}  // namespace
}  // namespace tformer
