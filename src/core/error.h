// One error type for the whole library. Expected failures (bad files, bad flags, bad shapes passed
// by a caller) throw tformer::Error with a message that says what was wrong and where; only the CLI
// turns them into an exit status. TF_CHECK states an invariant and stays on in release builds.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace tformer {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error with a formatted message: fail("{}: line {}: expected two symbols", path, line).
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);
}  // namespace detail

}  // namespace tformer

// TF_CHECK(cond, "format {}", args...): throws tformer::Error naming file, line and the condition.
#define TF_CHECK(cond, ...)                                                                   \
  do {                                                                                        \
    if (!(cond)) [[unlikely]] {                                                               \
      ::tformer::detail::check_failed(__FILE__, __LINE__, #cond, ::fmt::format(__VA_ARGS__)); \
    }                                                                                         \
  } while (0)
