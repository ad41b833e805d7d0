#include "tokenizer/gpt2_pretokenize.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <string>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace tformer {
namespace {

// Unicode White_Space (the meaning of \s in Rust's regex crate, hence in tiktoken).
#define TF_WS \
  "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
constexpr const char* kPattern =
    "'(?:[sdmt]|ll|ve|re)"
    "| ?\\p{L}+"
    "| ?\\p{N}+"
    "| ?[^" TF_WS
    "\\p{L}\\p{N}]+"
    "|[" TF_WS "]+(?![^" TF_WS
    "])"
    "|[" TF_WS "]+";
// tiktoken's cl100k_base and o200k_base patterns (their pat_str, as tiktoken 1.0.22's encoders
// hold them), with \s and \S spelled out the same way.
constexpr const char* kCl100kPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
    "|\\p{N}{1,3}"
    "| ?[^" TF_WS
    "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" TF_WS
    "]*[\\r\\n]+"
    "|[" TF_WS "]+(?![^" TF_WS
    "])"
    "|[" TF_WS "]+";
constexpr const char* kO200kPattern =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    "|\\p{N}{1,3}"
    "| ?[^" TF_WS
    "\\p{L}\\p{N}]+[\\r\\n/]*"
    "|[" TF_WS
    "]*[\\r\\n]+"
    "|[" TF_WS "]+(?![^" TF_WS
    "])"
    "|[" TF_WS "]+";
#undef TF_WS

pcre2_code* as_code(void* p) { return static_cast<pcre2_code*>(p); }

// Per-thread matching state: match data (only the whole match is needed) and a JIT stack that a
// very long run of one character class cannot exhaust.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  MatchState() {
    data = pcre2_match_data_create(1, nullptr);
    context = pcre2_match_context_create(nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    if (!data || !context || !stack)
      fail(ErrorKind::Internal, "", "gpt2 pre-tokenizer: out of memory creating PCRE2 match state");
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Gpt2PreTokenizer::Gpt2PreTokenizer(const char* pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
  if (!code)
    fail(ErrorKind::Internal, "", "gpt2 pre-tokenizer: PCRE2 cannot compile the pattern at offset {}: {}", offset,
         pcre2_message(error));
  code_ = code;
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Gpt2PreTokenizer::~Gpt2PreTokenizer() { pcre2_code_free(as_code(code_)); }

const Gpt2PreTokenizer& Gpt2PreTokenizer::instance() {
  static const Gpt2PreTokenizer pre(kPattern);
  return pre;
}

const Gpt2PreTokenizer& Gpt2PreTokenizer::cl100k() {
  static const Gpt2PreTokenizer pre(kCl100kPattern);
  return pre;
}

const Gpt2PreTokenizer& Gpt2PreTokenizer::o200k() {
  static const Gpt2PreTokenizer pre(kO200kPattern);
  return pre;
}

size_t Gpt2PreTokenizer::valid_run_end(std::string_view text, size_t i) {
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const int len = utf8_char_length(text.substr(i));
    if (len <= 0) break;
    i += static_cast<size_t>(len);
  }
  return i;
}

size_t Gpt2PreTokenizer::invalid_run_end(std::string_view text, size_t i) {
  while (i < text.size() && static_cast<unsigned char>(text[i]) >= 0x80 && utf8_char_length(text.substr(i)) <= 0) ++i;
  return i;
}

size_t Gpt2PreTokenizer::match_end(std::string_view valid, size_t at) const {
  MatchState& state = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(valid.data());
  // The pattern is anchored and every character is a letter, a number, white space or something
  // else, so a non-empty match always starts at `at`.
  const int rc =
      jit_ ? pcre2_jit_match(as_code(code_), subject, valid.size(), at, 0, state.data, state.context)
           : pcre2_match(as_code(code_), subject, valid.size(), at, PCRE2_NO_UTF_CHECK, state.data, state.context);
  if (rc < 0)
    fail(ErrorKind::Internal, fmt::format("byte {}", at), "gpt2 pre-tokenizer: PCRE2 match failed at byte {}: {}", at,
         pcre2_message(rc));
  const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
  TF_CHECK(ov[0] == at && ov[1] > at, "gpt2 pre-tokenizer: match [{}, {}) does not start at {}", ov[0], ov[1], at);
  return ov[1];
}

namespace {

constexpr const char* kDefaultPatterns[3] = {"[\\p{P}$+<=>^~|]+", "\\p{N}+", "[0-9]{3}"};

void* compile_or_fail(const char* pattern, bool& jit) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &error, &offset, nullptr);
  if (!code)
    fail(ErrorKind::Internal, "", "default pre-tokenizer: PCRE2 cannot compile '{}' at offset {}: {}", pattern, offset,
         pcre2_message(error));
  jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  return code;
}

}  // namespace

LlamaCppDefaultPreTokenizer::LlamaCppDefaultPreTokenizer() {
  for (int i = 0; i < 3; ++i) code_[i] = compile_or_fail(kDefaultPatterns[i], jit_[i]);
}

LlamaCppDefaultPreTokenizer::~LlamaCppDefaultPreTokenizer() {
  for (void* c : code_) pcre2_code_free(as_code(c));
}

const LlamaCppDefaultPreTokenizer& LlamaCppDefaultPreTokenizer::instance() {
  static const LlamaCppDefaultPreTokenizer pre;
  return pre;
}

void LlamaCppDefaultPreTokenizer::cut(int which, std::string_view s,
                                      const std::function<void(std::string_view)>& f) const {
  MatchState& state = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t at = 0;
  while (at < s.size()) {
    const int rc =
        jit_[which]
            ? pcre2_jit_match(as_code(code_[which]), subject, s.size(), at, 0, state.data, state.context)
            : pcre2_match(as_code(code_[which]), subject, s.size(), at, PCRE2_NO_UTF_CHECK, state.data, state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0)
      fail(ErrorKind::Internal, fmt::format("byte {}", at), "default pre-tokenizer: PCRE2 match failed at byte {}: {}",
           at, pcre2_message(rc));
    // Copied out: f may cut again, reusing this thread's match data.
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.data);
    const size_t begin = ov[0], end = ov[1];
    TF_CHECK(begin >= at && end > begin, "default pre-tokenizer: empty or backward match [{}, {})", begin, end);
    if (begin > at) f(s.substr(at, begin - at));
    f(s.substr(begin, end - begin));
    at = end;
  }
  if (at < s.size()) f(s.substr(at));
}

void LlamaCppDefaultPreTokenizer::for_each_piece(std::string_view text,
                                                 const std::function<void(std::string_view)>& f) const {
  const Gpt2PreTokenizer& gpt2 = Gpt2PreTokenizer::instance();
  const std::function<void(std::string_view)> digits = [&](std::string_view s) { cut(2, s, f); };
  const std::function<void(std::string_view)> numbers = [&](std::string_view s) { cut(1, s, digits); };
  const std::function<void(std::string_view)> words = [&](std::string_view s) {
    gpt2.for_each_valid_piece(s, numbers);
  };
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = Gpt2PreTokenizer::valid_run_end(text, i);
    if (j > i) cut(0, text.substr(i, j - i), words);
    const size_t k = Gpt2PreTokenizer::invalid_run_end(text, j);
    if (k > j) f(text.substr(j, k - j));
    i = k;
  }
}

}  // namespace tformer
