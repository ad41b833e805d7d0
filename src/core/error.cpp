#include "core/error.h"

namespace tformer {

std::string_view to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::BadFile:
      return "bad file";
    case ErrorKind::BadInput:
      return "bad input";
    case ErrorKind::BadConfig:
      return "bad config";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::Internal:
      return "internal";
  }
  return "unknown";
}

namespace detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(ErrorKind::Internal, std::string(),
              fmt::format("{} ({}:{}: check failed: {})", message, file, line, condition));
}

}  // namespace detail
}  // namespace tformer
