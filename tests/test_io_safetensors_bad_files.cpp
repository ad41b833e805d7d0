// safetensors: every kind of bad file is an Error of kind BadFile (Unsupported for a dtype tformer
// does not know) about the file, or about the tensor entry or key at fault, with a message naming
// the file and the problem; a file that shrinks after it was opened; and fuzzing (every truncation
// and byte flips in the header load or throw Error, never crash).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "io/safetensors.h"
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
// Bad files: each an Error of kind BadFile about the file or the entry at fault, naming the file and
// the problem

const char* kOne = R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";

TEST_F(SafetensorsTest, RejectsBadLengths) {
  EXPECT_TRUE(bad("", ErrorKind::BadFile, "", "the file is 0 bytes, too short for the 8-byte header length"));
  EXPECT_TRUE(bad(std::string("\x02\0\0\0\0", 5), ErrorKind::BadFile, "", "the file is 5 bytes, too short"));
  EXPECT_TRUE(bad(le64(1000) + "{}", ErrorKind::BadFile, "",
                  "header length 1000 (file offset 0) runs past the end of the file: only 2 bytes follow"));
  EXPECT_TRUE(bad(le64(200'000'000) + "{}", ErrorKind::BadFile, "",
                  "header length 200000000 (file offset 0) exceeds the limit"));
  EXPECT_TRUE(bad(le64(~uint64_t{0}) + "{}", ErrorKind::BadFile, "", "exceeds the limit of 100000000 bytes"));
  EXPECT_TRUE(bad(le64(0), ErrorKind::BadFile, "", "must start with '{', found an empty header"));
}

TEST_F(SafetensorsTest, RejectsHeadersThatAreNotAJsonObject) {
  EXPECT_TRUE(bad(st_file("[1, 2]", ""), ErrorKind::BadFile, "",
                  "the header (file offset 8) must start with '{', found byte 0x5b"));
  EXPECT_TRUE(bad(st_file(" {}", ""), ErrorKind::BadFile, "", "must start with '{', found byte 0x20"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32")", ""), ErrorKind::BadFile, "", "the header is not valid JSON"));
  EXPECT_TRUE(bad(st_file("{} []", ""), ErrorKind::BadFile, "", "the header is not valid JSON"));
  EXPECT_TRUE(bad(st_file("{\"\xff\":1}", ""), ErrorKind::BadFile, "", "the header is not valid JSON"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", f32_bytes({1})),
                  ErrorKind::BadFile, "", "nests objects and arrays more than 3 deep"));
}

TEST_F(SafetensorsTest, RejectsBadTensorEntries) {
  const std::string four = f32_bytes({1});
  EXPECT_TRUE(bad(st_file(R"({"a":5})", ""), ErrorKind::BadFile, "a", "the header entry must be an object"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", four), ErrorKind::BadFile, "a",
                  "the header entry has no \"dtype\""));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","data_offsets":[0,4]}})", four), ErrorKind::BadFile, "a",
                  "the header entry has no \"shape\""));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1]}})", four), ErrorKind::BadFile, "a",
                  "the header entry has no \"data_offsets\""));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", four), ErrorKind::BadFile, "a",
                  "\"dtype\" must be a string, found number"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", four), ErrorKind::Unsupported,
                  "a", "unknown dtype 'F33' (known: BOOL, U8"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", four), ErrorKind::BadFile, "a",
                  "\"shape\" must be an array of extents, found string"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", four), ErrorKind::BadFile, "a",
                  "\"shape\" holds the negative number -1"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1.0],"data_offsets":[0,4]}})", four), ErrorKind::BadFile, "a",
                  "\"shape\" must hold non-negative integers, found number 1.0"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", four), ErrorKind::BadFile, "a",
                  "\"data_offsets\" must be an array [begin, end], found [0]"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", four), ErrorKind::BadFile, "a",
                  "data_offsets [4, 0] end before they begin"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,-4]}})", four), ErrorKind::BadFile, "a",
                  "\"data_offsets\" holds the negative number -4"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", f32_bytes({1, 2})),
                  ErrorKind::BadFile, "a", "shape [3] of F32 needs 12 bytes, but data_offsets [0, 8] span 8"));
  EXPECT_TRUE(
      bad(st_file(R"({"a":{"dtype":"F64","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", f32_bytes({1, 2})),
          ErrorKind::BadFile, "a", "shape [4611686018427387904, 4] of F64 has more bytes than 64 bits can count"));
}

TEST_F(SafetensorsTest, RejectsOffsetsThatDoNotTileTheBuffer) {
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32_bytes({1})),
                  ErrorKind::BadFile, "a",
                  "data_offsets [0, 8] run past the end of the data buffer, which holds 4 bytes"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                          f32_bytes({1, 2, 3})),
                  ErrorKind::BadFile, "b", "(data_offsets [4, 12]) overlaps tensor 'a' (data_offsets [0, 8])"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                          f32_bytes({1})),
                  ErrorKind::BadFile, "b", "overlaps"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                          f32_bytes({1, 2, 3})),
                  ErrorKind::BadFile, "b", "bytes [4, 8) of the data buffer (file offsets"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", f32_bytes({1, 2})),
                  ErrorKind::BadFile, "a", "a hole before tensor 'a'"));
  EXPECT_TRUE(bad(st_file(std::string("{") + kOne + "}", f32_bytes({1, 2})), ErrorKind::BadFile, "",
                  "the data buffer holds 8 bytes but the tensors cover only the first 4: 4 trailing bytes"));
  EXPECT_TRUE(bad(st_file("{}", "x"), ErrorKind::BadFile, "", "1 trailing bytes"));
}

TEST_F(SafetensorsTest, RejectsDuplicateKeysAndBadMetadata) {
  EXPECT_TRUE(bad(st_file(std::string("{") + kOne + "," + kOne + "}", f32_bytes({1})), ErrorKind::BadFile, "a",
                  "the header has two entries named 'a' (duplicate keys are not allowed)"));
  EXPECT_TRUE(bad(st_file(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", f32_bytes({1})),
                  ErrorKind::BadFile, "a", "the header entry 'a' repeats the key 'dtype'"));
  EXPECT_TRUE(bad(st_file(R"({"__metadata__":{"k":"v","k":"w"}})", ""), ErrorKind::BadFile, "__metadata__",
                  "the header entry '__metadata__' repeats the key 'k'"));
  EXPECT_TRUE(bad(st_file(R"({"__metadata__":{"n":1}})", ""), ErrorKind::BadFile, "n",
                  "\"__metadata__\" value for key 'n' must be a string, found number 1"));
  EXPECT_TRUE(bad(st_file(R"({"__metadata__":{"n":{"x":"y"}}})", ""), ErrorKind::BadFile, "n",
                  "\"__metadata__\" value for key 'n' must be a string, found object"));
  EXPECT_TRUE(bad(st_file(R"({"__metadata__":["x"]})", ""), ErrorKind::BadFile, "__metadata__",
                  "\"__metadata__\" must be an object of strings, found array"));
}

TEST_F(SafetensorsTest, RejectsPathsThatAreNotFiles) {
  const std::string missing = path("absent.safetensors");
  EXPECT_ERROR(load(missing), ErrorKind::BadFile, missing, "cannot open: No such file or directory");
  EXPECT_ERROR(load(dir_.string()), ErrorKind::BadFile, dir_.string(), "not a regular file");
}

TEST_F(SafetensorsTest, AFileThatShrinksAfterOpenIsAnErrorOnRead) {
  const std::vector<float> v = {1, 2, 3, 4};
  const std::string p = path("shrink.safetensors");
  write_safetensors(p, {{"v", {4}, v.data()}});
  SafetensorsFile f = SafetensorsFile::open(p);
  fs::resize_file(p, f.file_size() - 4);
  std::vector<float> got(4);
  EXPECT_ERROR(f.read_f32("v", got.data(), 4), ErrorKind::BadFile, p, "unexpected end of file at offset");
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
    // A BadFile error about the file, or about the tensor whose data the cut removed.
    EXPECT_EQ(test::error_of([&] { load(p); }).kind(), ErrorKind::BadFile)
        << "a file cut to " << n << " of " << full.size() << " bytes";
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

}  // namespace
}  // namespace tformer
