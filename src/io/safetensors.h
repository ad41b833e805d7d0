// The safetensors file format: reading with every header field checked against the file before any
// tensor data is touched, atomic writing, and the parameter arena's save and load.
//
// On disk (all integers little-endian; docs/safetensors.md has the full rules and an example):
//
//   bytes [0, 8)          N, an unsigned 64-bit header length, N <= 100,000,000
//   bytes [8, 8 + N)      the header: UTF-8 JSON, starting with '{', maybe padded with spaces (0x20)
//                         {"__metadata__": {"config": "..."},                      (optional)
//                          "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
//   bytes [8 + N, end)    the data buffer; data_offsets are [begin, end) relative to its start
//
// A valid file's tensors tile the data buffer exactly: sorted by offset, each begins where the
// previous one ends, the first at 0 and the last at the end of the file. No holes, no overlaps, no
// trailing bytes, no duplicate keys. Shapes are row-major, outermost first; [] is a scalar and a
// zero extent is an empty tensor.
//
//   write_safetensors("m.safetensors", {{"w", {2, 3}, w_data}}, {{"config", config_json}});
//   SafetensorsFile f = SafetensorsFile::open("m.safetensors");   // throws Error on a bad file
//   f.read_f32("w", dst, 6);
#pragma once

#include "core/arena.h"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tformer {

// Largest header accepted (the same limit as the reference implementation's).
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

// Bytes per element of a safetensors dtype name ("F32" -> 4, "BF16" -> 2, "BOOL" -> 1, ...);
// 0 for a name this reader does not know (including the sub-byte F4 / F6_* types).
int64_t safetensors_dtype_size(std::string_view dtype);

// One entry of the header.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;           // "F32", "F64", "BF16", "I64", "U8", "BOOL", ...
  std::vector<int64_t> shape;  // row-major, outermost first; empty for a scalar
  uint64_t begin = 0;          // byte range [begin, end) within the data buffer
  uint64_t end = 0;

  int64_t numel() const;  // product of the extents (1 for a scalar)
  uint64_t nbytes() const { return end - begin; }
};

// "[2, 3]" (the same spelling as Shape::str()).
std::string shape_str(const std::vector<int64_t>& shape);

// An open, validated safetensors file. open() reads and checks the whole header; tensor data is
// read later, on request, with one positioned read per tensor. Move-only (it holds the file open).
class SafetensorsFile {
 public:
  // Throws Error naming the file and the problem (and the tensor or file offset where there is one).
  static SafetensorsFile open(const std::string& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The JSON value stored as text under __metadata__[key]. A missing key is a BadFile error about
  // `key` that ends with `when_missing` (what the file then is not); text that is not valid JSON
  // is a BadFile error about `key` as well.
  nlohmann::json metadata_json(const std::string& key, std::string_view when_missing) const;
  // Every tensor, in the order of their data offsets (empty tensors sharing an offset by name).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when there is no tensor of that name.
  const SafetensorsTensor* find(std::string_view name) const;
  // Like find(), but a missing tensor is an Error naming the file and the tensor.
  const SafetensorsTensor& at(std::string_view name) const;
  // File offset of the data buffer (8 + header length) and the file's size in bytes.
  uint64_t data_start() const { return data_start_; }
  uint64_t file_size() const { return file_size_; }

  // Reads tensor `name` into dst[0, n): the tensor must be F32 with exactly n elements.
  void read_f32(std::string_view name, float* dst, int64_t n) const;
  // Reads the raw little-endian bytes of `t` (an entry of this file) into dst[0, nbytes);
  // nbytes must equal t.nbytes().
  void read_bytes(const SafetensorsTensor& t, void* dst, uint64_t nbytes) const;

 private:
  SafetensorsFile() = default;
  void close_fd() noexcept;

  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensor> tensors_;
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors_
};

// A float32 tensor to write: shape row-major, data holds numel(shape) floats (may be null only
// when that count is 0, or when fill is set). fill, when set and data is null, is called once
// (never for a tensor of 0 elements), in the tensors' order, with a buffer of numel(shape) floats
// to fill just before they are written (a
// tensor gathered from other processes, never whole in memory beside the others: ZeRO-1's moments).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  const float* data = nullptr;
  std::function<void(float*)> fill = nullptr;
};

// Writes an F32 safetensors file: tensors laid out in the given order, `__metadata__` first in the
// header (left out when metadata is empty), the header padded with spaces to a multiple of 8 bytes.
// Written atomically (core/file_io.h): a temporary file beside `path`, flushed, fsync'd and renamed
// over `path`; on any error the temporary is removed, `path` is left as it was, and Error names the
// path.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// Every tensor of the arena, in declaration order, under its arena name.
void write_arena(const std::string& path, Arena& arena, const std::map<std::string, std::string>& metadata = {});

// Fills an allocated arena from a file. Each arena tensor must be in the file, F32, with exactly
// the arena's shape (allow_missing = true leaves absent ones untouched); a tensor in the file that
// the arena does not declare is an error. Everything is checked before any data is read. The
// path form returns the file's metadata.
void read_arena(const SafetensorsFile& file, Arena& arena, bool allow_missing = false);
// The checks read_arena makes before it reads anything (every arena tensor present, F32, of its
// shape; no tensor the arena lacks), on an arena that need not be allocated yet: a loader can refuse
// a file before allocating what its header claims.
void check_arena_tensors(const SafetensorsFile& file, const Arena& arena, bool allow_missing = false);
std::map<std::string, std::string> read_arena(const std::string& path, Arena& arena, bool allow_missing = false);

}  // namespace tformer
