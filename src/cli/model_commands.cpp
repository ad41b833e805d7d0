// tformer init: a randomly initialised model file.   tformer eval: mean loss and perplexity of a
// model on a text file.
#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "kernels/cross_entropy.h"
#include "model/checkpoint.h"

namespace tformer::cli {

namespace {

struct InitOptions {
  std::string config, out, tokenizer, gpt2_dir;  // tokenizer "": none (vocab_size from the config)
  uint64_t seed = 1337;
};

// With --tokenizer the model file carries it (vocab_size from it, or checked against it); without,
// the config's vocab_size alone sizes the model and the file carries no tokenizer (enough for
// `logits` and the benchmarks; `generate` and `eval` then say that a tokenizer is missing).
void run_init(const InitOptions& o) {
  ModelConfig config = ModelConfig::from_file(o.config);
  std::unique_ptr<Tokenizer> tok;
  if (!o.tokenizer.empty()) {
    tok = tokenizer_by_name_or_model(o.tokenizer, o.gpt2_dir);
    if (config.vocab_size == 0) config.vocab_size = tok->vocab_size();
    if (config.vocab_size != tok->vocab_size())
      fail_config("vocab_size", "{}: vocab_size is {} but the tokenizer '{}' has {} tokens", o.config,
                  config.vocab_size, o.tokenizer, tok->vocab_size());
  } else if (config.vocab_size == 0) {
    fail_config("vocab_size", "{}: \"vocab_size\" is not set and no --tokenizer gives one", o.config);
  }
  Model model(config);
  model.init_gpt2(o.seed);
  save_model(o.out, model, tok.get());
  fmt::print("wrote {}: {} parameters, {}, config {}\n", o.out, model.n_params(),
             tok ? "tokenizer " + tok->kind() : std::string("no tokenizer"), model.config().to_json().dump());
}

struct EvalOptions {
  std::string model, data, attention = "tiled";
  int64_t batch = 8, max_tokens = 0;
  int threads = 0;
};

// Scores the file's tokens in non-overlapping windows of context_length + 1 tokens: each window
// predicts its last context_length tokens from the ones before them (stride = context_length),
// so every token but the file's first is scored exactly once.
void run_eval(const EvalOptions& o) {
  set_num_threads(o.threads);
  LoadedModel lm = load_model(o.model, {.inference_only = true});  // (model/checkpoint.h)
  lm.model->set_attention_kernel(parse_attention_kernel(o.attention));
  if (!lm.tokenizer) fail_file(o.model, "{}: the model file carries no tokenizer", o.model);
  std::vector<TokenId> ids;
  try {
    ids = lm.tokenizer->encode(read_file(o.data));
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(o.data)) throw;
    fail_file(o.data, "{}: {}", o.data, e.what());  // the tokenizer names the position; this names the file
  }
  if (o.max_tokens > 0 && static_cast<int64_t>(ids.size()) > o.max_tokens) ids.resize(o.max_tokens);
  // A vocabulary that wants a BOS (llama.cpp's add_bos_token) gets it at the start of every window,
  // as llama-perplexity does: the window is BOS and T - 1 tokens, and every token is scored.
  const std::optional<TokenId> bos = lm.tokenizer->bos_id();
  if (ids.size() < (bos ? 1u : 2u)) fail_file(o.data, "{}: too few tokens; nothing to score", o.data);
  const int64_t T = lm.model->config().context_length, V = lm.model->config().vocab_size;
  const int64_t n = static_cast<int64_t>(ids.size());
  // Without a BOS, window w's inputs are ids[s .. s+T) and its targets the next ids; with one,
  // its inputs are BOS, ids[s .. s+T-1) and its targets ids[s .. s+T).
  const int64_t first = bos ? 0 : 1;  // the first id that is scored
  double total = 0;
  int64_t counted = 0;
  std::vector<TokenId> inputs, targets;
  std::vector<float> logits;
  for (int64_t start = 0; start + first < n;) {
    // One batch of up to o.batch windows; the last window may be shorter (padded with ignored targets).
    const int64_t windows = std::min<int64_t>(o.batch, (n - first - start + T - 1) / T);
    inputs.assign(windows * T, 0);
    targets.assign(windows * T, kIgnoreIndex);
    for (int64_t w = 0; w < windows; ++w)
      for (int64_t t = 0; t < T && start + w * T + t + first < n; ++t) {
        const int64_t at = start + w * T + t;
        inputs[w * T + t] = bos ? (t == 0 ? *bos : ids[at - 1]) : ids[at];
        targets[w * T + t] = ids[at + first];
      }
    logits.resize(windows * T * V);
    lm.model->forward(logits.data(), inputs.data(), windows, T);
    const auto r = cross_entropy_forward<float>(nullptr, logits.data(), targets.data(), windows * T, V);
    total += r.loss * static_cast<double>(r.count);
    counted += r.count;
    start += windows * T;
  }
  const double loss = total / static_cast<double>(counted);
  fmt::print("loss {:.4f}  perplexity {:.3f}  tokens scored {}  (context {}, stride {}, {} tokens read{})\n", loss,
             std::exp(loss), counted, T, T, n, bos ? ", BOS first in each window" : "");
}

}  // namespace

void register_model_commands(CLI::App& app) {
  auto init = std::make_shared<InitOptions>();
  auto* ic = app.add_subcommand("init", "Write a randomly initialised model (GPT-2 initialisation)");
  ic->add_option("--config", init->config, "Model config JSON (keys: docs/checkpoint-format.md)")->required();
  ic->add_option("--out", init->out, "Output model file (.safetensors)")->required();
  ic->add_option("--seed", init->seed, "Initialisation seed")->capture_default_str();
  ic->add_option("--tokenizer", init->tokenizer,
                 "char | gpt2 | cl100k_base | o200k_base | bpe:CODES | byte-bpe:VOCAB | tokenizer JSON | model "
                 ".safetensors (default: none; "
                 "the config's vocab_size, and the file carries no tokenizer)");
  ic->add_option("--gpt2-dir", init->gpt2_dir, "Folder with GPT-2's encoder.json and vocab.bpe");
  ic->callback([init] { run_init(*init); });

  auto ev = std::make_shared<EvalOptions>();
  auto* ec = app.add_subcommand("eval", "Mean loss and perplexity of a model on a text file");
  ec->add_option("--model", ev->model, "Model file")->required();
  ec->add_option("--data", ev->data, "Text file to score")->required();
  ec->add_option("--batch", ev->batch, "Windows per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  ec->add_option("--max-tokens", ev->max_tokens, "Score only the first N tokens (0 = all)")->capture_default_str();
  ec->add_option("--threads", ev->threads, "Threads (0 = all cores)")->capture_default_str();
  ec->add_option("--attention", ev->attention, "tiled (default) | reference (the plain kernel, for debugging)")
      ->capture_default_str();
  ec->callback([ev] { run_eval(*ev); });
}

}  // namespace tformer::cli
