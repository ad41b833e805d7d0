#include "cli/commands.h"

namespace tformer::cli {

void register_bpe(CLI::App&) {}

}  // namespace tformer::cli
