// GGUF reading (gguf.h has the format and the contracts).
#include "io/gguf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"
#include "io/gguf_detail.h"

namespace tformer {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian");

using gguf_detail::align_up;
using gguf_detail::is_float;
using gguf_detail::kMaxDims;
using gguf_detail::scalar_size;

namespace {

// The header is read through this cursor: every read is checked against the file's size first, so
// a count or a length the rest of the file cannot hold is an error before anything is allocated.
class Cursor {
 public:
  Cursor(int fd, uint64_t size, const std::string& path) : fd_(fd), size_(size), path_(path) {}

  uint64_t pos() const { return pos_; }
  const std::string& path() const { return path_; }
  uint64_t left() const { return size_ - pos_; }

  // n more bytes must exist for `what`.
  void need(uint64_t n, std::string_view what) const {
    if (n > left())
      fail_file(what, "{}: '{}' needs {} bytes at offset {}, but the file has {} bytes left", path_, what, n, pos_,
                left());
  }

  void bytes(void* dst, uint64_t n, std::string_view what) {
    need(n, what);
    auto* out = static_cast<unsigned char*>(dst);
    while (n > 0) {
      if (buf_pos_ == buf_.size()) refill();
      const uint64_t take = std::min<uint64_t>(n, buf_.size() - buf_pos_);
      std::memcpy(out, buf_.data() + buf_pos_, take);
      buf_pos_ += take;
      pos_ += take;
      out += take;
      n -= take;
    }
  }
  template <typename T>
  T scalar(std::string_view what) {
    T v;
    bytes(&v, sizeof(T), what);
    return v;
  }
  std::string string(std::string_view what) {
    const auto n = scalar<uint64_t>(what);
    need(n, what);
    std::string s(n, '\0');
    bytes(s.data(), n, what);
    return s;
  }

 private:
  void refill() {
    const uint64_t want = std::min<uint64_t>(uint64_t(1) << 20, size_ - pos_);
    buf_.resize(want);
    buf_pos_ = 0;
    read_at(fd_, path_, buf_.data(), want, pos_);
  }

  int fd_;
  uint64_t size_, pos_ = 0;
  const std::string& path_;
  std::vector<unsigned char> buf_;
  size_t buf_pos_ = 0;
};

bool known_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

// A scalar of type t from the cursor into v (i, u, f).
void read_scalar(Cursor& c, GgufType t, GgufValue& v, std::string_view what) {
  switch (t) {
    case GgufType::U8:
      v.u = c.scalar<uint8_t>(what);
      break;
    case GgufType::I8:
      v.u = static_cast<uint64_t>(static_cast<int64_t>(c.scalar<int8_t>(what)));
      break;
    case GgufType::Bool: {
      const auto b = c.scalar<uint8_t>(what);
      if (b > 1) fail_file(what, "{}: '{}': bool value {} is neither 0 nor 1", c.path(), what, b);
      v.u = b;
      break;
    }
    case GgufType::U16:
      v.u = c.scalar<uint16_t>(what);
      break;
    case GgufType::I16:
      v.u = static_cast<uint64_t>(static_cast<int64_t>(c.scalar<int16_t>(what)));
      break;
    case GgufType::U32:
      v.u = c.scalar<uint32_t>(what);
      break;
    case GgufType::I32:
      v.u = static_cast<uint64_t>(static_cast<int64_t>(c.scalar<int32_t>(what)));
      break;
    case GgufType::U64:
    case GgufType::I64:
      v.u = c.scalar<uint64_t>(what);
      break;
    case GgufType::F32:
      v.f = c.scalar<float>(what);
      break;
    case GgufType::F64:
      v.f = c.scalar<double>(what);
      break;
    default:
      fail(ErrorKind::Internal, "", "read_scalar: {} is not a scalar type", to_string(t));
  }
  v.i = static_cast<int64_t>(v.u);
}

GgufValue read_value(Cursor& c, uint32_t raw_type, const std::string& key, const std::string& path) {
  if (!known_type(raw_type)) fail_file(key, "{}: metadata key '{}' has unknown value type {}", path, key, raw_type);
  GgufValue v;
  v.type = static_cast<GgufType>(raw_type);
  if (v.type == GgufType::String) {
    v.s = c.string(key);
  } else if (v.type == GgufType::Array) {
    const auto et = c.scalar<uint32_t>(key);
    if (!known_type(et)) fail_file(key, "{}: metadata key '{}': array of unknown type {}", path, key, et);
    v.array_type = static_cast<GgufType>(et);
    if (v.array_type == GgufType::Array)
      fail_unsupported(key, "{}: metadata key '{}' is an array of arrays, which this reader does not support", path,
                       key);
    const auto n = c.scalar<uint64_t>(key);
    // Every element takes at least one byte (a string at least its 8-byte length): a count the
    // rest of the file cannot hold is refused before anything is reserved.
    const uint64_t min_size = v.array_type == GgufType::String ? 8 : scalar_size(v.array_type);
    if (n > c.left() / min_size)
      fail_file(key, "{}: metadata key '{}' claims {} elements of {}, more than the {} bytes left can hold", path, key,
                n, to_string(v.array_type), c.left());
    if (v.array_type == GgufType::String) {
      v.strings.reserve(n);
      for (uint64_t k = 0; k < n; ++k) v.strings.push_back(c.string(key));
    } else if (is_float(v.array_type)) {
      v.floats.reserve(n);
      GgufValue e;
      for (uint64_t k = 0; k < n; ++k) {
        read_scalar(c, v.array_type, e, key);
        v.floats.push_back(e.f);
      }
    } else {
      v.ints.reserve(n);
      GgufValue e;
      for (uint64_t k = 0; k < n; ++k) {
        read_scalar(c, v.array_type, e, key);
        v.ints.push_back(e.i);
      }
    }
  } else {
    read_scalar(c, v.type, v, key);
  }
  return v;
}

}  // namespace

std::string to_string(GgufType t) {
  static const char* const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                      "bool", "string", "array", "u64", "i64", "f64"};
  const auto k = static_cast<uint32_t>(t);
  return k < std::size(names) ? names[k] : "type " + std::to_string(k);
}

bool ggml_type_layout(uint32_t type, int64_t& block, int64_t& block_bytes) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32:
      block = 1, block_bytes = 4;
      return true;
    case GgmlType::F16:
    case GgmlType::BF16:
      block = 1, block_bytes = 2;
      return true;
    case GgmlType::Q8_0:
      block = 32, block_bytes = 34;  // an f16 scale and 32 int8
      return true;
    case GgmlType::Q4_0:
      block = 32, block_bytes = 18;  // an f16 scale and 32 4-bit values
      return true;
  }
  return false;
}

std::string ggml_type_name(uint32_t type) {
  // ggml's type numbers (enum ggml_type), so that a file of a type tformer does not read is named.
  static const std::pair<uint32_t, const char*> kNames[] = {
      {0, "F32"},      {1, "F16"},     {2, "Q4_0"},     {3, "Q4_1"},   {6, "Q5_0"},    {7, "Q5_1"},   {8, "Q8_0"},
      {9, "Q8_1"},     {10, "Q2_K"},   {11, "Q3_K"},    {12, "Q4_K"},  {13, "Q5_K"},   {14, "Q6_K"},  {15, "Q8_K"},
      {16, "IQ2_XXS"}, {17, "IQ2_XS"}, {18, "IQ3_XXS"}, {19, "IQ1_S"}, {20, "IQ4_NL"}, {21, "IQ3_S"}, {22, "IQ2_S"},
      {23, "IQ4_XS"},  {24, "I8"},     {25, "I16"},     {26, "I32"},   {27, "I64"},    {28, "F64"},   {29, "IQ1_M"},
      {30, "BF16"},    {34, "TQ1_0"},  {35, "TQ2_0"},   {39, "MXFP4"}};
  for (const auto& [number, name] : kNames)
    if (number == type) return name;
  return "type " + std::to_string(type);
}

int64_t GgufTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;
  return n;
}

// ---------------------------------------------------------------------------------------------
// Reading

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) fail_file(path, "{}: cannot open for reading: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) fail_file(path, "{}: cannot stat: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail_file(path, "{}: not a regular file", path);
  f.file_size_ = static_cast<uint64_t>(st.st_size);

  Cursor c(f.fd_, f.file_size_, path);
  const auto magic = c.scalar<uint32_t>("magic");
  if (magic != kGgufMagic) fail_file("magic", "{}: not a GGUF file (the first four bytes are not \"GGUF\")", path);
  f.version_ = c.scalar<uint32_t>("version");
  if (f.version_ != 2 && f.version_ != 3)
    fail_unsupported("version", "{}: GGUF version {}; this reader supports versions 2 and 3", path, f.version_);
  const auto n_tensors = c.scalar<uint64_t>("tensor_count");
  const auto n_kv = c.scalar<uint64_t>("metadata_kv_count");
  // A key-value pair takes at least 13 bytes (key length, type, a one-byte value), a tensor info 24
  // (name length, n_dims, type, offset).
  if (n_kv > c.left() / 13)
    fail_file("metadata_kv_count", "{}: metadata_kv_count {} is more than the {} bytes left can hold", path, n_kv,
              c.left());
  if (n_tensors > c.left() / 24)
    fail_file("tensor_count", "{}: tensor_count {} is more than the {} bytes left can hold", path, n_tensors, c.left());

  f.metadata_.reserve(n_kv);
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.string("metadata key " + std::to_string(k));
    const auto type = c.scalar<uint32_t>(key);
    GgufValue v = read_value(c, type, key, path);
    if (!f.key_index_.emplace(key, f.metadata_.size()).second)
      fail_file(key, "{}: metadata key '{}' appears twice", path, key);
    f.metadata_.emplace_back(std::move(key), std::move(v));
  }
  if (const GgufValue* a = f.find_value("general.alignment")) {
    if (a->type != GgufType::U32)
      fail_file("general.alignment", "{}: general.alignment is a {}, not a u32", path, to_string(a->type));
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail_file("general.alignment", "{}: general.alignment {} is not a power of two", path, a->u);
    f.alignment_ = static_cast<uint32_t>(a->u);
  }

  f.tensors_.reserve(n_tensors);
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensor t;
    t.name = c.string("tensor " + std::to_string(k) + " name");
    const auto n_dims = c.scalar<uint32_t>(t.name);
    if (n_dims > kMaxDims)
      fail_file(t.name, "{}: tensor '{}' has {} dimensions; GGUF allows at most {}", path, t.name, n_dims, kMaxDims);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto e = c.scalar<uint64_t>(t.name);
      if (e > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (e != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / e))
        fail_file(t.name, "{}: tensor '{}': the extents overflow 64 bits", path, t.name);
      numel *= e;
      t.ne.push_back(static_cast<int64_t>(e));
    }
    t.type = c.scalar<uint32_t>(t.name);
    t.offset = c.scalar<uint64_t>(t.name);
    int64_t block = 0, block_bytes = 0;
    if (!ggml_type_layout(t.type, block, block_bytes))
      fail_unsupported(t.name,
                       "{}: tensor '{}' has ggml type {} ({}), which tformer does not read (F32, F16, BF16, Q8_0, "
                       "Q4_0)",
                       path, t.name, ggml_type_name(t.type), t.type);
    if (!t.ne.empty() && t.ne[0] % block != 0)
      fail_file(t.name, "{}: tensor '{}' of type {}: its first extent {} is not a multiple of the block size {}", path,
                t.name, ggml_type_name(t.type), t.ne[0], block);
    const uint64_t blocks = numel / static_cast<uint64_t>(block);
    if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(block_bytes))
      fail_file(t.name, "{}: tensor '{}': its size overflows 64 bits", path, t.name);
    t.nbytes = blocks * static_cast<uint64_t>(block_bytes);
    if (t.offset % f.alignment_ != 0)
      fail_file(t.name, "{}: tensor '{}' starts at data offset {}, not a multiple of the alignment {}", path, t.name,
                t.offset, f.alignment_);
    if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second)
      fail_file(t.name, "{}: tensor '{}' appears twice", path, t.name);
    f.tensors_.push_back(std::move(t));
  }

  f.data_start_ = align_up(c.pos(), f.alignment_);
  if (f.data_start_ > f.file_size_ && !f.tensors_.empty())
    fail_file("data", "{}: the data section would start at {}, past the end of the file ({} bytes)", path,
              f.data_start_, f.file_size_);
  const uint64_t data_size = f.file_size_ > f.data_start_ ? f.file_size_ - f.data_start_ : 0;
  // In bounds, and no two tensors share a byte.
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : f.tensors_) {
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail_file(t.name, "{}: tensor '{}' spans data bytes [{}, {}), past the data section's {} bytes", path, t.name,
                t.offset, t.offset + t.nbytes, data_size);
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensor& a = *by_offset[k - 1];
    const GgufTensor& b = *by_offset[k];
    if (a.nbytes > 0 && b.nbytes > 0 && a.offset + a.nbytes > b.offset)
      fail_file(b.name, "{}: tensors '{}' and '{}' overlap in the data section", path, a.name, b.name);
  }
  return f;
}

GgufFile::GgufFile(GgufFile&& other) noexcept { *this = std::move(other); }

GgufFile& GgufFile::operator=(GgufFile&& other) noexcept {
  if (this != &other) {
    close_fd();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    version_ = other.version_;
    alignment_ = other.alignment_;
    file_size_ = other.file_size_;
    data_start_ = other.data_start_;
    metadata_ = std::move(other.metadata_);
    key_index_ = std::move(other.key_index_);
    tensors_ = std::move(other.tensors_);
    tensor_index_ = std::move(other.tensor_index_);
  }
  return *this;
}

GgufFile::~GgufFile() { close_fd(); }

void GgufFile::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

const GgufValue* GgufFile::find_value(std::string_view key) const {
  const auto it = key_index_.find(std::string(key));
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(std::string(name));
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(std::string_view name) const {
  const GgufTensor* t = find_tensor(name);
  if (t == nullptr) fail_file(name, "{}: no tensor named '{}' in the file", path_, name);
  return *t;
}

void GgufFile::read_bytes(const GgufTensor& t, void* dst, uint64_t nbytes) const {
  TF_CHECK(nbytes == t.nbytes, "GgufFile::read_bytes: tensor '{}' has {} bytes, asked for {}", t.name, t.nbytes,
           nbytes);
  if (nbytes > 0) read_at(fd_, path_, dst, nbytes, data_start_ + t.offset);
}

}  // namespace tformer
