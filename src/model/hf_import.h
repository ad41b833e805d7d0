// Hugging Face model folders into tformer models: `tformer import --from hf DIR --out M.safetensors`.
//
// DIR holds config.json, the weights (model.safetensors, or shards model-0000k-of-0000n.safetensors
// listed in model.safetensors.index.json's "weight_map"; F32, F16 or BF16) and a tokenizer
// (tokenizer.json, or vocab.json + merges.txt, or SentencePiece's tokenizer.model for a BPE model;
// tokenizer_config.json's chat_template, or chat_template.jinja, is kept).
//
//   GPT2LMHeadModel (model_type "gpt2")   pre-LN, LayerNorm, learned positions, biases.
//     transformer.wte / wpe / h.N.ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj / ln_f.
//     Conv1D weights are stored [in, out] (y = x W + b) and are transposed to tformer's [out, in];
//     c_attn's output columns are q, then k, then v. activation_function "gelu_new" and
//     "gelu_pytorch_tanh" are the tanh form, "gelu" the erf form. lm_head is wte (tied).
//   LlamaForCausalLM (model_type "llama")  pre-LN, RMSNorm, SwiGLU, RoPE in rotate-half form
//     (tformer's "halves" pairing, inv_freq = theta^(-2i/head_dim)), GQA.
//     model.embed_tokens / layers.N.input_layernorm, self_attn.{q,k,v,o}_proj,
//     post_attention_layernorm, mlp.{gate,up,down}_proj / norm / lm_head (tied when
//     tie_word_embeddings). gate_proj is the SiLU side (tformer's ffn.w1), up_proj ffn.w3,
//     down_proj ffn.w2. attention_bias and mlp_bias: tformer's one bias flag, with zeros for the
//     biases the folder does not have.
//
// Anything else is refused by name: another model_type, rope_scaling, a sliding window, a head_dim
// that is not hidden_size / num_attention_heads, an activation tformer does not compute, an unknown
// or missing tensor, a tensor of the wrong shape or dtype.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tformer {

struct HfModel {
  std::string model_type;  // "gpt2" or "llama"
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the folder has none tformer reads (noted)
  std::string chat_template;
  std::vector<std::string> notes;  // what the import filled in or left out, one line each
};

HfModel import_hf(const std::string& dir);

}  // namespace tformer
