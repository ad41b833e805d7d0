// Cross-entropy over next-token targets: target shifting, the loss (forward) and its gradient
// with respect to the logits (backward), side by side.
//
// Each row's log-sum-exp is accumulated in double (max-shifted, so exp never overflows); each row
// is computed by one thread and the row losses are summed serially in row order, so the loss does
// not depend on the thread count.
#include "kernels/cross_entropy.h"

#include "core/scratch.h"

#include "core/error.h"
#include "core/threads.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tformer {

namespace {

constexpr int64_t kParallelElements = int64_t(1) << 15;

// Throws for a counted target outside [0, vocab); checked before any parallel work.
void check_targets(const char* what, const TokenId* targets, int64_t rows, int64_t vocab, TokenId ignore_index) {
  for (int64_t r = 0; r < rows; ++r) {
    const TokenId t = targets[r];
    if (t == ignore_index) continue;
    if (t < 0 || t >= vocab)
      fail_input(fmt::format("row {}", r), "{}: target {} in row {} is outside [0, {})", what, t, r, vocab);
  }
}

// Maximum of one row and its log-sum-exp, both in double. A row of all -inf logits has
// log-sum-exp -inf (and a loss of +inf for any target: the model gives it probability 0).
template <typename T>
void row_lse(const T* x, int64_t vocab, double& m, double& lse) {
  m = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < vocab; ++j) m = std::max(m, static_cast<double>(x[j]));
  if (m == -std::numeric_limits<double>::infinity()) {
    lse = m;
    return;
  }
  double s = 0;
  for (int64_t j = 0; j < vocab; ++j) s += std::exp(static_cast<double>(x[j]) - m);
  lse = m + std::log(s);
}

}  // namespace

void shift_targets(TokenId* targets, const TokenId* tokens, int64_t batch, int64_t T, TokenId pad_id,
                   TokenId ignore_index) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < T; ++t) {
      const TokenId next = tokens[b * (T + 1) + t + 1];
      targets[b * T + t] = (pad_id >= 0 && next == pad_id) ? ignore_index : next;
    }
}

template <typename T>
CrossEntropyResult cross_entropy_forward(T* row_loss, const T* logits, const TokenId* targets, int64_t rows,
                                         int64_t vocab, TokenId ignore_index) {
  check_targets("cross_entropy_forward", targets, rows, vocab, ignore_index);
  ScratchBuffer<double> losses(0, static_cast<size_t>(rows));  // [rows], reused: no allocation per step
  parallel_for(rows, rows * vocab > kParallelElements, [&](int64_t r) {
    if (targets[r] == ignore_index) return;
    const T* x = logits + r * vocab;
    double m, lse;
    row_lse(x, vocab, m, lse);
    losses[r] = lse - static_cast<double>(x[targets[r]]);  // -log softmax(x)[target]
  });
  CrossEntropyResult result;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (row_loss) row_loss[r] = static_cast<T>(losses[r]);
    if (targets[r] == ignore_index) continue;
    total += losses[r];
    ++result.count;
  }
  result.loss = result.count > 0 ? total / static_cast<double>(result.count) : 0.0;
  return result;
}

// Forward: loss = (1/count) sum over counted rows r of (lse(x_r) - x_r[t_r]), lse = log sum_j exp(x_rj).
// d lse/dx_rj = softmax(x_r)_j, so dlogits_rj += dloss * (softmax(x_r)_j - [j == t_r]) / count for
// counted rows; ignored rows and count <= 0 contribute nothing.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const TokenId* targets, int64_t rows, int64_t vocab,
                            int64_t count, T dloss, TokenId ignore_index) {
  check_targets("cross_entropy_backward", targets, rows, vocab, ignore_index);
  if (count <= 0) return;
  const double scale = static_cast<double>(dloss) / static_cast<double>(count);
  parallel_for(rows, rows * vocab > kParallelElements, [&](int64_t r) {
    if (targets[r] == ignore_index) return;
    const T* x = logits + r * vocab;
    T* dx = dlogits + r * vocab;
    double m, lse;
    row_lse(x, vocab, m, lse);
    if (lse == -std::numeric_limits<double>::infinity()) return;  // no finite logit: no defined gradient
    for (int64_t j = 0; j < vocab; ++j) {
      const double p = std::exp(static_cast<double>(x[j]) - lse);
      const double onehot = j == targets[r] ? 1.0 : 0.0;
      dx[j] = static_cast<T>(static_cast<double>(dx[j]) + scale * (p - onehot));
    }
  });
}

template CrossEntropyResult cross_entropy_forward<float>(float*, const float*, const TokenId*, int64_t, int64_t,
                                                         TokenId);
template CrossEntropyResult cross_entropy_forward<double>(double*, const double*, const TokenId*, int64_t, int64_t,
                                                          TokenId);
template void cross_entropy_backward<float>(float*, const float*, const TokenId*, int64_t, int64_t, int64_t, float,
                                            TokenId);
template void cross_entropy_backward<double>(double*, const double*, const TokenId*, int64_t, int64_t, int64_t, double,
                                             TokenId);

}  // namespace tformer
