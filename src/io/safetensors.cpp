#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <set>
#include <utility>

#include "core/file_io.h"
#include "core/utf8.h"

namespace tformer {

// Tensor bytes go between memory and disk unconverted, which is right only where the machine's
// byte order is the format's.
static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");
static_assert(sizeof(off_t) == 8, "file offsets must be 64-bit");

namespace {

// Parsed with std::map objects: O(log n) per key even for a hostile 100 MB header (ordered_json's
// linear lookups would make that quadratic). Header order is not needed: tensors are sorted by offset.
using Json = nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Dtypes

struct DtypeInfo {
  std::string_view name;
  int64_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
    {"F32", 4},  {"I64", 8}, {"U64", 8}, {"F64", 8},     {"C64", 8},
};

std::string known_dtypes() {
  std::string s;
  for (const DtypeInfo& d : kDtypes) s += (s.empty() ? "" : ", ") + std::string(d.name);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Small helpers

std::string errno_text() { return std::strerror(errno); }

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

// Product of the extents times the element size, or false on 64-bit overflow.
bool byte_count(const std::vector<int64_t>& shape, int64_t elem_size, uint64_t* out) {
  uint64_t n = static_cast<uint64_t>(elem_size);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *out = n;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Header parsing

// Parser callback state: JSON objects may not repeat a key (nlohmann::json would keep the last one
// silently, letting two entries claim one name), and nesting is capped so a hostile header cannot
// build deep trees. The deepest valid header is 3 levels: {"t": {"shape": [...]}}.
class HeaderGuard {
 public:
  explicit HeaderGuard(const std::string& path) : path_(path) {}

  bool operator()(int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
      case Json::parse_event_t::array_start:
        if (open_.size() >= kMaxDepth)
          fail_file(path_, "{}: the header nests objects and arrays more than {} deep", path_, kMaxDepth);
        open_.push_back(event == Json::parse_event_t::object_start);
        keys_.emplace_back();
        break;
      case Json::parse_event_t::object_end:
      case Json::parse_event_t::array_end:
        open_.pop_back();
        keys_.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (open_.size() == 1) top_key_ = key;
        if (!keys_.back().insert(key).second) {
          if (open_.size() == 1)
            fail_file(key, "{}: the header has two entries named '{}' (duplicate keys are not allowed)", path_, key);
          fail_file(top_key_, "{}: the header entry '{}' repeats the key '{}' (duplicate keys are not allowed)", path_,
                    top_key_, key);
        }
        break;
      }
      case Json::parse_event_t::value:
        break;
    }
    return true;
  }

 private:
  static constexpr size_t kMaxDepth = 3;
  std::string path_;
  std::vector<bool> open_;
  std::vector<std::set<std::string>> keys_;
  std::string top_key_;
};

// A non-negative JSON integer, as written by any safetensors writer; anything else is an Error.
uint64_t as_unsigned(const Json& v, const std::string& path, const std::string& name, const char* what) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer())
    fail_file(name, "{}: tensor '{}': {} holds the negative number {}", path, name, what, v.get<int64_t>());
  fail_file(name, "{}: tensor '{}': {} must hold non-negative integers, found {} {}", path, name, what, v.type_name(),
            v.dump());
}

const Json& field(const Json& entry, const char* key, const std::string& path, const std::string& name) {
  auto it = entry.find(key);
  if (it == entry.end())
    fail_file(name,
              "{}: tensor '{}': the header entry has no \"{}\" (expected \"dtype\", \"shape\" and \"data_offsets\")",
              path, name, key);
  return *it;
}

SafetensorsTensor parse_entry(const std::string& name, const Json& entry, const std::string& path, uint64_t buffer_size,
                              uint64_t data_start) {
  if (!entry.is_object())
    fail_file(
        name,
        "{}: tensor '{}': the header entry must be an object with \"dtype\", \"shape\" and \"data_offsets\", found {}",
        path, name, entry.type_name());
  SafetensorsTensor t;
  t.name = name;

  const Json& dtype = field(entry, "dtype", path, name);
  if (!dtype.is_string())
    fail_file(name, "{}: tensor '{}': \"dtype\" must be a string, found {}", path, name, dtype.type_name());
  t.dtype = dtype.get<std::string>();
  const int64_t elem_size = safetensors_dtype_size(t.dtype);
  if (elem_size == 0)
    fail_unsupported(name, "{}: tensor '{}': unknown dtype '{}' (known: {})", path, name, t.dtype, known_dtypes());

  const Json& shape = field(entry, "shape", path, name);
  if (!shape.is_array())
    fail_file(name, "{}: tensor '{}': \"shape\" must be an array of extents, found {}", path, name, shape.type_name());
  for (const Json& d : shape) {
    const uint64_t extent = as_unsigned(d, path, name, "\"shape\"");
    if (extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_file(name, "{}: tensor '{}': extent {} in \"shape\" is too large", path, name, extent);
    t.shape.push_back(static_cast<int64_t>(extent));
  }

  const Json& offsets = field(entry, "data_offsets", path, name);
  if (!offsets.is_array() || offsets.size() != 2)
    fail_file(name, "{}: tensor '{}': \"data_offsets\" must be an array [begin, end], found {}", path, name,
              offsets.dump());
  t.begin = as_unsigned(offsets[0], path, name, "\"data_offsets\"");
  t.end = as_unsigned(offsets[1], path, name, "\"data_offsets\"");
  if (t.begin > t.end)
    fail_file(name, "{}: tensor '{}': data_offsets [{}, {}] end before they begin", path, name, t.begin, t.end);

  uint64_t nbytes = 0;
  if (!byte_count(t.shape, elem_size, &nbytes))
    fail_file(name, "{}: tensor '{}': shape {} of {} has more bytes than 64 bits can count", path, name,
              shape_str(t.shape), t.dtype);
  if (nbytes != t.end - t.begin)
    fail_file(name, "{}: tensor '{}': shape {} of {} needs {} bytes, but data_offsets [{}, {}] span {}", path, name,
              shape_str(t.shape), t.dtype, nbytes, t.begin, t.end, t.end - t.begin);
  if (t.end > buffer_size)
    fail_file(name,
              "{}: tensor '{}': data_offsets [{}, {}] run past the end of the data buffer, which holds {} bytes (file "
              "offsets {} to {})",
              path, name, t.begin, t.end, buffer_size, data_start, data_start + buffer_size);
  return t;
}

// The tensors, sorted by offset, must tile [0, buffer_size) exactly.
void check_tiling(const std::vector<SafetensorsTensor>& sorted, const std::string& path, uint64_t buffer_size,
                  uint64_t data_start) {
  uint64_t covered = 0;
  const SafetensorsTensor* prev = nullptr;
  for (const SafetensorsTensor& t : sorted) {
    if (t.begin > covered)
      fail_file(t.name,
                "{}: bytes [{}, {}) of the data buffer (file offsets {} to {}) belong to no tensor: a hole before "
                "tensor '{}' (the data buffer must be covered without gaps)",
                path, covered, t.begin, data_start + covered, data_start + t.begin, t.name);
    if (t.begin < covered)
      fail_file(t.name, "{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' (data_offsets [{}, {}])", path,
                t.name, t.begin, t.end, prev->name, prev->begin, prev->end);
    covered = t.end;
    prev = &t;
  }
  if (covered != buffer_size)
    fail_file(path,
              "{}: the data buffer holds {} bytes but the tensors cover only the first {}: {} trailing bytes from file "
              "offset {}",
              path, buffer_size, covered, buffer_size - covered, data_start + covered);
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// Public helpers

int64_t safetensors_dtype_size(std::string_view dtype) {
  for (const DtypeInfo& d : kDtypes)
    if (d.name == dtype) return d.size;
  return 0;
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// -----------------------------------------------------------------------------------------------
// Reading

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  f.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd_ < 0) fail_file(path, "{}: cannot open: {}", path, errno_text());
  struct stat st {};
  if (::fstat(f.fd_, &st) != 0) fail_file(path, "{}: cannot stat: {}", path, errno_text());
  if (!S_ISREG(st.st_mode)) fail_file(path, "{}: not a regular file", path);
  f.file_size_ = static_cast<uint64_t>(st.st_size);

  // 1. The header length.
  if (f.file_size_ < 8)
    fail_file(path, "{}: the file is {} bytes, too short for the 8-byte header length a safetensors file starts with",
              path, f.file_size_);
  unsigned char len_bytes[8];
  read_at(f.fd_, path, len_bytes, 8, 0);
  const uint64_t header_len = load_le64(len_bytes);
  if (header_len > kSafetensorsMaxHeader)
    fail_file(path, "{}: header length {} (file offset 0) exceeds the limit of {} bytes", path, header_len,
              kSafetensorsMaxHeader);
  if (header_len > f.file_size_ - 8)
    fail_file(path,
              "{}: header length {} (file offset 0) runs past the end of the file: only {} bytes follow the length",
              path, header_len, f.file_size_ - 8);
  f.data_start_ = 8 + header_len;
  const uint64_t buffer_size = f.file_size_ - f.data_start_;

  // 2. The header text.
  std::string text(static_cast<size_t>(header_len), '\0');
  read_at(f.fd_, path, text.data(), header_len, 8);
  if (text.empty() || text[0] != '{')
    fail_file(path, "{}: the header (file offset 8) must start with '{{', found {}", path,
              text.empty() ? std::string("an empty header")
                           : fmt::format("byte 0x{:02x}", static_cast<unsigned char>(text[0])));
  Json header;
  try {
    HeaderGuard guard(path);
    header = Json::parse(text, std::ref(guard));
  } catch (const Json::parse_error& e) {
    // e.byte counts from 1 within the header text.
    fail_file(path, "{}: the header is not valid JSON (near file offset {}): {}", path,
              8 + (e.byte > 0 ? e.byte - 1 : 0), e.what());
  } catch (const Json::exception& e) {  // a number beyond double's range (1e400)
    fail_file(path, "{}: the header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail_file(path, "{}: the header must be a JSON object, found {}", path, header.type_name());

  // 3. Metadata and tensor entries.
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      if (!value.is_object())
        fail_file("__metadata__", "{}: \"__metadata__\" must be an object of strings, found {}", path,
                  value.type_name());
      for (const auto& [mkey, mvalue] : value.items()) {
        if (!mvalue.is_string())
          fail_file(mkey, "{}: \"__metadata__\" value for key '{}' must be a string, found {} {}", path, mkey,
                    mvalue.type_name(), mvalue.dump());
        f.metadata_[mkey] = mvalue.get<std::string>();
      }
      continue;
    }
    f.tensors_.push_back(parse_entry(key, value, path, buffer_size, f.data_start_));
  }

  // 4. The tensors must tile the data buffer.
  std::stable_sort(f.tensors_.begin(), f.tensors_.end(), [](const SafetensorsTensor& a, const SafetensorsTensor& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(f.tensors_, path, buffer_size, f.data_start_);
  for (size_t i = 0; i < f.tensors_.size(); ++i) f.index_[f.tensors_[i].name] = i;
  return f;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_size_(other.file_size_),
      data_start_(other.data_start_),
      metadata_(std::move(other.metadata_)),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    close_fd();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_size_ = other.file_size_;
    data_start_ = other.data_start_;
    metadata_ = std::move(other.metadata_);
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() { close_fd(); }

void SafetensorsFile::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafetensorsTensor& SafetensorsFile::at(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) fail_file(name, "{}: no tensor named '{}' in the file", path_, name);
  return *t;
}

Json SafetensorsFile::metadata_json(const std::string& key, std::string_view when_missing) const {
  const auto it = metadata_.find(key);
  if (it == metadata_.end()) fail_file(key, "{}: no \"{}\" in the header's __metadata__; {}", path_, key, when_missing);
  try {
    return Json::parse(it->second);
  } catch (const Json::exception& e) {  // parse errors and number overflows (1e400)
    fail_file(key, "{}: __metadata__ \"{}\" is not valid JSON: {}", path_, key, e.what());
  }
}

void SafetensorsFile::read_f32(std::string_view name, float* dst, int64_t n) const {
  const SafetensorsTensor& t = at(name);
  if (t.dtype != "F32") fail_unsupported(name, "{}: tensor '{}' has dtype {}, expected F32", path_, name, t.dtype);
  if (t.numel() != n)
    fail_file(name, "{}: tensor '{}' has {} elements (shape {}), expected {}", path_, name, t.numel(),
              shape_str(t.shape), n);
  read_bytes(t, dst, static_cast<uint64_t>(n) * sizeof(float));
}

void SafetensorsFile::read_bytes(const SafetensorsTensor& t, void* dst, uint64_t nbytes) const {
  TF_CHECK(fd_ >= 0, "{}: read from a closed (moved-from) file", path_);
  TF_CHECK(find(t.name) == &t, "{}: tensor '{}' is not an entry of this file", path_, t.name);
  if (nbytes != t.nbytes())
    fail_input(t.name, "{}: tensor '{}' holds {} bytes, but the destination has {}", path_, t.name, t.nbytes(), nbytes);
  if (nbytes == 0) return;
  read_at(fd_, path_, dst, nbytes, data_start_ + t.begin);
}

// -----------------------------------------------------------------------------------------------
// Writing

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  // 1. The header, with every name and shape checked before any file is created. Built as text
  // (nlohmann only escapes the strings) so the entries keep the given order in linear time.
  std::string text = "{";
  auto quoted = [&](const std::string& s) {
    if (const auto bad = find_invalid_utf8(s))
      fail_input(path,
                 "{}: a tensor name or metadata string is not valid UTF-8 (string of {} bytes, invalid at byte {})",
                 path, s.size(), *bad);
    return nlohmann::json(s).dump();
  };
  if (!metadata.empty()) {
    text += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      text += first ? "" : ",";
      text += quoted(key);
      text += ':';
      text += quoted(value);
      first = false;
    }
    text += "}";
  }
  std::set<std::string_view> names;
  std::vector<uint64_t> sizes;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty()) fail_input(path, "{}: a tensor to write has an empty name", path);
    if (t.name == "__metadata__") fail_input(t.name, "{}: '__metadata__' is reserved and cannot name a tensor", path);
    if (!names.insert(t.name).second) fail_input(t.name, "{}: two tensors to write are named '{}'", path, t.name);
    for (int64_t d : t.shape)
      if (d < 0) fail_input(t.name, "{}: tensor '{}': negative extent in shape {}", path, t.name, shape_str(t.shape));
    uint64_t nbytes = 0;
    if (!byte_count(t.shape, sizeof(float), &nbytes) || nbytes > std::numeric_limits<uint64_t>::max() - offset)
      fail_input(t.name, "{}: tensor '{}': shape {} is too large", path, t.name, shape_str(t.shape));
    std::string dims;
    for (size_t i = 0; i < t.shape.size(); ++i) {
      if (i) dims += ',';
      dims += std::to_string(t.shape[i]);
    }
    text += fmt::format("{}{}:{{\"dtype\":\"F32\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                        text.size() > 1 ? "," : "", quoted(t.name), dims, offset, offset + nbytes);
    sizes.push_back(nbytes);
    offset += nbytes;
  }
  text += "}";
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kSafetensorsMaxHeader)
    fail_input(path, "{}: the header would be {} bytes, over the limit of {}", path, text.size(),
               kSafetensorsMaxHeader);

  // 2. The bytes, into a temporary file that replaces `path` only once complete.
  AtomicFile file(path);
  unsigned char len_bytes[8];
  store_le64(len_bytes, text.size());
  file.write(len_bytes, 8);
  file.write(text);
  std::vector<float> scratch;  // for the tensors filled as they are written: the largest of them
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] == 0) continue;
    if (tensors[i].data == nullptr && !tensors[i].fill)
      fail_input(tensors[i].name, "{}: tensor '{}' has shape {} but no data", path, tensors[i].name,
                 shape_str(tensors[i].shape));
    if (tensors[i].data != nullptr) {
      file.write(tensors[i].data, sizes[i]);
    } else {
      scratch.resize(sizes[i] / sizeof(float));
      tensors[i].fill(scratch.data());
      file.write(scratch.data(), sizes[i]);
    }
  }
  file.commit();
}

void write_arena(const std::string& path, Arena& arena, const std::map<std::string, std::string>& metadata) {
  TF_CHECK(arena.entries().empty() || arena.data() != nullptr, "write_arena({}): the arena is not allocated", path);
  std::vector<TensorToWrite> tensors;
  tensors.reserve(arena.entries().size());
  for (const Arena::Entry& e : arena.entries()) {
    tensors.push_back({e.name, e.shape.dims(), arena.view(e).data()});
  }
  write_safetensors(path, tensors, metadata);
}

// -----------------------------------------------------------------------------------------------
// Arena loading

void check_arena_tensors(const SafetensorsFile& file, const Arena& arena, bool allow_missing) {
  const std::string& path = file.path();
  for (const Arena::Entry& e : arena.entries()) {
    const SafetensorsTensor* t = file.find(e.name);
    if (t == nullptr) {
      if (allow_missing) continue;
      fail_file(e.name, "{}: tensor '{}' (shape {}) is missing from the file", path, e.name, e.shape.str());
    }
    if (t->dtype != "F32")
      fail_unsupported(e.name, "{}: tensor '{}' has dtype {}, expected F32", path, e.name, t->dtype);
    bool same = static_cast<int>(t->shape.size()) == e.shape.rank();
    for (int i = 0; same && i < e.shape.rank(); ++i) same = t->shape[i] == e.shape[i];
    if (!same)
      fail_file(e.name, "{}: tensor '{}': expected shape {}, file has {}", path, e.name, e.shape.str(),
                shape_str(t->shape));
  }
  for (const SafetensorsTensor& t : file.tensors())
    if (!arena.contains(t.name))
      fail_file(t.name, "{}: unexpected tensor '{}' (shape {}) in the file: the model has no tensor of that name", path,
                t.name, shape_str(t.shape));
}

void read_arena(const SafetensorsFile& file, Arena& arena, bool allow_missing) {
  TF_CHECK(arena.entries().empty() || arena.data() != nullptr, "read_arena({}): the arena is not allocated",
           file.path());
  // Check every name, dtype and shape before reading anything.
  check_arena_tensors(file, arena, allow_missing);
  for (const Arena::Entry& e : arena.entries())
    if (const SafetensorsTensor* t = file.find(e.name)) file.read_bytes(*t, arena.view(e).data(), t->nbytes());
}

std::map<std::string, std::string> read_arena(const std::string& path, Arena& arena, bool allow_missing) {
  SafetensorsFile file = SafetensorsFile::open(path);
  read_arena(file, arena, allow_missing);
  return file.metadata();
}

}  // namespace tformer
