// Training data: a text file tokenized once (and cached), split into train and validation tokens,
// and random windows drawn from them for each batch; plus the metrics log (metrics.jsonl).
//
// The split. With a separate validation file, train = every token of the data file and val = every
// token of the validation file. Otherwise --val-fraction f takes the LAST f of the data file: its n
// bytes are cut at floor(n * (1 - f)), moved forward past any UTF-8 continuation bytes (at most 3) so
// no character is cut in two, and the two parts are tokenized separately. For a char tokenizer this
// is nanoGPT's shakespeare_char split (data[:int(n*0.9)], data[int(n*0.9):]). f = 0: no validation
// tokens. A split too short for one window is not an error here; BatchSampler reports it.
//
//   "abcdefghij", f = 0.1  ->  train "abcdefghi", val "j"
//   "abcdefgh\xC3\xA9", f = 0.1: floor(10 * 0.9) = 9 falls inside "é"  ->  train "abcdefgh\xC3\xA9", val ""
//
// The token cache. Each part's tokens are written to CACHE_DIR/tokens-<16 hex digits>.bin, the digits
// being a 64-bit key that hashes the source file's absolute path, the tokenizer's JSON form, which
// part it is (training or validation) of which --val-fraction, and allow_special. The file records what it was made
// from: the source's size, modification time and content hash, and the tokenizer's identity. A later load reads it
// (memory-mapped: a corpus larger than memory trains in bounded memory) when all of that still matches and the file is
// whole; otherwise it says why ("made from 1003854 bytes of data.txt, which now has 1003900", "damaged: the ids'
// checksum does not match") through the message callback and tokenizes again. A file damaged in any way (short, long,
// wrong magic, version, width, key, count or either checksum, an id outside the vocabulary) is never used. Format,
// little-endian throughout:
//
//   offset  size     field
//   0       8        magic "TFTOKENS"
//   8       4        u32 version (2)
//   12      4        u32 bytes per id: the fewest that hold every id of the vocabulary, 1 (at most
//                    256 ids: the char tokenizer), 2 (at most 65,536: GPT-2's) or 4
//   16      8        u64 key (the file name's digits)
//   24      8        u64 count of ids
//   32      8        u64 source size in bytes
//   40      8        i64 source modification time, nanoseconds since 1970
//   48      8        u64 source content hash (Hash64Stream, core/hash.h, of the whole file)
//   56      8        u64 tokenizer hash (hash64 of its JSON form)
//   64      8        u64 begin, 72 u64 end: the part's bytes [begin, end) of the source
//   80      4        u32 allow_special (0 or 1), 84 u32 vocabulary size
//   88      8        u64 header checksum: hash64 of bytes [0, 88)
//   96      w*count  the ids, u8, u16 or u32
//   96+w*c  8        u64 ids' checksum: Hash64Stream of the id bytes
//
// Streaming. The source is read once, in blocks, whether the parts are tokenized or only checked
// against a cache (its content hash): a part is cut into pieces of about chunk_bytes at the
// tokenizer's cut points (next_cut_point, tokenizer.h: the pieces encode to exactly the ids of the
// whole part), up to one piece per thread is encoded at a time in parallel, and the ids go straight
// to the cache file. Memory therefore stays near threads x chunk_bytes x 10, plus the stretch
// between two cut points (a tokenizer without cuts_at_lines(), SentencePiece, encodes each part
// whole). Without a cache folder the ids are kept in memory.
//
// BatchSampler: row b of a batch is a window starting at s uniform in [0, n - context - 1] (Rng, one
// draw per row in row order): inputs[b*T + t] = tokens[s + t], targets[b*T + t] = tokens[s + t + 1].
// Its RNG state is the data position a checkpoint saves.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/types.h"
#include "tokenizer/tokenizer.h"

namespace tformer {

// Token ids stored as 1-, 2- or 4-byte little-endian integers: owned, or a view into a memory-mapped
// token cache that the array keeps open. Copies share the storage.
class TokenArray {
 public:
  TokenArray() = default;
  TokenArray(std::vector<TokenId> ids);  // NOLINT(google-explicit-constructor): ids in memory, 4 bytes each
  // width 1, 2 or 4; owner keeps data alive.
  TokenArray(std::shared_ptr<const void> owner, const unsigned char* data, size_t count, int width)
      : owner_(std::move(owner)), data_(data), size_(count), width_(width) {}
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int width() const { return width_; }
  // The stored bytes (size() x width(), little-endian).
  std::string_view bytes() const { return {reinterpret_cast<const char*>(data_), size_ * static_cast<size_t>(width_)}; }
  TokenId operator[](size_t i) const {
    if (width_ == 1) return static_cast<TokenId>(data_[i]);
    if (width_ == 2) {
      uint16_t v;
      std::memcpy(&v, data_ + 2 * i, 2);
      return static_cast<TokenId>(v);
    }
    int32_t v;
    std::memcpy(&v, data_ + 4 * i, 4);
    return static_cast<TokenId>(v);
  }
  // ids [begin, begin + n) into out.
  void copy_to(size_t begin, size_t n, TokenId* out) const;
  std::vector<TokenId> to_vector() const;
  friend bool operator==(const TokenArray& a, const std::vector<TokenId>& b) { return a.to_vector() == b; }
  friend bool operator==(const TokenArray& a, const TokenArray& b) { return a.to_vector() == b.to_vector(); }

 private:
  std::shared_ptr<const void> owner_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
  int width_ = 4;
};

// How load_dataset reports and paces its work.
struct DataLoadOptions {
  size_t chunk_bytes = size_t{1} << 20;  // the pieces tokenized in parallel (see the top of this file)
  // Why a cache file is not used, and what is tokenized ("tokenizing data.txt (1.1 MB)").
  std::function<void(const std::string&)> message;
  // Bytes of the source read so far, of total; called after each block.
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct Dataset {
  TokenArray train, val;
  // Where each part came from, for the log: "data.txt bytes [0, 1003854) of 1115394, 1003854 tokens
  // (cached)"; val_source is empty when there is no validation split.
  std::string train_source, val_source;
};

// Loads and tokenizes the training data (see the top of this file). val_data_path "" = take the
// validation tokens from the end of data_path by val_fraction, which must be in [0, 1).
// cache_dir "" = no cache; otherwise the folder is created when missing. Errors name the file: a file
// that cannot be read, an empty file, a cache file that cannot be written.
Dataset load_dataset(const std::string& data_path, const std::string& val_data_path, double val_fraction,
                     const Tokenizer& tok, const std::string& cache_dir, bool allow_special = false,
                     const DataLoadOptions& options = {});

// The byte where --val-fraction f cuts a text: floor(size * (1 - f)), then forward past at most 3
// UTF-8 continuation bytes (10xxxxxx). f in [0, 1).
size_t val_split_offset(std::string_view text, double val_fraction);

class BatchSampler {
 public:
  // The sampler shares the tokens' storage. Throws Error when tokens.size() < context + 1:
  // "the validation split (F bytes [90, 100) of 100, 40 tokens) has 40 tokens; --context 64 needs
  // at least 65" (split_name "validation", source the Dataset's description; "" leaves it out).
  BatchSampler(const TokenArray& tokens, int64_t batch, int64_t context, uint64_t seed, std::string split_name,
               const std::string& source = "");

  // Fills inputs and targets, each (batch, context).
  void next(TokenId* inputs, TokenId* targets);

  // The RNG state: after set_state(state()) the batches continue exactly as they would have.
  std::array<uint64_t, 4> state() const { return rng_.state(); }
  void set_state(const std::array<uint64_t, 4>& s) { rng_.set_state(s); }

  int64_t batch() const { return batch_; }
  int64_t context() const { return context_; }
  const std::string& split_name() const { return split_name_; }

 private:
  TokenArray tokens_;
  int64_t batch_, context_;
  std::string split_name_;
  Rng rng_;
};

// Appends one JSON object as one line to path (created when missing) and flushes it.
// Keys stay in insertion order ("step" first).
void append_metrics(const std::string& path, const nlohmann::ordered_json& record);
// Keeps only the lines whose "step" is <= step (lines without a numeric "step" are kept), rewriting
// the file atomically; used on --resume so the log does not repeat steps. A missing file is fine. An
// unfinished last line (no newline: the run died while writing it) is dropped; any other line that is
// not JSON is an error naming the file and line.
void truncate_metrics_after(const std::string& path, int64_t step);

}  // namespace tformer
