// One error type for the whole library. Expected failures throw tformer::Error, which carries a
// kind (what sort of failure: a bad file, bad input from a caller, a bad model config, something
// valid but not supported, or a broken invariant), the field it is about (the file path, config
// key, flag, tensor name, position or value the message names) and the full message, which says
// what was wrong and where. Only the CLI turns errors into an exit status. TF_CHECK states an
// invariant, stays on in release builds and throws an Internal error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tformer {

enum class ErrorKind {
  BadFile,      // a file that cannot be opened, read, written or parsed, or holds the wrong contents
  BadInput,     // a bad command-line value or flag, or bad data passed by a caller
  BadConfig,    // a model config that is not valid (an unknown key, a value out of range)
  Unsupported,  // valid, but not something tformer does (an unknown tokenizer kind, a dtype it does not read)
  Internal,     // a broken invariant (TF_CHECK): a bug in tformer, not in what it was given
};

// "bad file", "bad input", "bad config", "unsupported", "internal".
std::string_view to_string(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  // field: the most specific thing the message names (a path, a config key, a flag, a tensor name,
  // a position, a value); empty only for Internal errors. message: the full text, what() returns it.
  Error(ErrorKind kind, std::string field, const std::string& message)
      : std::runtime_error(message), kind_(kind), field_(std::move(field)) {}

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& field() const noexcept { return field_; }

  // The same kind and field with the message "<context>: <message>", for a caller that knows
  // more about where the failure happened (the file a tokenizer's JSON came from).
  Error with_context(std::string_view context) const {
    return Error(kind_, field_, fmt::format("{}: {}", context, what()));
  }

 private:
  ErrorKind kind_;
  std::string field_;
};

// Throws Error(kind, field, the formatted message):
//   fail(ErrorKind::BadConfig, "vocab_size", "model config: \"vocab_size\" must be positive, got {}", v).
template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, std::string_view field, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(kind, std::string(field), fmt::format(format, std::forward<Args>(args)...));
}

// The same, one function per kind; the first argument is the field.
//   fail_file(path, "{}: line {}: expected two symbols", path, line)  a file's path (or the tensor or
//                                                                      key inside it the message names)
//   fail_input("--max-new-tokens", "--max-new-tokens must be positive, got {}", n)
//   fail_config("n_heads", "model config: \"n_heads\" ...")          a model config's JSON key
//   fail_unsupported("kind", "tokenizer JSON: unknown kind '{}'", k)  what is not supported
template <typename... Args>
[[noreturn]] void fail_file(std::string_view path, fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorKind::BadFile, path, format, std::forward<Args>(args)...);
}
template <typename... Args>
[[noreturn]] void fail_input(std::string_view field, fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorKind::BadInput, field, format, std::forward<Args>(args)...);
}
template <typename... Args>
[[noreturn]] void fail_config(std::string_view key, fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorKind::BadConfig, key, format, std::forward<Args>(args)...);
}
template <typename... Args>
[[noreturn]] void fail_unsupported(std::string_view what, fmt::format_string<Args...> format, Args&&... args) {
  fail(ErrorKind::Unsupported, what, format, std::forward<Args>(args)...);
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace tformer

// TF_CHECK(cond, "format {}", args...): throws an Internal tformer::Error (empty field) whose
// message is the formatted text followed by the file, line and the condition.
#define TF_CHECK(cond, ...)                                                                   \
  do {                                                                                        \
    if (!(cond)) [[unlikely]] {                                                               \
      ::tformer::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    }                                                                                         \
  } while (0)
