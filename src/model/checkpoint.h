// A model file: a safetensors file whose header metadata holds "config" (the ModelConfig JSON as a
// string) and "tokenizer" (the tokenizer's JSON as a string), and whose tensors are the model's
// parameters under their checkpoint names (model.h, docs/checkpoint-format.md).
#pragma once

#include <memory>
#include <string>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tformer {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the file carries none
  std::string chat_template;             // empty when the file carries none
};

// inference_only (generate, logits, eval, serve): the model will only run forward passes, so the
// matrices a file keeps in a stored type (F16, BF16, Q8_0, Q4_0) never get float32 copies: the
// load writes none (their arena pages stay untouched, costing no memory), the memory check counts
// the stored bytes instead of their float32 size, and the model comes back with its float copies
// released (BasicModel::release_float_copies: params() is then an Error). A file of float32
// weights loads as always.
struct LoadOptions {
  bool inference_only = false;
};

// The tokenizer a model file carries (its header only is read; a GGUF file is read whole): an
// Error naming the file when it carries none.
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& path);
// `--tokenizer` as every command reads it: a path ending in ".safetensors" is a model file whose
// tokenizer is used; anything else goes to tokenizer_by_name (gpt2, char, bpe:CODES,
// byte-bpe:VOCAB, or a saved tokenizer JSON file).
std::unique_ptr<Tokenizer> tokenizer_by_name_or_model(const std::string& name, const std::string& gpt2_dir = "");

// Writes through core's atomic writer (core/file_io.h): a temporary beside `path` with a name no
// other writer uses, flushed and fsync'd, renamed over `path`, the folder fsync'd; on any failure
// the temporary is removed and `path` left as it was. tokenizer may be null; a non-empty
// chat_template (a Jinja template, as GGUF's tokenizer.chat_template) is kept as "chat_template".
void save_model(const std::string& path, Model& model, const Tokenizer* tokenizer,
                const std::string& chat_template = "");
// Validates the whole file first: metadata present and parseable, every tensor the config implies
// present with its shape, nothing extra. Errors name the file and the tensor or key. A GGUF file
// (known by its magic, whatever its name) is read by load_gguf_model (model/gguf_model.h).
LoadedModel load_model(const std::string& path, LoadOptions options = {});

}  // namespace tformer
