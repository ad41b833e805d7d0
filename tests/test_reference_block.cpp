// The reference block against PyTorch's nn.TransformerEncoderLayer (fixtures from
// tools/reference/gen_block_fixtures.py), and that pre-LN and post-LN are different functions of
// the same weights.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reference_block.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;

template <typename T>
struct Case {
  BlockShape shape;
  int64_t batch = 0, n_tokens = 0;
  std::map<std::string, std::vector<T>> w;
  std::vector<T> x, y;
  BlockWeights<T> weights() const {
    auto p = [&](const char* name) -> const T* {
      auto it = w.find(name);
      return it == w.end() ? nullptr : it->second.data();
    };
    BlockWeights<T> b;
    b.attn_norm_w = p("attn_norm.weight");
    b.attn_norm_b = p("attn_norm.bias");
    b.wq = p("attn.wq.weight");
    b.wk = p("attn.wk.weight");
    b.wv = p("attn.wv.weight");
    b.wo = p("attn.wo.weight");
    b.bq = p("attn.wq.bias");
    b.bk = p("attn.wk.bias");
    b.bv = p("attn.wv.bias");
    b.bo = p("attn.wo.bias");
    b.ffn_norm_w = p("ffn_norm.weight");
    b.ffn_norm_b = p("ffn_norm.bias");
    b.w1 = p("ffn.w1.weight");
    b.b1 = p("ffn.w1.bias");
    b.w2 = p("ffn.w2.weight");
    b.b2 = p("ffn.w2.bias");
    return b;
  }
};

template <typename T>
std::vector<Case<T>> load_cases() {
  std::ifstream in("fixtures/block_torch.json");
  if (!in) throw std::runtime_error("cannot open tests/fixtures/block_torch.json");
  const auto j = nlohmann::json::parse(in);
  std::vector<Case<T>> out;
  for (const auto& c : j.at("cases")) {
    Case<T> k;
    k.batch = c.at("batch");
    k.n_tokens = c.at("T");
    k.shape.d_model = c.at("d_model");
    k.shape.n_heads = c.at("n_heads");
    k.shape.n_kv_heads = k.shape.n_heads;
    k.shape.d_ff = c.at("d_ff");
    k.shape.norm_eps = c.at("norm_eps");
    k.shape.placement = c.at("norm_placement") == "pre" ? NormPlacement::Pre : NormPlacement::Post;
    k.shape.activation = c.at("activation") == "gelu" ? Activation::Gelu : Activation::GeluTanh;
    for (const auto& [name, values] : c.at("weights").items()) {
      const auto v = values.template get<std::vector<double>>();
      k.w[name] = std::vector<T>(v.begin(), v.end());
    }
    const auto x = c.at("x").get<std::vector<double>>(), y = c.at("y").get<std::vector<double>>();
    k.x.assign(x.begin(), x.end());
    k.y.assign(y.begin(), y.end());
    out.push_back(std::move(k));
  }
  return out;
}

TEST(BlockVsTorch, DoubleMatchesTransformerEncoderLayer) {
  const auto cases = load_cases<double>();
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& c : cases) {
    std::vector<double> y(c.x.size());
    block_forward<double>(y.data(), c.x.data(), c.batch, c.n_tokens, c.shape, c.weights());
    // Both sides compute in float64; differences are summation order only (~1e-15 relative).
    EXPECT_TRUE(all_close(y, c.y, 1e-10, 1e-12)) << "case with " << c.n_tokens << " tokens";
  }
}

TEST(BlockVsTorch, FloatMatchesWithinFloatTolerance) {
  for (const auto& c : load_cases<float>()) {
    std::vector<float> y(c.x.size());
    block_forward<float>(y.data(), c.x.data(), c.batch, c.n_tokens, c.shape, c.weights());
    // float32 rounding through two LayerNorms and ~4 matmuls of width <= 12 on O(1) values.
    EXPECT_TRUE(all_close(y, c.y, 1e-5, 1e-5));
  }
}

TEST(BlockPlacement, PreAndPostLnAreDifferentFunctionsOfTheSameWeights) {
  const auto cases = load_cases<double>();
  const auto& c = cases[1];  // pre-LN weights
  BlockShape pre = c.shape, post = c.shape;
  pre.placement = NormPlacement::Pre;
  post.placement = NormPlacement::Post;
  std::vector<double> y_pre(c.x.size()), y_post(c.x.size());
  block_forward<double>(y_pre.data(), c.x.data(), c.batch, c.n_tokens, pre, c.weights());
  block_forward<double>(y_post.data(), c.x.data(), c.batch, c.n_tokens, post, c.weights());
  double max_diff = 0;
  for (size_t i = 0; i < y_pre.size(); ++i) max_diff = std::max(max_diff, std::abs(y_pre[i] - y_post[i]));
  EXPECT_GT(max_diff, 0.1) << "pre-LN and post-LN gave nearly the same output";
}

TEST(BlockPlacement, WithSilentBranchesPreLnIsIdentityPostLnNormalises) {
  // With wo = 0, bo = 0, w2 = 0, b2 = 0 both branches output zero. Then pre-LN gives
  // y = x + 0 + 0 = x exactly (the residual stream bypasses the norms), while post-LN gives
  // y = LN2(LN1(x)): with unit gain and zero bias every row of y has mean 0 and variance
  // var/(var + eps) ~ 1 — a different function.
  auto c = load_cases<double>()[0];
  for (auto name : {"attn.wo.weight", "attn.wo.bias", "ffn.w2.weight", "ffn.w2.bias"})
    std::fill(c.w[name].begin(), c.w[name].end(), 0.0);
  for (auto name : {"attn_norm.weight", "ffn_norm.weight"}) std::fill(c.w[name].begin(), c.w[name].end(), 1.0);
  for (auto name : {"attn_norm.bias", "ffn_norm.bias"}) std::fill(c.w[name].begin(), c.w[name].end(), 0.0);
  BlockShape s = c.shape;
  std::vector<double> y(c.x.size());
  s.placement = NormPlacement::Pre;
  block_forward<double>(y.data(), c.x.data(), c.batch, c.n_tokens, s, c.weights());
  EXPECT_EQ(y, c.x);
  s.placement = NormPlacement::Post;
  block_forward<double>(y.data(), c.x.data(), c.batch, c.n_tokens, s, c.weights());
  const int64_t d = s.d_model;
  for (int64_t r = 0; r < c.batch * c.n_tokens; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += y[r * d + i] / d;
    for (int64_t i = 0; i < d; ++i) var += (y[r * d + i] - mean) * (y[r * d + i] - mean) / d;
    EXPECT_NEAR(mean, 0.0, 1e-12);
    EXPECT_NEAR(var, 1.0, 1e-3);  // var/(var+eps) twice; row variances of x are >= 0.05 here
  }
  EXPECT_NE(y, c.x);
}

}  // namespace
}  // namespace tformer
