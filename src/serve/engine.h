// The server's inference loop: one thread owns the model and the KV cache; requests come in
// through submit() from any thread and their results go out through each request's Stream.
//
// Continuous batching. The cache has `parallel` slots of `context` tokens each. A request waits
// in a bounded queue until a slot is free, then joins the running batch at the next step. Each
// step of the loop
//   1. samples one token for every sequence that is decoding (from the logits of its last
//      forward; the draws in parallel, each from its own generator), streams its text, and
//      retires the sequences that finished (end-of-text, their max_tokens, a stop string, a full
//      slot) or were cancelled, freeing their slots;
//   2. runs one decode forward over the sequences still decoding, each at its own position
//      (Model::forward_cached with slots: the batch is the sequences of this step, wherever they
//      sit in the cache);
//   3. runs one prefill step: the next chunk (at most `prefill_chunk` tokens) of the oldest
//      request still prefilling, and, where that chunk is short (below the model's
//      row_independent_below: 128 tokens for float32 weights in a build with AVX-512, 8 for the
//      stored types), the next short chunks of the requests after it (a one-token chunk only with
//      one-token chunks), in one forward of at most `prefill_chunk` token rows; so a long prompt
//      delays the others' decode by one chunk a step, and sixteen short prompts that arrive
//      together prefill in one forward, not sixteen.
//
// Batch invariance. A sequence's logits are bit-identical whether it runs alone or beside others:
// its prefill chunks are the same chunks however busy the server is; a long chunk runs alone, and
// short ones together under RowIndependentProducts (kernels/linear.h), whose per-row arithmetic
// does not depend on the batch and is, below row_independent_below rows, what a forward of the
// chunk alone takes too; the decode forward runs under RowIndependentProducts; attention is per
// sequence, with the kernel the sequence's chunk takes alone (one token wide or wider: see the
// prefill step's code). So a greedy or seeded request returns the same tokens however busy the
// server is, and the same tokens as `tformer generate` with the same seed and prefill chunk.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "generate/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace tformer::serve {

struct EngineOptions {
  int64_t parallel = 4;         // cache slots: sequences decoding at once
  int64_t context = 0;          // tokens per slot (0: the model's context_length)
  int64_t prefill_chunk = 512;  // prompt tokens per prefill step
  int64_t max_queue = 64;       // requests waiting beyond the free slots; more and submit() refuses
  int step_delay_ms = 0;        // a pause after each step: for tests, a model slow enough to watch
  // false: the constructor starts the loop on a thread of its own. true: the caller runs it
  // (run()), on the thread that loaded the model. OpenMP keeps a pool of worker threads for each
  // thread that opens parallel regions, and when the pools together hold more threads than there
  // are cores it stops spinning between regions and sleeps at once: a loop on a second thread
  // beside the loading thread's pool decoded at 67% of its speed on 2 cores (bench/serve.sh).
  bool run_on_caller = false;
};

// What a completion asks for (already validated by the HTTP layer).
struct CompletionJob {
  std::vector<TokenId> prompt;  // non-empty, BOS included where the vocabulary wants one
  int64_t max_tokens = 16;      // prompt + max_tokens <= context (checked by submit)
  SamplerConfig sampler;
  std::vector<std::string> stop;  // stop strings (the text ends before the first one found)
  int top_logprobs = -1;          // -1: no logprobs; 0..20: the chosen token's and that many others
};

struct TokenLogprob {
  std::string token;  // the token's text (its bytes; not always whole UTF-8 characters)
  double logprob = 0;
  std::vector<std::pair<std::string, double>> top;  // the most probable alternatives, best first
};

// One request's results, filled by the inference loop and drained by the HTTP thread.
class Stream {
 public:
  struct Event {
    enum class Kind { Text, Done, Error } kind = Kind::Text;
    std::string text;                  // Text: the new characters (never a split UTF-8 character)
    std::vector<TokenLogprob> tokens;  // Text: the tokens these characters came from, when asked
    std::string finish_reason;         // Done: "stop" or "length"; Error: the message
  };
  // Waits up to timeout_ms for events and moves them into out; false when none came.
  bool wait(std::vector<Event>& out, int timeout_ms);
  // The HTTP side: the client has gone, or the request is given up. The loop retires it at its
  // next step (a queued request never runs).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  const std::chrono::steady_clock::time_point submitted = std::chrono::steady_clock::now();
  int64_t prompt_tokens = 0;                  // set by submit
  std::atomic<int64_t> completion_tokens{0};  // tokens sampled so far
  std::atomic<double> first_token_seconds{-1};

  void push(Event e);  // the loop's side

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  std::atomic<bool> cancelled_{false};
};

// Prometheus counters and gauges (GET /metrics).
struct Histogram {
  std::vector<double> bounds;  // upper bounds, increasing; a +Inf bucket follows
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct EngineMetrics {
  uint64_t requests = 0, finished = 0, cancelled = 0, rejected = 0, failed = 0;
  uint64_t prompt_tokens = 0, completion_tokens = 0;
  int64_t queued = 0, active = 0;
  int64_t decode_batch = 0, max_decode_batch = 0;    // sequences in the last decode forward, and the most
  int64_t prefill_batch = 0, max_prefill_batch = 0;  // sequences in the last prefill forward, and the most
  // Where the inference loop's time goes: its steps' phases (seconds, steps, and token rows,
  // padding excluded), counted from the start.
  double sample_seconds = 0, decode_seconds = 0, prefill_seconds = 0, step_seconds = 0;
  uint64_t steps = 0, decode_steps = 0, decode_rows = 0, prefill_steps = 0, prefill_rows = 0;
  Histogram ttft{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
  Histogram token_latency{{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}};
};

class Engine {
 public:
  // The model and tokenizer outlive the engine. Starts the inference loop.
  Engine(Model& model, const Tokenizer& tokenizer, EngineOptions options);
  ~Engine();  // stop() and join
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a job; null when the queue is full: max_queue requests already wait beyond the free
  // slots (the caller answers 503). A job whose prompt and
  // max_tokens cannot fit a slot throws Error naming both numbers (checked first).
  std::shared_ptr<Stream> submit(CompletionJob job);
  // n independent samples of one prompt, with seeds seed, seed + 1, ...: one stream each, or none
  // when the queue has no room for n. They are admitted together (n free slots) and share one
  // prefill: the first sequence prefills, the others get copies of its cache slots and logits,
  // bit-identical to what their own prefill would have made. n > parallel is an Error naming both.
  std::vector<std::shared_ptr<Stream>> submit_samples(CompletionJob job, int64_t n);
  // Runs f on the inference loop's thread, between two steps (the loop owns the model and its
  // workspace: the web page's attention maps run here), and waits for it. f's exception is
  // rethrown here; an Error when the engine is stopping or stops before f runs.
  void run_on_loop(const std::function<void(Model&)>& f);
  // The inference loop, on the calling thread, until stop() (run_on_caller only).
  void run();
  // Ends the loop: every queued and running request gets an Error event ("the server is shutting
  // down") and the loop thread exits. Idempotent.
  void stop();

  bool stopping() const {
    std::lock_guard lock(mu_);
    return stopping_;
  }
  int64_t context() const { return options_.context; }
  const EngineOptions& options() const { return options_; }
  EngineMetrics metrics() const;
  // Bytes of the KV cache (allocated: KVCache::allocated_bytes) and of the tokens it holds now.
  int64_t cache_bytes() const { return cache_bytes_; }
  const Model& model() const { return model_; }

 private:
  struct Sequence;
  void loop();
  void step();
  bool running() const {  // any sequence in a slot
    return std::any_of(slots_.begin(), slots_.end(), [](const auto& s) { return bool(s); });
  }
  void emit(Sequence& s);  // a drawn token: counted and streamed (run by the draws in parallel)
  void admit();
  void prune_cancelled_locked();  // drops queued samples whose client has gone (mu_ held)
  void finish(Sequence& s, const std::string& reason);
  void retire(std::unique_ptr<Sequence>& sp, const std::string& reason);  // finish and free
  std::vector<Sequence*> followers(const Sequence& leader);

  Model& model_;
  const Tokenizer& tokenizer_;
  EngineOptions options_;
  KVCache cache_;
  int64_t cache_bytes_ = 0;
  std::vector<TokenId> never_sample_;
  std::optional<TokenId> eot_;
  // The model's row_independent_below: prefill chunks shorter than this may share a forward.
  int64_t row_independent_below_ = 0;
  std::vector<float> step_logits_;  // [parallel, vocab]: a decode or grouped prefill forward's logits

  mutable std::mutex mu_;  // guards queue_, stopping_, metrics_
  std::condition_variable cv_;
  struct Pending {
    CompletionJob job;
    std::vector<std::shared_ptr<Stream>> outs;  // one per sample
    std::vector<uint64_t> seeds;                // each sample's, kept when another leaves
  };
  std::deque<Pending> queue_;
  std::deque<std::packaged_task<void()>> tasks_;  // run_on_loop's
  int64_t queued_sequences_ = 0;                  // sum of outs.size() over queue_
  bool stopping_ = false;
  EngineMetrics metrics_;

  // The loop's own state (only its thread touches it).
  std::vector<std::unique_ptr<Sequence>> slots_;  // [parallel]; null = free
  uint64_t admitted_ = 0;
  std::thread thread_;
};

}  // namespace tformer::serve
