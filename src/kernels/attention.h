// Scaled dot-product attention, the plain reference: it materialises every score, and it is the
// oracle for every faster attention kernel.
//
//   out[b, i, h, :] = sum_j P[b, h, i, j] * v[b, j, g(h), :]
//   P[b, h, i, :]   = softmax_j( q[b, i, h, :] . k[b, j, g(h), :] / sqrt(head_dim) ) over ALLOWED j
//   g(h) = h / (n_heads / n_kv_heads)   (MHA: n_kv_heads = n_heads; GQA; MQA: n_kv_heads = 1)
//
// The mask has one meaning (true = the query may read the key), applied to the scores before
// softmax; see AttentionMask::allowed. A query row with no allowed key returns zeros, and its
// gradient is zero: never NaN. A NaN (or +infinite) score among a row's allowed keys makes the row
// NaN, as torch's softmax does. A disallowed key slot is never read (forward or backward), so
// empty or padded cache slots may hold anything, NaN included.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/dropout.h"

namespace tformer {

// A [batch, time, heads, head_dim] tensor with head_dim contiguous and explicit strides for the
// other three, so the same kernel reads projections laid out [B, T, H, hd] and a KV cache laid
// out [B, H, capacity, hd]. With `seq`, sequence b of a call is sequence seq[b] of the storage
// (a KV cache's slots: a server's batch is the sequences that run this step, wherever they live).
template <typename T>
struct HeadsView {
  T* data = nullptr;
  int64_t stride_b = 0, stride_t = 0, stride_h = 0;
  const int64_t* seq = nullptr;  // null: sequence b is storage sequence b
  T* at(int64_t b, int64_t t, int64_t h) const {
    return data + (seq ? seq[b] : b) * stride_b + t * stride_t + h * stride_h;
  }
  operator HeadsView<const T>() const requires(!std::is_const_v<T>) {
    return {data, stride_b, stride_t, stride_h, seq};
  }
};

// Contiguous [B, T, H, hd] layout.
template <typename T>
HeadsView<T> heads_btHd(T* data, int64_t T_, int64_t H, int64_t hd) {
  return {data, T_ * H * hd, H * hd, hd};
}
// Contiguous [B, H, T, hd] layout (the KV cache's).
template <typename T>
HeadsView<T> heads_bHTd(T* data, int64_t T_, int64_t H, int64_t hd) {
  return {data, H * T_ * hd, hd, T_ * hd};
}

struct AttentionShape {
  int64_t batch = 1;
  int64_t n_q = 1;         // query rows per sequence in this call (a chunk)
  int64_t n_kv = 1;        // key/value slots per sequence (cache index j = absolute position j)
  int64_t n_heads = 1;     // query heads
  int64_t n_kv_heads = 1;  // key/value heads; divides n_heads
  int64_t head_dim = 1;
};

// allowed(b, i, j): may query row i of sequence b read key slot j?
//   causal:      j <= q_offset[b] + i   (the query's ABSOLUTE position; q_offset is the number of
//                                        tokens already cached before this chunk)
//   key length:  j <  kv_len[b]         (slots past a sequence's length are empty)
//   key valid:   key_valid[b * n_kv + j] != 0   (0 = padding)
// Null pointers mean: offset 0, every slot filled, every key valid.
struct AttentionMask {
  bool causal = true;
  const int64_t* q_offset = nullptr;   // [batch]
  const int64_t* kv_len = nullptr;     // [batch]
  const uint8_t* key_valid = nullptr;  // [batch, n_kv], 1 = a real token, 0 = padding
  int64_t n_kv = 0;                    // row stride of key_valid (set to AttentionShape::n_kv)

  bool allowed(int64_t b, int64_t i, int64_t j) const {
    if (causal && j > (q_offset ? q_offset[b] : 0) + i) return false;
    if (kv_len && j >= kv_len[b]) return false;
    if (key_valid && key_valid[b * n_kv + j] == 0) return false;
    return true;
  }
};

// Dropout on the attention probabilities (training): with P the softmax, the output is
// sum_j P'_ij v_j with P'_ij = P_ij * scale when element (b, h, i, j) is kept and 0 otherwise:
// the mask's index of that element is ((b * n_heads + h) * n_q + i) * n_kv + j. Both kernels (this
// reference and the tiled one) make the same decision for the same key. The saved probabilities
// (and the tiled kernel's log-sum-exp) stay the undropped softmax's; the backward regenerates the
// mask from the key instead of storing it.
using AttentionDropout = DropoutMask;

// Checks the shape (positive sizes, n_kv_heads divides n_heads, mask strides) and throws Error.
void validate(const AttentionShape& s, const AttentionMask& m);

// out: [B, n_q, n_heads, hd] view; probs: saved P, contiguous [B, n_heads, n_q, n_kv] (written;
// masked entries are exactly 0; undropped). probs may be null when no backward follows
// (inference). drop: dropout on the probabilities as they weight the values.
template <typename T>
void attention_forward(HeadsView<T> out, T* probs, HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v,
                       const AttentionShape& s, const AttentionMask& m, const AttentionDropout& drop = {});

// Accumulates dq, dk, dv (+=) from dout and the saved probs (required). dk and dv have the kv
// heads' shape [B, n_kv, n_kv_heads, hd]: a kv head's gradient sums over its group of query heads.
// drop: the forward's dropout (same key, threshold and scale).
template <typename T>
void attention_backward(HeadsView<T> dq, HeadsView<T> dk, HeadsView<T> dv, HeadsView<const T> dout, const T* probs,
                        HeadsView<const T> q, HeadsView<const T> k, HeadsView<const T> v, const AttentionShape& s,
                        const AttentionMask& m, const AttentionDropout& drop = {});

// Grows every pool thread's scratch to what a forward of shape s (or any with fewer keys) takes,
// so that later calls allocate nothing.
template <typename T>
void attention_reserve(const AttentionShape& s);

}  // namespace tformer
