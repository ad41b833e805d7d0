// safetensors: round trips, the exact bytes of a hand-built file, a file laid out the way the
// reference library lays one out, every kind of bad file as a clear Error, atomic writes, the arena's
// save and load, truncation and byte-flip fuzzing, and 64-bit offsets past 4 GB.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/arena.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------------------------
// Helpers

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s += le32(std::bit_cast<uint32_t>(v));
  return s;
}

// A whole file: length, header text padded with spaces to a multiple of 8, payload.
std::string st_file(std::string header, const std::string& payload) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + payload;
}

// A fresh folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a fresh file (removing the old one first: ext4 flushes a file truncated and rewritten).
  std::string put(const std::string& name, const std::string& bytes) const {
    fs::remove(path(name));
    std::ofstream out(path(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    EXPECT_TRUE(out.good());
    return path(name);
  }

  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Opens the file and reads every tensor. Returns Error's message, or "" when the file loaded;
  // any other exception fails the test.
  static std::string load_error(const std::string& p) {
    try {
      SafetensorsFile f = SafetensorsFile::open(p);
      for (const SafetensorsTensor& t : f.tensors()) {
        std::vector<unsigned char> buf(t.nbytes());
        f.read_bytes(t, buf.data(), t.nbytes());
      }
      return "";
    } catch (const Error& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << ": not a tformer::Error: " << e.what();
      return "wrong exception";
    }
  }

  // The error a bad file gets; fails the test when the file loads.
  std::string bad(const std::string& bytes) {
    const std::string p = put("bad.safetensors", bytes);
    const std::string msg = load_error(p);
    EXPECT_NE(msg, "") << "expected an error";
    EXPECT_THAT(msg, HasSubstr(p)) << "the message names the file";
    return msg;
  }

  test::TempDir tmp_;
  fs::path dir_ = tmp_.path();
};

// ---------------------------------------------------------------------------------------------
// Round trips and exact bytes

TEST_F(SafetensorsTest, RoundTripKeepsShapesValuesOrderAndMetadata) {
  const std::vector<float> a = {1.5f,
                                -2.25f,
                                0.0f,
                                -0.0f,
                                1e-30f,
                                3.4e38f,
                                std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN(),
                                7,
                                8,
                                9,
                                10};                         // [3, 4]
  const std::vector<float> b = {0.5f, 0.25f, 0.125f, 1, 2};  // [5]
  const float scalar = 42.0f;                                // []
  const std::vector<float> c = {1, 2, 3, 4, 5, 6};           // [2, 1, 3]
  const std::map<std::string, std::string> meta = {{"config", "{\"d_model\": 8}"},
                                                   {"tokenizer", "line one\nline \"two\" \xc3\xbc"}};
  const std::string p = path("m.safetensors");
  write_safetensors(p,
                    {{"layers.0.a", {3, 4}, a.data()},
                     {"b", {5}, b.data()},
                     {"scalar", {}, &scalar},
                     {"empty", {0, 3}, nullptr},
                     {"c", {2, 1, 3}, c.data()}},
                    meta);

  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata(), meta);
  EXPECT_EQ(f.data_start() % 8, 0u);
  EXPECT_EQ(f.file_size(), f.data_start() + (12 + 5 + 1 + 0 + 6) * 4);
  ASSERT_EQ(f.tensors().size(), 5u);
  const char* order[] = {"layers.0.a", "b", "scalar", "empty", "c"};
  uint64_t offset = 0;
  for (int i = 0; i < 5; ++i) {
    const SafetensorsTensor& t = f.tensors()[i];
    EXPECT_EQ(t.name, order[i]);
    EXPECT_EQ(t.dtype, "F32");
    EXPECT_EQ(t.begin, offset);
    offset = t.end;
  }
  EXPECT_EQ(f.at("layers.0.a").shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(f.at("scalar").shape, std::vector<int64_t>{});
  EXPECT_EQ(f.at("scalar").numel(), 1);
  EXPECT_EQ(f.at("empty").shape, (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(f.at("empty").nbytes(), 0u);
  EXPECT_EQ(f.find("nope"), nullptr);

  std::vector<float> got_a(12), got_b(5), got_c(6);
  float got_scalar = 0;
  f.read_f32("layers.0.a", got_a.data(), 12);
  f.read_f32("b", got_b.data(), 5);
  f.read_f32("scalar", &got_scalar, 1);
  f.read_f32("empty", nullptr, 0);
  f.read_f32("c", got_c.data(), 6);
  EXPECT_EQ(std::memcmp(got_a.data(), a.data(), 12 * 4), 0) << "bit-exact, NaN and -0 included";
  EXPECT_EQ(got_b, b);
  EXPECT_EQ(got_scalar, 42.0f);
  EXPECT_EQ(got_c, c);
}

TEST_F(SafetensorsTest, EmptyFileListRoundTrips) {
  const std::string p = path("none.safetensors");
  write_safetensors(p, {}, {});
  EXPECT_EQ(slurp(p), le64(8) + "{}      ");
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.metadata().empty());
}

TEST_F(SafetensorsTest, ExactBytesOfATinyFile) {
  const float data[2] = {1.0f, -2.0f};
  const std::string p = path("tiny.safetensors");
  write_safetensors(p, {{"a", {2}, data}});
  // The header JSON is 54 characters:
  //   {"a":                  5
  //   {"dtype":"F32",       15
  //   "shape":[2],          12
  //   "data_offsets":[0,8]  20
  //   }}                     2
  // padded with 2 spaces to 56 = 0x38; then 1.0f = 0x3f800000 and -2.0f = 0xc0000000, little-endian.
  const std::string json = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(json.size(), 54u);
  const std::string expected =
      std::string("\x38\0\0\0\0\0\0\0", 8) + json + "  " + std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  const std::string got = slurp(p);
  ASSERT_EQ(got.size(), 72u);
  EXPECT_EQ(got.substr(0, 8), expected.substr(0, 8)) << "header length";
  EXPECT_EQ(got.substr(8, 56), expected.substr(8, 56)) << "header text";
  EXPECT_EQ(got.substr(64), expected.substr(64)) << "payload";
}

TEST_F(SafetensorsTest, ExactHeaderWithMetadata) {
  const float x = 0.5f;
  const std::string p = path("meta.safetensors");
  write_safetensors(p, {{"x", {}, &x}}, {{"k", "v"}});
  // {"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}: 16 + 10 + 4 + 15 + 11
  // + 20 + 2 = 78 characters, padded with 2 spaces to 80 = 0x50; 0.5f = 0x3f000000.
  const std::string json = R"({"__metadata__":{"k":"v"},"x":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})";
  ASSERT_EQ(json.size(), 78u);
  EXPECT_EQ(slurp(p), std::string("\x50\0\0\0\0\0\0\0", 8) + json + "  " + std::string("\0\0\0\x3f", 4));
}

// The real `safetensors` package is not installable here (not on Debian, no PyPI), so this file is
// assembled by hand the way its serializer lays one out: "__metadata__" first, compact JSON, tensors
// sorted by decreasing dtype alignment then name, the header space-padded to a multiple of 8. It
// mixes dtypes, holds a scalar and an empty tensor, and lists header keys out of offset order.
TEST_F(SafetensorsTest, ReadsAFileInTheReferenceLibrarysLayout) {
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("f64":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},)"
                             R"("i64":{"dtype":"I64","shape":[1],"data_offsets":[16,24]},)"
                             R"("f32":{"dtype":"F32","shape":[2,2],"data_offsets":[24,40]},)"
                             R"("scalar":{"dtype":"F32","shape":[],"data_offsets":[40,44]},)"
                             R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[44,44]},)"
                             R"("mask":{"dtype":"BOOL","shape":[2],"data_offsets":[50,52]},)"
                             R"("bf16":{"dtype":"BF16","shape":[3],"data_offsets":[44,50]}})";
  std::string payload;
  payload += std::string("\x00\x00\x00\x00\x00\x00\xf8\x3f", 8);                                   // 1.5 as F64
  payload += std::string("\x00\x00\x00\x00\x00\x00\xd0\xbf", 8);                                   // -0.25 as F64
  payload += std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8);                                   // 7 as I64
  payload += std::string("\x00\x00\x80\x3f\x00\x00\x00\x40\x00\x00\x40\x40\x00\x00\x80\x40", 16);  // 1 2 3 4
  payload += std::string("\x00\x00\x60\x40", 4);                                                   // 3.5
  payload += std::string("\x80\x3f\x00\x40\x40\xc0", 6);                                           // BF16 1, 2, -3
  payload += std::string("\x01\x00", 2);                                                           // true, false
  const std::string p = put("ref.safetensors", st_file(header, payload));

  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  std::vector<std::string> names;
  for (const auto& t : f.tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"f64", "i64", "f32", "scalar", "empty", "bf16", "mask"}))
      << "tensors() is in offset order";
  EXPECT_EQ(f.at("bf16").dtype, "BF16");
  EXPECT_EQ(f.at("mask").nbytes(), 2u);

  std::vector<float> m(4);
  f.read_f32("f32", m.data(), 4);
  EXPECT_EQ(m, (std::vector<float>{1, 2, 3, 4}));
  float s = 0;
  f.read_f32("scalar", &s, 1);
  EXPECT_EQ(s, 3.5f);
  double d[2];
  f.read_bytes(f.at("f64"), d, 16);
  EXPECT_EQ(d[0], 1.5);
  EXPECT_EQ(d[1], -0.25);
  int64_t i = 0;
  f.read_bytes(f.at("i64"), &i, 8);
  EXPECT_EQ(i, 7);
  uint16_t bf[3];
  f.read_bytes(f.at("bf16"), bf, 6);
  EXPECT_EQ(std::bit_cast<float>(uint32_t{bf[2]} << 16), -3.0f);

  try {
    f.read_f32("f64", m.data(), 2);
    ADD_FAILURE() << "F64 read as F32";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'f64' has dtype F64, expected F32"));
  }
  try {
    f.read_f32("f32", m.data(), 3);
    ADD_FAILURE() << "wrong element count accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'f32' has 4 elements (shape [2, 2]), expected 3"));
  }
  try {
    f.at("missing");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("no tensor named 'missing'"));
  }
}

TEST_F(SafetensorsTest, AcceptsPrettyPrintedHeadersAndUnknownEntryFields) {
  const std::string header =
      "{\n  \"w\": {\n    \"dtype\": \"F32\",\n    \"shape\": [1],\n"
      "    \"data_offsets\": [0, 4],\n    \"note\": \"ignored\"\n  }\n}\n";
  const std::string p = put("pretty.safetensors", le64(header.size()) + header + f32_bytes({2.5f}));
  SafetensorsFile f = SafetensorsFile::open(p);
  float w = 0;
  f.read_f32("w", &w, 1);
  EXPECT_EQ(w, 2.5f);
}

// ---------------------------------------------------------------------------------------------
// Bad files: each an Error naming the file and the problem

const char* kOne = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";

TEST_F(SafetensorsTest, RejectsBadLengths) {
  EXPECT_THAT(bad(""), HasSubstr("the file is 0 bytes, too short for the 8-byte header length"));
  EXPECT_THAT(bad(std::string("\x02\0\0\0\0", 5)), HasSubstr("the file is 5 bytes, too short"));
  EXPECT_THAT(bad(le64(1000) + "{}"),
              HasSubstr("header length 1000 (file offset 0) runs past the end of the file: only 2 bytes follow"));
  EXPECT_THAT(bad(le64(200'000'000) + "{}"), HasSubstr("header length 200000000 (file offset 0) exceeds the limit"));
  EXPECT_THAT(bad(le64(~uint64_t{0}) + "{}"), HasSubstr("exceeds the limit of 100000000 bytes"));
  EXPECT_THAT(bad(le64(0)), HasSubstr("must start with '{', found an empty header"));
}

TEST_F(SafetensorsTest, RejectsHeadersThatAreNotAJsonObject) {
  EXPECT_THAT(bad(st_file("[1, 2]", "")), HasSubstr("the header (file offset 8) must start with '{', found byte 0x5b"));
  EXPECT_THAT(bad(st_file(" {}", "")), HasSubstr("must start with '{', found byte 0x20"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32")", "")), HasSubstr("the header is not valid JSON"));
  EXPECT_THAT(bad(st_file("{} []", "")), HasSubstr("the header is not valid JSON"));
  EXPECT_THAT(bad(st_file("{\"\xff\":1}", "")), HasSubstr("the header is not valid JSON"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", f32_bytes({1}))),
              HasSubstr("nests objects and arrays more than 3 deep"));
}

TEST_F(SafetensorsTest, RejectsBadTensorEntries) {
  const std::string four = f32_bytes({1});
  EXPECT_THAT(bad(st_file(R"({"a":5})", "")), HasSubstr("tensor 'a': the header entry must be an object"));
  EXPECT_THAT(bad(st_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': the header entry has no \"dtype\""));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': the header entry has no \"shape\""));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1]}})", four)),
              HasSubstr("tensor 'a': the header entry has no \"data_offsets\""));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': \"dtype\" must be a string, found number"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': unknown dtype 'F33' (known: BOOL, U8"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': \"shape\" must be an array of extents, found string"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': \"shape\" holds the negative number -1"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", four)),
              HasSubstr("tensor 'a': \"shape\" must hold non-negative integers, found number 1.0"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", four)),
              HasSubstr("tensor 'a': \"data_offsets\" must be an array [begin, end], found [0]"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", four)),
              HasSubstr("tensor 'a': data_offsets [4, 0] end before they begin"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", four)),
              HasSubstr("tensor 'a': \"data_offsets\" holds the negative number -4"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32_bytes({1, 2}))),
              HasSubstr("tensor 'a': shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] span 8"));
  EXPECT_THAT(
      bad(st_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", f32_bytes({1, 2}))),
      HasSubstr("tensor 'a': shape [4611686018427387904, 4] of F64 has more bytes than 64 bits can count"));
}

TEST_F(SafetensorsTest, RejectsOffsetsThatDoNotTileTheBuffer) {
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32_bytes({1}))),
              HasSubstr("tensor 'a': data_offsets [0, 8] run past the end of the data buffer, which holds 4 bytes"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          f32_bytes({1, 2, 3}))),
              HasSubstr("tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          f32_bytes({1}))),
              HasSubstr("overlaps"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          f32_bytes({1, 2, 3}))),
              HasSubstr("bytes [4, 8) of the data buffer (file offsets"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32_bytes({1, 2}))),
              HasSubstr("a hole before tensor 'a'"));
  EXPECT_THAT(bad(st_file(std::string("{") + kOne + "}", f32_bytes({1, 2}))),
              HasSubstr("the data buffer holds 8 bytes but the tensors cover only the first 4: 4 trailing bytes"));
  EXPECT_THAT(bad(st_file("{}", "x")), HasSubstr("1 trailing bytes"));
}

TEST_F(SafetensorsTest, RejectsDuplicateKeysAndBadMetadata) {
  EXPECT_THAT(bad(st_file(std::string("{") + kOne + "," + kOne + "}", f32_bytes({1}))),
              HasSubstr("the header has two entries named 'a' (duplicate keys are not allowed)"));
  EXPECT_THAT(bad(st_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1}))),
              HasSubstr("the header entry 'a' repeats the key 'dtype'"));
  EXPECT_THAT(bad(st_file(R"({"__metadata__":{"k":"v","k":"w"}})", "")),
              HasSubstr("the header entry '__metadata__' repeats the key 'k'"));
  EXPECT_THAT(bad(st_file(R"({"__metadata__":{"n":1}})", "")),
              HasSubstr("\"__metadata__\" value for key 'n' must be a string, found number 1"));
  EXPECT_THAT(bad(st_file(R"({"__metadata__":{"n":{"x":"y"}}})", "")),
              HasSubstr("\"__metadata__\" value for key 'n' must be a string, found object"));
  EXPECT_THAT(bad(st_file(R"({"__metadata__":["x"]})", "")),
              HasSubstr("\"__metadata__\" must be an object of strings, found array"));
}

TEST_F(SafetensorsTest, RejectsPathsThatAreNotFiles) {
  const std::string missing = path("absent.safetensors");
  EXPECT_THAT(load_error(missing), HasSubstr(missing + ": cannot open: No such file or directory"));
  EXPECT_THAT(load_error(dir_.string()), HasSubstr(": not a regular file"));
}

TEST_F(SafetensorsTest, AFileThatShrinksAfterOpenIsAnErrorOnRead) {
  const std::vector<float> v = {1, 2, 3, 4};
  const std::string p = path("shrink.safetensors");
  write_safetensors(p, {{"v", {4}, v.data()}});
  SafetensorsFile f = SafetensorsFile::open(p);
  fs::resize_file(p, f.file_size() - 4);
  std::vector<float> got(4);
  try {
    f.read_f32("v", got.data(), 4);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(p + ": unexpected end of file at offset"));
  }
}

// ---------------------------------------------------------------------------------------------
// Writing: bad input and atomicity

TEST_F(SafetensorsTest, WriterRejectsBadInputBeforeCreatingAnything) {
  const float x[2] = {1, 2};
  const std::string p = path("w.safetensors");
  auto error_of = [&](const std::vector<TensorToWrite>& ts) -> std::string {
    try {
      write_safetensors(p, ts);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error_of({{"a", {2}, x}, {"a", {2}, x}}), HasSubstr(p + ": two tensors to write are named 'a'"));
  EXPECT_THAT(error_of({{"__metadata__", {2}, x}}), HasSubstr("'__metadata__' is reserved"));
  EXPECT_THAT(error_of({{"", {2}, x}}), HasSubstr("empty name"));
  EXPECT_THAT(error_of({{"a", {2, -1}, x}}), HasSubstr("tensor 'a': negative extent in shape [2, -1]"));
  EXPECT_THAT(error_of({{"\xff", {2}, x}}), HasSubstr("not valid UTF-8"));
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, WriteIntoAMissingFolderThrowsAndLeavesNothing) {
  const float x = 1;
  const std::string p = path("no/such/folder/m.safetensors");
  try {
    write_safetensors(p, {{"x", {}, &x}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(p + ": cannot create the temporary file"));
  }
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, FailedWriteLeavesTheTargetByteIdentical) {
  const std::vector<float> v = {1, 2, 3};
  const std::string p = path("m.safetensors");
  write_safetensors(p, {{"v", {3}, v.data()}}, {{"step", "1"}});
  const std::string before = slurp(p);
  try {
    // The second tensor has no data: the error comes after the temporary file has been written to.
    write_safetensors(p, {{"v", {3}, v.data()}, {"w", {4}, nullptr}}, {{"step", "2"}});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr(p + ": tensor 'w' has shape [4] but no data"));
  }
  EXPECT_EQ(slurp(p), before);
  EXPECT_EQ(listing(), std::vector<std::string>{"m.safetensors"}) << "the temporary file is removed";

  // A successful write replaces the file.
  write_safetensors(p, {{"v", {3}, v.data()}}, {{"step", "3"}});
  EXPECT_EQ(SafetensorsFile::open(p).metadata().at("step"), "3");
  EXPECT_EQ(listing(), std::vector<std::string>{"m.safetensors"});
}

// ---------------------------------------------------------------------------------------------
// The parameter arena

Arena make_arena() {
  Arena a;
  a.add("tok_embeddings.weight", {5, 4});
  a.add("layers.0.attn.wq.weight", {4, 4});
  a.add("norm.weight", {4});
  a.add("scale", Shape{});
  a.allocate();
  return a;
}

TEST_F(SafetensorsTest, ArenaRoundTrip) {
  Arena src = make_arena();
  for (int64_t i = 0; i < src.size(); ++i) src.data()[i] = static_cast<float>(i) * 0.5f - 3;
  const std::string p = path("arena.safetensors");
  write_arena(p, src, {{"config", "{}"}});

  Arena dst = make_arena();
  const auto meta = read_arena(p, dst);
  EXPECT_EQ(meta.at("config"), "{}");
  for (const auto& e : src.entries()) {
    auto a = src.view(e), b = dst.view(e);
    ASSERT_EQ(a.numel(), b.numel());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << e.name;
  }
  // The file holds exactly the tensors, without the arena's alignment padding.
  const SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.file_size() - f.data_start(), (20 + 16 + 4 + 1) * 4u);
}

TEST_F(SafetensorsTest, ArenaLoadNamesMissingMisshapenAndUnexpectedTensors) {
  const std::vector<float> d(20, 1.0f);
  auto arena_error = [&](const std::vector<TensorToWrite>& ts, bool allow_missing = false) -> std::string {
    const std::string p = path("m.safetensors");
    write_safetensors(p, ts);
    Arena a = make_arena();
    try {
      read_arena(p, a, allow_missing);
    } catch (const Error& e) {
      for (int64_t i = 0; i < a.size(); ++i)
        if (a.data()[i] != 0) ADD_FAILURE() << "data was read before the checks finished";
      return e.what();
    }
    return "";
  };
  const std::vector<TensorToWrite> all = {{"tok_embeddings.weight", {5, 4}, d.data()},
                                          {"layers.0.attn.wq.weight", {4, 4}, d.data()},
                                          {"norm.weight", {4}, d.data()},
                                          {"scale", {}, d.data()}};
  EXPECT_EQ(arena_error(all), "");

  auto missing = all;
  missing.erase(missing.begin() + 2);
  EXPECT_THAT(arena_error(missing), HasSubstr("tensor 'norm.weight' (shape [4]) is missing from the file"));
  EXPECT_EQ(arena_error(missing, /*allow_missing=*/true), "");

  auto transposed = all;
  transposed[0].shape = {4, 5};
  EXPECT_THAT(arena_error(transposed),
              HasSubstr("tensor 'tok_embeddings.weight': expected shape [5, 4], file has [4, 5]"));
  auto flat = all;
  flat[3].shape = {1};
  EXPECT_THAT(arena_error(flat), HasSubstr("tensor 'scale': expected shape [], file has [1]"));

  auto extra = all;
  extra.push_back({"output.weight", {2, 2}, d.data()});
  EXPECT_THAT(arena_error(extra), HasSubstr("unexpected tensor 'output.weight' (shape [2, 2]) in the file"));
  EXPECT_THAT(arena_error(extra, /*allow_missing=*/true), HasSubstr("unexpected tensor 'output.weight'"));

  // A tensor of another dtype (hand-built: the writer only writes F32).
  const std::string p =
      put("f64.safetensors",
          st_file(R"({"norm.weight":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}})", std::string(32, '\0')));
  Arena a = make_arena();
  try {
    read_arena(p, a, /*allow_missing=*/true);
    ADD_FAILURE() << "F64 accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'norm.weight' has dtype F64, expected F32"));
  }
}

TEST_F(SafetensorsTest, ArenaAllowMissingLeavesAbsentTensorsUntouched) {
  const std::vector<float> d(20, 2.0f);
  const std::string p = path("partial.safetensors");
  write_safetensors(p, {{"norm.weight", {4}, d.data()}});
  Arena a = make_arena();
  a.get("scale").data()[0] = 7.0f;
  read_arena(p, a, /*allow_missing=*/true);
  EXPECT_EQ(a.get("norm.weight")(3), 2.0f);
  EXPECT_EQ(a.get("scale").data()[0], 7.0f);
  EXPECT_EQ(a.get("tok_embeddings.weight")(4, 3), 0.0f);
}

// ---------------------------------------------------------------------------------------------
// Fuzzing: truncations and byte flips never crash

std::string valid_file_bytes(const std::string& p) {
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8};
  write_safetensors(p, {{"a", {2, 3}, a.data()}, {"b", {2}, b.data()}, {"e", {0}, nullptr}},
                    {{"config", "{\"n\": 1}"}});
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_F(SafetensorsTest, EveryTruncationIsAnError) {
  const std::string full = valid_file_bytes(path("full.safetensors"));
  ASSERT_EQ(load_error(path("full.safetensors")), "");
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string p = put("cut.safetensors", full.substr(0, n));
    EXPECT_NE(load_error(p), "") << "a file cut to " << n << " of " << full.size() << " bytes loaded";
  }
}

TEST_F(SafetensorsTest, ByteFlipsInTheHeaderLoadOrThrowError) {
  const std::string full = valid_file_bytes(path("full.safetensors"));
  SafetensorsFile f = SafetensorsFile::open(path("full.safetensors"));
  const size_t header_end = std::min<size_t>(f.data_start(), 400);
  int loaded = 0, rejected = 0;
  const unsigned char masks[] = {0x01, 0x02, 0x10, 0x20, 0x80, 0xff};
  for (size_t i = 0; i < header_end; ++i) {
    for (unsigned char m : masks) {
      std::string mutated = full;
      mutated[i] = static_cast<char>(static_cast<unsigned char>(mutated[i]) ^ m);
      const std::string msg = load_error(put("flip.safetensors", mutated));  // any non-Error fails inside
      (msg.empty() ? loaded : rejected)++;
    }
  }
  EXPECT_GT(loaded, 0) << "flips inside metadata strings still load";
  EXPECT_GT(rejected, 0);
}

// ---------------------------------------------------------------------------------------------
// 64-bit offsets: a sparse file whose last tensor starts past 4 GB

TEST_F(SafetensorsTest, ReadsATensorPastFourGigabytes) {
  const uint64_t big = 5'000'000'000ull;
  const std::string header = R"({"big":{"dtype":"U8","shape":[5000000000],"data_offsets":[0,5000000000]},)"
                             R"("tail":{"dtype":"F32","shape":[2],"data_offsets":[5000000000,5000000008]}})";
  const std::string head = st_file(header, "");
  const std::string p = put("sparse.safetensors", head);
  std::error_code ec;
  fs::resize_file(p, head.size() + big, ec);  // a hole, not 5 GB of disk
  if (ec) GTEST_SKIP() << "cannot make a sparse file here: " << ec.message();
  {
    std::ofstream out(p, std::ios::binary | std::ios::in | std::ios::out);
    out.seekp(static_cast<std::streamoff>(head.size() + big));
    const std::string tail = f32_bytes({-1.25f, 6.5f});
    out.write(tail.data(), 8);
    ASSERT_TRUE(out.good());
  }
  SafetensorsFile f = SafetensorsFile::open(p);
  EXPECT_EQ(f.file_size(), head.size() + big + 8);
  float v[2] = {0, 0};
  f.read_f32("tail", v, 2);
  EXPECT_EQ(v[0], -1.25f);
  EXPECT_EQ(v[1], 6.5f);
}

}  // namespace
}  // namespace tformer
