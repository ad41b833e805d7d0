// Tensor views: a pointer into a contiguous buffer plus a shape, with row-major strides derived
// from the shape. A view never owns memory; Buffer<T> (below) and Arena (arena.h) own it.
//
//   Buffer<float> x({2, 3});         // owns 6 floats, zero-initialised
//   TensorView<float> v = x.view();  // v(1, 2) is element 5
//   auto row = v.slice0(1);          // shape {3}, points at element 3
#pragma once

#include "core/aligned.h"
#include "core/error.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <string>
#include <vector>

namespace tformer {

inline constexpr int kMaxDims = 5;

// A shape of up to kMaxDims dimensions; every extent >= 0.
class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    TF_CHECK(dims.size() <= kMaxDims, "a shape has at most {} dimensions, got {}", kMaxDims, dims.size());
    for (int64_t d : dims) push(d);
  }
  static Shape of(const std::vector<int64_t>& dims) {
    Shape s;
    TF_CHECK(dims.size() <= kMaxDims, "a shape has at most {} dimensions, got {}", kMaxDims, dims.size());
    for (int64_t d : dims) s.push(d);
    return s;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    TF_CHECK(i >= 0 && i < rank_, "dimension {} of a rank-{} shape", i, rank_);
    return dims_[i];
  }
  // The extents, outermost first.
  std::vector<int64_t> dims() const { return std::vector<int64_t>(dims_.begin(), dims_.begin() + rank_); }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  // Row-major stride of dimension i (elements).
  int64_t stride(int i) const {
    int64_t s = 1;
    for (int j = rank_ - 1; j > i; --j) s *= dims_[j];
    return s;
  }
  bool operator==(const Shape& o) const {
    return rank_ == o.rank_ && std::equal(dims_.begin(), dims_.begin() + rank_, o.dims_.begin());
  }
  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
    return s + "]";
  }
  Shape drop_first() const {
    Shape s;
    for (int i = 1; i < rank_; ++i) s.push(dims_[i]);
    return s;
  }

 private:
  void push(int64_t d) {
    TF_CHECK(d >= 0, "negative extent {} in a shape", d);
    dims_[rank_++] = d;
  }
  std::array<int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

template <typename T>
class TensorView {
 public:
  TensorView() = default;
  TensorView(T* data, Shape shape) : data_(data), shape_(shape) {}

  T* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t numel() const { return shape_.numel(); }
  T* begin() const { return data_; }
  T* end() const { return data_ + numel(); }

  // Element access with bounds checks on every index (for tests and cold paths; kernels use data()).
  template <typename... I>
  T& operator()(I... idx) const {
    const int64_t ids[] = {static_cast<int64_t>(idx)...};
    TF_CHECK(static_cast<int>(sizeof...(I)) == rank(), "{} indices into a rank-{} tensor", sizeof...(I), rank());
    int64_t off = 0;
    for (int i = 0; i < rank(); ++i) {
      TF_CHECK(ids[i] >= 0 && ids[i] < shape_[i], "index {} out of range for dimension {} of shape {}", ids[i], i,
               shape_.str());
      off = off * shape_[i] + ids[i];
    }
    return data_[off];
  }
  // The sub-tensor at index i of the first dimension.
  TensorView slice0(int64_t i) const {
    TF_CHECK(rank() >= 1 && i >= 0 && i < shape_[0], "slice {} of shape {}", i, shape_.str());
    Shape rest = shape_.drop_first();
    return TensorView(data_ + i * rest.numel(), rest);
  }
  TensorView reshape(Shape s) const {
    TF_CHECK(s.numel() == numel(), "cannot reshape {} to {}", shape_.str(), s.str());
    return TensorView(data_, s);
  }
  operator TensorView<const T>() const { return TensorView<const T>(data_, shape_); }

 private:
  T* data_ = nullptr;
  Shape shape_;
};

// An owning, zero-initialised, 64-byte aligned buffer with a shape.
template <typename T>
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(Shape shape) : shape_(shape), storage_(static_cast<size_t>(shape.numel())) {}
  Buffer(Shape shape, const std::vector<T>& values) : shape_(shape), storage_(values.begin(), values.end()) {
    TF_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), "{} values for shape {}", values.size(),
             shape.str());
  }
  TensorView<T> view() { return TensorView<T>(storage_.data(), shape_); }
  TensorView<const T> view() const { return TensorView<const T>(storage_.data(), shape_); }
  T* data() { return storage_.data(); }
  const T* data() const { return storage_.data(); }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }
  using Storage = std::vector<T, AlignedAllocator<T>>;
  Storage& values() { return storage_; }
  const Storage& values() const { return storage_; }

 private:
  Shape shape_;
  std::vector<T, AlignedAllocator<T>> storage_;
};

}  // namespace tformer
