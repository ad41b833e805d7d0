// Embedding lookup (a row gather) and its gradient (a row scatter-add), side by side.
#include "kernels/embedding.h"

#include "core/error.h"
#include "core/threads.h"

#include <algorithm>

namespace tformer {

namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;
constexpr int64_t kColumnBlock = 64;

// Every id is checked before any work, so an exception never leaves an OpenMP region and a bad
// id leaves the outputs untouched.
void check_ids(const char* what, const TokenId* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= vocab)
      fail_input(fmt::format("position {}", i), "{}: id {} at position {} is outside [0, {})", what, ids[i], i, vocab);
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const TokenId* ids, const T* table, int64_t n, int64_t vocab, int64_t d) {
  check_ids("embedding_forward", ids, n, vocab);
  parallel_for(n, n * d > kParallelElements,
               [&](int64_t i) { std::copy_n(table + int64_t(ids[i]) * d, d, out + i * d); });
}

// Forward: out[i, :] = table[ids[i], :].
// Backward: dtable[v, :] += sum over positions i with ids[i] == v of dout[i, :]. Repeated ids write
// the same row, so threads split the COLUMNS (never the positions); every element is summed in
// position order 0..n-1 by one thread, the same for any thread count.
template <typename T>
void embedding_backward(T* dtable, const T* dout, const TokenId* ids, int64_t n, int64_t vocab, int64_t d) {
  check_ids("embedding_backward", ids, n, vocab);
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
  parallel_for(blocks, n * d > kParallelElements, [&](int64_t blk) {
    const int64_t j0 = blk * kColumnBlock, j1 = std::min(d, j0 + kColumnBlock);
    for (int64_t i = 0; i < n; ++i) {
      T* row = dtable + int64_t(ids[i]) * d;
      const T* g = dout + i * d;
      for (int64_t j = j0; j < j1; ++j) row[j] += g[j];
    }
  });
}

template void embedding_forward<float>(float*, const TokenId*, const float*, int64_t, int64_t, int64_t);
template void embedding_forward<double>(double*, const TokenId*, const double*, int64_t, int64_t, int64_t);
template void embedding_backward<float>(float*, const float*, const TokenId*, int64_t, int64_t, int64_t);
template void embedding_backward<double>(double*, const double*, const TokenId*, int64_t, int64_t, int64_t);

}  // namespace tformer
