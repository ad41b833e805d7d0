// core/hash.h: hash64's values are pinned (the token cache's file names and checksums are made of
// them, so a change would orphan every cache on disk), and it is deterministic, sensitive to every
// byte and to the seed. mix64's published splitmix64 values are in test_unit_core.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "core/hash.h"

namespace tformer {
namespace {

std::string known_text(size_t n) {
  std::string s(n, ' ');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7) % 26);
  return s;
}

TEST(Hash64, PinnedValues) {
  // Inputs of up to 3 bytes take only the single-byte steps, where hash64 agrees with xxHash64
  // (XXH64("") = EF46DB3751D8E999, XXH64("abc") = 44BC2CF5AD770999); longer ones differ from it.
  EXPECT_EQ(hash64(""), 0xef46db3751d8e999ULL);
  EXPECT_EQ(hash64("a"), 0xd24ec4f1a98c6e5bULL);
  EXPECT_EQ(hash64("abc"), 0x44bc2cf5ad770999ULL);
  EXPECT_EQ(hash64("hello world"), 0x45ab6734b21e6968ULL);
  EXPECT_EQ(hash64("0123456789abcdef0123456789abcdef"), 0x642a94958e71e6c5ULL);  // one 32-byte stripe
  const std::string s = known_text(100);
  EXPECT_EQ(hash64(s), 0x9eb57c3c18027910ULL);
  EXPECT_EQ(hash64(s, 0x746f6b656e73ULL), 0xce655844114118c0ULL);  // the token cache's key seed
  EXPECT_EQ(hash64(std::string_view(s).substr(0, 31)), 0x8a53f26f5de7ae28ULL);
  EXPECT_EQ(hash64(std::string_view("\x00\xff\x80\x01", 4)), 0x61b4c6db99a2a635ULL);
}

TEST(Hash64, DeterministicAndSensitive) {
  const std::string s = known_text(300);
  EXPECT_EQ(hash64(s), hash64(std::string(s)));
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= s.size(); ++n) seen.insert(hash64(std::string_view(s).substr(0, n)));
  EXPECT_EQ(seen.size(), s.size() + 1);  // every prefix differs
  for (size_t i = 0; i < s.size(); i += 7) {
    std::string t = s;
    t[i] = static_cast<char>(t[i] ^ 1);
    EXPECT_NE(hash64(t), hash64(s)) << i;
  }
  EXPECT_NE(hash64(s, 1), hash64(s, 2));
  // The bytes are read where they are: an unaligned view hashes as its copy does.
  const std::string padded = "x" + s;
  EXPECT_EQ(hash64(std::string_view(padded).substr(1)), hash64(s));
}

// Hash64Stream is hash64 chained over 1 MiB blocks (core/hash.h), whatever the pieces it is fed.
TEST(Hash64Stream, IsHash64ChainedOverBlocksHoweverItIsFed) {
  constexpr size_t B = Hash64Stream::kBlock;
  std::string s(2 * B + 12345, '\0');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>((i * 131 + i / 977) & 0xff);
  const std::string_view v(s);
  const uint64_t want = hash64(v.substr(2 * B), hash64(v.substr(B, B), hash64(v.substr(0, B), 7)));
  for (size_t piece : {size_t{1} << 20, size_t{4093}, size_t{3} << 19, s.size()}) {
    Hash64Stream h(7);
    for (size_t at = 0; at < s.size(); at += piece) h.update(v.substr(at, piece));
    EXPECT_EQ(h.finish(), want) << piece;
  }
  // Shorter than a block: hash64 itself; empty: hash64 of nothing; exactly one block: no extra.
  Hash64Stream small(3);
  small.update(v.substr(0, 100));
  EXPECT_EQ(small.finish(), hash64(v.substr(0, 100), 3));
  EXPECT_EQ(Hash64Stream(5).finish(), hash64("", 5));
  Hash64Stream one;
  one.update(v.substr(0, B - 1));
  one.update(v.substr(B - 1, 1));
  EXPECT_EQ(one.finish(), hash64(v.substr(0, B)));
}

TEST(Mix64, IsABijectionOnASample) {
  std::set<uint64_t> out;
  for (uint64_t x = 0; x < 4096; ++x) out.insert(mix64(x));
  EXPECT_EQ(out.size(), 4096u);
}

}  // namespace
}  // namespace tformer
