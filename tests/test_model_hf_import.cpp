// model/hf_import.h: Hugging Face folders (tests/fixtures/hf, written by
// tools/reference/gen_hf_fixtures.py in transformers' layout: Conv1D [in, out] weights, the fused
// c_attn, rotate-half RoPE, GQA, BF16/F16 weights, shards with their index, tied and untied heads)
// load, and tformer's logits equal the script's float64 reference within 1e-5 of the largest
// logit; their tokenizers and chat template come along; unsupported settings and broken folders
// are errors naming the key, tensor or file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "io/safetensors.h"
#include "model/hf_import.h"
#include "test_util.h"
#include "tokenizer/sentencepiece.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;

const char* kDir = "fixtures/hf";

void expect_reference_logits(const std::string& name) {
  SCOPED_TRACE(name);
  HfModel m = import_hf(std::string(kDir) + "/" + name);
  const auto j = nlohmann::json::parse(read_file(std::string(kDir) + "/" + name + "/expected.json"));
  const auto ids = j["ids"].get<std::vector<TokenId>>();
  const auto want = j["logits"].get<std::vector<double>>();
  const auto T = static_cast<int64_t>(ids.size()), V = m.model->config().vocab_size;
  ASSERT_EQ(static_cast<int64_t>(want.size()), T * V);
  std::vector<float> got(static_cast<size_t>(T * V));
  m.model->forward(got.data(), ids.data(), 1, T);
  double largest = 0, worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  EXPECT_GT(largest, 1.0);
  EXPECT_LE(worst, 1e-5 * largest) << "largest |logit| " << largest;
  std::cout << name << ": max |logit - reference| = " << worst << " (largest |logit| " << largest << ")\n";
}

TEST(HfImport, Gpt2LogitsEqualTheFloat64Reference) { expect_reference_logits("gpt2_tiny"); }
TEST(HfImport, LlamaBf16GqaUntiedLogitsEqualTheFloat64Reference) { expect_reference_logits("llama_tiny"); }
TEST(HfImport, LlamaShardedF16MqaTiedWithAttentionBiasLogitsEqualTheFloat64Reference) {
  expect_reference_logits("llama_sharded");
}

TEST(HfImport, TheConfigTokenizerAndChatTemplateAreRead) {
  HfModel g = import_hf(std::string(kDir) + "/gpt2_tiny");
  EXPECT_EQ(g.model_type, "gpt2");
  const ModelConfig& gc = g.model->config();
  EXPECT_EQ(gc.activation, Activation::GeluTanh);
  EXPECT_EQ(gc.d_ff, 48);
  EXPECT_TRUE(gc.tied_embeddings);
  ASSERT_TRUE(g.tokenizer);
  EXPECT_EQ(g.tokenizer->kind(), "byte-bpe");
  // " the in": " the" is the merge chain Ġ t -> Ġt, h e -> he, Ġt he -> Ġthe (id 258); " in" is Ġ
  // (GPT-2's id 220 for the space byte) and in (259).
  EXPECT_EQ(g.tokenizer->encode(" the in"), (std::vector<TokenId>{258, 220, 259}));
  EXPECT_EQ(g.tokenizer->encode("<|endoftext|>", true), (std::vector<TokenId>{264}));

  HfModel l = import_hf(std::string(kDir) + "/llama_tiny");
  const ModelConfig& lc = l.model->config();
  EXPECT_EQ(lc.n_kv_heads, 2);
  EXPECT_EQ(lc.rope_pairing, RopePairing::Halves);
  EXPECT_EQ(lc.rope_base, 500.0);
  EXPECT_FALSE(lc.tied_embeddings);
  EXPECT_FALSE(lc.bias);
  ASSERT_TRUE(l.tokenizer);
  EXPECT_EQ(l.tokenizer->to_json(), g.tokenizer->to_json());  // tokenizer.json = vocab.json + merges.txt
  EXPECT_NE(l.chat_template.find("messages"), std::string::npos);

  HfModel s = import_hf(std::string(kDir) + "/llama_sharded");
  EXPECT_TRUE(s.model->config().bias);
  EXPECT_EQ(s.model->config().n_kv_heads, 1);
  ASSERT_EQ(s.notes.size(), 1u);
  EXPECT_NE(s.notes[0].find("zero feed-forward biases"), std::string::npos);
  EXPECT_EQ(s.tokenizer->to_json(), g.tokenizer->to_json());  // "a b" merges read as pairs
}

TEST(HfImport, ASentencePieceTokenizerModelIsRead) {
  expect_reference_logits("llama_spm");
  HfModel m = import_hf(std::string(kDir) + "/llama_spm");
  ASSERT_TRUE(m.tokenizer);
  EXPECT_EQ(m.tokenizer->kind(), "sentencepiece");
  const auto fixture = nlohmann::json::parse(read_file("fixtures/sentencepiece/llamaish.json"));
  for (size_t i = 0; i < 20; ++i)
    EXPECT_EQ(m.tokenizer->encode(fixture["texts"][i].get<std::string>()),
              fixture["ids"][i].get<std::vector<TokenId>>());
  // LlamaTokenizer's defaults without a tokenizer_config.json: "<s>" before every text, stop at "</s>".
  const auto specials = m.tokenizer->special_tokens();
  EXPECT_EQ(m.tokenizer->bos_id(), specials.at("<s>"));
  EXPECT_EQ(m.tokenizer->eot_id(), specials.at("</s>"));
}

// ---- broken and unsupported folders ------------------------------------------------------------

class HfBroken : public ::testing::Test {
 protected:
  // A copy of a fixture folder whose config.json gets `changes` merged in.
  std::string copy(const std::string& name, const nlohmann::json& changes = nlohmann::json::object()) {
    const fs::path dst = tmp_.path() / (name + std::to_string(n_++));
    fs::copy(fs::path(kDir) / name, dst);
    auto cfg = nlohmann::json::parse(read_file((dst / "config.json").string()));
    for (const auto& [k, v] : changes.items()) {
      if (v.is_null() && k.starts_with("-"))
        cfg.erase(k.substr(1));
      else
        cfg[k] = v;
    }
    write_file_atomic((dst / "config.json").string(), cfg.dump());
    return dst.string();
  }
  test::TempDir tmp_;
  int n_ = 0;
};

TEST_F(HfBroken, UnsupportedSettingsAreRefusedByName) {
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"model_type", "mistral"}})), ErrorKind::Unsupported, "model_type",
               "mistral");
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}})),
               ErrorKind::Unsupported, "rope_scaling");
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"sliding_window", 4096}})), ErrorKind::Unsupported, "sliding_window");
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"hidden_act", "gelu"}})), ErrorKind::Unsupported, "hidden_act");
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"head_dim", 16}})), ErrorKind::Unsupported, "head_dim");
  EXPECT_ERROR(import_hf(copy("gpt2_tiny", {{"activation_function", "relu"}})), ErrorKind::Unsupported,
               "activation_function", "relu");
  EXPECT_ERROR(import_hf(copy("gpt2_tiny", {{"scale_attn_by_inverse_layer_idx", true}})), ErrorKind::Unsupported,
               "scale_attn_by_inverse_layer_idx");
}

TEST_F(HfBroken, MissingAndMisshapenPiecesAreNamed) {
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"-num_hidden_layers", nullptr}})), ErrorKind::BadFile,
               "num_hidden_layers", "missing");
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"hidden_size", "32"}})), ErrorKind::BadFile, "hidden_size");
  // A padded vocabulary: the embedding's shape no longer matches.
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"vocab_size", 300}})), ErrorKind::BadFile, "model.embed_tokens.weight",
               "[300, 32]");
  // An untied gpt2 needs lm_head.weight, which the tied folder does not have.
  EXPECT_ERROR(import_hf(copy("gpt2_tiny", {{"tie_word_embeddings", false}})), ErrorKind::BadFile, "lm_head.weight");
  // Fewer layers than the weights: the rest are tensors no config accounts for.
  EXPECT_ERROR(import_hf(copy("llama_tiny", {{"num_hidden_layers", 1}})), ErrorKind::Unsupported,
               "model.layers.1.input_layernorm.weight", "not part of a llama model");
  {
    const std::string d = copy("llama_sharded");
    fs::remove(fs::path(d) / "model-00002-of-00002.safetensors");
    EXPECT_ERROR(import_hf(d), ErrorKind::BadFile, (fs::path(d) / "model-00002-of-00002.safetensors").string(),
                 "cannot open");
  }
  {
    const std::string d = copy("gpt2_tiny");
    const std::string st = (fs::path(d) / "model.safetensors").string();
    const std::string bytes = read_file(st);
    write_file_atomic(st, bytes.substr(0, bytes.size() - 100));
    EXPECT_ERROR(import_hf(d), ErrorKind::BadFile, "transformer.wte.weight", st, "past the end");
  }
  {
    const std::string d = copy("llama_tiny");
    auto tj = nlohmann::json::parse(read_file((fs::path(d) / "tokenizer.json").string()));
    tj["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
    write_file_atomic((fs::path(d) / "tokenizer.json").string(), tj.dump());
    EXPECT_ERROR(import_hf(d), ErrorKind::Unsupported, "pre_tokenizer", "Metaspace");
  }
  {
    const std::string d = copy("llama_tiny");
    fs::remove(fs::path(d) / "config.json");
    EXPECT_ERROR(import_hf(d), ErrorKind::BadFile, (fs::path(d) / "config.json").string(), "cannot open");
  }
  {
    // tokenizer_config.json's word on the BOS, and its own errors.
    const std::string d = copy("llama_spm");
    const std::string cfg = (fs::path(d) / "tokenizer_config.json").string();
    write_file_atomic(cfg, R"({"add_bos_token": false, "eos_token": {"content": "<s>"}})");
    HfModel m = import_hf(d);
    EXPECT_FALSE(m.tokenizer->bos_id());
    EXPECT_EQ(m.tokenizer->eot_id(), m.tokenizer->special_tokens().at("<s>"));
    write_file_atomic(cfg, R"({"add_bos_token": "yes"})");
    EXPECT_ERROR(import_hf(d), ErrorKind::BadFile, "add_bos_token", "not a bool");
    // Llama 2's folders also carry a tokenizer.json converted from tokenizer.model (Metaspace,
    // no pre-tokenizer): the original SentencePiece model is read.
    fs::remove(cfg);
    write_file_atomic((fs::path(d) / "tokenizer.json").string(),
                      R"({"version": "1.0", "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend",
                          "prepend": "▁"}]}, "pre_tokenizer": null, "model": {"type": "BPE", "vocab": {},
                          "merges": []}})");
    HfModel with_json = import_hf(d);
    ASSERT_TRUE(with_json.tokenizer);
    EXPECT_EQ(with_json.tokenizer->kind(), "sentencepiece");
    EXPECT_EQ(with_json.tokenizer->encode("hello world"), m.tokenizer->encode("hello world"));
    EXPECT_TRUE(std::any_of(with_json.notes.begin(), with_json.notes.end(),
                            [](const std::string& n) { return n.find("tokenizer.model") != std::string::npos; }));
  }
  {
    // A byte-level tokenizer.json with a normalizer: tformer's byte-level BPE has none.
    const std::string d = copy("llama_tiny");
    auto tj = nlohmann::json::parse(read_file((fs::path(d) / "tokenizer.json").string()));
    tj["normalizer"] = {{"type", "NFC"}};
    write_file_atomic((fs::path(d) / "tokenizer.json").string(), tj.dump());
    EXPECT_ERROR(import_hf(d), ErrorKind::Unsupported, "normalizer", "NFC");
  }
  {
    // A tied GPT-2 that still stores lm_head.weight (older checkpoints do): it must be wte.
    const std::string d = copy("gpt2_tiny");
    const std::string st = (fs::path(d) / "model.safetensors").string();
    const SafetensorsFile f = SafetensorsFile::open(st);
    std::vector<std::vector<float>> data;
    std::vector<TensorToWrite> tensors;
    data.reserve(f.tensors().size() + 1);  // no reallocation: tensors point into data
    size_t head = 0;
    for (const auto& t : f.tensors()) {
      int64_t n = 1;
      for (int64_t x : t.shape) n *= x;
      data.emplace_back(static_cast<size_t>(n));
      f.read_f32(t.name, data.back().data(), n);
      tensors.push_back({t.name, t.shape, data.back().data()});
      if (t.name == "transformer.wte.weight") {
        data.push_back(data.back());
        head = data.size() - 1;
        tensors.push_back({"lm_head.weight", t.shape, data.back().data()});
      }
    }
    write_safetensors(st, tensors, f.metadata());
    EXPECT_NO_THROW(import_hf(d));  // the same values: fine
    ASSERT_GT(head, 0u);
    data[head][7] += 0.5f;
    write_safetensors(st, tensors, f.metadata());
    EXPECT_ERROR(import_hf(d), ErrorKind::BadFile, "lm_head.weight", "differs from transformer.wte.weight");
  }
  // Sizes the folder does not hold are refused before the weights are allocated (a fuzzed
  // config.json): a wider embedding by its shape, more layers by the values the folder holds.
  EXPECT_ERROR(import_hf(copy("gpt2_tiny", {{"n_embd", 2048}, {"n_head", 16}, {"n_inner", 8192}})), ErrorKind::BadFile,
               "transformer.wte.weight", "[265, 2048]");
  {
    const std::string d = copy("gpt2_tiny", {{"n_layer", 10000}});
    EXPECT_ERROR(import_hf(d), ErrorKind::BadFile, (fs::path(d) / "config.json").string(),
                 "the folder's safetensors files hold");
  }
  {
    // Weights that would not fit are refused before anything is allocated, naming both sizes.
    ASSERT_EQ(setenv("TFORMER_MEMORY_LIMIT", "4096", 1), 0);
    const Error e = test::error_of([&] { import_hf(std::string(kDir) + "/llama_tiny"); });
    unsetenv("TFORMER_MEMORY_LIMIT");
    EXPECT_EQ(e.kind(), ErrorKind::BadFile);
    EXPECT_NE(std::string(e.what()).find("4096 bytes of memory"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("llama_tiny"), std::string::npos) << e.what();
  }
  const std::string nowhere = (tmp_.path() / "nowhere").string();
  EXPECT_ERROR(import_hf(nowhere), ErrorKind::BadFile, nowhere, "not a folder");
}

}  // namespace
}  // namespace tformer
