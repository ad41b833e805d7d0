// The GGUF container (llama.cpp's model file), version 3 and 2: reading with every count, length,
// shape and offset checked against the file before anything is allocated for it, and writing.
//
// On disk (all integers little-endian):
//
//   u32 magic "GGUF"   u32 version   u64 tensor_count   u64 metadata_kv_count
//   metadata_kv_count x { string key, u32 value_type, value }
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section; each tensor's offset is
//   relative to the data section's start and a multiple of the alignment.
//
// A string is u64 length + bytes (no terminator); an array is u32 element type + u64 count +
// elements. ne[0] is the innermost (fastest-varying) extent: a row-major [rows, cols] matrix has
// ne = {cols, rows}.
//
//   GgufFile f = GgufFile::open("m.gguf");                 // throws Error on a bad file
//   const GgufValue* arch = f.find_value("general.architecture");
//   f.read_bytes(f.tensor("token_embd.weight"), dst, nbytes);
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tformer {

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian u32
inline constexpr uint32_t kGgufDefaultAlignment = 32;

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};
// "u32", "string", ... ; "type 13" for a value outside the enumeration.
std::string to_string(GgufType t);

// One metadata value. Integers (and bool) are held in `i` (a u64 above INT64_MAX in `u` as well:
// `u` always holds the value's bits as unsigned), floats in `f`, a string in `s`. An array holds
// its elements in `ints`, `floats` or `strings` according to `array_type`; arrays of arrays are
// not supported.
struct GgufValue {
  GgufType type = GgufType::U32;
  GgufType array_type = GgufType::U32;
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::vector<std::string> strings;

  static GgufValue u32(uint32_t v);
  static GgufValue i32(int32_t v);
  static GgufValue u64(uint64_t v);
  static GgufValue f32(float v);
  static GgufValue boolean(bool v);
  static GgufValue string(std::string v);
  static GgufValue string_array(std::vector<std::string> v);
  static GgufValue int_array(GgufType element, std::vector<int64_t> v);
  static GgufValue float_array(GgufType element, std::vector<double> v);
  // Number of elements of an array (0 for a scalar).
  uint64_t array_size() const;
};

// ggml's tensor types this code knows: plain floats and the block formats.
enum class GgmlType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, BF16 = 30 };
// Elements per block and bytes per block (F32: 1 and 4; Q8_0: 32 and 34); false for a type this
// code does not know.
bool ggml_type_layout(uint32_t type, int64_t& block, int64_t& block_bytes);
std::string ggml_type_name(uint32_t type);  // "F32", "Q8_0", ... ; "type 7" when unknown

struct GgufTensor {
  std::string name;
  std::vector<int64_t> ne;  // innermost first
  uint32_t type = 0;        // a GgmlType value
  uint64_t offset = 0;      // within the data section
  uint64_t nbytes = 0;      // computed from ne and the type's block layout

  int64_t numel() const;
};

class GgufFile {
 public:
  // Throws Error naming the file and the field (the key, the tensor, or the header part) of the
  // first problem: bad magic, an unsupported version, a count or length the file cannot hold, a
  // duplicate key or tensor, an unknown value or tensor type, an alignment that is not a power of
  // two, a misaligned, overlapping or out-of-bounds tensor.
  static GgufFile open(const std::string& path);

  GgufFile(GgufFile&& other) noexcept;
  GgufFile& operator=(GgufFile&& other) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_start() const { return data_start_; }
  uint64_t file_size() const { return file_size_; }
  // The metadata in file order, and by key.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find_value(std::string_view key) const;
  // The tensors in file order.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;
  // Like find_tensor, but a missing tensor is an Error naming the file and the tensor.
  const GgufTensor& tensor(std::string_view name) const;
  // The raw bytes of t (a tensor of this file) into dst[0, nbytes); nbytes must be t.nbytes.
  void read_bytes(const GgufTensor& t, void* dst, uint64_t nbytes) const;

 private:
  GgufFile() = default;
  void close_fd() noexcept;

  std::string path_;
  int fd_ = -1;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t file_size_ = 0;
  uint64_t data_start_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::unordered_map<std::string, size_t> key_index_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

// A tensor to write: its bytes already in the type's on-disk layout (nbytes must match ne and type).
struct GgufTensorToWrite {
  std::string name;
  std::vector<int64_t> ne;  // innermost first
  uint32_t type = 0;
  const void* data = nullptr;
  uint64_t nbytes = 0;
};

// Writes a version 3 GGUF file atomically (core/file_io.h): the metadata in the given order, the
// tensors in the given order, each at the next multiple of the alignment (general.alignment when
// the metadata has it, else 32). Errors name the path and the tensor or key.
void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorToWrite>& tensors);

}  // namespace tformer
