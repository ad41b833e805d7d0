// Tiled exact attention (FlashAttention's algorithm on the CPU): the same function as the
// reference attention (kernels/attention.h), computed without materialising the n_q x n_kv score
// matrix. Same views, shape and mask; same policies:
//   * a key slot past kv_len or marked padding is never read, forward or backward; a causally
//     future slot is skipped with its whole key block, except inside the diagonal tile, where it
//     is loaded and gets exactly zero weight (it holds a real key of the same chunk there; unlike
//     the reference, a NaN planted in such a slot would propagate as 0 * NaN);
//   * a query row with no allowed key gives a zero output and a zero gradient (never NaN), and its
//     log-sum-exp is -infinity;
//   * a NaN score among a row's allowed keys (a NaN or infinite q or k), or a +infinite one, makes
//     that row's output and log-sum-exp NaN, as torch's softmax does (never zero weights);
//   * the backward ACCUMULATES (+=) into dq, dk, dv; dk and dv have the kv heads' shape
//     [B, n_kv, n_kv_heads, hd] and sum over each kv head's group of query heads (GQA/MQA read the
//     shared K/V head in place, no copies).
//
// The forward saves one number per query row instead of the probabilities: the log-sum-exp of the
// row's scaled scores, lse_i = log sum_j exp(q_i . k_j / sqrt(hd)) over the allowed j, laid out
// contiguous [B, n_heads, n_q]. The backward recomputes the probabilities tile by tile from q, k
// and lse (P_ij = exp(S_ij - lse_i)).
//
// Results do not depend on the number of threads (every output element is computed by one thread
// in a fixed order; the decode split uses a fixed chunk size and merges in chunk order).
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace tformer {

// out: [B, n_q, n_heads, hd] view (written). lse: contiguous [B, n_heads, n_q] (written; may be
// null when no backward follows).
template <typename T>
void flash_attention_forward(HeadsView<T> out, T* lse, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                             const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop = {});

// Accumulates dq, dk, dv (+=) from dout, the forward's out and lse (both required), q, k, v; with
// the forward's dropout (same key, threshold and scale).
template <typename T>
void flash_attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout,
                              HeadsView<const T> out, const T* lse, HeadsView<const T> q, HeadsView<const T> k,
                              HeadsView<const T> v, const AttentionShape& s, const AttentionMask& m,
                              const AttentionDropout& drop = {});

// The bytes the kernels allocate themselves for this shape with `threads` threads (per-thread
// tiles, the decode path's partial states); the caller's lse array ([B, n_heads, n_q] T's) is
// not included. For benchmarks' memory accounting, without dropout (with dropout a one-row call
// takes the general path, whose tiles this does not count for n_q = 1).
int64_t flash_attention_workspace_bytes(const AttentionShape& s, int64_t elem_size, int threads, bool backward);

// Grows the scratch that the forward takes for itself to what a one-row (decode) call of shape s
// needs (its partial states scale with n_kv), so that later decode calls with at most s.batch
// sequences and s.n_kv keys allocate nothing. The other buffers have fixed sizes and grow on the
// first call.
template <typename T>
void flash_attention_reserve(const AttentionShape& s);

}  // namespace tformer
