// safetensors: the writer refuses bad input before creating anything, a failed write leaves the
// target as it was, and the parameter arena's save and load (missing, misshapen and unexpected
// tensors named).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/arena.h"
#include "io/safetensors.h"
#include "safetensors_test_util.h"
#include "test_util.h"

namespace tformer {
namespace {

using test::st_file;
using SafetensorsTest = test::SafetensorsTest;

// ---------------------------------------------------------------------------------------------
// Writing: bad input and atomicity

TEST_F(SafetensorsTest, WriterRejectsBadInputBeforeCreatingAnything) {
  const float x[2] = {1, 2};
  const std::string p = path("w.safetensors");
  using Tensors = std::vector<TensorToWrite>;
  EXPECT_ERROR(write_safetensors(p, Tensors{{"a", {2}, x}, {"a", {2}, x}}), ErrorKind::BadInput, "a", p);
  EXPECT_ERROR(write_safetensors(p, Tensors{{"__metadata__", {2}, x}}), ErrorKind::BadInput, "__metadata__",
               "reserved");
  EXPECT_ERROR(write_safetensors(p, Tensors{{"", {2}, x}}), ErrorKind::BadInput, p, "empty name");
  EXPECT_ERROR(write_safetensors(p, Tensors{{"a", {2, -1}, x}}), ErrorKind::BadInput, "a", "[2, -1]");
  EXPECT_ERROR(write_safetensors(p, Tensors{{"\xff", {2}, x}}), ErrorKind::BadInput, p, "not valid UTF-8");
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, FilledTensorsAreWrittenInOrderAsThoughTheyWereGivenWhole) {
  // ZeRO-1's checkpoint: some tensors are produced only when the writer reaches them.
  const std::vector<float> a = {1, -2, 3}, b = {0.5f, 7, -8, 9, 10.25f}, c = {-1};
  const std::string whole = path("whole.safetensors"), filled = path("filled.safetensors");
  write_safetensors(whole, {{"a", {3}, a.data()}, {"b", {5}, b.data()}, {"c", {1, 1}, c.data()}}, {{"k", "v"}});
  std::vector<std::string> order;
  auto from = [&](const std::string& name, const std::vector<float>& src) {
    return [&order, name, &src](float* out) {
      order.push_back(name);
      std::copy(src.begin(), src.end(), out);
    };
  };
  std::vector<TensorToWrite> t(3);
  t[0] = {"a", {3}, a.data()};
  t[1] = {"b", {5}, nullptr, from("b", b)};
  t[2] = {"c", {1, 1}, nullptr, from("c", c)};
  write_safetensors(filled, t, {{"k", "v"}});
  EXPECT_EQ(slurp(filled), slurp(whole));
  EXPECT_EQ(order, (std::vector<std::string>{"b", "c"})) << "each filled once, in the file's order";
}

TEST_F(SafetensorsTest, WriteIntoAMissingFolderThrowsAndLeavesNothing) {
  const float x = 1;
  const std::string p = path("no/such/folder/m.safetensors");
  EXPECT_ERROR(write_safetensors(p, {{"x", {}, &x}}), ErrorKind::BadFile, p, "cannot create the temporary file");
  EXPECT_TRUE(listing().empty());
}

TEST_F(SafetensorsTest, FailedWriteLeavesTheTargetByteIdentical) {
  const std::vector<float> v = {1, 2, 3};
  const std::string p = path("m.safetensors");
  write_safetensors(p, {{"v", {3}, v.data()}}, {{"step", "1"}});
  const std::string before = slurp(p);
  // The second tensor has no data: the error comes after the temporary file has been written to.
  EXPECT_ERROR(write_safetensors(p, {{"v", {3}, v.data()}, {"w", {4}, nullptr}}, {{"step", "2"}}), ErrorKind::BadInput,
               "w", "has shape [4] but no data");
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
  // Writes the tensors and reads them into a fresh arena; an Error passes through once it is
  // checked that nothing was read before the checks finished.
  auto load_arena = [&](const std::vector<TensorToWrite>& ts, bool allow_missing = false) {
    const std::string p = path("m.safetensors");
    write_safetensors(p, ts);
    Arena a = make_arena();
    try {
      read_arena(p, a, allow_missing);
    } catch (const Error&) {
      for (int64_t i = 0; i < a.size(); ++i)
        if (a.data()[i] != 0) ADD_FAILURE() << "data was read before the checks finished";
      throw;
    }
  };
  const std::vector<TensorToWrite> all = {{"tok_embeddings.weight", {5, 4}, d.data()},
                                          {"layers.0.attn.wq.weight", {4, 4}, d.data()},
                                          {"norm.weight", {4}, d.data()},
                                          {"scale", {}, d.data()}};
  EXPECT_NO_THROW(load_arena(all));

  auto missing = all;
  missing.erase(missing.begin() + 2);
  EXPECT_ERROR(load_arena(missing), ErrorKind::BadFile, "norm.weight", "(shape [4]) is missing from the file");
  EXPECT_NO_THROW(load_arena(missing, /*allow_missing=*/true));

  auto transposed = all;
  transposed[0].shape = {4, 5};
  EXPECT_ERROR(load_arena(transposed), ErrorKind::BadFile, "tok_embeddings.weight",
               "expected shape [5, 4], file has [4, 5]");
  auto flat = all;
  flat[3].shape = {1};
  EXPECT_ERROR(load_arena(flat), ErrorKind::BadFile, "scale", "expected shape [], file has [1]");

  auto extra = all;
  extra.push_back({"output.weight", {2, 2}, d.data()});
  EXPECT_ERROR(load_arena(extra), ErrorKind::BadFile, "output.weight", "unexpected tensor");
  EXPECT_ERROR(load_arena(extra, /*allow_missing=*/true), ErrorKind::BadFile, "output.weight", "unexpected tensor");

  // A tensor of another dtype (hand-built: the writer only writes F32).
  const std::string p =
      put("f64.safetensors",
          st_file(R"({"norm.weight":{"dtype":"F64","shape":[4],"data_offsets":[0,32]}})", std::string(32, '\0')));
  Arena a = make_arena();
  EXPECT_ERROR(read_arena(p, a, /*allow_missing=*/true), ErrorKind::Unsupported, "norm.weight", "has dtype F64");
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

}  // namespace
}  // namespace tformer
