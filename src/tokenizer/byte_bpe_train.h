// Training a byte-level BPE vocabulary (GPT-2's kind) on a corpus, in numbered steps:
//  1. Cut the corpus into pieces with the chosen pre-tokenizer pattern (gpt2_pretokenize.h: GPT-2's
//     by default, or cl100k_base's, o200k_base's, llama.cpp's default chain) and count each
//     distinct piece (64-bit counts). Merges never cross a piece boundary. The trained tokenizer
//     carries the pattern (its JSON "pattern"), so that it encodes as it was trained.
//  2. Every piece starts as its bytes. Ids 0..255 are the bytes in GPT-2's order (the order of
//     bytes_to_unicode: '!'..'~', 0xA1..0xAC, 0xAE..0xFF, then the rest), as in GPT-2's encoder.json.
//  3. Count adjacent pairs: a pair occurring k times in a piece seen f times counts k * f
//     (overlapping occurrences each count: "aaa" has (a, a) twice).
//  4. Repeatedly take the most frequent pair; a tie goes to the smaller (left id, right id). Its
//     concatenation becomes token 256 + (number of merges so far), and every piece replaces its
//     occurrences left to right, without overlap. Only the pieces that contain the pair are
//     touched (an index from pair to pieces; a max-heap whose stale entries are skipped).
//     If the concatenation is already a token (made by another pair, e.g. "ab"+"c" after
//     "a"+"bc"), no new token is made: the pieces just use the existing one, as encoding would.
//  5. Stop when the vocabulary (bytes + merges + <|endoftext|>) reaches vocab_size, or when no
//     pair occurs at least min_frequency times. <|endoftext|> takes the id after the last merge.
//
// Worked example: corpus "ab ab ab abc" -> pieces "ab" x1, " ab" x2, " abc" x1. Pair counts:
// (a, b) 4, (' ', a) 3, (b, c) 1 -> merge a+b = 256 ("ab"). Then (' ', ab) 3, (ab, c) 1 -> merge
// ' '+ab = 257 (" ab"). In GPT-2's byte ids ('a' = 64, 'b' = 65, ' ' = 220) the merges are
// [64 65] and [220 256]; with vocab_size 259, <|endoftext|> is 258.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "tokenizer/byte_bpe.h"

namespace tformer {

// One merge as it is made (for progress output).
struct ByteBpeMergeStep {
  size_t number;                // 1 for the first merge
  TokenId left, right, merged;  // merged: the new token's id
  const std::string& bytes;     // the new token's bytes
  int64_t count;                // occurrences of (left, right) when it was chosen
};

struct ByteBpeTrainOptions {
  int64_t vocab_size = 50257;                                           // bytes (256) + merges + <|endoftext|>
  int64_t min_frequency = 2;                                            // a pair seen fewer times is never merged
  ByteBpeTokenizer::Pattern pattern = ByteBpeTokenizer::Pattern::Gpt2;  // the pre-tokenizer of step 1
  std::function<void(const ByteBpeMergeStep&)> on_merge = nullptr;      // called after each merge when set
};

ByteBpeTokenizer train_byte_bpe(std::string_view corpus, const ByteBpeTrainOptions& options);

// GPT-2's byte order: the byte of id i in GPT-2's encoder.json.
std::array<unsigned char, 256> gpt2_byte_order();

}  // namespace tformer
