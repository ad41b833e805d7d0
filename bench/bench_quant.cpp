// Decode and prefill speed of model files in their stored weight types (kernels/qlinear.h),
// against the memory-bandwidth bound measured in the same run: decode at batch 1 (128 tokens
// after a one-token prompt, as llama-bench's tg128) and a 512-token prefill (llama-bench's
// pp512), the prefill also as GFLOP/s against the float32 sgemm rate of the same run (its compute
// bound: a prefill multiplies 512 rows by each matrix, far from the bandwidth bound). bench/quant.sh makes the
// stories-shaped files, runs this, and runs llama-bench on the same files when LLAMA_BENCH names one.
//
//   build/bench/bench_quant [--reps 3] [--json] FILE.gguf...
//
// The bound of a decode step is the bytes it reads over the read bandwidth: every matrix in its
// stored type (a tied model's embedding once, as the output matrix), one embedding row and the
// norm gains (Model::weight_bytes_per_token), and the keys and values attention reads, which grow
// with the position (2 x layers x kv_heads x head_dim x 4 bytes a token of context; over tg128's
// steps the mean context is 65.5 tokens: 4.8 MB for the 110M shape, 8% of its Q4_0 weights).
// The bandwidth is measured beside the steps, because this shared machine's bandwidth moved
// between 25 and 47 GB/s from one second to the next and a bound taken once per file was noise:
// in repetitions of their own ("probed"), the steps go in windows of 8, plain and read in turn:
// a plain window's steps are timed as they are, and every step of a read window is followed by a
// plain read of as many bytes (bench_util.h: read_seconds, on 2 MB pages as the weights are). The
// reads are not compared with the steps they follow: a read evicts the cache, which made those
// steps 3-7% slower than the plain steps beside them (110M Q8_0, the same seconds), so a step
// right after a read is not the step a user gets. Reported:
//   decode       tokens/s of the repetitions without reads (what a user gets: the reads would
//                evict a small model's weights from the L3 cache between steps);
//   bound        tokens/s if every step took its read's time (1 / the median read time);
//   fraction     the median, over the pairs of windows, of the read window's median read time
//                over the plain window's median step time (its first step, which follows a read,
//                left out): the share of the bound the steps reached at that moment. For files
//                larger than the L3 cache (the 110M shape) it is a share of the DRAM bound; the
//                15M shape's weights stay in the L3 cache between plain steps, so its fraction is
//                no DRAM bound (and may pass 100%);
//   products     the step's matrix products alone, pass by pass as a decode step makes them (q, k,
//                v as one pass, o, w1 and w3 as one, w2, per layer, then the output matrix; one
//                fixed input row), in windows of 4 runs and 4 plain reads of their bytes in turn
//                (the first run after a read left out, as for the steps): the median over the
//                pairs of windows of read time over products time. Beside `fraction`, it says how
//                much of a step's distance from the bound is its kernels' and how much the rest of
//                the step's (attention, norms, RoPE, the activation, the passes' starts and ends).

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_products.h"
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
  double bytes = 0, kv_bytes = 0, decode = 0, prefill = 0, bandwidth = 0, bound = 0, fraction = 0;
  double products = 0;        // read time over the products' time (median)
  double prefill_gflops = 0;  // the prefill's multiply-adds (2 FLOPs each) a second
};

Result run_file(const std::string& path, int reps) {
  LoadedModel lm = load_model(path);
  Model& m = *lm.model;
  const ModelConfig& c = m.config();
  Result res;
  res.file = path;
  // The file's type: the kernels keep Q8_0 and Q4_0 interleaved ("q8_0_x16", kernels/qlinear.h).
  res.type = weight_type_name(m.weights().layers.at(0).wq.type);
  if (res.type.ends_with("_x16")) res.type.resize(res.type.size() - 4);
  res.bytes = m.weight_bytes_per_token();
  const int64_t V = c.vocab_size, P = std::min<int64_t>(512, c.context_length);
  constexpr int64_t steps = 128;
  // Step s (after the one-token prompt) attends to s + 2 keys and values in every layer.
  const double kv_per_token = 2.0 * static_cast<double>(c.n_layers * c.n_kv_heads * c.head_dim()) * sizeof(float);
  res.kv_bytes = kv_per_token * (2.0 + static_cast<double>(steps + 1)) / 2.0;
  std::vector<float> logits(static_cast<size_t>(V));
  std::vector<double> decode, prefill, bandwidth, reads, fraction;
  constexpr int64_t kWindow = 8;
  std::vector<double> plain_window, read_window;  // the current pair's plain steps and reads
  static_assert(steps % (2 * kWindow) == 0, "every repetition ends with a whole pair of windows");
  for (int r = 0; r < 2 * reps + 1; ++r) {  // the first repetition warms up (pages, scratch buffers)
    const bool probed = r > reps;           // then reps plain, then reps of plain and read windows
    plain_window.clear();
    read_window.clear();
    KVCache cache = m.make_cache(1, 1 + steps);
    TokenId next = 1;
    m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);
    const auto t0 = clock_type::now();
    for (int64_t s = 0; s < steps; ++s) {
      next = static_cast<TokenId>((s * 7919 + 11) % V);  // no sampling in the timing, as in llama-bench
      const auto ts = clock_type::now();
      m.forward_cached(logits.data(), &next, 1, 1, nullptr, cache, false);
      if (!probed) continue;
      const double step = seconds_since(ts);
      const int64_t in_window = s % kWindow;
      if ((s / kWindow) % 2 == 0) {  // a plain window
        if (in_window > 0) plain_window.push_back(step);
        continue;
      }
      const double bytes = res.bytes + kv_per_token * static_cast<double>(s + 2);
      const double read = bench::read_seconds(bytes);
      read_window.push_back(read);
      reads.push_back(read);
      bandwidth.push_back(bytes / read * 1e-9);
      if (in_window == kWindow - 1) {
        fraction.push_back(median(read_window) / median(plain_window));
        plain_window.clear();
        read_window.clear();
      }
    }
    if (r > 0 && !probed) decode.push_back(static_cast<double>(steps) / seconds_since(t0));
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
  res.bandwidth = median(bandwidth);
  res.fraction = median(fraction);
  res.bound = 1 / median(reads);
  res.prefill = median(prefill);
  // FLOPs a prompt token costs: 2 per weight of the layers' matrices (the output matrix multiplies
  // the last row only: left out) and attention's 4 d per key, over P / 2 keys on average (causal).
  const int64_t tables = (c.tied_embeddings ? 1 : 2) * c.vocab_size * c.d_model;  // embedding, output matrix
  const double layer_weights = static_cast<double>(m.n_params() - tables);
  res.prefill_gflops =
      res.prefill * (2.0 * layer_weights + 4.0 * static_cast<double>(c.n_layers * c.d_model) * (P / 2.0)) * 1e-9;
  res.products = bench::products_fraction(m.weights(), 4 * reps);
  return res;
}

// The usage line: on stdout with exit 0 when asked for (--help), else on stderr after the reason, exit 2.
int usage(const char* why) {
  if (!why) {
    fmt::print("usage: bench_quant [--reps N] [--json] FILE.gguf...\n");
    return 0;
  }
  fmt::print(stderr, "bench_quant: {}\nusage: bench_quant [--reps N] [--json] FILE.gguf...\n", why);
  return 2;
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
    if (a == "--reps") {
      if (i + 1 >= argc) return usage("--reps needs a number");
      char* end = nullptr;
      const long v = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || v < 1 || v > 1000) return usage("--reps takes a whole number from 1 to 1000");
      reps = static_cast<int>(v);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--help" || a == "-h") {
      return usage(nullptr);
    } else if (a.starts_with("-")) {
      return usage(fmt::format("unknown option {}", a).c_str());
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) return usage("no model file given");
  try {
    // The compute bound a prefill is held to: the float32 matrix product's rate in the same run
    // (an integer or bf16 product may pass it).
    const double sgemm = bench::sgemm_gflops(std::max(reps, 5));  // 10 ms a call: 5 at least
    if (!json)
      fmt::print(
          "threads {}; {} repetitions of 128 decode steps, and {} in windows of 8 steps, plain and each followed by a "
          "read of its bytes in turn\n",
          num_threads(), reps, reps);
    for (const auto& f : files) {
      const Result r = run_file(f, reps);
      const double bound = r.bound;
      if (json) {
        fmt::print(
            "{{\"file\": \"{}\", \"type\": \"{}\", \"bytes_per_token\": {:.0f}, \"kv_bytes_per_token\": {:.0f}, "
            "\"bandwidth_gbs\": {:.2f}, \"decode_tps\": {:.2f}, \"bound_tps\": {:.2f}, \"bound_fraction\": {:.4f}, "
            "\"prefill_tps\": {:.2f}, \"products_fraction\": {:.4f}, \"prefill_gflops\": {:.2f}, "
            "\"sgemm_gflops\": {:.2f}}}\n",
            r.file, r.type, r.bytes, r.kv_bytes, r.bandwidth, r.decode, bound, r.fraction, r.prefill, r.products,
            r.prefill_gflops, sgemm);
      } else {
        fmt::print(
            "{:<28} {:>5}  {:6.1f} + {:4.1f} MB/token  decode {:8.1f} tok/s; {:3.0f}% of the bound beside its reads "
            "(bound {:.1f} tok/s, {:.1f} GB/s); the products alone {:3.0f}% of a read of their bytes  prefill 512 "
            "{:8.1f} tok/s, {:.1f} GFLOP/s = {:.0f}% of sgemm's {:.1f}\n",
            f, r.type, r.bytes * 1e-6, r.kv_bytes * 1e-6, r.decode, 100 * r.fraction, bound, r.bandwidth,
            100 * r.products, r.prefill, r.prefill_gflops, 100 * r.prefill_gflops / sgemm, sgemm);
      }
    }
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_quant: {}\n", e.what());
    return 1;
  }
  return 0;
}
