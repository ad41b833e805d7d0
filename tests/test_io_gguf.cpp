// The GGUF reader on files assembled here byte by byte (independently of the writer), the writer
// through a round trip, and every kind of broken file: truncation at every byte, counts and lengths
// the file cannot hold, duplicate keys and tensors, unknown types, misaligned, overlapping and
// out-of-bounds tensors. Each broken file is a BadFile (or Unsupported) error naming the field.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/file_io.h"
#include "io/gguf.h"
#include "test_util.h"

namespace tformer {
namespace {

// Little-endian bytes, appended by hand.
struct Bytes {
  std::string s;
  template <typename T>
  Bytes& put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Bytes& str(std::string_view v) {
    put<uint64_t>(v.size());
    s.append(v);
    return *this;
  }
  Bytes& pad_to(size_t a) {
    s.append((a - s.size() % a) % a, '\0');
    return *this;
  }
};

// A small valid file: 3 keys (a u32, a string, an array of two strings), 2 F32 tensors
// ("a" with ne {3, 2}: 24 bytes at data offset 0; "b" with ne {5}: 20 bytes at offset 32).
Bytes small_file(uint64_t n_tensors = 2, uint64_t n_kv = 3) {
  Bytes b;
  b.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(n_tensors).put<uint64_t>(n_kv);
  b.str("general.architecture").put<uint32_t>(8).str("llama");
  b.str("llama.block_count").put<uint32_t>(4).put<uint32_t>(7);
  b.str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("ab").str("\xc3\xa9");
  b.str("a").put<uint32_t>(2).put<uint64_t>(3).put<uint64_t>(2).put<uint32_t>(0).put<uint64_t>(0);
  b.str("b").put<uint32_t>(1).put<uint64_t>(5).put<uint32_t>(0).put<uint64_t>(32);
  b.pad_to(32);
  for (int i = 0; i < 6; ++i) b.put<float>(static_cast<float>(i) + 0.5f);
  b.pad_to(32);
  for (int i = 0; i < 5; ++i) b.put<float>(-static_cast<float>(i));
  return b;
}

class GgufTest : public ::testing::Test {
 protected:
  std::string write(const std::string& bytes, const std::string& name = "f.gguf") {
    std::string p = tmp_ / name;
    write_file_atomic(p, bytes);
    return p;
  }
  test::TempDir tmp_;
};

TEST_F(GgufTest, ReadsAHandAssembledFile) {
  const Bytes b = small_file();
  const GgufFile f = GgufFile::open(write(b.s));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 32u);
  ASSERT_EQ(f.metadata().size(), 3u);
  EXPECT_EQ(f.metadata()[0].first, "general.architecture");
  EXPECT_EQ(f.find_value("general.architecture")->s, "llama");
  EXPECT_EQ(f.find_value("llama.block_count")->type, GgufType::U32);
  EXPECT_EQ(f.find_value("llama.block_count")->u, 7u);
  const GgufValue* tokens = f.find_value("tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->array_type, GgufType::String);
  EXPECT_EQ(tokens->strings, (std::vector<std::string>{"ab", "\xc3\xa9"}));
  EXPECT_EQ(f.find_value("missing"), nullptr);
  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor& a = f.tensor("a");
  EXPECT_EQ(a.ne, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(a.nbytes, 24u);
  EXPECT_EQ(a.numel(), 6);
  std::vector<float> av(6), bv(5);
  f.read_bytes(a, av.data(), 24);
  f.read_bytes(f.tensor("b"), bv.data(), 20);
  EXPECT_EQ(av, (std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 4.5f, 5.5f}));
  EXPECT_EQ(bv, (std::vector<float>{0, -1, -2, -3, -4}));
  EXPECT_ERROR(f.tensor("c"), ErrorKind::BadFile, "c", "no tensor named 'c'");
}

TEST_F(GgufTest, RoundTripOfEveryValueTypeAndBlockTypes) {
  std::vector<std::pair<std::string, GgufValue>> meta = {
      {"general.alignment", GgufValue::u32(64)},
      {"k.u32", GgufValue::u32(4000000000u)},
      {"k.i32", GgufValue::i32(-5)},
      {"k.u64", GgufValue::u64(std::numeric_limits<uint64_t>::max())},
      {"k.f32", GgufValue::f32(1e-5f)},
      {"k.bool", GgufValue::boolean(true)},
      {"k.str", GgufValue::string(std::string("with\0nul", 8))},
      {"k.strs", GgufValue::string_array({"", "x", "yz"})},
      {"k.i8s", GgufValue::int_array(GgufType::I8, {-128, 0, 127})},
      {"k.u16s", GgufValue::int_array(GgufType::U16, {0, 65535})},
      {"k.i64s", GgufValue::int_array(GgufType::I64, {std::numeric_limits<int64_t>::min(), 1})},
      {"k.f32s", GgufValue::float_array(GgufType::F32, {0.25, -3.0})},
      {"k.f64s", GgufValue::float_array(GgufType::F64, {0.1, 1e300})},
      {"k.empty", GgufValue::string_array({})},
  };
  std::vector<unsigned char> q8(2 * 34), q4(18), f16(2 * 64);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = static_cast<unsigned char>(i * 7);
  for (size_t i = 0; i < q4.size(); ++i) q4[i] = static_cast<unsigned char>(255 - i);
  for (size_t i = 0; i < f16.size(); ++i) f16[i] = static_cast<unsigned char>(i);
  const std::vector<GgufTensorToWrite> tensors = {
      {"q8", {64, 1}, static_cast<uint32_t>(GgmlType::Q8_0), q8.data(), q8.size()},
      {"q4", {32}, static_cast<uint32_t>(GgmlType::Q4_0), q4.data(), q4.size()},
      {"h", {8, 8}, static_cast<uint32_t>(GgmlType::F16), f16.data(), f16.size()},
      {"empty", {0, 3}, static_cast<uint32_t>(GgmlType::F32), nullptr, 0},
  };
  const std::string p = tmp_ / "rt.gguf";
  write_gguf(p, meta, tensors);
  const GgufFile f = GgufFile::open(p);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_start() % 64, 0u);
  ASSERT_EQ(f.metadata().size(), meta.size());
  for (size_t k = 0; k < meta.size(); ++k) {
    const GgufValue& want = meta[k].second;
    const GgufValue& got = f.metadata()[k].second;
    SCOPED_TRACE(meta[k].first);
    EXPECT_EQ(f.metadata()[k].first, meta[k].first);
    EXPECT_EQ(got.type, want.type);
    EXPECT_EQ(got.u, want.u);
    EXPECT_EQ(got.i, want.i);
    EXPECT_EQ(got.s, want.s);
    EXPECT_EQ(got.strings, want.strings);
    EXPECT_EQ(got.ints, want.ints);
    if (want.type == GgufType::F32)
      EXPECT_EQ(got.f, static_cast<double>(static_cast<float>(want.f)));
    else
      EXPECT_EQ(got.f, want.f);
    if (want.array_type == GgufType::F32)
      EXPECT_EQ(got.floats, (std::vector<double>{0.25, -3.0}));
    else
      EXPECT_EQ(got.floats, want.floats);
  }
  for (const GgufTensorToWrite& t : tensors) {
    const GgufTensor& g = f.tensor(t.name);
    EXPECT_EQ(g.ne, t.ne);
    EXPECT_EQ(g.type, t.type);
    EXPECT_EQ(g.nbytes, t.nbytes);
    EXPECT_EQ(g.offset % 64, 0u);
    std::vector<unsigned char> back(t.nbytes);
    f.read_bytes(g, back.data(), t.nbytes);
    if (t.nbytes > 0) {
      EXPECT_EQ(std::memcmp(back.data(), t.data, t.nbytes), 0) << t.name;
    }
  }
}

TEST_F(GgufTest, EveryTruncationIsABadFileError) {
  const std::string full = small_file().s;
  // The last tensor's bytes end at the file's end: dropping any byte breaks the file.
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string p = write(full.substr(0, n), "t.gguf");
    const Error e = test::error_of([&] { GgufFile::open(p); });
    EXPECT_EQ(e.kind(), ErrorKind::BadFile) << "truncated to " << n << " bytes: " << e.what();
    EXPECT_FALSE(e.field().empty()) << n;
  }
}

TEST_F(GgufTest, CountsAndLengthsTheFileCannotHoldAreRefusedBeforeAllocating) {
  const uint64_t huge = uint64_t(1) << 63;
  EXPECT_ERROR(GgufFile::open(write(small_file(huge).s)), ErrorKind::BadFile, "tensor_count");
  EXPECT_ERROR(GgufFile::open(write(small_file(2, huge).s)), ErrorKind::BadFile, "metadata_kv_count");
  // A key of 2^64 - 1 bytes.
  Bytes b;
  b.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  b.put<uint64_t>(std::numeric_limits<uint64_t>::max()).put<uint64_t>(0);
  EXPECT_ERROR(GgufFile::open(write(b.s)), ErrorKind::BadFile, "metadata key 0", "bytes left");
  // A string value and an array that claim more than the file holds.
  Bytes s;
  s.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  s.str("k").put<uint32_t>(8).put<uint64_t>(uint64_t(1) << 40).put<uint64_t>(0);
  EXPECT_ERROR(GgufFile::open(write(s.s)), ErrorKind::BadFile, "k");
  Bytes a;
  a.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  a.str("arr").put<uint32_t>(9).put<uint32_t>(4).put<uint64_t>(huge).put<uint64_t>(0);
  EXPECT_ERROR(GgufFile::open(write(a.s)), ErrorKind::BadFile, "arr", "elements");
  Bytes sa;  // strings take at least 8 bytes each
  sa.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  sa.str("strs").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(3).put<uint64_t>(0).put<uint64_t>(0);
  EXPECT_ERROR(GgufFile::open(write(sa.s)), ErrorKind::BadFile, "strs", "elements");
}

// small_file with one field replaced: the bytes at `at` overwritten by v.
template <typename T>
std::string patched(size_t at, T v) {
  std::string s = small_file().s;
  std::memcpy(s.data() + at, &v, sizeof(T));
  return s;
}

TEST_F(GgufTest, BrokenHeadersNameTheField) {
  const std::string full = small_file().s;
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(0, 0x46554748))), ErrorKind::BadFile, "magic");
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(4, 1))), ErrorKind::Unsupported, "version");
  // Offsets inside small_file: after the 24-byte prologue and the three keys.
  const size_t key1 = 24, key2 = key1 + 8 + 20 + 4 + 8 + 5, key3 = key2 + 8 + 17 + 4 + 4;
  const size_t t1 = key3 + 8 + 21 + 4 + 4 + 8 + 8 + 2 + 8 + 2;
  const size_t t2 = t1 + 8 + 1 + 4 + 16 + 4 + 8;
  ASSERT_EQ(full.substr(t1 + 8, 1), "a");
  ASSERT_EQ(full.substr(t2 + 8, 1), "b");
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(key2 + 8 + 17, 13))), ErrorKind::BadFile, "llama.block_count",
               "unknown value type 13");
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(key3 + 8 + 21 + 4, 9))), ErrorKind::Unsupported,
               "tokenizer.ggml.tokens", "array of arrays");
  // Tensor "b": 5 dimensions; an unknown ggml type; a misaligned offset; past the end; overlapping "a".
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(t2 + 9, 5))), ErrorKind::BadFile, "b", "dimensions");
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(t2 + 9 + 4 + 8, 7))), ErrorKind::Unsupported, "b",
               "ggml type Q5_1 (7)");
  // The super-block types most published 4-bit files use are named too (tformer reads none of them).
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(t2 + 9 + 4 + 8, 12))), ErrorKind::Unsupported, "b", "Q4_K (12)");
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(t2 + 9 + 4 + 8, 14))), ErrorKind::Unsupported, "b", "Q6_K (14)");
  EXPECT_ERROR(GgufFile::open(write(patched<uint64_t>(t2 + 9 + 4 + 8 + 4, 33))), ErrorKind::BadFile, "b", "alignment");
  EXPECT_ERROR(GgufFile::open(write(patched<uint64_t>(t2 + 9 + 4 + 8 + 4, 64))), ErrorKind::BadFile, "b",
               "past the data section");
  EXPECT_ERROR(GgufFile::open(write(patched<uint64_t>(t2 + 9 + 4 + 8 + 4, 0))), ErrorKind::BadFile, "b", "overlap");
  // A Q8_0 tensor whose first extent is not a multiple of 32.
  EXPECT_ERROR(GgufFile::open(write(patched<uint32_t>(t1 + 9 + 4 + 16, 8))), ErrorKind::BadFile, "a", "block size");
  // Extents whose product overflows.
  std::string over = small_file().s;
  const uint64_t big = uint64_t(1) << 40;
  std::memcpy(over.data() + t1 + 9 + 4, &big, 8);
  std::memcpy(over.data() + t1 + 9 + 4 + 8, &big, 8);
  EXPECT_ERROR(GgufFile::open(write(over)), ErrorKind::BadFile, "a", "overflow");
  // The same key twice, the same tensor name twice.
  Bytes d;
  d.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(2);
  d.str("k").put<uint32_t>(4).put<uint32_t>(1).str("k").put<uint32_t>(4).put<uint32_t>(2);
  EXPECT_ERROR(GgufFile::open(write(d.s)), ErrorKind::BadFile, "k", "twice");
  std::string dup_tensor = full;
  dup_tensor[t2 + 8] = 'a';
  EXPECT_ERROR(GgufFile::open(write(dup_tensor)), ErrorKind::BadFile, "a", "twice");
  // A bool that is neither 0 nor 1, an alignment that is not a power of two.
  Bytes bo;
  bo.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  bo.str("flag").put<uint32_t>(7).put<uint8_t>(2);
  EXPECT_ERROR(GgufFile::open(write(bo.s)), ErrorKind::BadFile, "flag", "neither 0 nor 1");
  Bytes al;
  al.put<uint32_t>(kGgufMagic).put<uint32_t>(3).put<uint64_t>(0).put<uint64_t>(1);
  al.str("general.alignment").put<uint32_t>(4).put<uint32_t>(48);
  EXPECT_ERROR(GgufFile::open(write(al.s)), ErrorKind::BadFile, "general.alignment", "power of two");
  EXPECT_ERROR(GgufFile::open(tmp_ / "missing.gguf"), ErrorKind::BadFile, tmp_ / "missing.gguf");
}

}  // namespace
}  // namespace tformer
