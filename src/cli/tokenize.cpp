#include "cli/commands.h"

namespace tformer::cli {

void register_tokenize(CLI::App&) {}

}  // namespace tformer::cli
