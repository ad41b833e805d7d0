// Inference speed on the llama2.c "stories" shapes with random weights: decode tokens/s at batch 1
// against the memory-bandwidth bound measured in the same run (and, beside it, the step's matrix
// products alone against a read of their bytes: how much of the distance is the kernels' and how
// much the rest of the step's, bench_products.h), prefill of a 512-token prompt,
// batched decode of 8 sequences, and the cost of top-p sampling over 32,000 tokens. The anchors
// are recorded figures of llama2.c and llama.cpp on these shapes at 2 threads, from the text of the
// issue that asked for this benchmark (a 2-core machine it does not name), printed beside ours as
// ratios that are indicative only; bench/quant.sh runs llama.cpp's llama-bench in the same run.
//
//   build/bench/bench_generate [--shape 15M|110M|all] [--reps 3]
//   build/bench/bench_generate --gqa [--long 32768] [--reps 3]
//   build/bench/bench_generate --serve-anchor FILE [--batch 16] [--prompt 32] [--threads 2]
//
// --gqa: decode tokens/s at batch 1 on the 110M shape with 12 (MHA), 4, 2 and 1 key/value heads
// (docs/gqa.md), after 128 and after --long cached tokens, against the bandwidth bound of each:
// every weight and every cached key and value read once per token. The cache is filled by
// marking its slots as written (KVCache::advance over zeroed storage, every page touched) rather
// than by a 32k-token prefill: the cost of a decode step depends on how many slots it reads, not
// on what they hold.
#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "bench_products.h"
#include "bench_util.h"
#include "core/threads.h"
#include "generate/sampler.h"
#include "kernels/linear.h"
#include "kernels/matmul.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace tformer {
namespace {

using bench::clock_type;
using bench::median;
using bench::read_bandwidth_gbs;
using bench::seconds_since;
using bench::sgemm_gflops;

struct BenchShape {
  const char* name;
  int64_t dim, layers, heads, hidden, vocab, context;
  double llama2c_decode, llamacpp_pp512, llamacpp_tg128;  // tokens/s, recorded anchors
};

void run_shape(const BenchShape& sh, int reps, double bandwidth, double sgemm) {
  auto j = nlohmann::json{{"vocab_size", sh.vocab}, {"context_length", sh.context}, {"d_model", sh.dim},
                          {"n_layers", sh.layers},  {"n_heads", sh.heads},          {"d_ff", sh.hidden},
                          {"norm", "rmsnorm"},      {"positions", "rope"},          {"activation", "swiglu"},
                          {"bias", false},          {"tied_embeddings", true}};  // llama2.c shares the classifier
  Model m(ModelConfig::from_json(j, sh.name));
  m.init_gpt2(1);
  const int64_t V = sh.vocab;
  const double weight_bytes = static_cast<double>(m.n_params()) * 4;
  // Decode at batch 1: a 16-token prompt, then 32 tokens; tokens/s of the decode steps.
  std::vector<double> decode;
  const int64_t prompt = 16, steps = 32;
  std::vector<TokenId> ids(prompt);
  for (int64_t i = 0; i < prompt; ++i) ids[i] = static_cast<TokenId>((i * 7919) % V);
  std::vector<float> logits(8 * V);
  for (int r = 0; r < reps; ++r) {
    KVCache cache = m.make_cache(1, prompt + steps);
    m.forward_cached(logits.data(), ids.data(), 1, prompt, nullptr, cache, false);
    TokenId next = 1;
    const auto t0 = clock_type::now();
    for (int64_t s = 0; s < steps; ++s) {
      m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);
      next = static_cast<TokenId>(std::max_element(logits.data(), logits.data() + V) - logits.data());
    }
    decode.push_back(steps / seconds_since(t0));
  }
  const double tps = median(decode);
  // Bytes per decoded token: every weight once (the tied table is read by the output projection;
  // the embedding lookup reads one row), the KV cache read aside (small at these lengths).
  const double bound = bandwidth * 1e9 / weight_bytes;
  fmt::print(
      "{:>5} decode b=1   {:8.1f} tok/s  weights {:.0f} MB/token  bound {:.1f} tok/s  {:.0f}% of bound   "
      "recorded: llama2.c {:.1f} tok/s (x{:.2f})  llama.cpp tg128 {:.1f} (x{:.2f})\n",
      sh.name, tps, weight_bytes * 1e-6, bound, 100 * tps / bound, sh.llama2c_decode, tps / sh.llama2c_decode,
      sh.llamacpp_tg128, tps / sh.llamacpp_tg128);
  // Where a step's distance from the bound lies: its matrix products alone against a read of their
  // bytes (bench_products.h), beside the whole step's share.
  const double products = bench::products_fraction(m.weights(), 4 * reps);
  fmt::print(
      "{:>5} decode b=1   the step's matrix products alone: {:.0f}% of a read of their bytes; the whole step "
      "{:.0f}% of the bound (the rest: attention, norms, RoPE, the activation, the passes' starts and ends)\n",
      sh.name, 100 * products, 100 * tps / bound);

  // Prefill of a 512-token prompt (capped by the context).
  const int64_t P = std::min<int64_t>(512, sh.context);
  std::vector<TokenId> long_prompt(P);
  for (int64_t i = 0; i < P; ++i) long_prompt[i] = static_cast<TokenId>((i * 31) % V);
  std::vector<double> prefill;
  for (int r = 0; r < reps; ++r) {
    KVCache cache = m.make_cache(1, P);
    const auto t0 = clock_type::now();
    m.forward_cached(logits.data(), long_prompt.data(), 1, P, nullptr, cache, false);
    prefill.push_back(P / seconds_since(t0));
  }
  const double ptps = median(prefill);
  // FLOPs per prompt token: 2 per weight (output projection for the last token only: ignored) plus
  // attention 4 * T/2 * d per layer on average (causal half).
  const double flops_per_token =
      2.0 * (weight_bytes / 4 - static_cast<double>(V * sh.dim)) + 4.0 * sh.layers * (P / 2.0) * sh.dim;
  fmt::print(
      "{:>5} prefill {:4} {:8.1f} tok/s  {:.1f} GFLOP/s = {:.0f}% of sgemm {:.1f} GFLOP/s   recorded llama.cpp pp512 "
      "{:.0f} (x{:.2f})\n",
      sh.name, P, ptps, ptps * flops_per_token * 1e-9, 100 * ptps * flops_per_token * 1e-9 / sgemm, sgemm,
      sh.llamacpp_pp512, ptps / sh.llamacpp_pp512);

  // Batched decode: 8 sequences, one token each per step.
  const int64_t B = 8;
  std::vector<TokenId> batch_prompt(B * prompt);
  for (int64_t i = 0; i < B * prompt; ++i) batch_prompt[i] = static_cast<TokenId>((i * 13) % V);
  std::vector<double> batched;
  for (int r = 0; r < reps; ++r) {
    KVCache cache = m.make_cache(B, prompt + steps);
    m.forward_cached(logits.data(), batch_prompt.data(), B, prompt, nullptr, cache, false);
    std::vector<TokenId> next(B, 1);
    const auto t0 = clock_type::now();
    for (int64_t s = 0; s < steps; ++s) m.forward_cached(logits.data(), next.data(), B, 1, nullptr, cache, false);
    batched.push_back(B * steps / seconds_since(t0));
  }
  const double btps = median(batched);
  fmt::print("{:>5} decode b=8   {:8.1f} tok/s  = x{:.2f} batch 1 (goal x5)   KV cache {} bytes for 8 x {} tokens\n",
             sh.name, btps, btps / tps, m.make_cache(B, prompt + steps).payload_bytes(), prompt + steps);

  // Sampling cost: top-p 0.9 over the vocabulary, against one decode step.
  Sampler sampler({1.0, 0, 0.9, 1});
  std::vector<float> row(V);
  Rng r(3);
  for (auto& x : row) x = static_cast<float>(r.normal());
  const int n_samples = 200;
  const auto t0 = clock_type::now();
  for (int i = 0; i < n_samples; ++i) sampler.sample(row.data(), V);
  const double per_sample = seconds_since(t0) / n_samples;
  fmt::print("{:>5} top-p 0.9 sample over {} tokens: {:.1f} us = {:.1f}% of a decode step (goal < 10%)\n", sh.name, V,
             per_sample * 1e6, 100 * per_sample * tps);
}

void run_gqa_context(const BenchShape& sh, int reps, double bandwidth, int64_t long_context) {
  const int64_t steps = 8;
  double mha_long = 0;  // the multi-head model's speed at the long length
  for (int64_t kv : {sh.heads, int64_t{4}, int64_t{2}, int64_t{1}}) {
    auto j = nlohmann::json{{"vocab_size", sh.vocab}, {"context_length", long_context + steps + 1},
                            {"d_model", sh.dim},      {"n_layers", sh.layers},
                            {"n_heads", sh.heads},    {"n_kv_heads", kv},
                            {"d_ff", sh.hidden},      {"norm", "rmsnorm"},
                            {"positions", "rope"},    {"activation", "swiglu"},
                            {"bias", false},          {"tied_embeddings", true}};
    Model m(ModelConfig::from_json(j, sh.name));
    m.init_gpt2(1);
    const int64_t V = sh.vocab;
    const double weight_bytes = static_cast<double>(m.n_params()) * 4;
    std::vector<float> logits(V);
    double short_tps = 0;
    for (int64_t at : {int64_t{128}, long_context}) {
      std::vector<double> tps;
      int64_t kv_bytes = 0;
      for (int r = 0; r < reps; ++r) {
        KVCache cache = m.make_cache(1, at + steps + 1);
        cache.advance(0, at);
        TokenId next = 1;
        m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);  // untimed: the workspace grows
        const auto t0 = clock_type::now();
        for (int64_t s = 0; s < steps; ++s) {
          m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);
          next = static_cast<TokenId>(std::max_element(logits.data(), logits.data() + V) - logits.data());
        }
        tps.push_back(steps / seconds_since(t0));
        kv_bytes = cache.used_bytes();
      }
      const double t = median(tps);
      if (at == 128) short_tps = t;
      if (at != 128 && kv == sh.heads) mha_long = t;
      const double bound = bandwidth * 1e9 / (weight_bytes + static_cast<double>(kv_bytes));
      fmt::print(
          "{:>5} kv heads {:2}  decode after {:6} tokens: {:7.2f} tok/s  KV cache {:7.1f} MB ({} B/token)  "
          "bound {:6.2f} tok/s ({:.0f}%){}\n",
          sh.name, kv, at, t, static_cast<double>(kv_bytes) * 1e-6, 2 * sh.layers * kv * (sh.dim / sh.heads) * 4, bound,
          100 * t / bound,
          at == 128 ? ""
                    : fmt::format("  = x{:.2f} its speed at 128, x{:.2f} MHA's here", t / short_tps, t / mha_long));
    }
  }
}

// --serve-anchor FILE: the figures bench/serve.sh sets the server's beside, on the model file it
// serves: decode tokens/s of `batch` sequences (one token each per step, after a `prompt`-token
// prompt each), with the tiled products and with the row-independent ones the server's decode
// uses (kernels/linear.h), the server's own work at `batch` clients done by the engine alone
// ("workload": the prompts prefilled, then 64 tokens each sampled at temperature 1, the draws of
// a step in parallel as the server's loop makes them), and the
// prefill time of one `prompt`-token prompt (the time to first token `tformer generate` has). One
// JSON line.
void run_serve_anchor(const std::string& file, int64_t batch, int64_t prompt, int64_t steps, int reps) {
  LoadedModel lm = load_model(file);
  Model& m = *lm.model;
  const int64_t V = m.config().vocab_size;
  std::vector<TokenId> ids(static_cast<size_t>(batch * prompt));
  for (int64_t i = 0; i < batch * prompt; ++i) ids[static_cast<size_t>(i)] = static_cast<TokenId>((i * 7919) % V);
  std::vector<float> logits(static_cast<size_t>(batch * V));
  auto decode = [&](bool row_independent) {
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      KVCache cache = m.make_cache(batch, prompt + steps);
      m.forward_cached(logits.data(), ids.data(), batch, prompt, nullptr, cache, false);
      std::vector<TokenId> next(static_cast<size_t>(batch), 1);
      const RowIndependentProducts scope(row_independent);
      const auto t0 = clock_type::now();
      for (int64_t s = 0; s < steps; ++s) m.forward_cached(logits.data(), next.data(), batch, 1, nullptr, cache, false);
      rates.push_back(static_cast<double>(batch * steps) / seconds_since(t0));
    }
    return median(rates);
  };
  std::vector<double> prefill;
  for (int r = 0; r < reps; ++r) {
    KVCache cache = m.make_cache(1, prompt);
    const auto t0 = clock_type::now();
    m.forward_cached(logits.data(), ids.data(), 1, prompt, nullptr, cache, false);
    prefill.push_back(seconds_since(t0));
  }
  // The server's own work at `batch` clients, done by the engine alone: every sequence's prompt
  // prefilled (in one batched forward), then `steps` tokens each, sampled at temperature 1 (as
  // bench/serve_load.mjs asks) from the row-independent products; completion tokens over the whole
  // time, prefill and sampling included. What the server adds to this is its own cost.
  auto workload = [&] {
    std::vector<double> rates;
    for (int r = 0; r < reps; ++r) {
      KVCache cache = m.make_cache(batch, prompt + steps);
      std::vector<Sampler> samplers;
      for (int64_t b = 0; b < batch; ++b)
        samplers.emplace_back(SamplerConfig{1.0, 0, 1.0, static_cast<uint64_t>(b + 1)});
      std::vector<TokenId> next(static_cast<size_t>(batch));
      const RowIndependentProducts scope(true);
      const auto t0 = clock_type::now();
      m.forward_cached(logits.data(), ids.data(), batch, prompt, nullptr, cache, false);
      for (int64_t s = 0; s < steps; ++s) {
        parallel_for_dynamic(batch, batch > 1, [&](int64_t b) {  // as the server's loop draws them
          next[static_cast<size_t>(b)] = samplers[static_cast<size_t>(b)].sample(logits.data() + b * V, V);
        });
        m.forward_cached(logits.data(), next.data(), batch, 1, nullptr, cache, false);
      }
      rates.push_back(static_cast<double>(batch * steps) / seconds_since(t0));
    }
    return median(rates);
  };
  const double tiled = decode(false), invariant = decode(true), same_work = workload(), one = [&] {
    const int64_t keep = batch;
    batch = 1;
    const double r = decode(true);
    batch = keep;
    return r;
  }();
  fmt::print(
      "{{\"file\": \"{}\", \"batch\": {}, \"decode_tiled\": {:.2f}, \"decode_row_independent\": {:.2f}, "
      "\"workload\": {:.2f}, \"decode_batch1\": {:.2f}, \"prefill_seconds\": {:.5f}, \"prompt\": {}, \"steps\": {}}}\n",
      file, batch, tiled, invariant, same_work, one, median(prefill), prompt, steps);
}

}  // namespace
}  // namespace tformer

int main(int argc, char** argv) {
  using namespace tformer;
  std::string which = "all";
  int reps = 3;
  bool gqa = false;
  int64_t long_context = 32768;
  std::string serve_file;
  int64_t batch = 16, prompt = 32;
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gqa") == 0)
      gqa = true;
    else if (i + 1 < argc && std::strcmp(argv[i], "--shape") == 0)
      which = argv[++i];
    else if (i + 1 < argc && std::strcmp(argv[i], "--reps") == 0)
      reps = std::max(1, std::atoi(argv[++i]));
    else if (i + 1 < argc && std::strcmp(argv[i], "--long") == 0)
      long_context = std::max(256, std::atoi(argv[++i]));
    else if (i + 1 < argc && std::strcmp(argv[i], "--serve-anchor") == 0)
      serve_file = argv[++i];
    else if (i + 1 < argc && std::strcmp(argv[i], "--batch") == 0)
      batch = std::max(1, std::atoi(argv[++i]));
    else if (i + 1 < argc && std::strcmp(argv[i], "--prompt") == 0)
      prompt = std::max(1, std::atoi(argv[++i]));
    else if (i + 1 < argc && std::strcmp(argv[i], "--threads") == 0)
      threads = std::atoi(argv[++i]);
  }
  if (!serve_file.empty()) {
    set_num_threads(threads);
    run_serve_anchor(serve_file, batch, prompt, 64, reps);
    return 0;
  }
  set_num_threads(2);
  const double bw = read_bandwidth_gbs(reps);
  const double sg = sgemm_gflops(reps);
  fmt::print("threads {}; read bandwidth {:.1f} GB/s; sgemm 1024 {:.1f} GFLOP/s (medians of {})\n", num_threads(), bw,
             sg, reps);
  const BenchShape shapes[] = {{"15M", 288, 6, 6, 768, 32000, 256, 515, 5821, 326},
                               {"110M", 768, 12, 12, 2048, 32000, 1024, 59.7, 624, 49.3}};
  if (gqa) {
    run_gqa_context(shapes[1], reps, bw, long_context);
    return 0;
  }
  for (const auto& s : shapes)
    if (which == "all" || which == s.name) run_shape(s, reps, bw, sg);
  return 0;
}
