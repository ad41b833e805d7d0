// model/gguf_model.h: tformer models out to llama.cpp's GGUF and back in. Round trips give
// bit-identical logits; the RoPE permutation is checked on the rows themselves and on what it
// computes; F16/BF16 weights come back as the rounded values; configs and tokenizers that no
// llama.cpp architecture computes are refused by name; broken or foreign files are errors naming
// the key or tensor. (What llama.cpp itself computes from these files: test_model_gguf_llama_cpp.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/file_io.h"
#include "core/float16.h"
#include "core/memory.h"
#include "core/rng.h"
#include "io/gguf.h"
#include "kernels/qlinear.h"
#include "kernels/quant.h"
#include "kernels/softmax.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "random_model.h"
#include "test_util.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/sennrich_tokenizer.h"
#include "tokenizer/sentencepiece.h"

namespace tformer {
namespace {

ModelConfig config(const char* overrides) { return test::small_config(overrides); }

const char* kLlama = R"({"norm": "rmsnorm", "positions": "rope", "activation": "swiglu", "bias": false})";

using test::logits_of;
using test::random_model;
using test::some_ids;
using test::tensor_of;

class GgufModelTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (tmp_.path() / name).string(); }
  test::TempDir tmp_;
};

// ---- round trips --------------------------------------------------------------------------------

TEST_F(GgufModelTest, RoundTripThroughF32GivesBitIdenticalLogits) {
  const char* configs[] = {
      R"({"norm": "rmsnorm", "positions": "rope", "activation": "swiglu", "bias": false, "n_kv_heads": 2,
          "tied_embeddings": false, "rope_pairing": "halves"})",
      R"({"norm": "rmsnorm", "positions": "rope", "activation": "swiglu", "bias": true, "n_kv_heads": 1,
          "rope_pairing": "adjacent", "rope_base": 500})",
      R"({"activation": "gelu_tanh", "positions": "learned"})",
      R"({"activation": "gelu_tanh", "positions": "learned", "n_kv_heads": 2, "tied_embeddings": false})",
      R"({"activation": "gelu_tanh", "positions": "none", "n_kv_heads": 1})",
      R"({"activation": "gelu_tanh", "positions": "none", "bias": false, "tied_embeddings": false})",
      // stablelm: written with output.weight and tformer.tied_embeddings when tied.
      R"({"positions": "rope", "activation": "swiglu", "bias": false, "n_kv_heads": 2, "rope_pairing": "halves"})",
      R"({"positions": "rope", "activation": "swiglu", "bias": false, "tied_embeddings": false,
          "rope_pairing": "adjacent", "rope_base": 500})",
      // starcoder2.
      R"({"activation": "gelu_tanh", "positions": "rope", "n_kv_heads": 1, "rope_pairing": "adjacent"})",
      R"({"activation": "gelu_tanh", "positions": "rope", "tied_embeddings": false, "rope_pairing": "halves"})",
  };
  const auto tok = CharTokenizer::bytes();
  for (const char* cfg : configs) {
    SCOPED_TRACE(cfg);
    auto m = random_model(config(cfg), 5);
    export_gguf(path("m.gguf"), *m, tok, "", GgufExportType::F32);
    ASSERT_TRUE(is_gguf_file(path("m.gguf")));
    LoadedModel back = load_model(path("m.gguf"));
    EXPECT_EQ(back.model->config().to_json(), m->config().to_json());
    const auto ids = some_ids(20, 256);
    const auto a = logits_of(*m, ids), b = logits_of(*back.model, ids);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}

TEST_F(GgufModelTest, WhatGgufCannotSayComesBackAsItsEquivalent) {
  // Sinusoidal positions become the learned table, bias: false zero biases: the same logits, bit
  // for bit, under the config that llama.cpp's gpt2 states.
  const auto tok = CharTokenizer::bytes();
  auto m = random_model(config(R"({"activation": "gelu_tanh", "positions": "sinusoidal", "bias": false})"), 6);
  const GgufExportReport r = export_gguf(path("m.gguf"), *m, tok, "", GgufExportType::F32);
  EXPECT_EQ(r.architecture, "gpt2");
  auto noted = [&](const char* what) {
    return std::any_of(r.notes.begin(), r.notes.end(), [&](const std::string& n) { return n.starts_with(what); });
  };
  EXPECT_TRUE(noted("positions: \"sinusoidal\" written as the position table"));
  EXPECT_TRUE(noted("bias: false written as zero biases"));
  EXPECT_TRUE(noted("tokenizer: no end-of-text token"));
  LoadedModel back = load_model(path("m.gguf"));
  EXPECT_EQ(back.model->config().positions, Positions::Learned);
  EXPECT_TRUE(back.model->config().bias);
  const auto ids = some_ids(24, 256);
  const auto a = logits_of(*m, ids), b = logits_of(*back.model, ids);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  const auto table = sinusoidal_table<float>(m->config());
  EXPECT_EQ(std::memcmp(tensor_of(*back.model, "pos_embeddings.weight"), table.data(), table.size() * 4), 0);
}

TEST_F(GgufModelTest, ErfGeluIsWrittenAsTanhAndTheChangeIsMeasured) {
  const auto tok = CharTokenizer::bytes();
  auto erf = random_model(config(R"({"activation": "gelu"})"), 7);
  const GgufExportReport r = export_gguf(path("m.gguf"), *erf, tok, "", GgufExportType::F32);
  ASSERT_TRUE(r.gelu_changed);
  EXPECT_EQ(r.probe_tokens, 4 * 24);
  // The change the report states is what a tanh-GELU model with the same weights computes.
  ModelConfig tanh_config = erf->config();
  tanh_config.activation = Activation::GeluTanh;
  LoadedModel back = load_model(path("m.gguf"));
  EXPECT_EQ(back.model->config().to_json(), tanh_config.to_json());
  const auto ids = some_ids(24, 256);
  auto a = logits_of(*erf, ids), b = logits_of(*back.model, ids);
  softmax_forward<float>(a.data(), a.data(), 24, 256);
  softmax_forward<float>(b.data(), b.data(), 24, 256);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  EXPECT_GT(worst, 0.0);
  EXPECT_GT(r.gelu_max_prob_change, 0.0);
  EXPECT_LT(r.gelu_max_prob_change, 1e-2);
  auto tanh_model = random_model(tanh_config, 7);
  EXPECT_FALSE(export_gguf(path("t.gguf"), *tanh_model, tok, "", GgufExportType::F32).gelu_changed);
}

// ---- files of an outside writer -----------------------------------------------------------------

// tests/fixtures/gguf_outside: GGUF files written by tools/reference/gen_gguf_fixtures.py from the
// format description (not by tformer), laid out as llama.cpp's converter lays them out (Conv1D
// transposed into attn_qkv, rotate-half rows permuted to adjacent pairs, F16 matrices), with the
// float64 logits of the Hugging Face reference on the same weights.
TEST_F(GgufModelTest, FilesOfAnOutsideWriterGiveTheFloat64ReferenceLogits) {
  for (const char* name : {"gpt2_tiny", "llama_tiny"}) {
    SCOPED_TRACE(name);
    const std::string base = std::string("fixtures/gguf_outside/") + name;
    LoadedModel m = load_model(base + ".gguf");
    ASSERT_TRUE(m.tokenizer);
    const auto j = nlohmann::json::parse(read_file(base + ".expected.json"));
    const auto ids = j["ids"].get<std::vector<TokenId>>();
    const auto want = j["logits"].get<std::vector<double>>();
    const auto got = logits_of(*m.model, ids);
    ASSERT_EQ(got.size(), want.size());
    double worst = 0, largest = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      largest = std::max(largest, std::fabs(want[i]));
    }
    EXPECT_GT(largest, 1.0);
    EXPECT_LE(worst, 1e-5 * largest);
    std::cout << name << ": max |logit - reference| = " << worst << " (largest " << largest << ")\n";
    EXPECT_EQ(m.tokenizer->encode(" the in"), (std::vector<TokenId>{258, 220, 259}));
  }
  EXPECT_EQ(load_model("fixtures/gguf_outside/llama_tiny.gguf").model->config().rope_pairing, RopePairing::Adjacent);
  EXPECT_EQ(load_model("fixtures/gguf_outside/llama_tiny.gguf").chat_template, "{{ messages[0]['content'] }}");
}

// ---- the RoPE permutation ----------------------------------------------------------------------

TEST_F(GgufModelTest, HalvesRowsArePermutedToAdjacentPairsAndBack) {
  const auto tok = CharTokenizer::bytes();
  auto m = random_model(config(R"({"norm": "rmsnorm", "positions": "rope", "activation": "swiglu", "bias": true,
                                   "n_kv_heads": 2, "rope_pairing": "halves"})"),
                        8);
  export_gguf(path("m.gguf"), *m, tok, "", GgufExportType::F32);
  const GgufFile f = GgufFile::open(path("m.gguf"));
  const int64_t d = 16, hd = 4;
  for (const auto& [name, heads, mine, bias] : {std::tuple{"blk.1.attn_q.weight", 4, "layers.1.attn.wq.weight", false},
                                                std::tuple{"blk.1.attn_k.weight", 2, "layers.1.attn.wk.weight", false},
                                                std::tuple{"blk.0.attn_q.bias", 4, "layers.0.attn.wq.bias", true},
                                                std::tuple{"blk.0.attn_k.bias", 2, "layers.0.attn.wk.bias", true}}) {
    SCOPED_TRACE(name);
    const GgufTensor& t = f.tensor(name);
    const int64_t cols = bias ? 1 : d;
    std::vector<float> got(static_cast<size_t>(t.numel()));
    f.read_bytes(t, got.data(), t.nbytes);
    const float* orig = tensor_of(*m, mine);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t k = 0; k < cols; ++k) {
          EXPECT_EQ(got[static_cast<size_t>(((h * hd) + 2 * i) * cols + k)], orig[(h * hd + i) * cols + k]);
          EXPECT_EQ(got[static_cast<size_t>(((h * hd) + 2 * i + 1) * cols + k)],
                    orig[(h * hd + i + hd / 2) * cols + k]);
        }
  }
  // The value rows are not permuted.
  std::vector<float> v(static_cast<size_t>(2 * hd * d));
  f.read_bytes(f.tensor("blk.0.attn_v.weight"), v.data(), v.size() * 4);
  EXPECT_EQ(std::memcmp(v.data(), tensor_of(*m, "layers.0.attn.wv.weight"), v.size() * 4), 0);

  // What the permuted rows compute: the same model with adjacent pairing and the file's rows gives
  // the same logits (up to float rounding), so llama.cpp's rotation sees the same scores.
  GgufFile adjacent_view = GgufFile::open(path("m.gguf"));
  ModelConfig ac = m->config();
  ac.rope_pairing = RopePairing::Adjacent;
  Model adjacent(ac);
  std::copy(m->params().data(), m->params().data() + m->params().size(), adjacent.params().data());
  for (const auto& [gname, tname] :
       {std::pair{"attn_q.weight", "attn.wq.weight"}, std::pair{"attn_k.weight", "attn.wk.weight"},
        std::pair{"attn_q.bias", "attn.wq.bias"}, std::pair{"attn_k.bias", "attn.wk.bias"}})
    for (int l = 0; l < 2; ++l) {
      const GgufTensor& t = adjacent_view.tensor("blk." + std::to_string(l) + "." + gname);
      const auto* e = adjacent.params().find("layers." + std::to_string(l) + "." + tname);
      adjacent_view.read_bytes(t, adjacent.params().data() + e->offset, t.nbytes);
    }
  const auto ids = some_ids(24, 256);
  const auto a = logits_of(*m, ids), b = logits_of(adjacent, ids);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    largest = std::max(largest, std::fabs(static_cast<double>(a[i])));
  }
  EXPECT_LT(worst, 1e-5 * largest);
  EXPECT_GT(largest, 1.0);
}

// ---- F16 and BF16 -------------------------------------------------------------------------------

TEST_F(GgufModelTest, HalfPrecisionExportsTheRoundedMatricesAndFloat32Vectors) {
  const auto tok = CharTokenizer::bytes();
  auto m = random_model(config(R"({"activation": "gelu_tanh", "tied_embeddings": false})"), 9);
  for (const auto& [type, round] :
       {std::pair{GgufExportType::F16, +[](float x) { return f16_to_f32(f32_to_f16(x)); }},
        std::pair{GgufExportType::BF16, +[](float x) { return bf16_to_f32(f32_to_bf16(x)); }}}) {
    export_gguf(path("h.gguf"), *m, tok, "", type);
    const GgufFile f = GgufFile::open(path("h.gguf"));
    const uint32_t want = static_cast<uint32_t>(type == GgufExportType::F16 ? GgmlType::F16 : GgmlType::BF16);
    EXPECT_EQ(f.tensor("blk.0.attn_qkv.weight").type, want);
    EXPECT_EQ(f.tensor("output.weight").type, want);
    EXPECT_EQ(f.tensor("blk.0.attn_qkv.bias").type, static_cast<uint32_t>(GgmlType::F32));
    EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, static_cast<uint32_t>(GgmlType::F32));
    LoadedModel back = load_model(path("h.gguf"));
    for (const auto& e : m->params().entries()) {
      const float* orig = m->params().data() + e.offset;
      const float* got = tensor_of(*back.model, e.name);
      const bool matrix = e.shape.rank() == 2;
      for (int64_t i = 0; i < e.shape.numel(); ++i)
        ASSERT_EQ(got[i], matrix ? round(orig[i]) : orig[i]) << e.name << "[" << i << "]";
    }
  }
  EXPECT_ERROR(parse_gguf_export_type("q4_1"), ErrorKind::BadInput, "--type", "q4_1");
}

// ---- Q8_0 and Q4_0 ------------------------------------------------------------------------------

// Every weight matrix in the block type (the token embedding and the output matrix included), the
// position table, norms and biases in F32; read back, each matrix is exactly the dequantization of
// its quantization (kernels/quant.h), and general.file_type is llama.cpp's MOSTLY_Q8_0 / Q4_0.
TEST_F(GgufModelTest, BlockTypesQuantizeEveryMatrixAndReadBackDequantized) {
  const auto tok = CharTokenizer::bytes();
  auto m = random_model(config(R"({"d_model": 64, "d_ff": 96, "n_heads": 2, "activation": "gelu_tanh",
                                   "tied_embeddings": false})"),
                        9);
  for (const auto& [type, ggml, file_type] :
       {std::tuple{GgufExportType::Q8_0, GgmlType::Q8_0, 7u}, std::tuple{GgufExportType::Q4_0, GgmlType::Q4_0, 2u}}) {
    SCOPED_TRACE(file_type);
    const GgufExportReport report = export_gguf(path("q.gguf"), *m, tok, "", type);
    const GgufFile f = GgufFile::open(path("q.gguf"));
    EXPECT_EQ(f.find_value("general.file_type")->u, file_type);
    for (const char* name : {"token_embd.weight", "blk.0.attn_qkv.weight", "blk.1.ffn_down.weight", "output.weight"})
      EXPECT_EQ(f.tensor(name).type, static_cast<uint32_t>(ggml)) << name;
    for (const char* name : {"position_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_qkv.bias"})
      EXPECT_EQ(f.tensor(name).type, static_cast<uint32_t>(GgmlType::F32)) << name;
    EXPECT_EQ(std::count_if(report.notes.begin(), report.notes.end(),
                            [](const std::string& n) { return n.starts_with("position_embd.weight in F32"); }),
              1);
    LoadedModel back = load_model(path("q.gguf"));
    for (const auto& e : m->params().entries()) {
      const float* orig = m->params().data() + e.offset;
      const float* got = tensor_of(*back.model, e.name);
      const auto n = static_cast<size_t>(e.shape.numel());
      std::vector<float> want(orig, orig + n);
      if (e.shape.rank() == 2 && e.name != "pos_embeddings.weight") {
        if (type == GgufExportType::Q8_0) {
          std::vector<BlockQ8_0> q(n / kQuantBlockValues);
          quantize_row_q8_0(std::span<const float>(orig, n), q);
          dequantize_row_q8_0(q, want);
        } else {
          std::vector<BlockQ4_0> q(n / kQuantBlockValues);
          quantize_row_q4_0(std::span<const float>(orig, n), q);
          dequantize_row_q4_0(q, want);
        }
        EXPECT_NE(std::vector<float>(orig, orig + n), want) << e.name;  // quantizing changed something
      }
      // The fused attn_qkv is split back into wq, wk, wv: each row block is whole blocks itself.
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << e.name << "[" << i << "]";
    }
  }
  // --output-type: the output matrix in its own type; in a tied model that is the embedding.
  export_gguf(path("o.gguf"), *m, tok, "", GgufExportType::Q4_0, GgufExportType::Q8_0);
  const GgufFile untied = GgufFile::open(path("o.gguf"));
  EXPECT_EQ(untied.tensor("output.weight").type, static_cast<uint32_t>(GgmlType::Q8_0));
  EXPECT_EQ(untied.tensor("token_embd.weight").type, static_cast<uint32_t>(GgmlType::Q4_0));
  EXPECT_EQ(untied.tensor("blk.0.ffn_up.weight").type, static_cast<uint32_t>(GgmlType::Q4_0));
  auto tied = random_model(config(R"({"d_model": 64, "d_ff": 96, "n_heads": 2, "activation": "gelu_tanh"})"), 9);
  export_gguf(path("t.gguf"), *tied, tok, "", GgufExportType::Q4_0, GgufExportType::Q8_0);
  const GgufFile tf = GgufFile::open(path("t.gguf"));
  EXPECT_FALSE(tf.find_tensor("output.weight"));
  EXPECT_EQ(tf.tensor("token_embd.weight").type, static_cast<uint32_t>(GgmlType::Q8_0));
  EXPECT_EQ(tf.tensor("blk.1.attn_output.weight").type, static_cast<uint32_t>(GgmlType::Q4_0));
  // A matrix whose rows are not whole blocks stays F32, and the note says which.
  auto odd = random_model(config(R"({"d_model": 16, "d_ff": 24})"), 9);
  const GgufExportReport r = export_gguf(path("odd.gguf"), *odd, tok, "", GgufExportType::Q8_0);
  EXPECT_EQ(GgufFile::open(path("odd.gguf")).tensor("blk.0.ffn_up.weight").type, static_cast<uint32_t>(GgmlType::F32));
  EXPECT_EQ(std::count_if(r.notes.begin(), r.notes.end(),
                          [](const std::string& n) { return n.find("blk.0.ffn_up.weight") != std::string::npos; }),
            1);
  EXPECT_EQ(parse_gguf_export_type("q4_0"), GgufExportType::Q4_0);
}

// F16, BF16, Q8_0 and Q4_0 matrices stay in their type and the forward multiplies them as stored
// (kernels/qlinear.h), with the fused gpt2 qkv split and llama's q/k rows permuted as whole rows.
// F16 multiplies the float activations: it equals a dense model of the same (dequantized) weights
// to float precision. BF16, Q8_0 and Q4_0 also round the activations they multiply (to bf16 or Q8
// blocks, as llama.cpp does), so their logits move by that rounding; a wrong row order would move
// them by the logits' own size. One token at a time (the few-row kernels) against eight sequences at
// a time (the tiled ones): the same rules, but a rounding step can fall either way of a float
// sum's last bit, so the two agree to the rounding's scale, not to float precision.
TEST_F(GgufModelTest, StoredTypesRunAsStoredLikeTheirDequantizedWeights) {
  const auto tok = CharTokenizer::bytes();
  const char* configs[] = {
      R"({"d_model": 64, "d_ff": 96, "n_heads": 2, "activation": "gelu_tanh", "positions": "learned"})",
      // Rows of 8 and 9 blocks: Q4_0_R8's whole groups and a block past one (the kv rows, 128, and
      // the vocabulary's, 256: whole groups of sixteen rows for Q4_0_X16 and Q8_0_X16).
      R"({"d_model": 256, "d_ff": 288, "n_heads": 4, "n_kv_heads": 2, "norm": "rmsnorm", "positions": "rope",
          "activation": "swiglu", "bias": false, "tied_embeddings": false, "rope_pairing": "halves"})",
      // Rows wider than 512 values (Q8_0_R8: 576 = two groups and a block, 800 three and a block).
      // (The tests' vocabulary is 256 rows: whole groups of sixteen.)
      R"({"d_model": 576, "d_ff": 800, "n_heads": 4, "norm": "rmsnorm", "positions": "rope", "activation": "swiglu",
          "bias": false})",
  };
  for (const char* cfg : configs) {
    auto m = random_model(config(cfg), 13);
    // Matrices a third of random_model's (N(0, 0.1^2) rather than 0.3^2), nearer a trained model's
    // scale: at 0.3 the rounded activations move these logits chaotically (Q8_0 by 28% of the
    // largest on the wider config), at 0.1 by up to 5%, far below what a wrong row order does.
    for (const auto& e : m->params().entries())
      if (e.shape.rank() == 2)
        for (int64_t i = 0; i < e.shape.numel(); ++i) m->params().data()[e.offset + i] /= 3;
    for (const auto& [type, wt] :
         {std::pair{GgufExportType::F16, WeightType::F16}, std::pair{GgufExportType::BF16, WeightType::BF16},
          std::pair{GgufExportType::Q8_0, WeightType::Q8_0_X16},  // kept interleaved (kernels/qlinear.h)
          std::pair{GgufExportType::Q4_0, WeightType::Q4_0_X16}}) {
      SCOPED_TRACE(std::string(cfg) + " " + weight_type_name(wt));
      export_gguf(path("s.gguf"), *m, tok, "", type);
      LoadedModel back = load_model(path("s.gguf"));
      Model& q = *back.model;
      for (const auto* w :
           {&q.weights().layers[0].wq, &q.weights().layers[0].wk, &q.weights().layers[1].wv, &q.weights().layers[1].wo,
            &q.weights().layers[0].w1, &q.weights().layers[1].w2, &q.weights().output})
        EXPECT_EQ(w->type, wt) << w->cols;
      // The same weights, dense: the arena holds the dequantized values.
      Model dense(q.config());
      std::copy(q.params().data(), q.params().data() + q.params().size(), dense.params().data());
      EXPECT_EQ(dense.weights().layers[0].wq.type, WeightType::F32);
      const auto ids = some_ids(21, 256);
      const auto got = logits_of(q, ids), want = logits_of(dense, ids);
      double scale = 0, diff = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(want[i])));
        diff = std::max(diff, std::fabs(static_cast<double>(got[i]) - want[i]));
      }
      // Measured, of the largest logit: BF16 3.8e-3 and 8.9e-3, Q8_0 1.5e-2 and 3.7e-2, Q4_0 1.2e-2
      // and 5.0e-2 (first and second config); a wrong q/k row order moves them by far more.
      if (wt == WeightType::F16) {
        EXPECT_LE(diff, 1e-5 * scale);
      } else {
        EXPECT_LE(diff, (wt == WeightType::BF16 ? 3e-2 : 0.15) * scale);
        EXPECT_GT(diff, 1e-6 * scale) << "the activations were not rounded";
      }
      // Token by token through the cache, one sequence (n = 1: the few-row kernels) against the
      // same tokens as eight identical sequences (8 rows: the tiled kernels). The attention of a
      // decode step is the same computation either way, so only the products differ. (Against the
      // whole prompt instead, the prompt's attention sums in another order than decode's, about
      // 1e-7 apart, which can carry an activation across a Q8_0 rounding boundary: Q4_0 moved by
      // 1.2e-2 of the largest logit on the first config, as nudging the attention by 2e-7 did.)
      // On the wide config only for F16, which rounds no activations: its block and bf16 products
      // round about three times as many, and in 7 of 9 seeds one fell across a rounding boundary
      // between the two orders (at seed 13 Q8_0 agreed to 1.4e-6 for eight tokens, then moved by
      // 1.4e-2 at the ninth); the kernel tests hold its few-row and tiled products to the reference.
      // Every config's one-sequence decode (the few-row kernels) is also
      // held to the dense model's logits, as the prompt was above.
      const bool wide = cfg == configs[2];
      constexpr int64_t kCopies = 8;
      const int64_t V = q.config().vocab_size;
      KVCache one = q.make_cache(1, static_cast<int64_t>(ids.size())),
              many = q.make_cache(kCopies, static_cast<int64_t>(ids.size()));
      std::vector<float> row(static_cast<size_t>(V)), rows(static_cast<size_t>(kCopies * V));
      double worst = 0, worst_dense = 0;
      for (size_t t = 0; t < ids.size(); ++t) {
        q.forward_cached(row.data(), &ids[t], 1, 1, nullptr, one, false);
        for (int64_t v = 0; v < V; ++v)
          worst_dense = std::max(worst_dense, std::fabs(static_cast<double>(row[static_cast<size_t>(v)]) -
                                                        want[t * static_cast<size_t>(V) + static_cast<size_t>(v)]));
        if (wide && wt != WeightType::F16) continue;
        const std::vector<TokenId> same(kCopies, ids[t]);
        q.forward_cached(rows.data(), same.data(), kCopies, 1, nullptr, many, false);
        for (int64_t v = 0; v < V; ++v)
          worst = std::max(worst, std::fabs(static_cast<double>(row[static_cast<size_t>(v)]) -
                                            rows[static_cast<size_t>((kCopies - 1) * V + v)]));
      }
      // (measured, of the largest logit: F16 4.6e-7 / 2.0e-6 / 5.6e-6 (first / second / wide config),
      // BF16 1.1e-7 / 2.8e-3, Q8_0 7.6e-8 / 1.0e-7, Q4_0 7.7e-8 / 1.5e-7; a wrong kernel moves them
      // by far more. Decode against the dense model: F16 3.5e-7 / 1.8e-6 / 5.6e-6, BF16 3.7e-3 /
      // 1.0e-2 / 1.3e-2, Q8_0 1.2e-2 / 3.7e-2 / 4.8e-2, Q4_0 1.2e-2 / 4.5e-2 / 8.1e-2; Q8_0_R8's
      // accumulator started at -120 instead of -128 x the lane sums: 2.06.)
      EXPECT_LE(worst_dense, (wt == WeightType::F16 ? 1e-4 : wt == WeightType::BF16 ? 3e-2 : 0.15) * scale);
    }
  }
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAllocatorOwnsResidentMemory = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAllocatorOwnsResidentMemory = true;
#else
constexpr bool kAllocatorOwnsResidentMemory = false;
#endif
#else
constexpr bool kAllocatorOwnsResidentMemory = false;
#endif

// The resident memory of this process, from /proc/self/statm (pages).
int64_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

// An inference-only load (generate, logits, eval, serve) gives back the float32 values of its stored
// matrices: the same logits, bit for bit, cached and uncached (a tied embedding looked up from its
// stored rows); the process's resident memory falls by about their size; the arena is then an
// error to reach, for what would read it (training, export, conversion).
TEST_F(GgufModelTest, GivingBackTheFloatCopiesKeepsTheLogitsAndFreesTheirMemory) {
  const auto tok = CharTokenizer::bytes();
  for (
      const char* cfg :
      {R"({"d_model": 256, "d_ff": 1024, "n_heads": 4, "n_layers": 3, "norm": "rmsnorm", "positions": "rope",
            "activation": "swiglu", "bias": false})",
       R"({"d_model": 256, "d_ff": 768, "n_heads": 4, "n_layers": 3, "tied_embeddings": false, "positions": "learned"})"}) {
    auto m = random_model(config(cfg), 5);
    for (const auto type : {GgufExportType::Q4_0, GgufExportType::Q8_0, GgufExportType::BF16, GgufExportType::F32}) {
      SCOPED_TRACE(std::string(cfg) + " " + std::to_string(static_cast<int>(type)));
      export_gguf(path("r.gguf"), *m, tok, "", type);
      LoadedModel lm = load_model(path("r.gguf"));
      Model& q = *lm.model;
      const auto ids = some_ids(19, 256);
      auto decode = [&] {  // token by token through the cache: the last token's logits
        std::vector<float> one(static_cast<size_t>(q.config().vocab_size));
        KVCache cache = q.make_cache(1, static_cast<int64_t>(ids.size()));
        for (const TokenId t : ids) q.forward_cached(one.data(), &t, 1, 1, nullptr, cache, false);
        return one;
      };
      const auto before = logits_of(q, ids), decoded = decode();
      // The float bytes of the matrices kept stored (a tied embedding among them).
      double stored_floats = 0;
      for (const auto& e : q.params().entries()) {
        const bool matrix = e.shape.rank() == 2 && e.name != "pos_embeddings.weight";
        const bool tied_or_matrix = e.name != "tok_embeddings.weight" || q.config().tied_embeddings;
        if (matrix && tied_or_matrix && type != GgufExportType::F32) stored_floats += 4.0 * e.shape.numel();
      }
      const int64_t resident = resident_bytes();
      q.release_float_copies();
      const int64_t freed = resident - resident_bytes();
      EXPECT_TRUE(q.float_copies_released());
      EXPECT_EQ(logits_of(q, ids), before);
      EXPECT_EQ(decode(), decoded);
      EXPECT_ERROR(q.params(), ErrorKind::Internal, "", "given back");
      // (3 layers of 256-wide matrices: 3.1 to 4.7 MB of floats, and 256 KB more when tied)
      if (type == GgufExportType::F32) {
        EXPECT_LT(std::abs(freed), 1 << 20) << "an F32 file keeps its floats: the forward reads them";
      } else {
        EXPECT_GT(static_cast<double>(freed), 0.8 * stored_floats) << freed << " of " << stored_floats;
      }
    }
  }
}

// An inference-only load (model/checkpoint.h) writes no float32 copy of the matrices it keeps
// stored: the same logits as a full load, bit for bit; a memory limit that the float32 weights pass
// but the stored ones do not stop it (where it stops the full load, naming the sizes); its
// resident memory stays below the float32 weights; an F32 file loads as always.
TEST_F(GgufModelTest, AnInferenceOnlyLoadHoldsTheStoredBytesNotTheirFloats) {
  const auto tok = CharTokenizer::bytes();
  for (
      const char* cfg :
      {R"({"d_model": 256, "d_ff": 1024, "n_heads": 4, "n_layers": 4, "norm": "rmsnorm", "positions": "rope",
            "activation": "swiglu", "bias": false, "n_kv_heads": 2})",
       R"({"d_model": 256, "d_ff": 768, "n_heads": 4, "n_layers": 4, "tied_embeddings": false, "positions": "learned"})"}) {
    auto m = random_model(config(cfg), 6);
    const double floats = float32_param_bytes(m->config());
    for (const auto type : {GgufExportType::Q4_0, GgufExportType::Q8_0, GgufExportType::BF16, GgufExportType::F32}) {
      SCOPED_TRACE(std::string(cfg) + " " + std::to_string(static_cast<int>(type)));
      export_gguf(path("i.gguf"), *m, tok, "", type);
      const auto ids = some_ids(17, 256);
      std::vector<float> full;
      {
        LoadedModel lm = load_model(path("i.gguf"));
        full = logits_of(*lm.model, ids);
      }
      const int64_t before = resident_bytes();
      LoadedModel lean = load_model(path("i.gguf"), {.inference_only = true});
      const int64_t held = resident_bytes() - before;
      EXPECT_TRUE(lean.model->float_copies_released());
      EXPECT_EQ(logits_of(*lean.model, ids), full);
      EXPECT_ERROR(lean.model->params(), ErrorKind::Internal, "", "given back");
      // (Under AddressSanitizer the process's resident memory is its allocator's: freed blocks wait
      // in its quarantine and are handed out again, so it says nothing about the load.)
      if (type == GgufExportType::F32) {
        if (!kAllocatorOwnsResidentMemory) {
          EXPECT_GT(static_cast<double>(held), 0.8 * floats);  // the forward reads the floats
        }
        continue;
      }
      // (16 and about 11 MB of float32 weights, most of them in the matrices; Q8_0 holds about a
      // quarter of their bytes, Q4_0 an eighth, BF16 a half)
      if (!kAllocatorOwnsResidentMemory) {
        EXPECT_LT(static_cast<double>(held), (type == GgufExportType::BF16 ? 0.65 : 0.45) * floats) << held;
      }
      // A limit the float32 weights pass: the full load refused, naming the size; the lean one fits.
      const auto limit = static_cast<uint64_t>(0.7 * floats);
      ASSERT_EQ(setenv("TFORMER_MEMORY_LIMIT", std::to_string(limit).c_str(), 1), 0);
      EXPECT_ERROR(load_model(path("i.gguf")), ErrorKind::BadFile, path("i.gguf"), "float32 weights take");
      if (type != GgufExportType::BF16) {
        LoadedModel fits = load_model(path("i.gguf"), {.inference_only = true});
        EXPECT_EQ(logits_of(*fits.model, ids), full);
      }
      unsetenv("TFORMER_MEMORY_LIMIT");
    }
  }
}

TEST_F(GgufModelTest, StoredWeightsAreCheckedAndCountedAsTheyAreRead) {
  auto m = random_model(config(R"({"d_model": 64, "d_ff": 96, "n_heads": 2})"), 3);
  const ModelConfig& c = m->config();
  const double dense = m->weight_bytes_per_token();
  // Stored as Q4_0, wq's [64, 64] rows take 2 blocks of 18 bytes instead of 64 floats.
  std::vector<uint8_t> q4(static_cast<size_t>(64 * 2 * 18), 0);
  m->set_stored_weight("layers.0.attn.wq.weight", WeightType::Q4_0, q4);
  EXPECT_EQ(m->weights().layers[0].wq.type, WeightType::Q4_0_X16);  // kept interleaved (kernels/qlinear.h)
  EXPECT_DOUBLE_EQ(m->weight_bytes_per_token(), dense - 64.0 * 64 * 4 + 64.0 * 36);
  // A tied model's embedding is its output matrix.
  std::vector<uint8_t> bf(static_cast<size_t>(c.vocab_size * 64 * 2), 0);
  m->set_stored_weight("tok_embeddings.weight", WeightType::BF16, bf);
  EXPECT_EQ(m->weights().output.type, WeightType::BF16);
  EXPECT_ERROR(m->set_stored_weight("layers.0.attn.wk.weight", WeightType::Q8_0, q4), ErrorKind::BadInput,
               "layers.0.attn.wk.weight", "bytes given");
  EXPECT_ERROR(m->set_stored_weight("layers.0.attn_norm.weight", WeightType::BF16, std::vector<uint8_t>(128)),
               ErrorKind::BadInput, "layers.0.attn_norm.weight", "not a matrix");
  auto odd = random_model(config(R"({"d_model": 16, "d_ff": 24})"), 3);
  EXPECT_ERROR(odd->set_stored_weight("layers.0.ffn.w1.weight", WeightType::Q8_0, std::vector<uint8_t>(24 * 17)),
               ErrorKind::BadInput, "layers.0.ffn.w1.weight", "whole blocks");
}

// reserve_stored_weights: the stored matrices that fit go into the one reserved buffer, in order,
// 64-byte aligned, byte for byte; one that does not fit gets its own buffer and computes the same;
// a loaded GGUF file's stored matrices all share one buffer; reserving after a weight is refused.
TEST_F(GgufModelTest, StoredWeightsShareTheReservedBufferAndOverflowIntoTheirOwn) {
  const char* cfg = R"({"d_model": 64, "d_ff": 96, "n_heads": 2})";
  auto bytes_of = [](size_t n, int seed) {  // bf16 values of 0.1 sin(...), as bytes
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n / 2; ++i) {
      const uint16_t h = f32_to_bf16(0.1f * std::sin(static_cast<float>(seed + 3 * static_cast<int>(i))));
      std::memcpy(v.data() + 2 * i, &h, 2);
    }
    return v;
  };
  const auto wq = bytes_of(64 * 64 * 2, 1), wk = bytes_of(64 * 64 * 2, 2), w1 = bytes_of(96 * 64 * 2, 3);
  auto a = random_model(config(cfg), 3), b = random_model(config(cfg), 3);
  a->reserve_stored_weights(2 * (64 * 64 * 2 + 64));  // room for wq and wk, not w1
  for (auto* m : {a.get(), b.get()}) {                // b: nothing reserved, every weight its own buffer
    m->set_stored_weight("layers.0.attn.wq.weight", WeightType::BF16, wq);
    m->set_stored_weight("layers.0.attn.wk.weight", WeightType::BF16, wk);
    m->set_stored_weight("layers.0.ffn.w1.weight", WeightType::BF16, w1);
  }
  const auto& la = a->weights().layers[0];
  const auto* q = static_cast<const uint8_t*>(la.wq.data);
  const auto* k = static_cast<const uint8_t*>(la.wk.data);
  const auto* f = static_cast<const uint8_t*>(la.w1.data);
  EXPECT_EQ(k, q + 64 * 64 * 2);  // next in the buffer (8192 bytes: already aligned)
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 64, 0u);
  EXPECT_TRUE(f < q || f >= k + 64 * 64 * 2) << "w1 did not fit and has its own buffer";
  EXPECT_EQ(std::memcmp(q, wq.data(), wq.size()), 0);
  EXPECT_EQ(std::memcmp(k, wk.data(), wk.size()), 0);
  EXPECT_EQ(std::memcmp(f, w1.data(), w1.size()), 0);
  const auto ids = some_ids(9, 256);
  EXPECT_EQ(logits_of(*a, ids), logits_of(*b, ids));
  EXPECT_ERROR(a->reserve_stored_weights(1024), ErrorKind::Internal, "", "after stored weights");

  // A loaded file: every stored matrix in the one buffer, back to back (each next one at the
  // previous one's end rounded up to 64 bytes), as separate allocations would not be.
  auto m = random_model(config(R"({"d_model": 64, "d_ff": 96, "n_heads": 2, "n_layers": 2})"), 5);
  export_gguf(path("q8.gguf"), *m, CharTokenizer::bytes(), "", GgufExportType::Q8_0);
  LoadedModel back = load_model(path("q8.gguf"));
  std::vector<std::pair<const uint8_t*, int64_t>> spans;  // start, bytes
  auto add = [&](const Weight<float>& w) {
    spans.emplace_back(static_cast<const uint8_t*>(w.data), w.rows * weight_row_bytes(w.type, w.cols));
  };
  add(back.model->weights().output);
  for (const auto& l : back.model->weights().layers)
    for (const auto* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3})
      if (w->present()) add(*w);
  std::sort(spans.begin(), spans.end());
  spans.erase(std::unique(spans.begin(), spans.end()), spans.end());  // (a tied matrix twice)
  ASSERT_GE(spans.size(), 13u);
  for (size_t i = 1; i < spans.size(); ++i)
    EXPECT_EQ(spans[i].first, spans[i - 1].first + (spans[i - 1].second + 63) / 64 * 64) << i;
}

// advise_huge_pages is advice: any range (null, empty, unaligned, smaller or larger than a 2 MB
// page) is accepted, on fresh memory and on memory already written, whose bytes stay as they were
// (an advice that drops pages, as MADV_DONTNEED would, zeroes them).
TEST(HugePages, AdviceNeverFailsAndChangesNoBytes) {
  advise_huge_pages(nullptr, 0);
  advise_huge_pages(nullptr, size_t{1} << 30);
  std::vector<uint8_t> small(100, 7);
  advise_huge_pages(small.data() + 3, 50);
  constexpr size_t kBig = size_t{5} << 20;
  std::vector<uint8_t> big;
  big.reserve(kBig);
  advise_huge_pages(big.data() + 1, kBig - 1);  // fresh
  big.assign(kBig, 9);
  for (size_t i = 0; i < kBig; i += 4096) big[i] = static_cast<uint8_t>(i / 4096);
  advise_huge_pages(big.data(), kBig);  // written
  size_t same = 0;
  for (size_t i = 0; i < kBig; ++i) same += big[i] == (i % 4096 == 0 ? static_cast<uint8_t>(i / 4096) : 9);
  EXPECT_EQ(same, kBig);
  EXPECT_EQ(std::count(small.begin(), small.end(), 7), 100);
}

// ---- what is refused ----------------------------------------------------------------------------

TEST_F(GgufModelTest, ConfigsNoLlamaCppArchitectureComputesAreRefusedByOption) {
  EXPECT_EQ(gguf_architecture_for(config(kLlama)), "llama");
  EXPECT_EQ(gguf_architecture_for(config("{}")), "gpt2");
  EXPECT_ERROR(gguf_architecture_for(config(R"({"norm_placement": "post"})")), ErrorKind::Unsupported, "norm_placement",
               "post");
  // LayerNorm + SwiGLU: stablelm, which rotates and has no biases but on q, k and v.
  EXPECT_EQ(gguf_architecture_for(config(R"({"activation": "swiglu", "positions": "rope", "bias": false})")),
            "stablelm");
  EXPECT_ERROR(gguf_architecture_for(config(R"({"activation": "swiglu", "bias": false})")), ErrorKind::Unsupported,
               "positions", "learned");
  EXPECT_ERROR(gguf_architecture_for(config(R"({"activation": "swiglu", "positions": "rope"})")),
               ErrorKind::Unsupported, "bias");
  // LayerNorm + GELU: gpt2 with a position table, mpt without positions, starcoder2 with RoPE.
  EXPECT_EQ(gguf_architecture_for(config(R"({"positions": "rope"})")), "starcoder2");
  EXPECT_EQ(gguf_architecture_for(config(R"({"positions": "none"})")), "mpt");
  EXPECT_ERROR(gguf_architecture_for(config(R"({"norm": "rmsnorm", "activation": "gelu", "positions": "rope"})")),
               ErrorKind::Unsupported, "activation");
  EXPECT_ERROR(gguf_architecture_for(config(R"({"norm": "rmsnorm", "activation": "swiglu"})")), ErrorKind::Unsupported,
               "positions");
  // The refusal comes before anything is written.
  auto m = random_model(config(R"({"norm_placement": "post"})"), 1);
  EXPECT_ERROR(export_gguf(path("p.gguf"), *m, CharTokenizer::bytes(), "", GgufExportType::F32), ErrorKind::Unsupported,
               "norm_placement");
  EXPECT_FALSE(std::filesystem::exists(path("p.gguf")));
}

TEST_F(GgufModelTest, SennrichBpeIsRefusedByName) {
  const SennrichTokenizer tok = SennrichTokenizer::from_codes("#version: 0.2\nt h\nth e</w>\n", "codes");
  auto m = random_model(config(("{\"vocab_size\": " + std::to_string(tok.vocab_size()) + "}").c_str()), 2);
  EXPECT_ERROR(export_gguf(path("s.gguf"), *m, tok, "", GgufExportType::F32), ErrorKind::Unsupported, "tokenizer",
               "bpe");
}

// ---- tokenizers and the chat template -----------------------------------------------------------

TEST_F(GgufModelTest, TokenizersComeBackEncodingIdentically) {
  const std::string corpus =
      "the cat sat on the mat. the dog sat on the log! don't the cats' 123 mats\n\tnaïve café, 日本 🙂 the end";
  ByteBpeTrainOptions opt;
  opt.vocab_size = 256 + 40 + 1;
  const ByteBpeTokenizer trained = train_byte_bpe(corpus, opt);
  const CharTokenizer bytes = CharTokenizer::bytes();
  const CharTokenizer alphabet = CharTokenizer::from_corpus("abc de\nf");
  const std::vector<std::pair<const Tokenizer*, std::string>> cases{
      {&trained, corpus + " <|endoftext|> the mat"}, {&bytes, corpus}, {&alphabet, "fade cab\nbed"}};
  for (const auto& [tok, text] : cases) {
    SCOPED_TRACE(tok->kind());
    auto m = random_model(config(("{\"vocab_size\": " + std::to_string(tok->vocab_size()) + "}").c_str()), 3);
    export_gguf(path("t.gguf"), *m, *tok, "", GgufExportType::F32);
    LoadedModel back = load_model(path("t.gguf"));
    ASSERT_TRUE(back.tokenizer);
    EXPECT_EQ(back.tokenizer->kind(), tok->kind());
    EXPECT_EQ(back.tokenizer->to_json(), tok->to_json());
    EXPECT_EQ(back.tokenizer->encode(text), tok->encode(text));
    EXPECT_EQ(back.tokenizer->encode(text, true), tok->encode(text, true));
    EXPECT_EQ(load_model_tokenizer(path("t.gguf"))->to_json(), tok->to_json());
  }
  const GgufFile f = GgufFile::open(path("t.gguf"));
  EXPECT_EQ(f.find_value("tokenizer.ggml.model")->s, "gpt2");
  EXPECT_EQ(f.find_value("tokenizer.ggml.pre")->s, "gpt-2");
}

TEST_F(GgufModelTest, TheEndOfTextIdIsTheTokenizersOrTheRarestByte) {
  // llama.cpp stops at its EOS id (11 when the file names none): the export always names one.
  ByteBpeTrainOptions opt;
  opt.vocab_size = 256 + 5 + 1;
  const ByteBpeTokenizer trained = train_byte_bpe("aaaa bbbb aaaa bbbb abab", opt);
  EXPECT_EQ(end_of_text_for(trained), *trained.eot_id());
  EXPECT_EQ(end_of_text_for(CharTokenizer::bytes()), 0);  // NUL
  EXPECT_EQ(end_of_text_for(CharTokenizer::from_corpus("ab\n\x01"
                                                       "c")),
            0);                                                           // ids: \x01 \n a b c: the control byte
  EXPECT_EQ(end_of_text_for(CharTokenizer::from_corpus("ab c\n&z")), 2);  // '&' (ids: \n space & a b c z)
  EXPECT_EQ(end_of_text_for(CharTokenizer::from_corpus("ba\n")), 2);      // nothing rare: the last id
  auto m = random_model(config(kLlama), 12);
  export_gguf(path("e.gguf"), *m, CharTokenizer::bytes(), "", GgufExportType::F32);
  const GgufFile f = GgufFile::open(path("e.gguf"));
  EXPECT_EQ(f.find_value("tokenizer.ggml.eos_token_id")->type, GgufType::U32);
  EXPECT_EQ(f.find_value("tokenizer.ggml.eos_token_id")->i, 0);
}

TEST_F(GgufModelTest, SentencePieceVocabulariesBecomeLlamaCppsLlamaTokenizer) {
  const auto sp = SentencePieceTokenizer::load("fixtures/sentencepiece/llamaish.model");
  auto m = random_model(config(("{\"vocab_size\": " + std::to_string(sp.vocab_size()) + "}").c_str()), 13);
  const GgufExportReport r = export_gguf(path("s.gguf"), *m, sp, "", GgufExportType::F32);
  EXPECT_TRUE(std::any_of(r.notes.begin(), r.notes.end(),
                          [](const std::string& n) { return n.find("2 user-defined pieces") != std::string::npos; }));
  const GgufFile f = GgufFile::open(path("s.gguf"));
  EXPECT_EQ(f.find_value("tokenizer.ggml.model")->s, "llama");
  EXPECT_EQ(f.find_value("tokenizer.ggml.scores")->floats.size(), static_cast<size_t>(sp.vocab_size()));
  EXPECT_EQ(f.find_value("tokenizer.ggml.unknown_token_id")->i, sp.unk_id());
  const auto back = load_gguf_tokenizer(path("s.gguf"));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind(), "sentencepiece");
  EXPECT_TRUE(dynamic_cast<const SentencePieceTokenizer&>(*back).llama_cpp_rules());
  // Text without user-defined pieces: the same ids by either rule.
  const auto fixture = nlohmann::json::parse(read_file("fixtures/sentencepiece/llamaish.json"));
  size_t compared = 0;
  for (size_t i = 0; i < fixture["texts"].size(); ++i) {
    const auto t = fixture["texts"][i].get<std::string>();
    if (t.find("<|") != std::string::npos) continue;
    EXPECT_EQ(back->encode(t), fixture["ids"][i].get<std::vector<TokenId>>()) << t;
    ++compared;
  }
  EXPECT_GT(compared, 150u);
  // With one: llama.cpp's rule puts the space prefix after the piece (sentencepiece does not).
  const std::vector<TokenId> by_sentencepiece = sp.encode("<|user|>hi"), by_llama_cpp = back->encode("<|user|>hi");
  EXPECT_NE(by_sentencepiece, by_llama_cpp);
  const auto user =
      std::find_if(sp.pieces().begin(), sp.pieces().end(), [](const auto& p) { return p.text == "<|user|>"; });
  ASSERT_NE(user, sp.pieces().end());
  EXPECT_EQ(by_llama_cpp[0], static_cast<TokenId>(user - sp.pieces().begin()));  // the piece first, then "▁hi"
  // A model that normalizes (nmt_nfkc) or drops whitespace has no faithful llama.cpp form.
  const auto nfkc = SentencePieceTokenizer::load("fixtures/sentencepiece/multi_bf.model");
  auto m2 = random_model(config(("{\"vocab_size\": " + std::to_string(nfkc.vocab_size()) + "}").c_str()), 14);
  EXPECT_ERROR(export_gguf(path("n.gguf"), *m2, nfkc, "", GgufExportType::F32), ErrorKind::Unsupported, "tokenizer",
               "nmt_nfkc");
}

TEST_F(GgufModelTest, TheChatTemplateTravelsBothWays) {
  const std::string tmpl = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}";
  auto m = random_model(config(kLlama), 4);
  const auto tok = CharTokenizer::bytes();
  save_model(path("m.safetensors"), *m, &tok, tmpl);
  LoadedModel st = load_model(path("m.safetensors"));
  EXPECT_EQ(st.chat_template, tmpl);
  export_gguf(path("m.gguf"), *st.model, *st.tokenizer, st.chat_template, GgufExportType::F32);
  EXPECT_EQ(GgufFile::open(path("m.gguf")).find_value("tokenizer.chat_template")->s, tmpl);
  LoadedModel gg = load_model(path("m.gguf"));
  EXPECT_EQ(gg.chat_template, tmpl);
  save_model(path("n.safetensors"), *m, &tok);
  EXPECT_EQ(load_model(path("n.safetensors")).chat_template, "");
}

// ---- broken and foreign files -------------------------------------------------------------------

// The metadata and tensors of a GGUF file, to be changed and written again.
struct Parts {
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensorToWrite> tensors;
  std::vector<std::vector<uint8_t>> data;
};

Parts parts_of(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  Parts p;
  p.metadata = f.metadata();
  p.data.reserve(f.tensors().size());
  for (const auto& t : f.tensors()) {
    p.data.emplace_back(t.nbytes);
    f.read_bytes(t, p.data.back().data(), t.nbytes);
    p.tensors.push_back({t.name, t.ne, t.type, p.data.back().data(), t.nbytes});
  }
  return p;
}

void set_value(Parts& p, const std::string& key, GgufValue v) {
  for (auto& [k, old] : p.metadata)
    if (k == key) {
      old = std::move(v);
      return;
    }
  p.metadata.emplace_back(key, std::move(v));
}

void drop_value(Parts& p, const std::string& key) {
  std::erase_if(p.metadata, [&](const auto& kv) { return kv.first == key; });
}

TEST_F(GgufModelTest, TheDefaultPreTokenizerComesAndGoesByName) {
  // A byte-level BPE with llama.cpp's "default" chain is written with pre "default" and read back
  // with it; so is a file that names no pre-tokenizer (llama.cpp's rule).
  const std::string corpus = "the cat's 12345 mats, the cat's hat! $9.99 the end; 12345 again";
  ByteBpeTrainOptions opt;
  opt.vocab_size = 256 + 30 + 1;
  ByteBpeTokenizer tok = train_byte_bpe(corpus, opt);
  const std::vector<TokenId> gpt2_ids = tok.encode(corpus);
  tok.set_pattern(ByteBpeTokenizer::Pattern::LlamaCppDefault);
  const std::vector<TokenId> default_ids = tok.encode(corpus);
  EXPECT_NE(default_ids, gpt2_ids);  // " 12345" is one piece for GPT-2, " " "123" "45" for the chain
  EXPECT_EQ(tok.decode(default_ids), corpus);
  EXPECT_EQ(tokenizer_from_json(tok.to_json())->encode(corpus), default_ids);
  auto m = random_model(config(("{\"vocab_size\": " + std::to_string(tok.vocab_size()) + "}").c_str()), 3);
  export_gguf(path("d.gguf"), *m, tok, "", GgufExportType::F32);
  EXPECT_EQ(GgufFile::open(path("d.gguf")).find_value("tokenizer.ggml.pre")->s, "default");
  EXPECT_EQ(load_model_tokenizer(path("d.gguf"))->encode(corpus), default_ids);
  Parts p = parts_of(path("d.gguf"));
  drop_value(p, "tokenizer.ggml.pre");
  write_gguf(path("nopre.gguf"), p.metadata, p.tensors);
  EXPECT_EQ(load_model_tokenizer(path("nopre.gguf"))->encode(corpus), default_ids);
}

// tiktoken's patterns go by the names llama.cpp runs them under: cl100k_base's as "llama-bpe" (its
// LLAMA3 type; "llama3" and "llama-v3" read the same), o200k_base's as "gpt-4o" ("llama4" reads
// the same). Unused ids among the special tokens become UNUSED placeholders "[PADid]" and come
// back as unused ids.
TEST_F(GgufModelTest, TiktokenPatternsAndUnusedIdsTravelByLlamaCppsNames) {
  using P = ByteBpeTokenizer::Pattern;
  const std::string corpus = "IT'S 1234567 the cat's hat, DON'T!\n/usr/bin x.\n/y CamelCase naïve 日本 🙂 ok";
  for (const auto& [pattern, pre, alias] :
       {std::tuple{P::Cl100k, "llama-bpe", "llama3"}, std::tuple{P::O200k, "gpt-4o", "llama4"}}) {
    SCOPED_TRACE(pre);
    const ByteBpeTokenizer trained = train_byte_bpe(corpus, {.vocab_size = 256 + 30 + 1, .pattern = pattern});
    const TokenId first = 256 + static_cast<TokenId>(trained.merges().size());
    // Special tokens with gaps: first, first + 3 and first + 4 (ids first + 1, first + 2 unused).
    ByteBpeTokenizer tok(trained.byte_of_id(), trained.merges(),
                         {{"<|endoftext|>", first}, {"<|fim_prefix|>", first + 3}, {"<|endofprompt|>", first + 4}});
    tok.set_pattern(pattern);
    ASSERT_EQ(non_token_ids(tok, tok.vocab_size()), (std::vector<TokenId>{first + 1, first + 2}));
    auto m = random_model(config(("{\"vocab_size\": " + std::to_string(tok.vocab_size()) + "}").c_str()), 3);
    const GgufExportReport report = export_gguf(path("t.gguf"), *m, tok, "", GgufExportType::F32);
    // o200k's export says where llama.cpp's gpt-4o pre-tokenizer differs (combining marks).
    EXPECT_EQ(std::count_if(report.notes.begin(), report.notes.end(),
                            [](const std::string& n) { return n.find("combining mark") != std::string::npos; }),
              pattern == P::O200k ? 1 : 0);
    const GgufFile f = GgufFile::open(path("t.gguf"));
    EXPECT_EQ(f.find_value("tokenizer.ggml.pre")->s, pre);
    EXPECT_EQ(f.find_value("tokenizer.ggml.tokens")->strings[first + 1], "[PAD" + std::to_string(first + 1) + "]");
    EXPECT_EQ(f.find_value("tokenizer.ggml.token_type")->ints[first + 2], 5);  // UNUSED
    EXPECT_EQ(f.find_value("tokenizer.ggml.token_type")->ints[first + 3], 3);  // CONTROL
    const auto back = load_model_tokenizer(path("t.gguf"));
    EXPECT_EQ(back->to_json(), tok.to_json());
    EXPECT_EQ(dynamic_cast<const ByteBpeTokenizer&>(*back).pattern(), pattern);
    EXPECT_EQ(non_token_ids(*back, back->vocab_size()), non_token_ids(tok, tok.vocab_size()));
    EXPECT_EQ(back->encode(corpus), tok.encode(corpus));
    EXPECT_EQ(back->encode(corpus + "<|endofprompt|>", true), tok.encode(corpus + "<|endofprompt|>", true));
    // llama.cpp's other names of the same pre-tokenizer type.
    Parts p = parts_of(path("t.gguf"));
    set_value(p, "tokenizer.ggml.pre", GgufValue::string(alias));
    write_gguf(path("alias.gguf"), p.metadata, p.tensors);
    EXPECT_EQ(dynamic_cast<const ByteBpeTokenizer&>(*load_model_tokenizer(path("alias.gguf"))).pattern(), pattern);
  }
}

TEST_F(GgufModelTest, TheRealTiktokenVocabulariesComeBackIdentical) {
  for (const char* name : {"cl100k_base", "o200k_base"}) {
    SCOPED_TRACE(name);
    if (!std::filesystem::exists(std::string(TFORMER_SOURCE_DIR) + "/build-data/tiktoken/" + name + ".json"))
      GTEST_SKIP() << name << " is not in build-data/tiktoken (scripts/fetch-tiktoken-vocab.sh)";
    const std::unique_ptr<Tokenizer> tok = tokenizer_by_name(name);
    auto m = random_model(config(("{\"vocab_size\": " + std::to_string(tok->vocab_size()) +
                                  ", \"d_model\": 8, "
                                  "\"n_heads\": 2, \"n_layers\": 1, \"d_ff\": 8}")
                                     .c_str()),
                          3);
    export_gguf(path("real.gguf"), *m, *tok, "", GgufExportType::F32);
    const auto back = load_model_tokenizer(path("real.gguf"));
    EXPECT_EQ(back->to_json(), tok->to_json());
    const std::string text = "Hello world! It'S 1234567 naïve नमस्ते 日本語 🙂 <|endoftext|>";
    EXPECT_EQ(back->encode(text, true), tok->encode(text, true));
  }
}

TEST_F(GgufModelTest, ALlamaVocabularyPutsItsBosFirstAndStopsAtItsEos) {
  // llama.cpp's rule for a "llama" vocabulary: BOS before every text unless add_bos_token is false;
  // BOS 1 and EOS 2 when the file names none. encode() stays llama.cpp's tokenize without specials.
  auto sp = SentencePieceTokenizer::load("fixtures/sentencepiece/llamaish.model");
  const auto specials = sp.special_tokens();
  const TokenId s_id = specials.at("<s>"), end_id = specials.at("</s>");
  EXPECT_FALSE(sp.bos_id());  // a .model file alone: no BOS (tformer's own models train without one)
  auto m = random_model(config(("{\"vocab_size\": " + std::to_string(sp.vocab_size()) + "}").c_str()), 15);
  export_gguf(path("b.gguf"), *m, sp, "", GgufExportType::F32);
  EXPECT_EQ(GgufFile::open(path("b.gguf")).find_value("tokenizer.ggml.add_bos_token")->i, 0);
  EXPECT_FALSE(load_gguf_tokenizer(path("b.gguf"))->bos_id());
  EXPECT_EQ(load_gguf_tokenizer(path("b.gguf"))->eot_id(), end_id);
  // Set, it travels: to the file, back, and through the JSON form.
  sp.set_bos(s_id);
  export_gguf(path("b.gguf"), *m, sp, "", GgufExportType::F32);
  EXPECT_EQ(GgufFile::open(path("b.gguf")).find_value("tokenizer.ggml.add_bos_token")->i, 1);
  const auto back = load_gguf_tokenizer(path("b.gguf"));
  EXPECT_EQ(back->bos_id(), s_id);
  EXPECT_EQ(tokenizer_from_json(back->to_json())->bos_id(), s_id);
  EXPECT_EQ(tokenizer_from_json(back->to_json())->eot_id(), end_id);
  const std::vector<TokenId> plain = back->encode("hello world"), fed = encode_for_model(*back, "hello world");
  ASSERT_EQ(fed.size(), plain.size() + 1);
  EXPECT_EQ(fed[0], s_id);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), fed.begin() + 1));
  EXPECT_EQ(encode_for_model(CharTokenizer::bytes(), "ab"), (std::vector<TokenId>{'a', 'b'}));
  // The file's keys: absent means llama.cpp's defaults, present ones are read and checked.
  Parts p = parts_of(path("b.gguf"));
  for (const char* k : {"tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
    drop_value(p, k);
  write_gguf(path("d.gguf"), p.metadata, p.tensors);
  EXPECT_EQ(load_gguf_tokenizer(path("d.gguf"))->bos_id(), 1);
  EXPECT_EQ(load_gguf_tokenizer(path("d.gguf"))->eot_id(), 2);
  set_value(p, "tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(sp.vocab_size())));
  write_gguf(path("d.gguf"), p.metadata, p.tensors);
  EXPECT_ERROR(load_gguf_tokenizer(path("d.gguf")), ErrorKind::BadFile, "tokenizer.ggml.bos_token_id", "outside");
  set_value(p, "tokenizer.ggml.bos_token_id", GgufValue::u32(0));  // id 0 is a token like any other
  set_value(p, "tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  write_gguf(path("d.gguf"), p.metadata, p.tensors);
  EXPECT_EQ(load_gguf_tokenizer(path("d.gguf"))->bos_id(), 0);
  set_value(p, "tokenizer.ggml.bos_token_id", GgufValue::u32(3));
  set_value(p, "tokenizer.ggml.add_bos_token", GgufValue::u32(1));
  write_gguf(path("d.gguf"), p.metadata, p.tensors);
  EXPECT_ERROR(load_gguf_tokenizer(path("d.gguf")), ErrorKind::BadFile, "tokenizer.ggml.add_bos_token", "not a bool");
  set_value(p, "tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  write_gguf(path("d.gguf"), p.metadata, p.tensors);
  EXPECT_EQ(load_gguf_tokenizer(path("d.gguf"))->bos_id(), 3);
}

TEST_F(GgufModelTest, NeoxArchitecturesGetHalvesRowsAndTheirOwnTensors) {
  // stablelm and starcoder2 rotate rows i and i + hd/2 (tformer's "halves"): an adjacent model's
  // query and key rows are permuted the other way, row 2i to i and 2i+1 to i + hd/2.
  const auto tok = CharTokenizer::bytes();
  auto m = random_model(config(R"({"positions": "rope", "activation": "swiglu", "bias": false, "n_kv_heads": 2,
                                   "rope_pairing": "adjacent"})"),
                        21);
  const GgufExportReport r = export_gguf(path("s.gguf"), *m, tok, "", GgufExportType::F32);
  EXPECT_EQ(r.architecture, "stablelm");
  const GgufFile f = GgufFile::open(path("s.gguf"));
  const int64_t d = 16, hd = 4;
  for (const auto& [name, heads, mine] : {std::tuple{"blk.0.attn_q.weight", 4, "layers.0.attn.wq.weight"},
                                          std::tuple{"blk.1.attn_k.weight", 2, "layers.1.attn.wk.weight"}}) {
    SCOPED_TRACE(name);
    std::vector<float> got(static_cast<size_t>(heads * hd * d));
    f.read_bytes(f.tensor(name), got.data(), got.size() * 4);
    const float* orig = tensor_of(*m, mine);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < hd / 2; ++i)
        for (int64_t c = 0; c < d; ++c) {
          EXPECT_EQ(got[static_cast<size_t>((h * hd + i) * d + c)], orig[(h * hd + 2 * i) * d + c]);
          EXPECT_EQ(got[static_cast<size_t>((h * hd + i + hd / 2) * d + c)], orig[(h * hd + 2 * i + 1) * d + c]);
        }
  }
  // LayerNorm biases, SwiGLU's three matrices, no attention-output or feed-forward bias, and the
  // tied embedding written again as output.weight (stablelm requires it), marked as tied.
  for (const char* name : {"blk.0.attn_norm.bias", "blk.1.ffn_norm.bias", "output_norm.bias", "blk.0.ffn_gate.weight",
                           "blk.0.ffn_up.weight", "output.weight"})
    EXPECT_NE(f.find_tensor(name), nullptr) << name;
  for (const char* name : {"blk.0.attn_output.bias", "blk.0.ffn_up.bias", "blk.0.attn_q.bias"})
    EXPECT_EQ(f.find_tensor(name), nullptr) << name;
  EXPECT_EQ(f.find_value("tformer.tied_embeddings")->i, 1);
  EXPECT_TRUE(load_model(path("s.gguf")).model->config().tied_embeddings);
  // An output.weight that is not the embedding under that key is an error naming it.
  {
    Parts p = parts_of(path("s.gguf"));
    for (size_t i = 0; i < p.tensors.size(); ++i)
      if (p.tensors[i].name == "output.weight") p.data[i][5] ^= 1;
    write_gguf(path("lie.gguf"), p.metadata, p.tensors);
    EXPECT_ERROR(load_model(path("lie.gguf")), ErrorKind::BadFile, "tformer.tied_embeddings", "not token_embd.weight");
  }
  // A file from outside (no tformer keys): stablelm's rows are halves, and output.weight untied.
  {
    Parts p = parts_of(path("s.gguf"));
    drop_value(p, "tformer.rope_pairing");
    drop_value(p, "tformer.tied_embeddings");
    write_gguf(path("outside.gguf"), p.metadata, p.tensors);
    LoadedModel o = load_model(path("outside.gguf"));
    EXPECT_EQ(o.model->config().rope_pairing, RopePairing::Halves);
    EXPECT_FALSE(o.model->config().tied_embeddings);
    const auto ids = some_ids(24, 256);
    const auto a = logits_of(*m, ids), b = logits_of(*o.model, ids);
    double worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    EXPECT_LT(worst, 1e-4);  // the same scores, rotated the other way (float rounding only)
  }
  // starcoder2 requires its output and feed-forward biases: bias false is written as zeros.
  auto s2 = random_model(config(R"({"positions": "rope", "activation": "gelu_tanh", "bias": false})"), 22);
  const GgufExportReport r2 = export_gguf(path("c.gguf"), *s2, tok, "", GgufExportType::F32);
  EXPECT_EQ(r2.architecture, "starcoder2");
  EXPECT_TRUE(std::any_of(r2.notes.begin(), r2.notes.end(),
                          [](const std::string& n) { return n.starts_with("bias: false written as zero biases"); }));
  LoadedModel back = load_model(path("c.gguf"));
  EXPECT_TRUE(back.model->config().bias);
  const auto ids = some_ids(24, 256);
  const auto a = logits_of(*s2, ids), b = logits_of(*back.model, ids);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
}

TEST_F(GgufModelTest, BrokenAndForeignFilesAreErrorsNamingTheKeyOrTensor) {
  auto m = random_model(config(R"({"norm": "rmsnorm", "positions": "rope", "activation": "swiglu", "bias": false,
                                   "d_model": 32})"),
                        10);
  export_gguf(path("ok.gguf"), *m, CharTokenizer::bytes(), "", GgufExportType::F32);
  const std::string bad = path("bad.gguf");
  auto write = [&](const Parts& p) { write_gguf(bad, p.metadata, p.tensors); };
  {
    Parts p = parts_of(path("ok.gguf"));
    drop_value(p, "llama.block_count");
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "llama.block_count", "missing");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "llama.embedding_length", GgufValue::string("16"));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "llama.embedding_length", "not an integer");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "llama.attention.layer_norm_rms_epsilon", GgufValue::u32(1));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "llama.attention.layer_norm_rms_epsilon", "not a float");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "general.architecture", GgufValue::string("falcon"));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::Unsupported, "general.architecture", "falcon");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "llama.rope.scaling.type", GgufValue::string("yarn"));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::Unsupported, "llama.rope.scaling.type");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "llama.attention.head_count", GgufValue::u32(3));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "llama.attention.head_count");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    p.tensors.push_back({"rope_freqs.weight", {2}, static_cast<uint32_t>(GgmlType::F32), p.data[0].data(), 8});
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::Unsupported, "rope_freqs.weight");
  }
  {
    // Keys claiming more than the tensors hold (a fuzzed file: 4,000 layers, an 800 MB allocation)
    // are refused before the weights are allocated, naming the first tensor that is not there.
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "llama.block_count", GgufValue::u32(4000));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "blk.2.attn_output.weight");
    p = parts_of(path("ok.gguf"));
    set_value(p, "llama.feed_forward_length", GgufValue::u32(1 << 20));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "blk.0.ffn_down.weight", "ne");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    std::erase_if(p.tensors, [](const auto& t) { return t.name == "blk.1.ffn_up.weight"; });
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "blk.1.ffn_up.weight");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    for (auto& t : p.tensors)
      if (t.name == "blk.0.ffn_down.weight") std::swap(t.ne[0], t.ne[1]);
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "blk.0.ffn_down.weight", "ne");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "tokenizer.ggml.model", GgufValue::string("rwkv"));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::Unsupported, "tokenizer.ggml.model", "rwkv");
  }
  {
    // A byte-level BPE vocabulary with a merge and a pre-tokenizer tformer does not compute.
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "tokenizer.ggml.merges", GgufValue::string_array({"a b"}));
    set_value(p, "tokenizer.ggml.pre", GgufValue::string("qwen2"));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::Unsupported, "tokenizer.ggml.pre", "qwen2");
  }
  {
    Parts p = parts_of(path("ok.gguf"));
    set_value(p, "tokenizer.ggml.tokens", GgufValue::string_array({"a", "b"}));
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "tokenizer.ggml.token_type", "2 entries");
    drop_value(p, "tokenizer.ggml.token_type");
    write(p);
    EXPECT_ERROR(load_model(bad), ErrorKind::BadFile, "tokenizer.ggml.tokens", "2 tokens");
  }
}

TEST_F(GgufModelTest, AModelLargerThanTheMemoryIsRefusedBeforeAllocating) {
  auto m = random_model(config(kLlama), 11);
  export_gguf(path("m.gguf"), *m, CharTokenizer::bytes(), "", GgufExportType::F32);
  ASSERT_EQ(setenv("TFORMER_MEMORY_LIMIT", "4096", 1), 0);
  const Error e = test::error_of([&] { load_model(path("m.gguf")); });
  unsetenv("TFORMER_MEMORY_LIMIT");
  EXPECT_EQ(e.kind(), ErrorKind::BadFile);
  EXPECT_NE(std::string(e.what()).find(std::to_string(m->n_params() * 4) + " bytes"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("4096 bytes of memory"), std::string::npos) << e.what();
  EXPECT_NO_THROW(load_model(path("m.gguf")));
}

}  // namespace
}  // namespace tformer
