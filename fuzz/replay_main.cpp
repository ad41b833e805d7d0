// The plain-program half of a fuzz target (fuzz/fuzz_util.h): runs LLVMFuzzerTestOneInput on
// every file named, or on every file in every folder named (but a README.md; a folder after
// --optional may be missing), in name order, and prints how many.
// A bug aborts (the file it was on is printed first), so `make test` fails on a regression input.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    // --optional DIR: a folder that may not exist yet (git keeps no empty folder).
    const bool optional = std::string(argv[i]) == "--optional" && i + 1 < argc;
    if (optional) ++i;
    const std::filesystem::path p(argv[i]);
    if (optional && !std::filesystem::exists(p)) continue;
    if (std::filesystem::is_directory(p)) {
      for (const auto& e : std::filesystem::directory_iterator(p))
        if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
    } else if (std::filesystem::is_regular_file(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "%s: no such file or folder\n", argv[i]);
      return 2;
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "no inputs to replay\n");
    return 2;
  }
  for (const auto& f : files) {
    std::fprintf(stderr, "%s\n", f.c_str());
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replayed %zu inputs\n", files.size());
  return 0;
}
