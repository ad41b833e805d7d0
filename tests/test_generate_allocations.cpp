// Generating a token (the forward pass through the KV cache, sampling, and streaming its text)
// allocates nothing: heap allocations are counted at the malloc level (tests/alloc_counter.h:
// operator new, C code, OpenBLAS, libgomp and glibc alike) over a generation of N tokens and one
// of 4N tokens, and the two counts must be equal. What a generation allocates once (the cache,
// the result vectors, the samplers' tables) is the same for both; anything allocated per token
// would show up 3N times more in the longer one.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <string>
#include <thread>
#include <vector>

#include "alloc_counter.h"
#include "core/rng.h"
#include "core/scratch.h"
#include "core/threads.h"
#include "generate/generator.h"
#include "model/model.h"
#include "tokenizer/byte_bpe_train.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/sennrich_tokenizer.h"

namespace tformer {
namespace {

Model make_model(const char* overrides) {
  auto j = nlohmann::json::parse(R"({"vocab_size": 256, "context_length": 512, "d_model": 32, "n_layers": 2,
                                     "n_heads": 4, "d_ff": 64})");
  j.update(nlohmann::json::parse(overrides));
  Model m(ModelConfig::from_json(j, "test"));
  m.init_gpt2(3);
  return m;
}

// Text streamed into a fixed buffer, as a terminal would receive it.
struct Sink {
  std::array<char, 1 << 16> bytes{};
  size_t size = 0;
  void put(std::string_view piece) {
    for (char c : piece)
      if (size < bytes.size()) bytes[size++] = c;
  }
};

// Allocations made by one generation of n tokens for each prompt, text streamed as it comes.
int64_t allocations_of(Model& m, const Tokenizer& tok, const std::vector<std::vector<TokenId>>& prompts, int64_t n,
                       const SamplerConfig& sampler, Sink& sink) {
  GenerateOptions o;
  o.max_new_tokens = n;
  o.sampler = sampler;
  StreamingDecoder decoder(tok, prompts[0].back());
  const int64_t before = g_allocations.load();
  const auto out = generate(m, prompts, o, [&](int64_t b, TokenId id) {
    if (b == 0) sink.put(decoder.feed(id));
  });
  sink.put(decoder.flush());
  const int64_t used = g_allocations.load() - before;
  EXPECT_EQ(static_cast<int64_t>(out[0].size()), n);
  return used;
}

TEST(GenerateAllocations, ATokenAllocatesNothingAtTheMallocLevel) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  const CharTokenizer tok = CharTokenizer::bytes();
  const int64_t N = 24;
  for (const char* cfg : {R"({})", R"({"positions": "rope", "norm": "rmsnorm", "activation": "swiglu",
                                     "n_kv_heads": 2, "bias": false})"})
    for (const SamplerConfig& sampler :
         {SamplerConfig{0.0, 0, 1.0, 1}, SamplerConfig{0.8, 0, 0.9, 2}, SamplerConfig{1.0, 40, 0.95, 3}})
      for (const int64_t batch : {1, 3}) {
        SCOPED_TRACE(std::string(cfg) + " batch " + std::to_string(batch) + " temperature " +
                     std::to_string(sampler.temperature) + " top-k " + std::to_string(sampler.top_k));
        Model m = make_model(cfg);
        std::vector<std::vector<TokenId>> prompts;
        for (int64_t b = 0; b < batch; ++b) prompts.push_back(tok.encode(b == 1 ? "Tok" : "Hello, w"));
        Sink sink;
        allocations_of(m, tok, prompts, 4 * N, sampler, sink);  // warm-up: the workspace and scratch grow here
        const int64_t short_run = allocations_of(m, tok, prompts, N, sampler, sink);
        const int64_t long_run = allocations_of(m, tok, prompts, 4 * N, sampler, sink);
        EXPECT_EQ(long_run - short_run, 0) << "a generation of " << N << " tokens made " << short_run
                                           << " allocations, one of " << 4 * N << " made " << long_run;
        EXPECT_GT(sink.size, 0u);
      }
}

// The same with the other streaming decoders (a trained byte-level BPE, whose random ids split
// UTF-8 characters across tokens; Sennrich BPE, whose spaces depend on the previous token) and with
// the reference attention kernel.
TEST(GenerateAllocations, EveryTokenizerAndBothAttentionKernels) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  const std::string corpus = "the thin cat sat on the mat; \xc3\xa9t\xc3\xa9 \xe2\x82\xac the theme then";
  ByteBpeTrainOptions bo;
  bo.vocab_size = 256 + 12 + 1;
  bo.min_frequency = 1;
  const ByteBpeTokenizer byte_bpe = train_byte_bpe(corpus, bo);
  const SennrichTokenizer sennrich = SennrichTokenizer::from_merges(
      {{"t", "h"}, {"th", "e</w>"}, {"a", "t</w>"}, {"th", "i"}}, {"a", "c", "e", "h", "i", "m", "n", "o", "s", "t"});
  const Tokenizer* tokenizers[] = {&byte_bpe, &sennrich};
  const int64_t N = 20;
  for (const Tokenizer* tok : tokenizers)
    for (const AttentionKernel kernel : {AttentionKernel::Tiled, AttentionKernel::Reference}) {
      SCOPED_TRACE(tok->kind() + (kernel == AttentionKernel::Tiled ? " tiled" : " reference"));
      Model m = make_model(("{\"vocab_size\": " + std::to_string(tok->vocab_size()) + "}").c_str());
      m.set_attention_kernel(kernel);
      const std::vector<std::vector<TokenId>> prompts{tok->encode("the cat"), tok->encode("then")};
      const SamplerConfig sampler{1.0, 0, 1.0, 5};
      Sink sink;
      allocations_of(m, *tok, prompts, 4 * N, sampler, sink);
      const int64_t short_run = allocations_of(m, *tok, prompts, N, sampler, sink);
      const int64_t long_run = allocations_of(m, *tok, prompts, 4 * N, sampler, sink);
      EXPECT_EQ(long_run - short_run, 0) << "a generation of " << N << " tokens made " << short_run
                                         << " allocations, one of " << 4 * N << " made " << long_run;
      EXPECT_GT(sink.size, 0u);
    }
}

// The same at one thread (the pool is never forked, no OpenMP region is entered).
TEST(GenerateAllocations, ATokenAllocatesNothingOnOneThread) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  const int saved = num_threads();
  set_num_threads(1);
  const CharTokenizer tok = CharTokenizer::bytes();
  Model m = make_model(R"({"positions": "rope", "n_kv_heads": 1})");
  const std::vector<std::vector<TokenId>> prompts{tok.encode("Once upon")};
  Sink sink;
  const SamplerConfig sampler{0.9, 0, 0.9, 7};
  allocations_of(m, tok, prompts, 80, sampler, sink);
  const int64_t short_run = allocations_of(m, tok, prompts, 20, sampler, sink);
  const int64_t long_run = allocations_of(m, tok, prompts, 80, sampler, sink);
  set_num_threads(saved);
  EXPECT_EQ(long_run - short_run, 0);
}

// The server's step: sequences in chosen cache slots (forward_cached's `slots`), one token each.
TEST(GenerateAllocations, AStepInChosenCacheSlotsAllocatesNothing) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  Model m = make_model(R"({"positions": "rope", "n_kv_heads": 2})");
  auto cache = m.make_cache(4, 64);
  const std::array<int64_t, 2> slots{2, 0};
  std::vector<float> logits(2 * 256);
  std::array<TokenId, 2> ids{7, 11};
  for (int i = 0; i < 2; ++i) m.forward_cached(logits.data(), ids.data(), 2, 1, nullptr, cache, false, slots.data());
  const int64_t before = g_allocations.load();
  for (int i = 0; i < 3; ++i) m.forward_cached(logits.data(), ids.data(), 2, 1, nullptr, cache, false, slots.data());
  EXPECT_EQ(g_allocations.load() - before, 0);
  EXPECT_EQ(cache.length(2), 5);
  EXPECT_EQ(cache.length(0), 5);
  EXPECT_EQ(cache.length(1), 0);
}

// Allocations counted while only thread `who` of a two-thread region takes slot 0 of element
// type P, `n` elements.
template <typename P>
int64_t allocations_when_thread_takes(int who, size_t n) {
  int64_t counted = -1;
  parallel_region(true, [&] {
    if (omp_get_thread_num() != who) return;
    const int64_t before = g_allocations.load();
    const ScratchBuffer<P> b(0, n, typename ScratchBuffer<P>::Unfilled{});
    counted = g_allocations.load() - before;
    EXPECT_GE(b.size(), n);
  });
  return counted;
}

// parallel_for lets a thread take tasks it has never run (core/threads.h), so scratch grown on
// one thread in a parallel region is shared with every thread at the next share_scratch_sizes()
// (called at the start of each forward and training step): the other thread then takes the
// same slot without allocating. Without the call it allocates (the control, on another element
// type so that the two do not share sizes).
TEST(GenerateAllocations, ScratchGrownOnOneThreadIsReadyOnEveryThread) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  enum class Unshared : uint32_t {};  // an element type of its own
  enum class Shared : uint32_t {};    // an element type of its own
  const int saved = num_threads();
  set_num_threads(2);
  parallel_region(true, [] {});  // the team exists before anything is counted
  EXPECT_GT(allocations_when_thread_takes<Unshared>(0, 1000), 0);
  EXPECT_GT(allocations_when_thread_takes<Unshared>(1, 1000), 0);  // thread 1 grows its own
  EXPECT_EQ(allocations_when_thread_takes<Unshared>(1, 1000), 0);  // and keeps it
  EXPECT_GT(allocations_when_thread_takes<Shared>(0, 1000), 0);
  share_scratch_sizes();
  EXPECT_EQ(allocations_when_thread_takes<Shared>(1, 1000), 0);
  EXPECT_EQ(allocations_when_thread_takes<Shared>(0, 1000), 0);
  EXPECT_GT(allocations_when_thread_takes<Shared>(1, 1001), 0);  // a larger size still grows
  share_scratch_sizes();
  EXPECT_EQ(allocations_when_thread_takes<Shared>(0, 1001), 0);
  // A slot grown outside any parallel region is the calling thread's alone: not shared.
  enum class CallerOnly : uint32_t {};  // an element type of its own
  EXPECT_EQ(ScratchBuffer<CallerOnly>(0, 1000).size(), 1000u);
  share_scratch_sizes();
  EXPECT_GT(allocations_when_thread_takes<CallerOnly>(1, 1000), 0);
  set_num_threads(saved);
}

// Each thread that opens parallel regions has a pool of its own (the server's loop thread beside
// the main thread): the sizes reach a second pool's threads when that thread shares them, though
// the first pool shared the same sizes already.
TEST(GenerateAllocations, ScratchSizesReachEveryPool) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  enum class Pooled : uint32_t {};  // an element type of its own
  const int saved = num_threads();
  set_num_threads(2);
  parallel_region(true, [] {});
  EXPECT_GT(allocations_when_thread_takes<Pooled>(0, 1000), 0);
  share_scratch_sizes();
  EXPECT_EQ(allocations_when_thread_takes<Pooled>(1, 1000), 0);
  int64_t other_pool = -1;
  std::thread t([&] {
    omp_set_num_threads(2);
    parallel_region(true, [] {});  // this thread's pool exists before anything is counted
    share_scratch_sizes();
    other_pool = allocations_when_thread_takes<Pooled>(1, 1000);
  });
  t.join();
  EXPECT_EQ(other_pool, 0);
  set_num_threads(saved);
}

// The counter counts: a vector, a C malloc and a std::string beyond its inline buffer all show.
TEST(GenerateAllocations, TheCounterSeesEveryKindOfAllocation) {
  if (!kCountingAllocations) GTEST_SKIP() << "allocations are not counted under AddressSanitizer (it owns malloc)";
  int64_t before = g_allocations.load();
  std::vector<int> v(100);
  EXPECT_EQ(g_allocations.load() - before, 1);
  before = g_allocations.load();
  void* p = std::malloc(64);
  EXPECT_EQ(g_allocations.load() - before, 1);
  std::free(p);
  before = g_allocations.load();
  std::string s(100, 'x');
  EXPECT_EQ(g_allocations.load() - before, 1);
  EXPECT_EQ(v.size() + s.size(), 200u);
}

}  // namespace
}  // namespace tformer
