#include "train/data.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/threads.h"
#include "core/utf8.h"

namespace tformer {

namespace {

inline uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- little-endian fields ------------------------------------------------------------------------

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint32_t get_u32(std::string_view s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}
uint64_t get_u64(std::string_view s, size_t at) {
  return load_le64(reinterpret_cast<const unsigned char*>(s.data() + at));
}

// ---- the token cache -----------------------------------------------------------------------------

constexpr char kCacheMagic[8] = {'T', 'F', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kCacheVersion = 2;
constexpr size_t kCacheHeader = 96;  // 88 bytes of fields, then their checksum
constexpr size_t kCacheTrailer = 8;

struct CacheHeader {
  uint32_t width = 4;
  uint64_t key = 0, count = 0, source_size = 0;
  int64_t source_mtime_ns = 0;
  uint64_t content_hash = 0, tok_hash = 0, begin = 0, end = 0;
  uint32_t allow_special = 0, vocab = 0;
};

std::string encode_header(const CacheHeader& h) {
  std::string out(kCacheMagic, sizeof kCacheMagic);
  put_u32(out, kCacheVersion);
  put_u32(out, h.width);
  put_u64(out, h.key);
  put_u64(out, h.count);
  put_u64(out, h.source_size);
  put_u64(out, static_cast<uint64_t>(h.source_mtime_ns));
  put_u64(out, h.content_hash);
  put_u64(out, h.tok_hash);
  put_u64(out, h.begin);
  put_u64(out, h.end);
  put_u32(out, h.allow_special);
  put_u32(out, h.vocab);
  put_u64(out, hash64(out));
  return out;
}

std::string cache_file_name(const std::string& cache_dir, uint64_t key) {
  return (std::filesystem::path(cache_dir) / fmt::format("tokens-{:016x}.bin", key)).string();
}

// A source file's identity as the cache records it.
struct Source {
  std::string path;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
};

Source stat_source(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail_file(path, "{}: cannot open for reading: {}", path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail_file(path, "{}: not a regular file", path);
  if (st.st_size == 0) fail_file(path, "{}: empty file", path);
  return {path, static_cast<uint64_t>(st.st_size),
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + static_cast<int64_t>(st.st_mtim.tv_nsec)};
}

std::string describe_time(int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:09d} UTC", buf, ns % 1000000000);
}

// The cache file at path as a mapped TokenArray when it is whole and was made from exactly `want`
// (all but content_hash, which the caller checks after reading the source); otherwise nullopt and
// why: "" when there is no file, else the reason it is not used.
std::optional<TokenArray> open_cache(const std::string& path, const CacheHeader& want, const Source& src,
                                     CacheHeader& got, std::string& why) {
  why.clear();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::shared_ptr<MappedFile> map;
  try {
    map = std::make_shared<MappedFile>(path);
  } catch (const Error& e) {
    why = e.what();
    return std::nullopt;
  }
  const std::string_view s = map->bytes();
  if (s.size() < kCacheHeader + kCacheTrailer) {
    why = fmt::format("damaged: {} bytes, shorter than a header", s.size());
    return std::nullopt;
  }
  if (std::memcmp(s.data(), kCacheMagic, sizeof kCacheMagic) != 0) {
    why = "damaged: not a token cache (magic)";
    return std::nullopt;
  }
  if (get_u32(s, 8) != kCacheVersion) {
    why = fmt::format("written in format version {}, this build writes {}", get_u32(s, 8), kCacheVersion);
    return std::nullopt;
  }
  if (hash64(s.substr(0, 88)) != get_u64(s, 88)) {
    why = "damaged: the header's checksum does not match";
    return std::nullopt;
  }
  got.width = get_u32(s, 12);
  got.key = get_u64(s, 16);
  got.count = get_u64(s, 24);
  got.source_size = get_u64(s, 32);
  got.source_mtime_ns = static_cast<int64_t>(get_u64(s, 40));
  got.content_hash = get_u64(s, 48);
  got.tok_hash = get_u64(s, 56);
  got.begin = get_u64(s, 64);
  got.end = get_u64(s, 72);
  got.allow_special = get_u32(s, 80);
  got.vocab = get_u32(s, 84);
  if (got.key != want.key || got.width != want.width || got.allow_special != want.allow_special ||
      got.vocab != want.vocab) {
    why = "damaged: its key, id width or options do not match its name";
    return std::nullopt;
  }
  if (got.tok_hash != want.tok_hash) {
    why = "made with another tokenizer";
    return std::nullopt;
  }
  if (got.source_size != src.size || got.begin != want.begin || got.end != want.end) {
    why = fmt::format("made from bytes [{}, {}) of {} when it had {} bytes; it now has {}", got.begin, got.end,
                      src.path, got.source_size, src.size);
    return std::nullopt;
  }
  if (got.source_mtime_ns != src.mtime_ns) {
    why = fmt::format("made from {} as modified at {}; it was modified at {}", src.path,
                      describe_time(got.source_mtime_ns), describe_time(src.mtime_ns));
    return std::nullopt;
  }
  const uint64_t payload = s.size() - kCacheHeader - kCacheTrailer;
  if (payload % got.width != 0 || payload / got.width != got.count) {
    why = fmt::format("damaged: {} bytes of ids for a count of {}", payload, got.count);
    return std::nullopt;
  }
  const std::string_view ids = s.substr(kCacheHeader, payload);
  Hash64Stream h;
  h.update(ids);
  if (h.finish() != get_u64(s, kCacheHeader + payload)) {
    why = "damaged: the ids' checksum does not match";
    return std::nullopt;
  }
  TokenArray out(map, map->data() + kCacheHeader, got.count, static_cast<int>(got.width));
  for (uint64_t i = 0; i < got.count; ++i) {
    const TokenId id = out[i];
    if (id < 0 || id >= static_cast<TokenId>(want.vocab)) {
      why = fmt::format("damaged: id {} at position {} is outside the vocabulary of {}", id, i, want.vocab);
      return std::nullopt;
    }
  }
  return out;
}

// Writes one part's ids as they come, then the header once the source's content hash is known.
class CacheWriter {
 public:
  CacheWriter(const std::string& path, const CacheHeader& header) : file_(path), header_(header) {
    file_.write(std::string(kCacheHeader, '\0'));
  }
  void add(const std::vector<TokenId>& ids) {
    buf_.clear();
    for (TokenId id : ids) {
      const auto v = static_cast<uint32_t>(id);
      buf_.push_back(static_cast<char>(v & 0xff));
      if (header_.width == 1) continue;
      buf_.push_back(static_cast<char>((v >> 8) & 0xff));
      if (header_.width == 4) {
        buf_.push_back(static_cast<char>((v >> 16) & 0xff));
        buf_.push_back(static_cast<char>((v >> 24) & 0xff));
      }
    }
    hash_.update(buf_);
    file_.write(buf_);
    header_.count += ids.size();
  }
  void commit(uint64_t content_hash) {
    std::string trailer;
    put_u64(trailer, hash_.finish());
    file_.write(trailer);
    header_.content_hash = content_hash;
    const std::string head = encode_header(header_);
    file_.write_at(0, head.data(), head.size());
    file_.commit();
  }

 private:
  AtomicFile file_;
  CacheHeader header_;
  Hash64Stream hash_;
  std::string buf_;
};

// One part of a source: its byte range and where its ids go (in order).
struct PassPart {
  uint64_t begin = 0, end = 0;
  std::function<void(const std::vector<TokenId>&)> sink;  // empty: only hash the bytes
};

// Reads the source once, in blocks, and returns its content hash (Hash64Stream). Each part with a
// sink is tokenized as described at the top of data.h: pieces of about chunk_bytes cut at cut
// points, up to one per thread encoded at a time.
uint64_t read_source(const Source& src, std::vector<PassPart>& parts, const Tokenizer& tok, bool allow_special,
                     const DataLoadOptions& opt) {
  const int fd = ::open(src.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_file(src.path, "{}: cannot open for reading: {}", src.path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const size_t chunk = std::max<size_t>(opt.chunk_bytes, 1);
  const bool cuts = tok.cuts_at_lines();
  const size_t threads = static_cast<size_t>(std::max(1, num_threads()));
  const size_t block = std::max<size_t>(size_t{1} << 20, chunk * threads);
  Hash64Stream hash;
  std::string buf(block, '\0'), carry;
  uint64_t carry_at = 0;  // file offset of carry[0]
  size_t part = 0;
  // Encodes the carried bytes of parts[part] that can be cut off (all of them when final).
  auto drain = [&](bool final) {
    std::vector<std::pair<size_t, size_t>> pieces;
    size_t pos = 0;
    while (pos < carry.size()) {
      const size_t rest = carry.size() - pos;
      size_t cut = std::string_view::npos;
      if (cuts && rest > chunk) cut = next_cut_point(carry, pos + chunk);
      if (cut == std::string_view::npos) {
        if (final) {
          pieces.emplace_back(pos, carry.size());
          pos = carry.size();
        }
        break;
      }
      pieces.emplace_back(pos, cut);
      pos = cut;
    }
    std::vector<std::vector<TokenId>> ids(pieces.size());
    auto encode = [&](int64_t i) {
      const auto [a, b] = pieces[static_cast<size_t>(i)];
      try {
        ids[static_cast<size_t>(i)] = tok.encode(std::string_view(carry).substr(a, b - a), allow_special);
      } catch (const Error& e) {
        throw e.with_context(fmt::format("{}: the piece at byte {}", src.path, carry_at + a));
      }
    };
    if (pieces.size() > 1) {
      // Errors are collected per piece and the first rethrown: an exception may not leave an
      // OpenMP region.
      std::vector<std::exception_ptr> errors(pieces.size());
      parallel_for(static_cast<int64_t>(pieces.size()), true, [&](int64_t i) {
        try {
          encode(i);
        } catch (...) {
          errors[static_cast<size_t>(i)] = std::current_exception();
        }
      });
      for (auto& e : errors)
        if (e) std::rethrow_exception(e);
    } else if (pieces.size() == 1) {
      encode(0);
    }
    for (const auto& v : ids) parts[part].sink(v);
    carry.erase(0, pos);
    carry_at += pos;
  };
  uint64_t off = 0;
  while (off < src.size) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(block, src.size - off));
    read_at(fd, src.path, buf.data(), want, off);
    const std::string_view got(buf.data(), want);
    hash.update(got);
    // Hand the block's bytes to the parts whose ranges it covers.
    uint64_t at = off;
    while (at < off + want && part < parts.size()) {
      PassPart& p = parts[part];
      if (at < p.begin) {
        at = std::min<uint64_t>(p.begin, off + want);
        continue;
      }
      const uint64_t upto = std::min<uint64_t>(p.end, off + want);
      if (p.sink) {
        if (carry.empty()) carry_at = at;
        carry.append(got.substr(at - off, upto - at));
      }
      at = upto;
      if (at == p.end) {
        if (p.sink) drain(true);
        ++part;
      } else if (p.sink) {
        drain(false);
      }
    }
    off += want;
    if (opt.progress) opt.progress(off, src.size);
  }
  // Parts that end where the source ends, reached in the last block, are drained above; an empty
  // part (begin == end) gets no ids at all.
  return hash.finish();
}

std::string describe(const std::string& path, uint64_t begin, uint64_t end, uint64_t n, size_t count, bool cached) {
  const std::string range =
      begin == 0 && end == n ? fmt::format("{} bytes", n) : fmt::format("bytes [{}, {}) of {}", begin, end, n);
  return fmt::format("{} {}, {} tokens{}", path, range, count, cached ? " (cached)" : "");
}

std::string human_bytes(uint64_t n) {
  if (n >= (uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(n) / (1 << 30));
  if (n >= (uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(n) / (1 << 20));
  return fmt::format("{} bytes", n);
}

// The parts of one source file, through the cache: every part's cache file is used when all are
// valid and the source's content hash (one read) matches theirs; otherwise all are tokenized again
// in one read.
struct PartOut {
  uint32_t role = 0;  // 0: the training part, 1: the validation part
  uint64_t begin = 0, end = 0;
  TokenArray* ids = nullptr;
  std::string* source = nullptr;
};

void load_source(const Source& src, std::vector<PartOut> outs, double val_fraction, const Tokenizer& tok,
                 uint64_t tok_hash, const std::string& cache_dir, bool allow_special, const DataLoadOptions& opt) {
  auto say = [&](const std::string& m) {
    if (opt.message) opt.message(m);
  };
  const int width = tok.vocab_size() <= 256 ? 1 : tok.vocab_size() <= 65536 ? 2 : 4;
  std::vector<CacheHeader> want(outs.size());
  std::vector<std::string> paths(outs.size());
  const bool cache = !cache_dir.empty();
  if (cache) {
    std::error_code ec;
    const std::string abs = std::filesystem::absolute(src.path, ec).lexically_normal().string();
    for (size_t i = 0; i < outs.size(); ++i) {
      std::string key_material = abs;
      uint64_t fraction_bits;
      std::memcpy(&fraction_bits, &val_fraction, 8);
      put_u64(key_material, tok_hash);
      put_u32(key_material, outs[i].role);
      put_u64(key_material, fraction_bits);
      put_u32(key_material, allow_special ? 1 : 0);
      put_u32(key_material, kCacheVersion);
      CacheHeader& h = want[i];
      h.key = hash64(key_material, 0x746f6b656e73ULL);
      h.width = static_cast<uint32_t>(width);
      h.source_size = src.size;
      h.source_mtime_ns = src.mtime_ns;
      h.tok_hash = tok_hash;
      h.begin = outs[i].begin;
      h.end = outs[i].end;
      h.allow_special = allow_special ? 1 : 0;
      h.vocab = static_cast<uint32_t>(tok.vocab_size());
      paths[i] = cache_file_name(cache_dir, h.key);
    }
    // Try the cache: every part's file valid, then one read for the content hash.
    std::vector<TokenArray> found;
    std::vector<uint64_t> hashes;
    for (size_t i = 0; i < outs.size(); ++i) {
      CacheHeader got;
      std::string why;
      auto ids = open_cache(paths[i], want[i], src, got, why);
      if (!ids) {
        if (!why.empty()) say(fmt::format("token cache {}: {}; tokenizing again", paths[i], why));
        break;
      }
      found.push_back(std::move(*ids));
      hashes.push_back(got.content_hash);
    }
    if (found.size() == outs.size()) {
      say(fmt::format("checking {} ({}) against its token cache", src.path, human_bytes(src.size)));
      std::vector<PassPart> none;
      const uint64_t h = read_source(src, none, tok, allow_special, opt);
      bool same = true;
      for (uint64_t x : hashes) same = same && x == h;
      if (same) {
        for (size_t i = 0; i < outs.size(); ++i) {
          *outs[i].ids = std::move(found[i]);
          *outs[i].source = describe(src.path, outs[i].begin, outs[i].end, src.size, outs[i].ids->size(), true);
        }
        return;
      }
      say(
          fmt::format("token cache {}: made from other contents of {} (same size and time, another hash); "
                      "tokenizing again",
                      paths[0], src.path));
    }
    std::filesystem::create_directories(cache_dir, ec);
    if (ec) fail_file(cache_dir, "{}: cannot create the token cache folder: {}", cache_dir, ec.message());
  }
  say(fmt::format("tokenizing {} ({})", src.path, human_bytes(src.size)));
  std::vector<std::unique_ptr<CacheWriter>> writers(outs.size());
  std::vector<std::vector<TokenId>> memory(outs.size());
  std::vector<PassPart> parts(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    parts[i].begin = outs[i].begin;
    parts[i].end = outs[i].end;
    if (cache) {
      writers[i] = std::make_unique<CacheWriter>(paths[i], want[i]);
      parts[i].sink = [w = writers[i].get()](const std::vector<TokenId>& ids) { w->add(ids); };
    } else {
      parts[i].sink = [m = &memory[i]](const std::vector<TokenId>& ids) {
        m->insert(m->end(), ids.begin(), ids.end());
      };
    }
  }
  const uint64_t h = read_source(src, parts, tok, allow_special, opt);
  for (size_t i = 0; i < outs.size(); ++i) {
    if (cache) {
      writers[i]->commit(h);
      writers[i].reset();
      CacheHeader got;
      std::string why;
      auto ids = open_cache(paths[i], want[i], src, got, why);
      if (!ids) fail_file(paths[i], "{}: the token cache just written cannot be read back: {}", paths[i], why);
      *outs[i].ids = std::move(*ids);
    } else {
      *outs[i].ids = TokenArray(std::move(memory[i]));
    }
    *outs[i].source = describe(src.path, outs[i].begin, outs[i].end, src.size, outs[i].ids->size(), false);
  }
}

}  // namespace

// ---- TokenArray ----------------------------------------------------------------------------------

TokenArray::TokenArray(std::vector<TokenId> ids) {
  auto owned = std::make_shared<std::vector<TokenId>>(std::move(ids));
  data_ = reinterpret_cast<const unsigned char*>(owned->data());
  size_ = owned->size();
  width_ = 4;
  owner_ = std::move(owned);
}

void TokenArray::copy_to(size_t begin, size_t n, TokenId* out) const {
  if (width_ == 4) {
    if (n) std::memcpy(out, data_ + 4 * begin, 4 * n);
    return;
  }
  for (size_t i = 0; i < n; ++i) out[i] = (*this)[begin + i];
}

std::vector<TokenId> TokenArray::to_vector() const {
  std::vector<TokenId> v(size_);
  copy_to(0, size_, v.data());
  return v;
}

size_t val_split_offset(std::string_view text, double val_fraction) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    fail_input("--val-fraction", "--val-fraction must be in [0, 1), got {}", val_fraction);
  const size_t n = text.size();
  if (val_fraction == 0.0) return n;
  auto cut = static_cast<size_t>(std::floor(static_cast<double>(n) * (1.0 - val_fraction)));
  if (cut > n) cut = n;
  for (int k = 0; k < 3 && cut < n && is_utf8_continuation(static_cast<unsigned char>(text[cut])); ++k) ++cut;
  return cut;
}

Dataset load_dataset(const std::string& data_path, const std::string& val_data_path, double val_fraction,
                     const Tokenizer& tok, const std::string& cache_dir, bool allow_special,
                     const DataLoadOptions& options) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    fail_input("--val-fraction", "--val-fraction must be in [0, 1), got {}", val_fraction);
  const uint64_t tok_hash = cache_dir.empty() ? 0 : hash64(tok.to_json().dump());
  Dataset d;
  const Source src = stat_source(data_path);
  if (!val_data_path.empty()) {
    const Source val = stat_source(val_data_path);
    // A separate validation file: each file whole, as the training part (role 0, no fraction).
    load_source(src, {{0, 0, src.size, &d.train, &d.train_source}}, 0.0, tok, tok_hash, cache_dir, allow_special,
                options);
    load_source(val, {{0, 0, val.size, &d.val, &d.val_source}}, 0.0, tok, tok_hash, cache_dir, allow_special, options);
    return d;
  }
  // The cut, from the (at most 4) bytes around it: the file is not read for it.
  uint64_t cut = src.size;
  if (val_fraction > 0.0) {
    cut = static_cast<uint64_t>(std::floor(static_cast<double>(src.size) * (1.0 - val_fraction)));
    if (cut > src.size) cut = src.size;
    const int fd = ::open(data_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail_file(data_path, "{}: cannot open for reading: {}", data_path, std::strerror(errno));
    unsigned char around[3];
    const uint64_t n = std::min<uint64_t>(3, src.size - cut);
    try {
      read_at(fd, data_path, around, n, cut);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    for (uint64_t k = 0; k < n && is_utf8_continuation(around[k]); ++k) ++cut;
  }
  std::vector<PartOut> outs{{0, 0, cut, &d.train, &d.train_source}};
  if (val_fraction > 0.0) outs.push_back({1, cut, src.size, &d.val, &d.val_source});
  load_source(src, outs, val_fraction, tok, tok_hash, cache_dir, allow_special, options);
  if (val_fraction == 0.0) d.val_source.clear();
  return d;
}

// ---- BatchSampler --------------------------------------------------------------------------------

BatchSampler::BatchSampler(const TokenArray& tokens, int64_t batch, int64_t context, uint64_t seed,
                           std::string split_name, const std::string& source)
    : tokens_(tokens), batch_(batch), context_(context), split_name_(std::move(split_name)), rng_(seed) {
  if (batch <= 0) fail_input("--batch", "--batch must be positive, got {}", batch);
  if (context <= 0) fail_input("--context", "--context must be positive, got {}", context);
  if (static_cast<int64_t>(tokens.size()) < context + 1)
    fail_input("--context", "the {} split{} has {} tokens; --context {} needs at least {}", split_name_,
               source.empty() ? "" : " (" + source + ")", tokens.size(), context, context + 1);
}

void BatchSampler::next(TokenId* inputs, TokenId* targets) {
  const auto n = static_cast<uint64_t>(tokens_.size());
  const auto T = static_cast<uint64_t>(context_);
  for (int64_t b = 0; b < batch_; ++b) {
    const uint64_t s = rng_.below(n - T);  // uniform in [0, n - T - 1]
    tokens_.copy_to(s, T, inputs + b * context_);
    tokens_.copy_to(s + 1, T, targets + b * context_);
  }
}

// ---- metrics.jsonl -------------------------------------------------------------------------------

void append_metrics(const std::string& path, const nlohmann::ordered_json& record) {
  append_file(path, record.dump() + "\n");
}

void truncate_metrics_after(const std::string& path, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  const std::string text = read_file(path);
  std::string kept;
  size_t start = 0;
  int64_t line_no = 0;
  while (start < text.size()) {
    const size_t nl = text.find('\n', start);
    const bool finished = nl != std::string::npos;
    const std::string_view line = std::string_view(text).substr(start, (finished ? nl : text.size()) - start);
    start = finished ? nl + 1 : text.size();
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) {
      if (!finished) break;  // the unfinished last line of a run that died while writing it
      fail_file(path, "{}:{}: not a JSON object", path, line_no);
    }
    const auto it = record.find("step");
    if (it != record.end() && it->is_number() && it->get<double>() > static_cast<double>(step)) continue;
    kept.append(line);
    kept.push_back('\n');
  }
  write_file_atomic(path, kept);
}

}  // namespace tformer
