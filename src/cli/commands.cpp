#include "cli/commands.h"

namespace tformer::cli {

void register_all(CLI::App& app) {
  register_info(app);
  register_bpe(app);
  register_tokenize(app);
  register_model_commands(app);
  register_generate(app);
  register_plot(app);
  register_train(app);
  register_convert(app);
  register_serve(app);
}

}  // namespace tformer::cli
