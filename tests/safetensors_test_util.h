// Helpers shared by the safetensors tests (test_io_safetensors*.cpp): little-endian bytes, a whole
// file from its header text and payload, and a fixture with a fresh folder per test that writes,
// reads back and loads files.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace tformer::test {

inline std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

inline std::string le32(uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

inline std::string f32_bytes(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) s += le32(std::bit_cast<uint32_t>(v));
  return s;
}

// A whole file: length, header text padded with spaces to a multiple of 8, payload.
inline std::string st_file(std::string header, const std::string& payload) {
  header.append((8 - header.size() % 8) % 8, ' ');
  return le64(header.size()) + header + payload;
}

// A fresh folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes a fresh file (removing the old one first: ext4 flushes a file truncated and rewritten).
  std::string put(const std::string& name, const std::string& bytes) const {
    std::filesystem::remove(path(name));
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
    for (const auto& e : std::filesystem::directory_iterator(dir_)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  // Opens the file and reads every tensor.
  static void load(const std::string& p) {
    SafetensorsFile f = SafetensorsFile::open(p);
    for (const SafetensorsTensor& t : f.tensors()) {
      std::vector<unsigned char> buf(t.nbytes());
      f.read_bytes(t, buf.data(), t.nbytes());
    }
  }

  // load(p)'s Error message, or "" when the file loaded; any other exception fails the test.
  static std::string load_error(const std::string& p) {
    try {
      load(p);
      return "";
    } catch (const Error& e) {
      return e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << p << ": not a tformer::Error: " << e.what();
      return "wrong exception";
    }
  }

  // Writes `bytes` to bad.safetensors and loads it: passes when that throws an Error of this kind
  // about `field` (the file's path when empty: a problem of the whole file, not of one tensor's
  // entry or one key) whose message names the file and contains each of `naming`.
  template <typename... Naming>
  ::testing::AssertionResult bad(const std::string& bytes, ErrorKind kind, const std::string& field,
                                 const Naming&... naming) {
    const std::string p = put("bad.safetensors", bytes);
    return throws_error([&] { load(p); }, kind, field.empty() ? p : field, std::string_view(p), naming...);
  }

  TempDir tmp_;
  std::filesystem::path dir_ = tmp_.path();
};

}  // namespace tformer::test
