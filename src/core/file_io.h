// Whole files in and out, with one set of guarantees for every file the project writes.
//
// read_file: a whole file as bytes, nothing translated. append_file: a record added to a log.
//
// Atomic writes (write_file_atomic, AtomicFile): the bytes go to a temporary file beside the
// target, named
//
//   <target>.tmp.<pid>.<n>.<8 hex digits>      e.g. "model.safetensors.tmp.4711.3.9f2c01aa"
//
// (pid of the writer, n a process-wide counter, the hex digits drawn per process and thread), and
// created exclusively (O_EXCL), so two writers of the same target -- two processes, or two threads
// of one -- never share a temporary. commit() then flushes, fsyncs and closes it, renames it over
// the target and fsyncs the containing folder, so the new name survives a crash. A reader sees the
// old file or the new one, never a mixture, and the last commit wins. When anything fails (the
// temporary cannot be created, a write, the fsync, the rename, or an exception from the code
// producing the bytes) the temporary is removed, the target is left as it was, and the Error
// names the target.
//
// A process killed while writing leaves its temporary behind; remove_stale_temporaries finds such
// files by their name's pid, and every AtomicFile removes those of its own target when it starts
// (so the next write of a file cleans up after a killed one).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace tformer {

// The whole file. Errors name the path and the system's reason ("cannot open for reading: No such
// file or directory", "read error: Is a directory").
std::string read_file(const std::string& path);

// Exactly n bytes at file offset `offset` of the open file descriptor fd into dst, retrying short
// and interrupted reads. A read error or the end of the file is an Error naming path, the offset
// and the count.
void read_at(int fd, const std::string& path, void* dst, uint64_t n, uint64_t offset);

// One atomic write, fed incrementally: write() any number of times, then commit(). Destroyed
// without a successful commit() (an exception on the way, or commit() failing), it removes its
// temporary and leaves the target untouched.
class AtomicFile {
 public:
  // Creates the temporary beside path (in path's folder, which must exist).
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Overwrites n bytes at `offset` of what has been written so far (offset + n at most the bytes
  // written): a header whose fields are known only at the end.
  void write_at(uint64_t offset, const void* data, size_t n);
  // Flush, fsync, close, rename over the target, fsync of the folder. Called once.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temporary_path() const { return tmp_; }

 private:
  void discard() noexcept;

  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

// A whole file mapped read-only into memory (mmap), for data larger than memory: pages are read
// when touched and may be dropped again. An empty file maps to no bytes. Errors name the path.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

// bytes as the whole new content of path.
void write_file_atomic(const std::string& path, std::string_view bytes);
// The content produce() writes into the AtomicFile it is given; committed when produce returns,
// discarded (and its exception passed on) when it throws.
void write_file_atomic(const std::string& path, const std::function<void(AtomicFile&)>& produce);

// Appends bytes to the end of path (created when missing) with one write through O_APPEND, then
// fsyncs it: for logs that grow a record at a time (metrics.jsonl), where rewriting the whole file
// would cost more than the record. A crash can leave at most the last record unfinished (a resumed
// training run drops such a line). A failed append (a full disk, a file-size limit) cuts the file
// back to its old length, so it holds only whole records. Errors name the path and the reason.
void append_file(const std::string& path, std::string_view bytes);

// The pid in file_name when it is an atomic writer's temporary of target_name
// ("<target_name>.tmp.<pid>.<anything>"), else -1.
long temporary_owner_pid(std::string_view file_name, std::string_view target_name);

// Removes the temporaries in folder dir whose target's file name is_target accepts and whose
// writing process is gone (no process has their pid; this process's own pid counts as gone too,
// since a pid is reused: call it only while this process writes nothing into dir). Temporaries of
// live processes stay. Best effort: a folder or file that cannot be read or removed is skipped.
// own_pid_is_gone false: this process's own temporaries count as live (AtomicFile's constructor,
// which removes the stale temporaries of its own target while other threads may be writing).
void remove_stale_temporaries(const std::string& dir, const std::function<bool(std::string_view)>& is_target,
                              bool own_pid_is_gone = true);

}  // namespace tformer
