// Cross-entropy over next-token targets.
//
// A language model reads tokens t[0..T-1] and is scored against targets t[1..T]: position p
// predicts the token after it. shift_targets builds those targets; rows whose target equals
// ignore_index (padding) are not counted. The loss is the MEAN over counted rows; with no
// counted row it is 0 and the gradient is 0.
#pragma once

#include "core/types.h"

#include <cstdint>

namespace tformer {

inline constexpr TokenId kIgnoreIndex = -100;

struct CrossEntropyResult {
  double loss = 0;    // mean over counted rows
  int64_t count = 0;  // rows whose target is not ignore_index
};

// tokens: [batch, T+1]; targets: [batch, T] with targets[b][t] = tokens[b][t+1], except that a
// target equal to pad_id (when pad_id >= 0) becomes ignore_index.
void shift_targets(TokenId* targets, const TokenId* tokens, int64_t batch, int64_t T, TokenId pad_id = -1,
                   TokenId ignore_index = kIgnoreIndex);

// logits: [rows, vocab]; targets: [rows]. A counted target outside [0, vocab) throws Error naming
// the row. row_loss (optional, [rows]) receives each row's -log p(target), 0 for ignored rows.
template <typename T>
CrossEntropyResult cross_entropy_forward(T* row_loss, const T* logits, const TokenId* targets, int64_t rows,
                                         int64_t vocab, TokenId ignore_index = kIgnoreIndex);
// dlogits += dloss * (softmax(logits) - onehot(target)) / count for counted rows.
template <typename T>
void cross_entropy_backward(T* dlogits, const T* logits, const TokenId* targets, int64_t rows, int64_t vocab,
                            int64_t count, T dloss = T(1), TokenId ignore_index = kIgnoreIndex);

}  // namespace tformer
