// What the GGUF reader and writer share (not part of the interface).
#pragma once

#include <cstdint>

#include "io/gguf.h"

namespace tformer::gguf_detail {

inline constexpr uint64_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS

// Bytes a scalar of type t takes on disk; 0 for string, array and unknown types.
inline uint64_t scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8:
    case GgufType::I8:
    case GgufType::Bool:
      return 1;
    case GgufType::U16:
    case GgufType::I16:
      return 2;
    case GgufType::U32:
    case GgufType::I32:
    case GgufType::F32:
      return 4;
    case GgufType::U64:
    case GgufType::I64:
    case GgufType::F64:
      return 8;
    default:
      return 0;
  }
}

inline bool is_float(GgufType t) { return t == GgufType::F32 || t == GgufType::F64; }
inline uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

}  // namespace tformer::gguf_detail
