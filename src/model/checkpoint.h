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
};

// Writes atomically (temporary file, then rename). tokenizer may be null.
void save_model(const std::string& path, Model& model, const Tokenizer* tokenizer);
// Validates the whole file first: metadata present and parseable, every tensor the config implies
// present with its shape, nothing extra. Errors name the file and the tensor or key.
LoadedModel load_model(const std::string& path);

}  // namespace tformer
