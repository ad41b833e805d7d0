// tformer serve: the OpenAI-compatible HTTP server (src/serve/, docs/serve.md).
#include <fmt/format.h>
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/threads.h"
#include "model/checkpoint.h"
#include "serve/api.h"

namespace tformer::cli {

namespace {

struct ServeArgs {
  std::string model, run, host = "127.0.0.1", api_key, api_key_file, chat_template, attention = "tiled", alias;
  int port = 8080, threads = 0;
  int64_t parallel = 4, context = 0, prefill_chunk = 512, queue = 64, max_body = 1 << 20, max_connections = 64;
};

void run_serve(const ServeArgs& a) {
  // SIGINT and SIGTERM are taken by one thread (sigwait), blocked in every other, from the start
  // (so also in any thread a library starts while the model loads): they stop the engine
  // (in-flight requests end with an error event) and then the HTTP server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  if (!a.api_key.empty() && !a.api_key_file.empty())
    fail_input("--api-key", "give --api-key or --api-key-file, not both");
  std::string key = a.api_key;
  if (!a.api_key_file.empty()) {
    key = read_file(a.api_key_file);
    while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
    if (key.empty()) fail_file(a.api_key_file, "{}: the API key file is empty", a.api_key_file);
  }
  serve::ApiOptions api;
  api.api_key = key;
  if (a.chat_template == "plain") {
    api.has_chat_template = true;
    api.chat = serve::ChatTemplate::plain();
  } else if (!a.chat_template.empty()) {
    api.has_chat_template = true;
    api.chat = serve::ChatTemplate::from_file(a.chat_template);
  }
  if (a.max_body < 1024) fail_input("--max-body", "--max-body must be at least 1024 bytes, got {}", a.max_body);
  if (a.max_connections < 1)
    fail_input("--max-connections", "--max-connections must be at least 1, got {}", a.max_connections);

  if (a.model.empty() && a.run.empty()) fail_input("--model", "give --model M (and/or --run DIR, the page's curves)");
  if (!a.run.empty() && !std::filesystem::is_directory(a.run))
    fail_file(a.run, "{}: --run takes the folder a tformer train run writes (--out), and this is none", a.run);
  api.run_dir = a.run;
  serve::HttpLimits limits;
  limits.max_body = static_cast<size_t>(a.max_body);
  limits.max_connections = static_cast<int>(a.max_connections);
  const bool v6 = a.host.find(':') != std::string::npos;
  if (a.model.empty()) {
    // The page alone: its toy widgets and the run's curves; the model's endpoints answer 503.
    serve::Api handler(api);
    serve::HttpServer server(a.host, a.port, limits, [&](const serve::HttpRequest& req, serve::HttpResponse& res) {
      handler.handle(req, res);
    });
    fmt::print("tformer serve: no model, the curves of {} on http://{}{}{}:{}\n", a.run, v6 ? "[" : "", a.host,
               v6 ? "]" : "", server.port());
    std::fflush(stdout);
    std::thread waiter([&] {
      int sig = 0;
      sigwait(&signals, &sig);
      fmt::print(stderr, "tformer serve: {}, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
      server.stop();
    });
    server.run();
    waiter.join();
    return;
  }

  set_num_threads(a.threads);
  LoadedModel lm = load_model(a.model, {.inference_only = true});  // a quantized file costs its own bytes
  lm.model->set_attention_kernel(parse_attention_kernel(a.attention));
  if (!lm.tokenizer) fail_file(a.model, "{}: the model file carries no tokenizer; serving needs one", a.model);
  api.model_chat_template = lm.chat_template;
  api.model_id = a.alias.empty() ? std::filesystem::path(a.model).filename().string() : a.alias;

  serve::EngineOptions eo;
  eo.parallel = a.parallel;
  eo.context = a.context;
  eo.prefill_chunk = a.prefill_chunk;
  eo.max_queue = a.queue;
  eo.run_on_caller = true;  // on this thread, which loaded the model (serve/engine.h says why)
  serve::Engine engine(*lm.model, *lm.tokenizer, eo);
  serve::Api handler(engine, *lm.tokenizer, api);
  serve::HttpServer server(a.host, a.port, limits,
                           [&](const serve::HttpRequest& req, serve::HttpResponse& res) { handler.handle(req, res); });
  fmt::print("tformer serve: {} on http://{}{}{}:{} ({} slots of {} tokens, KV cache {:.1f} MiB, {} thread{})\n",
             api.model_id, v6 ? "[" : "", a.host, v6 ? "]" : "", server.port(), eo.parallel, engine.context(),
             static_cast<double>(engine.cache_bytes()) / (1 << 20), num_threads(), num_threads() == 1 ? "" : "s");
  std::fflush(stdout);
  std::atomic<bool> ended{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (ended) return;  // the server ended on its own
    fmt::print(stderr, "tformer serve: {}, stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    engine.stop();
    server.stop();
  });
  std::thread http([&] {
    server.run();
    engine.stop();  // the server ended on its own (it cannot listen any more)
  });
  engine.run();  // until a signal stops it
  server.stop();
  http.join();
  ended = true;
  pthread_kill(waiter.native_handle(), SIGINT);
  waiter.join();
}

}  // namespace

void register_serve(CLI::App& app) {
  auto s = std::make_shared<ServeArgs>();
  auto* c = app.add_subcommand("serve", "An OpenAI-compatible HTTP server (docs/serve.md)");
  c->add_option("--model", s->model, "Model file (the page alone with --run when absent)");
  c->add_option("--run", s->run, "A training run's folder: the page draws its metrics.jsonl's loss curves, live");
  c->add_option("--host", s->host, "Address to bind (loopback unless told otherwise)")->capture_default_str();
  c->add_option("--port", s->port, "Port (0 = a free one)")->capture_default_str();
  c->add_option("--parallel", s->parallel, "Sequences decoding at once (KV cache slots)")->capture_default_str();
  c->add_option("--context", s->context, "Tokens per slot (0 = the model's context_length)")->capture_default_str();
  c->add_option("--prefill-chunk", s->prefill_chunk, "Prompt tokens per prefill step")->capture_default_str();
  c->add_option("--queue", s->queue, "Requests waiting for a slot before 503")->capture_default_str();
  c->add_option("--max-body", s->max_body, "Largest request body, bytes (413 beyond)")->capture_default_str();
  c->add_option("--max-connections", s->max_connections, "Open connections at most (503 beyond)")
      ->capture_default_str();
  auto* k = c->add_option("--api-key", s->api_key, "Require Authorization: Bearer KEY");
  auto* kf = c->add_option("--api-key-file", s->api_key_file, "The API key, read from a file");
  k->excludes(kf);
  c->add_option("--chat-template", s->chat_template, "plain | FILE (docs/serve.md); none: chat is refused");
  c->add_option("--alias", s->alias, "The model id clients name (default: the file's name)");
  c->add_option("--threads", s->threads, "Threads (0 = all cores)")->capture_default_str();
  c->add_option("--attention", s->attention, "tiled (default) | reference")->capture_default_str();
  c->callback([s] { run_serve(*s); });
}

}  // namespace tformer::cli
