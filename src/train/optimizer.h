// The optimizer side of training: AdamW over the parameter arena, the weight-decay rule, global
// gradient-norm clipping and the learning-rate schedule. Every function works on whole arenas
// (core/arena.h): parameters, gradients and the two moments share one layout, so each update is one
// pass over one buffer.
//
//   AdamW opt(model.params(), AdamWConfig{});            // m and v mirror the parameters, zeroed
//   for (int64_t it = 0; it < n_steps; ++it) {
//     ... forward + backward into grads (same layout as the parameters) ...
//     const double norm = clip_grad_norm(grads, 1.0);     // the norm before clipping, for the log
//     opt.step(model.params(), grads, learning_rate(schedule, it));
//   }
//
// Numbers follow PyTorch exactly (checked against torch.optim.AdamW and
// torch.nn.utils.clip_grad_norm_ by tests/test_train_optimizer.cpp on the fixtures of
// tools/reference/gen_train_fixtures.py). Results never depend on the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"

namespace tformer {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; applied only to tensors adamw_decays() selects
};

// THE weight-decay rule. A tensor decays when it is a matrix (rank >= 2): every linear weight,
// output.weight and tok_embeddings.weight (which is also the output projection when embeddings are
// tied) -- EXCEPT pos_embeddings.weight, a learned position table that decay would only pull
// towards zero. Rank-1 tensors never decay: norm gains, norm biases, linear biases. (nanoGPT decays
// its position table too; llm.c and most later recipes do not. We do not.)
//   adamw_decays("layers.0.attn.wq.weight", {8, 8}) == true
//   adamw_decays("layers.0.attn.wq.bias", {8})      == false
//   adamw_decays("pos_embeddings.weight", {16, 8})  == false
bool adamw_decays(const std::string& tensor_name, const Shape& shape);

// AdamW (Loshchilov & Hutter), exactly torch.optim.AdamW's update. With t the step count after
// incrementing, for every element of every tensor (lr is the step's learning rate):
//   p *= 1 - lr * weight_decay                     (only when adamw_decays(name, shape))
//   m  = beta1 m + (1 - beta1) g
//   v  = beta2 v + (1 - beta2) g^2
//   denom = sqrt(v) / sqrt(1 - beta2^t) + eps
//   p -= (lr / (1 - beta1^t)) m / denom
// Elements are float; the per-step scalars are computed in double and rounded once. The moments m
// and v are arenas mirroring the parameters (exposed so a checkpoint can save and restore them,
// together with steps()).
class AdamW {
 public:
  // Mirrors the parameter arena's layout (m and v zero, steps() == 0) and validates the config:
  // betas in [0, 1), eps > 0, weight_decay >= 0.
  AdamW(const Arena& params, AdamWConfig cfg);
  // Sharded from the start (ZeRO-1, shard() below): only the moments of [begin, end) are ever
  // allocated.
  AdamW(const Arena& params, AdamWConfig cfg, int64_t shard_begin, int64_t shard_end);

  // One update. params and grads must have the layout the optimizer was built for (checked: same
  // tensors, shapes and offsets); lr >= 0. Increments steps() first, then updates every tensor.
  // Allocates nothing; parallel over fixed-size pieces of the buffer.
  void step(Arena& params, const Arena& grads, double lr);

  // Updates done so far (torch's state["step"]). set_steps restores it when resuming (n >= 0).
  int64_t steps() const { return steps_; }
  void set_steps(int64_t n);

  Arena& m() { return m_; }  // first moment, torch's exp_avg (not allocated while sharded)
  Arena& v() { return v_; }  // second moment, torch's exp_avg_sq

  // ZeRO-1 (docs/distributed.md): keep and update only the elements [begin, end) of the buffer.
  // The moments of that range move into shard storage and the full m() and v() are freed; step()
  // then updates params in [begin, end) alone (the rest is some other process's). unshard()
  // allocates m() and v() again, zero, with the shard copied in (a checkpoint's gather fills the
  // rest); shard() after a load takes the range again.
  void shard(int64_t begin, int64_t end);
  void unshard();
  bool sharded() const { return sharded_; }
  int64_t shard_begin() const { return shard_begin_; }
  int64_t shard_end() const { return shard_end_; }
  float* shard_m() { return m_shard_.data(); }  // [shard_end - shard_begin]
  float* shard_v() { return v_shard_.data(); }
  const AdamWConfig& config() const { return cfg_; }

 private:
  // A piece of one tensor: elements [begin, end) of the buffer, at most kPiece long.
  struct Piece {
    int64_t begin;
    int64_t end;
    bool decays;
  };
  void check_layout(const Arena& a, const char* what) const;
  void init(const Arena& params, bool allocate);

  AdamWConfig cfg_;
  int64_t steps_ = 0;
  Arena m_;
  Arena v_;
  std::vector<Piece> pieces_;  // padding between tensors is never touched
  bool sharded_ = false;
  int64_t shard_begin_ = 0, shard_end_ = 0;
  std::vector<float> m_shard_, v_shard_;
};

// The global norm is summed over pieces of this many elements (aligned to the buffer's start): a
// process holding pieces [a, b) of a sharded gradient computes their sums exactly as one process
// does (norm_piece_sums), and the sums added in piece order give global_grad_norm's value.
constexpr int64_t kNormPiece = int64_t(1) << 14;
// out[k - first] = the sum of squares of piece k of g (elements [k kNormPiece, (k+1) kNormPiece)
// within [0, n)), for k in [first, last).
void norm_piece_sums(const float* g, int64_t n, int64_t first, int64_t last, double* out);

// sqrt of the sum of the squares of every gradient element (alignment padding is zero and adds
// nothing), accumulated in double: fixed pieces of the buffer are each summed in order, then the
// piece sums are added in order, so the value is the same bit for bit for any thread count.
double global_grad_norm(const Arena& grads);

// torch.nn.utils.clip_grad_norm_: returns the global norm BEFORE clipping; when max_norm > 0 and
// norm > max_norm, multiplies every gradient by max_norm / (norm + 1e-6). max_norm <= 0 turns
// clipping off (the norm is still returned). A non-finite norm is returned as it is and nothing is
// scaled. (torch scales whenever max_norm / (norm + 1e-6) < 1, i.e. also for a norm within 1e-6
// below max_norm, by a factor within 1e-6 / max_norm of 1; the difference is immaterial.)
double clip_grad_norm(Arena& grads, double max_norm);

// The learning-rate schedule: linear warmup, then cosine decay to min_lr (nanoGPT's get_lr).
struct LrSchedule {
  double lr = 1e-3;            // peak, reached at the end of warmup
  double min_lr = 1e-4;        // floor, from decay_steps on
  int64_t warmup = 100;        // warmup iterations
  int64_t decay_steps = 2000;  // the iteration where the cosine reaches min_lr
};

// The rate for iteration `step` (counted from 0: the iteration about to run), step >= 0:
//   step <  warmup                 lr * (step + 1) / (warmup + 1)
//   step >  decay_steps            min_lr
//   otherwise                      min_lr + 0.5 (1 + cos(pi r)) (lr - min_lr),
//                                  r = (step - warmup) / (decay_steps - warmup)
// so step == warmup gives lr and step == decay_steps gives min_lr. When decay_steps <= warmup there
// is no cosine: lr at step == warmup == decay_steps, min_lr for every step >= warmup beyond
// decay_steps (never a division by zero). warmup must be >= 0.
double learning_rate(const LrSchedule& schedule, int64_t step);

}  // namespace tformer
