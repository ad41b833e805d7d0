// tformer models in llama.cpp's GGUF files, out and in (docs/gguf.md has the whole mapping).
//
// Export picks the llama.cpp architecture that computes exactly what the config computes:
//   gpt2   pre-LN, LayerNorm, GELU, learned or sinusoidal positions (written as the position
//          table), biases (bias: false is written as zero biases: gpt2 requires the tensors).
//          llama.cpp's gpt2 computes GELU in its tanh form: an erf-GELU model ("gelu") is written
//          unchanged and the report says how far the tanh form moves its next-token probabilities.
//   mpt    the same without positions (positions: "none"); its biases are optional, so bias: false
//          writes none; ALiBi stays off.
//   llama  pre-LN, RMSNorm, SwiGLU, RoPE, MHA/GQA/MQA, with or without biases. llama.cpp rotates
//          adjacent pairs (2i, 2i+1): a "halves" model has the rows of each query and key head
//          permuted (row 2i <- i, row 2i+1 <- i + hd/2), which leaves every score unchanged.
//   stablelm  pre-LN, LayerNorm, SwiGLU, RoPE, bias: false (stablelm has biases only on q, k, v).
//   starcoder2  pre-LN, LayerNorm, GELU, RoPE, biases (zeros for bias: false, as for gpt2).
//          Both rotate NeoX's way (rows i, i + hd/2: tformer's "halves"); an "adjacent" model has
//          its query and key rows permuted the other way.
// tformer.rope_pairing records the pairing, so that tformer reads the rows back in their order.
// Anything else (post-LN, LayerNorm + SwiGLU without RoPE or with biases, RMSNorm with GELU or
// without RoPE) is refused with an error that names the config key no llama.cpp architecture
// computes.
//
// Tensor names are llama.cpp's (token_embd.weight, blk.N.attn_q.weight, ...); matrices are written
// in the chosen type (F32, F16 or BF16), norms and biases always in F32, as llama.cpp's converter does.
//
// The tokenizer goes into tokenizer.ggml.*:
//   "byte-bpe"  model "gpt2" with tokens spelled in GPT-2's byte alphabet, merges, pre "gpt-2" (or
//               "default" for a vocabulary with llama.cpp's default pre-tokenizer),
//               special tokens as control tokens, <|endoftext|> as BOS and EOS (end_of_text_for).
//   "char"      model "gpt2" with the single-byte tokens (id order) and no merges: llama.cpp then
//               gives one token per byte, as tformer does.
//   "sentencepiece"  model "llama" (pieces, scores, types, add_space_prefix, BOS and EOS ids,
//               add_bos_token when the tokenizer has a BOS), for models without normalization
//               rules, with whitespace kept and byte fallback; others are refused.
//   "bpe"       (Sennrich) refused: its ids leave the space between two words implicit, which no
//               llama.cpp tokenizer reproduces.
//
// Import reads llama.cpp's gpt2, mpt, llama, stablelm and starcoder2 architectures (F32, F16 and
// BF16 tensors) with the tokenizer the file carries ("gpt2" byte-level BPE in GPT-2's layout with
// pre "gpt-2" or "default", "llama" SentencePiece with its BOS and EOS); unknown architectures,
// tensor types, tensors, tokenizers and missing keys are errors naming them. Both directions keep a
// chat template (tokenizer.chat_template).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tformer {

// The type of the weight matrices (norms, biases and other 1-D tensors stay F32). Q8_0 and Q4_0
// are ggml's block formats (kernels/quant.h), quantized as ggml's reference quantizer does; they
// leave the position table in F32, as llama-quantize does, and so any matrix whose rows are not
// whole blocks of 32 (a note says which).
enum class GgufExportType { F32, F16, BF16, Q8_0, Q4_0 };
// "f32" | "f16" | "bf16" | "q8_0" | "q4_0"; anything else is an error naming `flag`.
GgufExportType parse_gguf_export_type(const std::string& s, const std::string& flag = "--type");

struct GgufExportReport {
  std::string architecture;  // "gpt2", "mpt", "llama", "stablelm" or "starcoder2"
  int64_t n_tensors = 0;
  uint64_t file_bytes = 0;
  // Set when the model uses erf GELU and llama.cpp computes the tanh form: the largest change of
  // any next-token probability over the probe batch, and its size.
  bool gelu_changed = false;
  double gelu_max_prob_change = 0;
  int64_t probe_tokens = 0;
  // What the export changed or filled in, one line each ("bias: false written as zero biases").
  std::vector<std::string> notes;
};

// The llama.cpp architecture for a config, or an Unsupported error naming the config key.
std::string gguf_architecture_for(const ModelConfig& config);

// Writes `model` (with `tokenizer`, required, and `chat_template`, written when not empty) as a
// GGUF version 3 file, atomically (core/file_io.h).
// `output_type`, when given, is the type of the output matrix instead of `type` (for a model with
// tied embeddings, of token_embd.weight, which is then the output matrix): 4-bit logits cost a
// small model more than 4-bit elsewhere (README, quantized files).
GgufExportReport export_gguf(const std::string& path, Model& model, const Tokenizer& tokenizer,
                             const std::string& chat_template, GgufExportType type,
                             std::optional<GgufExportType> output_type = std::nullopt);

// The EOS id an exported file names: the tokenizer's <|endoftext|>, or for a vocabulary without
// one the single-byte token least likely in text (NUL, a control byte, DEL, a high byte, a rare
// symbol; export's report says which): llama.cpp stops generating at its EOS, 11 when none is named.
TokenId end_of_text_for(const Tokenizer& tokenizer);

// True when the file starts with the GGUF magic.
bool is_gguf_file(const std::string& path);

// A model and its tokenizer from a GGUF file of architecture gpt2, mpt, llama, stablelm or starcoder2. Validates every
// key and tensor first, and refuses a model whose float32 weights exceed the memory available, naming the size, before
// allocating them (inference_only: the memory it will hold, its stored matrices' bytes in place of their float32
// size; model/checkpoint.h).
LoadedModel load_gguf_model(const std::string& path, LoadOptions options = {});
// Only the tokenizer of a GGUF file (its metadata; no weight is read). Null when it names none.
std::unique_ptr<Tokenizer> load_gguf_tokenizer(const std::string& path);

}  // namespace tformer
