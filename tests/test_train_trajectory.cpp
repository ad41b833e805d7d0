// The whole training loop against PyTorch, step by step (tests/fixtures/train/trajectory.*, from
// tools/reference/gen_trajectory_fixture.py): a TrainSession started from torch's initial weights,
// drawing its windows with its own sampler (the generator re-implements that sampler), must follow
// torch's loss, pre-clipping gradient norm and learning rate at each of 60 steps -- through warmup,
// the cosine, the floor, accumulation over 2 micro-batches, clipping that acts on some steps and
// not others, and AdamW's two parameter groups -- and end at torch's weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tokenizer/char_tokenizer.h"
#include "train/trainer.h"

namespace tformer {
namespace {

using Json = nlohmann::json;

Json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open tests/" + path);
  return Json::parse(in);
}

// The implicit default constructor is noexcept; the check sees a throw in nlohmann::json's value
// constructor, which allocates (and can throw) only for an object or array, never for the null here.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct TrajectoryRun {
  Json doc;
  std::unique_ptr<TrainSession> session;
};

// change: applied to the fixture's options before the session is built (nullptr: none).
TrajectoryRun start_from_torchs_weights(void (*change)(TrainOptions&) = nullptr) {
  TrajectoryRun r;
  r.doc = read_json("fixtures/train/trajectory.json");
  std::ifstream in(r.doc.at("corpus").get<std::string>().substr(std::string("tests/").size()), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(text.size(), 50000u);
  auto tok = std::make_unique<CharTokenizer>(CharTokenizer::from_corpus(text));
  Dataset data;
  const size_t cut = text.size() * 9 / 10;  // the generator's split
  data.train = tok->encode(text.substr(0, cut));
  data.val = tok->encode(text.substr(cut));

  Json cfg = r.doc.at("config");
  cfg["vocab_size"] = tok->vocab_size();
  const ModelConfig config = ModelConfig::from_json(cfg, "trajectory.json config");
  // The generator's model: bench/train_torch.py's Decoder. These are ModelConfig's defaults; say so.
  EXPECT_EQ(config.norm, NormKind::LayerNorm);
  EXPECT_EQ(config.norm_placement, NormPlacement::Pre);
  EXPECT_EQ(config.positions, Positions::Learned);
  EXPECT_EQ(config.activation, Activation::Gelu);
  EXPECT_TRUE(config.bias);
  EXPECT_TRUE(config.tied_embeddings);
  EXPECT_EQ(config.dropout, 0.0);

  const Json& o = r.doc.at("options");
  TrainOptions opt;
  opt.steps = o.at("steps");
  opt.batch = o.at("batch");
  opt.context = o.at("context");
  opt.grad_accum = o.at("grad_accum");
  opt.lr = o.at("lr");
  opt.min_lr = o.at("min_lr");
  opt.warmup = o.at("warmup");
  opt.decay_steps = o.at("decay_steps");
  opt.beta1 = o.at("beta1");
  opt.beta2 = o.at("beta2");
  opt.eps = o.at("eps");
  opt.weight_decay = o.at("weight_decay");
  opt.grad_clip = o.at("grad_clip");
  opt.seed = o.at("seed");
  opt.eval_steps = 1;
  if (change) change(opt);
  r.session = std::make_unique<TrainSession>(opt, config, std::move(tok), std::move(data));

  // Replace tformer's own initialisation with torch's, tensor by tensor (names must all be there).
  const SafetensorsFile f = SafetensorsFile::open("fixtures/train/trajectory.safetensors");
  Arena& params = r.session->model().params();
  for (const auto& e : params.entries()) f.read_f32(e.name, params.view(e).data(), e.shape.numel());
  return r;
}

TEST(TrainTrajectory, SixtyStepsFollowPyTorchsLossGradientNormAndWeights) {
  TrajectoryRun run = start_from_torchs_weights();
  const Json& steps = run.doc.at("steps");
  ASSERT_EQ(static_cast<int64_t>(steps.size()), run.session->options().steps);
  int clipped = 0;
  double worst_loss = 0, worst_norm = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    const double want_loss = steps[s].at("loss"), want_norm = steps[s].at("grad_norm"), want_lr = steps[s].at("lr");
    const StepResult got = run.session->step();
    // The learning rate is a formula of the step: equal to rounding.
    EXPECT_NEAR(got.lr, want_lr, 1e-12 * want_lr);
    // Float32 on both sides with different summation orders: one step's relative error is ~1e-7,
    // and it is carried along (measured here: < 1e-6 over the 60 steps); 2e-5 leaves margin for
    // other thread counts and compilers while any wrong term (a missed clip, a decayed bias, a
    // wrong schedule step) moves the loss by 1e-3 or more within a few steps.
    EXPECT_NEAR(got.loss, want_loss, 2e-5 * want_loss);
    EXPECT_NEAR(got.grad_norm, want_norm, 2e-4 * want_norm);
    worst_loss = std::max(worst_loss, std::abs(got.loss - want_loss) / want_loss);
    worst_norm = std::max(worst_norm, std::abs(got.grad_norm - want_norm) / want_norm);
    const bool want_clipped = steps[s].at("clipped").get<bool>();
    clipped += want_clipped ? 1 : 0;
    // tformer clipped exactly where torch did (unless the norm sits within rounding of the limit).
    const double clip = run.session->options().grad_clip;
    if (std::abs(want_norm - clip) > 1e-3) {
      EXPECT_EQ(got.grad_norm > clip, want_clipped);
    }
  }
  // The trajectory exercises clipping both ways (torch's side; tformer's is checked per step above).
  EXPECT_GT(clipped, 0);
  EXPECT_LT(clipped, static_cast<int>(steps.size()));
  RecordProperty("max_rel_loss_err", std::to_string(worst_loss));
  RecordProperty("max_rel_grad_norm_err", std::to_string(worst_norm));

  std::printf("max relative error over the 60 steps: loss %.2e, gradient norm %.2e\n", worst_loss, worst_norm);

  // Final weights: every tensor within 1e-4 of torch's, relative to the tensor's largest entry.
  // Except the key biases: their exact gradient is zero (b_k adds q.b_k to every score of a row,
  // which the softmax ignores), so both sides update them with Adam-normalised rounding noise;
  // for those, only that they stay near zero on both sides.
  const SafetensorsFile f = SafetensorsFile::open("fixtures/train/trajectory.safetensors");
  Arena& params = run.session->model().params();
  int compared = 0;
  for (const auto& e : params.entries()) {
    std::vector<float> want(static_cast<size_t>(e.shape.numel()));
    f.read_f32("final." + e.name, want.data(), e.shape.numel());
    const float* got = params.view(e).data();
    double scale = 0, err = 0, largest_got = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::abs(static_cast<double>(want[i])));
      largest_got = std::max(largest_got, std::abs(static_cast<double>(got[i])));
      err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    }
    if (e.name.ends_with("attn.wk.bias")) {
      EXPECT_LT(largest_got, 1e-3) << e.name;
      EXPECT_LT(scale, 1e-3) << e.name;
      continue;
    }
    ++compared;
    EXPECT_LE(err, 1e-4 * scale) << e.name << ": max |tformer - torch| " << err << ", largest |w| " << scale;
  }
  EXPECT_EQ(compared, static_cast<int>(params.entries().size()) - 2);  // all but the 2 layers' key biases
}

// The same start and data with ONE option changed must leave torch's trajectory: the comparison
// above is sensitive to each of the loop's parts it claims to check.
TEST(TrainTrajectory, ChangingOneOptionLeavesPyTorchsTrajectory) {
  struct Change {
    const char* what;
    void (*apply)(TrainOptions&);
  };
  const Change changes[] = {
      {"no clipping", [](TrainOptions& o) { o.grad_clip = 0; }},
      {"no weight decay", [](TrainOptions& o) { o.weight_decay = 0; }},
      {"no warmup", [](TrainOptions& o) { o.warmup = 0; }},
      {"beta2 0.999", [](TrainOptions& o) { o.beta2 = 0.999; }},
  };
  for (const Change& c : changes) {
    SCOPED_TRACE(c.what);
    TrajectoryRun run = start_from_torchs_weights(c.apply);
    const Json& steps = run.doc.at("steps");
    double worst = 0;
    for (size_t s = 0; s < steps.size(); ++s) {
      const double want = steps[s].at("loss");
      worst = std::max(worst, std::abs(run.session->step().loss - want) / want);
    }
    EXPECT_GT(worst, 1e-3) << "the trajectory did not notice: " << c.what;
  }
}

}  // namespace
}  // namespace tformer
