#include "model/gguf_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/float16.h"
#include "core/rng.h"
#include "io/gguf.h"
#include "kernels/qlinear.h"
#include "kernels/quant.h"
#include "kernels/softmax.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/sentencepiece.h"

namespace tformer {

namespace {

using Metadata = std::vector<std::pair<std::string, GgufValue>>;

// llama.cpp's tokenizer.ggml.token_type values (llama_token_attr's older enumeration).
constexpr int64_t kTokenNormal = 1;
constexpr int64_t kTokenControl = 3;
constexpr int64_t kTokenUserDefined = 4;
constexpr int64_t kTokenUnused = 5;

// The tokenizer.ggml.pre name llama.cpp runs each byte-level BPE pattern under: the pre-tokenizer
// types whose regular expressions (src/llama-vocab.cpp) are GPT-2's, its default chain, tiktoken's
// cl100k_base pattern (its LLAMA3 type, written "llama-bpe" as convert_hf_to_gguf.py does for
// Llama 3) and o200k_base's (GPT4O).
const char* gguf_pre_of(ByteBpeTokenizer::Pattern p) {
  switch (p) {
    case ByteBpeTokenizer::Pattern::Gpt2:
      return "gpt-2";
    case ByteBpeTokenizer::Pattern::LlamaCppDefault:
      return "default";
    case ByteBpeTokenizer::Pattern::Cl100k:
      return "llama-bpe";
    case ByteBpeTokenizer::Pattern::O200k:
      return "gpt-4o";
  }
  return "gpt-2";
}

// The pattern of a tokenizer.ggml.pre name (the names llama.cpp gives those types), if any.
std::optional<ByteBpeTokenizer::Pattern> pattern_of_gguf_pre(const std::string& pre) {
  if (pre == "gpt-2" || pre == "gpt2") return ByteBpeTokenizer::Pattern::Gpt2;
  if (pre == "default") return ByteBpeTokenizer::Pattern::LlamaCppDefault;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") return ByteBpeTokenizer::Pattern::Cl100k;
  if (pre == "gpt-4o" || pre == "llama4") return ByteBpeTokenizer::Pattern::O200k;
  return std::nullopt;
}

// general.file_type (llama_ftype): what most tensors are.
uint32_t file_type_of(GgufExportType t) {
  switch (t) {
    case GgufExportType::F32:
      return 0;
    case GgufExportType::F16:
      return 1;
    case GgufExportType::BF16:
      return 32;
    case GgufExportType::Q8_0:
      return 7;  // LLAMA_FTYPE_MOSTLY_Q8_0
    case GgufExportType::Q4_0:
      return 2;  // LLAMA_FTYPE_MOSTLY_Q4_0
  }
  return 0;
}

GgmlType ggml_type_of(GgufExportType t) {
  switch (t) {
    case GgufExportType::F32:
      return GgmlType::F32;
    case GgufExportType::F16:
      return GgmlType::F16;
    case GgufExportType::BF16:
      return GgmlType::BF16;
    case GgufExportType::Q8_0:
      return GgmlType::Q8_0;
    case GgufExportType::Q4_0:
      return GgmlType::Q4_0;
  }
  return GgmlType::F32;
}

bool is_block_type(GgmlType t) { return t == GgmlType::Q8_0 || t == GgmlType::Q4_0; }

// Row r of each head of a [n_heads * hd, cols] projection, in llama.cpp's adjacent-pair order:
// output row 2i of a head is input row i, output row 2i+1 is input row i + hd/2. `inverse` undoes it.
// E is float for values, uint8_t (cols = bytes of a row) for rows of a stored type.
template <typename E>
std::vector<E> permute_rope_rows(const E* w, int64_t n_heads, int64_t hd, int64_t cols, bool inverse) {
  std::vector<E> out(static_cast<size_t>(n_heads * hd * cols));
  const int64_t half = hd / 2;
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t k = 0; k < 2; ++k) {
        const int64_t adjacent = h * hd + 2 * i + k, halves = h * hd + i + k * half;
        const int64_t dst = inverse ? halves : adjacent, src = inverse ? adjacent : halves;
        std::memcpy(out.data() + dst * cols, w + src * cols, static_cast<size_t>(cols) * sizeof(E));
      }
  return out;
}

// One tensor on its way into the file: its values (row-major), its row-major shape and its type.
struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major: {rows, cols} or {n}
  std::vector<float> values;
  bool matrix = false;  // written in the export type; everything else in F32
};

// The values as ggml blocks of type Block, quantized by `quantize` (kernels/quant.h).
template <typename Block>
std::vector<uint8_t> encode_blocks(const std::vector<float>& v,
                                   void (*quantize)(std::span<const float>, std::span<Block>)) {
  std::vector<Block> blocks(v.size() / kQuantBlockValues);  // rows are whole blocks: checked by the caller
  quantize(v, blocks);
  std::vector<uint8_t> bytes(blocks.size() * sizeof(Block));
  std::memcpy(bytes.data(), blocks.data(), bytes.size());
  return bytes;
}

std::vector<uint8_t> encode_values(const std::vector<float>& v, GgmlType type) {
  std::vector<uint8_t> bytes;
  if (type == GgmlType::Q8_0) return encode_blocks<BlockQ8_0>(v, quantize_row_q8_0);
  if (type == GgmlType::Q4_0) return encode_blocks<BlockQ4_0>(v, quantize_row_q4_0);
  if (type == GgmlType::F32) {
    bytes.resize(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return bytes;
  }
  bytes.resize(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = type == GgmlType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  return bytes;
}

// ---- the tokenizer's metadata ------------------------------------------------------------------

}  // namespace

TokenId end_of_text_for(const Tokenizer& tok) {
  if (const auto eot = tok.eot_id()) return *eot;
  // No end-of-text token: llama.cpp still stops at its EOS id (11 when the file names none), so the
  // file names the single-byte token least likely in text: NUL, another control byte (not tab,
  // newline or carriage return), DEL, a byte >= 0x80, a rare ASCII symbol, else the last id.
  std::vector<unsigned char> order{0};
  for (int b = 1; b < 32; ++b)
    if (b != '\t' && b != '\n' && b != '\r') order.push_back(static_cast<unsigned char>(b));
  order.push_back(0x7f);
  for (int b = 0xff; b >= 0x80; --b) order.push_back(static_cast<unsigned char>(b));
  for (char ch : std::string("`~^|\\{}[]<>@#$%&*_+=")) order.push_back(static_cast<unsigned char>(ch));
  std::map<std::string, TokenId> single;
  std::string bytes;
  for (TokenId id = 0; id < tok.vocab_size(); ++id) {
    bytes.clear();
    tok.append_token_bytes(id, bytes);
    if (bytes.size() == 1) single.emplace(bytes, id);
  }
  for (unsigned char b : order)
    if (const auto it = single.find(std::string(1, static_cast<char>(b))); it != single.end()) return it->second;
  return static_cast<TokenId>(tok.vocab_size() - 1);
}

namespace {

// A SentencePiece BPE vocabulary as llama.cpp's "llama" tokenizer, which splits nothing and
// normalizes nothing: exact only for models that do not either (Llama's own settings).
void add_sentencepiece_metadata(Metadata& md, const SentencePieceTokenizer& sp) {
  const auto& n = sp.normalizer();
  if (!n.charsmap.empty())
    fail_unsupported("tokenizer",
                     "the SentencePiece model normalizes text ('{}'): llama.cpp's SentencePiece tokenizer "
                     "does not, so its ids would differ (train with --normalization_rule_name=identity)",
                     n.name);
  if (n.remove_extra_whitespaces || !n.escape_whitespaces || sp.whitespace_as_suffix())
    fail_unsupported(
        "tokenizer",
        "the SentencePiece model {}: llama.cpp's SentencePiece tokenizer keeps every space "
        "and marks it before the word (train with --remove_extra_whitespaces=false)",
        n.remove_extra_whitespaces ? "removes extra whitespace" : "does not escape whitespace the usual way");
  if (!sp.byte_fallback())
    fail_unsupported("tokenizer",
                     "the SentencePiece model has no byte fallback: llama.cpp fails on a character "
                     "outside the vocabulary (train with --byte_fallback=true)");
  std::vector<std::string> tokens;
  std::vector<double> scores;
  std::vector<int64_t> types;
  for (const auto& p : sp.pieces()) {
    tokens.push_back(p.text);
    scores.push_back(p.score);
    types.push_back(static_cast<int64_t>(p.type));  // the same numbering as llama.cpp's token types
  }
  md.emplace_back("tokenizer.ggml.model", GgufValue::string("llama"));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(std::move(tokens)));
  md.emplace_back("tokenizer.ggml.scores", GgufValue::float_array(GgufType::F32, std::move(scores)));
  md.emplace_back("tokenizer.ggml.token_type", GgufValue::int_array(GgufType::I32, std::move(types)));
  const auto specials = sp.special_tokens();
  auto id_of = [&](const char* text) {
    const auto it = specials.find(text);
    return it == specials.end() ? end_of_text_for(sp) : it->second;
  };
  const TokenId bos = sp.bos_id() ? *sp.bos_id() : id_of("<s>");
  const TokenId eos = sp.eot_id() ? *sp.eot_id() : id_of("</s>");
  md.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(bos)));
  md.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(eos)));
  md.emplace_back("tokenizer.ggml.unknown_token_id", GgufValue::u32(static_cast<uint32_t>(sp.unk_id())));
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(sp.bos_id().has_value()));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
  md.emplace_back("tokenizer.ggml.add_space_prefix", GgufValue::boolean(n.add_dummy_prefix));
}

void add_tokenizer_metadata(Metadata& md, const Tokenizer& tok) {
  if (tok.kind() == "sentencepiece") {
    add_sentencepiece_metadata(md, dynamic_cast<const SentencePieceTokenizer&>(tok));
    return;
  }
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<std::string> merges;
  std::string pre;
  const std::string kind = tok.kind();
  if (kind == "byte-bpe") {
    const auto& bpe = dynamic_cast<const ByteBpeTokenizer&>(tok);
    const auto specials = bpe.special_tokens();
    std::map<TokenId, std::string> special_of_id;
    for (const auto& [text, id] : specials) special_of_id[id] = text;
    for (TokenId id = 0; id < bpe.vocab_size(); ++id) {
      const auto special = special_of_id.find(id);
      if (special != special_of_id.end()) {
        tokens.push_back(special->second);
        types.push_back(kTokenControl);
      } else if (!bpe.is_token(id)) {
        // An unused id among the special tokens (cl100k_base's 100256, 100261..100275): GGUF lists
        // every id, so it gets a placeholder of type UNUSED, which llama.cpp never matches in text
        // (the name convert_hf_to_gguf.py gives such ids).
        tokens.push_back(fmt::format("[PAD{}]", id));
        types.push_back(kTokenUnused);
      } else {
        tokens.push_back(gpt2_bytes_to_unicode(bpe.token_bytes(id)));
        types.push_back(kTokenNormal);
      }
    }
    for (const auto& [a, b] : bpe.merges())
      merges.push_back(gpt2_bytes_to_unicode(bpe.token_bytes(a)) + " " + gpt2_bytes_to_unicode(bpe.token_bytes(b)));
    pre = gguf_pre_of(bpe.pattern());
  } else if (kind == "char") {
    // One token per byte of the alphabet and no merges: llama.cpp's BPE then leaves every byte a
    // token of its own, whatever its pre-tokenizer splits.
    const auto& chars = dynamic_cast<const CharTokenizer&>(tok);
    for (unsigned char byte : chars.alphabet()) {
      tokens.push_back(gpt2_bytes_to_unicode(std::string(1, static_cast<char>(byte))));
      types.push_back(kTokenNormal);
    }
    pre = "gpt-2";
  } else {
    fail_unsupported("tokenizer",
                     "the model's tokenizer is of kind '{}': only byte-level BPE (\"byte-bpe\"), \"char\" and "
                     "SentencePiece vocabularies have a llama.cpp form (Sennrich BPE leaves the space between two "
                     "words implicit, which no llama.cpp tokenizer reproduces)",
                     kind);
  }
  md.emplace_back("tokenizer.ggml.model", GgufValue::string("gpt2"));
  md.emplace_back("tokenizer.ggml.pre", GgufValue::string(pre));
  md.emplace_back("tokenizer.ggml.tokens", GgufValue::string_array(std::move(tokens)));
  md.emplace_back("tokenizer.ggml.token_type", GgufValue::int_array(GgufType::I32, std::move(types)));
  md.emplace_back("tokenizer.ggml.merges", GgufValue::string_array(std::move(merges)));
  const TokenId eos = end_of_text_for(tok);
  md.emplace_back("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(eos)));
  md.emplace_back("tokenizer.ggml.eos_token_id", GgufValue::u32(static_cast<uint32_t>(eos)));
  md.emplace_back("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  md.emplace_back("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
}

// ---- the probe of the GELU change --------------------------------------------------------------

// The largest |p_tanh - p_erf| over every next-token probability of a seeded batch of random
// tokens (4 sequences of up to 64 tokens), and the number of positions it covered.
std::pair<double, int64_t> gelu_probability_change(Model& model) {
  const ModelConfig& c = model.config();
  ModelConfig tanh_config = c;
  tanh_config.activation = Activation::GeluTanh;
  Model tanh_model(tanh_config);
  TF_CHECK(tanh_model.params().size() == model.params().size(), "gelu probe: parameter layouts differ");
  std::copy(model.params().data(), model.params().data() + model.params().size(), tanh_model.params().data());
  const int64_t batch = 4, T = std::min<int64_t>(64, c.context_length), V = c.vocab_size;
  Rng rng(20261201);
  std::vector<TokenId> ids(static_cast<size_t>(batch * T));
  for (auto& id : ids) id = static_cast<TokenId>(rng.next_u64() % static_cast<uint64_t>(V));
  std::vector<float> a(static_cast<size_t>(batch * T * V)), b(a.size());
  model.forward(a.data(), ids.data(), batch, T);
  tanh_model.forward(b.data(), ids.data(), batch, T);
  softmax_forward<float>(a.data(), a.data(), batch * T, V);
  softmax_forward<float>(b.data(), b.data(), batch * T, V);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return {worst, batch * T};
}

}  // namespace

GgufExportType parse_gguf_export_type(const std::string& s, const std::string& flag) {
  if (s == "f32") return GgufExportType::F32;
  if (s == "f16") return GgufExportType::F16;
  if (s == "bf16") return GgufExportType::BF16;
  if (s == "q8_0") return GgufExportType::Q8_0;
  if (s == "q4_0") return GgufExportType::Q4_0;
  fail_input(flag, "{}: unknown type '{}' (f32, f16, bf16, q8_0 or q4_0)", flag, s);
}

std::string gguf_architecture_for(const ModelConfig& c) {
  if (c.norm_placement != NormPlacement::Pre)
    fail_unsupported("norm_placement",
                     "norm_placement \"{}\": every llama.cpp architecture normalises before the attention and the "
                     "feed-forward (pre-LN); a post-LN model has no GGUF form",
                     to_string(c.norm_placement));
  if (c.norm == NormKind::LayerNorm) {
    if (c.activation == Activation::SwiGLU) {
      if (c.positions != Positions::Rope)
        fail_unsupported("positions",
                         "positions \"{}\" with norm \"layernorm\" and SwiGLU: llama.cpp's one LayerNorm + SwiGLU "
                         "architecture (stablelm) rotates queries and keys (RoPE)",
                         to_string(c.positions));
      if (c.bias)
        fail_unsupported("bias",
                         "bias true with norm \"layernorm\" and SwiGLU: llama.cpp's stablelm has biases only on q, k "
                         "and v, not on the attention output or the feed-forward");
      return "stablelm";  // LayerNorm, SwiGLU, NeoX RoPE (rotate-half)
    }
    // starcoder2: LayerNorm, GELU, NeoX RoPE, biases everywhere (zeros for bias: false).
    if (c.positions == Positions::Rope) return "starcoder2";
    // mpt is gpt2 without the position table (and with optional biases; ALiBi only when
    // mpt.attention.max_alibi_bias is set, which the export never writes).
    return c.positions == Positions::None ? "mpt" : "gpt2";
  }
  if (c.activation != Activation::SwiGLU)
    fail_unsupported("activation",
                     "activation \"{}\" with norm \"rmsnorm\": llama.cpp's llama architecture computes SwiGLU "
                     "(gpt2 needs LayerNorm)",
                     to_string(c.activation));
  if (c.positions != Positions::Rope)
    fail_unsupported("positions",
                     "positions \"{}\" with norm \"rmsnorm\": llama.cpp's llama architecture rotates queries and keys "
                     "(RoPE) and has no position table",
                     to_string(c.positions));
  return "llama";
}

GgufExportReport export_gguf(const std::string& path, Model& model, const Tokenizer& tokenizer,
                             const std::string& chat_template, GgufExportType type,
                             std::optional<GgufExportType> output_type) {
  const ModelConfig& c = model.config();
  GgufExportReport report;
  report.architecture = gguf_architecture_for(c);
  if (tokenizer.vocab_size() != c.vocab_size)
    fail_input("tokenizer", "the tokenizer has {} tokens but the model's vocab_size is {}", tokenizer.vocab_size(),
               c.vocab_size);
  const std::string& arch = report.architecture;
  const bool gpt2 = arch == "gpt2", mpt = arch == "mpt", fused = gpt2 || mpt;
  // stablelm and starcoder2 rotate NeoX's way (rows i and i + hd/2: tformer's "halves"), llama
  // adjacent pairs; a model of the other pairing has its query and key rows permuted.
  const bool neox = arch == "stablelm" || arch == "starcoder2", starcoder2 = arch == "starcoder2";
  const bool layernorm = c.norm == NormKind::LayerNorm, swiglu = c.activation == Activation::SwiGLU;
  const int64_t d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  auto& arena = model.params();
  auto values = [&](const std::string& name) {
    const auto* e = arena.find(name);
    TF_CHECK(e != nullptr, "export: the model has no tensor '{}'", name);
    const float* p = arena.data() + e->offset;
    return std::vector<float>(p, p + e->shape.numel());
  };
  auto has = [&](const std::string& name) { return arena.contains(name); };

  std::vector<OutTensor> out;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols, std::vector<float> v) {
    out.push_back({std::move(name), {rows, cols}, std::move(v), true});
  };
  auto vector = [&](std::string name, int64_t n, std::vector<float> v) {
    out.push_back({std::move(name), {n}, std::move(v), false});
  };
  // A bias: the model's, or zeros where the architecture requires the tensor.
  auto bias = [&](const std::string& gguf_name, const std::string& name, int64_t n, bool required) {
    if (has(name))
      vector(gguf_name, n, values(name));
    else if (required)
      vector(gguf_name, n, std::vector<float>(static_cast<size_t>(n), 0.0f));
  };

  matrix("token_embd.weight", c.vocab_size, d, values("tok_embeddings.weight"));
  if (gpt2) {
    if (c.positions == Positions::Learned) {
      matrix("position_embd.weight", c.context_length, d, values("pos_embeddings.weight"));
    } else {
      matrix("position_embd.weight", c.context_length, d, sinusoidal_table<float>(c));
      report.notes.push_back("positions: \"sinusoidal\" written as the position table (position_embd.weight)");
    }
  }
  const bool permute = !fused && (c.rope_pairing == RopePairing::Halves) != neox;
  // permute_rope_rows(.., inverse = false) takes halves to adjacent, inverse = true the other way.
  auto rope_rows = [&](std::vector<float> v, int64_t heads, int64_t cols) {
    return permute ? permute_rope_rows(v.data(), heads, hd, cols, neox) : v;
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string t = "layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    vector(g + "attn_norm.weight", d, values(t + "attn_norm.weight"));
    if (!fused && layernorm) vector(g + "attn_norm.bias", d, values(t + "attn_norm.bias"));
    if (fused) {
      vector(g + "attn_norm.bias", d, values(t + "attn_norm.bias"));
      std::vector<float> qkv = values(t + "attn.wq.weight");
      for (const char* w : {"attn.wk.weight", "attn.wv.weight"}) {
        const auto part = values(t + w);
        qkv.insert(qkv.end(), part.begin(), part.end());
      }
      matrix(g + "attn_qkv.weight", dq + 2 * dkv, d, std::move(qkv));
      std::vector<float> qkv_bias(static_cast<size_t>(dq + 2 * dkv), 0.0f);
      if (c.bias) {
        size_t at = 0;
        for (const char* b : {"attn.wq.bias", "attn.wk.bias", "attn.wv.bias"}) {
          const auto part = values(t + b);
          std::copy(part.begin(), part.end(), qkv_bias.begin() + static_cast<std::ptrdiff_t>(at));
          at += part.size();
        }
      }
      if (gpt2 || c.bias) vector(g + "attn_qkv.bias", dq + 2 * dkv, std::move(qkv_bias));
      matrix(g + "attn_output.weight", d, dq, values(t + "attn.wo.weight"));
      bias(g + "attn_output.bias", t + "attn.wo.bias", d, gpt2);
      vector(g + "ffn_norm.weight", d, values(t + "ffn_norm.weight"));
      vector(g + "ffn_norm.bias", d, values(t + "ffn_norm.bias"));
      matrix(g + "ffn_up.weight", c.d_ff, d, values(t + "ffn.w1.weight"));
      bias(g + "ffn_up.bias", t + "ffn.w1.bias", c.d_ff, gpt2);
      matrix(g + "ffn_down.weight", d, c.d_ff, values(t + "ffn.w2.weight"));
      bias(g + "ffn_down.bias", t + "ffn.w2.bias", d, gpt2);
    } else {
      matrix(g + "attn_q.weight", dq, d, rope_rows(values(t + "attn.wq.weight"), c.n_heads, d));
      matrix(g + "attn_k.weight", dkv, d, rope_rows(values(t + "attn.wk.weight"), c.n_kv_heads, d));
      matrix(g + "attn_v.weight", dkv, d, values(t + "attn.wv.weight"));
      // q, k and v biases are optional in every one of these architectures: all-zero ones (a file
      // read with tformer's one bias flag on for the others' sake) are left out, as they came.
      if (c.bias) {
        auto bq = values(t + "attn.wq.bias"), bk = values(t + "attn.wk.bias"), bv = values(t + "attn.wv.bias");
        const auto nonzero = [](const std::vector<float>& v) {
          return std::any_of(v.begin(), v.end(), [](float x) { return x != 0.0f; });
        };
        if (nonzero(bq) || nonzero(bk) || nonzero(bv)) {
          vector(g + "attn_q.bias", dq, rope_rows(std::move(bq), c.n_heads, 1));
          vector(g + "attn_k.bias", dkv, rope_rows(std::move(bk), c.n_kv_heads, 1));
          vector(g + "attn_v.bias", dkv, std::move(bv));
        }
      }
      matrix(g + "attn_output.weight", d, dq, values(t + "attn.wo.weight"));
      bias(g + "attn_output.bias", t + "attn.wo.bias", d, starcoder2);
      vector(g + "ffn_norm.weight", d, values(t + "ffn_norm.weight"));
      if (layernorm) vector(g + "ffn_norm.bias", d, values(t + "ffn_norm.bias"));
      if (swiglu) {
        matrix(g + "ffn_gate.weight", c.d_ff, d, values(t + "ffn.w1.weight"));
        bias(g + "ffn_gate.bias", t + "ffn.w1.bias", c.d_ff, false);
        matrix(g + "ffn_up.weight", c.d_ff, d, values(t + "ffn.w3.weight"));
        bias(g + "ffn_up.bias", t + "ffn.w3.bias", c.d_ff, false);
      } else {
        matrix(g + "ffn_up.weight", c.d_ff, d, values(t + "ffn.w1.weight"));
        bias(g + "ffn_up.bias", t + "ffn.w1.bias", c.d_ff, starcoder2);
      }
      matrix(g + "ffn_down.weight", d, c.d_ff, values(t + "ffn.w2.weight"));
      bias(g + "ffn_down.bias", t + "ffn.w2.bias", d, starcoder2);
    }
  }
  vector("output_norm.weight", d, values("norm.weight"));
  if (layernorm) vector("output_norm.bias", d, values("norm.bias"));
  // Every architecture but stablelm falls back to token_embd.weight when output.weight is absent
  // (llama.cpp's TENSOR_DUPLICATED), so a tied model writes its embedding once; stablelm requires
  // output.weight, and tformer.tied_embeddings tells tformer that it is the embedding again.
  const bool stablelm = arch == "stablelm";
  if (!c.tied_embeddings || stablelm)
    matrix("output.weight", c.vocab_size, d, values(c.tied_embeddings ? "tok_embeddings.weight" : "output.weight"));
  if ((gpt2 || starcoder2) && !c.bias)
    report.notes.push_back(fmt::format("bias: false written as zero biases (llama.cpp's {} requires them)", arch));
  if (stablelm && c.tied_embeddings)
    report.notes.push_back("tied embeddings written twice: llama.cpp's stablelm requires output.weight");
  if (permute)
    report.notes.push_back(
        fmt::format("rope_pairing: \"{}\" written with each query and key head's rows permuted to llama.cpp's {} pairs",
                    to_string(c.rope_pairing), neox ? "NeoX (rotate-half)" : "adjacent"));

  // Metadata: the keys llama.cpp reads for this architecture, with the value types it checks.
  Metadata md;
  md.emplace_back("general.architecture", GgufValue::string(arch));
  md.emplace_back("general.name", GgufValue::string("tformer"));
  md.emplace_back("general.file_type", GgufValue::u32(file_type_of(type)));
  md.emplace_back("general.alignment", GgufValue::u32(kGgufDefaultAlignment));
  auto key = [&](const std::string& k, GgufValue v) { md.emplace_back(arch + "." + k, std::move(v)); };
  auto count = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  key("context_length", count(c.context_length));
  key("embedding_length", count(d));
  key("block_count", count(c.n_layers));
  key("feed_forward_length", count(c.d_ff));
  key("attention.head_count", count(c.n_heads));
  key("attention.head_count_kv", count(c.n_kv_heads));
  key("vocab_size", count(c.vocab_size));
  key(layernorm ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon",
      GgufValue::f32(static_cast<float>(c.norm_eps)));
  if (stablelm && c.tied_embeddings) md.emplace_back("tformer.tied_embeddings", GgufValue::boolean(true));
  if (!fused) {
    key("rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_base)));
    key("rope.dimension_count", count(hd));
    // llama.cpp ignores keys it does not know; tformer reads this one back, so that a "halves"
    // model comes home with its own rows (and bit-identical logits).
    md.emplace_back("tformer.rope_pairing", GgufValue::string(to_string(c.rope_pairing)));
  }
  add_tokenizer_metadata(md, tokenizer);
  if (tokenizer.kind() == "sentencepiece") {
    const auto& sp = dynamic_cast<const SentencePieceTokenizer&>(tokenizer);
    const auto n = std::count_if(sp.pieces().begin(), sp.pieces().end(), [](const auto& p) {
      return p.type == SentencePieceTokenizer::PieceType::UserDefined;
    });
    if (n > 0 && !sp.llama_cpp_rules())
      report.notes.push_back(fmt::format(
          "tokenizer: {} user-defined pieces: llama.cpp cuts the text at them and puts the space prefix after each, "
          "where sentencepiece does not, so text containing them tokenizes differently there",
          n));
  }
  if (const auto* bpe = dynamic_cast<const ByteBpeTokenizer*>(&tokenizer);
      bpe && bpe->pattern() == ByteBpeTokenizer::Pattern::O200k)
    report.notes.push_back(
        "tokenizer: o200k's pattern written as llama.cpp's \"gpt-4o\", whose rewrite of it ends a word at a combining "
        "mark (\\p{M}) where tiktoken and tformer keep the mark in the word, so text with marks (Devanagari vowel "
        "signs, accents written as marks) tokenizes differently there");
  if (!tokenizer.eot_id() && tokenizer.kind() != "sentencepiece") {
    std::string text;
    tokenizer.append_token_bytes(end_of_text_for(tokenizer), text);
    report.notes.push_back(fmt::format(
        "tokenizer: no end-of-text token; llama.cpp stops generating at its EOS id, written as id {} (byte 0x{:02x})",
        end_of_text_for(tokenizer), text.empty() ? 0 : static_cast<unsigned char>(text[0])));
  }
  if (!chat_template.empty()) md.emplace_back("tokenizer.chat_template", GgufValue::string(chat_template));

  const GgmlType matrix_type = ggml_type_of(type);
  std::vector<std::vector<uint8_t>> bytes;
  bytes.reserve(out.size());
  std::vector<GgufTensorToWrite> tensors;
  std::vector<std::string> kept_f32;
  for (const auto& t : out) {
    GgmlType tt = t.matrix ? matrix_type : GgmlType::F32;
    // The output matrix: output.weight, or the tied embedding that stands for it.
    const bool output = t.name == "output.weight" || (t.name == "token_embd.weight" && c.tied_embeddings);
    if (output && output_type) tt = ggml_type_of(*output_type);
    if (is_block_type(tt) && (t.name == "position_embd.weight" || t.shape.back() % kQuantBlockValues != 0)) {
      tt = GgmlType::F32;  // llama-quantize keeps position tables; blocks need rows of whole blocks
      kept_f32.push_back(t.name);
    }
    bytes.push_back(encode_values(t.values, tt));
    std::vector<int64_t> ne(t.shape.rbegin(), t.shape.rend());
    tensors.push_back({t.name, std::move(ne), static_cast<uint32_t>(tt), bytes.back().data(), bytes.back().size()});
    report.file_bytes += bytes.back().size();
  }
  report.n_tensors = static_cast<int64_t>(tensors.size());
  if (!kept_f32.empty()) {
    std::string names;
    for (const auto& n : kept_f32) names += (names.empty() ? "" : ", ") + n;
    report.notes.push_back(
        fmt::format("{} in F32: position tables stay unquantized (as in llama-quantize), and "
                    "{} needs rows of whole blocks of {}",
                    names, ggml_type_name(static_cast<uint32_t>(matrix_type)), kQuantBlockValues));
  }
  if (c.activation == Activation::Gelu) {
    report.gelu_changed = true;
    std::tie(report.gelu_max_prob_change, report.probe_tokens) = gelu_probability_change(model);
  }
  write_gguf(path, md, tensors);
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) report.file_bytes = size;
  return report;
}

// ---- import --------------------------------------------------------------------------------------

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), 4)) return false;
  return magic == kGgufMagic;
}

namespace {

class GgufReader {
 public:
  explicit GgufReader(const GgufFile& f) : f_(f) {}

  const GgufValue& value(const std::string& key) const {
    const GgufValue* v = f_.find_value(key);
    if (!v) fail_file(key, "{}: missing key {}", f_.path(), key);
    return *v;
  }
  bool has(const std::string& key) const { return f_.find_value(key) != nullptr; }

  // A positive integer of any integer type (llama.cpp writes u32), at most `limit`.
  int64_t count(const std::string& key, int64_t limit = int64_t{1} << 31) const {
    const GgufValue& v = value(key);
    if (!is_integer(v.type)) fail_file(key, "{}: {} is a {}, not an integer", f_.path(), key, to_string(v.type));
    if (v.i <= 0 || v.i > limit || (v.type == GgufType::U64 && v.u > static_cast<uint64_t>(limit)))
      fail_file(key, "{}: {} = {} is out of range (1 .. {})", f_.path(), key,
                v.type == GgufType::U64 ? std::to_string(v.u) : std::to_string(v.i), limit);
    return v.i;
  }
  int64_t count_or(const std::string& key, int64_t fallback) const { return has(key) ? count(key) : fallback; }
  // A token id: an integer in [0, n).
  int64_t token_id(const std::string& key, int64_t n) const {
    const GgufValue& v = value(key);
    if (!is_integer(v.type)) fail_file(key, "{}: {} is a {}, not an integer", f_.path(), key, to_string(v.type));
    if (v.i < 0 || v.i >= n || (v.type == GgufType::U64 && v.u >= static_cast<uint64_t>(n)))
      fail_file(key, "{}: {} = {} is outside the {} tokens", f_.path(), key,
                v.type == GgufType::U64 ? std::to_string(v.u) : std::to_string(v.i), n);
    return v.i;
  }
  // A float32 key is read as the shortest decimal that rounds to it (1e-5, not
  // 9.99999974e-06): the value the writer meant, and the same float32 again when written back.
  double real(const std::string& key) const {
    const GgufValue& v = value(key);
    if (v.type != GgufType::F32 && v.type != GgufType::F64)
      fail_file(key, "{}: {} is a {}, not a float", f_.path(), key, to_string(v.type));
    if (!std::isfinite(v.f)) fail_file(key, "{}: {} is not finite", f_.path(), key);
    if (v.type == GgufType::F64) return v.f;
    char buf[32];
    const auto res = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v.f));
    double shortest = v.f;
    std::from_chars(buf, res.ptr, shortest);
    return shortest;
  }
  std::string string_or(const std::string& key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const GgufValue& v = value(key);
    if (v.type != GgufType::String) fail_file(key, "{}: {} is a {}, not a string", f_.path(), key, to_string(v.type));
    return v.s;
  }
  // tokenizer.ggml.token_type for n tokens: an integer array of exactly n entries, or every token
  // normal (llama.cpp's reading) when the key is absent.
  std::vector<int64_t> token_types(size_t n) const {
    if (!has("tokenizer.ggml.token_type")) return std::vector<int64_t>(n, kTokenNormal);
    const GgufValue& v = value("tokenizer.ggml.token_type");
    if (v.type != GgufType::Array || v.ints.size() != n)
      fail_file("tokenizer.ggml.token_type", "{}: tokenizer.ggml.token_type must be an integer array of {} entries",
                f_.path(), n);
    return v.ints;
  }
  const std::vector<std::string>& strings(const std::string& key) const {
    const GgufValue& v = value(key);
    if (v.type != GgufType::Array || v.array_type != GgufType::String)
      fail_file(key, "{}: {} is not an array of strings", f_.path(), key);
    return v.strings;
  }

 private:
  static bool is_integer(GgufType t) {
    switch (t) {
      case GgufType::U8:
      case GgufType::I8:
      case GgufType::U16:
      case GgufType::I16:
      case GgufType::U32:
      case GgufType::I32:
      case GgufType::U64:
      case GgufType::I64:
        return true;
      default:
        return false;
    }
  }
  const GgufFile& f_;
};

// The values of a tensor as floats, after checking its row-major shape.
// The tensor, after checking that it is there with the (row-major) shape the keys imply.
const GgufTensor& tensor_of_shape(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape) {
  const GgufTensor& t = f.tensor(name);
  const std::vector<int64_t> ne(shape.rbegin(), shape.rend());
  if (t.ne != ne) {
    auto dims = [](const std::vector<int64_t>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    fail_file(name, "{}: tensor {} has ne {} but the model's keys imply {}", f.path(), name, dims(t.ne), dims(ne));
  }
  return t;
}

std::vector<float> read_floats(const GgufFile& f, const std::string& name, const std::vector<int64_t>& shape) {
  const GgufTensor& t = tensor_of_shape(f, name, shape);
  const auto n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  if (t.type == static_cast<uint32_t>(GgmlType::F32)) {
    f.read_bytes(t, out.data(), t.nbytes);
  } else if (t.type == static_cast<uint32_t>(GgmlType::F16) || t.type == static_cast<uint32_t>(GgmlType::BF16)) {
    std::vector<uint16_t> half(n);
    f.read_bytes(t, half.data(), t.nbytes);
    const bool f16 = t.type == static_cast<uint32_t>(GgmlType::F16);
    for (size_t i = 0; i < n; ++i) out[i] = f16 ? f16_to_f32(half[i]) : bf16_to_f32(half[i]);
  } else if (t.type == static_cast<uint32_t>(GgmlType::Q8_0) || t.type == static_cast<uint32_t>(GgmlType::Q4_0)) {
    // Dequantized to float32 (the file's rows are whole blocks: the GGUF reader checks the size).
    if (n % kQuantBlockValues != 0)
      fail_file(name, "{}: tensor {} has {} values, not whole blocks of {}", f.path(), name, n, kQuantBlockValues);
    if (t.type == static_cast<uint32_t>(GgmlType::Q8_0)) {
      std::vector<BlockQ8_0> blocks(n / kQuantBlockValues);
      f.read_bytes(t, blocks.data(), t.nbytes);
      dequantize_row_q8_0(blocks, out);
    } else {
      std::vector<BlockQ4_0> blocks(n / kQuantBlockValues);
      f.read_bytes(t, blocks.data(), t.nbytes);
      dequantize_row_q4_0(blocks, out);
    }
  } else {
    fail_unsupported(name, "{}: tensor {} is {}: tformer reads F32, F16, BF16, Q8_0 and Q4_0 tensors", f.path(), name,
                     ggml_type_name(t.type));
  }
  return out;
}

// The tokenizer of a file whose tokenizer.ggml.model is "gpt2" (byte-level BPE). tformer's
// ByteBpeTokenizer needs GPT-2's id layout: ids 0..255 the single bytes, merge k making id
// 256 + k, then the special tokens; a vocabulary without merges whose tokens are single bytes is
// a "char" vocabulary.
std::unique_ptr<Tokenizer> read_gpt2_tokenizer(const GgufFile& f, const GgufReader& r) {
  const auto& tokens = r.strings("tokenizer.ggml.tokens");
  const std::vector<std::string> no_merges;
  const auto& merges = r.has("tokenizer.ggml.merges") ? r.strings("tokenizer.ggml.merges") : no_merges;
  const std::vector<int64_t> types = r.token_types(tokens.size());
  auto token_bytes = [&](size_t id) {
    auto b = gpt2_unicode_to_bytes(tokens[id]);
    if (!b)
      fail_file("tokenizer.ggml.tokens", "{}: tokenizer.ggml.tokens[{}] '{}' is not spelled in GPT-2's byte alphabet",
                f.path(), id, tokens[id]);
    return *b;
  };
  auto is_special = [&](size_t id) { return types[id] == kTokenControl || types[id] == kTokenUserDefined; };
  if (merges.empty() && tokens.size() <= 256 && std::none_of(tokens.begin(), tokens.end(), [&](const std::string& t) {
        const auto b = gpt2_unicode_to_bytes(t);
        return !b || b->size() != 1;
      })) {
    std::vector<unsigned char> alphabet;
    for (size_t i = 0; i < tokens.size(); ++i) alphabet.push_back(static_cast<unsigned char>(token_bytes(i)[0]));
    return std::make_unique<CharTokenizer>(std::move(alphabet));
  }
  // llama.cpp reads a missing pre-tokenizer as "default" (and warns that quality suffers).
  const std::string pre = r.string_or("tokenizer.ggml.pre", "default");
  const auto pattern = pattern_of_gguf_pre(pre);
  if (!pattern)
    fail_unsupported("tokenizer.ggml.pre",
                     "{}: tokenizer.ggml.pre '{}': tformer's byte-level BPE splits text with GPT-2's pattern "
                     "(\"gpt-2\"), llama.cpp's default chain (\"default\"), tiktoken's cl100k_base pattern "
                     "(\"llama-bpe\", \"llama3\", \"llama-v3\") or o200k_base's (\"gpt-4o\", \"llama4\") only",
                     f.path(), pre);
  const size_t n_specials_start = 256 + merges.size();
  if (tokens.size() < n_specials_start)
    fail_file("tokenizer.ggml.tokens", "{}: {} tokens for {} merges: byte-level BPE has 256 byte tokens, one per merge",
              f.path(), tokens.size(), merges.size());
  std::array<unsigned char, 256> byte_of_id{};
  for (size_t id = 0; id < 256; ++id) {
    const std::string b = token_bytes(id);
    if (b.size() != 1)
      fail_unsupported("tokenizer.ggml.tokens",
                       "{}: token {} '{}' is not a single byte: tformer's byte-level BPE needs ids 0..255 to be the "
                       "256 bytes, merge k to make id 256 + k, then the special tokens",
                       f.path(), id, tokens[id]);
    byte_of_id[id] = static_cast<unsigned char>(b[0]);
  }
  std::unordered_map<std::string, TokenId> id_of;
  for (size_t id = 0; id < n_specials_start; ++id) id_of.emplace(tokens[id], static_cast<TokenId>(id));
  std::vector<ByteBpeTokenizer::Merge> pairs;
  pairs.reserve(merges.size());
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string& m = merges[k];
    const size_t space = m.find(' ');
    const auto a = space == std::string::npos ? id_of.end() : id_of.find(m.substr(0, space));
    const auto b = space == std::string::npos ? id_of.end() : id_of.find(m.substr(space + 1));
    if (a == id_of.end() || b == id_of.end() || tokens[256 + k] != m.substr(0, space) + m.substr(space + 1))
      fail_unsupported("tokenizer.ggml.merges",
                       "{}: merge {} '{}' does not make token {} from two tokens: tformer's byte-level BPE needs merge "
                       "k to make id 256 + k",
                       f.path(), k, m, 256 + k);
    pairs.emplace_back(a->second, b->second);
  }
  std::map<std::string, TokenId> specials;
  for (size_t id = n_specials_start; id < tokens.size(); ++id) {
    if (types[id] == kTokenUnused) continue;  // an unused id: no token (a gap among the specials)
    if (!is_special(id))
      fail_unsupported("tokenizer.ggml.tokens",
                       "{}: token {} '{}' comes after the merges' tokens but is not a control token", f.path(), id,
                       tokens[id]);
    specials.emplace(tokens[id], static_cast<TokenId>(id));
  }
  auto bpe = std::make_unique<ByteBpeTokenizer>(byte_of_id, std::move(pairs), std::move(specials));
  bpe->set_pattern(*pattern);
  return bpe;
}

// The file's tokenizer (null when it names none).
// tokenizer.ggml.model "llama": SentencePiece pieces with scores and types, no normalization, a
// space prefix unless add_space_prefix says otherwise, byte fallback when the <0xXX> pieces are there.
std::unique_ptr<Tokenizer> read_llama_tokenizer(const GgufFile& f, const GgufReader& r) {
  const auto& tokens = r.strings("tokenizer.ggml.tokens");
  const GgufValue& scores = r.value("tokenizer.ggml.scores");
  if (scores.type != GgufType::Array || scores.floats.size() != tokens.size())
    fail_file("tokenizer.ggml.scores", "{}: tokenizer.ggml.scores must be a float array of {} entries", f.path(),
              tokens.size());
  const std::vector<int64_t> types = r.token_types(tokens.size());
  std::vector<SentencePieceTokenizer::Piece> pieces;
  bool bytes = false;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] < 1 || types[i] > 6)
      fail_file("tokenizer.ggml.token_type", "{}: token {} has type {} (1 .. 6)", f.path(), i, types[i]);
    const auto type = static_cast<SentencePieceTokenizer::PieceType>(types[i]);
    bytes = bytes || type == SentencePieceTokenizer::PieceType::Byte;
    pieces.push_back({tokens[i], static_cast<float>(scores.floats[i]), type});
  }
  auto flag = [&](const std::string& key, bool otherwise) {
    if (!r.has(key)) return otherwise;
    const GgufValue& v = r.value(key);
    if (v.type != GgufType::Bool) fail_file(key, "{}: {} is not a bool", f.path(), key);
    return v.i != 0;
  };
  const bool space_prefix = flag("tokenizer.ggml.add_space_prefix", true);
  // llama.cpp's defaults for a "llama" vocabulary: BOS 1, put before every text; EOS 2.
  const bool add_bos = flag("tokenizer.ggml.add_bos_token", true);
  const auto special = [&](const std::string& key, int64_t otherwise) -> std::optional<TokenId> {
    const auto n = static_cast<int64_t>(tokens.size());
    if (!r.has(key)) return otherwise < n ? std::optional<TokenId>(static_cast<TokenId>(otherwise)) : std::nullopt;
    return static_cast<TokenId>(r.token_id(key, n));
  };
  const auto bos = special("tokenizer.ggml.bos_token_id", 1), eos = special("tokenizer.ggml.eos_token_id", 2);
  try {
    auto t = std::make_unique<SentencePieceTokenizer>(
        std::move(pieces), SentencePieceTokenizer::Normalizer{"identity", "", space_prefix, false, true}, bytes);
    t->set_llama_cpp_rules(true);
    if (add_bos) t->set_bos(bos);
    t->set_eos(eos);
    return t;
  } catch (const Error& e) {
    fail_file("tokenizer.ggml.tokens", "{}: tokenizer.ggml.tokens: {}", f.path(), e.what());
  }
}

std::unique_ptr<Tokenizer> gguf_tokenizer(const GgufFile& f, const GgufReader& r) {
  const std::string model_kind = r.string_or("tokenizer.ggml.model", "none");
  if (model_kind == "gpt2") return read_gpt2_tokenizer(f, r);
  if (model_kind == "llama") return read_llama_tokenizer(f, r);
  if (model_kind != "none")
    fail_unsupported("tokenizer.ggml.model",
                     "{}: tokenizer.ggml.model '{}': tformer reads \"gpt2\" (byte-level BPE) and \"llama\" "
                     "(SentencePiece) vocabularies",
                     f.path(), model_kind);
  return nullptr;
}

}  // namespace

LoadedModel load_gguf_model(const std::string& path, LoadOptions options) {
  const GgufFile f = GgufFile::open(path);
  const GgufReader r(f);
  const GgufValue& arch_value = r.value("general.architecture");
  if (arch_value.type != GgufType::String)
    fail_file("general.architecture", "{}: general.architecture is not a string", path);
  const std::string arch = arch_value.s;
  if (arch != "gpt2" && arch != "mpt" && arch != "llama" && arch != "stablelm" && arch != "starcoder2")
    fail_unsupported("general.architecture",
                     "{}: general.architecture '{}': tformer loads llama.cpp's gpt2, mpt, llama, stablelm and "
                     "starcoder2 architectures",
                     path, arch);
  const bool gpt2 = arch == "gpt2", fused = gpt2 || arch == "mpt";
  const bool neox = arch == "stablelm" || arch == "starcoder2", starcoder2 = arch == "starcoder2";
  for (const char* k : {"attention.max_alibi_bias", "attention.clamp_kqv"})
    if (r.has((arch + ".") + k) &&
        !(r.value((arch + ".") + k).type == GgufType::F32 && r.value((arch + ".") + k).f == 0))
      fail_unsupported((arch + ".") + k, "{}: {}{} is set: tformer computes neither ALiBi nor clamped projections",
                       path, (arch + "."), k);
  const std::string p = arch + ".";
  for (const char* k : {"rope.scaling.type", "rope.scaling.factor", "attention.sliding_window", "expert_count"})
    if (r.has(p + k))
      fail_unsupported(p + k, "{}: {}{} is set: tformer computes neither rope scaling, sliding windows nor experts",
                       path, p, k);

  ModelConfig c;
  c.context_length = r.count(p + "context_length");
  c.d_model = r.count(p + "embedding_length");
  c.n_layers = r.count(p + "block_count", 4096);
  c.d_ff = r.count(p + "feed_forward_length");
  c.n_heads = r.count(p + "attention.head_count", 65536);
  c.n_kv_heads = r.count_or(p + "attention.head_count_kv", c.n_heads);
  const GgufTensor& embd = f.tensor("token_embd.weight");
  if (embd.ne.size() != 2 || embd.ne[0] != c.d_model)
    fail_file("token_embd.weight", "{}: token_embd.weight must have ne [{}, vocab]", path, c.d_model);
  c.vocab_size = embd.ne[1];
  const bool tied_again = r.has("tformer.tied_embeddings") &&
                          r.value("tformer.tied_embeddings").type == GgufType::Bool &&
                          r.value("tformer.tied_embeddings").i != 0;
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr || tied_again;
  c.norm_placement = NormPlacement::Pre;
  // Any bias in a block: tformer's one bias flag; those the file lacks read as zeros (llama.cpp
  // requires every gpt2 bias and makes every mpt and llama bias optional).
  const bool any_bias = std::any_of(f.tensors().begin(), f.tensors().end(), [](const GgufTensor& t) {
    return t.name.starts_with("blk.") && t.name.ends_with(".bias") && !t.name.ends_with("_norm.bias");
  });
  if (fused) {
    c.norm = NormKind::LayerNorm;
    c.activation = Activation::GeluTanh;
    c.positions = f.find_tensor("position_embd.weight") ? Positions::Learned : Positions::None;
    c.bias = gpt2 || any_bias;
    c.norm_eps = r.real(p + "attention.layer_norm_epsilon");
  } else {
    // llama: RMSNorm + SwiGLU; stablelm: LayerNorm + SwiGLU; starcoder2: LayerNorm + GELU (tanh).
    c.norm = neox ? NormKind::LayerNorm : NormKind::RMSNorm;
    c.activation = starcoder2 ? Activation::GeluTanh : Activation::SwiGLU;
    c.positions = Positions::Rope;
    c.norm_eps = r.real(p + (neox ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"));
    c.rope_base = r.has(p + "rope.freq_base") ? r.real(p + "rope.freq_base") : 10000.0;
    // llama.cpp makes every llama and stablelm bias optional (stablelm has them only on q, k, v)
    // and requires starcoder2's output and feed-forward ones; tformer's one bias flag is on when
    // the file has any, and the ones it lacks are zeros.
    c.bias = starcoder2 || any_bias;
    // The file's rows rotate adjacent pairs (llama) or NeoX's halves (stablelm, starcoder2);
    // tformer.rope_pairing says which order tformer's rows were in.
    const std::string pairing = r.string_or("tformer.rope_pairing", neox ? "halves" : "adjacent");
    if (pairing != "adjacent" && pairing != "halves")
      fail_file("tformer.rope_pairing", "{}: tformer.rope_pairing '{}' is neither adjacent nor halves", path, pairing);
    c.rope_pairing = pairing == "halves" ? RopePairing::Halves : RopePairing::Adjacent;
  }
  if (c.d_model % c.n_heads != 0)
    fail_file(p + "attention.head_count", "{}: embedding_length {} is not a multiple of head_count {}", path, c.d_model,
              c.n_heads);
  if (!fused && r.has(p + "rope.dimension_count") && r.count(p + "rope.dimension_count") != c.d_model / c.n_heads)
    fail_unsupported(p + "rope.dimension_count",
                     "{}: {}rope.dimension_count is not the head width {}: tformer rotates "
                     "whole heads",
                     path, p, c.d_model / c.n_heads);
  try {
    c.validate();
  } catch (const Error& e) {
    fail_file(e.field(), "{}: the model's keys give an invalid config: {}", path, e.what());
  }

  // Every tensor the file has must be one the config accounts for.
  const int64_t d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd;
  // The matrices kept in their stored type (keep, below): every block or half-precision tensor
  // but the token embedding of an untied model, which the lookup reads as float32.
  auto kept_type = [](uint32_t t) {
    const auto type = static_cast<GgmlType>(t);
    return type == GgmlType::F16 || type == GgmlType::BF16 || type == GgmlType::Q8_0 || type == GgmlType::Q4_0;
  };
  const bool lean = options.inference_only;
  if (lean) {
    // An inference-only load holds the stored bytes in place of those matrices' float32 values.
    double bytes = float32_param_bytes(c);
    for (const GgufTensor& t : f.tensors()) {
      const bool matrix = t.name != "position_embd.weight" && t.ne.size() == 2;
      if (!kept_type(t.type) || !matrix || (t.name == "token_embd.weight" && !c.tied_embeddings)) continue;
      if (t.name == "output.weight" && c.tied_embeddings) continue;  // (stablelm's second copy: read, compared)
      bytes += static_cast<double>(t.nbytes) - 4.0 * static_cast<double>(t.ne[0]) * static_cast<double>(t.ne[1]);
    }
    check_bytes_fit_in_memory(bytes, path, "the model's float32 weights, its stored matrices in their own types,");
  } else {
    check_params_fit_in_memory(c, path);
  }

  // The tokenizer before the weights: every key is checked before anything large is allocated.
  LoadedModel out;
  out.tokenizer = gguf_tokenizer(f, r);
  if (out.tokenizer && out.tokenizer->vocab_size() != c.vocab_size)
    fail_file("tokenizer.ggml.tokens", "{}: {} tokens but token_embd.weight has {} rows", path,
              out.tokenizer->vocab_size(), c.vocab_size);
  out.chat_template = r.string_or("tokenizer.chat_template", "");
  // Before the weights are allocated: the tensors whose shapes hold the sizes the keys give
  // (the embedding's vocab x width, above; each layer's output projection and feed-forward down
  // projection, which every architecture has), so that keys claiming more than the file's tensors
  // hold cost nothing.
  if (c.positions == Positions::Learned) tensor_of_shape(f, "position_embd.weight", {c.context_length, d});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string g = "blk." + std::to_string(i) + ".";
    tensor_of_shape(f, g + "attn_output.weight", {d, dq});
    tensor_of_shape(f, g + "ffn_down.weight", {d, c.d_ff});
  }
  out.model = std::make_unique<Model>(c);
  {
    // Room for the matrices kept in their stored types (keep, below), in one buffer of 2 MB pages:
    // at most every such tensor's bytes, each of up to three parts (a fused q/k/v) aligned.
    int64_t stored = 0;
    for (const GgufTensor& t : f.tensors())
      if (kept_type(t.type)) stored += static_cast<int64_t>(t.nbytes) + 3 * static_cast<int64_t>(kAlignment);
    out.model->reserve_stored_weights(stored);
  }
  auto& arena = out.model->params();
  std::map<std::string, bool> used;
  for (const auto& t : f.tensors()) used[t.name] = false;
  auto take = [&](const std::string& name, const std::vector<int64_t>& shape) {
    used[name] = true;
    return read_floats(f, name, shape);
  };
  auto put = [&](const std::string& name, const std::vector<float>& v, size_t from = 0) {
    const auto* e = arena.find(name);
    TF_CHECK(e != nullptr, "gguf import: the model has no tensor '{}'", name);
    const auto n = static_cast<size_t>(e->shape.numel());
    TF_CHECK(from + n <= v.size(), "gguf import: tensor '{}' is short", name);
    std::copy(v.begin() + static_cast<std::ptrdiff_t>(from), v.begin() + static_cast<std::ptrdiff_t>(from + n),
              arena.data() + e->offset);
  };
  auto copy = [&](const std::string& gguf_name, const std::string& name, const std::vector<int64_t>& shape) {
    put(name, take(gguf_name, shape));
  };
  // A bias gpt2 requires; mpt's are optional (absent: the zeros the model was built with).
  auto bias = [&](const std::string& gguf_name, const std::string& name, const std::vector<int64_t>& shape) {
    if (gpt2 || f.find_tensor(gguf_name)) copy(gguf_name, name, shape);
  };
  // Rows from the file's pairing to the model's (permute_rope_rows: inverse = true takes adjacent
  // to halves).
  const bool permute = !fused && (c.rope_pairing == RopePairing::Halves) != neox;
  // A matrix whose file type the kernels multiply as stored (F16, BF16, Q8_0, Q4_0) is kept in
  // that type too (rows row0.. of the file's tensor, q and k rows in the model's pairing): the
  // forward reads it as stored (kernels/qlinear.h); the arena's dequantized values serve the
  // embedding lookup, training and export. True when the matrix is kept stored, and then an
  // inference-only load writes no float32 copy of it (each copy below is skipped when lean and
  // kept). `shape` is the whole tensor's, checked as the float copy checks it (a file whose tensor
  // is not that shape is refused naming both).
  auto keep = [&](const std::string& gguf_name, const std::string& name, const std::vector<int64_t>& shape,
                  int64_t row0, int64_t rows, int64_t heads) -> bool {
    const GgufTensor& t = tensor_of_shape(f, gguf_name, shape);
    used[gguf_name] = true;
    std::optional<WeightType> type;
    switch (static_cast<GgmlType>(t.type)) {
      case GgmlType::F16:
        type = WeightType::F16;
        break;
      case GgmlType::BF16:
        type = WeightType::BF16;
        break;
      case GgmlType::Q8_0:
        type = WeightType::Q8_0;
        break;
      case GgmlType::Q4_0:
        type = WeightType::Q4_0;
        break;
      default:
        return false;
    }
    const int64_t row_bytes = weight_row_bytes(*type, t.ne[0]);
    std::vector<uint8_t> all(static_cast<size_t>(t.nbytes));
    f.read_bytes(t, all.data(), t.nbytes);
    if ((row0 + rows) * row_bytes > static_cast<int64_t>(all.size()))
      fail_file(gguf_name, "{}: tensor {} holds {} bytes, short of {} rows of {}", path, gguf_name, all.size(),
                row0 + rows, row_bytes);
    std::vector<uint8_t> bytes(all.begin() + row0 * row_bytes, all.begin() + (row0 + rows) * row_bytes);
    if (heads > 0 && permute) bytes = permute_rope_rows(bytes.data(), heads, hd, row_bytes, !neox);
    out.model->set_stored_weight(name, *type, std::move(bytes));
    return true;
  };
  // A matrix copied as float32 and kept stored: the copy skipped when lean and kept.
  auto copy_keep = [&](const std::string& gguf_name, const std::string& name, const std::vector<int64_t>& shape,
                       int64_t rows) {
    if (!keep(gguf_name, name, shape, 0, rows, 0) || !lean) copy(gguf_name, name, shape);
  };
  if (c.tied_embeddings)
    copy_keep("token_embd.weight", "tok_embeddings.weight", {c.vocab_size, d}, c.vocab_size);
  else
    copy("token_embd.weight", "tok_embeddings.weight", {c.vocab_size, d});
  if (c.positions == Positions::Learned) copy("position_embd.weight", "pos_embeddings.weight", {c.context_length, d});
  auto rope_rows = [&](std::vector<float> v, int64_t heads, int64_t cols) {
    return permute ? permute_rope_rows(v.data(), heads, hd, cols, !neox) : v;
  };
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string t = "layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    copy(g + "attn_norm.weight", t + "attn_norm.weight", {d});
    copy(g + "ffn_norm.weight", t + "ffn_norm.weight", {d});
    if (neox) {
      copy(g + "attn_norm.bias", t + "attn_norm.bias", {d});
      copy(g + "ffn_norm.bias", t + "ffn_norm.bias", {d});
    }
    copy_keep(g + "attn_output.weight", t + "attn.wo.weight", {d, dq}, d);
    copy_keep(g + "ffn_down.weight", t + "ffn.w2.weight", {d, c.d_ff}, d);
    if (fused) {
      bias(g + "attn_norm.bias", t + "attn_norm.bias", {d});
      bias(g + "ffn_norm.bias", t + "ffn_norm.bias", {d});
      const std::vector<int64_t> qkv_shape = {dq + 2 * dkv, d};
      const bool kept = keep(g + "attn_qkv.weight", t + "attn.wq.weight", qkv_shape, 0, dq, 0);
      keep(g + "attn_qkv.weight", t + "attn.wk.weight", qkv_shape, dq, dkv, 0);
      keep(g + "attn_qkv.weight", t + "attn.wv.weight", qkv_shape, dq + dkv, dkv, 0);
      if (!(lean && kept)) {
        const auto qkv = take(g + "attn_qkv.weight", {dq + 2 * dkv, d});
        put(t + "attn.wq.weight", qkv, 0);
        put(t + "attn.wk.weight", qkv, static_cast<size_t>(dq * d));
        put(t + "attn.wv.weight", qkv, static_cast<size_t>((dq + dkv) * d));
      }
      if (gpt2 || f.find_tensor(g + "attn_qkv.bias")) {
        const auto qkv_b = take(g + "attn_qkv.bias", {dq + 2 * dkv});
        put(t + "attn.wq.bias", qkv_b, 0);
        put(t + "attn.wk.bias", qkv_b, static_cast<size_t>(dq));
        put(t + "attn.wv.bias", qkv_b, static_cast<size_t>(dq + dkv));
      }
      bias(g + "attn_output.bias", t + "attn.wo.bias", {d});
      copy_keep(g + "ffn_up.weight", t + "ffn.w1.weight", {c.d_ff, d}, c.d_ff);
      bias(g + "ffn_up.bias", t + "ffn.w1.bias", {c.d_ff});
      bias(g + "ffn_down.bias", t + "ffn.w2.bias", {d});
    } else {
      const bool kept_q = keep(g + "attn_q.weight", t + "attn.wq.weight", {dq, d}, 0, dq, c.n_heads);
      const bool kept_k = keep(g + "attn_k.weight", t + "attn.wk.weight", {dkv, d}, 0, dkv, c.n_kv_heads);
      if (!(lean && kept_q)) put(t + "attn.wq.weight", rope_rows(take(g + "attn_q.weight", {dq, d}), c.n_heads, d));
      if (!(lean && kept_k)) put(t + "attn.wk.weight", rope_rows(take(g + "attn_k.weight", {dkv, d}), c.n_kv_heads, d));
      copy_keep(g + "attn_v.weight", t + "attn.wv.weight", {dkv, d}, dkv);
      if (starcoder2) {
        copy_keep(g + "ffn_up.weight", t + "ffn.w1.weight", {c.d_ff, d}, c.d_ff);
      } else {
        copy_keep(g + "ffn_gate.weight", t + "ffn.w1.weight", {c.d_ff, d}, c.d_ff);
        copy_keep(g + "ffn_up.weight", t + "ffn.w3.weight", {c.d_ff, d}, c.d_ff);
      }
      // Each bias the file has (a missing one stays zero; starcoder2's output and feed-forward
      // ones must be there); q and k in the model's row order.
      const char* up = starcoder2 ? "ffn.w1.bias" : "ffn.w3.bias";
      for (const auto& [gn, tn, n, heads] : {std::tuple{"attn_q.bias", "attn.wq.bias", dq, c.n_heads},
                                             std::tuple{"attn_k.bias", "attn.wk.bias", dkv, c.n_kv_heads},
                                             std::tuple{"attn_v.bias", "attn.wv.bias", dkv, int64_t{0}},
                                             std::tuple{"attn_output.bias", "attn.wo.bias", d, int64_t{-1}},
                                             std::tuple{"ffn_gate.bias", "ffn.w1.bias", c.d_ff, int64_t{0}},
                                             std::tuple{"ffn_up.bias", up, c.d_ff, int64_t{-1}},
                                             std::tuple{"ffn_down.bias", "ffn.w2.bias", d, int64_t{-1}}}) {
        if (!f.find_tensor(g + gn) && !(starcoder2 && heads < 0)) continue;
        auto b = take(g + gn, {n});
        if (heads > 0) b = rope_rows(std::move(b), heads, 1);
        put(t + tn, b);
      }
    }
  }
  copy("output_norm.weight", "norm.weight", {d});
  if (fused) bias("output_norm.bias", "norm.bias", {d});
  if (neox) copy("output_norm.bias", "norm.bias", {d});
  if (!c.tied_embeddings) {
    copy_keep("output.weight", "output.weight", {c.vocab_size, d}, c.vocab_size);
  }
  if (tied_again && f.find_tensor("output.weight")) {
    // Written twice for stablelm: it must be the embedding again, byte for byte (compared as
    // stored: no float32 copy of either, which an inference-only load does not count).
    const GgufTensor& out_t = f.tensor("output.weight");
    auto bytes_of = [&](const GgufTensor& t) {
      std::vector<uint8_t> b(static_cast<size_t>(t.nbytes));
      f.read_bytes(t, b.data(), t.nbytes);
      return b;
    };
    if (out_t.ne != embd.ne || out_t.type != embd.type || out_t.nbytes != embd.nbytes ||
        bytes_of(out_t) != bytes_of(embd))
      fail_file("tformer.tied_embeddings",
                "{}: tformer.tied_embeddings is set but output.weight is not token_embd.weight", path);
    used["output.weight"] = true;
  }
  for (const auto& [name, was_used] : used)
    if (!was_used)
      fail_unsupported(name, "{}: tensor {} is not part of llama.cpp's {} architecture as tformer computes it", path,
                       name, arch);
  if (lean) out.model->release_float_copies();
  return out;
}

std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  return gguf_tokenizer(f, GgufReader(f));
}

}  // namespace tformer
