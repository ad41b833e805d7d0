#include "cli/commands.h"

namespace tformer::cli {

void register_all(CLI::App& app) {
  register_info(app);
}

}  // namespace tformer::cli
