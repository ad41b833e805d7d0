#include "train/data.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
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
constexpr uint32_t kCacheVersion = 1;
constexpr size_t kCacheHeader = 32;

std::string cache_file_name(const std::string& cache_dir, uint64_t key) {
  return (std::filesystem::path(cache_dir) / fmt::format("tokens-{:016x}.bin", key)).string();
}

std::string encode_cache(uint64_t key, const std::vector<TokenId>& ids) {
  std::string out(kCacheMagic, sizeof kCacheMagic);
  put_u32(out, kCacheVersion);
  put_u32(out, 4);
  put_u64(out, key);
  put_u64(out, ids.size());
  const size_t payload_at = out.size();
  out.reserve(out.size() + 4 * ids.size() + 8);
  for (TokenId id : ids) put_u32(out, static_cast<uint32_t>(id));
  put_u64(out, hash64(std::string_view(out).substr(payload_at)));
  return out;
}

// The ids of a cache file, or nullopt when it is missing or damaged in any way.
std::optional<std::vector<TokenId>> read_cache(const std::string& path, uint64_t key, int64_t vocab_size) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::string bytes;
  try {
    bytes = read_file(path);
  } catch (const Error&) {
    return std::nullopt;
  }
  const std::string_view s(bytes);
  if (s.size() < kCacheHeader + 8) return std::nullopt;
  if (std::memcmp(s.data(), kCacheMagic, sizeof kCacheMagic) != 0) return std::nullopt;
  if (get_u32(s, 8) != kCacheVersion || get_u32(s, 12) != 4 || get_u64(s, 16) != key) return std::nullopt;
  const uint64_t count = get_u64(s, 24);
  if (count > (s.size() - kCacheHeader - 8) / 4 || kCacheHeader + 4 * count + 8 != s.size()) return std::nullopt;
  const std::string_view payload = s.substr(kCacheHeader, 4 * count);
  if (hash64(payload) != get_u64(s, kCacheHeader + 4 * count)) return std::nullopt;
  std::vector<TokenId> ids(count);
  for (uint64_t i = 0; i < count; ++i) {
    const auto id = static_cast<TokenId>(get_u32(payload, 4 * i));
    if (id < 0 || id >= vocab_size) return std::nullopt;
    ids[i] = id;
  }
  return ids;
}

struct Part {
  std::vector<TokenId> ids;
  bool cached = false;
};

// Tokenizes text[begin, end) of a file whose whole-content hash is content_hash, through the cache.
Part tokenize_part(std::string_view text, size_t begin, size_t end, uint64_t content_hash, uint64_t tok_hash,
                   const Tokenizer& tok, const std::string& cache_dir, bool allow_special) {
  Part part;
  const std::string_view piece = text.substr(begin, end - begin);
  if (cache_dir.empty()) {
    part.ids = tok.encode(piece, allow_special);
    return part;
  }
  std::string key_material;
  put_u64(key_material, content_hash);
  put_u64(key_material, text.size());
  put_u64(key_material, tok_hash);
  put_u64(key_material, begin);
  put_u64(key_material, end);
  put_u32(key_material, allow_special ? 1 : 0);
  put_u32(key_material, kCacheVersion);
  const uint64_t key = hash64(key_material, 0x746f6b656e73ULL);
  const std::string path = cache_file_name(cache_dir, key);
  if (auto ids = read_cache(path, key, tok.vocab_size())) {
    part.ids = std::move(*ids);
    part.cached = true;
    return part;
  }
  part.ids = tok.encode(piece, allow_special);
  std::error_code ec;
  std::filesystem::create_directories(cache_dir, ec);
  if (ec) fail_file(cache_dir, "{}: cannot create the token cache folder: {}", cache_dir, ec.message());
  write_file_atomic(path, encode_cache(key, part.ids));
  return part;
}

std::string describe(const std::string& path, size_t begin, size_t end, size_t n, const Part& part) {
  const std::string range =
      begin == 0 && end == n ? fmt::format("{} bytes", n) : fmt::format("bytes [{}, {}) of {}", begin, end, n);
  return fmt::format("{} {}, {} tokens{}", path, range, part.ids.size(), part.cached ? " (cached)" : "");
}

std::string read_nonempty(const std::string& path) {
  std::string text = read_file(path);
  if (text.empty()) fail_file(path, "{}: empty file", path);
  return text;
}

}  // namespace

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
                     const Tokenizer& tok, const std::string& cache_dir, bool allow_special) {
  if (!(val_fraction >= 0.0 && val_fraction < 1.0))
    fail_input("--val-fraction", "--val-fraction must be in [0, 1), got {}", val_fraction);
  // The hashes only key the cache.
  const bool cache = !cache_dir.empty();
  const uint64_t tok_hash = cache ? hash64(tok.to_json().dump()) : 0;
  Dataset d;
  const std::string text = read_nonempty(data_path);
  const uint64_t text_hash = cache ? hash64(text) : 0;
  if (!val_data_path.empty()) {
    Part train = tokenize_part(text, 0, text.size(), text_hash, tok_hash, tok, cache_dir, allow_special);
    d.train_source = describe(data_path, 0, text.size(), text.size(), train);
    d.train = std::move(train.ids);
    const std::string val_text = read_nonempty(val_data_path);
    Part val = tokenize_part(val_text, 0, val_text.size(), cache ? hash64(val_text) : 0, tok_hash, tok, cache_dir,
                             allow_special);
    d.val_source = describe(val_data_path, 0, val_text.size(), val_text.size(), val);
    d.val = std::move(val.ids);
    return d;
  }
  const size_t cut = val_split_offset(text, val_fraction);
  Part train = tokenize_part(text, 0, cut, text_hash, tok_hash, tok, cache_dir, allow_special);
  d.train_source = describe(data_path, 0, cut, text.size(), train);
  d.train = std::move(train.ids);
  if (val_fraction > 0.0) {
    Part val = tokenize_part(text, cut, text.size(), text_hash, tok_hash, tok, cache_dir, allow_special);
    d.val_source = describe(data_path, cut, text.size(), text.size(), val);
    d.val = std::move(val.ids);
  }
  return d;
}

// ---- BatchSampler --------------------------------------------------------------------------------

BatchSampler::BatchSampler(const std::vector<TokenId>& tokens, int64_t batch, int64_t context, uint64_t seed,
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
    const TokenId* src = tokens_.data() + s;
    std::memcpy(inputs + b * context_, src, T * sizeof(TokenId));
    std::memcpy(targets + b * context_, src + 1, T * sizeof(TokenId));
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
