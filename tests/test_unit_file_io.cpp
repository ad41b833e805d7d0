// core/file_io.h: whole-file reads, atomic writes (one-shot and streaming), their failure modes
// (the target untouched and no temporary left), concurrent writers of one path, and the clean-up
// of temporaries left by dead processes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "test_util.h"

namespace tformer {
namespace {

namespace fs = std::filesystem;

class FileIoTest : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return tmp_ / name; }
  // The names in the folder, sorted.
  std::vector<std::string> listing() const {
    std::set<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp_.path())) names.insert(e.path().filename().string());
    return {names.begin(), names.end()};
  }
  test::TempDir tmp_;
  const fs::path& dir_ = tmp_.path();
};

TEST_F(FileIoTest, RoundTripOfAnyBytes) {
  const std::string p = path("data.bin");
  std::string bytes("a\0b\r\n\xff\x80 end", 11);
  write_file_atomic(p, bytes);
  EXPECT_EQ(read_file(p), bytes);
  // Replaced by shorter, empty and large contents.
  write_file_atomic(p, "xy");
  EXPECT_EQ(read_file(p), "xy");
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  std::string big(3 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 2654435761u) >> 13);
  write_file_atomic(p, big);
  EXPECT_EQ(read_file(p), big);
  EXPECT_EQ(listing(), std::vector<std::string>{"data.bin"});
}

TEST_F(FileIoTest, StreamingWritesAreConcatenated) {
  const std::string p = path("stream.txt");
  {
    AtomicFile f(p);
    EXPECT_EQ(f.path(), p);
    // The temporary sits beside the target, named after it and this process.
    EXPECT_EQ(fs::path(f.temporary_path()).parent_path(), dir_);
    EXPECT_THAT(f.temporary_path(), ::testing::StartsWith(p + ".tmp." + std::to_string(::getpid()) + "."));
    EXPECT_EQ(temporary_owner_pid(fs::path(f.temporary_path()).filename().string(), "stream.txt"), ::getpid());
    EXPECT_TRUE(fs::exists(f.temporary_path()));
    EXPECT_FALSE(fs::exists(p)) << "nothing at the target before commit()";
    for (int i = 0; i < 1000; ++i) f.write(std::to_string(i) + "\n");
    f.write("", 0);
    f.commit();
  }
  std::string want;
  for (int i = 0; i < 1000; ++i) want += std::to_string(i) + "\n";
  EXPECT_EQ(read_file(p), want);
  EXPECT_EQ(listing(), std::vector<std::string>{"stream.txt"});

  write_file_atomic(p, [](AtomicFile& f) {
    f.write("one ");
    f.write("two");
  });
  EXPECT_EQ(read_file(p), "one two");
}

TEST_F(FileIoTest, ReadErrorsNameThePathAndTheReason) {
  const std::string missing = path("missing.txt");
  EXPECT_ERROR(read_file(missing), ErrorKind::BadFile, missing, "cannot open for reading: No such file or directory");
  fs::create_directories(path("folder"));
  EXPECT_ERROR(read_file(path("folder")), ErrorKind::BadFile, path("folder"), "read error: Is a directory");
}

TEST_F(FileIoTest, AMissingFolderIsAnErrorNamingThePath) {
  const std::string p = path("no/such/folder/x.txt");
  EXPECT_ERROR(write_file_atomic(p, "x"), ErrorKind::BadFile, p, "cannot create the temporary file");
  EXPECT_ERROR(AtomicFile f(p), ErrorKind::BadFile, p, "cannot create the temporary file");
  EXPECT_TRUE(listing().empty());
}

TEST_F(FileIoTest, AppendsAccumulateAndErrorsNameThePath) {
  const std::string p = path("log.jsonl");
  append_file(p, "one\n");  // created
  append_file(p, std::string("t\0o\n", 4));
  append_file(p, "");
  append_file(p, "three");
  EXPECT_EQ(read_file(p), std::string("one\nt\0o\nthree", 13));
  EXPECT_EQ(listing(), std::vector<std::string>{"log.jsonl"});  // no temporaries for an append
  const std::string missing = path("no/such/folder/log.jsonl");
  EXPECT_ERROR(append_file(missing, "x"), ErrorKind::BadFile, missing, "cannot open for appending");
  fs::create_directories(path("folder"));
  EXPECT_ERROR(append_file(path("folder"), "x"), ErrorKind::BadFile, path("folder"), "cannot open for appending");
}

TEST_F(FileIoTest, TargetThatIsAFolderFailsAtTheRenameAndLeavesNoTemporary) {
  const std::string p = path("target");
  fs::create_directories(p);
  fs::path inside = fs::path(p) / "kept.txt";
  write_file_atomic(inside.string(), "kept");
  EXPECT_ERROR(write_file_atomic(p, "bytes"), ErrorKind::BadFile, p, "cannot rename");
  EXPECT_TRUE(fs::is_directory(p));
  EXPECT_EQ(read_file(inside.string()), "kept");
  EXPECT_EQ(listing(), std::vector<std::string>{"target"}) << "the temporary is removed";
}

TEST_F(FileIoTest, AThrowingProducerLeavesTheTargetUntouched) {
  const std::string p = path("model.bin");
  write_file_atomic(p, "version 1");
  EXPECT_THROW(write_file_atomic(p,
                                 [](AtomicFile& f) {
                                   f.write("half of version 2");
                                   throw std::runtime_error("the producer failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read_file(p), "version 1");
  EXPECT_EQ(listing(), std::vector<std::string>{"model.bin"});
  // The same with a tformer::Error, and with a streaming writer dropped before commit().
  EXPECT_ERROR(write_file_atomic(p, [](AtomicFile&) { fail_input("w", "tensor 'w' is bad"); }), ErrorKind::BadInput,
               "w");
  {
    AtomicFile f(p);
    f.write("never committed");
  }
  EXPECT_EQ(read_file(p), "version 1");
  EXPECT_EQ(listing(), std::vector<std::string>{"model.bin"});
  // Nothing exists before the first successful commit.
  EXPECT_THROW(write_file_atomic(path("new.bin"), [](AtomicFile&) { throw std::runtime_error("no"); }),
               std::runtime_error);
  EXPECT_EQ(listing(), std::vector<std::string>{"model.bin"});
}

TEST_F(FileIoTest, AFolderWithoutWritePermissionIsAnError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes into any folder";
  const std::string locked = path("locked");
  fs::create_directories(locked);
  const std::string p = locked + "/x.txt";
  write_file_atomic(p, "before");
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  const ::testing::AssertionResult refused = test::throws_error(
      [&] { write_file_atomic(p, "after"); }, ErrorKind::BadFile, p, "cannot create the temporary file");
  fs::permissions(locked, fs::perms::owner_all);
  EXPECT_TRUE(refused);
  EXPECT_EQ(read_file(p), "before");
  EXPECT_EQ(fs::directory_iterator(locked)->path().filename(), "x.txt");
}

// Two threads replace one file many times while a third reads it: every read is one complete
// version, no temporary name is ever shared (each write succeeds), and none is left behind.
TEST_F(FileIoTest, ConcurrentWritersOfOnePathNeverCollide) {
  const std::string p = path("shared.txt");
  constexpr int kWrites = 150;
  // Version v of thread t: a header line and then 20,000 copies of one letter, so a torn or mixed
  // file is recognisable.
  auto version = [](int t, int v) {
    return "thread " + std::to_string(t) + " version " + std::to_string(v) + "\n" +
           std::string(20000, static_cast<char>('a' + t));
  };
  auto complete = [&](const std::string& s) {
    const size_t nl = s.find('\n');
    if (nl == std::string::npos || s.size() != nl + 1 + 20000) return false;
    const int t = s[nl + 1] - 'a';
    if (t < 0 || t > 1) return false;
    return s == version(t, std::stoi(s.substr(s.find("version ") + 8)));
  };
  write_file_atomic(p, version(0, -1));
  std::atomic<bool> done{false};
  std::atomic<int> failures{0}, torn{0}, reads{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 2; ++t)
    writers.emplace_back([&, t] {
      for (int v = 0; v < kWrites; ++v) {
        try {
          write_file_atomic(p, version(t, v));
        } catch (const Error&) {
          ++failures;
        }
      }
    });
  std::thread reader([&] {
    while (!done) {
      if (!complete(read_file(p))) ++torn;
      ++reads;
    }
  });
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  const std::string last = read_file(p);
  EXPECT_TRUE(last == version(0, kWrites - 1) || last == version(1, kWrites - 1));
  EXPECT_EQ(listing(), std::vector<std::string>{"shared.txt"});
}

TEST_F(FileIoTest, TemporaryNamesAreUniqueAcrossThreads) {
  const std::string p = path("t.bin");
  std::vector<std::vector<std::string>> names(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        AtomicFile f(p);  // dropped: its temporary is removed
        names[t].push_back(f.temporary_path());
      }
    });
  for (auto& th : threads) th.join();
  std::set<std::string> all;
  for (const auto& v : names) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 800u);
  EXPECT_TRUE(listing().empty());
}

TEST(TemporaryOwnerPid, ParsesTheWritersNames) {
  EXPECT_EQ(temporary_owner_pid("model.safetensors.tmp.4711.3.9f2c01aa", "model.safetensors"), 4711);
  EXPECT_EQ(temporary_owner_pid("model.safetensors.tmp.4711.0", "model.safetensors"), 4711);
  EXPECT_EQ(temporary_owner_pid("model.safetensors.tmp.4711", "model.safetensors"), -1);
  EXPECT_EQ(temporary_owner_pid("model.safetensors.tmp.", "model.safetensors"), -1);
  EXPECT_EQ(temporary_owner_pid("model.safetensors.tmp.x.0", "model.safetensors"), -1);
  EXPECT_EQ(temporary_owner_pid("model.safetensors", "model.safetensors"), -1);
  EXPECT_EQ(temporary_owner_pid("checkpoint.safetensors.tmp.12.0", "model.safetensors"), -1);
  EXPECT_EQ(temporary_owner_pid("x.tmp.12.0", ""), -1);
}

TEST_F(FileIoTest, StaleTemporariesOfDeadProcessesAreRemoved) {
  // A pid that is certainly free now: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = std::to_string(child), alive = std::to_string(::getppid());
  const std::vector<std::string> names = {"run.bin.tmp." + dead + ".0.0badf00d", "run.bin.tmp." + alive + ".1.12345678",
                                          "other.bin.tmp." + dead + ".0.0badf00d", "run.bin", "run.bin.tmp.notapid.0"};
  for (const std::string& name : names) write_file_atomic(path(name), "x");
  remove_stale_temporaries(dir_.string(), [](std::string_view target) { return target == "run.bin"; });
  EXPECT_EQ(listing(), (std::vector<std::string>{"other.bin.tmp." + dead + ".0.0badf00d", "run.bin",
                                                 "run.bin.tmp." + alive + ".1.12345678", "run.bin.tmp.notapid.0"}));
  remove_stale_temporaries(path("no-such-folder"), [](std::string_view) { return true; });  // no error
}

// A writer killed mid-write leaves its temporary; the next write of that target removes it (and
// no other target's, nor a live process's, nor this process's own).
TEST_F(FileIoTest, AWriteRemovesTheStaleTemporariesOfItsTarget) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = std::to_string(child), alive = std::to_string(::getppid()), me = std::to_string(::getpid());
  for (const std::string& name : {"model.gguf.tmp." + dead + ".3.00c0ffee", "model.gguf.tmp." + alive + ".0.1",
                                  "model.gguf.tmp." + me + ".9.2", "codes.tmp." + dead + ".0.3"})
    std::ofstream(path(name)) << "half";
  write_file_atomic(path("model.gguf"), "whole");
  std::vector<std::string> want = {"codes.tmp." + dead + ".0.3", "model.gguf", "model.gguf.tmp." + alive + ".0.1",
                                   "model.gguf.tmp." + me + ".9.2"};
  std::sort(want.begin(), want.end());  // listing() is in name order, and pids have any number of digits
  EXPECT_EQ(listing(), want);
}

}  // namespace
}  // namespace tformer
