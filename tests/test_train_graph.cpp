// The training graph's hand-written backward: central finite differences in double precision on
// tiny models of every block variant (dropout included, with its masks fixed by the seed), the
// tiled and reference attention paths against each other, the forward against Model's inference
// forward, accumulation semantics, and dropout's statistics.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/cross_entropy.h"
#include "model/model.h"
#include "test_util.h"
#include "train/graph.h"

namespace tformer {
namespace {

ModelConfig tiny(const std::string& variant) {
  ModelConfig c;
  c.vocab_size = 7;
  c.context_length = 6;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.d_ff = 12;
  if (variant == "post") c.norm_placement = NormPlacement::Post;
  if (variant == "rms_rope_swiglu_gqa") {
    c.norm = NormKind::RMSNorm;
    c.positions = Positions::Rope;
    c.activation = Activation::SwiGLU;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.bias = false;
    c.rope_pairing = RopePairing::Adjacent;
  }
  if (variant == "sinusoidal_untied_mqa_tanh") {
    c.positions = Positions::Sinusoidal;
    c.tied_embeddings = false;
    c.n_heads = 4;
    c.n_kv_heads = 1;
    c.activation = Activation::GeluTanh;
  }
  if (variant == "post_rms_none") {
    c.norm_placement = NormPlacement::Post;
    c.norm = NormKind::RMSNorm;
    c.positions = Positions::None;
    c.rope_pairing = RopePairing::Halves;
  }
  if (variant == "dropout") c.dropout = 0.25;
  if (variant == "dropout_post_rope") {
    c.dropout = 0.3;
    c.norm_placement = NormPlacement::Post;
    c.positions = Positions::Rope;
    c.n_heads = 4;
    c.n_kv_heads = 2;
  }
  c.validate();
  return c;
}

// Random params (not GPT-2's tiny init: larger weights make every path matter).
template <typename T>
void randomize(BasicArena<T>& p, uint64_t seed) {
  uint64_t stream = 0;
  for (const auto& e : p.entries()) {
    auto v = p.view(e);
    const bool gain = e.name.ends_with("norm.weight");
    fill_normal<T>(v, seed, stream++, gain ? 1.0 : 0.0, gain ? 0.2 : 0.3);
  }
}

struct Batch {
  std::vector<TokenId> inputs, targets;
};
Batch random_batch(int64_t B, int64_t T, int64_t V, uint64_t seed, bool with_ignored = true) {
  Rng rng(seed);
  Batch b;
  for (int64_t i = 0; i < B * T; ++i) {
    b.inputs.push_back(static_cast<TokenId>(rng.below(V)));
    b.targets.push_back(static_cast<TokenId>(rng.below(V)));
  }
  if (with_ignored) b.targets[1] = kIgnoreIndex;
  return b;
}

class GraphGradient : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphGradient, MatchesFiniteDifferencesInDouble) {
  const ModelConfig c = tiny(GetParam());
  const int64_t B = 2, T = 5;
  for (AttentionKernel kernel : {AttentionKernel::Tiled, AttentionKernel::Reference}) {
    BasicArena<double> params, grads;
    declare_model_params(params, c);
    params.allocate();
    grads.mirror(params);
    randomize(params, 11);
    TrainGraph<double> g(c, B, T, kernel);
    const Batch b = random_batch(B, T, c.vocab_size, 5);
    const bool training = c.dropout > 0;
    const uint64_t seed = 99;
    g.forward(params, b.inputs.data(), b.targets.data(), training, seed);
    g.backward(params, grads);
    // Relative error against the larger magnitude, floored at 1e-3: the central difference's
    // round-off is about eps * loss / h = 2e-16 * 2 / 1e-6 = 4e-10 absolute, so components below
    // ~1e-4 (a key bias's gradient is exactly 0: softmax ignores a shift common to all scores)
    // are judged on an absolute 1e-8.
    int64_t checked = 0;
    double worst = 0;
    std::string worst_name;
    for (const auto& e : params.entries()) {
      auto pv = params.view(e);
      auto gv = grads.view(e);
      for (int64_t i = 0; i < e.shape.numel(); ++i) {
        const double saved = pv.data()[i], h = 1e-6;
        pv.data()[i] = saved + h;
        const double up = g.forward(params, b.inputs.data(), b.targets.data(), training, seed);
        pv.data()[i] = saved - h;
        const double down = g.forward(params, b.inputs.data(), b.targets.data(), training, seed);
        pv.data()[i] = saved;
        const double numeric = (up - down) / (2 * h), analytic = gv.data()[i];
        const double err = std::abs(numeric - analytic) / std::max({std::abs(numeric), std::abs(analytic), 1e-3});
        if (err > worst) {
          worst = err;
          worst_name = fmt::format("{}[{}] analytic {} numeric {}", e.name, i, analytic, numeric);
        }
        ++checked;
      }
    }
    EXPECT_GT(checked, 500);
    EXPECT_LT(worst, 1e-5) << GetParam() << (kernel == AttentionKernel::Tiled ? " tiled " : " reference ")
                           << worst_name;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, GraphGradient,
                         ::testing::Values("pre", "post", "rms_rope_swiglu_gqa", "sinusoidal_untied_mqa_tanh",
                                           "post_rms_none", "dropout", "dropout_post_rope"));

// The forward in evaluation mode computes the same logits as the inference model.
TEST(TrainGraph, ForwardEqualsTheInferenceModel) {
  for (const char* v : {"pre", "post", "rms_rope_swiglu_gqa", "sinusoidal_untied_mqa_tanh", "dropout"}) {
    const ModelConfig c = tiny(v);
    Model m(c);
    randomize(m.params(), 3);
    const int64_t B = 2, T = 6;
    const Batch b = random_batch(B, T, c.vocab_size, 8);
    std::vector<float> want(B * T * c.vocab_size);
    m.forward(want.data(), b.inputs.data(), B, T);
    TrainGraph<float> g(c, B, T);
    g.forward(m.params(), b.inputs.data(), b.targets.data(), /*training=*/false);
    EXPECT_TRUE(test::all_close(g.logits(), want.data(), B * T * c.vocab_size, 1e-5, 1e-5)) << v;
  }
}

// Switching the attention kernel leaves the whole model's loss and gradients unchanged.
TEST(TrainGraph, TiledAndReferenceAttentionGiveTheSameGradients) {
  // Head widths 8, 32 (nanoGPT's small recipe: 128 wide, 4 heads, T 64) and 64; T beyond one
  // key block of the tiled kernel where it fits.
  struct Case {
    const char* variant;
    int64_t d_model, n_heads, T;
  };
  // With dropout 0.2 as well: both kernels drop the same attention probabilities (the tiled one
  // regenerates the mask per tile), so training-mode losses and gradients agree too.
  for (const double dropout : {0.0, 0.2})
    for (const Case& k : {Case{"rms_rope_swiglu_gqa", 32, 4, 70}, Case{"pre", 128, 4, 64}, Case{"post", 128, 2, 80}}) {
      SCOPED_TRACE(fmt::format("dropout {}", dropout));
      ModelConfig c = tiny(k.variant);
      c.dropout = dropout;
      c.context_length = 80;
      c.d_model = k.d_model;
      c.n_heads = k.n_heads;
      c.n_kv_heads = std::string(k.variant) == "rms_rope_swiglu_gqa" ? k.n_heads / 2 : k.n_heads;
      c.d_ff = 2 * k.d_model;
      c.validate();
      const int64_t B = 2, T = k.T;
      Model m(c);
      randomize(m.params(), 21);
      const Batch b = random_batch(B, T, c.vocab_size, 4);
      Arena g1, g2;
      g1.mirror(m.params());
      g2.mirror(m.params());
      TrainGraph<float> tiled(c, B, T, AttentionKernel::Tiled), ref(c, B, T, AttentionKernel::Reference);
      const bool training = dropout > 0;
      const double l1 = tiled.forward(m.params(), b.inputs.data(), b.targets.data(), training, 77);
      const double l2 = ref.forward(m.params(), b.inputs.data(), b.targets.data(), training, 77);
      EXPECT_NEAR(l1, l2, 1e-5 * std::abs(l2)) << k.variant << " head width " << k.d_model / k.n_heads;
      tiled.backward(m.params(), g1);
      ref.backward(m.params(), g2);
      // Both float paths against the double-precision graph (the reference kernel in double): the
      // same function within float round-off, the tiled kernel no less accurate than the
      // reference. With these large random weights (std 0.3) the round-off reaches ~4e-5 of the
      // largest gradient (nanoGPT's shape, dropout 0.2), for either kernel.
      BasicArena<double> pd, gd;
      declare_model_params(pd, c);
      pd.allocate();
      std::copy(m.params().data(), m.params().data() + m.params().size(), pd.data());
      gd.mirror(pd);
      TrainGraph<double> exact(c, B, T, AttentionKernel::Reference);
      exact.forward(pd, b.inputs.data(), b.targets.data(), training, 77);
      exact.backward(pd, gd);
      double scale = 0, err_tiled = 0, err_ref = 0;
      for (int64_t i = 0; i < gd.size(); ++i) {
        scale = std::max(scale, std::abs(gd.data()[i]));
        err_tiled = std::max(err_tiled, std::abs(g1.data()[i] - gd.data()[i]));
        err_ref = std::max(err_ref, std::abs(g2.data()[i] - gd.data()[i]));
      }
      const std::string where = fmt::format("{} head width {}", k.variant, k.d_model / k.n_heads);
      EXPECT_TRUE(test::all_close(g1.data(), gd.data(), gd.size(), 1e-4, 1e-4 * scale)) << where << " tiled";
      EXPECT_TRUE(test::all_close(g2.data(), gd.data(), gd.size(), 1e-4, 1e-4 * scale)) << where << " reference";
      // Within a small factor of the reference's own float error (natively under 2x; just over 2x
      // in the portable build, whose float sums round without FMA).
      EXPECT_LE(err_tiled, 3 * err_ref + 1e-7 * scale) << where;
    }
}

// backward accumulates, scaled: two calls with scale 1/2 equal one call with scale 1.
TEST(TrainGraph, BackwardAccumulatesScaledGradients) {
  const ModelConfig c = tiny("pre");
  Model m(c);
  randomize(m.params(), 5);
  const Batch b = random_batch(2, 5, c.vocab_size, 2);
  TrainGraph<float> g(c, 2, 5);
  Arena once, twice;
  once.mirror(m.params());
  twice.mirror(m.params());
  g.forward(m.params(), b.inputs.data(), b.targets.data());
  g.backward(m.params(), once);
  g.backward(m.params(), twice, 0.5f);
  g.backward(m.params(), twice, 0.5f);
  EXPECT_TRUE(test::all_close(twice.data(), once.data(), once.size(), 1e-6, 1e-7));
  double norm = 0;
  for (int64_t i = 0; i < once.size(); ++i) norm += std::abs(once.data()[i]);
  EXPECT_GT(norm, 0.1);
}

// Gradient accumulation: k micro-batches, each scaled 1/k, equal one k-times larger batch.
TEST(TrainGraph, AccumulatedMicroBatchesEqualOneLargeBatch) {
  const ModelConfig c = tiny("rms_rope_swiglu_gqa");
  Model m(c);
  randomize(m.params(), 9);
  const int64_t k = 3, B = 2, T = 5;
  const Batch big = random_batch(k * B, T, c.vocab_size, 17, /*with_ignored=*/false);
  TrainGraph<float> large(c, k * B, T), micro(c, B, T);
  Arena want, got;
  want.mirror(m.params());
  got.mirror(m.params());
  const double big_loss = large.forward(m.params(), big.inputs.data(), big.targets.data());
  large.backward(m.params(), want);
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    sum += micro.forward(m.params(), big.inputs.data() + i * B * T, big.targets.data() + i * B * T);
    micro.backward(m.params(), got, 1.0f / k);
  }
  EXPECT_NEAR(sum / k, big_loss, 1e-6);
  EXPECT_TRUE(test::all_close(got.data(), want.data(), want.size(), 1e-4, 1e-6));
}

// Dropout: the keep rate is 1 - p; evaluation mode ignores dropout; training mode changes the loss
// and depends on the seed.
TEST(TrainGraph, DropoutAppliesOnlyInTraining) {
  int64_t kept = 0;
  const int64_t n = 200000;
  for (int64_t i = 0; i < n; ++i) kept += dropout_keep(7, 3, i, 0.25);
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.005);  // 5 standard deviations: 0.00097 each
  const ModelConfig c = tiny("dropout");
  ModelConfig c0 = c;
  c0.dropout = 0;
  Model m(c);
  randomize(m.params(), 1);
  const Batch b = random_batch(2, 5, c.vocab_size, 3);
  TrainGraph<float> g(c, 2, 5), g0(c0, 2, 5);
  const double eval = g.forward(m.params(), b.inputs.data(), b.targets.data(), false, 1);
  const double no_dropout = g0.forward(m.params(), b.inputs.data(), b.targets.data(), true, 1);
  EXPECT_EQ(eval, no_dropout);
  const double t1 = g.forward(m.params(), b.inputs.data(), b.targets.data(), true, 1);
  const double t1_again = g.forward(m.params(), b.inputs.data(), b.targets.data(), true, 1);
  const double t2 = g.forward(m.params(), b.inputs.data(), b.targets.data(), true, 2);
  EXPECT_NE(t1, eval);
  EXPECT_EQ(t1, t1_again);
  EXPECT_NE(t1, t2);
}

// A forward that overflows is reported at the first activation it computes that is not finite,
// in compute order (post-LN computes q, k, v, o before the norm input n1_in it allocates first).
TEST(TrainGraph, FirstNonFiniteActivationFollowsTheComputeOrder) {
  for (const char* variant : {"pre", "post"}) {
    SCOPED_TRACE(variant);
    const ModelConfig c = tiny(variant);
    Model m(c);
    randomize(m.params(), 5);
    const Batch b = random_batch(2, 5, c.vocab_size, 3);
    TrainGraph<float> g(c, 2, 5);
    EXPECT_TRUE(std::isfinite(g.forward(m.params(), b.inputs.data(), b.targets.data())));
    EXPECT_EQ(g.first_non_finite_activation(), "");
    // Layer 1's attention input made ~10 everywhere (pre: its norm's bias; post: the previous
    // layer's last norm's bias), then wq = 3e38: q = x . wq is ~5e40 = inf in every row, while every
    // weight stays finite.
    auto nb = m.params().get(std::string(variant) == "pre" ? "layers.1.attn_norm.bias" : "layers.0.ffn_norm.bias");
    for (int64_t i = 0; i < nb.numel(); ++i) nb.data()[i] = 10.0f;
    auto wq = m.params().get("layers.1.attn.wq.weight");
    for (int64_t i = 0; i < wq.numel(); ++i) wq.data()[i] = 3e38f;
    // (The infinite q makes the attention rows NaN, as in torch, so the loss is NaN too.)
    EXPECT_FALSE(std::isfinite(g.forward(m.params(), b.inputs.data(), b.targets.data())));
    EXPECT_THAT(g.first_non_finite_activation(), ::testing::StartsWith("layers.1.q (element "));
  }
}

TEST(TrainGraph, ContextBeyondTheModelIsAnError) {
  const ModelConfig c = tiny("pre");
  EXPECT_ERROR(TrainGraph<float> g(c, 1, 7), ErrorKind::BadInput, "--context",
               "--context 7 exceeds the model's context_length 6");
}

}  // namespace
}  // namespace tformer
