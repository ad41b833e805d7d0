// The tformer command line: one subcommand per file in src/cli/, each registered here.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"
#include "train/comm.h"

int main(int argc, char** argv) {
  // A write beyond a file-size limit (ulimit -f, prlimit --fsize) then fails with EFBIG, which
  // the writers report by name and clean up after (core/file_io.h), instead of the signal killing
  // the process half-way through a file.
  std::signal(SIGXFSZ, SIG_IGN);
  // The set-up and CLI11's own reporting are inside the try too: an exception from them prints a
  // message and a non-zero status instead of leaving main, which would abort (std::terminate).
  try {
    CLI::App app{"tformer: a transformer language-model engine written from scratch"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "tformer 0.1.0");
    tformer::cli::register_all(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    tformer::Comm::world().finalize();  // MPI's end, when mpirun started this process
  } catch (const tformer::Error& e) {
    // Every kind of Error prints its message and exits 1 (scripts rely on the status).
    fmt::print(stderr, "tformer: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "tformer: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
