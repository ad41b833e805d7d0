#include "serve/api.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <span>

#include "core/error.h"
#include "core/file_io.h"
#include "plot/loss_curves.h"
#include "serve/web_assets.h"
#include "serve/widgets.h"

namespace tformer::serve {

using nlohmann::json;

namespace {

// JSON text that never throws on bytes that are not UTF-8 (a token's bytes need not be whole
// characters): they become U+FFFD.
std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// An error answered to the client: the status, OpenAI's error type and the message.
struct ApiError {
  int status;
  std::string message, type;
};
[[noreturn]] void bad_request(std::string message) { throw ApiError{400, std::move(message), "invalid_request_error"}; }

json error_body(const ApiError& e) {
  return {{"error", {{"message", e.message}, {"type", e.type}, {"code", e.status}}}};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return v.is_number_integer() || v.is_number_unsigned() ? "an integer" : "a number";
  }
}

// A field of the body: absent or null gives the default; a value of the wrong type is a 400 naming
// the field and both types.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}
int64_t int_field(const json& body, const char* name, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number_integer() && !v->is_number_unsigned())
    bad_request(fmt::format("'{}' must be an integer, got {}", name, type_name(*v)));
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    bad_request(fmt::format("'{}' is out of range", name));
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad_request(fmt::format("'{}' must be in {}..{}, got {}", name, lo, hi, x));
  return x;
}
double number_field(const json& body, const char* name, double def, double lo, double hi, bool open_lo = false) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_number()) bad_request(fmt::format("'{}' must be a number, got {}", name, type_name(*v)));
  const double x = v->get<double>();
  if (!(open_lo ? x > lo : x >= lo) || !(x <= hi))
    bad_request(fmt::format("'{}' must be in {}{}, {}], got {}", name, open_lo ? "(" : "[", lo, hi, x));
  return x;
}
bool bool_field(const json& body, const char* name, bool def) {
  const json* v = field(body, name);
  if (!v) return def;
  if (!v->is_boolean()) bad_request(fmt::format("'{}' must be a boolean, got {}", name, type_name(*v)));
  return v->get<bool>();
}

// Nesting deeper than this is refused before parsing (a body of a million '[' would otherwise
// cost a million levels).
constexpr int kMaxDepth = 32;

json parse_body(const std::string& body) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : body) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) bad_request(fmt::format("the JSON body is nested deeper than {} levels", kMaxDepth));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded()) bad_request("the body is not valid JSON");
  if (!j.is_object()) bad_request(fmt::format("the body must be a JSON object, got {}", type_name(j)));
  return j;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

int64_t now_unix() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

ChatTemplate ChatTemplate::from_file(const std::string& path) {
  const std::string text = read_file(path);
  ChatTemplate t;
  t.stop.clear();
  bool have_message = false, have_generation = false;
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos)
      fail_file(path, "{}: line {}: expected 'key: value' (keys prefix, message, message.ROLE, generation, stop)", path,
                line_no);
    const std::string key = line.substr(0, colon);
    std::string raw = line.substr(colon + 1);
    if (!raw.empty() && raw[0] == ' ') raw.erase(0, 1);
    std::string value;
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] != '\\') {
        value += raw[i];
        continue;
      }
      if (++i == raw.size()) fail_file(path, "{}: line {}: a '\\' ends the line", path, line_no);
      switch (raw[i]) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case '\\':
          value += '\\';
          break;
        case 's':
          value += ' ';
          break;
        default:
          fail_file(path, "{}: line {}: unknown escape '\\{}' (\\n, \\t, \\s, \\\\)", path, line_no, raw[i]);
      }
    }
    if (key == "prefix") {
      t.prefix = value;
    } else if (key == "message") {
      t.message = value, have_message = true;
    } else if (key.rfind("message.", 0) == 0 && key.size() > 8) {
      t.per_role.emplace_back(key.substr(8), value);
    } else if (key == "generation") {
      t.generation = value, have_generation = true;
    } else if (key == "stop") {
      if (value.empty()) fail_file(path, "{}: line {}: an empty stop string", path, line_no);
      t.stop.push_back(value);
    } else {
      fail_file(path, "{}: line {}: unknown key '{}' (prefix, message, message.ROLE, generation, stop)", path, line_no,
                key);
    }
  }
  if (!have_message || !have_generation)
    fail_file(path, "{}: a chat template needs a 'message:' line and a 'generation:' line", path);
  if (t.message.find("{content}") == std::string::npos)
    fail_file(path, "{}: the message line has no {{content}} placeholder", path);
  return t;
}

std::string ChatTemplate::render(const std::vector<std::pair<std::string, std::string>>& messages) const {
  std::string out = prefix;
  for (const auto& [role, content] : messages) {
    std::string form = message;
    for (const auto& [r, f] : per_role)
      if (r == role) form = f;
    // {content} last, so that a message containing "{role}" is not rewritten.
    const size_t at = form.find("{content}");
    std::string head = replace_all(form.substr(0, at), "{role}", role);
    std::string tail = at == std::string::npos ? "" : replace_all(form.substr(at + 9), "{role}", role);
    out += head;
    if (at != std::string::npos) out += content;
    out += tail;
  }
  return out + generation;
}

Api::Api(Engine& engine, const Tokenizer& tokenizer, ApiOptions options)
    : engine_(&engine), tokenizer_(&tokenizer), options_(std::move(options)) {}
Api::Api(ApiOptions options) : options_(std::move(options)) {}

Engine& Api::engine() const {
  if (!engine_)
    throw ApiError{503, "no model is loaded: start tformer serve with --model M to use this endpoint",
                   "model_not_loaded"};
  return *engine_;
}
const Tokenizer& Api::tokenizer() const {
  engine();
  return *tokenizer_;
}

namespace {}  // namespace

namespace {

// Numbers of a widget's request: finite, at most `max` of them.
std::vector<double> number_list(const json& body, const char* name, size_t max) {
  const json* v = field(body, name);
  if (!v) return {};
  if (!v->is_array() || v->empty() || v->size() > max)
    bad_request(fmt::format("'{}' must be an array of 1 to {} numbers", name, max));
  std::vector<double> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& x = (*v)[i];
    if (!x.is_number() || !std::isfinite(x.get<double>()))
      bad_request(fmt::format("'{}'[{}] must be a finite number, got {}", name, i, x.dump()));
    out.push_back(x.get<double>());
  }
  return out;
}
widgets::Vec2 vec2(const json& body, const char* name) {
  const std::vector<double> v = number_list(body, name, 2);
  if (v.size() != 2) bad_request(fmt::format("'{}' must be two numbers", name));
  return {v[0], v[1]};
}
std::vector<widgets::Vec2> vec2_list(const json& body, const char* name, size_t max) {
  const json* v = field(body, name);
  if (!v || !v->is_array() || v->empty() || v->size() > max)
    bad_request(fmt::format("'{}' must be an array of 1 to {} pairs of numbers", name, max));
  std::vector<widgets::Vec2> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& row = (*v)[i];
    if (!row.is_array() || row.size() != 2 || !row[0].is_number() || !row[1].is_number() ||
        !std::isfinite(row[0].get<double>()) || !std::isfinite(row[1].get<double>()))
      bad_request(fmt::format("'{}'[{}] must be a pair of finite numbers, got {}", name, i, row.dump()));
    out.push_back({row[0].get<double>(), row[1].get<double>()});
  }
  return out;
}
// The outputs and weights, with each row's sum and the weight it puts on keys past its position
// (q_offset + row): 1 and 0 under the causal rule; not so under the two wrong masks.
json vec2_json(const std::vector<widgets::Vec2>& rows) {
  json out = json::array();
  for (const auto& v : rows) out.push_back({v[0], v[1]});
  return out;
}
json attention_json(const widgets::ToyAttention& a, int64_t q_offset) {
  json out = vec2_json(a.out), sums = json::array(), future = json::array();
  for (size_t i = 0; i < a.weights.size(); ++i) {
    double sum = 0, ahead = 0;
    for (size_t j = 0; j < a.weights[i].size(); ++j) {
      sum += a.weights[i][j];
      if (static_cast<int64_t>(j) > q_offset + static_cast<int64_t>(i)) ahead += a.weights[i][j];
    }
    sums.push_back(sum);
    future.push_back(ahead);
  }
  return {{"out", out}, {"weights", a.weights}, {"row_sums", sums}, {"future_mass", future}, {"offset", q_offset}};
}

}  // namespace

json Api::widget(const std::string& name, const json& body) const {
  constexpr size_t kMaxRows = 64;
  if (name == "attention") {
    if (const json* e = field(body, "example")) {
      if (!e->is_string() || e->get<std::string>() != "spec") bad_request("'example' must be \"spec\"");
      const widgets::SpecAttentionChecks c = widgets::spec_attention_example();
      return {{"full", attention_json(c.full, 0)},
              {"cached", attention_json(c.cached, 2)},
              {"changed", attention_json(c.changed, 0)},
              {"queries", vec2_json(c.queries)},
              {"values", vec2_json(c.values)},
              {"changed_value", {c.changed_value[0], c.changed_value[1]}},
              {"first_row_error", c.first_row_error},
              {"cached_vs_full", c.cached_vs_full},
              {"earlier_row_immune", c.earlier_row_immune}};
    }
    const auto q = vec2_list(body, "queries", kMaxRows), k = vec2_list(body, "keys", kMaxRows),
               v = vec2_list(body, "values", kMaxRows);
    const int64_t offset = int_field(body, "offset", 0, 0, kMaxRows);
    const json* m = field(body, "mask");
    const std::string rule = m && m->is_string() ? m->get<std::string>() : (m ? "?" : "correct");
    widgets::MaskRule r = widgets::MaskRule::Correct;
    if (rule == "score_zero")
      r = widgets::MaskRule::ScoreZero;
    else if (rule == "zero_after_softmax")
      r = widgets::MaskRule::ZeroAfterSoftmax;
    else if (rule != "correct")
      bad_request("'mask' must be \"correct\", \"score_zero\" or \"zero_after_softmax\"");
    return attention_json(widgets::toy_attention(q, k, v, offset, r), offset);
  }
  if (name == "rope") {
    // Any integer positions: a model's are >= 0, but the identity holds for every rotation, and a
    // shift that takes a position below zero is still a shift of both.
    const int64_t m = int_field(body, "m", 0, -(int64_t{1} << 20), int64_t{1} << 20),
                  n = int_field(body, "n", 0, -(int64_t{1} << 20), int64_t{1} << 20);
    const double theta = number_field(body, "theta", 0.5, 0, 1, true);
    const widgets::RopeScores r = widgets::rope_scores(vec2(body, "q"), vec2(body, "k"), m, n, theta);
    return {
        {"rotated", r.rotated}, {"relative", r.relative}, {"difference", r.rotated - r.relative}, {"m", m}, {"n", n},
        {"theta", theta}};
  }
  if (name == "layernorm") {
    const std::vector<double> x = number_list(body, "x", 256);
    if (x.empty()) bad_request("'x' must be an array of 1 to 256 numbers");
    const widgets::LayerNormDemo d = widgets::layernorm_demo(
        x, number_field(body, "shift", 0, -1e6, 1e6), number_field(body, "scale", 1, 0, 1e6, true),
        number_field(body, "eps", 1e-5, 0, 1, true), number_list(body, "gain", 256), number_list(body, "bias", 256));
    return {{"x", x},
            {"y", d.y},
            {"shifted", d.shifted},
            {"scaled", d.scaled},
            {"shift_error", d.shift_error},
            {"scale_error", d.scale_error},
            {"affine", d.affine},
            {"affine_mean", d.affine_mean},
            {"affine_var", d.affine_var}};
  }
  if (name == "kv_cache") {
    // The loaded model's cache: the formula for the server's slots beside what the engine holds,
    // and with every query head its own KV head (what GQA saves).
    const ModelConfig& c = engine().model().config();
    const auto& o = engine().options();
    const int64_t tokens = int_field(body, "tokens", o.context, 0, int64_t{1} << 24);
    const int64_t batch = int_field(body, "batch", o.parallel, 0, 1 << 16);
    // Another KV-head count (a GQA conversion of this model, tformer convert --kv-heads): any
    // divisor of the query heads.
    const int64_t kv = int_field(body, "kv_heads", c.n_kv_heads, 1, c.n_heads);
    if (c.n_heads % kv != 0)
      bad_request(fmt::format("'kv_heads' must divide the model's {} query heads, got {}", c.n_heads, kv));
    auto payload = [&](int64_t heads) {
      return widgets::kv_cache_payload_bytes(c.n_layers, batch, heads, tokens, c.head_dim(), KVCache::kEntryBytes);
    };
    return {{"payload_bytes_with_kv_heads", payload(kv)},
            {"with_kv_heads", kv},
            {"keys_and_values", 2},  // the formula's factor: a key and a value per entry
            {"layers", c.n_layers},
            {"n_heads", c.n_heads},
            {"kv_heads", c.n_kv_heads},
            {"head_dim", c.head_dim()},
            {"tokens", tokens},
            {"batch", batch},
            {"bytes_per_entry", KVCache::kEntryBytes},
            {"payload_bytes", payload(c.n_kv_heads)},
            {"payload_bytes_one_kv_head_per_query_head", payload(c.n_heads)},
            {"engine_bytes", engine().cache_bytes()},
            {"engine_slots", o.parallel},
            {"engine_context", o.context}};
  }
  if (name == "bpe") {
    auto text = [&](const char* key, bool required) {
      const json* v = field(body, key);
      if (!v && !required) return std::string();
      if (!v || !v->is_string()) bad_request(fmt::format("'{}' must be a string", key));
      if (v->get<std::string>().size() > (1 << 16)) bad_request(fmt::format("'{}' is over 64 KiB", key));
      return v->get<std::string>();
    };
    const widgets::BpeWidget w =
        widgets::bpe_widget(text("corpus", true), int_field(body, "steps", 1, 0, 500),
                            int_field(body, "min_frequency", 2, 1, INT64_MAX), text("apply", false));
    json words = json::array(), steps = json::array(), pairs = json::array();
    for (const auto& wc : w.words) words.push_back({{"word", wc.word}, {"count", wc.count}});
    for (const auto& st : w.steps)
      steps.push_back({{"step", st.step},
                       {"first", st.first},
                       {"second", st.second},
                       {"count", st.count},
                       {"symbol", st.symbol},
                       {"vocab_size", st.vocab_size}});
    for (const auto& pc : w.pairs) pairs.push_back({{"first", pc.first}, {"second", pc.second}, {"count", pc.count}});
    return {{"words", words},
            {"steps", steps},
            {"segments", w.segments},
            {"pairs", pairs},
            {"tie_rule",
             "the largest count; among equal counts the greatest pair, compared as (first, second) by code points "
             "(subword-nmt's max over (count, pair))"},
            {"stop_reason", w.stop_reason},
            {"applied", w.applied}};
  }
  throw ApiError{404, fmt::format("no widget '{}' (attention, rope, layernorm, kv_cache, bpe)", name),
                 "not_found_error"};
}

void Api::handle(const HttpRequest& req, HttpResponse& res) {
  ++http_requests_;
  auto send_json = [&](int status, const json& j) { res.send(status, "application/json", dump(j)); };
  try {
    const std::string& p = req.path;
    auto method = [&](const char* m) {
      if (req.method != m)
        throw ApiError{405, fmt::format("{} takes {}, not {}", p, m, req.method), "invalid_request_error"};
    };
    // The page (web/, built into the binary): GET / and GET /web/NAME, never behind the API key
    // (they hold no data; every number they show comes from the endpoints below).
    if (p == "/" || p == "/index.html" || p.rfind("/web/", 0) == 0) {
      method("GET");
      const WebAsset* a = find_web_asset(p.rfind("/web/", 0) == 0 ? std::string_view(p).substr(5) : "index.html");
      if (!a) throw ApiError{404, fmt::format("no file {} in the page", p), "not_found_error"};
      return (void)res.send(200, std::string(a->content_type), std::string(a->bytes));
    }
    if (p == "/health") {
      method("GET");
      return send_json(200, {{"status", "ok"}});
    }
    if (!options_.api_key.empty()) {
      const std::string auth = req.header("authorization");
      const std::string_view bearer = "Bearer ";
      const bool ok = auth.size() > bearer.size() && auth.compare(0, bearer.size(), bearer) == 0 &&
                      constant_time_equal(std::string_view(auth).substr(bearer.size()), options_.api_key);
      if (!ok) throw ApiError{401, "missing or wrong API key (Authorization: Bearer KEY)", "authentication_error"};
    }
    if (p == "/v1/models" || p == "/models") {
      method("GET");
      return send_json(200, {{"object", "list"},
                             {"data", json::array({{{"id", options_.model_id},
                                                    {"object", "model"},
                                                    {"created", now_unix()},
                                                    {"owned_by", "tformer"}}})}});
    }
    if (p == "/v1/completions" || p == "/completions") {
      method("POST");
      return completions(req, res, false);
    }
    if (p == "/v1/chat/completions" || p == "/chat/completions") {
      method("POST");
      return completions(req, res, true);
    }
    if (p == "/tokenize") {
      method("POST");
      const json body = parse_body(req.body);
      const json* c = field(body, "content");
      if (!c || !c->is_string()) bad_request("'content' must be a string");
      const bool special = bool_field(body, "add_special", true);
      const std::string text = c->get<std::string>();
      const auto ids = special ? encode_for_model(tokenizer(), text) : tokenizer().encode(text);
      if (!bool_field(body, "with_pieces", false)) return send_json(200, {{"tokens", ids}});
      // llama-server's form: each token with its text (its bytes; a piece need not be whole UTF-8
      // characters, and then it is shown with U+FFFD), and the character count beside the token count.
      json tokens = json::array();
      for (TokenId id : ids) {
        const std::string piece = tokenizer().decode(std::span<const TokenId>(&id, 1));
        std::vector<int> bytes(piece.begin(), piece.end());
        for (int& x : bytes) x &= 0xFF;
        tokens.push_back({{"id", id}, {"piece", piece}, {"bytes", bytes}});
      }
      size_t chars = 0;  // code points: nlohmann's parser has checked the string is UTF-8
      for (unsigned char ch : text) chars += (ch & 0xC0) != 0x80;
      return send_json(200,
                       {{"tokens", tokens}, {"n_tokens", ids.size()}, {"n_chars", chars}, {"n_bytes", text.size()}});
    }
    if (p == "/detokenize") {
      method("POST");
      const json body = parse_body(req.body);
      const json* t = field(body, "tokens");
      if (!t || !t->is_array()) bad_request("'tokens' must be an array of token ids");
      std::vector<TokenId> ids;
      for (size_t i = 0; i < t->size(); ++i) {
        const json& v = (*t)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tokenizer().vocab_size())
          bad_request(fmt::format("'tokens'[{}] is not a token id of this vocabulary (0..{})", i,
                                  tokenizer().vocab_size() - 1));
        ids.push_back(static_cast<TokenId>(v.get<int64_t>()));
      }
      return send_json(200, {{"content", tokenizer().decode(ids)}});
    }
    if (p == "/props") {
      method("GET");
      if (!engine_) return send_json(200, {{"model", json()}, {"run", options_.run_dir}});
      const auto& o = engine().options();
      const ModelConfig& mc = engine().model().config();
      return send_json(200, {{"model", options_.model_id},
                             {"run", options_.run_dir.empty() ? json() : json(options_.run_dir)},
                             {"config", mc.to_json()},
                             {"vocab_size", tokenizer().vocab_size()},
                             {"parallel", o.parallel},
                             {"context", o.context},
                             {"prefill_chunk", o.prefill_chunk},
                             {"queue", o.max_queue},
                             {"kv_cache_bytes", engine().cache_bytes()},
                             {"chat_template", options_.has_chat_template ? json(options_.chat.message) : json()},
                             {"model_chat_template", options_.model_chat_template}});
    }
    if (p == "/widgets/model_attention") {
      method("POST");
      return send_json(200, model_attention(parse_body(req.body)));
    }
    if (p.rfind("/widgets/", 0) == 0) {
      method("POST");
      return send_json(200, widget(p.substr(9), parse_body(req.body)));
    }
    if (p == "/run") {
      method("GET");
      return send_json(200, run_curves());
    }
    if (p == "/metrics") {
      method("GET");
      return (void)res.send(200, "text/plain; version=0.0.4", metrics_text());
    }
    throw ApiError{404, fmt::format("no route {} {}", req.method, p), "not_found_error"};
  } catch (const ApiError& e) {
    if (!res.sent()) send_json(e.status, error_body(e));
  } catch (const Error& e) {
    // The engine's checks of a job (context, vocabulary, n) are the client's errors; a broken
    // invariant is the server's.
    const int status = e.kind() == ErrorKind::Internal ? 500 : 400;
    if (!res.sent())
      send_json(status, error_body({status, e.what(), status == 500 ? "server_error" : "invalid_request_error"}));
  } catch (const json::exception& e) {  // a value of an unexpected type deep in a field
    if (!res.sent())
      send_json(400, error_body({400, fmt::format("malformed request: {}", e.what()), "invalid_request_error"}));
  }
}

void Api::completions(const HttpRequest& req, HttpResponse& res, bool chat) {
  const json body = parse_body(req.body);
  if (const json* m = field(body, "model")) {
    if (!m->is_string()) bad_request(fmt::format("'model' must be a string, got {}", type_name(*m)));
    if (m->get<std::string>() != options_.model_id)
      throw ApiError{404,
                     fmt::format("model '{}' is not served here; this server serves '{}'", m->get<std::string>(),
                                 options_.model_id),
                     "not_found_error"};
  }
  // The prompt.
  CompletionJob job;
  std::vector<std::string> stops;
  if (chat) {
    if (!options_.has_chat_template)
      bad_request(
          options_.model_chat_template.empty()
              ? "this model has no chat template: start the server with --chat-template plain or --chat-template "
                "FILE (docs/serve.md), or use /v1/completions"
              : "this model's chat template is Jinja, which tformer does not interpret (GET /props shows it): start "
                "the server with --chat-template FILE in tformer's format (docs/serve.md) or --chat-template plain, "
                "or use /v1/completions");
    const json* msgs = field(body, "messages");
    if (!msgs || !msgs->is_array() || msgs->empty()) bad_request("'messages' must be a non-empty array");
    std::vector<std::pair<std::string, std::string>> conv;
    for (size_t i = 0; i < msgs->size(); ++i) {
      const json& m = (*msgs)[i];
      if (!m.is_object()) bad_request(fmt::format("'messages'[{}] must be an object", i));
      const json* role = field(m, "role");
      const json* content = field(m, "content");
      if (!role || !role->is_string()) bad_request(fmt::format("'messages'[{}].role must be a string", i));
      std::string text;
      if (content && content->is_string()) {
        text = content->get<std::string>();
      } else if (content && content->is_array()) {  // [{"type": "text", "text": ...}, ...]
        for (const json& part : *content) {
          const auto type = part.is_object() ? part.find("type") : part.end();
          if (!part.is_object() || type == part.end() || *type != "text" || !part.contains("text") ||
              !part["text"].is_string())
            bad_request(fmt::format("'messages'[{}].content: only text parts are supported", i));
          text += part["text"].get<std::string>();
        }
      } else if (content) {
        bad_request(fmt::format("'messages'[{}].content must be a string or an array of text parts", i));
      }
      conv.emplace_back(role->get<std::string>(), std::move(text));
    }
    job.prompt = encode_for_model(tokenizer(), options_.chat.render(conv));
    stops = options_.chat.stop;
  } else {
    const json* pr = field(body, "prompt");
    if (!pr) bad_request("'prompt' is required (a string or an array of token ids)");
    const json* one = pr;
    if (pr->is_array() && pr->size() == 1 && (*pr)[0].is_string()) one = &(*pr)[0];
    if (one->is_string()) {
      job.prompt = encode_for_model(tokenizer(), one->get<std::string>());
    } else if (pr->is_array()) {
      for (size_t i = 0; i < pr->size(); ++i) {
        const json& v = (*pr)[i];
        if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= tokenizer().vocab_size())
          bad_request(fmt::format("'prompt'[{}] is not a token id of this vocabulary (0..{})", i,
                                  tokenizer().vocab_size() - 1));
        job.prompt.push_back(static_cast<TokenId>(v.get<int64_t>()));
      }
    } else {
      bad_request(fmt::format("'prompt' must be a string or an array of token ids, got {}", type_name(*pr)));
    }
    if (job.prompt.empty()) {
      if (auto eot = tokenizer().eot_id())
        job.prompt.push_back(*eot);
      else
        bad_request("the prompt is empty and the tokenizer has no end-of-text token to start from");
    }
  }
  const int64_t P = static_cast<int64_t>(job.prompt.size()), ctx = engine().context();
  if (P > ctx) bad_request(fmt::format("the prompt has {} tokens; the context is {} tokens per sequence", P, ctx));
  const char* max_name = chat && field(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  job.max_tokens = int_field(body, max_name, ctx - P, 0, INT32_MAX);
  if (P + job.max_tokens > ctx)
    bad_request(fmt::format("the prompt has {} tokens and {} is {}: {} is more than the context of {} tokens", P,
                            max_name, job.max_tokens, P + job.max_tokens, ctx));
  job.sampler.temperature = number_field(body, "temperature", 1.0, 0.0, 1e6);
  job.sampler.top_p = number_field(body, "top_p", 1.0, 0.0, 1.0, true);
  job.sampler.top_k = int_field(body, "top_k", 0, 0, INT32_MAX);
  const bool seeded = field(body, "seed") != nullptr;
  job.sampler.seed = seeded ? static_cast<uint64_t>(int_field(body, "seed", 0, INT64_MIN, INT64_MAX))
                            : static_cast<uint64_t>(std::random_device{}()) * 0x9E3779B97F4A7C15ull;
  if (const json* st = field(body, "stop")) {
    auto add = [&](const json& s, size_t i) {
      if (!s.is_string()) bad_request(fmt::format("'stop'[{}] must be a string", i));
      if (s.get<std::string>().empty()) bad_request("a stop string may not be empty");
      stops.push_back(s.get<std::string>());
    };
    if (st->is_string()) {
      add(*st, 0);
    } else if (st->is_array()) {
      if (static_cast<int64_t>(st->size()) > options_.max_stops)
        bad_request(fmt::format("'stop' has {} strings; at most {}", st->size(), options_.max_stops));
      for (size_t i = 0; i < st->size(); ++i) add((*st)[i], i);
    } else {
      bad_request(fmt::format("'stop' must be a string or an array of strings, got {}", type_name(*st)));
    }
  }
  job.stop = stops;
  if (chat) {
    if (bool_field(body, "logprobs", false))
      job.top_logprobs = static_cast<int>(int_field(body, "top_logprobs", 0, 0, 20));
  } else {
    job.top_logprobs = static_cast<int>(int_field(body, "logprobs", -1, 0, 20));
  }
  const int64_t n = int_field(body, "n", 1, 1, options_.max_n);
  const bool stream = bool_field(body, "stream", false);
  bool include_usage = false;
  if (const json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad_request("'stream_options' must be an object");
    include_usage = bool_field(*so, "include_usage", false);
  }

  // n samples: seeds seed, seed + 1, ... (independent samples of the prompt, sharing its prefill).
  std::vector<std::shared_ptr<Stream>> streams = engine().submit_samples(job, n);
  if (streams.empty()) {
    if (engine().stopping()) throw ApiError{503, "the server is shutting down", "server_shutting_down"};
    throw ApiError{503, "the server is busy: the request queue is full; try again later", "server_busy"};
  }
  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++);
  const int64_t created = now_unix();
  const char* object = chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  auto usage = [&] {
    int64_t out = 0;
    for (auto& s : streams) out += s->completion_tokens;
    return json{{"prompt_tokens", P}, {"completion_tokens", out}, {"total_tokens", P + out}};
  };
  // Logprobs in the shape of each endpoint.
  auto logprobs_json = [&](const std::vector<TokenLogprob>& lps, int64_t offset) -> json {
    if (chat) {
      json content = json::array();
      for (const auto& t : lps) {
        json top = json::array();
        for (const auto& [tok, lp] : t.top) top.push_back({{"token", tok}, {"logprob", lp}});
        std::vector<int> bytes(t.token.begin(), t.token.end());
        for (int& b : bytes) b &= 0xFF;
        content.push_back({{"token", t.token}, {"logprob", t.logprob}, {"bytes", bytes}, {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    json tokens = json::array(), lp = json::array(), top = json::array(), off = json::array();
    for (const auto& t : lps) {
      tokens.push_back(t.token);
      lp.push_back(t.logprob);
      json m = json::object();
      for (const auto& [tok, l] : t.top) m[tok] = l;
      top.push_back(m);
      off.push_back(offset);
      offset += static_cast<int64_t>(t.token.size());
    }
    return {{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", off}};
  };
  // Timings as llama-server reports them, measured here: from the request's arrival to its first
  // token, and the tokens after the first over the time they took (the page's tokens/s).
  std::vector<double> done_s(static_cast<size_t>(n), 0);
  auto timings = [&] {
    double first = INFINITY, last = 0;
    int64_t out = 0;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (streams[i]->first_token_seconds >= 0) first = std::min(first, streams[i]->first_token_seconds.load());
      last = std::max(last, done_s[i]);
      out += streams[i]->completion_tokens;
    }
    const bool any = std::isfinite(first);
    const double span = any ? last - first : 0;
    return json{{"prompt_n", P},
                {"predicted_n", out},
                {"time_to_first_token_ms", any ? json(first * 1e3) : json()},
                {"predicted_ms", any ? json(span * 1e3) : json()},
                {"predicted_per_second", any && span > 0 && out > n ? json((out - n) / span) : json()}};
  };
  auto cancel_all = [&] {
    for (auto& s : streams) s->cancel();
  };

  std::vector<std::string> texts(static_cast<size_t>(n));
  std::vector<std::vector<TokenLogprob>> lps(static_cast<size_t>(n));
  std::vector<std::string> reasons(static_cast<size_t>(n));
  std::vector<int64_t> offsets(static_cast<size_t>(n), 0);
  std::string error;
  size_t done = 0;
  if (stream && !res.start_stream(200, "text/event-stream")) return cancel_all();
  auto sse = [&](const json& j) { return res.write("data: " + dump(j) + "\n\n"); };
  auto chunk = [&](int64_t i, const std::string& text, const std::vector<TokenLogprob>* lp, const json& finish) {
    json c = {{"index", i}, {"finish_reason", finish}};
    if (chat) {
      c["delta"] = finish.is_null() ? json{{"content", text}} : json::object();
      c["logprobs"] = lp && !lp->empty() ? logprobs_json(*lp, 0) : json();
    } else {
      c["text"] = text;
      c["logprobs"] = lp && job.top_logprobs >= 0 ? logprobs_json(*lp, offsets[static_cast<size_t>(i)]) : json();
    }
    return sse({{"id", id},
                {"object", object},
                {"created", created},
                {"model", options_.model_id},
                {"choices", json::array({c})}});
  };
  if (stream && chat) {
    for (int64_t i = 0; i < n; ++i) {
      json c = {{"index", i},
                {"delta", {{"role", "assistant"}, {"content", ""}}},
                {"logprobs", json()},
                {"finish_reason", json()}};
      if (!sse({{"id", id},
                {"object", object},
                {"created", created},
                {"model", options_.model_id},
                {"choices", json::array({c})}}))
        return cancel_all();
    }
  }
  std::vector<bool> finished(static_cast<size_t>(n), false);
  while (done < streams.size()) {
    bool any = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (finished[i]) continue;
      std::vector<Stream::Event> events;
      if (!streams[i]->wait(events, any ? 0 : 50)) continue;
      any = true;
      for (auto& e : events) {
        if (e.kind == Stream::Event::Kind::Text) {
          if (stream) {
            if (!chunk(static_cast<int64_t>(i), e.text, &e.tokens, json())) return cancel_all();
            offsets[i] += static_cast<int64_t>(e.text.size());
          } else {
            texts[i] += e.text;
            for (auto& t : e.tokens) lps[i].push_back(std::move(t));
          }
        } else {
          finished[i] = true;
          ++done;
          done_s[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - streams[i]->submitted).count();
          if (e.kind == Stream::Event::Kind::Error) {
            if (error.empty()) error = e.finish_reason;
          } else {
            reasons[i] = e.finish_reason;
            if (stream && !chunk(static_cast<int64_t>(i), "", nullptr, e.finish_reason)) return cancel_all();
          }
        }
      }
    }
    if (!error.empty()) {
      cancel_all();
      break;
    }
    if (res.client_gone()) return cancel_all();
  }
  // A shutdown's error is a 503 (server_shutting_down), streamed or not; any other a 500.
  const bool shutting_down = error.rfind("the server is shutting down", 0) == 0;
  const ApiError failure{shutting_down ? 503 : 500, error, shutting_down ? "server_shutting_down" : "server_error"};
  if (stream) {
    if (!error.empty()) {
      sse(error_body(failure));
    } else if (include_usage) {
      sse({{"id", id},
           {"object", object},
           {"created", created},
           {"model", options_.model_id},
           {"choices", json::array()},
           {"usage", usage()},
           {"timings", timings()}});
    }
    res.write("data: [DONE]\n\n");
    res.end_stream();
    return;
  }
  if (!error.empty()) throw ApiError(failure);
  json choices = json::array();
  for (int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<size_t>(i);
    json c = {{"index", i}, {"finish_reason", reasons[k]}};
    if (chat) {
      c["message"] = {{"role", "assistant"}, {"content", texts[k]}};
      c["logprobs"] = job.top_logprobs >= 0 ? logprobs_json(lps[k], 0) : json();
    } else {
      c["text"] = texts[k];
      c["logprobs"] = job.top_logprobs >= 0 ? logprobs_json(lps[k], 0) : json();
    }
    choices.push_back(c);
  }
  res.send(200, "application/json",
           dump({{"id", id},
                 {"object", object},
                 {"created", created},
                 {"model", options_.model_id},
                 {"choices", choices},
                 {"usage", usage()},
                 {"timings", timings()}}));
}

json Api::model_attention(const json& body) {
  constexpr int64_t kMaxTokens = 64;
  const json* pr = field(body, "prompt");
  if (!pr || !pr->is_string()) bad_request("'prompt' must be a string");
  const std::vector<TokenId> ids = encode_for_model(tokenizer(), pr->get<std::string>());
  const int64_t n = static_cast<int64_t>(ids.size());
  const ModelConfig& c = engine().model().config();
  if (n == 0) bad_request("the prompt has no tokens");
  if (n > std::min(kMaxTokens, c.context_length))
    bad_request(fmt::format("the prompt has {} tokens; the attention maps take at most {}", n,
                            std::min(kMaxTokens, c.context_length)));
  const int64_t layer = int_field(body, "layer", 0, 0, c.n_layers - 1);
  std::vector<float> probs(static_cast<size_t>(c.n_layers * c.n_heads * n * n));
  try {
    engine().run_on_loop([&](Model& m) { m.attention_probabilities(probs.data(), ids.data(), n); });
  } catch (const Error&) {
    if (engine().stopping()) throw ApiError{503, "the server is shutting down", "server_shutting_down"};
    throw;
  }
  json tokens = json::array(), heads = json::array();
  for (TokenId id : ids)
    tokens.push_back({{"id", id}, {"piece", tokenizer().decode(std::span<const TokenId>(&id, 1))}});
  const int64_t group = c.n_heads / c.n_kv_heads;
  for (int64_t h = 0; h < c.n_heads; ++h) {
    json rows = json::array();
    for (int64_t t = 0; t < n; ++t) {
      const float* r = probs.data() + ((layer * c.n_heads + h) * n + t) * n;
      rows.push_back(std::vector<float>(r, r + n));
    }
    heads.push_back({{"head", h}, {"kv_head", h / group}, {"weights", std::move(rows)}});
  }
  return {{"tokens", tokens}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads},
          {"layer", layer},   {"kernel", "reference"},  {"heads", heads}};
}

json Api::run_curves() const {
  if (options_.run_dir.empty())
    throw ApiError{404, "no training run: start tformer serve with --run DIR (a folder tformer train writes)",
                   "not_found_error"};
  const std::string path = (std::filesystem::path(options_.run_dir) / "metrics.jsonl").string();
  json out = {{"dir", options_.run_dir}, {"metrics", path}};
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    out["waiting"] = fmt::format("{} does not exist yet: the curves appear when tformer train writes it", path);
    out["train"] = out["val"] = json::array();
    return out;
  }
  // Only the run folder's own file: not a link (to anything, inside the folder or out of it), not
  // a folder or a device, and of a size a page reads. What is wrong goes to the server's log; the
  // client learns that the file was refused, never a byte of what it holds.
  const auto st = std::filesystem::symlink_status(path, ec);
  if (ec || st.type() != std::filesystem::file_type::regular)
    throw ApiError{500,
                   fmt::format("{} is not a regular file of the run folder (a link or a folder is not followed)", path),
                   "server_error"};
  constexpr uintmax_t kMaxMetricsBytes = uintmax_t{256} << 20;
  if (const uintmax_t bytes = std::filesystem::file_size(path, ec); ec || bytes > kMaxMetricsBytes)
    throw ApiError{500, fmt::format("{} is {} bytes, past the {} a page reads", path, bytes, kMaxMetricsBytes),
                   "server_error"};
  // The trainer appends a record at a time: a last line without its newline is still being written.
  std::string text = read_file(path);
  text.resize(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  LossCurves curves;
  try {
    curves = parse_loss_curves(text, path);
  } catch (const Error& e) {
    fmt::print(stderr, "tformer serve: GET /run: {}\n", e.what());
    throw ApiError{500,
                   fmt::format("{} is not a metrics file tformer train writes (the server's log says where)", path),
                   "server_error"};
  }
  json train = json::array(), val = json::array();
  for (const auto& [x, y] : curves.train) train.push_back({x, y});
  for (const auto& [x, y] : curves.val) val.push_back({x, y});
  out["train"] = train;
  out["val"] = val;
  if (curves.train.empty() && curves.val.empty()) return out;
  // The axes as `tformer plot` draws them: the steps, and the losses with 5% to spare.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double x_lo = kInf, x_hi = -kInf, y_lo = kInf, y_hi = -kInf;
  for (const auto* series : {&curves.train, &curves.val})
    for (const auto& [x, y] : *series) {
      x_lo = std::min(x_lo, x);
      x_hi = std::max(x_hi, x);
      y_lo = std::min(y_lo, y);
      y_hi = std::max(y_hi, y);
    }
  if (x_hi == x_lo) x_hi = x_lo + 1;
  const double pad = y_hi > y_lo ? 0.05 * (y_hi - y_lo) : std::max(0.05, 0.05 * std::abs(y_hi));
  y_lo -= pad;
  y_hi += pad;
  auto axis = [](const PlotAxis& a) {
    return json{{"lo", a.lo}, {"hi", a.hi}, {"ticks", a.ticks}, {"labels", a.labels}};
  };
  out["x_axis"] = axis(plot_axis(x_lo, x_hi, 6, true));
  out["y_axis"] = axis(plot_axis(y_lo, y_hi, 5, false));
  // The last record's other numbers (learning rate, speed), as the trainer wrote them.
  const size_t last = text.rfind('\n', text.size() >= 2 ? text.size() - 2 : 0);
  try {
    out["last"] = json::parse(text.substr(last == std::string::npos ? 0 : last + 1));
  } catch (const json::exception&) {
    out["last"] = json();
  }
  return out;
}

std::string Api::metrics_text() const {
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} {2}\n{0} {3}\n", name, help, type, v);
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    out += fmt::format("# HELP {0} {1}\n# TYPE {0} histogram\n", name, help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cum += h.counts[i];
      out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, h.bounds[i], cum);
    }
    out += fmt::format("{0}_bucket{{le=\"+Inf\"}} {1}\n{0}_sum {2}\n{0}_count {3}\n", name, h.count, h.sum, h.count);
  };
  metric("tformer_http_requests_total", "counter", "HTTP requests received.", static_cast<double>(http_requests_));
  if (!engine_) return out;  // the page alone (--run without --model): no engine to count
  const EngineMetrics m = engine_->metrics();
  metric("tformer_requests_total", "counter", "Completion sequences accepted (n counts each sample).",
         static_cast<double>(m.requests));
  metric("tformer_requests_finished_total", "counter", "Sequences that ended with their tokens.",
         static_cast<double>(m.finished));
  metric("tformer_requests_cancelled_total", "counter", "Sequences whose client went away.",
         static_cast<double>(m.cancelled));
  metric("tformer_requests_rejected_total", "counter", "Sequences refused because the queue was full.",
         static_cast<double>(m.rejected));
  metric("tformer_requests_failed_total", "counter", "Sequences that ended with an error.",
         static_cast<double>(m.failed));
  metric("tformer_prompt_tokens_total", "counter", "Prompt tokens accepted.", static_cast<double>(m.prompt_tokens));
  metric("tformer_completion_tokens_total", "counter", "Tokens generated.", static_cast<double>(m.completion_tokens));
  metric("tformer_queue_length", "gauge", "Sequences waiting for a slot.", static_cast<double>(m.queued));
  metric("tformer_active_sequences", "gauge", "Sequences in the running batch.", static_cast<double>(m.active));
  metric("tformer_decode_batch", "gauge", "Sequences in the last decode step.", static_cast<double>(m.decode_batch));
  metric("tformer_decode_batch_max", "gauge", "The most sequences one decode step has held.",
         static_cast<double>(m.max_decode_batch));
  metric("tformer_prefill_batch", "gauge", "Sequences in the last prefill step.", static_cast<double>(m.prefill_batch));
  metric("tformer_prefill_batch_max", "gauge", "The most sequences one prefill step has held.",
         static_cast<double>(m.max_prefill_batch));
  metric("tformer_steps_total", "counter", "Steps of the inference loop.", static_cast<double>(m.steps));
  metric("tformer_step_seconds_total", "counter", "Time in the inference loop's steps.", m.step_seconds);
  metric("tformer_sample_seconds_total", "counter",
         "Time in the steps' draws of the next tokens and the streaming of their text.", m.sample_seconds);
  metric("tformer_decode_steps_total", "counter", "Decode forwards.", static_cast<double>(m.decode_steps));
  metric("tformer_decode_rows_total", "counter", "Sequences summed over the decode forwards.",
         static_cast<double>(m.decode_rows));
  metric("tformer_decode_seconds_total", "counter", "Time in the decode forwards.", m.decode_seconds);
  metric("tformer_prefill_steps_total", "counter", "Prefill forwards.", static_cast<double>(m.prefill_steps));
  metric("tformer_prefill_rows_total", "counter", "Prompt tokens summed over the prefill forwards.",
         static_cast<double>(m.prefill_rows));
  metric("tformer_prefill_seconds_total", "counter", "Time in the prefill forwards.", m.prefill_seconds);
  histogram("tformer_time_to_first_token_seconds", "From a request's arrival to its first token.", m.ttft);
  histogram("tformer_token_latency_seconds", "Between consecutive tokens of a sequence.", m.token_latency);
  return out;
}

}  // namespace tformer::serve
