#include "cli/train_run.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string_view>
#include <thread>

#include "cli/progress.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/threads.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "model/params.h"
#include "train/comm.h"
#include "train/data.h"

namespace tformer::cli {

namespace fs = std::filesystem;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// load_dataset's messages on stdout (why a token cache is rebuilt, what is tokenized) and, on a
// terminal, a live line on stderr with the bytes read so far of a source larger than 16 MiB.
DataLoadOptions data_load_options() {
  DataLoadOptions d;
  d.message = [](const std::string& m) {
    fmt::print("{}\n", m);
    std::fflush(stdout);
  };
  if (::isatty(2)) {
    auto t0 = std::make_shared<Clock::time_point>(Clock::now());
    d.progress = [t0](uint64_t done, uint64_t total) {
      if (total < (uint64_t{16} << 20)) return;
      if (done == 0) *t0 = Clock::now();
      const double mib = static_cast<double>(done) / (1 << 20), s = seconds_since(*t0);
      fmt::print(stderr, "\r  {:3.0f}%  {:.0f} of {:.0f} MiB  {:.0f} MiB/s\x1b[K",
                 100.0 * static_cast<double>(done) / static_cast<double>(total), mib,
                 static_cast<double>(total) / (1 << 20), s > 0 ? mib / s : 0.0);
      if (done == total) fmt::print(stderr, "\r\x1b[K");
      std::fflush(stderr);
    };
  }
  return d;
}

// --threads under mpirun: 0 divides this host's cores (those this process may run on: its
// affinity mask, as a batch system's cpuset sets it) among its ranks.
void set_threads(int threads, const Comm& comm) {
  if (threads == 0 && comm.local_size() > 1) {
    cpu_set_t mask;
    int cores = static_cast<int>(std::thread::hardware_concurrency());
    if (sched_getaffinity(0, sizeof(mask), &mask) == 0) cores = CPU_COUNT(&mask);
    threads = std::max(1, cores / comm.local_size());
  }
  set_num_threads(threads);
}

// The training data on every process of the run: rank 0 tokenizes (writing the cache), then the
// others read it (or tokenize on their own host when the run folder is not shared).
Dataset load_run_data(const TrainOptions& o, const Tokenizer& tok, const Comm& comm_in) {
  Comm& comm = const_cast<Comm&>(comm_in);
  Dataset d;
  if (comm.rank() == 0) d = load_dataset(o.data, o.val_data, o.val_fraction, tok, o.out, false, data_load_options());
  comm.barrier(/*with_deadline=*/false);
  if (comm.rank() != 0) d = load_dataset(o.data, o.val_data, o.val_fraction, tok, o.out, false);
  return d;
}

// Every process must train the same run: the same options, model config, tokenizer, starting
// state (weights and step: a fresh initialisation, --init-from's or --resume's checkpoint) and
// tokens, each checked by hash and refused by name. The first gather waits without a deadline: a
// host without the shared run folder tokenizes its own copy of the data first.
void check_same_run(TrainSession& s, Comm& comm) {
  if (!comm.distributed()) return;
  Hash64Stream weights;
  const Arena& p = s.model().params();
  weights.update(
      std::string_view(reinterpret_cast<const char*>(p.data()), static_cast<size_t>(p.size()) * sizeof(float)));
  weights.update(std::to_string(s.current_step()));
  Hash64Stream h;
  h.update(s.data().train.bytes());
  h.update(s.data().val.bytes());
  struct Part {
    const char* what;
    uint64_t hash;
    const char* remedy;
  };
  const Part parts[] = {
      {"options", hash64(s.options().to_json().dump()), "every process of the run must be started with the same flags"},
      {"model config", hash64(s.model().config().to_json().dump()),
       "the --config file (or --init-from's, or the checkpoint's) must say the same on every host"},
      {"tokenizer", hash64(s.tokenizer().to_json().dump()), "every process must build the same --tokenizer"},
      {"starting weights", weights.finish(),
       "every process must start from the same --init-from model or --resume checkpoint"},
      {"training data", h.finish(), "every process must see the same --data and --val-data files"},
  };
  bool first = true;
  for (const Part& part : parts) {
    const auto all = comm.allgather(part.hash, /*with_deadline=*/!first);
    first = false;
    for (int q = 1; q < comm.size(); ++q)
      if (all[static_cast<size_t>(q)] != all[0])
        fail_input("mpirun", "process {} has other {} than process 0 (their hashes differ): {}", q, part.what,
                   part.remedy);
  }
}

}  // namespace

void run_training(TrainOptions o, const std::string& resume_dir, const std::vector<std::string>& given) {
  Comm& comm = Comm::world();
  const bool lead = comm.rank() == 0;
  if (!lead) {  // only rank 0 prints progress and writes the run folder
    std::fflush(stdout);
    if (!std::freopen("/dev/null", "w", stdout)) fail_file("/dev/null", "cannot silence rank {}'s output", comm.rank());
  }
  std::unique_ptr<TrainSession> session;
  const bool resuming = !resume_dir.empty();
  if (resuming) {
    const std::string ckpt = (fs::path(resume_dir) / "checkpoint.safetensors").string();
    if (!fs::exists(ckpt)) fail_input("--resume", "--resume {}: no checkpoint.safetensors there", resume_dir);
    const SafetensorsFile f = SafetensorsFile::open(ckpt);
    const auto& meta = f.metadata();
    for (const char* key : {"train_state", "config", "tokenizer"})
      if (!meta.contains(key)) fail_file(key, "{}: no \"{}\" in __metadata__; not a training checkpoint", ckpt, key);
    nlohmann::json saved;
    try {
      saved = nlohmann::json::parse(meta.at("train_state")).at("options");
    } catch (const nlohmann::json::exception& e) {
      fail_file("train_state", "{}: train_state has no readable options: {}", ckpt, e.what());
    }
    // The model and tokenizer are the checkpoint's: --config and --tokenizer cannot change them.
    for (const char* key : {"config", "tokenizer"})
      if (std::count(given.begin(), given.end(), std::string(key)))
        fail_input(fmt::format("--{}", key),
                   "--{} cannot be given with --resume: the checkpoint {} holds the model's config and tokenizer", key,
                   ckpt);
    // The saved options, with the flags given now on top.
    const nlohmann::json now = o.to_json();
    for (const std::string& key : given)
      if (now.contains(key)) saved[key] = now[key];
    if (!std::count(given.begin(), given.end(), std::string("out"))) saved["out"] = resume_dir;
    o = TrainOptions::from_json(saved, ckpt + ": train_state options");
    set_threads(o.threads, comm);
    ModelConfig config =
        ModelConfig::from_json(f.metadata_json("config", "not a training checkpoint"), ckpt + ": config");
    // The file must hold what the config describes (weights and both moments, of their shapes)
    // before the session allocates it: a checkpoint whose config claims more is refused here.
    check_params_fit_in_memory(config, ckpt);
    {
      Arena weights;
      declare_model_params(weights, config);
      Arena expected;
      for (const char* prefix : {"", "optimizer.m.", "optimizer.v."})
        for (const auto& e : weights.entries()) expected.add(prefix + e.name, e.shape);
      check_arena_tensors(f, expected);
    }
    auto tok = tokenizer_from_json(f.metadata_json("tokenizer", "not a training checkpoint"));
    Dataset data = load_run_data(o, *tok, comm);
    session = std::make_unique<TrainSession>(o, config, std::move(tok), std::move(data));
    session->load_checkpoint(ckpt);
    if (const auto it = meta.find("chat_template"); it != meta.end()) session->set_chat_template(it->second);
    if (session->current_step() >= o.steps)
      fail_input("--steps", "{} already holds step {}; pass a larger --steps to continue", ckpt,
                 session->current_step());
    if (lead) truncate_metrics_after((fs::path(o.out) / "metrics.jsonl").string(), session->current_step());
  } else {
    if (o.data.empty()) fail_input("--data", "--data is required");
    if (o.out.empty()) fail_input("--out", "--out is required");
    o.validate();
    set_threads(o.threads, comm);
    if (fs::exists(fs::path(o.out) / "checkpoint.safetensors"))
      fail_input("--out", "{} already holds a training run; continue it with --resume {} or choose another --out",
                 o.out, o.out);
    // Everything that can be checked is checked before the run folder is created, so a bad flag,
    // config or file leaves nothing behind.
    for (const std::string& f : {o.data, o.val_data}) {
      if (f.empty()) continue;
      if (!fs::is_regular_file(f)) fail_file(f, "{}: no such file", f);
      if (fs::file_size(f) == 0) fail_file(f, "{}: empty file", f);
    }
    // --init-from: the model file's weights, config and tokenizer (a GGUF file or a model
    // .safetensors); --config and --tokenizer would contradict it.
    LoadedModel init;
    if (!o.init_from.empty()) {
      for (const char* key : {"config", "tokenizer"})
        if (std::count(given.begin(), given.end(), std::string(key)))
          fail_input(fmt::format("--{}", key),
                     "--{} cannot be given with --init-from: the model {} brings its config and tokenizer", key,
                     o.init_from);
      init = load_model(o.init_from);
      if (!init.tokenizer) fail_file(o.init_from, "{}: the model file carries no tokenizer", o.init_from);
      o.tokenizer = o.init_from;
    }
    ModelConfig config = init.model         ? init.model->config()
                         : o.config.empty() ? ModelConfig{}
                                            : ModelConfig::from_file(o.config);
    auto tok = init.model ? std::move(init.tokenizer) : training_tokenizer(o);
    if (config.vocab_size == 0) config.vocab_size = tok->vocab_size();
    if (config.vocab_size != tok->vocab_size())
      fail_config("vocab_size", "{}: vocab_size is {} but the tokenizer '{}' has {} tokens", o.config,
                  config.vocab_size, o.tokenizer, tok->vocab_size());
    config.validate();
    if (o.context > config.context_length)
      fail_input("--context", "--context {} exceeds the config's context_length {}", o.context, config.context_length);
    // The token cache goes into the run folder; a split too small for the context is only known
    // once tokenized, so a folder this run created is removed again when the set-up fails.
    const bool created = lead && !fs::exists(o.out);
    if (lead) fs::create_directories(o.out);
    try {
      Dataset data = load_run_data(o, *tok, comm);
      session = std::make_unique<TrainSession>(o, config, std::move(tok), std::move(data));
      if (init.model) {
        session->init_weights_from(*init.model);
        session->set_chat_template(init.chat_template);
      }
    } catch (...) {
      std::error_code ec;
      if (created) fs::remove_all(o.out, ec);
      throw;
    }
    std::error_code ec;
    if (lead) fs::remove(fs::path(o.out) / "metrics.jsonl", ec);
  }
  check_same_run(*session, comm);
  TrainSession& s = *session;
  const TrainOptions& opt = s.options();
  const std::string out = opt.out;
  // Temporary files of an earlier run killed while writing a file of the run folder (the atomic
  // writers' "<target>.tmp.<pid>.<...>", core/file_io.h): never read, removed here so they do not
  // pile up -- unless their process is still alive (another run writing into this folder right now).
  if (lead)
    remove_stale_temporaries(out, [](std::string_view target) {
      return target == "checkpoint.safetensors" || target == "model.safetensors" || target == "metrics.jsonl" ||
             (target.starts_with("tokens-") && target.ends_with(".bin"));
    });
  const std::string metrics = (fs::path(out) / "metrics.jsonl").string();
  const std::string ckpt = (fs::path(out) / "checkpoint.safetensors").string();
  const std::string model_path = (fs::path(out) / "model.safetensors").string();
  const int64_t eval_every = opt.eval_every;
  const int64_t ckpt_every = opt.checkpoint_every > 0 ? opt.checkpoint_every : eval_every;
  fmt::print("model: {} parameters, {} layers, d_model {}, {} heads, vocab {}; tokenizer {}\n", s.model().n_params(),
             s.model().config().n_layers, s.model().config().d_model, s.model().config().n_heads,
             s.model().config().vocab_size, opt.tokenizer);
  fmt::print("data: train {} tokens ({}), validation {} tokens{}\n", s.data().train.size(), s.data().train_source,
             s.data().val.size(), s.data().val_source.empty() ? "" : " (" + s.data().val_source + ")");
  fmt::print("{} steps x {} tokens ({} x {} x {} accumulated), {} threads{}{}\n", opt.steps, s.tokens_per_step(),
             opt.batch, s.tokens_per_step() / opt.batch / opt.grad_accum, opt.grad_accum, num_threads(),
             comm.distributed() ? fmt::format(" in each of {} processes ({} micro-batches each)", comm.size(),
                                              opt.grad_accum / comm.size())
                                : "",
             resuming ? fmt::format("; resumed at step {}", s.current_step()) : "");
  std::fflush(stdout);

  StepResult last_step;
  auto evaluate = [&](Progress& progress, double tokens_per_s, double elapsed) {
    const EvalResult e = s.evaluate();
    nlohmann::ordered_json rec = {{"step", s.current_step()}, {"train_loss", e.train_loss}};
    rec["val_loss"] = std::isnan(e.val_loss) ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(e.val_loss);
    rec["lr"] = last_step.lr;                // of the last step (0 before any)
    rec["grad_norm"] = last_step.grad_norm;  // before clipping, of the last step
    rec["tokens_per_s"] = tokens_per_s;
    rec["elapsed_s"] = elapsed;
    if (lead) append_metrics(metrics, rec);
    progress.message(std::isnan(e.val_loss) ? fmt::format("step {}: train loss {:.4f}", s.current_step(), e.train_loss)
                                            : fmt::format("step {}: train loss {:.4f}, val loss {:.4f}",
                                                          s.current_step(), e.train_loss, e.val_loss));
  };

  Progress progress(opt.steps, /*force_plain=*/!lead);
  const auto t0 = Clock::now();
  if (!resuming && eval_every > 0) evaluate(progress, 0, 0);
  std::vector<double> step_seconds;
  step_seconds.reserve(static_cast<size_t>(opt.steps));
  double window_seconds = 0;
  int64_t window_steps = 0;
  double train_seconds = 0;
  double step_comm_seconds = 0;     // inside steps only (not the set-up, evaluations, checkpoints)
  double step_exposed_seconds = 0;  // of which the steps waited for (the rest hidden by overlap)
  uint64_t step_comm_bytes = 0;
  while (s.current_step() < opt.steps) {
    const auto ts = Clock::now();
    const double comm_s0 = comm.seconds_in_collectives(), exposed0 = s.exposed_comm_seconds();
    const uint64_t comm_b0 = comm.bytes_sent();
    const StepResult r = s.step();
    step_comm_seconds += comm.seconds_in_collectives() - comm_s0;
    step_exposed_seconds += s.exposed_comm_seconds() - exposed0;
    step_comm_bytes += comm.bytes_sent() - comm_b0;
    last_step = r;
    const double dt = seconds_since(ts);
    step_seconds.push_back(dt);
    train_seconds += dt;
    window_seconds += dt;
    ++window_steps;
    const int64_t step = s.current_step();
    const bool last = step == opt.steps;
    if (step % opt.log_every == 0 || last || step == 1) {
      progress.update(step, r.loss, r.lr, static_cast<double>(window_steps * s.tokens_per_step()) / window_seconds,
                      seconds_since(t0));
      window_seconds = 0;
      window_steps = 0;
    }
    const double tps = static_cast<double>(step_seconds.size() * s.tokens_per_step()) / train_seconds;
    if ((eval_every > 0 && step % eval_every == 0) || last) evaluate(progress, tps, seconds_since(t0));
    // Every process takes part (ZeRO-1 gathers the moments); rank 0 writes.
    if ((ckpt_every > 0 && step % ckpt_every == 0) || last) s.save_run(ckpt, model_path);
  }
  progress.finish();
  if (comm.distributed()) {
    const std::vector<uint64_t> sent = comm.allgather(step_comm_bytes);  // every rank's payload
    std::string each;
    for (uint64_t b : sent)
      each += fmt::format(
          "{}{:.2f}", each.empty() ? "" : ", ",
          static_cast<double>(b) / (1 << 20) / static_cast<double>(std::max<size_t>(step_seconds.size(), 1)));
    fmt::print("sent per step by each rank, in rank order: {} MiB\n", each);
    // Rank 0's view (every rank sends about the same).
    const double steps_run = static_cast<double>(std::max<size_t>(step_seconds.size(), 1));
    auto share = [&](double x) { return train_seconds > 0 ? 100.0 * x / train_seconds : 0.0; };
    fmt::print("communication (rank 0): {:.2f} MiB sent per step, {:.1f}% of the step time in collectives{}\n",
               static_cast<double>(step_comm_bytes) / (1 << 20) / steps_run, share(step_comm_seconds),
               s.overlapping()
                   ? fmt::format(", overlapped with the backward pass: {:.1f}% waited for", share(step_exposed_seconds))
                   : std::string());
  }
  const double med = median(step_seconds);
  fmt::print("done: {} steps in {:.1f} s; median step {:.2f} ms, {:.0f} tokens/s; model written to {}\n",
             step_seconds.size(), seconds_since(t0), med * 1e3, static_cast<double>(s.tokens_per_step()) / med,
             model_path);
}

}  // namespace tformer::cli
