// libFuzzer target: chat-template files (serve/api.h, ChatTemplate::from_file: `key: value` lines,
// keys prefix, message, message.ROLE, generation, stop; escapes \n \t \s \\; # comments; what
// `tformer serve --chat-template FILE` reads). A template it accepts has a message form with
// {content} and non-empty stop strings, and renders a fixed conversation and one whose roles and
// contents come from the input's lines; the rendering starts with the prefix and ends with the
// generation prompt.
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fuzz_util.h"
#include "serve/api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tformer::fuzz::input_file(data, size, "template");
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  tformer::fuzz::expect_clean([&] {
    const tformer::serve::ChatTemplate t = tformer::serve::ChatTemplate::from_file(path);
    if (t.message.find("{content}") == std::string::npos) std::abort();
    for (const std::string& s : t.stop)
      if (s.empty()) std::abort();
    std::vector<std::pair<std::string, std::string>> conv = {
        {"system", "Be brief."}, {"user", "Hi {role} {content}"}, {"assistant", "Hello."}};
    for (size_t at = 0, k = 0; at < input.size() && k < 16; ++k) {
      const size_t e = std::min(input.find('\n', at), input.size());
      const std::string_view line = input.substr(at, e - at);
      conv.emplace_back(std::string(line.substr(0, line.find(':'))), std::string(line));
      at = e + 1;
    }
    const std::string out = t.render(conv);
    if (out.compare(0, t.prefix.size(), t.prefix) != 0) std::abort();
    if (out.size() < t.generation.size() ||
        out.compare(out.size() - t.generation.size(), std::string::npos, t.generation) != 0)
      std::abort();
  });
  return 0;
}
