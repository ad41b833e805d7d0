// libFuzzer target: the token cache (train/data.h), read back by load_dataset. For each input a
// small source file is tokenized once through the cache (a valid cache file), the cache file is
// then replaced by bytes made from the input, and the source loaded again. Byte 0 of the input
// picks how:
//   0 (and any value not below): the rest of the input is the whole cache file. Its checksums are
//     the fuzzer's, so a file that is used must be the valid one: the ids must equal the source's
//     encoding exactly.
//   1: the valid file with the rest of the input applied as patches (pairs: an offset byte into the
//      first 96 + 64 bytes, an XOR byte), both checksums then recomputed: the field checks behind
//      the checksums (key, width, count, vocabulary, range, size, time) are reached.
//   2: the valid header (count set to fit) with the rest of the input as the id bytes, the
//      checksums recomputed: the id checks are reached.
// In every mode the second load must succeed (a damaged cache is rebuilt, never an error), and any
// ids it returns must lie in the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "core/file_io.h"
#include "core/hash.h"
#include "fuzz_util.h"
#include "tokenizer/char_tokenizer.h"
#include "train/data.h"

namespace {

void set_u64(std::string& b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

void reseal(std::string& b) {
  if (b.size() < 104) return;
  set_u64(b, 88, tformer::hash64(std::string_view(b).substr(0, 88)));
  const size_t payload = b.size() - 104;
  tformer::Hash64Stream h;
  h.update(std::string_view(b).substr(96, payload));
  set_u64(b, 96 + payload, h.finish());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using namespace tformer;
  const std::string dir = fuzz::input_dir();
  const std::string text = "The cat sat.\nOn the mat!\nAnd then it left.\n";
  const std::string source = fuzz::write_in(dir, "source.txt", text);
  const std::string cache = dir + "/cache";
  const CharTokenizer tok = CharTokenizer::from_corpus(text);
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int mode = data[0] == 1 ? 1 : data[0] == 2 ? 2 : 0;
  std::vector<TokenId> want;
  std::string cache_file, valid;
  fuzz::expect_clean([&] {
    want = load_dataset(source, "", 0.0, tok, cache).train.to_vector();
    for (const auto& e : std::filesystem::directory_iterator(cache)) cache_file = e.path().string();
    valid = read_file(cache_file);
  });
  if (cache_file.empty() || valid.size() < 104) std::abort();  // the valid cache must exist
  std::string bytes;
  if (mode == 0) {
    bytes.assign(rest);
  } else if (mode == 1) {
    bytes = valid;
    for (size_t i = 0; i + 1 < rest.size(); i += 2) {
      const size_t at = static_cast<unsigned char>(rest[i]) % std::min<size_t>(bytes.size(), 96 + 64);
      bytes[at] = static_cast<char>(bytes[at] ^ rest[i + 1]);
    }
    reseal(bytes);
  } else {
    bytes = valid.substr(0, 96);
    bytes.append(rest);
    bytes.append(8, '\0');
    const uint32_t width = static_cast<unsigned char>(valid[12]);
    set_u64(bytes, 24, width ? rest.size() / width : 0);
    reseal(bytes);
  }
  fuzz::write_in(dir + "/cache", std::filesystem::path(cache_file).filename().string(), bytes);
  try {
    const Dataset d = load_dataset(source, "", 0.0, tok, cache);
    const std::vector<TokenId> got = d.train.to_vector();
    for (TokenId id : got)
      if (id < 0 || id >= tok.vocab_size()) std::abort();
    if (mode == 0 && got != want) std::abort();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: loading through a damaged cache failed: %s\n", e.what());
    std::abort();
  }
  return 0;
}
