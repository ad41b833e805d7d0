// The OpenAI-compatible API of tformer serve (docs/serve.md has every endpoint, field, limit and
// error): request bodies parsed and checked field by field, jobs handed to the Engine, results
// written back as JSON or as server-sent events.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/http.h"
#include "tokenizer/tokenizer.h"

namespace tformer::serve {

// How chat messages become a prompt (--chat-template).
struct ChatTemplate {
  std::string prefix;                                         // once, before the first message
  std::string message = "{role}: {content}\n";                // per message
  std::vector<std::pair<std::string, std::string>> per_role;  // message.<role> overrides
  std::string generation = "assistant:";                      // after the last message
  std::vector<std::string> stop = {"\nuser:"};                // ends the assistant's turn

  // --chat-template plain: "role: content" per line, then "assistant:", stop "\nuser:".
  static ChatTemplate plain() { return {}; }
  // A template file (docs/serve.md, "Chat templates"): lines `key: value`, keys prefix, message,
  // message.<role>, generation, stop (repeatable); values with \n, \t and \\ escapes; # comments.
  // Errors name the file and line.
  static ChatTemplate from_file(const std::string& path);
  // The prompt text of a conversation ({role} and {content} replaced).
  std::string render(const std::vector<std::pair<std::string, std::string>>& messages) const;
};

struct ApiOptions {
  std::string model_id;  // what /v1/models lists and requests may name
  std::string api_key;   // empty: no key needed
  bool has_chat_template = false;
  ChatTemplate chat;
  std::string model_chat_template;  // the model file's own (Jinja) template, shown in /props only
  int64_t max_n = 8;                // largest `n`
  int64_t max_stops = 8;            // most stop strings
  std::string run_dir;              // --run DIR: GET /run serves DIR/metrics.jsonl's curves
};

class Api {
 public:
  Api(Engine& engine, const Tokenizer& tokenizer, ApiOptions options);
  // No model (`tformer serve --run DIR` alone): the page, its toy widgets and the run's curves; the
  // model's endpoints answer 503 naming --model.
  explicit Api(ApiOptions options);
  void handle(const HttpRequest& req, HttpResponse& res);

 private:
  void completions(const HttpRequest& req, HttpResponse& res, bool chat);
  std::string metrics_text() const;
  // POST /widgets/NAME: the explorable page's toy widgets (serve/widgets.h, docs/serve.md).
  nlohmann::json widget(const std::string& name, const nlohmann::json& body) const;
  // POST /widgets/model_attention: the loaded model's attention weights for a prompt.
  nlohmann::json model_attention(const nlohmann::json& body);
  // GET /run: the loss curves of --run DIR's metrics.jsonl, with the axes' ticks.
  nlohmann::json run_curves() const;
  // The engine, or a 503 that names --model when the server has none.
  Engine& engine() const;
  const Tokenizer& tokenizer() const;

  Engine* engine_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
  ApiOptions options_;
  std::atomic<uint64_t> next_id_{1}, http_requests_{0};
};

// Whether two strings are equal, in time that depends only on their lengths (for API keys).
bool constant_time_equal(std::string_view a, std::string_view b);

}  // namespace tformer::serve
