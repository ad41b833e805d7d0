// libFuzzer target: the safetensors reader (io/safetensors.h). Opens the bytes as a safetensors
// file (header length, JSON header, dtypes, shapes, offsets: every tensor within the data and none
// overlapping), reads each metadata value as JSON, and reads the bytes of every tensor of at most
// 1 MiB.
#include <nlohmann/json.hpp>

#include <vector>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tformer::fuzz::input_file(data, size, "safetensors");
  tformer::fuzz::expect_clean([&] {
    const tformer::SafetensorsFile f = tformer::SafetensorsFile::open(path);
    for (const auto& entry : f.metadata()) tformer::fuzz::expect_clean([&] { (void)f.metadata_json(entry.first, ""); });
    std::vector<uint8_t> buf;
    for (const auto& t : f.tensors()) {
      if (f.find(t.name) == nullptr) std::abort();
      // open() promised each tensor's bytes are its dtype's size times its element count.
      const int64_t dsize = tformer::safetensors_dtype_size(t.dtype);
      if (dsize > 0 && t.nbytes() != static_cast<uint64_t>(dsize * t.numel())) std::abort();
      if (t.end > f.file_size() - f.data_start()) std::abort();
      if (t.nbytes() > tformer::fuzz::kMaxTensorRead) continue;
      buf.resize(t.nbytes());
      f.read_bytes(t, buf.data(), t.nbytes());
    }
  });
  return 0;
}
