// Decode and prefill speed of model files in their stored weight types (kernels/qlinear.h),
// against the memory-bandwidth bound measured in the same run: decode at batch 1 (128 tokens
// after a one-token prompt, as llama-bench's tg128) and a 512-token prefill (llama-bench's
// pp512). bench/quant.sh makes the stories-shaped files, runs this, and runs llama-bench on the
// same files when LLAMA_BENCH names one.
//
//   build/bench/bench_quant [--reps 3] [--json] FILE.gguf...
//
// The bound of a file is the read bandwidth over the bytes one decode step reads: every matrix in
// its stored type (a tied model's embedding once, as the output matrix), one embedding row and
// the norm gains (Model::weight_bytes_per_token); the KV cache, a few MB at these lengths, is left
// out, which makes the bound a little generous.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bench_util.h"
#include "core/threads.h"
#include "kernels/qlinear.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace tformer {
namespace {

using bench::clock_type;
using bench::median;
using bench::seconds_since;

struct Result {
  std::string file, type;
  double bytes = 0, decode = 0, prefill = 0;
};

Result run_file(const std::string& path, int reps) {
  LoadedModel lm = load_model(path);
  Model& m = *lm.model;
  const ModelConfig& c = m.config();
  Result res;
  res.file = path;
  res.type = weight_type_name(m.weights().layers.at(0).wq.type);
  res.bytes = m.weight_bytes_per_token();
  const int64_t V = c.vocab_size, steps = 128, P = std::min<int64_t>(512, c.context_length);
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> decode, prefill;
  for (int r = 0; r < reps + 1; ++r) {  // the first repetition warms up (pages, scratch buffers)
    KVCache cache = m.make_cache(1, 1 + steps);
    TokenId next = 1;
    m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);
    const auto t0 = clock_type::now();
    for (int64_t s = 0; s < steps; ++s) {
      next = static_cast<TokenId>((s * 7919 + 11) % V);  // no sampling in the timing, as in llama-bench
      m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);
    }
    if (r > 0) decode.push_back(static_cast<double>(steps) / seconds_since(t0));
  }
  std::vector<TokenId> prompt(static_cast<size_t>(P));
  for (int64_t i = 0; i < P; ++i) prompt[static_cast<size_t>(i)] = static_cast<TokenId>((i * 31 + 7) % V);
  for (int r = 0; r < reps + 1; ++r) {
    KVCache cache = m.make_cache(1, P);
    const auto t0 = clock_type::now();
    m.forward_cached(logits.data(), prompt.data(), 1, P, nullptr, cache, false);
    if (r > 0) prefill.push_back(static_cast<double>(P) / seconds_since(t0));
  }
  res.decode = median(decode);
  res.prefill = median(prefill);
  return res;
}

}  // namespace
}  // namespace tformer

int main(int argc, char** argv) {
  using namespace tformer;
  int reps = 3;
  bool json = false;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (a == "--json") {
      json = true;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    fmt::print(stderr, "usage: bench_quant [--reps N] [--json] FILE.gguf...\n");
    return 2;
  }
  const double bw = bench::read_bandwidth_gbs(reps);
  if (!json) fmt::print("threads {}; read bandwidth {:.1f} GB/s (median of {})\n", num_threads(), bw, reps);
  for (const auto& f : files) {
    const Result r = run_file(f, reps);
    const double bound = bw * 1e9 / r.bytes;
    if (json) {
      fmt::print(
          "{{\"file\": \"{}\", \"type\": \"{}\", \"bytes_per_token\": {:.0f}, \"bandwidth_gbs\": {:.2f}, "
          "\"decode_tps\": {:.2f}, \"bound_tps\": {:.2f}, \"prefill_tps\": {:.2f}}}\n",
          r.file, r.type, r.bytes, bw, r.decode, bound, r.prefill);
    } else {
      fmt::print(
          "{:<28} {:>5}  {:6.1f} MB/token  decode {:8.1f} tok/s = {:3.0f}% of bound {:8.1f}  prefill 512 {:8.1f} "
          "tok/s\n",
          f, r.type, r.bytes * 1e-6, r.decode, 100 * r.decode / bound, bound, r.prefill);
    }
  }
  return 0;
}
