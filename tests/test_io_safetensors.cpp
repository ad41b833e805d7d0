// safetensors: round trips, the exact bytes of a hand-built file, a file laid out the way the
// reference library lays one out (and reading its tensors of other dtypes as F32 refused), and
// 64-bit offsets past 4 GB. Bad files: test_io_safetensors_bad_files.cpp; the writer's checks,
// atomic writes and the arena: test_io_safetensors_writing.cpp.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"

#include <nlohmann/json.hpp>
#include "safetensors_test_util.h"
#include "test_util.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;
using test::f32_bytes;
using test::le64;
using test::st_file;
using SafetensorsTest = test::SafetensorsTest;

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
                                                   {"tokenizer", "line one\nline \"two\" \xc3\xbc"},
                                                   {"huge", "{\"steps\": 1e3004}"}};
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
  // A metadata value read as JSON; a missing key or text that is not JSON is a BadFile about the key.
  EXPECT_EQ(f.metadata_json("config", "-"), nlohmann::json({{"d_model", 8}}));
  EXPECT_ERROR(f.metadata_json("train_state", "not a checkpoint"), ErrorKind::BadFile, "train_state",
               "not a checkpoint");
  EXPECT_ERROR(f.metadata_json("tokenizer", "-"), ErrorKind::BadFile, "tokenizer", "not valid JSON");
  // A number beyond double's range is refused the same way (fuzzing found it thrown past the reader).
  EXPECT_ERROR(f.metadata_json("huge", "-"), ErrorKind::BadFile, "huge", "number overflow");
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

  EXPECT_ERROR(f.read_f32("f64", m.data(), 2), ErrorKind::Unsupported, "f64", "has dtype F64, expected F32");
  EXPECT_ERROR(f.read_f32("f32", m.data(), 3), ErrorKind::BadFile, "f32", "has 4 elements (shape [2, 2]), expected 3");
  EXPECT_ERROR(f.at("missing"), ErrorKind::BadFile, "missing");
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
