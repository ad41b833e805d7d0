// The Hugging Face folders the fuzz targets hf_config, hf_tokenizer and shard_index import
// (model/hf_import.h, import_hf): each fuzzes one file of a folder whose other files are fixed and
// valid, written once per process under $TMPDIR. The fixed model is a tiny GPT-2 (vocab 260, width
// 4, one layer of one head, 4 positions: kGpt2Config) or a tiny Llama (kLlamaConfig), with weights
// in model.safetensors or split over two shards (model-0000k-of-00002.safetensors, as
// kShardIndex lists them).
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"

namespace tformer::fuzz {

constexpr const char* kGpt2Config =
    R"({"model_type": "gpt2", "vocab_size": 260, "n_embd": 4, "n_layer": 1, "n_head": 1, "n_positions": 4})";
constexpr const char* kLlamaConfig =
    R"({"model_type": "llama", "vocab_size": 260, "hidden_size": 4, "num_hidden_layers": 1, )"
    R"("num_attention_heads": 1, "intermediate_size": 8})";

struct HfTensor {
  std::string name;
  std::vector<int64_t> shape;
};

inline std::vector<HfTensor> hf_tensors(bool llama) {
  if (llama)
    return {{"model.embed_tokens.weight", {260, 4}},
            {"model.layers.0.input_layernorm.weight", {4}},
            {"model.layers.0.post_attention_layernorm.weight", {4}},
            {"model.layers.0.self_attn.q_proj.weight", {4, 4}},
            {"model.layers.0.self_attn.k_proj.weight", {4, 4}},
            {"model.layers.0.self_attn.v_proj.weight", {4, 4}},
            {"model.layers.0.self_attn.o_proj.weight", {4, 4}},
            {"model.layers.0.mlp.gate_proj.weight", {8, 4}},
            {"model.layers.0.mlp.up_proj.weight", {8, 4}},
            {"model.layers.0.mlp.down_proj.weight", {4, 8}},
            {"model.norm.weight", {4}},
            {"lm_head.weight", {260, 4}}};
  const std::string h = "transformer.h.0.";
  return {{"transformer.wte.weight", {260, 4}},
          {"transformer.wpe.weight", {4, 4}},
          {h + "ln_1.weight", {4}},
          {h + "ln_1.bias", {4}},
          {h + "attn.c_attn.weight", {4, 12}},
          {h + "attn.c_attn.bias", {12}},
          {h + "attn.c_proj.weight", {4, 4}},
          {h + "attn.c_proj.bias", {4}},
          {h + "ln_2.weight", {4}},
          {h + "ln_2.bias", {4}},
          {h + "mlp.c_fc.weight", {4, 16}},
          {h + "mlp.c_fc.bias", {16}},
          {h + "mlp.c_proj.weight", {16, 4}},
          {h + "mlp.c_proj.bias", {4}},
          {"transformer.ln_f.weight", {4}},
          {"transformer.ln_f.bias", {4}}};
}

// Writes the tensors (first `from` .. `to` of hf_tensors) as one safetensors file.
inline void write_hf_weights(const std::string& path, bool llama, size_t from, size_t to) {
  const std::vector<HfTensor> all = hf_tensors(llama);
  std::vector<std::vector<float>> values;
  std::vector<TensorToWrite> out;
  for (size_t i = from; i < to && i < all.size(); ++i) {
    int64_t n = 1;
    for (const int64_t d : all[i].shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t k = 0; k < v.size(); ++k) v[k] = 0.02f * std::sin(static_cast<float>(k * 7 + i));
    values.push_back(std::move(v));
  }
  for (size_t i = from; i < to && i < all.size(); ++i)
    out.push_back({all[i].name, all[i].shape, values[i - from].data()});
  write_safetensors(path, out);
}

// A folder holding the fixed files of a tiny model: config.json (unless fuzzed), the weights in one
// file or (shards) two, and no tokenizer. Written once per process and kind.
inline std::string hf_folder(const char* tag, bool llama, bool shards, bool with_config) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/tformer-fuzz-" + std::to_string(getpid()) + "-" +
                          tag + (llama ? "-llama" : "-gpt2");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) std::abort();
  remove_at_exit(dir);
  if (with_config) write_in(dir, "config.json", llama ? kLlamaConfig : kGpt2Config);
  if (shards) {
    write_hf_weights(dir + "/model-00001-of-00002.safetensors", llama, 0, 4);
    write_hf_weights(dir + "/model-00002-of-00002.safetensors", llama, 4, 100);
  } else {
    write_hf_weights(dir + "/model.safetensors", llama, 0, 100);
  }
  return dir;
}

// The input written as `file` into the tiny Llama's folder when it holds `llama_word`, else into the
// tiny GPT-2's; returns the folder.
inline const std::string& hf_input_in(const std::string& gpt2, const std::string& llama, std::string_view input,
                                      const char* llama_word, const char* file) {
  const std::string& dir = input.find(llama_word) != std::string_view::npos ? llama : gpt2;
  write_in(dir, file, input);
  return dir;
}

}  // namespace tformer::fuzz
