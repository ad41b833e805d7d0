// libFuzzer target: the token-id lists of the command line (cli/token_ids.h): parse_ids, which
// `tformer detokenize` runs on --ids and on an --input file, and parse_logits_tokens, which
// `tformer logits` runs on --tokens. Each list either is refused with a tformer::Error or holds ids
// in 0..INT32_MAX that, printed back with single spaces, parse to the same list; a list both accept
// is the same list.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "cli/token_ids.h"
#include "fuzz_util.h"

namespace {

template <typename Parse>
std::optional<std::vector<tformer::TokenId>> parsed(Parse&& parse, const std::string& text) {
  std::optional<std::vector<tformer::TokenId>> out;
  tformer::fuzz::expect_clean([&] {
    out = parse(text);
    std::string back;
    for (const tformer::TokenId id : *out) {
      if (id < 0) std::abort();
      back += std::to_string(id) + " ";
    }
    if (parse(back) != *out) std::abort();
  });
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto ids = parsed([](const std::string& s) { return tformer::cli::parse_ids(s, "--ids"); }, text);
  const auto file = parsed([](const std::string& s) { return tformer::cli::parse_ids(s, "ids.txt"); }, text);
  const auto tokens = parsed([](const std::string& s) { return tformer::cli::parse_logits_tokens(s); }, text);
  if (ids != file) std::abort();
  if (ids && tokens && *ids != *tokens) std::abort();
  return 0;
}
