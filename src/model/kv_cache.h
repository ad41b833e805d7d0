// The KV cache: per layer, keys and values laid out [batch][n_kv_heads][capacity][head_dim]. Slot
// j of a sequence holds the token at ABSOLUTE position j; keys are stored after RoPE, exactly as the
// uncached pass computes them. Each sequence has its own length (the number of filled slots), so a
// query chunk knows its absolute offset: the next token of sequence b goes to slot length(b).
//
// Payload bytes: 2 (keys and values) x layers x batch x kv_heads x tokens x head_dim x 4 (float32),
// where tokens is the capacity for the allocation (payload_bytes()) or the filled slots (used_bytes()).
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned.h"
#include "kernels/attention.h"

namespace tformer {

template <typename T>
class BasicKVCache {
 public:
  BasicKVCache() = default;
  BasicKVCache(int64_t n_layers, int64_t batch, int64_t n_kv_heads, int64_t capacity, int64_t head_dim);

  int64_t n_layers() const { return n_layers_; }
  int64_t batch() const { return batch_; }
  int64_t n_kv_heads() const { return n_kv_heads_; }
  int64_t capacity() const { return capacity_; }
  int64_t head_dim() const { return head_dim_; }

  // Filled slots of sequence b (= the absolute position of its next token).
  int64_t length(int64_t b) const { return length_.at(static_cast<size_t>(b)); }
  const std::vector<int64_t>& lengths() const { return length_; }
  // Marks n more slots of sequence b as filled (after a forward wrote them). Checks capacity.
  void advance(int64_t b, int64_t n);
  // Forgets every sequence's tokens (the storage is kept).
  void reset();
  // Forgets sequence b's tokens only (a server's slot, freed for the next request).
  void clear(int64_t b);
  // Sequence `to` becomes a copy of sequence `from`: its filled slots, every layer, and its length
  // (a server's n samples of one prompt share its prefill).
  void copy_sequence(int64_t from, int64_t to);

  // Keys / values of one layer, as a [batch, capacity, kv_heads, head_dim] view over the
  // [batch][kv_heads][capacity][head_dim] storage.
  HeadsView<T> keys(int64_t layer);
  HeadsView<T> values(int64_t layer);

  // 2 x layers x batch x kv_heads x capacity x head_dim x sizeof(T)
  int64_t payload_bytes() const;
  // The same formula with the filled slots in place of the capacity (sum over sequences).
  int64_t used_bytes() const;
  // What the cache's key and value arrays hold, measured from the arrays themselves (their
  // elements times the element's size), not from the formula: the check that the formula is right.
  int64_t allocated_bytes() const;
  static constexpr int64_t kEntryBytes = static_cast<int64_t>(sizeof(T));

 private:
  int64_t n_layers_ = 0, batch_ = 0, n_kv_heads_ = 0, capacity_ = 0, head_dim_ = 0;
  std::vector<T, AlignedAllocator<T>> k_, v_;
  std::vector<int64_t> length_;
};

using KVCache = BasicKVCache<float>;

}  // namespace tformer
