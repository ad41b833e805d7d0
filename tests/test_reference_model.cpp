// The whole decoder against PyTorch: random tiny models (fixtures from
// tools/reference/gen_model_fixtures.py, a float64 torch implementation of the model that uses
// F.layer_norm, F.gelu and, where a block can be expressed by it, nn.TransformerEncoderLayer)
// covering every value of every config option pairwise. Each model is loaded from its safetensors
// file as any outside checkpoint would be and its float32 logits compared with torch's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "model/checkpoint.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::all_close;

nlohmann::json load_cases() {
  std::ifstream in("fixtures/models/cases.json");
  if (!in) throw std::runtime_error("cannot open tests/fixtures/models/cases.json");
  return nlohmann::json::parse(in).at("cases");
}

TEST(ModelVsTorch, LogitsMatchForEveryModelOfTheCoveringSet) {
  const auto cases = load_cases();
  ASSERT_GE(cases.size(), 12u);
  for (const auto& c : cases) {
    const std::string name = c.at("name");
    SCOPED_TRACE(name);
    LoadedModel loaded = load_model("fixtures/models/" + c.at("file").get<std::string>());
    ASSERT_TRUE(loaded.model);
    EXPECT_FALSE(loaded.tokenizer);  // the fixtures carry no tokenizer metadata
    // The file's config is the one the case was generated with, key by key.
    const nlohmann::json ours = loaded.model->config().to_json();
    const nlohmann::json& expected = c.at("config");
    ASSERT_EQ(expected.size(), 17u) << "the fixture config should name every key";
    for (const auto& [key, value] : expected.items()) EXPECT_EQ(ours.at(key), value) << "config key " << key;

    const int64_t batch = c.at("batch"), n_tokens = c.at("T");
    const int64_t vocab = loaded.model->config().vocab_size;
    const auto ids = c.at("ids").get<std::vector<TokenId>>();
    const auto torch_logits = c.at("logits").get<std::vector<double>>();
    ASSERT_EQ(static_cast<int64_t>(ids.size()), batch * n_tokens);
    ASSERT_EQ(static_cast<int64_t>(torch_logits.size()), batch * n_tokens * vocab);

    std::vector<float> logits(torch_logits.size(), std::nanf(""));
    loaded.model->forward(logits.data(), ids.data(), batch, n_tokens);
    EXPECT_TRUE(all_close(logits, torch_logits, 1e-5, 1e-6));

    // Informational: the worst absolute difference and the worst fraction of the tolerance used.
    double max_abs = 0, max_used = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const double diff = std::abs(static_cast<double>(logits[i]) - torch_logits[i]);
      max_abs = std::max(max_abs, diff);
      max_used = std::max(max_used, diff / (1e-6 + 1e-5 * std::abs(torch_logits[i])));
    }
    std::printf("  %-42s max |diff| %.2e  worst |diff| / tolerance %.2f\n", name.c_str(), max_abs, max_used);
  }
}

// The fixture set must stay a pairwise covering set: every pair of values of two different options
// appears together in some model. rope_pairing and rope_base only mean something with RoPE, so
// their pairs count only in RoPE models (and are not required with other position kinds).
TEST(ModelVsTorch, FixturesCoverEveryPairOfOptionValues) {
  const auto cases = load_cases();
  using Assignment = std::map<std::string, std::string>;
  std::vector<Assignment> models;
  std::set<std::string> rope_bases;
  bool some_dropout = false;
  for (const auto& c : cases) {
    const auto& j = c.at("config");
    Assignment a;
    for (const char* k : {"norm", "norm_placement", "positions", "rope_pairing", "activation"})
      a[k] = j.at(k).get<std::string>();
    a["bias"] = j.at("bias").get<bool>() ? "true" : "false";
    a["tied_embeddings"] = j.at("tied_embeddings").get<bool>() ? "true" : "false";
    a["rope_base"] = j.at("rope_base").dump();
    const int64_t h = j.at("n_heads"), kv = j.at("n_kv_heads");
    a["attention"] = kv == h ? "mha" : kv == 1 ? "mqa" : "gqa";
    if (a["positions"] == "rope") rope_bases.insert(a["rope_base"]);
    some_dropout = some_dropout || j.at("dropout").get<double>() > 0;
    models.push_back(a);
  }
  // RoPE with at least two different bases; the bases seen are the option's values.
  ASSERT_GE(rope_bases.size(), 2u);
  // Some model declares dropout > 0: its logits must still equal torch's eval-mode logits.
  EXPECT_TRUE(some_dropout);

  const std::map<std::string, std::vector<std::string>> options{
      {"norm", {"layernorm", "rmsnorm"}},
      {"norm_placement", {"pre", "post"}},
      {"positions", {"learned", "sinusoidal", "rope", "none"}},
      {"rope_pairing", {"adjacent", "halves"}},
      {"rope_base", {rope_bases.begin(), rope_bases.end()}},
      {"activation", {"gelu", "gelu_tanh", "swiglu"}},
      {"bias", {"true", "false"}},
      {"tied_embeddings", {"true", "false"}},
      {"attention", {"mha", "gqa", "mqa"}},
  };
  auto rope_only = [](const std::string& k) { return k == "rope_pairing" || k == "rope_base"; };
  int64_t required = 0, missing = 0;
  for (auto a = options.begin(); a != options.end(); ++a)
    for (auto b = std::next(a); b != options.end(); ++b)
      for (const auto& va : a->second)
        for (const auto& vb : b->second) {
          const bool needs_rope = rope_only(a->first) || rope_only(b->first);
          if (needs_rope && ((a->first == "positions" && va != "rope") || (b->first == "positions" && vb != "rope")))
            continue;
          ++required;
          const bool found = std::any_of(models.begin(), models.end(), [&](const Assignment& m) {
            return m.at(a->first) == va && m.at(b->first) == vb && (!needs_rope || m.at("positions") == "rope");
          });
          if (!found) ++missing;
          EXPECT_TRUE(found) << "no fixture model has " << a->first << " = " << va << " with " << b->first << " = "
                             << vb;
        }
  EXPECT_EQ(missing, 0) << "of " << required << " required pairs";
  EXPECT_GT(required, 150);  // 9 options: the pair count is fixed by the value lists above
}

}  // namespace
}  // namespace tformer
