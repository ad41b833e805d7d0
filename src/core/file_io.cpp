#include "core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <thread>

#include "core/error.h"
#include "core/hash.h"

namespace tformer {

namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The folder a path's file lives in ("." for a bare file name).
std::string folder_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// A name for a new temporary of path: pid, a process-wide counter and bits that differ between
// processes and threads (the thread's id and the clock, mixed), so that even a reused pid in a
// folder shared between machines or containers is unlikely to meet an old name; O_EXCL settles
// the rest.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const uint64_t n = counter.fetch_add(1, std::memory_order_relaxed);
  const auto tid = static_cast<uint64_t>(std::hash<std::thread::id>{}(std::this_thread::get_id()));
  const auto now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const auto salt = static_cast<uint32_t>(mix64(tid ^ mix64(now + n)));
  return fmt::format("{}.tmp.{}.{}.{:08x}", path, ::getpid(), n, salt);
}

}  // namespace

std::string read_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) fail_file(path, "{}: cannot open for reading: {}", path, errno_text(errno));
  std::string data;
  char buffer[1 << 16];
  size_t got;
  while ((got = std::fread(buffer, 1, sizeof buffer, f)) > 0) data.append(buffer, got);
  const int err = errno;
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) fail_file(path, "{}: read error: {}", path, errno_text(err));
  return data;
}

// ---- AtomicFile ------------------------------------------------------------------------------------

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  // What an earlier writer of this target left when it was killed (its process is gone): removed,
  // so that a killed export, quantize or bpe learn leaves nothing behind once it is run again.
  const std::string name = std::filesystem::path(path_).filename().string();
  remove_stale_temporaries(
      folder_of(path_), [&](std::string_view target) { return target == name; }, /*own_pid_is_gone=*/false);
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp_ = temporary_name(path_);
    fd = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) fail_file(path_, "{}: cannot create the temporary file {}: {}", path_, tmp_, errno_text(errno));
  f_ = ::fdopen(fd, "wb");
  if (!f_) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    fail_file(path_, "{}: cannot open the temporary file {}: {}", path_, tmp_, errno_text(err));
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (f_) std::fclose(f_);
  f_ = nullptr;
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t n) {
  TF_CHECK(f_ != nullptr, "{}: write after commit", path_);
  if (n == 0) return;
  if (std::fwrite(data, 1, n, f_) != n) fail_file(path_, "{}: write failed ({}): {}", path_, tmp_, errno_text(errno));
}

void AtomicFile::write_at(uint64_t offset, const void* data, size_t n) {
  TF_CHECK(f_ != nullptr, "{}: write after commit", path_);
  if (std::fflush(f_) != 0) fail_file(path_, "{}: write failed ({}): {}", path_, tmp_, errno_text(errno));
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t got = ::pwrite(::fileno(f_), p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) fail_file(path_, "{}: write failed ({}): {}", path_, tmp_, errno_text(got < 0 ? errno : EIO));
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
}

void AtomicFile::commit() {
  TF_CHECK(f_ != nullptr && !committed_, "{}: commit called twice", path_);
  if (std::fflush(f_) != 0) fail_file(path_, "{}: write failed ({}): {}", path_, tmp_, errno_text(errno));
  if (::fsync(::fileno(f_)) != 0) fail_file(path_, "{}: fsync failed ({}): {}", path_, tmp_, errno_text(errno));
  const int closed = std::fclose(f_);
  const int close_err = errno;
  f_ = nullptr;
  if (closed != 0) fail_file(path_, "{}: close failed ({}): {}", path_, tmp_, errno_text(close_err));
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail_file(path_, "{}: cannot rename {} over it: {}", path_, tmp_, errno_text(errno));
  committed_ = true;
  // The rename is an entry in the folder: sync the folder too, or a crash may lose the new name.
  // A folder that cannot be opened for reading, or a file system that cannot sync one (EINVAL),
  // leaves this to the system.
  const std::string dir = folder_of(path_);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return;
  const int synced = ::fsync(dfd);
  const int sync_err = errno;
  ::close(dfd);
  if (synced != 0 && sync_err != EINVAL)
    fail_file(path_, "{}: written, but the fsync of its folder {} failed: {}", path_, dir, errno_text(sync_err));
}

// ---- MappedFile ------------------------------------------------------------------------------------

MappedFile::MappedFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(path, "{}: cannot open for reading: {}", path, errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail_file(path, "{}: cannot stat: {}", path, errno_text(err));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail_file(path, "{}: cannot map into memory: {}", path, errno_text(err));
    }
    data_ = static_cast<const unsigned char*>(p);
  }
  ::close(fd);  // the mapping keeps the file
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
}

void read_at(int fd, const std::string& path, void* dst, uint64_t n, uint64_t offset) {
  auto* out = static_cast<char*>(dst);
  while (n > 0) {
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, out, chunk, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail_file(path, "{}: read of {} bytes at file offset {} failed: {}", path, n, offset, errno_text(errno));
    }
    if (got == 0)
      fail_file(path, "{}: unexpected end of file at offset {} ({} more bytes expected; did the file shrink?)", path,
                offset, n);
    out += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
}

void append_file(const std::string& path, std::string_view bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail_file(path, "{}: cannot open for appending: {}", path, errno_text(errno));
  // Where the file ended: a record only partly written (a full disk, a file-size limit) is cut
  // off again, so the log keeps only whole records.
  struct stat st {};
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  size_t done = 0;
  int err = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (err == 0 && ::fsync(fd) != 0) err = errno;
  if (err != 0 && done > 0 && before >= 0 && ::ftruncate(fd, before) == 0) ::fsync(fd);
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) fail_file(path, "{}: append failed: {}", path, errno_text(err));
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void write_file_atomic(const std::string& path, const std::function<void(AtomicFile&)>& produce) {
  AtomicFile f(path);
  produce(f);
  f.commit();
}

// ---- stale temporaries -----------------------------------------------------------------------------

long temporary_owner_pid(std::string_view file_name, std::string_view target_name) {
  if (target_name.empty() || !file_name.starts_with(target_name)) return -1;
  std::string_view rest = file_name.substr(target_name.size());
  constexpr std::string_view kMarker = ".tmp.";
  if (!rest.starts_with(kMarker)) return -1;
  rest.remove_prefix(kMarker.size());
  long pid = 0;
  size_t i = 0;
  for (; i < rest.size() && rest[i] >= '0' && rest[i] <= '9' && i < 12; ++i) pid = pid * 10 + (rest[i] - '0');
  if (i == 0 || i >= rest.size() || rest[i] != '.' || i + 1 >= rest.size()) return -1;
  return pid;
}

void remove_stale_temporaries(const std::string& dir, const std::function<bool(std::string_view)>& is_target,
                              bool own_pid_is_gone) {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    // Any ".tmp." in the name may end the target's name ("a.tmp.b.tmp.7.0" is a temporary of "a.tmp.b").
    for (size_t at = name.find(".tmp."); at != std::string::npos; at = name.find(".tmp.", at + 1)) {
      const std::string_view target = std::string_view(name).substr(0, at);
      const long pid = temporary_owner_pid(name, target);
      if (pid < 0 || !is_target(target)) continue;
      const bool alive = pid > 0 && (pid != ::getpid() || !own_pid_is_gone) &&
                         (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
      if (!alive) fs::remove(entry.path(), ec);
      break;
    }
  }
}

}  // namespace tformer
