#include "core/error.h"

namespace tformer::detail {

void check_failed(const char* file, int line, const char* condition, const std::string& message) {
  throw Error(fmt::format("{} ({}:{}: check failed: {})", message, file, line, condition));
}

}  // namespace tformer::detail
