// tformer generate: text from a model through the KV cache.
// tformer logits: every position's logits, uncached or through chunked prefill (for outside checks).
#include <fmt/format.h>

#include <cstdio>
#include <span>
#include <string>

#include "cli/commands.h"
#include "cli/token_ids.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "generate/generator.h"
#include "model/checkpoint.h"

namespace tformer::cli {

namespace {

struct GenerateArgs {
  std::string model, prompt, prompts_file, attention = "tiled";
  int64_t max_new_tokens = 64, top_k = 0, prefill_chunk = 0;
  double temperature = 1.0, top_p = 0.9;
  uint64_t seed = 1337;
  int threads = 0;
  bool verbose = false, allow_special = false;
  bool prompt_given = false;  // --prompt was on the command line (an empty prompt is allowed)
};

void run_generate(const GenerateArgs& a) {
  set_num_threads(a.threads);
  LoadedModel lm = load_model(a.model, {.inference_only = true});  // a quantized file costs its own bytes
  lm.model->set_attention_kernel(parse_attention_kernel(a.attention));
  if (!lm.tokenizer) fail_file(a.model, "{}: the model file carries no tokenizer; generation needs one", a.model);
  const Tokenizer& tok = *lm.tokenizer;
  std::vector<std::string> texts;
  if (!a.prompts_file.empty()) {
    // One prompt per line ('\n'; a final '\n' ends the last line rather than starting an empty one).
    const std::string file = read_file(a.prompts_file);
    for (size_t start = 0; start < file.size();) {
      size_t end = file.find('\n', start);
      if (end == std::string::npos) end = file.size();
      std::string line = file.substr(start, end - start);
      if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF files
      texts.push_back(std::move(line));
      start = end + 1;
    }
    if (texts.empty()) fail_file(a.prompts_file, "{}: no prompts (one per line)", a.prompts_file);
  } else {
    if (!a.prompt_given) fail_input("--prompt", "generate needs --prompt TEXT or --prompts-file FILE");
    texts.push_back(a.prompt);
  }
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& t : texts) {
    prompts.push_back(encode_for_model(tok, t, a.allow_special));  // BOS first where the vocabulary wants it
    if (prompts.back().empty()) {
      // An empty prompt starts from end-of-text when the vocabulary has one.
      if (auto eot = tok.eot_id())
        prompts.back().push_back(*eot);
      else
        fail_input(fmt::format("prompt {}", prompts.size() - 1),
                   "prompt {} is empty and the tokenizer has no end-of-text token to start from", prompts.size() - 1);
    }
  }
  GenerateOptions opt;
  opt.max_new_tokens = a.max_new_tokens;
  opt.sampler = {a.temperature, a.top_k, a.top_p, a.seed};
  opt.stop_token = tok.eot_id();
  opt.prefill_chunk = a.prefill_chunk;
  opt.never_sample = non_token_ids(tok, lm.model->config().vocab_size);
  GenerateStats stats;
  const bool stream = prompts.size() == 1;
  // The decoder starts after the prompt's last id: a Sennrich BPE tokenizer restores the space
  // between two words from the id before it.
  StreamingDecoder decoder(tok, prompts[0].back());
  // The prompt is echoed with the first token, so a rejected request prints nothing but the error.
  bool echoed = false;
  auto echo_prompt = [&] {
    if (echoed) return;
    echoed = true;
    std::fwrite(texts[0].data(), 1, texts[0].size(), stdout);
  };
  auto on_token = [&](int64_t, TokenId id) {
    if (!stream) return;
    echo_prompt();
    if (opt.stop_token && id == *opt.stop_token) return;
    const std::string_view piece = decoder.feed(id);
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  const auto out = generate(*lm.model, prompts, opt, on_token, &stats);
  if (stream) {
    echo_prompt();
    const std::string_view rest = decoder.flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::fputc('\n', stdout);
  } else {
    for (size_t b = 0; b < out.size(); ++b) {
      std::vector<TokenId> ids = prompts[b];
      ids.insert(ids.end(), out[b].begin(), out[b].end());
      if (!out[b].empty() && opt.stop_token && ids.back() == *opt.stop_token) ids.pop_back();
      // Decoded without the BOS, so that the first word loses its space prefix as in the echo.
      const size_t skip = tok.bos_id() && ids.front() == *tok.bos_id() ? 1 : 0;
      fmt::print("[{}] {}\n", b, tok.decode(std::span<const TokenId>(ids).subspan(skip)));
    }
  }
  if (a.verbose) {
    const auto& c = lm.model->config();
    fmt::print(stderr,
               "prompt tokens {}, generated {}; prefill {:.3f} s, decode {:.3f} s ({:.1f} tokens/s)\n"
               "KV cache payload {} bytes = 2 x {} layers x {} batch x {} kv heads x {} tokens x {} head dim x 4\n",
               stats.prompt_tokens, stats.generated_tokens, stats.prefill_seconds, stats.decode_seconds,
               stats.decode_seconds > 0 ? stats.generated_tokens / stats.decode_seconds : 0.0, stats.kv_cache_bytes,
               c.n_layers, prompts.size(), c.n_kv_heads, stats.kv_capacity, c.head_dim());
  }
}

struct LogitsArgs {
  std::string model, tokens, out, attention = "tiled";
  int64_t chunk = 0;
  int threads = 0;
};

void run_logits(const LogitsArgs& a) {
  set_num_threads(a.threads);
  LoadedModel lm = load_model(a.model, {.inference_only = true});  // (model/checkpoint.h)
  Model& m = *lm.model;
  m.set_attention_kernel(parse_attention_kernel(a.attention));
  const auto ids = parse_logits_tokens(a.tokens);
  if (ids.empty()) fail_input("--tokens", "--tokens: no token ids");
  const int64_t T = static_cast<int64_t>(ids.size()), V = m.config().vocab_size;
  if (a.chunk < 0) fail_input("--chunk", "--chunk must be >= 0, got {}", a.chunk);
  std::vector<float> logits(T * V);
  if (a.chunk == 0) {
    m.forward(logits.data(), ids.data(), 1, T);
  } else {
    KVCache cache = m.make_cache(1, T);
    for (int64_t s = 0; s < T; s += a.chunk) {
      const int64_t n = std::min(a.chunk, T - s);
      m.forward_cached(logits.data() + s * V, ids.data() + s, 1, n, nullptr, cache, true);
    }
  }
  std::string bytes(reinterpret_cast<const char*>(logits.data()), logits.size() * sizeof(float));
  write_file_atomic(a.out, bytes);
}

}  // namespace

void register_generate(CLI::App& app) {
  auto g = std::make_shared<GenerateArgs>();
  auto* gc = app.add_subcommand("generate", "Generate text with the KV cache");
  gc->add_option("--model", g->model, "Model file")->required();
  auto* p = gc->add_option("--prompt", g->prompt, "Prompt text");
  auto* pf = gc->add_option("--prompts-file", g->prompts_file, "One prompt per line, generated as one batch");
  p->excludes(pf);
  gc->add_option("--max-new-tokens", g->max_new_tokens, "Tokens to generate per prompt")->capture_default_str();
  gc->add_option("--temperature", g->temperature, "0 = greedy")->capture_default_str();
  gc->add_option("--top-k", g->top_k, "Keep the k most probable tokens (0 = off)")->capture_default_str();
  gc->add_option("--top-p", g->top_p, "Nucleus sampling mass (1 = off)")->capture_default_str();
  gc->add_option("--seed", g->seed, "Sampling seed")->capture_default_str();
  gc->add_option("--prefill-chunk", g->prefill_chunk, "Prompt tokens per prefill step (0 = all)")
      ->capture_default_str();
  gc->add_option("--threads", g->threads, "Threads (0 = all cores)")->capture_default_str();
  gc->add_flag("--allow-special", g->allow_special, "Recognise special tokens in the prompt");
  gc->add_flag("--verbose", g->verbose, "Print timings and the KV cache size to stderr");
  gc->add_option("--attention", g->attention, "tiled (default) | reference (the plain kernel, for debugging)")
      ->capture_default_str();
  gc->callback([g, p] {
    g->prompt_given = p->count() > 0;
    run_generate(*g);
  });

  auto l = std::make_shared<LogitsArgs>();
  auto* lc = app.add_subcommand("logits", "Write every position's logits as little-endian float32 [T][vocab]");
  lc->add_option("--model", l->model, "Model file")->required();
  lc->add_option("--tokens", l->tokens, "Token ids separated by spaces")->required();
  lc->add_option("--chunk", l->chunk, "0 = one uncached forward; K = prefill in chunks of K through the KV cache")
      ->capture_default_str();
  lc->add_option("--out", l->out, "Output file")->required();
  lc->add_option("--threads", l->threads, "Threads (0 = all cores)")->capture_default_str();
  lc->add_option("--attention", l->attention, "tiled (default) | reference (the plain kernel, for debugging)")
      ->capture_default_str();
  lc->callback([l] { run_logits(*l); });
}

}  // namespace tformer::cli
