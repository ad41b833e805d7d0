// Embedding lookup: out[i, :] = table[ids[i], :]. Its gradient is a scatter-add: a row used by
// several positions receives the sum of their gradients.
#pragma once

#include <cstdint>

#include "core/types.h"

namespace tformer {

// out: [n, d]; ids: [n]; table: [vocab, d]. An id outside [0, vocab) throws Error naming the
// position and the id.
template <typename T>
void embedding_forward(T* out, const TokenId* ids, const T* table, int64_t n, int64_t vocab, int64_t d);
// dtable[ids[i], :] += dout[i, :]  (correct for repeated ids)
template <typename T>
void embedding_backward(T* dtable, const T* dout, const TokenId* ids, int64_t n, int64_t vocab, int64_t d);

}  // namespace tformer
