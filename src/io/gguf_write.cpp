// GGUF writing (gguf.h) and the metadata values' constructors.
#include <algorithm>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"
#include "io/gguf.h"
#include "io/gguf_detail.h"

namespace tformer {

using gguf_detail::align_up;
using gguf_detail::is_float;
using gguf_detail::kMaxDims;
using gguf_detail::scalar_size;

GgufValue GgufValue::u32(uint32_t v) {
  GgufValue x;
  x.type = GgufType::U32;
  x.u = v;
  x.i = v;
  return x;
}
GgufValue GgufValue::i32(int32_t v) {
  GgufValue x;
  x.type = GgufType::I32;
  x.i = v;
  x.u = static_cast<uint64_t>(static_cast<int64_t>(v));
  return x;
}
GgufValue GgufValue::u64(uint64_t v) {
  GgufValue x;
  x.type = GgufType::U64;
  x.u = v;
  x.i = static_cast<int64_t>(v);
  return x;
}
GgufValue GgufValue::f32(float v) {
  GgufValue x;
  x.type = GgufType::F32;
  x.f = v;
  return x;
}
GgufValue GgufValue::boolean(bool v) {
  GgufValue x;
  x.type = GgufType::Bool;
  x.u = v ? 1 : 0;
  x.i = v ? 1 : 0;
  return x;
}
GgufValue GgufValue::string(std::string v) {
  GgufValue x;
  x.type = GgufType::String;
  x.s = std::move(v);
  return x;
}
GgufValue GgufValue::string_array(std::vector<std::string> v) {
  GgufValue x;
  x.type = GgufType::Array;
  x.array_type = GgufType::String;
  x.strings = std::move(v);
  return x;
}
GgufValue GgufValue::int_array(GgufType element, std::vector<int64_t> v) {
  TF_CHECK(scalar_size(element) > 0 && !is_float(element), "GgufValue::int_array: {} is not an integer type",
           to_string(element));
  GgufValue x;
  x.type = GgufType::Array;
  x.array_type = element;
  x.ints = std::move(v);
  return x;
}
GgufValue GgufValue::float_array(GgufType element, std::vector<double> v) {
  TF_CHECK(is_float(element), "GgufValue::float_array: {} is not a float type", to_string(element));
  GgufValue x;
  x.type = GgufType::Array;
  x.array_type = element;
  x.floats = std::move(v);
  return x;
}
uint64_t GgufValue::array_size() const {
  if (type != GgufType::Array) return 0;
  return array_type == GgufType::String ? strings.size() : is_float(array_type) ? floats.size() : ints.size();
}

namespace {

class Out {
 public:
  void bytes(const void* p, size_t n) { s_.append(static_cast<const char*>(p), n); }
  template <typename T>
  void scalar(T v) {
    bytes(&v, sizeof(T));
  }
  void string(std::string_view v) {
    scalar<uint64_t>(v.size());
    bytes(v.data(), v.size());
  }
  void element(GgufType t, int64_t i, double f) {
    switch (t) {
      case GgufType::U8:
      case GgufType::I8:
      case GgufType::Bool:
        scalar<uint8_t>(static_cast<uint8_t>(i));
        break;
      case GgufType::U16:
      case GgufType::I16:
        scalar<uint16_t>(static_cast<uint16_t>(i));
        break;
      case GgufType::U32:
      case GgufType::I32:
        scalar<uint32_t>(static_cast<uint32_t>(i));
        break;
      case GgufType::U64:
      case GgufType::I64:
        scalar<uint64_t>(static_cast<uint64_t>(i));
        break;
      case GgufType::F32:
        scalar<float>(static_cast<float>(f));
        break;
      case GgufType::F64:
        scalar<double>(f);
        break;
      default:
        fail(ErrorKind::Internal, "", "write_gguf: {} is not a scalar type", to_string(t));
    }
  }
  void value(const GgufValue& v) {
    scalar<uint32_t>(static_cast<uint32_t>(v.type));
    if (v.type == GgufType::String) {
      string(v.s);
    } else if (v.type == GgufType::Array) {
      scalar<uint32_t>(static_cast<uint32_t>(v.array_type));
      scalar<uint64_t>(v.array_size());
      if (v.array_type == GgufType::String)
        for (const std::string& s : v.strings) string(s);
      else if (is_float(v.array_type))
        for (double x : v.floats) element(v.array_type, 0, x);
      else
        for (int64_t x : v.ints) element(v.array_type, x, 0);
    } else {
      element(v.type, v.i, v.f);
    }
  }
  size_t size() const { return s_.size(); }
  void pad_to(uint64_t a) { s_.append(align_up(s_.size(), a) - s_.size(), '\0'); }
  const std::string& str() const { return s_; }

 private:
  std::string s_;
};

}  // namespace

void write_gguf(const std::string& path, const std::vector<std::pair<std::string, GgufValue>>& metadata,
                const std::vector<GgufTensorToWrite>& tensors) {
  uint64_t alignment = kGgufDefaultAlignment;
  for (const auto& [key, v] : metadata)
    if (key == "general.alignment") {
      TF_CHECK(v.type == GgufType::U32 && v.u != 0 && (v.u & (v.u - 1)) == 0,
               "write_gguf: general.alignment must be a u32 power of two");
      alignment = v.u;
    }
  Out h;
  h.scalar<uint32_t>(kGgufMagic);
  h.scalar<uint32_t>(3);
  h.scalar<uint64_t>(tensors.size());
  h.scalar<uint64_t>(metadata.size());
  for (const auto& [key, v] : metadata) {
    TF_CHECK(v.type != GgufType::Array || v.array_type != GgufType::Array, "write_gguf: '{}': arrays of arrays", key);
    h.string(key);
    h.value(v);
  }
  uint64_t offset = 0;
  for (const GgufTensorToWrite& t : tensors) {
    TF_CHECK(t.ne.size() <= kMaxDims, "write_gguf: tensor '{}' has {} dimensions", t.name, t.ne.size());
    int64_t block = 0, block_bytes = 0;
    TF_CHECK(ggml_type_layout(t.type, block, block_bytes), "write_gguf: tensor '{}': unknown ggml type {}", t.name,
             t.type);
    int64_t numel = 1;
    for (int64_t e : t.ne) numel *= e;
    TF_CHECK(t.ne.empty() || t.ne[0] % block == 0, "write_gguf: tensor '{}': first extent not a multiple of {}", t.name,
             block);
    TF_CHECK(t.nbytes == static_cast<uint64_t>(numel / block * block_bytes),
             "write_gguf: tensor '{}' has {} bytes; its shape and type need {}", t.name, t.nbytes,
             numel / block * block_bytes);
    h.string(t.name);
    h.scalar<uint32_t>(static_cast<uint32_t>(t.ne.size()));
    for (int64_t e : t.ne) h.scalar<uint64_t>(static_cast<uint64_t>(e));
    h.scalar<uint32_t>(t.type);
    h.scalar<uint64_t>(offset);
    offset = align_up(offset + t.nbytes, alignment);
  }
  h.pad_to(alignment);
  write_file_atomic(path, [&](AtomicFile& out) {
    out.write(h.str());
    uint64_t written = 0;
    static const char zeros[64] = {};
    for (const GgufTensorToWrite& t : tensors) {
      if (t.nbytes > 0) out.write(t.data, t.nbytes);
      written += t.nbytes;
      uint64_t pad = align_up(written, alignment) - written;
      written += pad;
      for (; pad > 0; pad -= std::min<uint64_t>(pad, sizeof(zeros))) out.write(zeros, std::min<uint64_t>(pad, 64));
    }
  });
}

}  // namespace tformer
