// What the libFuzzer targets of fuzz/ share (docs/fuzzing.md). Each target is one function,
// LLVMFuzzerTestOneInput, built twice: with clang's libFuzzer, AddressSanitizer and
// UndefinedBehaviorSanitizer for `make fuzz`, and with fuzz/replay_main.cpp into a plain program
// that `make test` runs on the committed corpus and regression inputs.
//
// The readers under test take a path, so the input is written to a file of this process first.
// A tformer::Error of any kind but Internal is the right answer to bad bytes; Internal (a broken
// invariant) and any other exception are bugs, and abort so that the fuzzer keeps the input.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace tformer::fuzz {

// Removes `path` (a file or a folder) when the process exits normally (libFuzzer's runs and the
// corpus replays end with exit()), so that the test runs leave nothing behind in /tmp.
inline void remove_at_exit(const std::string& path) {
  struct Registry {
    std::vector<std::string> paths;
    ~Registry() {
      for (const std::string& p : paths) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    }
  };
  static Registry registry;
  registry.paths.push_back(path);
}

// The input's bytes in a file of this process (rewritten for every input), named *.ext.
inline std::string input_file(const uint8_t* data, size_t size, const char* ext) {
  const char* dir = std::getenv("TMPDIR");
  static const std::string path =
      std::string(dir && *dir ? dir : "/tmp") + "/tformer-fuzz-" + std::to_string(getpid()) + "." + ext;
  static const bool registered = (remove_at_exit(path), true);
  (void)registered;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

// A folder of this process (emptied for every input), for readers that take a folder or a pair of
// files: write_in(dir, name, bytes) puts one file there.
inline std::string input_dir() {
  const char* dir = std::getenv("TMPDIR");
  static const std::string path =
      std::string(dir && *dir ? dir : "/tmp") + "/tformer-fuzz-" + std::to_string(getpid()) + ".d";
  static const bool registered = (remove_at_exit(path), true);
  (void)registered;
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  std::filesystem::create_directories(path, ec);
  if (ec) std::abort();
  return path;
}

inline std::string write_in(const std::string& dir, const std::string& name, std::string_view bytes) {
  const std::string path = dir + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) std::abort();
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) std::abort();
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

// Runs body(); a tformer::Error that is not Internal is a clean refusal, anything else aborts.
template <typename F>
void expect_clean(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Internal) {
      std::fprintf(stderr, "fuzz: internal error on this input: %s\n", e.what());
      std::abort();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception that is not tformer::Error: %s\n", e.what());
    std::abort();
  }
}

// Bytes a target reads from a tensor whose header passed: at most this many, so that a valid
// header describing a huge tensor costs no memory (the reader's bounds checks are what is tested).
constexpr uint64_t kMaxTensorRead = 1 << 20;

}  // namespace tformer::fuzz
