// libFuzzer target: the request bodies of tformer serve (serve/api.h, Api::handle: the JSON of
// /v1/completions, /v1/chat/completions, /tokenize and /detokenize, parsed and checked field by
// field, then run). No server is started: the input's first line is the path, the rest the body of
// a POST to it, handed to Api::handle with the response written into a socket pair this process
// reads. Behind the Api is a real Engine (its own thread) over a tiny random model (char vocabulary
// of 256 bytes, width 8, one layer, context 16, 4 slots; the plain chat template), so an accepted
// request generates. A bad body must be answered 4xx: a 500 (a broken invariant or an exception
// the Api did not expect) aborts, and so does an answer that is not HTTP or, unstreamed, whose
// body is not JSON.
#include <sys/socket.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "fuzz_util.h"
#include "model/model.h"
#include "serve/api.h"
#include "tokenizer/char_tokenizer.h"

namespace {

struct Server {
  tformer::CharTokenizer tok = tformer::CharTokenizer::bytes();
  std::unique_ptr<tformer::Model> model;
  std::unique_ptr<tformer::serve::Engine> engine;
  std::unique_ptr<tformer::serve::Api> api;
  tformer::serve::HttpLimits limits;

  Server() {
    tformer::ModelConfig c;
    c.vocab_size = 256;
    c.d_model = 8;
    c.n_layers = 1;
    c.n_heads = 2;
    c.context_length = 16;
    model = std::make_unique<tformer::Model>(c);
    model->init_gpt2(1);
    tformer::serve::EngineOptions eo;
    eo.parallel = 4;
    eo.context = 16;
    eo.prefill_chunk = 8;
    engine = std::make_unique<tformer::serve::Engine>(*model, tok, eo);
    tformer::serve::ApiOptions ao;
    ao.model_id = "tiny";
    ao.has_chat_template = true;
    ao.chat = tformer::serve::ChatTemplate::plain();
    ao.max_n = 4;
    api = std::make_unique<tformer::serve::Api>(*engine, tok, ao);
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Server server;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nl = input.find('\n');
  if (nl == std::string_view::npos) return 0;
  tformer::serve::HttpRequest req;
  req.method = "POST";
  req.version = "HTTP/1.1";
  req.target = req.path = std::string(input.substr(0, nl));
  req.body = std::string(input.substr(nl + 1));
  req.headers = {{"content-type", "application/json"}};
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  std::string answer;
  std::thread reader([&] {
    char buf[65536];
    for (ssize_t n; (n = ::read(fds[1], buf, sizeof buf)) > 0;) answer.append(buf, static_cast<size_t>(n));
  });
  tformer::fuzz::expect_clean([&] {
    tformer::serve::HttpResponse res(fds[0], server.limits, true);
    server.api->handle(req, res);
    if (!res.sent()) std::abort();
  });
  ::shutdown(fds[0], SHUT_WR);
  reader.join();
  ::close(fds[0]);
  ::close(fds[1]);
  if (answer.compare(0, 9, "HTTP/1.1 ") != 0 || answer.size() < 12) std::abort();
  const int status = std::atoi(answer.substr(9, 3).c_str());
  if (status < 200 || status >= 500) {
    std::fprintf(stderr, "fuzz: answered %d:\n%s\n", status, answer.substr(0, 2000).c_str());
    std::abort();
  }
  const size_t head_end = answer.find("\r\n\r\n");
  if (head_end == std::string::npos) std::abort();
  if (answer.find("Transfer-Encoding: chunked") < head_end) return 0;
  if (nlohmann::json::parse(answer.substr(head_end + 4), nullptr, false).is_discarded()) std::abort();
  return 0;
}
