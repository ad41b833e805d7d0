// Grouped-query attention from a multi-head (or a wider grouped) checkpoint: Ainslie et al. (2023),
// "GQA: Training Generalized Multi-Query Transformer Models from Multi-Head Checkpoints".
//
// With n_kv source key/value heads and K target ones (K divides n_kv), target head j stands for
// the source heads j*g .. j*g + g - 1, g = n_kv / K (the query heads that read them are the same
// ones before and after: query head h reads kv head h / (n_heads / n_kv), then h / (n_heads / K)).
// In every layer:
//   KvPool::Mean   wk's rows of target head j (and wk's bias) are the mean of those g heads' rows,
//                  row by row within the head (row r of the new head = mean of row r of each);
//                  likewise wv. The paper's recipe.
//   KvPool::First  target head j is a copy of the group's first head (the paper's other baseline).
// Everything else (queries, output projection, norms, feed-forward, embeddings) is copied; the
// config changes only in n_kv_heads. Pooling row r across heads is the same operation under either
// RoPE pairing (the rotation acts on the same rows of every head), so RoPE needs nothing more.
//
// Worked example (d_model 4, 4 heads of width 1, n_kv 4 -> K 2, Mean): wk rows [a; b; c; d] become
// [(a+b)/2; (c+d)/2]; query heads 0, 1 read the first and 2, 3 the second. With First: [a; c].
// When the heads of each group are identical, the converted model computes exactly what the
// original did (up to float rounding of the mean).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "model/model.h"

namespace tformer {

enum class KvPool { Mean, First };
KvPool parse_kv_pool(const std::string& s);  // "mean" | "first"; Error naming --pool otherwise
const char* to_string(KvPool p);

// The converted model. Throws Error (BadInput, naming --kv-heads with n_heads and n_kv_heads) when
// K < 1, K > n_kv_heads or K does not divide n_kv_heads.
std::unique_ptr<Model> convert_kv_heads(Model& source, int64_t kv_heads, KvPool pool);

}  // namespace tformer
