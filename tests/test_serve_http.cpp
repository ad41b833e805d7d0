// tformer serve over raw sockets (src/serve/http.h, api.h): malformed and mistyped requests, bodies
// and request lines over the limits, a slow client, a disconnect at every stage, keys, the queue
// and connection limits; after each the server keeps serving.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <filesystem>

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

#include "random_model.h"
#include "serve/api.h"
#include "serve/widgets.h"
#include "test_util.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/sennrich_bpe.h"

namespace tformer {
namespace {

using nlohmann::json;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return;  // the server may close first (a refused request)
    s.remove_prefix(static_cast<size_t>(n));
  }
}

// Everything the server sends until it closes (or 20 s pass: a test failure below, not a hang).
std::string read_all(int fd, int timeout_ms = 20000) {
  std::string out;
  char buf[4096];
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

// Reads until the first server-sent event has begun (a stream is under way).
void read_first_event(int fd) {
  std::string got;
  char buf[256];
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
}

int status_of(const std::string& response) {
  if (response.rfind("HTTP/1.1 ", 0) != 0) return -1;
  return std::stoi(response.substr(9, 3));
}
std::string body_of(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

struct Reply {
  int status = -1;
  std::string body;
};

class ServeHttpTest : public ::testing::Test {
 public:
  ~ServeHttpTest() override {
    if (server_) {
      engine_->stop();
      server_->stop();
      thread_.join();
    }
  }

 protected:
  void start(serve::EngineOptions eo = {}, serve::ApiOptions ao = {}, serve::HttpLimits limits = {}) {
    model_ = test::random_model(test::small_config(R"({"context_length": 64, "d_model": 32, "d_ff": 48})"), 3);
    ao.model_id = "m";
    engine_ = std::make_unique<serve::Engine>(*model_, tok_, eo);
    api_ = std::make_unique<serve::Api>(*engine_, tok_, ao);
    server_ = std::make_unique<serve::HttpServer>(
        "127.0.0.1", 0, limits, [this](const serve::HttpRequest& q, serve::HttpResponse& r) { api_->handle(q, r); });
    thread_ = std::thread([this] { server_->run(); });
  }
  // One request on its own connection (Connection: close).
  Reply request(const std::string& method, const std::string& path, const std::string& body = "",
                const std::string& extra = "") {
    const int fd = connect_to(server_->port());
    send_all(fd, fmt::format("{} {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}Content-Length: {}\r\n\r\n{}", method,
                             path, extra, body.size(), body));
    const std::string r = read_all(fd);
    ::close(fd);
    return {status_of(r), body_of(r)};
  }
  Reply post(const std::string& path, const json& body, const std::string& extra = "") {
    return request("POST", path, body.dump(), extra);
  }
  void expect_serving() {
    const Reply r = request("GET", "/health");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, R"({"status":"ok"})");
  }
  uint64_t cancelled() const { return engine_->metrics().cancelled; }
  void wait_for_cancelled(uint64_t n) {
    for (int i = 0; i < 500 && cancelled() < n; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_EQ(cancelled(), n);
  }

  CharTokenizer tok_ = CharTokenizer::bytes();
  std::unique_ptr<Model> model_;
  std::unique_ptr<serve::Engine> engine_;
  std::unique_ptr<serve::Api> api_;
  std::unique_ptr<serve::HttpServer> server_;
  std::thread thread_;
};

// The error a reply carries: its status, and its message contains each of `words`.
::testing::AssertionResult is_error(const Reply& r, int status, std::initializer_list<std::string_view> words) {
  if (r.status != status)
    return ::testing::AssertionFailure() << "status " << r.status << ", expected " << status << ": " << r.body;
  const json j = json::parse(r.body, nullptr, false);
  if (j.is_discarded() || !j.contains("error") || !j["error"].contains("message") || !j["error"].contains("type") ||
      j["error"]["code"] != status)
    return ::testing::AssertionFailure() << "not an OpenAI error body: " << r.body;
  const std::string msg = j["error"]["message"];
  for (auto w : words)
    if (msg.find(w) == std::string::npos) return ::testing::AssertionFailure() << "'" << w << "' not in: " << msg;
  return ::testing::AssertionSuccess();
}

TEST_F(ServeHttpTest, BadRequestsGetTheirStatusAndNameTheField) {
  start();
  EXPECT_TRUE(is_error(request("POST", "/v1/completions", "{\"prompt\": "), 400, {"not valid JSON"}));
  EXPECT_TRUE(is_error(request("POST", "/v1/completions", "[1, 2]"), 400, {"JSON object"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"max_tokens", 3}}), 400, {"'prompt' is required"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", "5"}}), 400,
                       {"'max_tokens'", "integer", "string"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", 5}}), 400, {"'prompt'", "integer"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "hi"}, {"temperature", -1}}), 400, {"'temperature'"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "hi"}, {"top_p", 0}}), 400, {"'top_p'"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "hi"}, {"stop", {1}}}), 400, {"'stop'[0]"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "hi"}, {"stream", "yes"}}), 400, {"'stream'"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", {1, 300}}}), 400, {"'prompt'[1]", "0..255"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "hi"}, {"model", "other"}}), 404, {"'other'", "'m'"}));
  // The context: 64 tokens per sequence here; both numbers named.
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "0123456789"}, {"max_tokens", 60}}), 400,
                       {"10 tokens", "60", "64"}));
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", std::string(70, 'a')}}), 400, {"70 tokens", "64"}));
  // Chat without a template names the remedy.
  EXPECT_TRUE(is_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), 400,
                       {"--chat-template"}));
  EXPECT_TRUE(is_error(request("GET", "/v1/nothing"), 404, {"/v1/nothing"}));
  EXPECT_TRUE(is_error(request("GET", "/v1/completions"), 405, {"POST"}));
  // Nesting far past any real request is refused before parsing.
  EXPECT_TRUE(is_error(request("POST", "/v1/completions", std::string(100000, '[')), 400, {"nested"}));
  EXPECT_TRUE(is_error(post("/detokenize", {{"tokens", {1, -2}}}), 400, {"'tokens'[1]"}));
  expect_serving();
}

TEST_F(ServeHttpTest, CompletionsTokenizeAndMetricsAnswerInOpenAIShapes) {
  start();
  const Reply r = post("/v1/completions", {{"prompt", "ab"}, {"max_tokens", 5}, {"seed", 3}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "m");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 7);
  // Token ids as the prompt, and /tokenize, /detokenize.
  EXPECT_EQ(json::parse(post("/tokenize", {{"content", "ab"}}).body)["tokens"], json({97, 98}));
  EXPECT_EQ(json::parse(post("/detokenize", {{"tokens", {104, 105}}}).body)["content"], "hi");
  const Reply ids = post("/v1/completions", {{"prompt", {97, 98}}, {"max_tokens", 5}, {"temperature", 0}});
  EXPECT_EQ(json::parse(ids.body)["choices"][0]["text"], j["choices"][0]["text"]);
  // Streaming: events, then [DONE]; the pieces add up to the same text.
  const Reply s = post("/v1/completions", {{"prompt", "ab"},
                                           {"max_tokens", 5},
                                           {"temperature", 0},
                                           {"stream", true},
                                           {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(s.status, 200);
  std::string text, finish;
  int64_t usage = -1;
  bool done = false;
  // The body is chunked: each chunk holds one "data: ...\n\n" event.
  for (size_t at = 0; (at = s.body.find("data: ", at)) != std::string::npos;) {
    const size_t end = s.body.find("\n\n", at);
    const std::string data = s.body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json e = json::parse(data);
    if (e["choices"].empty()) {
      usage = e["usage"]["completion_tokens"];
      continue;
    }
    text += e["choices"][0]["text"].get<std::string>();
    if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(text, j["choices"][0]["text"]);
  EXPECT_EQ(finish, "length");
  EXPECT_EQ(usage, 5);
  // HTTP/1.0 has no chunked bodies: its stream is the raw events, ended by closing.
  {
    const int fd = connect_to(server_->port());
    const std::string b10 = json{{"prompt", "ab"}, {"max_tokens", 3}, {"stream", true}}.dump();
    send_all(fd, fmt::format("POST /v1/completions HTTP/1.0\r\nContent-Length: {}\r\n\r\n{}", b10.size(), b10));
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_EQ(status_of(r), 200);
    EXPECT_EQ(r.find("Transfer-Encoding"), std::string::npos) << r;
    EXPECT_EQ(body_of(r).rfind("data: {", 0), 0u) << r;
    EXPECT_TRUE(r.ends_with("data: [DONE]\n\n")) << r;
  }
  const Reply m = request("GET", "/metrics");
  EXPECT_EQ(m.status, 200);
  EXPECT_NE(m.body.find("tformer_requests_total 4\n"), std::string::npos) << m.body;
  EXPECT_NE(m.body.find("tformer_completion_tokens_total 18\n"), std::string::npos);
  EXPECT_NE(m.body.find("tformer_time_to_first_token_seconds_count 4\n"), std::string::npos);
  EXPECT_NE(m.body.find("tformer_token_latency_seconds_bucket{le=\"+Inf\"} 14\n"), std::string::npos);
  // Where the loop's time went: each phase's counters are there (their values: test_serve_engine).
  for (const char* name :
       {"tformer_steps_total", "tformer_step_seconds_total", "tformer_sample_seconds_total",
        "tformer_decode_steps_total", "tformer_decode_rows_total 14\n", "tformer_decode_seconds_total",
        "tformer_prefill_steps_total", "tformer_prefill_rows_total", "tformer_prefill_seconds_total"})
    EXPECT_NE(m.body.find(fmt::format("\n{}", name)), std::string::npos) << name;
}

TEST_F(ServeHttpTest, WidgetEndpointsAnswerWithTheKernelsNumbers) {
  serve::EngineOptions eo;
  eo.parallel = 3;
  eo.context = 40;
  start(eo);
  // Section 07's example: the checks hold, and the numbers are serve/widgets.h's own.
  const Reply spec = post("/widgets/attention", {{"example", "spec"}});
  ASSERT_EQ(spec.status, 200) << spec.body;
  const json s = json::parse(spec.body);
  EXPECT_EQ(s["full"]["out"][0], json({2.0, 0.0}));
  EXPECT_EQ(s["earlier_row_immune"], true);
  EXPECT_LT(s["cached_vs_full"].get<double>(), 1e-12);
  ASSERT_TRUE(s.contains("first_row_error")) << spec.body;
  EXPECT_EQ(s["values"], json({{2.0, 0.0}, {0.0, 3.0}, {-1.0, 1.0}}));
  EXPECT_EQ(s["changed_value"], json({100.0, 100.0}));
  EXPECT_LT(s["first_row_error"].get<double>(), 1e-12);
  const widgets::SpecAttentionChecks direct = widgets::spec_attention_example();
  EXPECT_EQ(s["full"]["out"][2][1].get<double>(), direct.full.out[2][1]);
  // A wrong mask puts mass on a future key; the right one none.
  const json qkv = {{"queries", {{1, 0}, {0, 1}}}, {"keys", {{1, 0}, {0, 1}}}, {"values", {{2, 0}, {0, 3}}}};
  json wrong = qkv;
  wrong["mask"] = "score_zero";
  EXPECT_GT(json::parse(post("/widgets/attention", wrong).body)["weights"][0][1].get<double>(), 0.0);
  EXPECT_EQ(json::parse(post("/widgets/attention", qkv).body)["weights"][0][1].get<double>(), 0.0);
  // RoPE: both sides, equal before and after a shift of both positions.
  const json r1 =
      json::parse(post("/widgets/rope", {{"q", {1, 2}}, {"k", {3, -1}}, {"m", 3}, {"n", 7}, {"theta", 0.3}}).body);
  const json r2 =
      json::parse(post("/widgets/rope", {{"q", {1, 2}}, {"k", {3, -1}}, {"m", 13}, {"n", 17}, {"theta", 0.3}}).body);
  EXPECT_NEAR(r1["rotated"].get<double>(), r1["relative"].get<double>(), 1e-12);
  EXPECT_EQ(r1["difference"].get<double>(), r1["rotated"].get<double>() - r1["relative"].get<double>());
  EXPECT_LT(std::fabs(r1["difference"].get<double>()), 1e-12);
  EXPECT_NEAR(r1["rotated"].get<double>(), r2["rotated"].get<double>(), 1e-12);
  // A shift below position zero (the page's shift box takes any integer) is answered, not refused.
  const json r3 =
      json::parse(post("/widgets/rope", {{"q", {1, 2}}, {"k", {3, -1}}, {"m", -7}, {"n", -3}, {"theta", 0.3}}).body);
  EXPECT_EQ(r3["m"].get<int64_t>(), -7);
  EXPECT_NEAR(r3["rotated"].get<double>(), r1["rotated"].get<double>(), 1e-12);
  // LayerNorm: the shift cancels.
  const json ln = json::parse(post("/widgets/layernorm", {{"x", {1, 2, 4, 7}}, {"shift", 10}, {"scale", 3}}).body);
  EXPECT_LT(ln["shift_error"].get<double>(), 1e-12);
  EXPECT_NEAR(ln["y"][0].get<double>(), -2.5 / std::sqrt(5.25 + 1e-5), 1e-14);
  // The KV cache: the spec's formula for the server's slots equals the bytes the engine holds.
  const json kv = json::parse(post("/widgets/kv_cache", json::object()).body);
  EXPECT_EQ(kv["batch"], 3);
  EXPECT_EQ(kv["tokens"], 40);
  EXPECT_EQ(kv["payload_bytes"], kv["engine_bytes"]);
  EXPECT_EQ(kv["payload_bytes"].get<int64_t>(), 2 * kv["layers"].get<int64_t>() * 3 * kv["kv_heads"].get<int64_t>() *
                                                    40 * kv["head_dim"].get<int64_t>() * 4);
  // BPE: the fifth step equals the fifth merge the learner makes on the same corpus (the one
  // `bpe learn --trace` prints), and the recount after four steps names it first.
  const std::string corpus = "low low low low lower lower newest newest newest widest widest";
  const json b5 = json::parse(post("/widgets/bpe", {{"corpus", corpus}, {"steps", 5}, {"apply", "lowest"}}).body);
  const json b4 = json::parse(post("/widgets/bpe", {{"corpus", corpus}, {"steps", 4}}).body);
  BpeLearnOptions lo;
  lo.merges = 5;
  const BpeLearnResult learned = learn_bpe_from_word_counts(bpe_count_words(corpus, "c"), lo);
  ASSERT_EQ(b5["steps"].size(), 5u);
  EXPECT_EQ(b5["steps"][4]["first"], learned.merges[4].first);
  EXPECT_EQ(b5["steps"][4]["second"], learned.merges[4].second);
  EXPECT_EQ(b4["pairs"][0]["first"], learned.merges[4].first);
  EXPECT_EQ(b4["pairs"][0]["second"], learned.merges[4].second);
  EXPECT_FALSE(b5["applied"][0].empty());
  EXPECT_EQ(post("/widgets/bpe", {{"steps", 2}}).status, 400);
  // Errors name the field; unknown widgets are 404s; the widgets take POST.
  const Reply bad = post("/widgets/rope", {{"q", {1, 2}}, {"k", {3, -1}}, {"theta", 2}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("theta"), std::string::npos) << bad.body;
  EXPECT_EQ(post("/widgets/attention", {{"queries", {{1, 0}}}, {"keys", {{1}}}, {"values", {{1, 0}}}}).status, 400);
  EXPECT_EQ(post("/widgets/nope", json::object()).status, 404);
  EXPECT_EQ(request("GET", "/widgets/rope").status, 405);
}

// The page's own endpoints: its files, the model's attention maps (Model::attention_probabilities
// run on the inference loop), tokens with their pieces, the run's curves with the plot's axes,
// llama-server's timings, and the page alone without a model.
TEST_F(ServeHttpTest, PageFilesAttentionMapsPiecesCurvesAndTimings) {
  const std::filesystem::path run = std::filesystem::path(::testing::TempDir()) / "tformer_page_run";
  std::filesystem::remove_all(run);
  std::filesystem::create_directories(run);
  serve::ApiOptions ao;
  ao.run_dir = run.string();
  start({}, ao);
  const Reply page = request("GET", "/");
  EXPECT_EQ(page.status, 200);
  EXPECT_NE(page.body.find("<html"), std::string::npos);
  EXPECT_EQ(request("GET", "/web/nope.js").status, 404);

  // Attention maps: the reference kernel's probabilities of the prompt, per head, with the heads'
  // KV heads; they equal a direct call on the same model.
  const Reply a = post("/widgets/model_attention", {{"prompt", "abcde"}, {"layer", 1}});
  ASSERT_EQ(a.status, 200) << a.body;
  const json aj = json::parse(a.body);
  ASSERT_EQ(aj["tokens"].size(), 5u);
  EXPECT_EQ(aj["tokens"][2]["piece"], "c");
  EXPECT_EQ(aj["layer"], 1);
  const ModelConfig& c = model_->config();
  ASSERT_EQ(aj["heads"].size(), static_cast<size_t>(c.n_heads));
  std::vector<TokenId> ids;
  for (char ch : std::string("abcde")) ids.push_back(static_cast<unsigned char>(ch));
  std::vector<float> probs(c.n_layers * c.n_heads * 25);
  engine_->run_on_loop([&](Model& m) { m.attention_probabilities(probs.data(), ids.data(), 5); });
  for (int64_t h = 0; h < c.n_heads; ++h) {
    EXPECT_EQ(aj["heads"][h]["head"], h);
    EXPECT_EQ(aj["heads"][h]["kv_head"], h / (c.n_heads / c.n_kv_heads));
    for (int64_t t = 0; t < 5; ++t)
      for (int64_t j = 0; j < 5; ++j)
        EXPECT_EQ(aj["heads"][h]["weights"][t][j].get<float>(), probs[((c.n_heads + h) * 5 + t) * 5 + j]);
    EXPECT_EQ(aj["heads"][h]["weights"][0][1].get<float>(), 0.f);  // the causal mask
  }
  EXPECT_TRUE(is_error(post("/widgets/model_attention", {{"prompt", std::string(65, 'a')}}), 400, {"65", "64"}));
  EXPECT_TRUE(is_error(post("/widgets/model_attention", {{"prompt", "ab"}, {"layer", 9}}), 400, {"layer"}));

  // Tokens with their pieces and bytes; characters beside tokens (a 2-byte character is one
  // character and, in this byte vocabulary, two tokens).
  const json tk = json::parse(post("/tokenize", {{"content", "h\u00e9"}, {"with_pieces", true}}).body);
  EXPECT_EQ(tk["n_tokens"], 3);
  EXPECT_EQ(tk["n_chars"], 2);
  EXPECT_EQ(tk["n_bytes"], 3);
  EXPECT_EQ(tk["tokens"][0]["piece"], "h");
  EXPECT_EQ(tk["tokens"][1]["bytes"], json({0xC3}));

  // The run's curves: waiting for metrics.jsonl; then its records, a half-written last line left
  // out, with the axes `tformer plot` would draw.
  EXPECT_TRUE(json::parse(request("GET", "/run").body).contains("waiting"));
  {
    std::ofstream f(run / "metrics.jsonl");
    f << R"({"step":0,"train_loss":4.5,"val_loss":4.6})"
      << "\n"
      << R"({"step":100,"train_loss":2.0,"val_loss":2.5,"lr":0.001})"
      << "\n"
      << R"({"step":200,"train_lo)";
  }
  const json rc = json::parse(request("GET", "/run").body);
  EXPECT_EQ(rc["train"], json({{0.0, 4.5}, {100.0, 2.0}}));
  EXPECT_EQ(rc["val"], json({{0.0, 4.6}, {100.0, 2.5}}));
  EXPECT_EQ(rc["last"]["lr"], 0.001);
  EXPECT_EQ(rc["x_axis"]["ticks"].front(), 0.0);
  EXPECT_EQ(rc["x_axis"]["ticks"].back(), 100.0);
  EXPECT_EQ(rc["x_axis"]["labels"].front(), "0");
  for (const json& t : rc["y_axis"]["ticks"]) {
    EXPECT_GE(t.get<double>(), rc["y_axis"]["lo"].get<double>());
    EXPECT_LE(t.get<double>(), rc["y_axis"]["hi"].get<double>());
  }
  EXPECT_LT(rc["y_axis"]["lo"].get<double>(), 2.0);
  EXPECT_GT(rc["y_axis"]["hi"].get<double>(), 4.6);

  // The run folder cannot be escaped: metrics.jsonl as a link (out of the folder, or to a copy in
  // it) is refused, and a file that is no metrics file is refused without a byte of it in the
  // reply; paths with .. or encoded dots reach no file at all.
  {
    const auto good = run / "metrics.jsonl", kept = run / "kept.jsonl", secret = run.parent_path() / "serve_secret.txt";
    std::filesystem::rename(good, kept);
    std::ofstream(secret) << "vsecret-contents\n";
    for (const auto& target : {secret, kept}) {
      std::filesystem::create_symlink(target, good);
      const Reply r = request("GET", "/run");
      EXPECT_EQ(r.status, 500) << target;
      EXPECT_NE(r.body.find("link"), std::string::npos) << r.body;
      EXPECT_EQ(r.body.find("secret-contents"), std::string::npos) << r.body;
      std::filesystem::remove(good);
    }
    std::ofstream(good) << "vsecret-contents\n";
    const Reply garbage = request("GET", "/run");
    EXPECT_EQ(garbage.status, 500);
    EXPECT_EQ(garbage.body.find("secret"), std::string::npos) << garbage.body;
    EXPECT_EQ(garbage.body.find("'v'"), std::string::npos) << garbage.body;
    std::filesystem::remove(secret);
    std::filesystem::rename(kept, good);
    for (const char* path : {"/web/../index.html", "/web/%2e%2e/index.html", "/%2e%2e/etc/passwd", "/run/../etc/passwd",
                             "/web/..%2f..%2fetc%2fpasswd", "/web/%2E%2E%2Fmetrics.jsonl"})
      EXPECT_EQ(request("GET", path).status, 404) << path;
    EXPECT_EQ(json::parse(request("GET", "/run").body)["train"], json({{0.0, 4.5}, {100.0, 2.0}}));
  }

  // Timings beside usage: as many predicted tokens as completion tokens.
  const json cj = json::parse(post("/v1/completions", {{"prompt", "ab"}, {"max_tokens", 6}, {"temperature", 0}}).body);
  EXPECT_EQ(cj["timings"]["predicted_n"], cj["usage"]["completion_tokens"]);
  EXPECT_EQ(cj["timings"]["prompt_n"], 2);
  EXPECT_GE(cj["timings"]["time_to_first_token_ms"].get<double>(), 0.0);

  // The page without a model: the toy widgets and the curves answer; the model's endpoints are 503s
  // naming --model.
  serve::Api alone(ao);
  serve::HttpServer s2("127.0.0.1", 0, {},
                       [&](const serve::HttpRequest& q, serve::HttpResponse& r) { alone.handle(q, r); });
  std::thread t2([&] { s2.run(); });
  auto ask = [&](const std::string& method, const std::string& path, const std::string& body) {
    const int fd = connect_to(s2.port());
    send_all(fd, fmt::format("{} {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}", method,
                             path, body.size(), body));
    const std::string r = read_all(fd);
    ::close(fd);
    return Reply{status_of(r), body_of(r)};
  };
  EXPECT_EQ(ask("GET", "/", "").status, 200);
  EXPECT_EQ(ask("GET", "/run", "").status, 200);
  EXPECT_EQ(ask("POST", "/widgets/attention", R"({"example":"spec"})").status, 200);
  EXPECT_TRUE(is_error(ask("POST", "/v1/completions", R"({"prompt":"a"})"), 503, {"--model"}));
  EXPECT_TRUE(is_error(ask("POST", "/widgets/kv_cache", "{}"), 503, {"--model"}));
  EXPECT_EQ(json::parse(ask("GET", "/props", "").body)["model"], json());
  const Reply metrics = ask("GET", "/metrics", "");
  EXPECT_EQ(metrics.status, 200);
  EXPECT_NE(metrics.body.find("tformer_http_requests_total"), std::string::npos);
  s2.stop();
  t2.join();
  std::filesystem::remove_all(run);
}

// --host takes IPv6 addresses as well: a server on ::1 answers over IPv6 (skipped where the
// machine has no IPv6 loopback).
TEST(ServeHttpIpv6, AServerOnTheIpv6LoopbackAnswers) {
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool ipv6 = probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (probe >= 0) ::close(probe);
  if (!ipv6) GTEST_SKIP() << "no IPv6 loopback here";
  serve::HttpServer server("::1", 0, {}, [](const serve::HttpRequest& q, serve::HttpResponse& r) {
    r.send(200, "text/plain", "ipv6 " + q.path);
  });
  std::thread t([&] { server.run(); });
  const int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  a.sin6_port = htons(static_cast<uint16_t>(server.port()));
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  send_all(fd, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string r = read_all(fd);
  ::close(fd);
  server.stop();
  t.join();
  EXPECT_EQ(status_of(r), 200);
  EXPECT_EQ(body_of(r), "ipv6 /health");
}

// A body that stops short of its Content-Length: 408 once the body time is up (the headers came
// in time), and the server serves the next client.
TEST_F(ServeHttpTest, ABodyThatStopsShortTimesOut) {
  serve::HttpLimits limits;
  limits.body_timeout_ms = 500;
  start({}, {}, limits);
  const int fd = connect_to(server_->port());
  send_all(fd, "POST /tokenize HTTP/1.1\r\nContent-Length: 40\r\n\r\n{\"content\": ");
  const std::string r = read_all(fd);
  ::close(fd);
  EXPECT_EQ(status_of(r), 408) << r;
  EXPECT_NE(body_of(r).find("the body did not arrive in time"), std::string::npos) << body_of(r);
  EXPECT_EQ(request("GET", "/health", "").status, 200);
}

TEST_F(ServeHttpTest, LimitsOnBodyLineHeadersAndTime) {
  serve::HttpLimits limits;
  limits.max_body = 4096;
  limits.header_timeout_ms = 400;
  limits.max_headers = 8;
  start({}, {}, limits);
  // A body over the limit is refused from its Content-Length, before it is sent.
  {
    const int fd = connect_to(server_->port());
    send_all(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: 5000\r\n\r\n");
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_TRUE(is_error({status_of(r), body_of(r)}, 413, {"5000", "4096"}));
  }
  // The same with the body sent along (as clients do): the answer still arrives, not a reset.
  {
    const int fd = connect_to(server_->port());
    send_all(fd, "POST /v1/completions HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'x'));
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_TRUE(is_error({status_of(r), body_of(r)}, 413, {"5000", "4096"}));
  }
  // A request line of 1 MB.
  {
    const int fd = connect_to(server_->port());
    send_all(fd, "GET /" + std::string(1 << 20, 'a') + " HTTP/1.1\r\n\r\n");
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_EQ(status_of(r), 414);
  }
  // More headers than the limit (8 here), each short: 431 naming the limit.
  {
    const int fd = connect_to(server_->port());
    std::string req = "GET /health HTTP/1.1\r\n";
    for (int i = 0; i < 9; ++i) req += "X-H" + std::to_string(i) + ": v\r\n";
    send_all(fd, req + "\r\n");
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_TRUE(is_error({status_of(r), body_of(r)}, 431, {"more than 8 headers"})) << r;
  }
  // Headers past 16 KB.
  {
    const int fd = connect_to(server_->port());
    send_all(fd, "GET /health HTTP/1.1\r\nX-Big: " + std::string(20000, 'b') + "\r\n\r\n");
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_EQ(status_of(r), 431);
  }
  // A client that sends a byte at a time, too slowly: 408 once the header time is up.
  {
    const int fd = connect_to(server_->port());
    const std::string req = "GET /health HTTP/1.1\r\n\r\n";
    std::string got;
    for (char c : req) {
      send_all(fd, std::string(1, c));
      got = read_all(fd, 100);
      if (!got.empty()) break;
    }
    if (got.empty()) got = read_all(fd);
    ::close(fd);
    EXPECT_EQ(status_of(got), 408);
  }
  // Chunked request bodies are refused; Expect: 100-continue is answered.
  EXPECT_EQ(request("POST", "/tokenize", "", "Transfer-Encoding: chunked\r\n").status, 411);
  {
    const int fd = connect_to(server_->port());
    const std::string body = R"({"content": "ab"})";
    send_all(fd, fmt::format("POST /tokenize HTTP/1.1\r\nExpect: 100-continue\r\nConnection: close\r\n"
                             "Content-Length: {}\r\n\r\n",
                             body.size()));
    const std::string cont = read_all(fd, 2000);
    EXPECT_EQ(cont.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << cont;
    send_all(fd, body);
    const std::string r = read_all(fd);
    ::close(fd);
    EXPECT_EQ(status_of(r), 200);
  }
  // Malformed request lines and headers.
  for (const char* bad :
       {"GARBAGE\r\n\r\n", "GET /x HTTP/2.0\r\n\r\n", "GET x HTTP/1.1\r\n\r\n",
        "GET /health HTTP/1.1\r\nno colon here\r\n\r\n", "POST /tokenize HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n"}) {
    const int fd = connect_to(server_->port());
    send_all(fd, bad);
    const std::string r = read_all(fd);
    ::close(fd);
    const int st = status_of(r);
    EXPECT_TRUE(st == 400 || st == 505) << bad << " -> " << r;
  }
  expect_serving();
}

TEST_F(ServeHttpTest, DisconnectAtEveryStageCancelsAndTheServerKeepsServing) {
  serve::EngineOptions eo;
  eo.parallel = 2;
  eo.prefill_chunk = 4;
  eo.step_delay_ms = 10;  // 60 tokens take 600 ms: a disconnect is seen mid-stream
  start(eo);
  // Before anything, in the middle of the headers, in the middle of the body.
  for (const std::string& part : {std::string(), std::string("POST /v1/comp"),
                                  std::string("POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"pro")}) {
    const int fd = connect_to(server_->port());
    send_all(fd, part);
    ::close(fd);
  }
  expect_serving();
  // During a stream, after its first event: the sequence is cancelled within a step.
  {
    const int fd = connect_to(server_->port());
    const std::string body = json{{"prompt", "abc"}, {"max_tokens", 60}, {"stream", true}}.dump();
    send_all(fd, fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
    read_first_event(fd);
    ::close(fd);
    wait_for_cancelled(1);
  }
  // Right after the request (in its prefill or queued), without reading anything.
  {
    const int fd = connect_to(server_->port());
    const std::string body = json{{"prompt", std::string(40, 'x')}, {"max_tokens", 20}}.dump();
    send_all(fd, fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
    ::close(fd);
    wait_for_cancelled(2);
  }
  expect_serving();
  EXPECT_EQ(post("/v1/completions", {{"prompt", "ok"}, {"max_tokens", 3}}).status, 200);
}

// A shutdown while a stream runs: its last event is the error, a 503 of type
// server_shutting_down as the same request unstreamed would get, then [DONE].
TEST_F(ServeHttpTest, ShutdownEndsARunningStreamWithA503Event) {
  serve::EngineOptions eo;
  eo.step_delay_ms = 10;  // 60 tokens take 600 ms: the shutdown comes mid-stream
  start(eo);
  const int fd = connect_to(server_->port());
  const std::string body = json{{"prompt", "abc"}, {"max_tokens", 60}, {"stream", true}}.dump();
  send_all(fd, fmt::format("POST /v1/completions HTTP/1.1\r\nContent-Length: {}\r\n\r\n{}", body.size(), body));
  read_first_event(fd);
  engine_->stop();
  const std::string rest = read_all(fd);
  ::close(fd);
  const size_t at = rest.find("data: {\"error\"");
  ASSERT_NE(at, std::string::npos) << rest;
  const json e = json::parse(rest.substr(at + 6, rest.find("\n\n", at) - at - 6));
  EXPECT_EQ(e["error"]["code"], 503);
  EXPECT_EQ(e["error"]["type"], "server_shutting_down");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("shutting down"), std::string::npos);
  EXPECT_NE(rest.find("data: [DONE]", at), std::string::npos) << rest;
}

TEST_F(ServeHttpTest, KeysQueueAndConnectionLimits) {
  serve::EngineOptions eo;
  eo.parallel = 1;
  eo.max_queue = 0;
  eo.step_delay_ms = 20;  // the stream below holds its slot for 1.2 s
  serve::ApiOptions ao;
  ao.api_key = "s3cret-key";
  serve::HttpLimits limits;
  limits.max_connections = 3;
  start(eo, ao, limits);
  EXPECT_EQ(request("GET", "/health").status, 200);  // no key needed
  EXPECT_TRUE(is_error(request("GET", "/v1/models"), 401, {"API key"}));
  EXPECT_TRUE(is_error(request("GET", "/v1/models", "", "Authorization: Bearer s3cret-kex\r\n"), 401, {"API key"}));
  EXPECT_TRUE(is_error(request("GET", "/v1/models", "", "Authorization: Bearer s3cret-key2\r\n"), 401, {"API key"}));
  const Reply ok = request("GET", "/v1/models", "", "Authorization: Bearer s3cret-key\r\n");
  ASSERT_EQ(ok.status, 200);
  EXPECT_EQ(json::parse(ok.body)["data"][0]["id"], "m");
  EXPECT_TRUE(serve::constant_time_equal("abc", "abc"));
  EXPECT_FALSE(serve::constant_time_equal("abc", "abd"));
  EXPECT_FALSE(serve::constant_time_equal("abc", "abcd"));
  EXPECT_FALSE(serve::constant_time_equal("", "a"));
  // One slot, no queue: while a stream holds the slot, the next request is refused with 503.
  const std::string key = "Authorization: Bearer s3cret-key\r\n";
  const int fd = connect_to(server_->port());
  const std::string body = json{{"prompt", "abc"}, {"max_tokens", 60}, {"stream", true}}.dump();
  send_all(fd, fmt::format("POST /v1/completions HTTP/1.1\r\n{}Content-Length: {}\r\n\r\n{}", key, body.size(), body));
  read_first_event(fd);
  const Reply busy = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}, key);
  EXPECT_TRUE(is_error(busy, 503, {"busy"}));
  EXPECT_EQ(json::parse(busy.body)["error"]["type"], "server_busy");
  ::close(fd);
  wait_for_cancelled(1);
  // Connections: three idle ones fill the limit of 3; a fourth gets 503 at once. (Until the server
  // has accepted all three, a fourth may be taken as the third: it is then closed and tried again.)
  int idle[3];
  for (int& f : idle) f = connect_to(server_->port());
  std::string r;
  for (int attempt = 0; attempt < 40 && status_of(r) != 503; ++attempt) {
    const int extra = connect_to(server_->port());
    r = read_all(extra, 250);
    ::close(extra);
  }
  EXPECT_TRUE(is_error({status_of(r), body_of(r)}, 503, {"connections"}));
  EXPECT_EQ(json::parse(body_of(r))["error"]["type"], "server_busy");
  for (int f : idle) ::close(f);
  // Once the connection threads have noticed their clients have gone (within their 200 ms poll),
  // a completion is served again: only a connection-limit 503 is waited out.
  Reply after;
  for (int i = 0; i < 100; ++i) {
    after = post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 2}}, key);
    if (after.status != 503 || after.body.find("connections") == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(after.status, 200) << after.body;
}

TEST_F(ServeHttpTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  start();
  const int fd = connect_to(server_->port());
  send_all(fd, "GET /health HTTP/1.1\r\n\r\nGET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string r = read_all(fd);
  ::close(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK", 0), 0u);
  const size_t second = r.find("HTTP/1.1 200 OK", 10);
  ASSERT_NE(second, std::string::npos) << r;
  EXPECT_NE(r.find("\"object\":\"list\"", second), std::string::npos);
}

TEST(ServeHttpHead, TheRequestLineNeedsAllThreeParts) {
  serve::HttpRequest req;
  const serve::HttpLimits limits;
  const serve::HttpHead ok =
      serve::parse_http_head("POST /v1/completions?x=1 HTTP/1.1\r\nContent-Length: 7", limits, req);
  EXPECT_EQ(ok.status, 0);
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.path, "/v1/completions");
  EXPECT_EQ(ok.content_length, 7u);
  EXPECT_TRUE(ok.keep_alive);
  // A fuzzed head: the line starts with a space, so the method is empty.
  serve::HttpRequest empty;
  const serve::HttpHead bad = serve::parse_http_head(" / HTTP/1.1\r\nh0: v", limits, empty);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.why.find("malformed request line"), std::string::npos);
}

TEST(ServeChatTemplate, PlainAndFileTemplatesRenderAsDocumented) {
  const auto plain = serve::ChatTemplate::plain();
  EXPECT_EQ(plain.render({{"system", "Be brief."}, {"user", "Hi {role}"}}),
            "system: Be brief.\nuser: Hi {role}\nassistant:");
  EXPECT_EQ(plain.stop, std::vector<std::string>{"\nuser:"});
  test::TempDir tmp;
  const std::string p = (tmp.path() / "t.txt").string();
  {
    std::ofstream f(p);
    f << "# a comment\nprefix: <s>\nmessage: [{role}]\\s{content}\\n\nmessage.system: ({content})\\n\n"
         "generation: [assistant]\\s\nstop: \\n[user]\nstop: </s>\n";
  }
  const auto t = serve::ChatTemplate::from_file(p);
  EXPECT_EQ(t.render({{"system", "S"}, {"user", "U"}}), "<s>(S)\n[user] U\n[assistant] ");
  EXPECT_EQ(t.stop, (std::vector<std::string>{"\n[user]", "</s>"}));
  {
    std::ofstream f(p);
    f << "message: {content}\ngeneration: x\nbogus: 1\n";
  }
  EXPECT_ERROR(serve::ChatTemplate::from_file(p), ErrorKind::BadFile, p, "line 3", "bogus");
  {
    std::ofstream f(p);
    f << "message: no placeholder\ngeneration: x\n";
  }
  EXPECT_ERROR(serve::ChatTemplate::from_file(p), ErrorKind::BadFile, p, "{content}");
}

TEST_F(ServeHttpTest, ChatWithThePlainTemplate) {
  serve::ApiOptions ao;
  ao.has_chat_template = true;
  start({}, ao);
  const Reply r = post("/v1/chat/completions",
                       {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 4}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200) << r.body;
  const json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(std::string("user: hi\nassistant:").size()));
  // Content as text parts; anything else in them is a 400 naming the message.
  const Reply parts = post("/v1/chat/completions",
                           {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hi"}}}}}}},
                            {"max_tokens", 4},
                            {"temperature", 0}});
  EXPECT_EQ(json::parse(parts.body)["choices"][0]["message"]["content"], j["choices"][0]["message"]["content"]);
  EXPECT_TRUE(is_error(
      post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", {{{"type", 5}, {"text", "hi"}}}}}}}}),
      400, {"'messages'[0].content"}));
  EXPECT_TRUE(is_error(post("/v1/chat/completions", {{"messages", {{{"role", 1}, {"content", "hi"}}}}}), 400,
                       {"'messages'[0].role"}));
  // The same text as the completion of the rendered prompt (with the template's stop string).
  const Reply c =
      post("/v1/completions",
           {{"prompt", "user: hi\nassistant:"}, {"max_tokens", 4}, {"temperature", 0}, {"stop", "\nuser:"}});
  EXPECT_EQ(json::parse(c.body)["choices"][0]["text"], j["choices"][0]["message"]["content"]);
}

// n samples over HTTP (each choice its index, seeds seed, seed + 1, ...; streamed chunks carry their
// index; usage sums the completions and counts the shared prompt once); top_k 1 is greedy; the
// A model whose own chat template is Jinja, served without --chat-template: chat is refused with
// a 400 that says why and names the remedies; completions still work.
TEST_F(ServeHttpTest, AJinjaTemplateAloneIsRefusedNamingTheRemedy) {
  serve::ApiOptions ao;
  ao.model_chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  start({}, ao);
  EXPECT_TRUE(is_error(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}), 400,
                       {"Jinja", "GET /props", "--chat-template FILE", "--chat-template plain", "/v1/completions"}));
  EXPECT_EQ(post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}}).status, 200);
}

// logprobs shapes of completions (tokens, token_logprobs, top_logprobs, text_offset) and of chat
// (content: token, logprob, bytes, top_logprobs); /props with a model and a template.
TEST_F(ServeHttpTest, SamplesTopKLogprobsAndProps) {
  serve::EngineOptions eo;
  eo.parallel = 4;
  serve::ApiOptions ao;
  ao.has_chat_template = true;
  ao.model_chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}";
  start(eo, ao);
  auto one = [&](uint64_t seed) {
    return json::parse(post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}, {"seed", seed}}).body);
  };
  const json three =
      json::parse(post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}, {"seed", 9}, {"n", 3}}).body);
  ASSERT_EQ(three["choices"].size(), 3u);
  int64_t completion = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three["choices"][i]["index"], i);
    EXPECT_EQ(three["choices"][i]["text"], one(9 + i)["choices"][0]["text"]) << i;
    completion += one(9 + i)["usage"]["completion_tokens"].get<int64_t>();
  }
  EXPECT_EQ(three["usage"]["completion_tokens"], completion);
  EXPECT_EQ(three["usage"]["prompt_tokens"], 3);
  EXPECT_TRUE(is_error(post("/v1/completions", {{"prompt", "abc"}, {"n", 9}}), 400, {"'n'"}));
  // Streamed: every chunk names its choice, and each choice's chunks make its text.
  {
    const Reply st =
        post("/v1/completions", {{"prompt", "abc"}, {"max_tokens", 5}, {"seed", 9}, {"n", 3}, {"stream", true}});
    std::string text[3];
    size_t at = 0;
    while ((at = st.body.find("data: {", at)) != std::string::npos) {
      const size_t end = st.body.find("\n\n", at);
      const json c = json::parse(st.body.substr(at + 6, end - at - 6));
      for (const json& ch : c["choices"]) text[ch["index"].get<int>()] += ch["text"].get<std::string>();
      at = end;
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(text[i], three["choices"][i]["text"]) << i;
  }
  // top_k 1: the most probable token every time, whatever the seed: greedy's text.
  const json greedy =
      json::parse(post("/v1/completions", {{"prompt", "xy"}, {"max_tokens", 6}, {"temperature", 0}}).body);
  for (uint64_t seed : {1, 2})
    EXPECT_EQ(json::parse(post("/v1/completions", {{"prompt", "xy"}, {"max_tokens", 6}, {"top_k", 1}, {"seed", seed}})
                              .body)["choices"][0]["text"],
              greedy["choices"][0]["text"]);
  // Completions' logprobs: one entry per token, the chosen one among the top ones (greedy: the
  // most probable), offsets the bytes before each token.
  const json lc = json::parse(
      post("/v1/completions", {{"prompt", "xy"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 2}}).body);
  const json& l = lc["choices"][0]["logprobs"];
  ASSERT_EQ(l["tokens"].size(), 4u);
  ASSERT_EQ(l["token_logprobs"].size(), 4u);
  ASSERT_EQ(l["text_offset"].size(), 4u);
  int64_t offset = 0;
  std::string joined;
  for (size_t t = 0; t < 4; ++t) {
    EXPECT_EQ(l["text_offset"][t], offset);
    offset += static_cast<int64_t>(l["tokens"][t].get<std::string>().size());
    joined += l["tokens"][t].get<std::string>();
    EXPECT_LE(l["token_logprobs"][t].get<double>(), 0.0);
    EXPECT_LE(l["top_logprobs"][t].size(), 2u);
    double best = -std::numeric_limits<double>::infinity();
    for (const auto& [tok, lp] : l["top_logprobs"][t].items()) best = std::max(best, lp.get<double>());
    EXPECT_EQ(l["token_logprobs"][t].get<double>(), best);
  }
  EXPECT_EQ(joined, lc["choices"][0]["text"]);
  // Chat's: content entries with the token's bytes and its top alternatives, most probable first.
  const json lchat = json::parse(post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                               {"max_tokens", 3},
                                                               {"temperature", 0},
                                                               {"logprobs", true},
                                                               {"top_logprobs", 3}})
                                     .body);
  const json& content = lchat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), lchat["usage"]["completion_tokens"].get<size_t>());
  for (const json& e : content) {
    const std::string tok = e["token"];
    std::string raw;  // the token's bytes; its text is them, or U+FFFD where they are no whole character
    for (const json& b : e["bytes"]) raw += static_cast<char>(b.get<int>());
    ASSERT_FALSE(raw.empty());
    if (static_cast<unsigned char>(raw[0]) < 0x80) {
      EXPECT_EQ(tok, raw);
    } else {
      EXPECT_NE(tok.find("\xEF\xBF\xBD"), std::string::npos) << tok;
    }
    ASSERT_EQ(e["top_logprobs"].size(), 3u);
    EXPECT_EQ(e["top_logprobs"][0]["token"], tok);  // greedy: the chosen one is the most probable
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    EXPECT_GE(e["top_logprobs"][0]["logprob"].get<double>(), e["top_logprobs"][1]["logprob"].get<double>());
  }
  // /props: the settings the server runs with, and the model's own template shown, not used.
  const json props = json::parse(request("GET", "/props").body);
  EXPECT_EQ(props["model"], "m");
  EXPECT_EQ(props["parallel"], 4);
  EXPECT_EQ(props["model_chat_template"], ao.model_chat_template);
  EXPECT_EQ(props["chat_template"], ao.chat.message);
  EXPECT_EQ(props["kv_cache_bytes"], engine_->cache_bytes());
}

}  // namespace
}  // namespace tformer
