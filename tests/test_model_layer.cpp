// The one decoder layer (model/layer.h) against its oracle, the reference block composed plainly
// from the reference kernels (tests/reference_block.h, itself checked against PyTorch): in double,
// for every variant of the block, through its own keys (training's layout) and through a cache in
// chunks; its backward against central finite differences; the typed weight view; the parameter
// list.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/linear.h"
#include "kernels/matmul.h"
#include "kernels/qlinear.h"
#include "model/layer.h"
#include "model/params.h"
#include "reference_block.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;

struct Variant {
  const char* name;
  const char* json;
};

// Every option of the block at least once: placement, norm, activation, head sharing, RoPE
// pairings, biases.
const Variant kVariants[] = {
    {"pre_ln_gelu_mha_learned", R"({})"},
    {"post_ln_gelu_tanh_nobias", R"({"norm_placement": "post", "activation": "gelu_tanh", "bias": false})"},
    {"pre_rms_swiglu_gqa_rope_halves",
     R"({"norm": "rmsnorm", "activation": "swiglu", "n_kv_heads": 2, "positions": "rope", "rope_pairing": "halves"})"},
    {"post_rms_swiglu_bias_mqa_rope_adjacent",
     R"({"norm_placement": "post", "norm": "rmsnorm", "activation": "swiglu", "n_kv_heads": 1, "positions": "rope",
         "rope_pairing": "adjacent"})"},
    {"pre_ln_gelu_gqa_sinusoidal", R"({"n_kv_heads": 2, "positions": "sinusoidal"})"},
};

ModelConfig config(const char* json) {
  auto j = nlohmann::json::parse(R"({"vocab_size": 11, "context_length": 16, "d_model": 16, "n_layers": 1,
                                     "n_heads": 4, "d_ff": 24})");
  j.update(nlohmann::json::parse(json));
  ModelConfig c = ModelConfig::from_json(j, "test");
  c.validate();
  return c;
}

// Weights large enough that every path matters; norm gains near 1.
void randomize(BasicArena<double>& p, uint64_t seed) {
  uint64_t stream = 0;
  for (const auto& e : p.entries()) {
    const bool gain = e.name.ends_with("norm.weight");
    fill_normal<double>(p.view(e), seed, stream++, gain ? 1.0 : 0.0, gain ? 0.2 : 0.4);
  }
}

// One layer's parameters, activations and scratch for `batch` x `n` rows, in double.
struct LayerRig {
  ModelConfig c;
  int64_t batch, n;
  BasicArena<double> params, grads, acts;
  ModelParams<double> p;
  ModelGrads<double> g;
  LayerActs<double> a;
  LayerScratch<double> s;
  std::vector<int64_t> positions;
  LayerKeep keep;

  LayerRig(const ModelConfig& config, int64_t batch_, int64_t n_, AttentionKernel kernel, uint64_t seed = 3)
      : c(config), batch(batch_), n(n_) {
    declare_model_params(params, c);
    params.allocate();
    randomize(params, seed);
    grads.mirror(params);
    p = model_params(params, c);
    g = model_grads(grads, c);
    keep = {.input = true, .lse = kernel == AttentionKernel::Tiled, .probs = kernel == AttentionKernel::Reference};
    declare_layer_acts(acts, "", c, batch, n, keep);
    declare_layer_scratch(acts, c, batch * n, true);
    acts.add("y", {batch * n, c.d_model});
    acts.allocate();
    a = bind_layer_acts(acts, "", c, batch, n, keep);
    s = bind_layer_scratch(acts, c, true);
    for (int64_t r = 0; r < batch * n; ++r) positions.push_back(r % n);
  }
  double* y() { return acts.get("y").data(); }
  LayerStep step(AttentionKernel kernel) const { return {batch, n, positions.data(), kernel}; }
  BlockWeights<double> reference_weights() {
    return block_weights<double>(
        [&](const std::string& name) -> const double* {
          return params.contains(name) ? params.get(name).data() : nullptr;
        },
        0);
  }
};

std::vector<double> input(int64_t rows, int64_t d, uint64_t seed) {
  std::vector<double> x = test::random_values(rows * d, seed, -1.5, 1.5);
  for (int64_t i = 0; i < rows * d; ++i) x[i] += 0.1 * static_cast<double>(i % 7);  // asymmetric rows
  return x;
}

TEST(Layer, ForwardEqualsTheReferenceBlockInDoubleForEveryVariant) {
  for (const Variant& v : kVariants)
    for (AttentionKernel kernel : {AttentionKernel::Tiled, AttentionKernel::Reference}) {
      SCOPED_TRACE(v.name);
      const ModelConfig c = config(v.json);
      LayerRig rig(c, 2, 7, kernel);
      const std::vector<double> x = input(2 * 7, c.d_model, 5);
      std::copy(x.begin(), x.end(), rig.a.x);
      layer_forward<double>(rig.y(), rig.a, rig.p.layers[0], rig.s, c, rig.step(kernel));
      std::vector<double> want(x.size());
      block_forward<double>(want.data(), x.data(), 2, 7, block_shape(c), rig.reference_weights());
      EXPECT_TRUE(all_close(rig.y(), want.data(), static_cast<int64_t>(want.size()), 1e-12, 1e-12))
          << (kernel == AttentionKernel::Tiled ? "tiled" : "reference");
      // And the output is not the input: the layer did something.
      double moved = 0;
      for (size_t i = 0; i < x.size(); ++i) moved = std::max(moved, std::abs(rig.y()[i] - x[i]));
      EXPECT_GT(moved, 0.1);
    }
}

// Through a cache: the chunk's keys and values are stored at their absolute slots, its queries
// read every filled slot. Chunks of 1, 3 and the whole window, two sequences of different
// lengths (one with padding rows), equal the whole-window layer row for row.
TEST(Layer, ThroughACacheInChunksEqualsTheWholeWindow) {
  const int64_t N = 7;
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    const ModelConfig c = config(v.json);
    const int64_t d = c.d_model, hd = c.head_dim();
    LayerRig whole(c, 2, N, AttentionKernel::Reference);
    const std::vector<double> x = input(2 * N, d, 9);
    std::copy(x.begin(), x.end(), whole.a.x);
    layer_forward<double>(whole.y(), whole.a, whole.p.layers[0], whole.s, c, whole.step(AttentionKernel::Reference));
    const int64_t lengths[2] = {N, N - 2};  // sequence 1 stops 2 tokens early
    for (int64_t chunk : {int64_t{1}, int64_t{3}, N})
      for (AttentionKernel kernel : {AttentionKernel::Tiled, AttentionKernel::Reference}) {
        LayerRig rig(c, 2, chunk, kernel);
        std::vector<double> keys(2 * c.n_kv_heads * N * hd, 1e300), values(keys.size(), -1e300);  // never read
        LayerKV<double> kv;
        kv.keys = heads_bHTd(keys.data(), N, c.n_kv_heads, hd);
        kv.values = heads_bHTd(values.data(), N, c.n_kv_heads, hd);
        std::vector<int64_t> start(2), n_valid(2), kv_len(2);
        kv.start = start.data();
        kv.n_valid = n_valid.data();
        kv.kv_len = kv_len.data();
        for (int64_t s0 = 0; s0 < N; s0 += chunk) {
          const int64_t m = std::min(chunk, N - s0);
          kv.n_kv = 1;
          for (int64_t b = 0; b < 2; ++b) {
            start[b] = std::min(s0, lengths[b]);
            n_valid[b] = std::clamp<int64_t>(lengths[b] - s0, 0, m);
            kv_len[b] = start[b] + n_valid[b];
            kv.n_kv = std::max(kv.n_kv, kv_len[b]);
            for (int64_t t = 0; t < chunk; ++t) {
              rig.positions[b * chunk + t] = std::min(s0 + t, N - 1);
              const int64_t src = std::min(s0 + t, N - 1);
              std::copy_n(x.data() + (b * N + src) * d, d, rig.a.x + (b * chunk + t) * d);
            }
          }
          LayerStep st = rig.step(kernel);
          layer_forward<double>(rig.y(), rig.a, rig.p.layers[0], rig.s, c, st, kv);
          for (int64_t b = 0; b < 2; ++b)
            for (int64_t t = 0; t < n_valid[b]; ++t)
              EXPECT_TRUE(all_close(rig.y() + (b * chunk + t) * d, whole.y() + (b * N + s0 + t) * d, d, 1e-12, 1e-12))
                  << "chunk " << chunk << " sequence " << b << " token " << s0 + t;
        }
      }
  }
}

// layer_backward against central differences of L = sum(r * y) for a fixed random r, with respect
// to the input and every parameter; with dropout (its masks fixed by the seed) and without. The
// gradients accumulate: they start from non-zero values.
TEST(Layer, BackwardMatchesFiniteDifferences) {
  for (const Variant& v : kVariants)
    for (double dropout : {0.0, 0.3})
      for (AttentionKernel kernel : {AttentionKernel::Tiled, AttentionKernel::Reference}) {
        SCOPED_TRACE(
            fmt::format("{} dropout {} {}", v.name, dropout, kernel == AttentionKernel::Tiled ? "tiled" : "reference"));
        ModelConfig c = config(v.json);
        c.d_model = 8;
        c.n_heads = 2;
        c.n_kv_heads = std::min<int64_t>(c.n_kv_heads, 2);
        c.d_ff = 12;
        c.dropout = dropout;
        c.validate();
        const int64_t B = 2, n = 5, R = B * n, d = c.d_model;
        LayerRig rig(c, B, n, kernel, 11);
        const LayerDropout drop = layer_dropout(42, 0, dropout);
        const std::vector<double> r = test::random_values(R * d, 17);
        std::vector<double> x = input(R, d, 13);
        auto loss = [&]() {
          std::copy(x.begin(), x.end(), rig.a.x);
          layer_forward<double>(rig.y(), rig.a, rig.p.layers[0], rig.s, c, rig.step(kernel), {}, drop);
          double sum = 0;
          for (int64_t i = 0; i < R * d; ++i) sum += r[i] * rig.y()[i];
          return sum;
        };
        // Analytic: gradients start at 0.5 (accumulation), dx replaced.
        for (int64_t i = 0; i < rig.grads.size(); ++i) rig.grads.data()[i] = 0.5;
        loss();
        std::vector<double> dx(r);
        layer_backward<double>(dx.data(), rig.g.layers[0], rig.a, rig.p.layers[0], rig.s, c, rig.step(kernel), drop);
        // Relative error floored at 1e-3: the central difference's round-off is a few 1e-9
        // absolute (a component near the floor is judged on that), and a key bias's gradient is
        // exactly 0 (softmax ignores a shift common to all scores).
        EXPECT_LT(test::gradient_error(dx, test::numeric_gradient(loss, x), 1e-3), 1e-5) << "input";
        for (const auto& e : rig.params.entries()) {
          if (!e.name.starts_with("layers.0.")) continue;
          std::vector<double> w(rig.params.view(e).begin(), rig.params.view(e).end());
          auto param_loss = [&]() {
            std::copy(w.begin(), w.end(), rig.params.view(e).begin());
            return loss();
          };
          const std::vector<double> numeric = test::numeric_gradient(param_loss, w);
          param_loss();  // numeric_gradient leaves the arena at its last evaluation: put w back
          std::vector<double> analytic(rig.grads.view(e).begin(), rig.grads.view(e).end());
          for (double& a : analytic) a -= 0.5;
          EXPECT_LT(test::gradient_error(analytic, numeric, 1e-3), 1e-5) << e.name;
        }
      }
}

// (From 128 rows on; below that a dense view's product is our own kernel's, kernels/linear.cpp,
// whose sums differ from the sgemm's in their last bits: the next test.)
TEST(Weight, LinearThroughADenseViewEqualsTheRawLinear) {
  const int64_t n = 131, in = 5, out = 4;
  const std::vector<double> xd = test::random_values(n * in, 1), wd = test::random_values(out * in, 2),
                            bd = test::random_values(out, 3);
  const std::vector<float> x(xd.begin(), xd.end()), w(wd.begin(), wd.end()), b(bd.begin(), bd.end());
  std::vector<float> want(n * out), got(n * out);
  linear_forward<float>(want.data(), x.data(), w.data(), b.data(), n, in, out);
  const Weight<float> view = Weight<float>::dense(w.data(), out, in);
  EXPECT_TRUE(view.present());
  EXPECT_EQ(view.type, WeightType::F32);
  linear_forward<float>(got.data(), x.data(), view, b.data(), n);
  EXPECT_EQ(got, want);
  // The backward: dx += dy W, dW += dy^T x, db += sum dy, as the raw one.
  const std::vector<double> dyd = test::random_values(n * out, 4);
  const std::vector<float> dy(dyd.begin(), dyd.end());
  std::vector<float> dx1(n * in, 1), dw1(out * in, 1), db1(out, 1), dx2 = dx1, dw2 = dw1, db2 = db1;
  linear_backward<float>(dx1.data(), dw1.data(), db1.data(), dy.data(), x.data(), w.data(), n, in, out);
  linear_backward<float>(dx2.data(), dw2.data(), db2.data(), dy.data(), x.data(), view, n);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
}

// Fewer than 128 rows through a dense view: with AVX-512, the stored-type kernel's product (the
// bits of stored_linear, plus the bias), within rounding of the raw sgemm's.
TEST(Weight, FewRowsThroughADenseViewAreTheOwnKernelsProduct) {
  const int64_t in = 37, out = 9;
  for (const int64_t n : {1, 3, 8, 21, 127}) {
    SCOPED_TRACE(n);
    const std::vector<double> xd = test::random_values(n * in, 5), wd = test::random_values(out * in, 6),
                              bd = test::random_values(out, 7);
    const std::vector<float> x(xd.begin(), xd.end()), w(wd.begin(), wd.end()), b(bd.begin(), bd.end());
    const Weight<float> view = Weight<float>::dense(w.data(), out, in);
    std::vector<float> raw(n * out), own(n * out), got(n * out);
    linear_forward<float>(raw.data(), x.data(), w.data(), b.data(), n, in, out);
    stored_linear(own.data(), x.data(), view, n);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) own[r * out + o] += b[o];
    linear_forward<float>(got.data(), x.data(), view, b.data(), n);
#if defined(__AVX512F__)
    EXPECT_EQ(got, own);
#else
    EXPECT_EQ(got, raw);  // (the portable build: OpenBLAS's for every dense product)
#endif
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], raw[i], 1e-5 * (1 + std::abs(raw[i]))) << i;
  }
}

TEST(Weight, AViewOfAnotherStorageIsRefusedWhereDenseValuesAreNeeded) {
  const std::vector<float> w(6, 1.0f);
  Weight<float> view = Weight<float>::dense(w.data(), 2, 3);
  view.type = WeightType::F64;  // a float layer handed double storage
  EXPECT_FALSE(view.is_dense());
  EXPECT_ERROR(view.dense_values(), ErrorKind::Internal, "");
  std::vector<float> x(3, 1.0f), y(2);
  EXPECT_ERROR(linear_forward<float>(y.data(), x.data(), view, nullptr, 1), ErrorKind::Internal, "");
}

// The parameter list is written once (model/params.h); this is it for one config, by hand.
TEST(Params, EveryTensorIsDeclaredOnceInCheckpointOrder) {
  ModelConfig c = config(R"({"n_layers": 2, "activation": "swiglu", "tied_embeddings": false})");
  BasicArena<float> a;
  declare_model_params(a, c);
  std::vector<std::string> names;
  for (const auto& e : a.entries()) names.push_back(e.name);
  std::vector<std::string> want{"tok_embeddings.weight", "pos_embeddings.weight"};
  for (const char* l : {"layers.0.", "layers.1."})
    for (const char* t :
         {"attn_norm.weight", "attn_norm.bias", "attn.wq.weight", "attn.wq.bias", "attn.wk.weight", "attn.wk.bias",
          "attn.wv.weight", "attn.wv.bias", "attn.wo.weight", "attn.wo.bias", "ffn_norm.weight", "ffn_norm.bias",
          "ffn.w1.weight", "ffn.w1.bias", "ffn.w2.weight", "ffn.w2.bias", "ffn.w3.weight", "ffn.w3.bias"})
      want.push_back(std::string(l) + t);
  for (const char* t : {"norm.weight", "norm.bias", "output.weight"}) want.emplace_back(t);
  EXPECT_EQ(names, want);
  // The views point at those tensors, with their shapes.
  a.allocate();
  const ModelParams<float> p = model_params(a, c);
  EXPECT_EQ(p.layers[1].w3.data, a.get("layers.1.ffn.w3.weight").data());
  EXPECT_EQ(p.layers[1].w3.rows, c.d_ff);
  EXPECT_EQ(p.layers[1].w3.cols, c.d_model);
  EXPECT_EQ(p.layers[0].bk, a.get("layers.0.attn.wk.bias").data());
  EXPECT_EQ(p.output.data, a.get("output.weight").data());
  // Tied: the output projection is the token table.
  ModelConfig tied = config(R"({})");
  BasicArena<float> t;
  declare_model_params(t, tied);
  t.allocate();
  EXPECT_EQ(model_params(t, tied).output.data, t.get("tok_embeddings.weight").data());
  EXPECT_FALSE(t.contains("output.weight"));
}

}  // namespace
}  // namespace tformer
