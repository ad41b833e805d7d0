#include "model/checkpoint.h"

#include "core/error.h"
#include "io/safetensors.h"

namespace tformer {

void save_model(const std::string& path, Model& model, const Tokenizer* tokenizer) {
  std::map<std::string, std::string> metadata{{"config", model.config().to_json().dump()}};
  if (tokenizer) metadata["tokenizer"] = tokenizer->to_json().dump();
  write_arena(path, model.params(), metadata);
}

namespace {
std::unique_ptr<Tokenizer> tokenizer_from_metadata(const std::string& path, const std::string& text) {
  try {
    return tokenizer_from_json(nlohmann::json::parse(text));
  } catch (const nlohmann::json::parse_error& e) {
    fail_file("tokenizer", "{}: __metadata__ \"tokenizer\" is not valid JSON: {}", path, e.what());
  }
}
}  // namespace

std::unique_ptr<Tokenizer> load_model_tokenizer(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  auto it = file.metadata().find("tokenizer");
  if (it == file.metadata().end())
    fail_file("tokenizer", "{}: the model file carries no tokenizer (no \"tokenizer\" in __metadata__)", path);
  return tokenizer_from_metadata(path, it->second);
}

std::unique_ptr<Tokenizer> tokenizer_by_name_or_model(const std::string& name, const std::string& gpt2_dir) {
  if (name.ends_with(".safetensors")) return load_model_tokenizer(name);
  return tokenizer_by_name(name, gpt2_dir);
}

LoadedModel load_model(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  const auto& meta = file.metadata();
  auto it = meta.find("config");
  if (it == meta.end())
    fail_file("config", "{}: no \"config\" in the header's __metadata__; not a tformer model file", path);
  nlohmann::json config_json;
  try {
    config_json = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::parse_error& e) {
    fail_file("config", "{}: __metadata__ \"config\" is not valid JSON: {}", path, e.what());
  }
  LoadedModel out;
  out.model = std::make_unique<Model>(ModelConfig::from_json(config_json, path + ": __metadata__ config"));
  read_arena(file, out.model->params());
  if (auto t = meta.find("tokenizer"); t != meta.end()) {
    out.tokenizer = tokenizer_from_metadata(path, t->second);
    if (out.tokenizer->vocab_size() != out.model->config().vocab_size)
      fail_file("vocab_size", "{}: the tokenizer has {} tokens but the model's vocab_size is {}", path,
                out.tokenizer->vocab_size(), out.model->config().vocab_size);
  }
  return out;
}

}  // namespace tformer
