// tformer info: what this build runs on (threads, BLAS build), for bug reports and logs.
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/threads.h"

namespace tformer::cli {

void register_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "Print the build's threading and BLAS configuration");
  cmd->callback([] {
    const char* models[] = {"sequential", "pthreads", "OpenMP"};
    const int model = blas_parallel_model();
    fmt::print("threads: {}\nblas: {}\nblas threading: {}\n", num_threads(), blas_config(),
               model >= 0 && model <= 2 ? models[model] : "unknown");
  });
}

}  // namespace tformer::cli
