// tformer export: a model file into llama.cpp's GGUF (model/gguf_model.h, docs/gguf.md); tformer
// quantize: the same with BF16, Q8_0 or Q4_0 weight matrices.
// tformer import: a Hugging Face model folder into a tformer model file (model/hf_import.h).
// tformer convert: a model with fewer key/value heads, pooled from its own (model/gqa_convert.h).
#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "model/checkpoint.h"
#include "model/gguf_model.h"
#include "model/gqa_convert.h"
#include "model/hf_import.h"

namespace tformer::cli {

namespace {

struct ExportOptions {
  std::string model, format = "gguf", out, type = "f32", output_type;
};

void run_export(const ExportOptions& o) {
  if (o.format != "gguf") fail_input("--format", "--format: unknown format '{}' (gguf)", o.format);
  const GgufExportType type = parse_gguf_export_type(o.type);
  std::optional<GgufExportType> output_type;
  if (!o.output_type.empty()) output_type = parse_gguf_export_type(o.output_type, "--output-type");
  LoadedModel lm = load_model(o.model);
  if (!lm.tokenizer) fail_file(o.model, "{}: the model file carries no tokenizer, and llama.cpp needs one", o.model);
  const GgufExportReport r = export_gguf(o.out, *lm.model, *lm.tokenizer, lm.chat_template, type, output_type);
  fmt::print("wrote {}: llama.cpp architecture {}, {} tensors ({}{}), {:.1f} MB, tokenizer {}\n", o.out, r.architecture,
             r.n_tensors, o.type, o.output_type.empty() ? "" : ", output matrix " + o.output_type,
             static_cast<double>(r.file_bytes) / 1e6, lm.tokenizer->kind());
  for (const auto& note : r.notes) fmt::print("  {}\n", note);
  if (r.gelu_changed)
    fmt::print(
        "  activation: \"gelu\" (erf) runs in llama.cpp's {} as the tanh form: the largest change of a next-token "
        "probability over a probe batch of {} positions is {:.3g}\n",
        r.architecture, r.probe_tokens, r.gelu_max_prob_change);
}

struct ImportOptions {
  std::string from = "hf", dir, out;
};

void run_import(const ImportOptions& o) {
  if (o.from != "hf") fail_input("--from", "--from: unknown source '{}' (hf)", o.from);
  HfModel m = import_hf(o.dir);
  save_model(o.out, *m.model, m.tokenizer.get(), m.chat_template);
  const ModelConfig& c = m.model->config();
  fmt::print("wrote {}: {} ({} layers, d_model {}, {} heads / {} kv heads, vocab {}), {} parameters, {}{}\n", o.out,
             m.model_type, c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.vocab_size, m.model->n_params(),
             m.tokenizer ? "tokenizer " + m.tokenizer->kind() : std::string("no tokenizer"),
             m.chat_template.empty() ? "" : ", chat template");
  for (const auto& note : m.notes) fmt::print("  {}\n", note);
}

struct ConvertOptions {
  std::string model, out, pool = "mean";
  int64_t kv_heads = 0;
};

void run_convert(const ConvertOptions& o) {
  const KvPool pool = parse_kv_pool(o.pool);
  LoadedModel lm = load_model(o.model);
  const ModelConfig& c = lm.model->config();
  auto converted = convert_kv_heads(*lm.model, o.kv_heads, pool);
  save_model(o.out, *converted, lm.tokenizer.get(), lm.chat_template);
  // The KV cache's payload per token: keys and values, every layer, float32.
  auto per_token = [&](int64_t kv) { return 2 * c.n_layers * kv * c.head_dim() * 4; };
  fmt::print(
      "wrote {}: {} query heads, {} key/value heads -> {} ({} pooling, groups of {}); KV cache {} -> {} bytes per "
      "token ({:.3g}x smaller)\n",
      o.out, c.n_heads, c.n_kv_heads, o.kv_heads, to_string(pool), c.n_kv_heads / o.kv_heads, per_token(c.n_kv_heads),
      per_token(o.kv_heads), static_cast<double>(c.n_kv_heads) / static_cast<double>(o.kv_heads));
}

}  // namespace

void register_convert(CLI::App& app) {
  auto ex = std::make_shared<ExportOptions>();
  auto* ec = app.add_subcommand("export", "Write a model as a GGUF file that llama.cpp runs (docs/gguf.md)");
  ec->add_option("--model", ex->model, "Model file (.safetensors or .gguf)")->required();
  ec->add_option("--format", ex->format, "gguf")->capture_default_str();
  ec->add_option("--out", ex->out, "Output file (.gguf)")->required();
  ec->add_option("--type", ex->type,
                 "Weight matrices as f32 | f16 | bf16 | q8_0 | q4_0 (norms and biases stay f32; docs/gguf.md)")
      ->capture_default_str();
  ec->add_option("--output-type", ex->output_type,
                 "The output matrix (a tied model: its embedding) in this type instead (f32 ... q4_0)");
  ec->callback([ex] { run_export(*ex); });

  // tformer quantize: export with a smaller weight type (the same file `export --type` writes).
  auto qz = std::make_shared<ExportOptions>();
  auto* qc = app.add_subcommand("quantize", "Write a model as a GGUF file with BF16, Q8_0 or Q4_0 weight matrices");
  qc->add_option("--model", qz->model, "Model file (.safetensors or .gguf)")->required();
  qc->add_option("--type", qz->type, "bf16 | q8_0 | q4_0 (ggml's block formats; norms and biases stay f32)")
      ->required()
      ->check(CLI::IsMember({"bf16", "q8_0", "q4_0"}));
  qc->add_option("--out", qz->out, "Output file (.gguf)")->required();
  qc->add_option("--output-type", qz->output_type,
                 "The output matrix (a tied model: its embedding) in this type instead, e.g. q8_0 with --type q4_0");
  qc->callback([qz] { run_export(*qz); });

  auto im = std::make_shared<ImportOptions>();
  auto* ic = app.add_subcommand("import", "Write a Hugging Face model folder as a tformer model file");
  ic->add_option("--from", im->from, "hf")->capture_default_str();
  ic->add_option("DIR", im->dir, "The folder: config.json, model.safetensors (or shards), tokenizer")->required();
  ic->add_option("--out", im->out, "Output model file (.safetensors)")->required();
  ic->callback([im] { run_import(*im); });

  auto cv = std::make_shared<ConvertOptions>();
  auto* cc = app.add_subcommand(
      "convert", "Write a model with fewer key/value heads, each the mean (or first) of a group (docs/gqa.md)");
  cc->add_option("--model", cv->model, "Model file (.safetensors or .gguf)")->required();
  cc->add_option("--kv-heads", cv->kv_heads, "Key/value heads of the new model (must divide the model's)")->required();
  cc->add_option("--out", cv->out, "Output model file (.safetensors)")->required();
  cc->add_option("--pool", cv->pool, "mean (Ainslie et al.'s recipe) | first (each group's first head)")
      ->capture_default_str();
  cc->callback([cv] { run_convert(*cv); });
}

}  // namespace tformer::cli
