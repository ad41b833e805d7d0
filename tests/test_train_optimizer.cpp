// The optimizer side of training (src/train/optimizer.h): AdamW against torch.optim.AdamW, the
// weight-decay rule, step counting and resume, the learning-rate schedule against hand-computed
// values, gradient clipping against torch.nn.utils.clip_grad_norm_ and a hand case, independence
// from the thread count, and no allocation in AdamW::step. Fixtures: fixtures/train/adamw.json from
// tools/reference/gen_train_fixtures.py (float32 torch).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/model.h"
#include "test_util.h"
#include "train/optimizer.h"

#include "alloc_counter.h"

namespace tformer {
namespace {

using test::all_close;
using Json = nlohmann::json;

Json load_adamw_fixture() {
  std::ifstream in("fixtures/train/adamw.json");
  if (!in) throw std::runtime_error("cannot open tests/fixtures/train/adamw.json");
  return Json::parse(in);
}

Shape shape_of(const Json& j) { return Shape::of(j.get<std::vector<int64_t>>()); }

void fill(Arena& a, const std::string& name, const std::vector<double>& values) {
  TensorView<float> t = a.get(name);
  ASSERT_EQ(t.shape().numel(), static_cast<int64_t>(values.size())) << name;
  for (size_t i = 0; i < values.size(); ++i) t.data()[i] = static_cast<float>(values[i]);
}

std::vector<float> values_of(Arena& a, const std::string& name) {
  TensorView<float> t = a.get(name);
  return std::vector<float>(t.data(), t.data() + t.shape().numel());
}

// Runs the fixture's steps with `cfg`, returning the final parameters arena; on each step checks
// params / exp_avg / exp_avg_sq against torch when `check` is set.
Arena run_adamw_fixture(const Json& fx, AdamWConfig cfg, bool check) {
  Arena params;
  for (const Json& t : fx.at("tensors")) params.add(t.at("name").get<std::string>(), shape_of(t.at("shape")));
  params.allocate();
  for (const Json& t : fx.at("tensors")) fill(params, t.at("name"), t.at("initial").get<std::vector<double>>());
  Arena grads;
  grads.mirror(params);
  AdamW opt(params, cfg);
  int64_t step_no = 0;
  for (const Json& st : fx.at("steps")) {
    ++step_no;
    for (const auto& [name, g] : st.at("grads").items()) fill(grads, name, g.get<std::vector<double>>());
    opt.step(params, grads, st.at("lr").get<double>());
    EXPECT_EQ(opt.steps(), step_no);
    if (!check) continue;
    for (const Json& t : fx.at("tensors")) {
      const std::string name = t.at("name");
      SCOPED_TRACE("step " + std::to_string(step_no) + ", " + name);
      EXPECT_TRUE(all_close(values_of(params, name), st.at("params").at(name).get<std::vector<double>>(), 1e-6, 1e-7));
      EXPECT_TRUE(
          all_close(values_of(opt.m(), name), st.at("exp_avg").at(name).get<std::vector<double>>(), 1e-6, 1e-7));
      EXPECT_TRUE(
          all_close(values_of(opt.v(), name), st.at("exp_avg_sq").at(name).get<std::vector<double>>(), 1e-6, 1e-7));
    }
  }
  return params;
}

AdamWConfig fixture_config(const Json& fx) {
  const Json& o = fx.at("optimizer");
  return AdamWConfig{o.at("beta1"), o.at("beta2"), o.at("eps"), o.at("weight_decay")};
}

// A float arena of a few tensors (2-D and 1-D, odd sizes), large enough to span many pieces of work
// and to run in parallel, filled with deterministic values in [-scale, scale).
Arena large_arena(uint64_t seed, double scale) {
  Arena a;
  a.add("tok_embeddings.weight", {37, 1001});
  a.add("layers.0.attn.wq.bias", {4099});
  a.add("pos_embeddings.weight", {13, 2003});
  a.add("layers.0.ffn.w1.weight", {211, 97});
  a.allocate();
  for (const auto& e : a.entries()) {
    const auto v = test::random_values(e.shape.numel(), seed + static_cast<uint64_t>(e.offset), -scale, scale);
    float* d = a.view(e).data();
    for (size_t i = 0; i < v.size(); ++i) d[i] = static_cast<float>(v[i]);
  }
  return a;
}

// Restores the OpenMP thread count when a test ends.
struct ThreadCountGuard {
  int saved = omp_get_max_threads();
  ~ThreadCountGuard() { omp_set_num_threads(saved); }
};

// ---------------------------------------------------------------------------------------------
// AdamW

TEST(AdamW, MatchesTorchAdamWStepByStep) {
  const Json fx = load_adamw_fixture();
  ASSERT_EQ(fx.at("steps").size(), 3u);
  // The fixture's decay flags are our rule (torch ran with these two parameter groups).
  for (const Json& t : fx.at("tensors"))
    EXPECT_EQ(adamw_decays(t.at("name"), shape_of(t.at("shape"))), t.at("decays").get<bool>()) << t.at("name");
  run_adamw_fixture(fx, fixture_config(fx), /*check=*/true);
}

TEST(AdamW, FixtureIsSensitiveToWeightDecayAndBetas) {
  // The comparison above could not pass by accident: leaving weight decay out, or using torch's
  // default beta2, lands outside the tolerance on the tensors that depend on it.
  const Json fx = load_adamw_fixture();
  const Json& last = fx.at("steps").back().at("params");
  AdamWConfig no_decay = fixture_config(fx);
  no_decay.weight_decay = 0;
  Arena p = run_adamw_fixture(fx, no_decay, false);
  EXPECT_FALSE(all_close(values_of(p, "layers.0.attn.wq.weight"),
                         last.at("layers.0.attn.wq.weight").get<std::vector<double>>(), 1e-6, 1e-7));
  EXPECT_TRUE(all_close(values_of(p, "pos_embeddings.weight"),
                        last.at("pos_embeddings.weight").get<std::vector<double>>(), 1e-6, 1e-7));
  AdamWConfig other_beta2 = fixture_config(fx);
  other_beta2.beta2 = 0.999;
  Arena q = run_adamw_fixture(fx, other_beta2, false);
  EXPECT_FALSE(all_close(values_of(q, "layers.0.attn_norm.weight"),
                         last.at("layers.0.attn_norm.weight").get<std::vector<double>>(), 1e-6, 1e-7));
}

TEST(AdamW, DecayRuleOnEveryKindOfTensor) {
  EXPECT_TRUE(adamw_decays("layers.0.attn.wq.weight", {8, 8}));
  EXPECT_TRUE(adamw_decays("layers.3.ffn.w2.weight", {8, 32}));
  EXPECT_TRUE(adamw_decays("layers.1.ffn.w3.weight", {32, 8}));
  EXPECT_TRUE(adamw_decays("output.weight", {50, 8}));
  EXPECT_TRUE(adamw_decays("tok_embeddings.weight", {50, 8}));  // also the output projection when tied
  EXPECT_FALSE(adamw_decays("pos_embeddings.weight", {16, 8}));
  EXPECT_FALSE(adamw_decays("layers.0.attn.wq.bias", {8}));
  EXPECT_FALSE(adamw_decays("layers.0.ffn.w1.bias", {32}));
  EXPECT_FALSE(adamw_decays("layers.0.attn_norm.weight", {8}));
  EXPECT_FALSE(adamw_decays("layers.0.ffn_norm.bias", {8}));
  EXPECT_FALSE(adamw_decays("norm.weight", {8}));
  EXPECT_FALSE(adamw_decays("norm.bias", {8}));
}

TEST(AdamW, AppliesTheDecayRuleToARealModel) {
  // With zero gradients the Adam term is exactly 0 (m = 0), so one step leaves p * (1 - lr wd) on
  // the decayed tensors and the others untouched.
  ModelConfig c;
  c.vocab_size = 7;
  c.context_length = 5;
  c.d_model = 8;
  c.n_layers = 1;
  c.n_heads = 2;
  c.tied_embeddings = false;
  c.validate();
  Model model(c);
  model.init_gpt2(3);
  Arena& params = model.params();
  Arena before;
  before.mirror(params);
  std::memcpy(before.data(), params.data(), sizeof(float) * static_cast<size_t>(params.size()));
  Arena grads;
  grads.mirror(params);
  AdamW opt(params, AdamWConfig{0.9, 0.95, 1e-8, 0.1});
  opt.step(params, grads, 0.5);
  const float factor = static_cast<float>(1.0 - 0.5 * 0.1);
  int n_decayed = 0, n_kept = 0;
  for (const auto& e : params.entries()) {
    SCOPED_TRACE(e.name);
    const float* now = params.view(e).data();
    const float* was = before.view(e).data();
    const bool decays = e.shape.rank() == 2 && e.name != "pos_embeddings.weight";
    (decays ? n_decayed : n_kept)++;
    for (int64_t i = 0; i < e.shape.numel(); ++i) EXPECT_FLOAT_EQ(now[i], decays ? was[i] * factor : was[i]);
  }
  EXPECT_EQ(n_decayed, 8);  // tok_embeddings, wq, wk, wv, wo, w1, w2, output
  EXPECT_GE(n_kept, 10);    // pos_embeddings, gains, biases
}

TEST(AdamW, CountsStepsAndResumesExactly) {
  Arena params = large_arena(11, 1.0);
  Arena g1 = large_arena(12, 0.3), g2 = large_arena(13, 0.5), g3 = large_arena(14, 0.2), g4 = large_arena(15, 0.4);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  // Uninterrupted: four steps.
  Arena p_full = large_arena(11, 1.0);
  AdamW full(p_full, cfg);
  EXPECT_EQ(full.steps(), 0);
  for (Arena* g : {&g1, &g2, &g3, &g4}) full.step(p_full, *g, 1e-2);
  EXPECT_EQ(full.steps(), 4);
  // Two steps, then a fresh optimizer restored from the moments and the step count, two more.
  AdamW first(params, cfg);
  first.step(params, g1, 1e-2);
  first.step(params, g2, 1e-2);
  EXPECT_EQ(first.steps(), 2);
  const size_t bytes = sizeof(float) * static_cast<size_t>(params.size());
  Arena p_resumed = large_arena(11, 1.0), p_no_count = large_arena(11, 1.0);
  std::memcpy(p_resumed.data(), params.data(), bytes);
  std::memcpy(p_no_count.data(), params.data(), bytes);
  AdamW resumed(p_resumed, cfg), no_count(p_no_count, cfg);
  for (AdamW* o : {&resumed, &no_count}) {
    std::memcpy(o->m().data(), first.m().data(), bytes);
    std::memcpy(o->v().data(), first.v().data(), bytes);
  }
  resumed.set_steps(2);
  resumed.step(p_resumed, g3, 1e-2);
  resumed.step(p_resumed, g4, 1e-2);
  no_count.step(p_no_count, g3, 1e-2);
  no_count.step(p_no_count, g4, 1e-2);
  EXPECT_EQ(resumed.steps(), 4);
  EXPECT_EQ(no_count.steps(), 2);
  EXPECT_EQ(std::memcmp(p_resumed.data(), p_full.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(resumed.m().data(), full.m().data(), bytes), 0);
  EXPECT_EQ(std::memcmp(resumed.v().data(), full.v().data(), bytes), 0);
  // Without the step count the bias corrections are those of steps 1 and 2: a different result.
  EXPECT_NE(std::memcmp(p_no_count.data(), p_full.data(), bytes), 0);
  EXPECT_ERROR(resumed.set_steps(-1), ErrorKind::Internal, "");
}

TEST(AdamW, RejectsAMismatchedLayoutAndBadSettings) {
  Arena params;
  params.add("w", {3, 4});
  params.add("b", {3});
  params.allocate();
  AdamW opt(params, AdamWConfig{});
  Arena other;
  other.add("w", {4, 3});  // same element count, another shape
  other.add("b", {3});
  other.allocate();
  EXPECT_ERROR(opt.step(params, other, 1e-3), ErrorKind::Internal, "");
  EXPECT_ERROR(opt.step(other, params, 1e-3), ErrorKind::Internal, "");
  EXPECT_EQ(opt.steps(), 0);  // a rejected step does not count
  EXPECT_ERROR(opt.step(params, params, -1e-3), ErrorKind::Internal, "");
  EXPECT_ERROR(AdamW(params, AdamWConfig{1.0, 0.95, 1e-8, 0.1}), ErrorKind::Internal, "");
  EXPECT_ERROR(AdamW(params, AdamWConfig{0.9, 0.95, 0.0, 0.1}), ErrorKind::Internal, "");
  EXPECT_ERROR(AdamW(params, AdamWConfig{0.9, 0.95, 1e-8, -0.1}), ErrorKind::Internal, "");
}

TEST(AdamW, StepIsIndependentOfTheThreadCountAndAllocatesNothing) {
  ThreadCountGuard guard;
  const Arena grads_a = large_arena(21, 0.5), grads_b = large_arena(22, 0.01);
  Arena p1 = large_arena(20, 1.0), p2 = large_arena(20, 1.0);
  AdamW o1(p1, AdamWConfig{}), o2(p2, AdamWConfig{});
  omp_set_num_threads(1);
  o1.step(p1, grads_a, 3e-3);
  o1.step(p1, grads_b, 2e-3);
  omp_set_num_threads(2);
  o2.step(p2, grads_a, 3e-3);  // warms the thread pool up
  const int64_t before = g_allocations.load();
  o2.step(p2, grads_b, 2e-3);
  const int64_t during = g_allocations.load() - before;
  if (kCountingAllocations) {
    EXPECT_EQ(during, 0) << "AdamW::step allocated";
    { const std::vector<float> probe(3); }  // the counter does count
    EXPECT_EQ(g_allocations.load() - before, during + 1);
  }
  const size_t bytes = sizeof(float) * static_cast<size_t>(p1.size());
  EXPECT_EQ(std::memcmp(p1.data(), p2.data(), bytes), 0);
  EXPECT_EQ(std::memcmp(o1.m().data(), o2.m().data(), bytes), 0);
  EXPECT_EQ(std::memcmp(o1.v().data(), o2.v().data(), bytes), 0);
  // ... and the steps did change the parameters.
  Arena p0 = large_arena(20, 1.0);
  EXPECT_NE(std::memcmp(p0.data(), p1.data(), bytes), 0);
}

// ZeRO-1: an optimizer sharded over [lo, hi) updates exactly those elements as the whole one does,
// holds their moments alone, and unshard() gives back the full moments of that range.
TEST(AdamW, AShardUpdatesItsRangeAsTheWholeOptimizerDoes) {
  const Arena grads_a = large_arena(21, 0.5), grads_b = large_arena(22, 0.01);
  Arena whole = large_arena(20, 1.0), part = large_arena(20, 1.0);
  AdamW ow(whole, AdamWConfig{}), op(part, AdamWConfig{});
  const int64_t lo = kNormPiece, hi = std::min<int64_t>(whole.size(), 3 * kNormPiece + 17);
  ASSERT_LT(hi, whole.size());
  op.shard(lo, hi);
  EXPECT_TRUE(op.sharded());
  EXPECT_FALSE(op.m().allocated());
  for (const Arena* g : {&grads_a, &grads_b, &grads_a}) {
    ow.step(whole, *g, 3e-3);
    op.step(part, *g, 3e-3);
  }
  const Arena fresh = large_arena(20, 1.0);
  for (int64_t i = 0; i < whole.size(); ++i) {
    if (i >= lo && i < hi) {
      ASSERT_EQ(part.data()[i], whole.data()[i]) << i;
      ASSERT_EQ(op.shard_m()[i - lo], ow.m().data()[i]) << i;
      ASSERT_EQ(op.shard_v()[i - lo], ow.v().data()[i]) << i;
    } else {
      ASSERT_EQ(part.data()[i], fresh.data()[i]) << "outside the shard, untouched: " << i;
    }
  }
  op.unshard();
  EXPECT_FALSE(op.sharded());
  EXPECT_EQ(op.m().data()[lo], ow.m().data()[lo]);
  EXPECT_EQ(op.m().data()[0], 0.0f);  // another process's moments: not here
}

// The norm's pieces: summed by norm_piece_sums over any split into ranges of pieces and added in
// order, they give global_grad_norm's value bit for bit.
TEST(ClipGradNorm, PieceSumsOfSlicesGiveTheGlobalNorm) {
  const Arena g = large_arena(23, 0.3);
  const int64_t n = g.size(), pieces = (n + kNormPiece - 1) / kNormPiece;
  ASSERT_GE(pieces, 3);
  std::vector<double> sums(static_cast<size_t>(pieces));
  const int64_t cut = pieces / 3;
  norm_piece_sums(g.data(), n, 0, cut, sums.data());
  norm_piece_sums(g.data(), n, cut, pieces, sums.data() + cut);
  double total = 0;
  for (double x : sums) total += x;
  EXPECT_EQ(std::sqrt(total), global_grad_norm(g));
}

// ---------------------------------------------------------------------------------------------
// Learning-rate schedule

TEST(LearningRate, WarmupThenCosineToTheFloor) {
  const LrSchedule s{1e-3, 1e-4, 10, 110};
  EXPECT_DOUBLE_EQ(learning_rate(s, 0), 1e-3 / 11);
  EXPECT_DOUBLE_EQ(learning_rate(s, 4), 1e-3 * 5 / 11);
  EXPECT_DOUBLE_EQ(learning_rate(s, 9), 1e-3 * 10 / 11);      // warmup - 1
  EXPECT_DOUBLE_EQ(learning_rate(s, 10), 1e-3);               // warmup: the peak
  EXPECT_DOUBLE_EQ(learning_rate(s, 60), (1e-3 + 1e-4) / 2);  // the middle of the decay
  // A quarter of the way: coefficient 0.5 (1 + cos(pi / 4)).
  EXPECT_DOUBLE_EQ(learning_rate(s, 35), 1e-4 + 0.5 * (1 + std::sqrt(0.5)) * 9e-4);
  EXPECT_DOUBLE_EQ(learning_rate(s, 110), 1e-4);  // decay_steps: the floor
  EXPECT_EQ(learning_rate(s, 111), 1e-4);
  EXPECT_EQ(learning_rate(s, 1000000), 1e-4);
  for (int64_t t = 10; t < 110; ++t) EXPECT_GE(learning_rate(s, t), learning_rate(s, t + 1)) << t;
  for (int64_t t = 0; t < 10; ++t) EXPECT_LT(learning_rate(s, t), learning_rate(s, t + 1)) << t;
  EXPECT_ERROR(learning_rate(s, -1), ErrorKind::Internal, "");
}

TEST(LearningRate, NoCosineWhenDecayEndsByTheEndOfWarmup) {
  const LrSchedule equal{2e-3, 2e-4, 10, 10};
  EXPECT_DOUBLE_EQ(learning_rate(equal, 9), 2e-3 * 10 / 11);
  EXPECT_EQ(learning_rate(equal, 10), 2e-3);
  EXPECT_EQ(learning_rate(equal, 11), 2e-4);
  const LrSchedule shorter{2e-3, 2e-4, 10, 5};
  EXPECT_DOUBLE_EQ(learning_rate(shorter, 3), 2e-3 * 4 / 11);  // warmup still runs
  EXPECT_EQ(learning_rate(shorter, 10), 2e-4);
  EXPECT_EQ(learning_rate(shorter, 50), 2e-4);
  const LrSchedule no_warmup{1e-3, 0.0, 0, 4};
  EXPECT_EQ(learning_rate(no_warmup, 0), 1e-3);
  EXPECT_DOUBLE_EQ(learning_rate(no_warmup, 2), 5e-4);
  EXPECT_NEAR(learning_rate(no_warmup, 4), 0.0, 1e-20);
  for (int64_t t = 0; t < 20; ++t) EXPECT_TRUE(std::isfinite(learning_rate(equal, t)));
}

// ---------------------------------------------------------------------------------------------
// Gradient norm and clipping

TEST(ClipGradNorm, HandCaseThreeFourZero) {
  Arena g;
  g.add("w", {1, 2});
  g.add("b", {1});
  g.allocate();
  const auto reset = [&] {
    g.get("w").data()[0] = 3;
    g.get("w").data()[1] = 0;
    g.get("b").data()[0] = -4;
  };
  reset();
  EXPECT_EQ(global_grad_norm(g), 5.0);
  // Below the limit (or no limit): the norm comes back, nothing changes.
  EXPECT_EQ(clip_grad_norm(g, 10.0), 5.0);
  EXPECT_EQ(clip_grad_norm(g, 0.0), 5.0);
  EXPECT_EQ(g.get("w").data()[0], 3.0f);
  EXPECT_EQ(g.get("b").data()[0], -4.0f);
  // Above: the norm BEFORE clipping comes back; every gradient scales by 1 / (5 + 1e-6).
  EXPECT_EQ(clip_grad_norm(g, 1.0), 5.0);
  const float scale = static_cast<float>(1.0 / (5.0 + 1e-6));
  EXPECT_FLOAT_EQ(g.get("w").data()[0], 3 * scale);
  EXPECT_EQ(g.get("w").data()[1], 0.0f);
  EXPECT_FLOAT_EQ(g.get("b").data()[0], -4 * scale);
  EXPECT_NEAR(global_grad_norm(g), 1.0, 1e-6);
  EXPECT_LT(global_grad_norm(g), 1.0);  // the 1e-6 keeps it just under
}

TEST(ClipGradNorm, MatchesTorchClipGradNorm) {
  const Json fx = load_adamw_fixture();
  ASSERT_EQ(fx.at("clip_grad_norm").size(), 2u);
  int n_clipped = 0;
  for (const Json& c : fx.at("clip_grad_norm")) {
    Arena g;
    for (const auto& [name, shape] : c.at("shapes").items()) g.add(name, shape_of(shape));
    g.allocate();
    for (const auto& [name, v] : c.at("grads").items()) fill(g, name, v.get<std::vector<double>>());
    const double norm = clip_grad_norm(g, c.at("max_norm").get<double>());
    EXPECT_NEAR(norm, c.at("total_norm_f64").get<double>(), 1e-12 * norm);
    EXPECT_NEAR(norm, c.at("total_norm").get<double>(), 1e-6 * norm);  // torch's float32 result
    for (const auto& [name, v] : c.at("clipped").items()) {
      SCOPED_TRACE(name);
      EXPECT_TRUE(all_close(values_of(g, name), v.get<std::vector<double>>(), 1e-6, 1e-7));
    }
    n_clipped += c.at("clipped_applied").get<bool>();
  }
  EXPECT_EQ(n_clipped, 1);
}

TEST(ClipGradNorm, NormIsIndependentOfTheThreadCountAndAccurate) {
  ThreadCountGuard guard;
  Arena g = large_arena(31, 1.0);
  omp_set_num_threads(1);
  const double one = global_grad_norm(g);
  omp_set_num_threads(2);
  const double two = global_grad_norm(g);
  EXPECT_EQ(one, two);  // bit for bit
  long double sum = 0;  // an independent, more precise sum over the tensors (not the padding)
  for (const auto& e : g.entries()) {
    const float* d = g.view(e).data();
    for (int64_t i = 0; i < e.shape.numel(); ++i) sum += static_cast<long double>(d[i]) * d[i];
  }
  const double expected = static_cast<double>(std::sqrt(sum));
  EXPECT_NEAR(one, expected, 1e-13 * expected);
  EXPECT_GT(one, 100.0);  // ~ sqrt(n / 3) for n ~ 90k values uniform in [-1, 1)
}

}  // namespace
}  // namespace tformer
