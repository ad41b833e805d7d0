// tformer against llama.cpp itself, from fixtures: tests/fixtures/gguf/ holds GGUF files tformer
// exported and what llama.cpp (node-llama-cpp 3.21.1, CPU, F32 KV cache, flash attention off)
// computed from them (tools/interop/llama_cpp_check.mjs --write-fixtures regenerates them;
// `make test-interop` runs the same checks live). For each file:
//   * tformer's next-token probabilities at every position of the fixture's sequence equal
//     llama.cpp's within the bound of its architecture and type (docs/gguf.md derives them);
//   * tformer's greedy continuation equals llama.cpp's (every type);
//   * exporting the loaded model again writes the same bytes: the export these fixtures checked is
//     the export tformer still does;
//   * llama.cpp's tokenization of every exported vocabulary equals tformer's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "io/gguf.h"
#include "kernels/softmax.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "test_util.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/tokenizer.h"

namespace tformer {
namespace {

const char* kDir = "fixtures/gguf";

struct Fixture {
  std::string name;
  double bound;  // on |p_llama.cpp - p_tformer|, every probability
};

// llama and stablelm F32: float32 rounding (the 1e-5; measured 6e-7 and 1e-6). gpt2, mpt
// and starcoder2 F32: llama.cpp's CPU GELU is a table of fp16 values read at fp16-rounded inputs
// (up to 4e-3 off in the activation); measured up to 2.4e-4, bound 2e-3. F16: llama.cpp rounds the activations to
// f16 before every matrix product, tformer multiplies the float ones; measured 9e-4. BF16: both round them to bf16
// (kernels/qlinear.h), so only float sums' order differs: measured 1.7e-7, F32's bound. Q8_0 and Q4_0: both
// multiply the same blocks against activations rounded to Q8_0 blocks by the same rule, with exact integer sums
// per block: F32's bound.
const Fixture kFixtures[] = {
    {"llama_halves_gqa_untied", 1e-5},
    {"llama_adjacent_mqa_tied_bias", 1e-5},
    {"llama_halves_mha_tied", 1e-5},
    {"llama_halves_gqa_f16", 5e-3},
    {"llama_halves_gqa_bf16", 1e-5},
    {"llama_halves_gqa_q8_0", 1e-5},
    {"llama_halves_gqa_q4_0", 1e-5},
    {"gpt2_learned_tied", 2e-3},
    {"gpt2_sinusoidal_gqa_untied_nobias", 2e-3},
    {"gpt2_learned_erf_f16", 5e-3},
    {"mpt_nopos_mqa_bias", 2e-3},
    {"mpt_nopos_untied_nobias", 2e-3},
    {"stablelm_halves_gqa_tied", 1e-5},
    {"stablelm_adjacent_untied", 1e-5},
    {"starcoder2_halves_gqa_bias_untied", 2e-3},
    {"starcoder2_adjacent_mqa_nobias_tied", 2e-3},
};

std::vector<float> read_f32(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), v.size() * 4);
  return v;
}

int64_t argmax(const float* p, int64_t n) {
  int64_t best = 0;
  for (int64_t j = 1; j < n; ++j)
    if (p[j] > p[best]) best = j;
  return best;
}

class LlamaCpp : public ::testing::TestWithParam<Fixture> {};

TEST_P(LlamaCpp, ProbabilitiesGreedyTokensAndTheExportAgree) {
  const Fixture& fx = GetParam();
  const std::string base = std::string(kDir) + "/" + fx.name;
  const auto meta = nlohmann::json::parse(read_file(base + ".json"));
  LoadedModel lm = load_model(base + ".gguf");
  Model& m = *lm.model;
  const int64_t V = m.config().vocab_size;
  const auto ids = meta["tokens"].get<std::vector<TokenId>>();
  const auto T = static_cast<int64_t>(ids.size());
  const std::vector<float> want = read_f32(base + ".probs.f32");
  ASSERT_EQ(static_cast<int64_t>(want.size()), T * V);
  std::vector<float> p(static_cast<size_t>(T * V));
  m.forward(p.data(), ids.data(), 1, T);
  softmax_forward<float>(p.data(), p.data(), T, V);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(p[i]) - want[i]));
    largest = std::max(largest, static_cast<double>(want[i]));
  }
  EXPECT_LE(worst, fx.bound) << fx.name;
  EXPECT_GT(largest, 0.1) << "the fixture's distributions should be far from uniform";
  std::cout << fx.name << ": max |p_llama.cpp - p_tformer| = " << worst << " (bound " << fx.bound << ")\n";

  {  // greedy continuations: identical for every type
    std::vector<TokenId> seq = meta["greedy_prompt"].get<std::vector<TokenId>>();
    const auto greedy = meta["greedy"].get<std::vector<TokenId>>();
    const size_t prompt = seq.size();
    std::vector<float> logits;
    for (size_t i = 0; i < greedy.size(); ++i) {
      logits.resize(seq.size() * static_cast<size_t>(V));
      m.forward(logits.data(), seq.data(), 1, static_cast<int64_t>(seq.size()));
      seq.push_back(static_cast<TokenId>(argmax(logits.data() + (seq.size() - 1) * V, V)));
    }
    EXPECT_EQ(std::vector<TokenId>(seq.begin() + static_cast<std::ptrdiff_t>(prompt), seq.end()), greedy);
  }

  test::TempDir tmp;
  const std::string again = (tmp.path() / "again.gguf").string();
  const std::string type = meta["type"];
  export_gguf(again, m, *lm.tokenizer, lm.chat_template, parse_gguf_export_type(type));
  EXPECT_TRUE(read_file(again) == read_file(base + ".gguf")) << "the export differs from the checked file";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, LlamaCpp, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return info.param.name; });

// Files quantized by llama.cpp's own `llama-quantize --pure` (tests/fixtures/gguf_llama_quantize,
// written by tools/reference/gen_llama_quantize_fixtures.sh from the F32 fixture above): tformer
// reads an outside writer's BF16, Q8_0 and Q4_0 files, every tensor is byte-identical to tformer's
// quantization of the same F32 file (norms F32, every matrix in the type), and the model computes
// the same logits, bit for bit, as tformer's own file.
TEST(LlamaQuantize, OutsideQuantizedFilesAreTformersOwnQuantization) {
  const std::string f32 = std::string(kDir) + "/llama_halves_gqa_untied.gguf";
  LoadedModel original = load_model(f32);
  test::TempDir tmp;
  for (const char* type : {"bf16", "q8_0", "q4_0"}) {
    SCOPED_TRACE(type);
    const std::string theirs = std::string("fixtures/gguf_llama_quantize/llama_halves_gqa_untied.") + type + ".gguf";
    const std::string ours = (tmp.path() / (std::string(type) + ".gguf")).string();
    export_gguf(ours, *original.model, *original.tokenizer, original.chat_template, parse_gguf_export_type(type));
    const GgufFile a = GgufFile::open(theirs), b = GgufFile::open(ours);
    ASSERT_EQ(a.tensors().size(), b.tensors().size());
    int quantized = 0;
    for (const GgufTensor& t : a.tensors()) {
      const GgufTensor& u = b.tensor(t.name);
      EXPECT_EQ(t.type, u.type) << t.name;
      EXPECT_EQ(t.ne, u.ne) << t.name;
      ASSERT_EQ(t.nbytes, u.nbytes) << t.name;
      std::vector<uint8_t> x(t.nbytes), y(u.nbytes);
      a.read_bytes(t, x.data(), t.nbytes);
      b.read_bytes(u, y.data(), u.nbytes);
      EXPECT_TRUE(x == y) << t.name << ": llama-quantize's bytes differ from tformer's";
      quantized += t.ne.size() == 2 && t.type != 0;  // 0: F32
    }
    EXPECT_EQ(quantized, 16) << "token_embd, output and 7 matrices in each of 2 layers";
    LoadedModel outside = load_model(theirs), own = load_model(ours);
    const std::vector<TokenId> ids{3, 141, 59, 26, 5, 35, 89, 79, 32, 38, 46, 26, 4};
    const int64_t T = static_cast<int64_t>(ids.size()), V = outside.model->config().vocab_size;
    std::vector<float> p(static_cast<size_t>(T * V)), q(p.size()), r(p.size());
    outside.model->forward(p.data(), ids.data(), 1, T);
    own.model->forward(q.data(), ids.data(), 1, T);
    original.model->forward(r.data(), ids.data(), 1, T);
    EXPECT_TRUE(p == q) << "the same blocks give the same logits";
    EXPECT_FALSE(p == r) << "the quantized model differs from the F32 one";
  }
}

// llama.cpp's tokenization of each exported vocabulary (300 varied texts; a corpus alphabet: 300
// slices of its corpus) equals tformer's. The vocabularies: the 256 bytes, GPT-2's (from
// build-data/gpt2), tiktoken's cl100k_base and o200k_base (build-data/tiktoken; 400 texts, exported
// with pre "llama-bpe" and "gpt-4o"), and the three kept as GGUF files (a corpus's char alphabet, a trained byte-level
// BPE, a SentencePiece BPE model with Llama's settings), read back through tformer's GGUF tokenizer
// reader (which reads a "llama" vocabulary by llama.cpp's rules).
TEST(LlamaCppTokenization, EveryExportedVocabularyTokenizesAsLlamaCppDoes) {
  for (const char* name : {"char", "char-alphabet", "byte-bpe-trained", "byte-bpe-default", "sentencepiece", "gpt2",
                           "cl100k_base", "o200k_base"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Tokenizer> tok;
    const std::string base = std::string(kDir) + "/tokenize_" + name;
    const std::string n = name;
    const bool tiktoken = n == "cl100k_base" || n == "o200k_base";
    if (n == "char") {
      tok = tokenizer_by_name("char");
    } else if (n == "gpt2" || tiktoken) {
      const std::string file = std::string(TFORMER_SOURCE_DIR) + "/build-data/" +
                               (tiktoken ? "tiktoken/" + n + ".json" : std::string("gpt2/encoder.json"));
      if (!std::filesystem::exists(file)) {
        std::cout << file << " is missing (scripts/fetch-gpt2-vocab.sh, fetch-tiktoken-vocab.sh): skipped\n";
        continue;
      }
      tok = tokenizer_by_name(n);
    } else {
      tok = load_gguf_tokenizer(base + ".gguf");
      ASSERT_TRUE(tok);
    }
    const auto j = nlohmann::json::parse(read_file(base + ".json"));
    const auto texts = j["texts"].get<std::vector<std::string>>();
    const auto ids = j["ids"].get<std::vector<std::vector<TokenId>>>();
    ASSERT_EQ(texts.size(), ids.size());
    ASSERT_GE(texts.size(), 300u);
    // Texts llama.cpp is known to split otherwise (o200k_base: those with combining marks; see
    // tools/interop/llama_cpp_check.mjs) are left out; for the vocabularies read back from their GGUF
    // file (sentencepiece) every text counts.
    std::vector<bool> skip(texts.size(), false);
    if (tiktoken && j.contains("skipped"))
      for (size_t i : j["skipped"].get<std::vector<size_t>>()) skip.at(i) = true;
    EXPECT_LE(std::count(skip.begin(), skip.end(), true), static_cast<long>(texts.size() / 10));
    size_t bad = 0, skipped_differ = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      if (skip[i])
        skipped_differ += tok->encode(texts[i]) != ids[i];
      else if (tok->encode(texts[i]) != ids[i] && bad++ < 3)
        ADD_FAILURE() << "text " << i << ": " << texts[i];
    }
    EXPECT_EQ(bad, 0u);
    // The difference the skipped texts stand for is there (docs/gguf.md): when a llama.cpp without
    // it writes the fixture, the list of skipped texts must go.
    if (std::count(skip.begin(), skip.end(), true) > 0) {
      EXPECT_GT(skipped_differ, 0u);
    }
    if (tiktoken) {
      // The pattern matters: cl100k_base's vocabulary with GPT-2's pattern (digit runs of any length),
      // o200k_base's with cl100k's (no case-change splits), give other ids on many of these texts.
      auto* bpe = dynamic_cast<ByteBpeTokenizer*>(tok.get());
      ASSERT_TRUE(bpe);
      bpe->set_pattern(n == "cl100k_base" ? ByteBpeTokenizer::Pattern::Gpt2 : ByteBpeTokenizer::Pattern::Cl100k);
      size_t differ = 0;
      for (size_t i = 0; i < texts.size(); ++i) differ += !skip[i] && tok->encode(texts[i]) != ids[i];
      EXPECT_GT(differ, texts.size() / 10);
    }
    if (std::string(name) == "byte-bpe-default") {
      // The file names pre "default", and the chain matters: with GPT-2's pattern the same
      // vocabulary gives other ids on many of these texts.
      auto* bpe = dynamic_cast<ByteBpeTokenizer*>(tok.get());
      ASSERT_TRUE(bpe);
      EXPECT_EQ(bpe->pattern(), ByteBpeTokenizer::Pattern::LlamaCppDefault);
      bpe->set_pattern(ByteBpeTokenizer::Pattern::Gpt2);
      size_t differ = 0;
      for (size_t i = 0; i < texts.size(); ++i) differ += tok->encode(texts[i]) != ids[i];
      EXPECT_GT(differ, texts.size() / 10);
    }
  }
}

}  // namespace
}  // namespace tformer
