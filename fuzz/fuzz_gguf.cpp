// libFuzzer target: the GGUF reader (io/gguf.h). Opens the bytes as a GGUF file (header, metadata,
// tensor infos: every count, length, type, offset and alignment checked), looks each key and tensor
// up again, and reads the bytes of every tensor of at most 1 MiB.
#include <vector>

#include "fuzz_util.h"
#include "io/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tformer::fuzz::input_file(data, size, "gguf");
  tformer::fuzz::expect_clean([&] {
    const tformer::GgufFile f = tformer::GgufFile::open(path);
    for (const auto& [key, value] : f.metadata())
      if (f.find_value(key) != &value) std::abort();  // keys are unique: the index finds this one
    std::vector<uint8_t> buf;
    for (const auto& t : f.tensors()) {
      if (f.find_tensor(t.name) != &t) std::abort();
      if (t.offset + t.nbytes > f.file_size() - f.data_start()) std::abort();  // open() promised bounds
      if (t.nbytes > tformer::fuzz::kMaxTensorRead) continue;
      buf.resize(t.nbytes);
      f.read_bytes(t, buf.data(), t.nbytes);
    }
  });
  return 0;
}
