#include "model/hf_import.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "core/float16.h"
#include "io/safetensors.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/sentencepiece.h"

namespace tformer {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const std::string& path) {
  try {
    return nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail_file(path, "{}: not valid JSON: {}", path, e.what());
  }
}

// config.json's values, each checked for its type; errors name the file and the key.
class HfConfig {
 public:
  HfConfig(nlohmann::json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {
    if (!j_.is_object()) fail_file(path_, "{}: not a JSON object", path_);
  }
  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  int64_t count(const char* key) const {
    if (!has(key)) fail_file(key, "{}: missing \"{}\"", path_, key);
    const auto& v = j_[key];
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 || v.get<int64_t>() > (int64_t{1} << 31))
      fail_file(key, "{}: \"{}\" must be a positive integer, got {}", path_, key, v.dump());
    return v.get<int64_t>();
  }
  int64_t count_or(const char* key, int64_t fallback) const { return has(key) ? count(key) : fallback; }
  double real_or(const char* key, double fallback) const {
    if (!has(key)) return fallback;
    const auto& v = j_[key];
    if (!v.is_number()) fail_file(key, "{}: \"{}\" must be a number, got {}", path_, key, v.dump());
    return v.get<double>();
  }
  bool flag_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) fail_file(key, "{}: \"{}\" must be true or false, got {}", path_, key, j_[key].dump());
    return j_[key].get<bool>();
  }
  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_string()) fail_file(key, "{}: \"{}\" must be a string, got {}", path_, key, j_[key].dump());
    return j_[key].get<std::string>();
  }
  // A setting tformer does not compute: refused unless absent, null or equal to `neutral`.
  void refuse_unless(const char* key, const nlohmann::json& neutral, const char* why) const {
    if (has(key) && j_[key] != neutral) fail_unsupported(key, "{}: \"{}\" = {}: {}", path_, key, j_[key].dump(), why);
  }
  const std::string& path() const { return path_; }

 private:
  nlohmann::json j_;
  std::string path_;
};

// The folder's weights: one safetensors file, or the shards its index names.
class HfWeights {
 public:
  explicit HfWeights(const fs::path& dir) {
    const fs::path single = dir / "model.safetensors", index = dir / "model.safetensors.index.json";
    if (fs::exists(index)) {
      const nlohmann::json j = read_json(index.string());
      if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
        fail_file(index.string(), "{}: no \"weight_map\" object", index.string());
      std::map<std::string, size_t> shard_of_file;
      for (const auto& [name, file] : j["weight_map"].items()) {
        if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos)
          fail_file(name, "{}: weight_map[\"{}\"] must be a file name in the folder", index.string(), name);
        const std::string f = file.get<std::string>();
        auto [it, added] = shard_of_file.emplace(f, files_.size());
        if (added) files_.push_back(SafetensorsFile::open((dir / f).string()));
        where_[name] = it->second;
      }
      for (size_t i = 0; i < files_.size(); ++i)
        for (const auto& t : files_[i].tensors()) {
          const auto it = where_.find(t.name);
          if (it == where_.end() || it->second != i)
            fail_file(t.name, "{}: tensor {} is not listed for this file in {}", files_[i].path(), t.name,
                      index.string());
        }
    } else if (fs::exists(single)) {
      files_.push_back(SafetensorsFile::open(single.string()));
      for (const auto& t : files_[0].tensors()) where_[t.name] = 0;
    } else {
      fail_file(dir.string(), "{}: neither model.safetensors nor model.safetensors.index.json", dir.string());
    }
    for (const auto& [name, file] : where_) {
      (void)file;
      unused_.insert(name);
    }
  }

  bool has(const std::string& name) const { return where_.contains(name); }
  // The values of every tensor of every file.
  uint64_t values() const {
    uint64_t n = 0;
    for (const auto& f : files_)
      for (const auto& t : f.tensors()) n += static_cast<uint64_t>(t.numel());
    return n;
  }
  // Marks a tensor as accounted for without reading it (a saved buffer such as a causal mask).
  void skip(const std::string& name) { unused_.erase(name); }
  const std::set<std::string>& unused() const { return unused_; }

  // The tensor, after checking that it is there with this row-major shape.
  const SafetensorsTensor& check(const std::string& name, const std::vector<int64_t>& shape) const {
    const auto it = where_.find(name);
    if (it == where_.end()) fail_file(name, "missing tensor {}", name);
    const SafetensorsFile& f = files_[it->second];
    const SafetensorsTensor& t = f.at(name);
    if (t.shape != shape)
      fail_file(name, "{}: tensor {} has shape {} but config.json implies {}", f.path(), name, shape_str(t.shape),
                shape_str(shape));
    return t;
  }

  // The tensor as float32, after checking its row-major shape and dtype.
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) {
    const SafetensorsTensor& t = check(name, shape);
    const SafetensorsFile& f = files_[where_.at(name)];
    unused_.erase(name);
    const auto n = static_cast<size_t>(t.numel());
    std::vector<float> out(n);
    if (t.dtype == "F32") {
      f.read_bytes(t, out.data(), t.nbytes());
    } else if (t.dtype == "F16" || t.dtype == "BF16") {
      std::vector<uint16_t> h(n);
      f.read_bytes(t, h.data(), t.nbytes());
      const bool f16 = t.dtype == "F16";
      for (size_t i = 0; i < n; ++i) out[i] = f16 ? f16_to_f32(h[i]) : bf16_to_f32(h[i]);
    } else if (t.dtype == "F64") {
      std::vector<double> d(n);
      f.read_bytes(t, d.data(), t.nbytes());
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(d[i]);
    } else {
      fail_unsupported(name, "{}: tensor {} is {}: tformer reads F32, F16, BF16 and F64 weights", f.path(), name,
                       t.dtype);
    }
    return out;
  }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;
  std::set<std::string> unused_;
};

// [rows, cols] -> [cols, rows].
std::vector<float> transpose(const std::vector<float>& v, int64_t rows, int64_t cols) {
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[static_cast<size_t>(c * rows + r)] = v[static_cast<size_t>(r * cols + c)];
  return out;
}

// The folder's tokenizer: tokenizer.json (a byte-level BPE model) or vocab.json + merges.txt.
// LlamaTokenizer's special tokens: BOS before every text unless tokenizer_config.json says
// "add_bos_token": false, "bos_token" (default "<s>") and "eos_token" (default "</s>"), each a string
// or {"content": ...}, found among the model's control pieces.
void set_llama_specials(SentencePieceTokenizer& sp, const fs::path& dir, std::vector<std::string>& notes) {
  const fs::path p = dir / "tokenizer_config.json";
  nlohmann::json cfg = nlohmann::json::object();
  if (fs::exists(p)) cfg = read_json(p.string());
  if (!cfg.is_object()) fail_file(p.string(), "{}: not a JSON object", p.string());
  auto text_of = [&](const char* key, const char* otherwise) -> std::string {
    if (!cfg.contains(key) || cfg[key].is_null()) return otherwise;
    const auto& v = cfg[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
    fail_file(key, "{}: \"{}\" is neither a string nor {{\"content\": ...}}", p.string(), key);
  };
  const auto& add = cfg.contains("add_bos_token") ? cfg["add_bos_token"] : nlohmann::json(true);
  if (!add.is_boolean()) fail_file("add_bos_token", "{}: \"add_bos_token\" is not a bool", p.string());
  const auto specials = sp.special_tokens();
  const std::string bos = text_of("bos_token", "<s>"), eos = text_of("eos_token", "</s>");
  if (add.get<bool>()) {
    if (const auto it = specials.find(bos); it != specials.end())
      sp.set_bos(it->second);
    else
      notes.push_back(fmt::format("tokenizer: BOS '{}' is not a control piece of tokenizer.model; none is added", bos));
  }
  if (const auto it = specials.find(eos); it != specials.end()) sp.set_eos(it->second);
}

std::unique_ptr<Tokenizer> read_tokenizer(const fs::path& dir, std::vector<std::string>& notes) {
  const fs::path tj = dir / "tokenizer.json", vocab = dir / "vocab.json", merges = dir / "merges.txt";
  // A tokenizer.json that is not byte-level BPE beside a tokenizer.model (Llama 2, TinyLlama: a
  // Metaspace/SentencePiece conversion) comes from that SentencePiece model: read the original.
  const bool spm_beside = fs::exists(dir / "tokenizer.model");
  auto byte_level = [](const nlohmann::json& j) {
    return j.is_object() && j.contains("pre_tokenizer") && j["pre_tokenizer"].is_object() &&
           j["pre_tokenizer"].value("type", "") == "ByteLevel";
  };
  if (fs::exists(tj) && spm_beside && !byte_level(read_json(tj.string())))
    notes.push_back(
        "tokenizer.json is not byte-level BPE: the tokenizer is tokenizer.model, the SentencePiece "
        "model it was converted from");
  else if (fs::exists(tj)) {
    const std::string path = tj.string();
    const nlohmann::json j = read_json(path);
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      fail_unsupported("normalizer", "{}: normalizer {}: tformer's byte-level BPE normalizes nothing", path,
                       j["normalizer"].dump());
    const auto& model = j.contains("model") ? j["model"] : nlohmann::json();
    if (!model.is_object() || model.value("type", "") != "BPE")
      fail_unsupported("model.type", "{}: model.type {}: tformer reads byte-level BPE tokenizers", path,
                       model.is_object() && model.contains("type") ? model["type"].dump() : "missing");
    const auto& pre = j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json();
    if (!pre.is_object() || pre.value("type", "") != "ByteLevel" || pre.value("add_prefix_space", false) ||
        !pre.value("use_regex", true))
      fail_unsupported("pre_tokenizer",
                       "{}: pre_tokenizer {}: tformer splits text as GPT-2's ByteLevel pre-tokenizer "
                       "does (use_regex, no prefix space)",
                       path, pre.dump());
    if (!model.contains("vocab") || !model["vocab"].is_object())
      fail_file("model.vocab", "{}: model.vocab is not an object", path);
    nlohmann::json encoder = model["vocab"];
    if (j.contains("added_tokens") && j["added_tokens"].is_array())
      for (const auto& t : j["added_tokens"])
        if (t.is_object() && t.contains("content") && t.contains("id") && t["content"].is_string())
          encoder[t["content"].get<std::string>()] = t["id"];
    std::string merges_text = "#version: 0.2\n";
    if (!model.contains("merges") || !model["merges"].is_array())
      fail_file("model.merges", "{}: model.merges is not an array", path);
    size_t k = 0;
    for (const auto& m : model["merges"]) {
      if (m.is_string()) {
        merges_text += m.get<std::string>();
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        merges_text += m[0].get<std::string>() + " " + m[1].get<std::string>();
      } else {
        fail_file("model.merges", "{}: model.merges[{}] is neither \"a b\" nor [\"a\", \"b\"]", path, k);
      }
      merges_text += "\n";
      ++k;
    }
    return std::make_unique<ByteBpeTokenizer>(
        ByteBpeTokenizer::from_gpt2_vocab(encoder, merges_text, path + " model.vocab", path + " model.merges"));
  }
  if (fs::exists(vocab) && fs::exists(merges))
    return std::make_unique<ByteBpeTokenizer>(ByteBpeTokenizer::load_gpt2(vocab.string(), merges.string()));
  if (fs::exists(dir / "tokenizer.model")) {
    try {
      auto sp =
          std::make_unique<SentencePieceTokenizer>(SentencePieceTokenizer::load((dir / "tokenizer.model").string()));
      set_llama_specials(*sp, dir, notes);
      return sp;
    } catch (const Error& e) {
      if (e.kind() != ErrorKind::Unsupported) throw;
      notes.push_back(fmt::format("tokenizer.model: {}; the model file carries no tokenizer", e.what()));
      return nullptr;
    }
  }
  notes.push_back("no tokenizer.json, vocab.json + merges.txt or tokenizer.model: the model file carries no tokenizer");
  return nullptr;
}

// tokenizer_config.json's "chat_template", or chat_template.jinja (where newer transformers save it).
std::string read_chat_template(const fs::path& dir) {
  const fs::path p = dir / "tokenizer_config.json", jinja = dir / "chat_template.jinja";
  if (!fs::exists(p) || !read_json(p.string()).contains("chat_template"))
    return fs::exists(jinja) ? read_file(jinja.string()) : "";
  const nlohmann::json j = read_json(p.string());
  if (!j.is_object() || !j.contains("chat_template")) return "";
  const auto& t = j["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  // A list of named templates: the one named "default".
  if (t.is_array())
    for (const auto& e : t)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
        return e["template"].get<std::string>();
  return "";
}

}  // namespace

namespace {

// A tied model may still store lm_head.weight (older checkpoints do): it must then be the embedding.
void check_tied_head(HfWeights& w, const std::string& embedding, int64_t vocab, int64_t d, const std::string& dir) {
  if (!w.has("lm_head.weight")) return;
  if (w.read("lm_head.weight", {vocab, d}) != w.read(embedding, {vocab, d}))
    fail_file("lm_head.weight",
              "{}: tie_word_embeddings is true but lm_head.weight differs from {}: the head is not the embedding", dir,
              embedding);
}

}  // namespace

HfModel import_hf(const std::string& dir_name) {
  const fs::path dir(dir_name);
  if (!fs::is_directory(dir)) fail_file(dir_name, "{}: not a folder", dir_name);
  const std::string config_path = (dir / "config.json").string();
  const HfConfig hc(read_json(config_path), config_path);
  HfModel out;
  out.model_type = hc.string_or("model_type", "");
  ModelConfig c;
  c.norm_placement = NormPlacement::Pre;
  c.vocab_size = hc.count("vocab_size");
  const bool gpt2 = out.model_type == "gpt2";
  if (gpt2) {
    c.d_model = hc.count("n_embd");
    c.n_layers = hc.count("n_layer");
    c.n_heads = hc.count("n_head");
    c.context_length = hc.count("n_positions");
    c.d_ff = hc.count_or("n_inner", 4 * c.d_model);
    c.norm = NormKind::LayerNorm;
    c.positions = Positions::Learned;
    c.bias = true;
    c.norm_eps = hc.real_or("layer_norm_epsilon", 1e-5);
    const std::string act = hc.string_or("activation_function", "gelu_new");
    if (act == "gelu_new" || act == "gelu_pytorch_tanh" || act == "gelu_fast")
      c.activation = Activation::GeluTanh;
    else if (act == "gelu")
      c.activation = Activation::Gelu;
    else
      fail_unsupported("activation_function", "{}: activation_function \"{}\": tformer computes GELU (erf or tanh)",
                       config_path, act);
    c.tied_embeddings = hc.flag_or("tie_word_embeddings", true);
    hc.refuse_unless("scale_attn_by_inverse_layer_idx", false,
                     "tformer scales every layer's scores by 1/sqrt(head_dim)");
    hc.refuse_unless("scale_attn_weights", true, "tformer scales the scores by 1/sqrt(head_dim)");
    hc.refuse_unless("add_cross_attention", false, "tformer is a decoder without cross-attention");
  } else if (out.model_type == "llama") {
    c.d_model = hc.count("hidden_size");
    c.n_layers = hc.count("num_hidden_layers");
    c.n_heads = hc.count("num_attention_heads");
    c.n_kv_heads = hc.count_or("num_key_value_heads", c.n_heads);
    c.d_ff = hc.count("intermediate_size");
    c.context_length = hc.count_or("max_position_embeddings", 2048);
    c.norm = NormKind::RMSNorm;
    c.activation = Activation::SwiGLU;
    c.positions = Positions::Rope;
    c.rope_pairing = RopePairing::Halves;
    c.rope_base = hc.real_or("rope_theta", 10000.0);
    c.norm_eps = hc.real_or("rms_norm_eps", 1e-6);
    const bool attention_bias = hc.flag_or("attention_bias", false), mlp_bias = hc.flag_or("mlp_bias", false);
    c.bias = attention_bias || mlp_bias;
    if (attention_bias != mlp_bias)
      out.notes.push_back(fmt::format("attention_bias {} and mlp_bias {}: tformer's one bias flag, with zero {} biases",
                                      attention_bias, mlp_bias, attention_bias ? "feed-forward" : "attention"));
    c.tied_embeddings = hc.flag_or("tie_word_embeddings", false);
    const std::string act = hc.string_or("hidden_act", "silu");
    if (act != "silu")
      fail_unsupported("hidden_act", "{}: hidden_act \"{}\": tformer's SwiGLU gates with SiLU", config_path, act);
    hc.refuse_unless("rope_scaling", nullptr, "tformer computes RoPE without scaling");
    hc.refuse_unless("sliding_window", nullptr, "tformer attends over the whole context");
    hc.refuse_unless("partial_rotary_factor", 1.0, "tformer rotates whole heads");
    if (hc.has("head_dim") && hc.count("head_dim") * c.n_heads != c.d_model)
      fail_unsupported("head_dim", "{}: head_dim {} is not hidden_size / num_attention_heads = {}", config_path,
                       hc.count("head_dim"), c.d_model / c.n_heads);
  } else {
    fail_unsupported("model_type",
                     "{}: model_type \"{}\": tformer imports \"gpt2\" (GPT2LMHeadModel) and \"llama\" "
                     "(LlamaForCausalLM)",
                     config_path, out.model_type);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail_file(e.field(), "{}: the config gives an invalid tformer config: {}", config_path, e.what());
  }
  check_params_fit_in_memory(c, dir_name);

  HfWeights w(dir);
  // Before the weights are allocated: the embedding must be there with its shape (bounding
  // vocab_size and hidden size), and the folder must hold at least as many values as the weights
  // that must be there (all but a Llama's biases, zeros when absent, and an untied head, which is
  // the embedding's size), so that a config claiming more than the folder holds costs nothing.
  w.check(
      gpt2 ? (w.has("transformer.wte.weight") ? "transformer.wte.weight" : "wte.weight") : "model.embed_tokens.weight",
      {c.vocab_size, c.d_model});
  ModelConfig needed = c;
  needed.tied_embeddings = true;
  if (!gpt2) needed.bias = false;
  const double need = float32_param_bytes(needed) / sizeof(float);
  if (need > static_cast<double>(w.values()))
    fail_file(config_path, "{}: the config implies {} weights but the folder's safetensors files hold {} values",
              config_path, static_cast<uint64_t>(need), w.values());
  out.model = std::make_unique<Model>(c);
  auto& arena = out.model->params();
  auto put = [&](const std::string& name, const std::vector<float>& v, size_t from = 0) {
    const auto* e = arena.find(name);
    TF_CHECK(e != nullptr, "hf import: the model has no tensor '{}'", name);
    const auto n = static_cast<size_t>(e->shape.numel());
    TF_CHECK(from + n <= v.size(), "hf import: tensor '{}' is short", name);
    std::memcpy(arena.data() + e->offset, v.data() + from, n * sizeof(float));
  };
  const int64_t d = c.d_model, hd = c.head_dim(), dq = c.n_heads * hd, dkv = c.n_kv_heads * hd, ff = c.d_ff;
  if (gpt2) {
    // GPT2LMHeadModel saves "transformer.h.0...."; GPT2Model (and the original checkpoints) "h.0....".
    const std::string p = w.has("transformer.wte.weight") ? "transformer." : "";
    put("tok_embeddings.weight", w.read(p + "wte.weight", {c.vocab_size, d}));
    put("pos_embeddings.weight", w.read(p + "wpe.weight", {c.context_length, d}));
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const std::string h = p + "h." + std::to_string(i) + ".", t = "layers." + std::to_string(i) + ".";
      put(t + "attn_norm.weight", w.read(h + "ln_1.weight", {d}));
      put(t + "attn_norm.bias", w.read(h + "ln_1.bias", {d}));
      // Conv1D: weight [in, out]; c_attn's out columns are q | k | v.
      const auto qkv = transpose(w.read(h + "attn.c_attn.weight", {d, 3 * d}), d, 3 * d);
      put(t + "attn.wq.weight", qkv, 0);
      put(t + "attn.wk.weight", qkv, static_cast<size_t>(d * d));
      put(t + "attn.wv.weight", qkv, static_cast<size_t>(2 * d * d));
      const auto qkv_b = w.read(h + "attn.c_attn.bias", {3 * d});
      put(t + "attn.wq.bias", qkv_b, 0);
      put(t + "attn.wk.bias", qkv_b, static_cast<size_t>(d));
      put(t + "attn.wv.bias", qkv_b, static_cast<size_t>(2 * d));
      put(t + "attn.wo.weight", transpose(w.read(h + "attn.c_proj.weight", {d, d}), d, d));
      put(t + "attn.wo.bias", w.read(h + "attn.c_proj.bias", {d}));
      put(t + "ffn_norm.weight", w.read(h + "ln_2.weight", {d}));
      put(t + "ffn_norm.bias", w.read(h + "ln_2.bias", {d}));
      put(t + "ffn.w1.weight", transpose(w.read(h + "mlp.c_fc.weight", {d, ff}), d, ff));
      put(t + "ffn.w1.bias", w.read(h + "mlp.c_fc.bias", {ff}));
      put(t + "ffn.w2.weight", transpose(w.read(h + "mlp.c_proj.weight", {ff, d}), ff, d));
      put(t + "ffn.w2.bias", w.read(h + "mlp.c_proj.bias", {d}));
      // The causal-mask buffers older checkpoints saved.
      w.skip(h + "attn.bias");
      w.skip(h + "attn.masked_bias");
    }
    put("norm.weight", w.read(p + "ln_f.weight", {d}));
    put("norm.bias", w.read(p + "ln_f.bias", {d}));
    if (c.tied_embeddings) {
      check_tied_head(w, p + "wte.weight", c.vocab_size, d, dir_name);  // the same tensor as wte when saved at all
    } else {
      put("output.weight", w.read("lm_head.weight", {c.vocab_size, d}));
    }
  } else {
    put("tok_embeddings.weight", w.read("model.embed_tokens.weight", {c.vocab_size, d}));
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const std::string h = "model.layers." + std::to_string(i) + ".", t = "layers." + std::to_string(i) + ".";
      put(t + "attn_norm.weight", w.read(h + "input_layernorm.weight", {d}));
      put(t + "ffn_norm.weight", w.read(h + "post_attention_layernorm.weight", {d}));
      for (const auto& [hf, tf, rows, cols] :
           {std::tuple{"self_attn.q_proj", "attn.wq", dq, d}, std::tuple{"self_attn.k_proj", "attn.wk", dkv, d},
            std::tuple{"self_attn.v_proj", "attn.wv", dkv, d}, std::tuple{"self_attn.o_proj", "attn.wo", d, dq},
            std::tuple{"mlp.gate_proj", "ffn.w1", ff, d}, std::tuple{"mlp.up_proj", "ffn.w3", ff, d},
            std::tuple{"mlp.down_proj", "ffn.w2", d, ff}}) {
        put(t + tf + ".weight", w.read(h + hf + ".weight", {rows, cols}));
        if (!c.bias) continue;
        if (w.has(h + hf + ".bias")) put(t + tf + ".bias", w.read(h + hf + ".bias", {rows}));
        // else: the zeros the model was built with (attention_bias without mlp_bias, or the reverse)
      }
      w.skip(h + "self_attn.rotary_emb.inv_freq");  // a buffer older checkpoints saved
    }
    put("norm.weight", w.read("model.norm.weight", {d}));
    if (c.tied_embeddings)
      check_tied_head(w, "model.embed_tokens.weight", c.vocab_size, d, dir_name);
    else
      put("output.weight", w.read("lm_head.weight", {c.vocab_size, d}));
  }
  if (!w.unused().empty())
    fail_unsupported(*w.unused().begin(), "{}: tensor {} is not part of a {} model as tformer computes it", dir_name,
                     *w.unused().begin(), out.model_type);

  out.tokenizer = read_tokenizer(dir, out.notes);
  if (out.tokenizer && out.tokenizer->vocab_size() != c.vocab_size) {
    // Hugging Face pads vocab_size past the tokenizer's tokens; tformer's ids are exactly the
    // tokenizer's, so a padded model is refused rather than silently cut.
    fail_unsupported("vocab_size", "{}: vocab_size {} but the tokenizer has {} tokens", config_path, c.vocab_size,
                     out.tokenizer->vocab_size());
  }
  out.chat_template = read_chat_template(dir);
  return out;
}

}  // namespace tformer
