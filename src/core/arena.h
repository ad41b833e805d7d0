// An arena: one contiguous, 64-byte aligned buffer carved into named tensor views. Parameters,
// gradients and optimizer moments each live in one arena, so the optimizer is one loop over
// one buffer and a checkpoint is the list of views.
//
//   Arena params;
//   params.add("tok_embeddings.weight", {vocab, d_model});
//   params.add("norm.weight", {d_model});
//   params.allocate();                      // one allocation for all of them, zeroed
//   TensorView<float> w = params.get("norm.weight");
#pragma once

#include "core/memory.h"
#include "core/tensor.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tformer {

template <typename T>
class BasicArena {
 public:
  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset;  // elements from the arena's start; a multiple of kAlignment / sizeof(T)
  };

  // Declares a tensor. All declarations come before allocate().
  void add(std::string name, Shape shape) {
    TF_CHECK(storage_.empty(), "arena: add('{}') after allocate()", name);
    TF_CHECK(!index_.contains(name), "arena: tensor '{}' declared twice", name);
    const int64_t align = static_cast<int64_t>(kAlignment / sizeof(T));
    size_ = (size_ + align - 1) / align * align;
    index_[name] = entries_.size();
    entries_.push_back({std::move(name), shape, size_});
    size_ += shape.numel();
  }
  // One allocation for every declared tensor, zero, backed by 2 MB pages where the system has them
  // (core/memory.h): fresh pages from the system, not written here, so a tensor nobody writes (a
  // matrix an inference-only load keeps only in its stored type) costs no memory.
  void allocate() {
    if (!storage_.empty()) {  // allocated already: zeroed again, as a fresh one is
      zero();
      return;
    }
    release();  // (room kept from before would hold old values: fresh pages are the zeros)
    reserve_on_huge_pages(storage_, static_cast<size_t>(size_));
    storage_.resize(static_cast<size_t>(size_));
  }
  // Frees the storage, keeping the layout (allocate() brings it back, zeroed).
  void release() {
    storage_.clear();
    storage_.shrink_to_fit();
  }
  bool allocated() const { return static_cast<int64_t>(storage_.size()) == size_; }
  // Same layout as another arena (a gradient or moment arena beside the parameters).
  void mirror(const BasicArena& other) {
    mirror_layout(other);
    allocate();
  }
  // The layout alone, nothing allocated (allocate() later).
  void mirror_layout(const BasicArena& other) {
    TF_CHECK(entries_.empty(), "arena: mirror() into a non-empty arena");
    entries_ = other.entries_;
    index_ = other.index_;
    size_ = other.size_;
  }

  bool contains(std::string_view name) const { return index_.contains(std::string(name)); }
  // The entry named `name`, or nullptr.
  const Entry* find(std::string_view name) const {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : &entries_[it->second];
  }
  TensorView<T> get(std::string_view name) {
    auto it = index_.find(std::string(name));
    if (it == index_.end()) fail_input(name, "arena: no tensor named '{}'", name);
    const Entry& e = entries_[it->second];
    return TensorView<T>(storage_.data() + e.offset, e.shape);
  }
  const std::vector<Entry>& entries() const { return entries_; }
  TensorView<T> view(const Entry& e) { return TensorView<T>(storage_.data() + e.offset, e.shape); }
  T* data() { return storage_.data(); }
  const T* data() const { return storage_.data(); }
  // Elements including alignment padding (padding stays zero).
  int64_t size() const { return size_; }
  void zero() { std::fill(storage_.begin(), storage_.end(), T(0)); }

 private:
  std::vector<Entry> entries_;
  std::unordered_map<std::string, size_t> index_;
  int64_t size_ = 0;
  std::vector<T, ZeroedPagesAllocator<T>> storage_;
};

using Arena = BasicArena<float>;

}  // namespace tformer
