// Byte-level BPE encoding speed for tiktoken's three encodings, gpt2, cl100k_base and o200k_base,
// on a corpus (default ../shared/data/mix.txt beside the source tree; TFORMER_BENCH_CORPUS
// overrides), at 1 thread and at every core. Counters: the corpus MB/s (bytes_per_second), the
// number of tokens, and an FNV-1a hash of the ids, so that bench/bench_tokenizer.sh can check a
// run against tiktoken's ids and print the ratio to tiktoken's native and WASM builds.
//
// Linear time (tiktoken#195: BPE over one long piece is quadratic in its length when done
// naively): BM_EncodeRun/ENC/N encodes N copies of "a" (one piece of N letters under every
// pattern), BM_EncodeOneLine/ENC encodes 10 MB of the corpus with every newline made a space (one
// line, so no cut at newlines helps). Constant MB/s across N means linear time.
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "tokenizer/byte_bpe.h"
#include "tokenizer/tokenizer.h"

namespace {

const char* const kEncodings[] = {"gpt2", "cl100k_base", "o200k_base"};

std::string corpus_path() {
  if (const char* env = std::getenv("TFORMER_BENCH_CORPUS"); env && *env) return env;
  // This file is bench/bench_tokenizer.cpp in the source tree; the data sits beside the tree.
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / ".." / "shared" / "data" / "mix.txt").string();
}

const std::string* corpus() {
  static const std::unique_ptr<std::string> text = [] {
    try {
      return std::make_unique<std::string>(tformer::read_file(corpus_path()));
    } catch (const tformer::Error&) {
      return std::unique_ptr<std::string>();
    }
  }();
  return text.get();
}

// The corpus as one line of 10^7 bytes: newlines made spaces, repeated, cut before a UTF-8
// continuation byte so that the text stays valid.
const std::string* one_line() {
  static const std::unique_ptr<std::string> text = []() -> std::unique_ptr<std::string> {
    const std::string* c = corpus();
    if (!c || c->empty()) return nullptr;
    auto line = std::make_unique<std::string>();
    constexpr size_t kBytes = 10'000'000;
    while (line->size() < kBytes) line->append(*c);
    size_t end = kBytes;
    while ((static_cast<unsigned char>((*line)[end]) & 0xC0) == 0x80) ++end;
    line->resize(end);
    for (char& ch : *line)
      if (ch == '\n' || ch == '\r') ch = ' ';
    return line;
  }();
  return text.get();
}

// The tokenizer of an encoding, loaded once; an error message when its files are missing.
const tformer::ByteBpeTokenizer* encoding(const std::string& name, std::string& error) {
  static std::map<std::string, std::unique_ptr<tformer::Tokenizer>> loaded;
  static std::map<std::string, std::string> errors;
  if (!loaded.count(name) && !errors.count(name)) {
    try {
      loaded[name] = tformer::tokenizer_by_name(name);
    } catch (const std::exception& e) {
      errors[name] = e.what();
    }
  }
  if (errors.count(name)) {
    error = errors[name];
    return nullptr;
  }
  return dynamic_cast<const tformer::ByteBpeTokenizer*>(loaded[name].get());
}

uint32_t fnv1a(const std::vector<tformer::TokenId>& ids) {
  uint32_t h = 2166136261u;
  for (tformer::TokenId id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 16777619u;
  }
  return h;
}

// Encodes `text` with `name` at `threads` threads for as long as the benchmark runs.
void run_encode(benchmark::State& state, const std::string& name, const std::string& text, int threads) {
  std::string error;
  const tformer::ByteBpeTokenizer* tok = encoding(name, error);
  if (!tok) return state.SkipWithError(error.c_str());
  const int saved = tformer::num_threads();
  tformer::set_num_threads(threads);
  std::vector<tformer::TokenId> ids;
  for (auto _ : state) {
    ids = tok->encode_ordinary(text);
    benchmark::DoNotOptimize(ids.data());
  }
  tformer::set_num_threads(saved);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["threads"] = static_cast<double>(threads);
  state.counters["bytes"] = static_cast<double>(text.size());
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.counters["ids_fnv1a"] = static_cast<double>(fnv1a(ids));
}

void BM_Encode(benchmark::State& state, const std::string& name) {
  const std::string* text = corpus();
  if (!text) return state.SkipWithError(("no corpus at " + corpus_path() + " (set TFORMER_BENCH_CORPUS)").c_str());
  run_encode(state, name, *text, static_cast<int>(state.range(0)));
}

void BM_EncodeRun(benchmark::State& state, const std::string& name) {
  run_encode(state, name, std::string(static_cast<size_t>(state.range(0)), 'a'), 1);
}

void BM_EncodeOneLine(benchmark::State& state, const std::string& name) {
  const std::string* text = one_line();
  if (!text) return state.SkipWithError(("no corpus at " + corpus_path() + " (set TFORMER_BENCH_CORPUS)").c_str());
  run_encode(state, name, *text, 1);
}

void BM_LoadVocabulary(benchmark::State& state, const std::string& name) {
  for (auto _ : state) {
    try {
      benchmark::DoNotOptimize(tformer::tokenizer_by_name(name)->vocab_size());
    } catch (const std::exception& e) {
      return state.SkipWithError(e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int cores = omp_get_num_procs();
  for (const char* name : kEncodings) {
    const std::string n = name;
    auto* b = benchmark::RegisterBenchmark(("BM_Encode/" + n).c_str(), BM_Encode, n)->ArgName("threads")->Arg(1);
    if (cores > 1) b->Arg(cores);
    b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
  }
  for (const char* name : kEncodings) {
    const std::string n = name;
    benchmark::RegisterBenchmark(("BM_EncodeRun/" + n).c_str(), BM_EncodeRun, n)
        ->ArgName("bytes")
        ->RangeMultiplier(10)
        ->Range(10'000, 10'000'000)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
    benchmark::RegisterBenchmark(("BM_EncodeOneLine/" + n).c_str(), BM_EncodeOneLine, n)
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const char* name : kEncodings)
    benchmark::RegisterBenchmark(("BM_LoadVocabulary/" + std::string(name)).c_str(), BM_LoadVocabulary, name)
        ->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
