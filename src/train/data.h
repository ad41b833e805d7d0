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
// being a 64-bit key that hashes the file's content, the tokenizer's JSON form, the part's byte range
// and allow_special; a later load with the same inputs reads the file instead of tokenizing. A cache
// file that is damaged in any way (short, wrong magic, version, key, count or checksum, an id outside
// the vocabulary) is ignored and rewritten. Format, little-endian throughout:
//
//   offset  size     field
//   0       8        magic "TFTOKENS"
//   8       4        u32 version (1)
//   12      4        u32 bytes per id (4)
//   16      8        u64 key (the file name's digits)
//   24      8        u64 count of ids
//   32      4*count  i32 ids
//   32+4c   8        u64 hash64 (core/hash.h) of the id bytes
//
// BatchSampler: row b of a batch is a window starting at s uniform in [0, n - context - 1] (Rng, one
// draw per row in row order): inputs[b*T + t] = tokens[s + t], targets[b*T + t] = tokens[s + t + 1].
// Its RNG state is the data position a checkpoint saves.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "core/types.h"
#include "tokenizer/tokenizer.h"

namespace tformer {

struct Dataset {
  std::vector<TokenId> train, val;
  // Where each part came from, for the log: "data.txt bytes [0, 1003854) of 1115394, 1003854 tokens
  // (cached)"; val_source is empty when there is no validation split.
  std::string train_source, val_source;
};

// Loads and tokenizes the training data (see the top of this file). val_data_path "" = take the
// validation tokens from the end of data_path by val_fraction, which must be in [0, 1).
// cache_dir "" = no cache; otherwise the folder is created when missing. Errors name the file: a file
// that cannot be read, an empty file, a cache file that cannot be written.
Dataset load_dataset(const std::string& data_path, const std::string& val_data_path, double val_fraction,
                     const Tokenizer& tok, const std::string& cache_dir, bool allow_special = false);

// The byte where --val-fraction f cuts a text: floor(size * (1 - f)), then forward past at most 3
// UTF-8 continuation bytes (10xxxxxx). f in [0, 1).
size_t val_split_offset(std::string_view text, double val_fraction);

class BatchSampler {
 public:
  // tokens must outlive the sampler (it keeps a view). Throws Error when tokens.size() < context + 1:
  // "the validation split (F bytes [90, 100) of 100, 40 tokens) has 40 tokens; --context 64 needs
  // at least 65" (split_name "validation", source the Dataset's description; "" leaves it out).
  BatchSampler(const std::vector<TokenId>& tokens, int64_t batch, int64_t context, uint64_t seed,
               std::string split_name, const std::string& source = "");

  // Fills inputs and targets, each (batch, context).
  void next(TokenId* inputs, TokenId* targets);

  // The RNG state: after set_state(state()) the batches continue exactly as they would have.
  std::array<uint64_t, 4> state() const { return rng_.state(); }
  void set_state(const std::array<uint64_t, 4>& s) { rng_.set_state(s); }

  int64_t batch() const { return batch_; }
  int64_t context() const { return context_; }
  const std::string& split_name() const { return split_name_; }

 private:
  std::span<const TokenId> tokens_;
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
