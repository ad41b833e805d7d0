// The training gradient fixtures (tools/reference/gen_train_fixtures.py) are what their consumers
// assume: every case's file holds exactly the parameters our Model declares for its config (same
// names, F32, same shapes) plus one "grad.<name>" per parameter, the inputs and targets fit the
// vocabulary with exactly the recorded number of ignored targets, and our own forward pass and
// cross-entropy at those weights give torch's float64 loss. (The gradients themselves are compared
// by the training graph's test.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "kernels/cross_entropy.h"
#include "model/model.h"
#include "test_util.h"
#include "train/graph.h"

namespace tformer {
namespace {

using Json = nlohmann::json;

Json load_cases() {
  std::ifstream in("fixtures/train/cases.json");
  if (!in) throw std::runtime_error("cannot open tests/fixtures/train/cases.json");
  return Json::parse(in).at("cases");
}

TEST(TrainFixtures, FilesHoldEveryParameterAndItsGradient) {
  const Json cases = load_cases();
  ASSERT_GE(cases.size(), 12u);
  int n_tied = 0;
  for (const Json& c : cases) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ASSERT_EQ(c.at("config").size(), 17u);
    ModelConfig cfg = ModelConfig::from_json(c.at("config"));
    cfg.validate();
    EXPECT_EQ(cfg.dropout, 0.0);
    Model model(cfg);
    const SafetensorsFile f = SafetensorsFile::open("fixtures/train/" + c.at("file").get<std::string>());
    EXPECT_EQ(Json::parse(f.metadata().at("config")), c.at("config"));
    EXPECT_EQ(f.tensors().size(), 2 * model.params().entries().size());
    double grad_max = 0;
    for (const auto& e : model.params().entries()) {
      for (const std::string& name : {e.name, "grad." + e.name}) {
        const SafetensorsTensor& t = f.at(name);
        EXPECT_EQ(t.dtype, "F32") << name;
        EXPECT_EQ(Shape::of(t.shape), e.shape) << name;
      }
      std::vector<float> g(static_cast<size_t>(e.shape.numel()));
      f.read_f32("grad." + e.name, g.data(), e.shape.numel());
      for (float v : g) grad_max = std::max(grad_max, static_cast<double>(std::abs(v)));
      if (e.name == "pos_embeddings.weight") {  // rows at positions >= T are never used: zero gradient
        const int64_t T = c.at("T"), d = e.shape[1];
        for (int64_t i = T * d; i < e.shape.numel(); ++i) EXPECT_EQ(g[static_cast<size_t>(i)], 0.0f);
      }
    }
    EXPECT_GT(grad_max, 1e-2);
    EXPECT_EQ(f.find("grad.output.weight") == nullptr, cfg.tied_embeddings);
    n_tied += cfg.tied_embeddings;
  }
  EXPECT_GT(n_tied, 0);
  EXPECT_LT(n_tied, static_cast<int>(cases.size()));
}

TEST(TrainFixtures, OurForwardGivesTorchsLoss) {
  for (const Json& c : load_cases()) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ModelConfig cfg = ModelConfig::from_json(c.at("config"));
    cfg.validate();
    Model model(cfg);
    const SafetensorsFile f = SafetensorsFile::open("fixtures/train/" + c.at("file").get<std::string>());
    for (const auto& e : model.params().entries()) f.read_f32(e.name, model.params().view(e).data(), e.shape.numel());

    const int64_t batch = c.at("batch"), T = c.at("T"), vocab = cfg.vocab_size;
    const auto inputs = c.at("inputs").get<std::vector<TokenId>>();
    const auto targets = c.at("targets").get<std::vector<TokenId>>();
    ASSERT_EQ(static_cast<int64_t>(inputs.size()), batch * T);
    ASSERT_EQ(static_cast<int64_t>(targets.size()), batch * T);
    int64_t n_ignored = 0;
    for (TokenId t : targets) {
      if (t == kIgnoreIndex)
        ++n_ignored;
      else
        EXPECT_TRUE(t >= 0 && t < vocab) << t;
    }
    EXPECT_EQ(n_ignored, c.at("n_ignored").get<int64_t>());
    EXPECT_GT(n_ignored, 0);

    std::vector<float> logits(static_cast<size_t>(batch * T * vocab));
    model.forward(logits.data(), inputs.data(), batch, T);
    const CrossEntropyResult r = cross_entropy_forward<float>(nullptr, logits.data(), targets.data(), batch * T, vocab);
    EXPECT_EQ(r.count, batch * T - n_ignored);
    const double torch_loss = c.at("loss");
    EXPECT_NEAR(r.loss, torch_loss, 1e-5 * torch_loss) << "ours " << r.loss << ", torch " << torch_loss;
  }
}

// Every parameter's gradient from the hand-written backward (train/graph.h) equals torch
// autograd's (float64, on the same float32 weights and batch), for every configuration of the
// covering set and both attention kernels: within 1e-4 relative to each element, plus 1e-4 of the
// tensor's largest gradient (at least 1e-6: float32 round-off: torch's own float32 gradients are up to 2.2e-6 off).
TEST(TrainFixtures, BackwardGivesTorchsGradients) {
  for (const Json& c : load_cases()) {
    SCOPED_TRACE(c.at("name").get<std::string>());
    ModelConfig cfg = ModelConfig::from_json(c.at("config"));
    cfg.validate();
    Model model(cfg);
    const SafetensorsFile f = SafetensorsFile::open("fixtures/train/" + c.at("file").get<std::string>());
    for (const auto& e : model.params().entries()) f.read_f32(e.name, model.params().view(e).data(), e.shape.numel());
    const int64_t batch = c.at("batch"), T = c.at("T");
    const auto inputs = c.at("inputs").get<std::vector<TokenId>>();
    const auto targets = c.at("targets").get<std::vector<TokenId>>();
    for (AttentionKernel kernel : {AttentionKernel::Tiled, AttentionKernel::Reference}) {
      TrainGraph<float> g(cfg, batch, T, kernel);
      Arena grads;
      grads.mirror(model.params());
      const double loss = g.forward(model.params(), inputs.data(), targets.data());
      EXPECT_NEAR(loss, c.at("loss").get<double>(), 1e-5 * c.at("loss").get<double>());
      g.backward(model.params(), grads);
      for (const auto& e : model.params().entries()) {
        std::vector<float> want(static_cast<size_t>(e.shape.numel()));
        f.read_f32("grad." + e.name, want.data(), e.shape.numel());
        double scale = 0;
        for (float w : want) scale = std::max(scale, static_cast<double>(std::abs(w)));
        // 1e-4 relative per element, and for elements that nearly cancel to 0 (where a relative
        // bound means nothing) an absolute 1e-5 of the tensor's largest gradient: float32 round-off
        // is ~1e-6 of it here (the test fails at 1e-7). A key bias's true gradient is exactly 0
        // (softmax ignores a shift shared by a row's scores; torch's float64 value is 1e-18, ours
        // float32 round-off near 1e-9), hence a floor of 1e-2 under the scale: 1e-7 absolute there.
        EXPECT_TRUE(
            test::all_close(grads.view(e).data(), want.data(), e.shape.numel(), 1e-4, 1e-5 * std::max(scale, 1e-2)))
            << e.name << (kernel == AttentionKernel::Tiled ? " (tiled)" : " (reference)");
      }
    }
  }
}

}  // namespace
}  // namespace tformer
