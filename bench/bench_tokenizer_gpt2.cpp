// GPT-2 encoding speed on a corpus (default ../shared/data/mix.txt beside the source tree;
// TFORMER_BENCH_CORPUS overrides), at 1 thread and at every core. Counters: the corpus MB/s
// (bytes_per_second), the number of tokens, and an FNV-1a hash of the ids so that a run can be
// checked against tiktoken's ids (bench/bench_tokenizer_gpt2.sh prints the ratio to tiktoken).
#include <benchmark/benchmark.h>
#include <omp.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "tokenizer/byte_bpe.h"

namespace {

std::string corpus_path() {
  if (const char* env = std::getenv("TFORMER_BENCH_CORPUS"); env && *env) return env;
  // This file is bench/bench_tokenizer_gpt2.cpp in the source tree; the data sits beside the tree.
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

const tformer::ByteBpeTokenizer* gpt2() {
  static const std::unique_ptr<tformer::ByteBpeTokenizer> tok = []() -> std::unique_ptr<tformer::ByteBpeTokenizer> {
    try {
      return std::make_unique<tformer::ByteBpeTokenizer>(
          tformer::ByteBpeTokenizer::load_gpt2_dir(tformer::gpt2_vocab_dir()));
    } catch (const std::exception&) {
      return nullptr;
    }
  }();
  return tok.get();
}

uint32_t fnv1a(const std::vector<tformer::TokenId>& ids) {
  uint32_t h = 2166136261u;
  for (tformer::TokenId id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 16777619u;
  }
  return h;
}

void BM_Gpt2Encode(benchmark::State& state) {
  const std::string* text = corpus();
  if (!text) return state.SkipWithError(("no corpus at " + corpus_path() + " (set TFORMER_BENCH_CORPUS)").c_str());
  if (!gpt2()) return state.SkipWithError("GPT-2's vocabulary is missing: run scripts/fetch-gpt2-vocab.sh");
  const int saved = tformer::num_threads();
  tformer::set_num_threads(static_cast<int>(state.range(0)));
  std::vector<tformer::TokenId> ids;
  for (auto _ : state) {
    ids = gpt2()->encode_ordinary(*text);
    benchmark::DoNotOptimize(ids.data());
  }
  tformer::set_num_threads(saved);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text->size()));
  state.counters["threads"] = static_cast<double>(state.range(0));
  state.counters["tokens"] = static_cast<double>(ids.size());
  state.counters["ids_fnv1a"] = static_cast<double>(fnv1a(ids));
}

void BM_Gpt2LoadVocabulary(benchmark::State& state) {
  std::string dir;
  try {
    dir = tformer::gpt2_vocab_dir();
  } catch (const std::exception& e) {
    return state.SkipWithError(e.what());
  }
  for (auto _ : state) benchmark::DoNotOptimize(tformer::ByteBpeTokenizer::load_gpt2_dir(dir).vocab_size());
}

}  // namespace

int main(int argc, char** argv) {
  const int cores = omp_get_num_procs();
  auto* b = benchmark::RegisterBenchmark("BM_Gpt2Encode", BM_Gpt2Encode)->ArgName("threads")->Arg(1);
  if (cores > 1) b->Arg(cores);
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
  benchmark::RegisterBenchmark("BM_Gpt2LoadVocabulary", BM_Gpt2LoadVocabulary)->Unit(benchmark::kMillisecond);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
