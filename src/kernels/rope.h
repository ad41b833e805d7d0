// Rotary position embedding (Su et al., RoFormer), applied in place to queries or keys.
//
// For a head of width hd, pair i (0 <= i < hd/2) rotates by angle pos * theta_i with
// theta_i = base^(-2i/hd). Positions are explicit absolute integers, so a cached chunk passes
// the positions it really has (a query at absolute position 100 is rotated by 100, not by 0).
// Two pairings are in use and are NOT interchangeable when loading weights:
//   Adjacent (RoFormer paper, GPT-J):   coordinates (2i, 2i+1)
//   Halves   (GPT-NeoX, Llama):         coordinates (i, i + hd/2)
// Rotation (x_a, x_b) -> (x_a cos - x_b sin, x_a sin + x_b cos). The backward is the rotation by
// the opposite angle (the transpose), so rope_backward rotates the gradient in place.
#pragma once

#include <cstdint>

namespace tformer {

enum class RopePairing { Adjacent, Halves };

struct RopeParams {
  int64_t head_dim = 0;  // even
  double base = 10000.0;
  RopePairing pairing = RopePairing::Adjacent;
};

// x: n_tokens rows, each holding n_heads vectors of head_dim; row r starts at x + r * row_stride
// and head h at + h * head_dim. positions: [n_tokens] absolute positions (>= 0).
template <typename T>
void rope_forward(T* x, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t row_stride,
                  const RopeParams& p);
// dx <- R(-angle) dx, in place: the gradient with respect to the un-rotated input.
template <typename T>
void rope_backward(T* dx, const int64_t* positions, int64_t n_tokens, int64_t n_heads, int64_t row_stride,
                   const RopeParams& p);

}  // namespace tformer
