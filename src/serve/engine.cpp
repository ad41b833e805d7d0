#include "serve/engine.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/memory.h"
#include "core/threads.h"
#include "kernels/linear.h"

namespace tformer::serve {

namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

void Stream::push(Event e) {
  {
    std::lock_guard lock(mu_);
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

bool Stream::wait(std::vector<Event>& out, int timeout_ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return !events_.empty(); });
  if (events_.empty()) return false;
  for (auto& e : events_) out.push_back(std::move(e));
  events_.clear();
  return true;
}

struct Engine::Sequence {
  CompletionJob job;
  std::shared_ptr<Stream> out;
  int64_t slot = 0;
  uint64_t order = 0;         // admission order: the oldest prefills first
  int64_t prefilled = 0;      // prompt tokens in the cache
  std::vector<float> logits;  // a prefill chunk's, alone
  // The logits of the next draw: the sequence's own (after a prefill alone), or its row of the
  // step's buffer (after a decode step or a grouped prefill), valid until the next step's forward.
  float* next_logits = nullptr;
  Sampler sampler;
  StreamingDecoder decoder;
  std::string text;  // the generated text so far (whole characters)
  size_t sent = 0;   // bytes of text already streamed
  size_t longest_stop = 0;
  int64_t generated = 0;
  TokenId next = 0;    // this step's draw
  std::string finish;  // why it ends after this draw ("stop", "length"), or empty
  // Samples of one prompt: a follower waits (leader_slot >= 0) for the leader's prefill, then takes
  // copies of its cache slots and logits. leader_order tells a follower from a later occupant of
  // the same slot.
  int64_t leader_slot = -1;
  uint64_t leader_order = 0;
  std::vector<int64_t> follower_slots;
  std::vector<TokenLogprob> pending_logprobs;  // tokens whose text has not been streamed yet
  Clock::time_point start, last_token;

  Sequence(CompletionJob j, std::shared_ptr<Stream> o, const Tokenizer& tok, int64_t vocab)
      : job(std::move(j)),
        out(std::move(o)),
        logits(static_cast<size_t>(vocab)),
        sampler(job.sampler),
        decoder(tok, job.prompt.back()),
        start(out->submitted) {
    next_logits = logits.data();
    for (const auto& s : job.stop) longest_stop = std::max(longest_stop, s.size());
  }
  bool decoding() const { return prefilled == static_cast<int64_t>(job.prompt.size()); }
};

Engine::Engine(Model& model, const Tokenizer& tokenizer, EngineOptions options)
    : model_(model), tokenizer_(tokenizer), options_(options) {
  const auto& c = model.config();
  if (options_.context <= 0) options_.context = c.context_length;
  if (options_.context > c.context_length)
    fail_input("--context", "--context {} is more than the model's context_length {}", options_.context,
               c.context_length);
  if (options_.parallel < 1) fail_input("--parallel", "--parallel must be at least 1, got {}", options_.parallel);
  if (options_.prefill_chunk < 1)
    fail_input("--prefill-chunk", "--prefill-chunk must be at least 1, got {}", options_.prefill_chunk);
  if (options_.max_queue < 0) fail_input("--queue", "--queue must be >= 0, got {}", options_.max_queue);
  // The cache budget, --parallel x --context, refused up front when the memory cannot hold it
  // (counted in double: a huge --parallel must not wrap round an integer into a small number).
  const double cache_bytes = 2.0 * static_cast<double>(c.n_layers) * static_cast<double>(options_.parallel) *
                             static_cast<double>(c.n_kv_heads) * static_cast<double>(options_.context) *
                             static_cast<double>(c.head_dim()) * sizeof(float);
  if (const uint64_t available = available_memory_bytes(); cache_bytes > static_cast<double>(available))
    fail_input("--parallel",
               "--parallel {} x --context {}: the KV cache would take {:.0f} bytes ({:.3g} GB) but only {} bytes of "
               "memory are available; lower --parallel or --context",
               options_.parallel, options_.context, cache_bytes, cache_bytes / 1e9, available);
  cache_ = model.make_cache(options_.parallel, options_.context);
  cache_bytes_ = cache_.allocated_bytes();
  never_sample_ = non_token_ids(tokenizer, c.vocab_size);
  eot_ = tokenizer.eot_id();
  slots_.resize(static_cast<size_t>(options_.parallel));
  // Rows: a decode step's sequences, or a prefill step's (one chunk, or several short ones).
  model_.reserve(std::max(options_.parallel, std::min(options_.prefill_chunk, options_.parallel * options_.context)),
                 options_.parallel);
  row_independent_below_ = model_.row_independent_below();
  step_logits_.resize(static_cast<size_t>(options_.parallel * c.vocab_size));
  if (!options_.run_on_caller) thread_ = std::thread([this] { loop(); });
}

void Engine::run() {
  TF_CHECK(options_.run_on_caller, "Engine::run: this engine runs its loop on its own thread");
  loop();
}

Engine::~Engine() {
  stop();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<Stream> Engine::submit(CompletionJob job) {
  auto outs = submit_samples(std::move(job), 1);
  return outs.empty() ? nullptr : outs[0];
}

std::vector<std::shared_ptr<Stream>> Engine::submit_samples(CompletionJob job, int64_t n) {
  const int64_t P = static_cast<int64_t>(job.prompt.size());
  if (P == 0) fail_input("prompt", "the prompt is empty: generation needs at least one token to condition on");
  if (job.max_tokens < 0) fail_input("max_tokens", "max_tokens must be >= 0, got {}", job.max_tokens);
  if (P + job.max_tokens > options_.context)
    fail_input("max_tokens",
               "the prompt has {} tokens and max_tokens is {}: {} is more than the context of {} tokens per sequence",
               P, job.max_tokens, P + job.max_tokens, options_.context);
  if (n < 1 || n > options_.parallel)
    fail_input("n", "n is {}: the server runs at most {} sequences at once (--parallel)", n, options_.parallel);
  const int64_t V = model_.config().vocab_size;
  for (int64_t i = 0; i < P; ++i)
    if (job.prompt[i] < 0 || job.prompt[i] >= V)
      fail_input("prompt", "prompt token {} is id {}, outside the vocabulary of {}", i, job.prompt[i], V);
  job.sampler.validate();
  std::vector<std::shared_ptr<Stream>> outs;
  for (int64_t i = 0; i < n; ++i) {
    outs.push_back(std::make_shared<Stream>());
    outs.back()->prompt_tokens = P;
  }
  {
    std::lock_guard lock(mu_);
    prune_cancelled_locked();  // abandoned requests hold no room
    // Room: the free slots plus the queue's own length.
    const int64_t room = options_.max_queue + options_.parallel - metrics_.active;
    if (stopping_ || queued_sequences_ + n > room) {
      metrics_.rejected += static_cast<uint64_t>(n);
      return {};
    }
    metrics_.requests += static_cast<uint64_t>(n);
    metrics_.prompt_tokens += static_cast<uint64_t>(P * n);
    std::vector<uint64_t> seeds;
    for (int64_t i = 0; i < n; ++i) seeds.push_back(job.sampler.seed + static_cast<uint64_t>(i));
    queue_.push_back({std::move(job), outs, std::move(seeds)});
    queued_sequences_ += n;
    metrics_.queued = queued_sequences_;
  }
  cv_.notify_all();
  return outs;
}

void Engine::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard lock(mu_);
  return metrics_;
}

void Engine::finish(Sequence& s, const std::string& reason) {
  const bool done = reason == "stop" || reason == "length";
  {
    // Counted before the stream hears of it: a client that has its answer sees it in /metrics.
    std::lock_guard lock(mu_);
    --metrics_.active;
    if (done)
      ++metrics_.finished;
    else if (s.out->cancelled())
      ++metrics_.cancelled;
    else
      ++metrics_.failed;
  }
  Stream::Event e;
  e.kind = done ? Stream::Event::Kind::Done : Stream::Event::Kind::Error;
  e.finish_reason = reason;
  s.out->push(std::move(e));
}

void Engine::prune_cancelled_locked() {
  for (auto it = queue_.begin(); it != queue_.end();) {
    int64_t dropped = 0;
    for (size_t k = it->outs.size(); k-- > 0;)
      if (it->outs[k]->cancelled()) {
        it->outs.erase(it->outs.begin() + static_cast<std::ptrdiff_t>(k));
        it->seeds.erase(it->seeds.begin() + static_cast<std::ptrdiff_t>(k));
        ++dropped;
      }
    metrics_.cancelled += static_cast<uint64_t>(dropped);
    queued_sequences_ -= dropped;
    it = it->outs.empty() ? queue_.erase(it) : it + 1;
  }
  metrics_.queued = queued_sequences_;
}

void Engine::admit() {
  std::lock_guard lock(mu_);
  std::vector<size_t> free;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i]) free.push_back(i);
  prune_cancelled_locked();  // samples whose client has gone never run
  while (!queue_.empty()) {
    Pending& head = queue_.front();
    if (head.outs.size() > free.size()) break;  // first come, first served: the head waits
    Sequence* leader = nullptr;
    for (size_t k = 0; k < head.outs.size(); ++k) {
      CompletionJob job = head.job;
      job.sampler.seed = head.seeds[k];
      auto s = std::make_unique<Sequence>(std::move(job), head.outs[k], tokenizer_, model_.config().vocab_size);
      s->slot = static_cast<int64_t>(free[k]);
      s->order = admitted_++;
      cache_.clear(s->slot);
      if (leader) {
        s->leader_slot = leader->slot;
        s->leader_order = leader->order;
        leader->follower_slots.push_back(s->slot);
      }
      slots_[free[k]] = std::move(s);
      if (!leader) leader = slots_[free[k]].get();
    }
    free.erase(free.begin(), free.begin() + static_cast<std::ptrdiff_t>(head.outs.size()));
    queued_sequences_ -= static_cast<int64_t>(head.outs.size());
    queue_.pop_front();
  }
  metrics_.queued = queued_sequences_;
  metrics_.active = 0;
  for (const auto& s : slots_) metrics_.active += s ? 1 : 0;
}

// The followers of `leader` still waiting for its prefill (their slots hold them).
std::vector<Engine::Sequence*> Engine::followers(const Sequence& leader) {
  std::vector<Sequence*> out;
  for (const int64_t fs : leader.follower_slots) {
    Sequence* f = slots_[static_cast<size_t>(fs)].get();
    if (f && f->leader_slot == leader.slot && f->leader_order == leader.order) out.push_back(f);
  }
  return out;
}

void Engine::retire(std::unique_ptr<Sequence>& sp, const std::string& reason) {
  // A leader that leaves before its prefill is done lets its followers prefill on their own.
  if (!sp->decoding())
    for (Sequence* f : followers(*sp)) f->leader_slot = -1;
  finish(*sp, reason);
  sp.reset();
}

void Engine::run_on_loop(const std::function<void(Model&)>& f) {
  std::packaged_task<void()> task([&] { f(model_); });
  std::future<void> done = task.get_future();
  {
    std::lock_guard lock(mu_);
    if (stopping_) throw Error(ErrorKind::Unsupported, "server", "the server is shutting down");
    tasks_.push_back(std::move(task));
  }
  cv_.notify_all();
  try {
    done.get();
  } catch (const std::future_error&) {
    throw Error(ErrorKind::Unsupported, "server", "the server is shutting down");  // dropped unrun (broken promise)
  }
}

void Engine::loop() {
  std::deque<std::packaged_task<void()>> tasks;
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty() || !tasks_.empty() || running(); });
      if (stopping_) break;
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();  // an exception is kept in the task's future
    tasks.clear();
    admit();
    try {
      step();
      if (options_.step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(options_.step_delay_ms));
    } catch (const std::exception& e) {
      for (auto& s : slots_)
        if (s) {
          finish(*s, fmt::format("inference failed: {}", e.what()));
          s.reset();
        }
    }
  }
  // Shutting down: everything queued or running ends with an error event; tasks never run (their
  // futures report a broken promise).
  std::deque<Pending> left;
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
    tasks_.clear();
    metrics_.failed += static_cast<uint64_t>(queued_sequences_);
    queued_sequences_ = 0;
  }
  for (auto& p : left)
    for (auto& out : p.outs) {
      Stream::Event e;
      e.kind = Stream::Event::Kind::Error;
      e.finish_reason = "the server is shutting down";
      out->push(std::move(e));
    }
  for (auto& s : slots_)
    if (s) {
      finish(*s, "the server is shutting down");
      s.reset();
    }
}

namespace {

// The longest suffix of text[from:] that is a proper prefix of one of the stop strings: text that a
// stop string may still cut, held back from the stream.
size_t held_back(const std::string& text, size_t from, const std::vector<std::string>& stops) {
  size_t hold = 0;
  for (const auto& s : stops)
    for (size_t k = s.empty() ? 0 : std::min(s.size() - 1, text.size() - from); k > hold; --k)
      if (text.compare(text.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
  return hold;
}

// The log-probabilities of the model's distribution (temperature 1, no truncation) for the chosen
// token and the `top` most probable ones.
TokenLogprob logprobs(const float* logits, int64_t V, TokenId chosen, int top, const Tokenizer& tok) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < V; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < V; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  TokenLogprob lp;
  tok.append_token_bytes(chosen, lp.token);
  lp.logprob = logits[chosen] - lse;
  if (top > 0) {
    std::vector<TokenId> ids(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) ids[static_cast<size_t>(i)] = static_cast<TokenId>(i);
    const auto k = static_cast<size_t>(std::min<int64_t>(top, V));
    std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(),
                      [&](TokenId a, TokenId b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (size_t i = 0; i < k; ++i) {
      std::string t;
      tok.append_token_bytes(ids[i], t);
      lp.top.emplace_back(std::move(t), logits[ids[i]] - lse);
    }
  }
  return lp;
}

}  // namespace

// The drawn token of a decoding sequence: counted, its text streamed (up to a stop string, and
// short of what one may still cut), and the reason it ends, if it does, kept in s.finish. One
// sequence's own state, its stream and the locked metrics only: the draws' parallel loop runs it.
void Engine::emit(Sequence& s) {
  const TokenId next = s.next;
  ++s.generated;
  s.out->completion_tokens = s.generated;
  const auto now = Clock::now();
  {
    std::lock_guard lock(mu_);
    ++metrics_.completion_tokens;
    if (s.generated == 1) {
      const double t = std::chrono::duration<double>(now - s.start).count();
      metrics_.ttft.observe(t);
      s.out->first_token_seconds = t;
    } else {
      metrics_.token_latency.observe(std::chrono::duration<double>(now - s.last_token).count());
    }
  }
  s.last_token = now;
  std::string reason;
  if (eot_ && next == *eot_) {
    s.text += s.decoder.flush();  // bytes still waiting for the rest of a character
    reason = "stop";
  } else {
    s.text += s.decoder.feed(next);
    if (s.generated == s.job.max_tokens) {
      s.text += s.decoder.flush();
      reason = "length";
    }
  }
  // A stop string anywhere in the text not yet streamed (or straddling its start) ends it there.
  size_t end = s.text.size();
  if (!s.job.stop.empty()) {
    const size_t from = s.sent >= s.longest_stop ? s.sent - s.longest_stop + 1 : 0;
    size_t cut = std::string::npos;
    for (const auto& st : s.job.stop) cut = std::min(cut, s.text.find(st, from));
    if (cut != std::string::npos) {
      end = cut;
      reason = "stop";
    } else if (reason.empty()) {
      end -= held_back(s.text, s.sent, s.job.stop);
    }
  }
  if (end > s.sent || (!reason.empty() && !s.pending_logprobs.empty())) {
    Stream::Event e;
    e.text = s.text.substr(s.sent, end - s.sent);
    e.tokens = std::move(s.pending_logprobs);
    s.pending_logprobs.clear();
    s.sent = std::max(s.sent, end);
    s.out->push(std::move(e));
  }
  s.finish = reason;
}

void Engine::step() {
  if (!running()) return;  // (not counted as a step)
  const int64_t V = model_.config().vocab_size;
  const auto step_start = Clock::now();
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  struct Counted {  // the step's own time and count, whichever way it returns
    Engine& e;
    Clock::time_point start;
    ~Counted() {
      const double t = std::chrono::duration<double>(Clock::now() - start).count();
      std::lock_guard lock(e.mu_);
      e.metrics_.step_seconds += t;
      ++e.metrics_.steps;
    }
  } counted{*this, step_start};
  std::vector<int64_t> slots;
  std::vector<TokenId> ids;
  std::vector<Sequence*> batch;
  // 1. One token for every decoding sequence, drawn and streamed (emit); then retire the finished
  // and the cancelled. The draws (a softmax over the vocabulary each: on the 15M model at 16
  // sequences a fifth of the step) and the streaming run in parallel: each sequence's draw
  // depends only on its own logits and generator, and its text only on its own tokens.
  std::vector<Sequence*> drawing;
  for (auto& sp : slots_)
    if (sp && !sp->out->cancelled() && sp->decoding() && sp->job.max_tokens > 0) drawing.push_back(sp.get());
  const auto n_draw = static_cast<int64_t>(drawing.size());
  // (A draw's exception is rethrown after the loop, which then fails the running sequences as it
  // did when the draws were serial.)
  parallel_for_dynamic(n_draw, n_draw > 1, [&](int64_t d) {
    Sequence& s = *drawing[static_cast<size_t>(d)];
    float* lg = s.next_logits;
    for (const TokenId id : never_sample_)
      if (id >= 0 && id < V) lg[id] = -std::numeric_limits<float>::infinity();
    s.next = s.sampler.sample(lg, V);
    if (s.job.top_logprobs >= 0) s.pending_logprobs.push_back(logprobs(lg, V, s.next, s.job.top_logprobs, tokenizer_));
    emit(s);
  });
  if (n_draw > 0) {
    const double t = seconds_since(step_start);
    std::lock_guard lock(mu_);
    metrics_.sample_seconds += t;
  }
  for (auto& sp : slots_) {
    if (!sp) continue;
    Sequence& s = *sp;
    if (s.out->cancelled()) {
      retire(sp, "cancelled: the client has gone");
      continue;
    }
    if (!s.decoding()) continue;
    if (s.job.max_tokens == 0) {
      retire(sp, "length");
      continue;
    }
    if (!s.finish.empty()) {
      retire(sp, s.finish);
      continue;
    }
    slots.push_back(s.slot);
    ids.push_back(s.next);
    batch.push_back(&s);
  }
  // 2. One decode forward over the sequences still decoding, each row computed as if alone.
  if (!batch.empty()) {
    const auto k = static_cast<int64_t>(batch.size());
    {
      std::lock_guard lock(mu_);
      metrics_.decode_batch = k;
      metrics_.max_decode_batch = std::max(metrics_.max_decode_batch, k);
    }
    float* logits = step_logits_.data();  // (room for every slot, made once: 2 MB at 16 x 32000)
    for (int64_t b = 0; b < k; ++b) batch[b]->next_logits = logits + b * V;  // read by the next step's draws
    const auto t0 = Clock::now();
    {
      const RowIndependentProducts alone;
      model_.forward_cached(logits, ids.data(), k, 1, nullptr, cache_, false, slots.data());
    }
    {
      const double t = seconds_since(t0);
      std::lock_guard lock(mu_);
      metrics_.decode_seconds += t;
      ++metrics_.decode_steps;
      metrics_.decode_rows += static_cast<uint64_t>(k);
    }
  }
  // 3. A prefill step: the next chunk of the oldest sequence still prefilling and, where that
  //    chunk is shorter than row_independent_below_, the next chunks of the sequences admitted
  //    after it that are too, in one forward of at most prefill_chunk token rows (padding
  //    included). Each sequence's chunks are the same, grouped or alone (at most prefill_chunk
  //    tokens from where it stands), and a chunk that short takes, alone, the very products a
  //    row-independent forward takes: grouped, every chunk has the bits of its forward alone
  //    (and of `tformer generate`'s with the same --prefill-chunk).
  std::vector<Sequence*> waiting;
  for (auto& sp : slots_)
    if (sp && !sp->decoding() && sp->leader_slot < 0 && !sp->out->cancelled()) waiting.push_back(sp.get());
  if (waiting.empty()) return;
  std::sort(waiting.begin(), waiting.end(), [](const Sequence* a, const Sequence* b) { return a->order < b->order; });
  auto chunk_of = [&](const Sequence* s) {
    return std::min(options_.prefill_chunk, static_cast<int64_t>(s->job.prompt.size()) - s->prefilled);
  };
  // One-token chunks group only with one-token chunks: attention takes its decode kernel for a
  // forward one token wide and its tiled kernel for a wider one, whose sums differ in their last
  // bits (flash_attention_forward), so a one-token chunk padded to a wider one would not have the
  // bits it has alone.
  std::vector<Sequence*> group{waiting[0]};
  int64_t width = chunk_of(waiting[0]);
  if (width < row_independent_below_) {
    for (size_t i = 1; i < waiting.size(); ++i) {
      const int64_t c = chunk_of(waiting[i]);
      if (c >= row_independent_below_ || (c == 1) != (width == 1)) continue;
      const int64_t w = std::max(width, c);
      if (static_cast<int64_t>(group.size() + 1) * w > options_.prefill_chunk) continue;  // (a shorter one may fit)
      group.push_back(waiting[i]);
      width = w;
    }
  }
  {
    std::lock_guard lock(mu_);
    metrics_.prefill_batch = static_cast<int64_t>(group.size());
    metrics_.max_prefill_batch = std::max(metrics_.max_prefill_batch, metrics_.prefill_batch);
  }
  const auto prefill_start = Clock::now();
  if (group.size() == 1) {
    Sequence& s = *group[0];
    model_.forward_cached(s.logits.data(), s.job.prompt.data() + s.prefilled, 1, width, nullptr, cache_, false,
                          &s.slot);
    s.next_logits = s.logits.data();
  } else {
    const auto B = static_cast<int64_t>(group.size());
    std::vector<TokenId> ids(static_cast<size_t>(B * width), 0);
    std::vector<int64_t> valid, slots;
    for (int64_t b = 0; b < B; ++b) {
      const Sequence& s = *group[static_cast<size_t>(b)];
      const int64_t c = chunk_of(&s);
      std::copy_n(s.job.prompt.data() + s.prefilled, c, ids.data() + b * width);
      valid.push_back(c);
      slots.push_back(s.slot);
    }
    // The rows after this step's decode rows (the two sets of sequences are apart: at most
    // `parallel` rows together).
    TF_CHECK(static_cast<int64_t>(batch.size()) + B <= options_.parallel, "serve: step rows past the slots");
    float* logits = step_logits_.data() + static_cast<int64_t>(batch.size()) * V;
    {
      const RowIndependentProducts alone;
      model_.forward_cached(logits, ids.data(), B, width, valid.data(), cache_, false, slots.data());
    }
    for (int64_t b = 0; b < B; ++b) group[static_cast<size_t>(b)]->next_logits = logits + b * V;
  }
  {
    const double t = seconds_since(prefill_start);
    std::lock_guard lock(mu_);
    metrics_.prefill_seconds += t;
    ++metrics_.prefill_steps;
    for (const Sequence* sp : group) metrics_.prefill_rows += static_cast<uint64_t>(chunk_of(sp));
  }
  for (Sequence* sp : group) {
    Sequence& s = *sp;
    s.prefilled += chunk_of(&s);
    if (s.decoding()) {
      // The other samples of the prompt: the same cache slots and logits, copied.
      for (Sequence* f : followers(s)) {
        cache_.copy_sequence(s.slot, f->slot);
        std::copy_n(s.next_logits, V, f->logits.data());
        f->next_logits = f->logits.data();
        f->prefilled = static_cast<int64_t>(s.job.prompt.size());
        f->leader_slot = -1;
      }
      s.follower_slots.clear();
    }
  }
}

}  // namespace tformer::serve
