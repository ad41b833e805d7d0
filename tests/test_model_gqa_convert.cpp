// model/gqa_convert.h: key/value heads pooled into fewer (Ainslie et al. 2023). Converting to the
// model's own head count is the identity; a model whose heads agree within each group computes
// the same after conversion; on general models the converted logits equal PyTorch's pooled model
// (tools/reference/gen_gqa_fixtures.py); the pooled rows are the mean (or first) row by row; bad
// head counts are errors naming --kv-heads and both of the model's counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "model/checkpoint.h"
#include "model/gqa_convert.h"
#include "model/layer.h"
#include "random_model.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::logits_of;
using test::random_model;
using test::small_config;
using test::some_ids;
using test::tensor_of;

const char* kRope8 = R"({"n_heads": 8, "d_model": 32, "norm": "rmsnorm", "positions": "rope",
                         "activation": "swiglu", "bias": true, "rope_pairing": "adjacent"})";

// max |a - b| / max |b|
double relative_gap(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    largest = std::max(largest, std::fabs(static_cast<double>(b[i])));
  }
  return worst / largest;
}

TEST(GqaConvert, ToTheModelsOwnHeadCountIsTheIdentity) {
  auto m = random_model(small_config(kRope8), 1);
  auto same = convert_kv_heads(*m, 8, KvPool::Mean);
  EXPECT_EQ(same->config().to_json(), m->config().to_json());
  ASSERT_EQ(same->params().size(), m->params().size());
  EXPECT_EQ(std::memcmp(same->params().data(), m->params().data(), m->params().size() * sizeof(float)), 0);
}

TEST(GqaConvert, PooledRowsAreTheGroupsMeanOrItsFirstHead) {
  auto m = random_model(small_config(kRope8), 2);  // 8 heads of width 4 -> 2: groups of 4
  const int64_t hd = 4, d = 32;
  for (KvPool pool : {KvPool::Mean, KvPool::First}) {
    SCOPED_TRACE(to_string(pool));
    auto c = convert_kv_heads(*m, 2, pool);
    EXPECT_EQ(c->config().n_kv_heads, 2);
    EXPECT_EQ(c->config().n_heads, 8);
    for (const char* name : {"layers.1.attn.wk.weight", "layers.0.attn.wv.weight", "layers.1.attn.wv.bias"}) {
      SCOPED_TRACE(name);
      const bool bias = std::string(name).ends_with("bias");
      const int64_t cols = bias ? 1 : d;
      const float* src = tensor_of(*m, name);
      const float* dst = tensor_of(*c, name);
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t r = 0; r < hd; ++r)
          for (int64_t k = 0; k < cols; ++k) {
            double want = src[((j * 4) * hd + r) * cols + k];
            if (pool == KvPool::Mean)
              want = (src[((j * 4 + 0) * hd + r) * cols + k] +
                      static_cast<double>(src[((j * 4 + 1) * hd + r) * cols + k]) +
                      src[((j * 4 + 2) * hd + r) * cols + k] + src[((j * 4 + 3) * hd + r) * cols + k]) /
                     4.0;
            EXPECT_FLOAT_EQ(dst[(j * hd + r) * cols + k], static_cast<float>(want));
          }
    }
    // Queries, outputs and everything else: copied.
    for (const char* name :
         {"layers.0.attn.wq.weight", "layers.1.attn.wo.weight", "layers.0.ffn.w3.weight", "tok_embeddings.weight"}) {
      const auto* e = m->params().find(name);
      EXPECT_EQ(std::memcmp(tensor_of(*c, name), tensor_of(*m, name), static_cast<size_t>(e->shape.numel()) * 4), 0)
          << name;
    }
  }
}

TEST(GqaConvert, HeadsAlikeInEachGroupGiveTheSameLogits) {
  // Make each group's key and value heads copies of its first: the grouped model then computes
  // exactly what the multi-head one did, for every pooling, pairing, norm and activation.
  for (const char* cfg : {kRope8,
                          R"({"n_heads": 8, "d_model": 32, "norm": "layernorm", "positions": "rope",
                              "activation": "gelu", "rope_pairing": "halves", "tied_embeddings": false})",
                          R"({"n_heads": 8, "d_model": 32, "positions": "learned", "bias": true})"}) {
    SCOPED_TRACE(cfg);
    for (int64_t K : {4, 2, 1}) {
      auto m = random_model(small_config(cfg), 3);
      const int64_t hd = 4, g = 8 / K;
      // Matrices at std 0.2 (tools/reference/gen_model_fixtures.py's scale: float32 rounding stays
      // inside 1e-6 there), so that what is compared is the conversion, not a chaotic model's
      // amplification of summation-order rounding.
      for (const auto& e : m->params().entries())
        if (e.shape.rank() == 2)
          for (int64_t i = 0; i < e.shape.numel(); ++i) m->params().data()[e.offset + i] *= 2.0f / 3.0f;
      for (const auto& e : m->params().entries()) {
        if (!e.name.ends_with(".attn.wk.weight") && !e.name.ends_with(".attn.wv.weight") &&
            !e.name.ends_with(".attn.wk.bias") && !e.name.ends_with(".attn.wv.bias"))
          continue;
        float* w = m->params().data() + e.offset;
        const int64_t cols = e.shape.numel() / (8 * hd);
        for (int64_t h = 0; h < 8; ++h)
          if (h % g != 0)
            std::memcpy(w + h * hd * cols, w + (h - h % g) * hd * cols, static_cast<size_t>(hd * cols) * 4);
      }
      const auto ids = some_ids(20, 256);
      for (AttentionKernel kernel : {AttentionKernel::Reference, AttentionKernel::Tiled}) {
        m->set_attention_kernel(kernel);
        const auto before = logits_of(*m, ids);
        for (KvPool pool : {KvPool::Mean, KvPool::First}) {
          auto c = convert_kv_heads(*m, K, pool);
          c->set_attention_kernel(kernel);
          // The plain kernel: the issue's 1e-6 of the largest logit. The tiled kernel runs a group's
          // query heads together, a different summation order: float32 rounding through two layers
          // (measured up to 1.7e-6 of the largest logit), bound 5e-6.
          const double bound = kernel == AttentionKernel::Reference ? 1e-6 : 5e-6;
          EXPECT_LE(relative_gap(logits_of(*c, ids), before), bound)
              << "K " << K << " " << to_string(pool)
              << (kernel == AttentionKernel::Reference ? " reference" : " tiled");
        }
      }
      // And it is a real conversion: a general model's logits move.
      auto general = random_model(small_config(cfg), 4);
      EXPECT_GT(relative_gap(logits_of(*convert_kv_heads(*general, K, KvPool::Mean), ids), logits_of(*general, ids)),
                1e-3);
    }
  }
}

TEST(GqaConvert, PoolingInStagesIsPoolingAtOnce) {
  // Groups of equal size: the mean of means is the mean, so 8 -> 4 -> 2 equals 8 -> 2, and a
  // grouped model converts like any other.
  auto m = random_model(small_config(kRope8), 5);
  auto staged = convert_kv_heads(*convert_kv_heads(*m, 4, KvPool::Mean), 2, KvPool::Mean);
  auto direct = convert_kv_heads(*m, 2, KvPool::Mean);
  const auto ids = some_ids(16, 256);
  EXPECT_LE(relative_gap(logits_of(*staged, ids), logits_of(*direct, ids)), 1e-6);
}

TEST(GqaConvert, LogitsEqualPyTorchsPooledModels) {
  const auto j = nlohmann::json::parse(read_file("fixtures/gqa/cases.json"));
  ASSERT_EQ(j["cases"].size(), 3u);
  for (const auto& c : j["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    LoadedModel lm = load_model("fixtures/gqa/" + c["file"].get<std::string>());
    const auto ids = c["ids"].get<std::vector<TokenId>>();
    for (const auto& r : c["results"]) {
      const int64_t K = r["kv_heads"];
      const KvPool pool = parse_kv_pool(r["pool"]);
      SCOPED_TRACE("K " + std::to_string(K) + " " + to_string(pool));
      auto converted = convert_kv_heads(*lm.model, K, pool);
      const auto want = r["logits"].get<std::vector<double>>();
      const auto got = logits_of(*converted, ids);
      ASSERT_EQ(got.size(), want.size());
      double worst = 0, largest = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::fabs(got[i] - want[i]));
        largest = std::max(largest, std::fabs(want[i]));
      }
      // float32 against float64 through two layers: the model fixtures' 1e-6-absolute class.
      EXPECT_LE(worst, 2e-6 * largest) << "largest logit " << largest;
    }
  }
}

TEST(GqaConvert, HeadCountsThatDoNotDivideAreErrorsNamingBoth) {
  auto m = random_model(small_config(kRope8), 6);
  for (int64_t K : {3, 0, 16, -2})
    EXPECT_ERROR(convert_kv_heads(*m, K, KvPool::Mean), ErrorKind::BadInput, "--kv-heads", "n_heads 8", "n_kv_heads 8");
  auto grouped = convert_kv_heads(*m, 4, KvPool::Mean);
  EXPECT_ERROR(convert_kv_heads(*grouped, 8, KvPool::Mean), ErrorKind::BadInput, "--kv-heads", "--kv-heads 8: must",
               "n_kv_heads 4");
  EXPECT_ERROR(parse_kv_pool("max"), ErrorKind::BadInput, "--pool", "max");
}

}  // namespace
}  // namespace tformer
