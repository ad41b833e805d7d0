#include "model/checkpoint.h"

#include "core/error.h"
#include "io/safetensors.h"
#include "model/gguf_model.h"
#include "model/params.h"

namespace tformer {

void save_model(const std::string& path, Model& model, const Tokenizer* tokenizer, const std::string& chat_template) {
  std::map<std::string, std::string> metadata{{"config", model.config().to_json().dump()}};
  if (tokenizer) metadata["tokenizer"] = tokenizer->to_json().dump();
  if (!chat_template.empty()) metadata["chat_template"] = chat_template;
  write_arena(path, model.params(), metadata);
}

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& path) {
  if (is_gguf_file(path)) {
    auto tok = load_gguf_tokenizer(path);
    if (!tok) fail_file(path, "{}: the model file carries no tokenizer", path);
    return tok;
  }
  return tokenizer_from_json(
      SafetensorsFile::open(path).metadata_json("tokenizer", "the model file carries no tokenizer"));
}

std::unique_ptr<Tokenizer> tokenizer_by_name_or_model(const std::string& name, const std::string& gpt2_dir) {
  if (name.ends_with(".safetensors") || is_gguf_file(name)) return load_model_tokenizer(name);
  return tokenizer_by_name(name, gpt2_dir);
}

LoadedModel load_model(const std::string& path, LoadOptions options) {
  if (is_gguf_file(path)) return load_gguf_model(path, options);
  const SafetensorsFile file = SafetensorsFile::open(path);
  const nlohmann::json config_json = file.metadata_json("config", "not a tformer model file");
  ModelConfig config = ModelConfig::from_json(config_json, path + ": __metadata__ config");
  // The file's tensors are checked against the config's before the weights are allocated, so that
  // a config claiming more than the file holds costs nothing: every layer has tensors of its own.
  config.validate();
  if (config.n_layers > static_cast<int64_t>(file.tensors().size()))
    fail_file("n_layers", "{}: the config has {} layers but the file holds only {} tensors", path, config.n_layers,
              file.tensors().size());
  {
    Arena layout;
    declare_model_params(layout, config);
    check_arena_tensors(file, layout);
  }
  LoadedModel out;
  out.model = std::make_unique<Model>(config);
  read_arena(file, out.model->params());
  if (file.metadata().contains("tokenizer")) {
    out.tokenizer = tokenizer_from_json(file.metadata_json("tokenizer", ""));
    if (out.tokenizer->vocab_size() != out.model->config().vocab_size)
      fail_file("vocab_size", "{}: the tokenizer has {} tokens but the model's vocab_size is {}", path,
                out.tokenizer->vocab_size(), out.model->config().vocab_size);
  }
  if (const auto it = file.metadata().find("chat_template"); it != file.metadata().end())
    out.chat_template = it->second;
  if (options.inference_only) out.model->release_float_copies();
  return out;
}

}  // namespace tformer
