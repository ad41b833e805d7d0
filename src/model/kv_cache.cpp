#include "model/kv_cache.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "core/memory.h"

namespace tformer {

template <typename T>
BasicKVCache<T>::BasicKVCache(int64_t n_layers, int64_t batch, int64_t n_kv_heads, int64_t capacity, int64_t head_dim)
    : n_layers_(n_layers), batch_(batch), n_kv_heads_(n_kv_heads), capacity_(capacity), head_dim_(head_dim) {
  TF_CHECK(n_layers > 0 && batch > 0 && n_kv_heads > 0 && capacity > 0 && head_dim > 0,
           "KV cache: sizes must be positive (layers {}, batch {}, kv heads {}, capacity {}, head_dim {})", n_layers,
           batch, n_kv_heads, capacity, head_dim);
  const auto n = static_cast<size_t>(n_layers * batch * n_kv_heads * capacity * head_dim);
  // Backed by 2 MB pages where the system has them (advised before the zeros touch them): decode
  // reads every filled slot of every layer a token.
  assign_on_huge_pages(k_, n, T(0));
  assign_on_huge_pages(v_, n, T(0));
  length_.assign(static_cast<size_t>(batch), 0);
}

template <typename T>
void BasicKVCache<T>::advance(int64_t b, int64_t n) {
  TF_CHECK(b >= 0 && b < batch_, "KV cache: sequence {} of a batch of {}", b, batch_);
  TF_CHECK(n >= 0 && length_[b] + n <= capacity_, "KV cache: sequence {} would hold {} tokens; capacity is {}", b,
           length_[b] + n, capacity_);
  length_[b] += n;
}

template <typename T>
void BasicKVCache<T>::clear(int64_t b) {
  TF_CHECK(b >= 0 && b < batch_, "KV cache: sequence {} of {}", b, batch_);
  length_[static_cast<size_t>(b)] = 0;
}

template <typename T>
void BasicKVCache<T>::copy_sequence(int64_t from, int64_t to) {
  TF_CHECK(from >= 0 && from < batch_ && to >= 0 && to < batch_, "KV cache: sequences {} and {} of {}", from, to,
           batch_);
  if (from == to) return;
  const auto n = static_cast<size_t>(length_[static_cast<size_t>(from)] * head_dim_);
  for (int64_t l = 0; l < n_layers_; ++l)
    for (int64_t h = 0; h < n_kv_heads_; ++h) {
      const auto at = [&](int64_t b) {
        return static_cast<size_t>(((l * batch_ + b) * n_kv_heads_ + h) * capacity_ * head_dim_);
      };
      std::copy_n(k_.begin() + static_cast<std::ptrdiff_t>(at(from)), n,
                  k_.begin() + static_cast<std::ptrdiff_t>(at(to)));
      std::copy_n(v_.begin() + static_cast<std::ptrdiff_t>(at(from)), n,
                  v_.begin() + static_cast<std::ptrdiff_t>(at(to)));
    }
  length_[static_cast<size_t>(to)] = length_[static_cast<size_t>(from)];
}

template <typename T>
void BasicKVCache<T>::reset() {
  std::fill(length_.begin(), length_.end(), 0);
}

template <typename T>
HeadsView<T> BasicKVCache<T>::keys(int64_t layer) {
  TF_CHECK(layer >= 0 && layer < n_layers_, "KV cache: layer {} of {}", layer, n_layers_);
  return heads_bHTd(k_.data() + layer * batch_ * n_kv_heads_ * capacity_ * head_dim_, capacity_, n_kv_heads_,
                    head_dim_);
}

template <typename T>
HeadsView<T> BasicKVCache<T>::values(int64_t layer) {
  TF_CHECK(layer >= 0 && layer < n_layers_, "KV cache: layer {} of {}", layer, n_layers_);
  return heads_bHTd(v_.data() + layer * batch_ * n_kv_heads_ * capacity_ * head_dim_, capacity_, n_kv_heads_,
                    head_dim_);
}

template <typename T>
int64_t BasicKVCache<T>::payload_bytes() const {
  return 2 * n_layers_ * batch_ * n_kv_heads_ * capacity_ * head_dim_ * kEntryBytes;
}

template <typename T>
int64_t BasicKVCache<T>::used_bytes() const {
  const int64_t tokens = std::accumulate(length_.begin(), length_.end(), int64_t{0});
  return 2 * n_layers_ * n_kv_heads_ * tokens * head_dim_ * kEntryBytes;
}

template <typename T>
int64_t BasicKVCache<T>::allocated_bytes() const {
  // From the arrays themselves (their length and element type), not the formula above.
  return static_cast<int64_t>((k_.size() + v_.size()) * sizeof(typename decltype(k_)::value_type));
}

template class BasicKVCache<float>;
template class BasicKVCache<double>;

}  // namespace tformer
