// Model files: save and load round trip, the tokenizer carried in the header, and bad files that
// must be clear errors naming what is wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "test_util.h"
#include "tokenizer/char_tokenizer.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  std::string path(const char* name) const { return (dir_ / name).string(); }
  test::TempDir tmp_;  // a fresh folder per test, removed afterwards
  fs::path dir_ = tmp_.path();
};

ModelConfig config(const char* overrides = "{}") {
  auto j = nlohmann::json::parse(R"({"vocab_size": 256, "context_length": 16, "d_model": 8, "n_layers": 2,
                                     "n_heads": 2, "d_ff": 12})");
  j.update(nlohmann::json::parse(overrides));
  return ModelConfig::from_json(j, "test");
}

TEST_F(CheckpointTest, RoundTripGivesIdenticalLogitsConfigAndTokenizer) {
  for (const char* cfg : {R"({})", R"({"positions": "rope", "n_kv_heads": 1, "activation": "swiglu",
                                      "tied_embeddings": false, "norm": "rmsnorm", "bias": false})"}) {
    Model m(config(cfg));
    m.init_gpt2(4);
    const auto tok = CharTokenizer::bytes();
    save_model(path("m.safetensors"), m, &tok);
    LoadedModel back = load_model(path("m.safetensors"));
    EXPECT_EQ(back.model->config().to_json(), m.config().to_json());
    ASSERT_TRUE(back.tokenizer);
    EXPECT_EQ(back.tokenizer->encode("héllo\n"), tok.encode("héllo\n"));
    const std::vector<TokenId> ids{72, 101, 108, 108, 111};
    std::vector<float> a(5 * 256), b(5 * 256);
    m.forward(a.data(), ids.data(), 1, 5);
    back.model->forward(b.data(), ids.data(), 1, 5);
    EXPECT_EQ(a, b) << cfg;
  }
}

TEST_F(CheckpointTest, MissingMisshapenAndExtraTensorsAreNamed) {
  Model m(config());
  m.init_gpt2(1);
  // Write the arena by hand, leaving one tensor out / changing one shape / adding one.
  auto write = [&](const char* file, const std::string& skip, const std::string& reshape, bool extra) {
    std::vector<TensorToWrite> ts;
    std::vector<float> big(64 * 8, 0.5f);
    for (const auto& e : m.params().entries()) {
      if (e.name == skip) continue;
      std::vector<int64_t> shape;
      for (int i = 0; i < e.shape.rank(); ++i) shape.push_back(e.shape[i]);
      if (e.name == reshape) shape = {shape[0] + 1};
      ts.push_back({e.name, shape, e.name == reshape ? big.data() : m.params().view(e).data()});
    }
    if (extra) ts.push_back({"layers.9.attn.wq.weight", {2}, big.data()});
    write_safetensors(path(file), ts, {{"config", m.config().to_json().dump()}});
  };
  write("missing.safetensors", "layers.1.ffn.w2.weight", "", false);
  EXPECT_ERROR(load_model(path("missing.safetensors")), ErrorKind::BadFile, "layers.1.ffn.w2.weight");
  write("shape.safetensors", "", "layers.0.attn_norm.bias", false);
  EXPECT_ERROR(load_model(path("shape.safetensors")), ErrorKind::BadFile, "layers.0.attn_norm.bias");
  write("extra.safetensors", "", "", true);
  EXPECT_ERROR(load_model(path("extra.safetensors")), ErrorKind::BadFile, "layers.9.attn.wq.weight");
}

TEST_F(CheckpointTest, MetadataProblemsAreNamed) {
  Model m(config());
  save_model(path("ok.safetensors"), m, nullptr);
  EXPECT_FALSE(load_model(path("ok.safetensors")).tokenizer);
  // No config.
  write_arena(path("noconfig.safetensors"), m.params(), {});
  EXPECT_ERROR(load_model(path("noconfig.safetensors")), ErrorKind::BadFile, "config");
  // Config that is not JSON, and one with an unknown key.
  write_arena(path("badjson.safetensors"), m.params(), {{"config", "{vocab_size: 1"}});
  EXPECT_ERROR(load_model(path("badjson.safetensors")), ErrorKind::BadFile, "config", "not valid JSON");
  auto j = m.config().to_json();
  j["colour"] = "blue";
  write_arena(path("unknown.safetensors"), m.params(), {{"config", j.dump()}});
  EXPECT_ERROR(load_model(path("unknown.safetensors")), ErrorKind::BadConfig, "colour");
  // A tokenizer whose vocabulary does not match the model's.
  Model small(config(R"({"vocab_size": 100})"));
  const auto tok = CharTokenizer::bytes();
  save_model(path("mismatch.safetensors"), small, &tok);
  EXPECT_ERROR(load_model(path("mismatch.safetensors")), ErrorKind::BadFile, "vocab_size", "vocab_size is 100");
}

TEST_F(CheckpointTest, AConfigClaimingMoreThanTheFileHoldsIsRefusedBeforeAllocating) {
  // The tensors of a small model under the config of a 4 GB one (a fuzzed file): the tensors are
  // checked against the config before the weights are allocated.
  Model m(config());
  auto big = m.config().to_json();
  big["d_model"] = 4096;
  big["n_heads"] = 32;
  big["d_ff"] = 16384;
  big["n_layers"] = 2;
  write_arena(path("big.safetensors"), m.params(), {{"config", big.dump()}});
  EXPECT_ERROR(load_model(path("big.safetensors")), ErrorKind::BadFile, "tok_embeddings.weight", "[256, 4096]");
  // More layers than the file has tensors.
  big = m.config().to_json();
  big["n_layers"] = 1000000;
  write_arena(path("deep.safetensors"), m.params(), {{"config", big.dump()}});
  EXPECT_ERROR(load_model(path("deep.safetensors")), ErrorKind::BadFile, "n_layers", "1000000 layers");
}

TEST_F(CheckpointTest, TruncatedAndCorruptFilesAreErrorsNotCrashes) {
  Model m(config());
  m.init_gpt2(2);
  save_model(path("m.safetensors"), m, nullptr);
  std::ifstream in(path("m.safetensors"), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t cuts[] = {0, 4, 8, 20, bytes.size() / 2, bytes.size() - 1};
  for (size_t cut : cuts) {
    std::ofstream(path("cut.safetensors"), std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(cut));
    // The whole file's fault, or one tensor's (a header intact, its data cut): BadFile either way.
    EXPECT_EQ(test::error_of([&] { load_model(path("cut.safetensors")); }).kind(), ErrorKind::BadFile)
        << "cut at " << cut;
  }
  // A header length pointing past the end of the file.
  std::string bad = bytes;
  bad[5] = '\x7f';
  std::ofstream(path("len.safetensors"), std::ios::binary).write(bad.data(), static_cast<std::streamsize>(bad.size()));
  EXPECT_ERROR(load_model(path("len.safetensors")), ErrorKind::BadFile, path("len.safetensors"));
  EXPECT_ERROR(load_model(path("absent.safetensors")), ErrorKind::BadFile, path("absent.safetensors"));
}

}  // namespace
}  // namespace tformer
