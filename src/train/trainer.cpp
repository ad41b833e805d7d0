#include "train/trainer.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <thread>
#include <type_traits>

#include "core/error.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "core/scratch.h"
#include "core/threads.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "tokenizer/char_tokenizer.h"

namespace tformer {

// ---------------------------------------------------------------------------------------------
// Options.

nlohmann::json TrainOptions::to_json() const {
  return {{"data", data},
          {"val_data", val_data},
          {"val_fraction", val_fraction},
          {"tokenizer", tokenizer},
          {"config", config},
          {"init_from", init_from},
          {"out", out},
          {"steps", steps},
          {"batch", batch},
          {"context", context},
          {"grad_accum", grad_accum},
          {"lr", lr},
          {"min_lr", min_lr},
          {"warmup", warmup},
          {"decay_steps", decay_steps},
          {"beta1", beta1},
          {"beta2", beta2},
          {"eps", eps},
          {"weight_decay", weight_decay},
          {"grad_clip", grad_clip},
          {"eval_every", eval_every},
          {"eval_steps", eval_steps},
          {"checkpoint_every", checkpoint_every},
          {"log_every", log_every},
          {"seed", seed},
          {"threads", threads},
          {"attention", attention},
          {"zero", zero},
          {"overlap", overlap}};
}

TrainOptions TrainOptions::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) fail_file(source, "{}: the training options are not a JSON object", source);
  TrainOptions o;
  const nlohmann::json known = o.to_json();
  for (const auto& [key, value] : j.items()) {
    if (!known.contains(key)) fail_file(key, "{}: unknown training option \"{}\"", source, key);
    const auto& ref = known[key];
    const bool ok = (ref.is_string() && value.is_string()) || (ref.is_number() && value.is_number());
    if (!ok) fail_file(key, "{}: training option \"{}\" has the wrong type ({})", source, key, value.dump());
  }
  auto get = [&](const char* key, auto& field) {
    using T = std::remove_reference_t<decltype(field)>;
    if (!j.contains(key)) return;
    const nlohmann::json& v = j[key];
    if constexpr (std::is_integral_v<T>) {
      // An integer option must be an integer that fits (a fuzzed 1e300 or -1 for an unsigned one
      // would otherwise be an undefined conversion).
      const bool fits =
          v.is_number_integer()
              ? (v.is_number_unsigned() ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                                        : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                              (std::is_unsigned_v<T> ||
                                               v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max())))
              : false;
      if (!fits)
        fail_file(key, "{}: training option \"{}\" must be an integer in [{}, {}], got {}", source, key,
                  std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), v.dump());
    }
    field = v.get<T>();
  };
  get("data", o.data);
  get("val_data", o.val_data);
  get("val_fraction", o.val_fraction);
  get("tokenizer", o.tokenizer);
  get("config", o.config);
  get("init_from", o.init_from);
  get("out", o.out);
  get("steps", o.steps);
  get("batch", o.batch);
  get("context", o.context);
  get("grad_accum", o.grad_accum);
  get("lr", o.lr);
  get("min_lr", o.min_lr);
  get("warmup", o.warmup);
  get("decay_steps", o.decay_steps);
  get("beta1", o.beta1);
  get("beta2", o.beta2);
  get("eps", o.eps);
  get("weight_decay", o.weight_decay);
  get("grad_clip", o.grad_clip);
  get("eval_every", o.eval_every);
  get("eval_steps", o.eval_steps);
  get("checkpoint_every", o.checkpoint_every);
  get("log_every", o.log_every);
  get("seed", o.seed);
  get("threads", o.threads);
  get("attention", o.attention);
  get("zero", o.zero);
  get("overlap", o.overlap);
  return o;
}

void TrainOptions::validate() const {
  auto need = [](bool ok, const char* flag, auto value, const char* rule) {
    if (!ok) fail_input(flag, "{} is {}; it must be {}", flag, value, rule);
  };
  need(steps > 0, "--steps", steps, "positive");
  need(batch > 0, "--batch", batch, "positive");
  need(context >= 0, "--context", context, "positive (or 0 for the config's context_length)");
  need(grad_accum > 0, "--grad-accum", grad_accum, "positive");
  need(lr > 0 && std::isfinite(lr), "--lr", lr, "positive");
  need(min_lr >= 0 && min_lr <= lr, "--min-lr", min_lr, "between 0 and --lr");
  need(warmup >= 0, "--warmup", warmup, ">= 0");
  need(decay_steps >= 0, "--decay-steps", decay_steps, ">= 0 (0 = --steps)");
  need(beta1 >= 0 && beta1 < 1, "--beta1", beta1, "in [0, 1)");
  need(beta2 >= 0 && beta2 < 1, "--beta2", beta2, "in [0, 1)");
  need(weight_decay >= 0, "--weight-decay", weight_decay, ">= 0");
  need(grad_clip >= 0, "--grad-clip", grad_clip, ">= 0 (0 = no clipping)");
  need(eval_every >= 0, "--eval-every", eval_every, ">= 0 (0 = only at the end)");
  need(eval_steps > 0, "--eval-steps", eval_steps, "positive");
  need(checkpoint_every >= 0, "--checkpoint-every", checkpoint_every, ">= 0 (0 = with each evaluation)");
  need(log_every > 0, "--log-every", log_every, "positive");
  need(eps > 0 && std::isfinite(eps), "--eps", eps, "positive");
  need(threads >= 0, "--threads", threads, ">= 0 (0 = all cores)");
  need(zero == 0 || zero == 1, "--zero", zero, "0 or 1");
  need(overlap == 0 || overlap == 1, "--overlap", overlap, "0 or 1");
  need(val_fraction >= 0 && val_fraction < 1, "--val-fraction", val_fraction, "in [0, 1)");
  parse_attention_kernel(attention);
}

// ---------------------------------------------------------------------------------------------
// The session.

namespace {

// Parallel zero of a whole arena (the gradient buffer of a 124M model is half a gigabyte).
void zero_arena(Arena& a) {
  float* p = a.data();
  const int64_t n = a.size();
  parallel_for(n, n >= (1 << 16), [&](int64_t i) { p[i] = 0.0f; });
}

// a += b, element by element (the two halves of a node of the accumulation tree, trainer.h).
void add_into(Arena& a, const Arena& b) {
  float* pa = a.data();
  const float* pb = b.data();
  const int64_t n = a.size();
  parallel_for(n, n >= (1 << 16), [&](int64_t i) { pa[i] += pb[i]; });
}

// The first tensor of an arena holding a NaN or an infinity ("" when none).
std::string first_non_finite(Arena& a) {
  for (const auto& e : a.entries()) {
    const auto v = a.view(e);
    for (int64_t i = 0; i < e.shape.numel(); ++i)
      if (!std::isfinite(v.data()[i])) return fmt::format("{} (element {}: {})", e.name, i, v.data()[i]);
  }
  return "";
}

constexpr uint64_t kEvalStream = 0xE7A1'5EEDull;
constexpr uint64_t kDropoutStream = 0xD80F'0FFull;

}  // namespace

TrainSession::TrainSession(TrainOptions options, const ModelConfig& config, std::unique_ptr<Tokenizer> tokenizer,
                           Dataset data)
    : options_(std::move(options)), tokenizer_(std::move(tokenizer)), data_(std::move(data)) {
  options_.validate();
  model_ = std::make_unique<Model>(config);
  const auto& c = model_->config();
  if (tokenizer_->vocab_size() != c.vocab_size)
    fail_config("vocab_size", "the tokenizer has {} tokens but the config's vocab_size is {}", tokenizer_->vocab_size(),
                c.vocab_size);
  model_->init_gpt2(options_.seed);
  const AttentionKernel kernel = parse_attention_kernel(options_.attention);
  model_->set_attention_kernel(kernel);
  context_ = options_.context > 0 ? options_.context : c.context_length;
  grads_.mirror(model_->params());
  {
    // The backward finishes the buffer from its end: the head, then layers L-1 .. 0, then the
    // embeddings (params.h's order: embeddings, layers.0 .. layers.L-1, norm, output).
    layer_begin_.assign(static_cast<size_t>(c.n_layers), grads_.size());
    head_begin_ = grads_.size();
    for (const auto& e : grads_.entries()) {
      if (e.name.rfind("layers.", 0) == 0) {
        const size_t l = std::stoul(e.name.substr(7));
        layer_begin_[l] = std::min(layer_begin_[l], e.offset);
      } else if (e.name.rfind("norm.", 0) == 0 || e.name.rfind("output.", 0) == 0) {
        head_begin_ = std::min(head_begin_, e.offset);
      }
    }
    int64_t prev = 0;  // each part starts after the one before it, the embeddings first
    for (int64_t b : layer_begin_) {
      TF_CHECK(b > prev, "the parameter layout is not embeddings, layers in order, head");
      prev = b;
    }
    TF_CHECK(head_begin_ > prev || layer_begin_.empty(), "the parameter layout is not embeddings, layers, head");
  }
  comm_ = &Comm::world();
  if (options_.grad_accum % comm_->size() != 0)
    fail_input("--grad-accum",
               "--grad-accum {} is not a multiple of the {} processes of this run (mpirun -np {}): each process "
               "computes --grad-accum / N of a step's micro-batches",
               options_.grad_accum, comm_->size(), comm_->size());
  micro_losses_.assign(static_cast<size_t>(options_.grad_accum / comm_->size()), 0.0);
  {
    // The processes' slices of the buffer, aligned to the norm's pieces (reduce_gradients, ZeRO-1).
    const int n_proc = comm_->size();
    const int64_t n = grads_.size(), n_pieces = (n + kNormPiece - 1) / kNormPiece;
    slice_offsets_.resize(static_cast<size_t>(n_proc) + 1);
    for (int q = 0; q <= n_proc; ++q)
      slice_offsets_[static_cast<size_t>(q)] = std::min(n, n_pieces * q / n_proc * kNormPiece);
  }
  const AdamWConfig adamw{options_.beta1, options_.beta2, options_.eps, options_.weight_decay};
  if (options_.zero == 1 && comm_->distributed())  // ZeRO-1: only this slice's moments, ever
    opt_ = std::make_unique<AdamW>(model_->params(), adamw, slice_offsets_[static_cast<size_t>(comm_->rank())],
                                   slice_offsets_[static_cast<size_t>(comm_->rank()) + 1]);
  else
    opt_ = std::make_unique<AdamW>(model_->params(), adamw);
  graph_ = std::make_unique<TrainGraph<float>>(c, options_.batch, context_, kernel);
  sampler_ = std::make_unique<BatchSampler>(data_.train, options_.batch, context_, options_.seed, "training",
                                            data_.train_source);
  // A validation split that was asked for must hold one window: checked now, naming its source and
  // the numbers, rather than at the first evaluation (an empty split, e.g. a cut that left nothing,
  // included).
  if (!data_.val.empty() || !options_.val_data.empty() || options_.val_fraction > 0)
    BatchSampler(data_.val, options_.batch, context_, options_.seed, "validation", data_.val_source);
  tree_nodes_.reserve(64);  // a tree over at most 2^63 micro-batches: no allocation per step
  inputs_.resize(options_.batch * context_);
  targets_.resize(options_.batch * context_);
}

namespace {

using TreeNode = AccumulationNode;

// Whether a and b (a first) are the two halves of one node: the same size, a aligned to twice it.
bool siblings(const TreeNode& a, const TreeNode& b) {
  return a.level == b.level && ((a.start >> a.level) & 1) == 0 && b.start == a.start + (int64_t{1} << a.level);
}

// The nodes a process holding micro-batches [first, last) ends with: its leaves pushed in order,
// siblings merged (all of [0, k) for one process: one node per binary digit of k).
std::vector<TreeNode> block_nodes(int64_t first, int64_t last) {
  std::vector<TreeNode> s;
  for (int64_t m = first; m < last; ++m) {
    s.push_back({m, 0});
    while (s.size() >= 2 && siblings(s[s.size() - 2], s.back())) {
      s.pop_back();
      ++s.back().level;
    }
  }
  return s;
}

// x[i] += y[i] for n floats.
void add_floats(float* x, const float* y, int64_t n) {
  parallel_for(n, n >= (1 << 16), [&](int64_t i) { x[i] += y[i]; });
}

}  // namespace

StepResult TrainSession::step() {
  share_scratch_sizes();  // every thread ready for any task of the step's loops (core/scratch.h)
  Arena& params = model_->params();
  zero_arena(grads_);
  const int64_t k = options_.grad_accum;
  const LrSchedule schedule{options_.lr, options_.min_lr, options_.warmup,
                            options_.decay_steps > 0 ? options_.decay_steps : options_.steps};
  StepResult r;
  r.lr = learning_rate(schedule, step_);
  const bool dropout = model_->config().dropout > 0;
  // This process's micro-batches: all k, or its block of k / N under mpirun. Every process draws
  // every window (the sampler's state stays the same everywhere) and computes only its own.
  const int64_t n_proc = comm_->size(), per = k / n_proc, first = comm_->rank() * per, last = first + per;
  // Overlap: the last micro-batch's backward hands each finished layer to a thread that reduces it
  // across the processes (overlapped_backward).
  const bool overlap = overlapping();
  const double comm_before = comm_->seconds_in_collectives();
  double hidden_comm = 0;  // of the collectives, the time the backward pass ran beside them
  // The accumulation tree (trainer.h): nodes_[i] is held in buffer i (buffer 0 is grads_).
  std::vector<TreeNode>& nodes = tree_nodes_;
  nodes.clear();
  auto buffer = [&](size_t i) -> Arena& {
    if (i == 0) return grads_;
    while (partials_.size() < i) {
      partials_.push_back(std::make_unique<Arena>());
      partials_.back()->mirror(grads_);
    }
    return *partials_[i - 1];
  };
  for (int64_t micro = 0; micro < k; ++micro) {
    sampler_->next(inputs_.data(), targets_.data());
    if (micro < first || micro >= last) continue;
    const uint64_t seed = mix64(options_.seed ^ mix64(kDropoutStream + static_cast<uint64_t>(step_ * k + micro)));
    const double loss = graph_->forward(params, inputs_.data(), targets_.data(), dropout, seed);
    if (!std::isfinite(loss) && n_proc == 1) {
      // A weight first; with every weight finite, the activation where the forward overflowed.
      std::string bad = first_non_finite(params);
      if (bad.empty()) {
        const std::string act = graph_->first_non_finite_activation();
        bad = fmt::format("every weight is finite; the forward overflowed at activation {}",
                          act.empty() ? "the loss" : act);
      }
      fail_input(fmt::format("step {}", step_ + 1),
                 "step {}: the loss is {}; first non-finite tensor: {}. Nothing was updated; the last checkpoint "
                 "is intact",
                 step_ + 1, loss, bad);
    }
    micro_losses_[static_cast<size_t>(micro - first)] = loss;
    Arena& leaf = buffer(nodes.size());
    if (!nodes.empty()) zero_arena(leaf);  // grads_ was zeroed above
    const float scale = 1.0f / static_cast<float>(k);
    if (overlap && micro == last - 1) {
      hidden_comm = overlapped_backward(leaf, scale, per);
      continue;
    }
    graph_->backward(params, leaf, scale);
    nodes.push_back({micro, 0});
    while (nodes.size() >= 2 && siblings(nodes[nodes.size() - 2], nodes.back())) {
      add_into(buffer(nodes.size() - 2), buffer(nodes.size() - 1));
      nodes.pop_back();
      ++nodes.back().level;
    }
  }
  if (n_proc == 1) {
    for (int64_t m = 0; m < k; ++m) r.loss += micro_losses_[static_cast<size_t>(m)] / static_cast<double>(k);
    // The nodes left (one per binary digit of k, largest first), folded from the right.
    for (; nodes.size() >= 2; nodes.pop_back()) add_into(buffer(nodes.size() - 2), buffer(nodes.size() - 1));
  } else {
    // Every micro-batch's loss, in order, everywhere; the mean summed as one process sums it.
    const std::vector<double> all = comm_->allgather(micro_losses_);
    for (int64_t m = 0; m < k; ++m) r.loss += all[static_cast<size_t>(m)] / static_cast<double>(k);
    for (int64_t m = 0; m < k; ++m)
      if (!std::isfinite(all[static_cast<size_t>(m)]))
        fail_input(fmt::format("step {}", step_ + 1),
                   "step {}: the loss of micro-batch {} (process {}) is {}; first non-finite weight: {}. Nothing "
                   "was updated; the last checkpoint is intact",
                   step_ + 1, m, m / per, all[static_cast<size_t>(m)],
                   first_non_finite(params).empty() ? "none" : first_non_finite(params));
    if (!overlap) reduce_gradients(per, slice_offsets_, !zero_sharded());  // ZeRO-1: each keeps its slice
  }
  if (!zero_sharded()) {
    r.grad_norm = clip_grad_norm(grads_, options_.grad_clip);
  } else {
    // ZeRO-1: the norm from the slices, the clip on this process's slice, AdamW on that slice (its
    // moments are the only ones here), then every process's updated slice to every process.
    r.grad_norm = sharded_grad_norm();
    const int64_t lo = opt_->shard_begin(), hi = opt_->shard_end();
    if (options_.grad_clip > 0 && r.grad_norm > options_.grad_clip) {  // clip_grad_norm's rule and scale
      const float scale = static_cast<float>(options_.grad_clip / (r.grad_norm + 1e-6));
      float* g = grads_.data();
      parallel_for(hi - lo, hi - lo >= (1 << 16), [&](int64_t i) { g[lo + i] *= scale; });
    }
  }
  if (!std::isfinite(r.grad_norm))
    fail_input(fmt::format("step {}", step_ + 1),
               "step {}: the gradient norm is {}; first non-finite gradient: {}. Nothing was updated; the last "
               "checkpoint is intact",
               step_ + 1, r.grad_norm,
               zero_sharded() ? "(ZeRO-1: each process holds a slice)" : first_non_finite(grads_));
  opt_->step(params, grads_, r.lr);
  if (zero_sharded()) {
    std::vector<int64_t> cnt(static_cast<size_t>(comm_->size())), off(slice_offsets_.begin(), slice_offsets_.end() - 1);
    for (size_t q = 0; q < cnt.size(); ++q) cnt[q] = slice_offsets_[q + 1] - slice_offsets_[q];
    comm_->allgatherv(params.data(), cnt, off);
  }
  exposed_comm_seconds_ += comm_->seconds_in_collectives() - comm_before - hidden_comm;
  ++step_;
  return r;
}

// The last micro-batch's backward, with the reduction across the processes overlapped: as the
// graph finishes the gradient of the head, of each layer and of the embeddings (from the end of
// the buffer towards its start), that part is merged into the process's node of the tree (the
// additions step() would make over the whole buffer, made on the part: the same bits) and handed
// to a thread that runs reduce_gradients on it, cut into N equal parts, while the backward goes
// on. The thread is the only caller of MPI until joined. A part under a quarter of the buffer
// waits to join the next: each collective has a fixed cost (over a 1 Gbit/s link,
// bench/distributed_links.sh: parts of a layer each, 13 for GPT-2, cost as much as they hid;
// quarters gave 0.92-0.97 x the step without overlap in two runs). Returns the seconds of the
// thread's collectives that the backward ran beside.
double TrainSession::overlapped_backward(Arena& leaf, float scale, int64_t per) {
  std::vector<TreeNode>& nodes = tree_nodes_;
  const int64_t micro = comm_->rank() * per + per - 1;
  // The merges pushing this leaf makes: buffer j += buffer j + 1, for each j in this order.
  std::vector<size_t> merges;
  nodes.push_back({micro, 0});
  while (nodes.size() >= 2 && siblings(nodes[nodes.size() - 2], nodes.back())) {
    merges.push_back(nodes.size() - 2);
    nodes.pop_back();
    ++nodes.back().level;
  }
  TF_CHECK(nodes.size() == 1, "overlapped_backward: {} nodes left; overlap needs one", nodes.size());
  auto buf = [&](size_t i) -> float* { return (i == 0 ? grads_ : *partials_[i - 1]).data(); };

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<int64_t, int64_t>> queue;  // parts [a, b) ready to reduce
  bool no_more = false;
  std::exception_ptr error;
  double worker_comm = 0;
  std::thread worker([&] {
    const double c0 = comm_->seconds_in_collectives();
    omp_set_num_threads(1);  // its additions on this thread: the pool is the backward's
    try {
      const int n_proc = comm_->size();
      std::vector<int64_t> off(static_cast<size_t>(n_proc) + 1);
      for (;;) {
        std::pair<int64_t, int64_t> part;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return !queue.empty() || no_more; });
          if (queue.empty()) break;
          part = queue.front();
          queue.pop_front();
        }
        for (int q = 0; q <= n_proc; ++q)
          off[static_cast<size_t>(q)] = part.first + (part.second - part.first) * q / n_proc;
        reduce_gradients(per, off, true);
      }
    } catch (...) {
      error = std::current_exception();
    }
    worker_comm = comm_->seconds_in_collectives() - c0;
  });
  int64_t done_to = grads_.size(), pending_end = grads_.size();  // [done_to, pending_end) not yet handed over
  const int64_t min_part = std::max<int64_t>(1, grads_.size() / 4);
  auto finished = [&](int64_t stage) {
    const int64_t from = stage == model_->config().n_layers ? head_begin_
                         : stage >= 0                       ? layer_begin_[static_cast<size_t>(stage)]
                                                            : 0;
    for (size_t j : merges) add_floats(buf(j) + from, buf(j + 1) + from, done_to - from);
    done_to = from;
    if (pending_end - done_to >= min_part || stage < 0) {
      {
        std::lock_guard<std::mutex> lock(mu);
        queue.emplace_back(done_to, pending_end);
      }
      cv.notify_one();
      pending_end = done_to;
    }
  };
  auto join = [&] {
    {
      std::lock_guard<std::mutex> lock(mu);
      no_more = true;
    }
    cv.notify_one();
    worker.join();
  };
  try {
    graph_->backward(model_->params(), leaf, scale, finished);
  } catch (...) {
    join();
    throw;
  }
  const auto t0 = std::chrono::steady_clock::now();
  join();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (error) std::rethrow_exception(error);
  return std::max(0.0, worker_comm - waited);
}

bool TrainSession::overlapping() const {
  const int64_t per = options_.grad_accum / comm_->size();
  return comm_->distributed() && options_.overlap == 1 && !zero_sharded() && (per & (per - 1)) == 0 &&
         comm_->any_thread();
}

// The gradient sum across the processes, in the tree one process uses (trainer.h). Process q
// holds the nodes block_nodes(q * per, (q + 1) * per) (one when per is a power of two) in its
// buffers. The gradient is cut into N slices; process s receives slice s of every node of every
// process (all-to-all), runs the tree over them in micro-batch order (merging siblings, then
// folding from the right), and the reduced slices are gathered everywhere (all-gather). Each
// process sends and receives 2 (N - 1) / N of the gradient per node it holds, as a ring
// all-reduce does, and every addition is the one a single process makes.
void TrainSession::reduce_gradients(int64_t per, const std::vector<int64_t>& off, bool gather) {
  const int n_proc = comm_->size(), me = comm_->rank();
  const int64_t n = off.back() - off.front();
  std::vector<int64_t> cnt(static_cast<size_t>(n_proc));
  for (int q = 0; q < n_proc; ++q)
    cnt[static_cast<size_t>(q)] = off[static_cast<size_t>(q) + 1] - off[static_cast<size_t>(q)];
  std::vector<std::vector<TreeNode>> held(static_cast<size_t>(n_proc));
  int64_t total_nodes = 0;
  for (int q = 0; q < n_proc; ++q) {
    held[static_cast<size_t>(q)] = block_nodes(q * per, (q + 1) * per);
    total_nodes += static_cast<int64_t>(held[static_cast<size_t>(q)].size());
  }
  const std::vector<TreeNode>& mine = tree_nodes_;
  TF_CHECK(mine.size() == held[static_cast<size_t>(me)].size(), "reduce_gradients: {} nodes, expected {}", mine.size(),
           held[static_cast<size_t>(me)].size());
  const int64_t own = static_cast<int64_t>(mine.size());
  std::vector<int64_t> send_counts(static_cast<size_t>(n_proc)), send_offsets(static_cast<size_t>(n_proc));
  const float* send = grads_.data();
  if (own == 1) {  // straight from the gradient buffer
    for (int q = 0; q < n_proc; ++q) {
      send_counts[static_cast<size_t>(q)] = cnt[static_cast<size_t>(q)];
      send_offsets[static_cast<size_t>(q)] = off[static_cast<size_t>(q)];
    }
  } else {  // packed: for each destination, its slice of each node in order
    send_buf_.resize(static_cast<size_t>(own * n));
    int64_t at = 0;
    for (int q = 0; q < n_proc; ++q) {
      send_offsets[static_cast<size_t>(q)] = at;
      send_counts[static_cast<size_t>(q)] = own * cnt[static_cast<size_t>(q)];
      for (int64_t i = 0; i < own; ++i) {
        const float* src =
            (i == 0 ? grads_ : *partials_[static_cast<size_t>(i - 1)]).data() + off[static_cast<size_t>(q)];
        std::copy(src, src + cnt[static_cast<size_t>(q)], send_buf_.data() + at);
        at += cnt[static_cast<size_t>(q)];
      }
    }
    send = send_buf_.data();
  }
  const int64_t slice = cnt[static_cast<size_t>(me)];
  std::vector<int64_t> recv_counts(static_cast<size_t>(n_proc)), recv_offsets(static_cast<size_t>(n_proc));
  int64_t at = 0;
  for (int q = 0; q < n_proc; ++q) {
    recv_offsets[static_cast<size_t>(q)] = at;
    recv_counts[static_cast<size_t>(q)] = static_cast<int64_t>(held[static_cast<size_t>(q)].size()) * slice;
    at += recv_counts[static_cast<size_t>(q)];
  }
  recv_buf_.resize(static_cast<size_t>(total_nodes * slice));
  comm_->alltoallv(send, send_counts, send_offsets, recv_buf_.data(), recv_counts, recv_offsets);
  // The tree over every node's slice, in micro-batch order; stack[i] is the i-th received node.
  std::vector<TreeNode> stack;
  std::vector<float*> data;
  int64_t index = 0;
  for (int q = 0; q < n_proc; ++q)
    for (const TreeNode& node : held[static_cast<size_t>(q)]) {
      stack.push_back(node);
      data.push_back(recv_buf_.data() + index * slice);
      ++index;
      while (stack.size() >= 2 && siblings(stack[stack.size() - 2], stack.back())) {
        add_floats(data[data.size() - 2], data.back(), slice);
        stack.pop_back();
        data.pop_back();
        ++stack.back().level;
      }
    }
  for (; data.size() >= 2; data.pop_back()) add_floats(data[data.size() - 2], data.back(), slice);
  std::copy(data[0], data[0] + slice, grads_.data() + off[static_cast<size_t>(me)]);
  if (!gather) return;
  comm_->allgatherv(grads_.data(), cnt, std::vector<int64_t>(off.begin(), off.end() - 1));
}

// The norm global_grad_norm computes, from the slices: each process sums the squares of its
// slice's pieces, every piece's sum is gathered, and the sums are added in piece order.
double TrainSession::sharded_grad_norm() {
  const int n_proc = comm_->size(), me = comm_->rank();
  const int64_t n = grads_.size();
  std::vector<int64_t> pieces(static_cast<size_t>(n_proc));
  for (int q = 0; q < n_proc; ++q)
    pieces[static_cast<size_t>(q)] =
        (slice_offsets_[static_cast<size_t>(q) + 1] - slice_offsets_[static_cast<size_t>(q)] + kNormPiece - 1) /
        kNormPiece;
  const int64_t first = slice_offsets_[static_cast<size_t>(me)] / kNormPiece;
  std::vector<double> mine(static_cast<size_t>(pieces[static_cast<size_t>(me)]));
  norm_piece_sums(grads_.data(), n, first, first + pieces[static_cast<size_t>(me)], mine.data());
  const std::vector<double> all = comm_->allgatherv(mine, pieces);
  double total = 0;
  for (double x : all) total += x;  // in piece order
  return std::sqrt(total);
}

EvalResult TrainSession::evaluate() {
  auto mean_loss = [&](const TokenArray& tokens, uint64_t split, const char* name) {
    BatchSampler s(tokens, options_.batch, context_,
                   mix64(options_.seed ^ mix64(kEvalStream + 2 * static_cast<uint64_t>(step_) + split)), name);
    double sum = 0;
    for (int64_t i = 0; i < options_.eval_steps; ++i) {
      s.next(inputs_.data(), targets_.data());
      sum += graph_->forward(model_->params(), inputs_.data(), targets_.data(), false);
    }
    return sum / static_cast<double>(options_.eval_steps);
  };
  EvalResult e;
  e.train_loss = mean_loss(data_.train, 0, "training");
  e.val_loss = data_.val.empty() ? std::nan("") : mean_loss(data_.val, 1, "validation");
  return e;
}

void TrainSession::save_model(const std::string& path) {
  tformer::save_model(path, *model_, tokenizer_.get(), chat_template_);
}

void TrainSession::save_checkpoint(const std::string& path) {
  TF_CHECK(!zero_sharded(), "save_checkpoint({}): ZeRO-1 checkpoints are written by save_run", path);
  save_checkpoint(path, nullptr);
}

void TrainSession::save_checkpoint(const std::string& path, const MomentSource* gather) {
  Arena& p = model_->params();
  std::vector<TensorToWrite> tensors;
  for (const auto& e : p.entries()) tensors.push_back({e.name, e.shape.dims(), p.view(e).data()});
  for (int moment = 1; moment <= 2; ++moment)
    for (const auto& e : p.entries()) {
      TensorToWrite t{(moment == 1 ? "optimizer.m." : "optimizer.v.") + e.name, e.shape.dims()};
      if (gather == nullptr)
        t.data = (moment == 1 ? opt_->m() : opt_->v()).view(e).data();
      else
        t.fill = [gather, moment, &e](float* out) { (*gather)(moment, e, out); };
      tensors.push_back(std::move(t));
    }
  const auto rng = sampler_->state();
  const nlohmann::json state = {{"format", 1},
                                {"step", step_},
                                {"optimizer_steps", opt_->steps()},
                                {"sampler_state", {rng[0], rng[1], rng[2], rng[3]}},
                                {"options", options_.to_json()}};
  std::map<std::string, std::string> metadata{{"config", model_->config().to_json().dump()},
                                              {"tokenizer", tokenizer_->to_json().dump()},
                                              {"train_state", state.dump()}};
  if (!chat_template_.empty()) metadata["chat_template"] = chat_template_;
  write_safetensors(path, tensors, metadata);
}

void TrainSession::load_checkpoint(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const nlohmann::json state = f.metadata_json("train_state", "not a training checkpoint");
  if (f.metadata_json("config", "not a training checkpoint") != model_->config().to_json())
    fail_file("config", "{}: the checkpoint's config differs from this run's model config", path);
  for (const char* key : {"step", "optimizer_steps", "sampler_state"})
    if (!state.contains(key)) fail_file(key, "{}: train_state has no \"{}\"", path, key);
  const size_t expected = 3 * model_->params().entries().size();
  if (f.tensors().size() != expected)
    fail_file(path, "{}: {} tensors; a checkpoint of this model holds {} (weights, optimizer.m.*, optimizer.v.*)", path,
              f.tensors().size(), expected);
  Arena& p = model_->params();
  // ZeRO-1: each moment tensor is read whole into a scratch buffer (at most the largest tensor) and
  // the part inside this process's slice kept.
  const bool sharded = zero_sharded();
  const int64_t lo = sharded ? opt_->shard_begin() : 0, hi = sharded ? opt_->shard_end() : 0;
  std::vector<float> scratch;
  for (const auto& e : p.entries()) {
    for (auto [prefix, moment] : {std::pair<const char*, int>{"", 0}, {"optimizer.m.", 1}, {"optimizer.v.", 2}}) {
      const std::string name = prefix + e.name;
      const SafetensorsTensor& t = f.at(name);
      if (t.shape != e.shape.dims())
        fail_file(name, "{}: tensor '{}' has shape {}; this model needs {}", path, name, shape_str(t.shape),
                  e.shape.str());
      const int64_t numel = e.shape.numel();
      if (moment == 0) {
        f.read_f32(name, p.view(e).data(), numel);
      } else if (!sharded) {
        f.read_f32(name, (moment == 1 ? opt_->m() : opt_->v()).view(e).data(), numel);
      } else {
        const int64_t a = std::max(lo, e.offset), b = std::min(hi, e.offset + numel);
        if (a >= b) continue;
        scratch.resize(static_cast<size_t>(numel));
        f.read_f32(name, scratch.data(), numel);
        float* dst = moment == 1 ? opt_->shard_m() : opt_->shard_v();
        std::copy(scratch.data() + (a - e.offset), scratch.data() + (b - e.offset), dst + (a - lo));
      }
    }
  }
  step_ = state["step"].get<int64_t>();
  opt_->set_steps(state["optimizer_steps"].get<int64_t>());
  const auto& s = state["sampler_state"];
  if (!s.is_array() || s.size() != 4)
    fail_file("sampler_state", "{}: train_state sampler_state is not 4 numbers", path);
  sampler_->set_state({s[0].get<uint64_t>(), s[1].get<uint64_t>(), s[2].get<uint64_t>(), s[3].get<uint64_t>()});
}

// ---------------------------------------------------------------------------------------------
// The run's files.

void TrainSession::save_run(const std::string& checkpoint_path, const std::string& model_path) {
  // Never replace the last good checkpoint with weights an update made non-finite.
  if (const std::string bad = first_non_finite(model_->params()); !bad.empty())
    fail_input(fmt::format("step {}", step_),
               "step {}: the weights hold a non-finite value after the update: {}; the last checkpoint ({}) is "
               "intact",
               step_, bad, checkpoint_path);
  if (zero_sharded()) {
    // ZeRO-1: the checkpoint holds whole moments (it does not depend on N). Each moment tensor is
    // gathered on rank 0 as the writer reaches it, from the processes whose slices it crosses,
    // into the writer's buffer (at most the largest tensor), so rank 0 never holds whole moments.
    // Every process makes the same gathers in the writer's order: every m tensor, then every v.
    const int n_proc = comm_->size();
    const int64_t lo = opt_->shard_begin();
    std::vector<int64_t> cnt(static_cast<size_t>(n_proc)), off(static_cast<size_t>(n_proc));
    const MomentSource gather = [&](int moment, const Arena::Entry& e, float* out) {
      const int64_t numel = e.shape.numel();
      for (int q = 0; q < n_proc; ++q) {
        const int64_t a = std::max(e.offset, slice_offsets_[static_cast<size_t>(q)]);
        const int64_t b = std::min(e.offset + numel, slice_offsets_[static_cast<size_t>(q) + 1]);
        cnt[static_cast<size_t>(q)] = std::max<int64_t>(0, b - a);
        off[static_cast<size_t>(q)] = std::max<int64_t>(0, a - e.offset);
      }
      const float* shard = moment == 1 ? opt_->shard_m() : opt_->shard_v();
      const int64_t a = std::max(e.offset, lo);
      comm_->gatherv(cnt[static_cast<size_t>(comm_->rank())] > 0 ? shard + (a - lo) : shard, out, cnt, off);
    };
    if (comm_->rank() == 0) {
      save_checkpoint(checkpoint_path, &gather);
      save_model(model_path);
    } else {
      for (int moment = 1; moment <= 2; ++moment)
        for (const auto& e : model_->params().entries())
          if (e.shape.numel() > 0) gather(moment, e, nullptr);
    }
    return;
  }
  if (comm_->rank() != 0) return;  // the others hold the same state; rank 0 writes it
  save_checkpoint(checkpoint_path);
  save_model(model_path);
}

void TrainSession::init_weights_from(Model& from) {
  TF_CHECK(step_ == 0, "init_weights_from after step {}", step_);
  if (from.config().to_json() != model_->config().to_json())
    fail_config("init_from", "--init-from: the model's config {} differs from the run's {}",
                from.config().to_json().dump(), model_->config().to_json().dump());
  TF_CHECK(from.params().size() == model_->params().size(), "init_weights_from: parameter layouts differ");
  std::copy(from.params().data(), from.params().data() + from.params().size(), model_->params().data());
}

namespace {

// The distinct bytes of the files, each read in blocks (a corpus may be larger than memory), in
// increasing order.
std::string distinct_bytes(const std::vector<std::string>& paths) {
  std::array<bool, 256> seen{};
  std::string block(size_t{1} << 20, '\0');
  for (const std::string& path : paths) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_file(path, "{}: cannot open for reading: {}", path, std::strerror(errno));
    ssize_t n;
    while ((n = ::read(fd, block.data(), block.size())) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        fail_file(path, "{}: read error: {}", path, std::strerror(err));
      }
      for (ssize_t i = 0; i < n; ++i) seen[static_cast<unsigned char>(block[static_cast<size_t>(i)])] = true;
    }
    ::close(fd);
  }
  std::string out;
  for (int b = 0; b < 256; ++b)
    if (seen[static_cast<size_t>(b)]) out.push_back(static_cast<char>(b));
  return out;
}

}  // namespace

std::unique_ptr<Tokenizer> training_tokenizer(const TrainOptions& o) {
  if (o.tokenizer == "char") {
    std::vector<std::string> files{o.data};
    if (!o.val_data.empty()) files.push_back(o.val_data);
    return std::make_unique<CharTokenizer>(CharTokenizer::from_corpus(distinct_bytes(files)));
  }
  return tokenizer_by_name_or_model(o.tokenizer);
}

}  // namespace tformer
