// AdamW, gradient clipping and the learning-rate schedule (optimizer.h has the contracts). Work is
// split into fixed pieces of at most kPiece elements, chosen without looking at the thread count;
// each piece is computed by one thread in one order, so results are identical for any number of
// threads.
#include "train/optimizer.h"

#include "core/scratch.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "core/threads.h"

namespace tformer {

namespace {

constexpr int64_t kPiece = int64_t(1) << 14;             // elements per piece of work
constexpr int64_t kParallelElements = int64_t(1) << 15;  // below this, one thread

// Arena has no const data(); reading through the non-const accessor of an object we never write
// is well defined.
const float* const_data(const Arena& a) { return const_cast<Arena&>(a).data(); }

}  // namespace

bool adamw_decays(const std::string& tensor_name, const Shape& shape) {
  return shape.rank() >= 2 && tensor_name != "pos_embeddings.weight";
}

// ---------------------------------------------------------------------------------------------
// AdamW

AdamW::AdamW(const Arena& params, AdamWConfig cfg, int64_t shard_begin, int64_t shard_end) : cfg_(cfg) {
  TF_CHECK(0 <= shard_begin && shard_begin <= shard_end && shard_end <= params.size(),
           "adamw: shard [{}, {}) of {} elements", shard_begin, shard_end, params.size());
  init(params, /*allocate=*/false);
  shard_begin_ = shard_begin;
  shard_end_ = shard_end;
  m_shard_.assign(static_cast<size_t>(shard_end - shard_begin), 0.0f);
  v_shard_.assign(static_cast<size_t>(shard_end - shard_begin), 0.0f);
  sharded_ = true;
}

AdamW::AdamW(const Arena& params, AdamWConfig cfg) : cfg_(cfg) { init(params, /*allocate=*/true); }

void AdamW::init(const Arena& params, bool allocate) {
  TF_CHECK(cfg_.beta1 >= 0 && cfg_.beta1 < 1, "adamw: beta1 must be in [0, 1), got {}", cfg_.beta1);
  TF_CHECK(cfg_.beta2 >= 0 && cfg_.beta2 < 1, "adamw: beta2 must be in [0, 1), got {}", cfg_.beta2);
  TF_CHECK(cfg_.eps > 0 && std::isfinite(cfg_.eps), "adamw: eps must be > 0, got {}", cfg_.eps);
  TF_CHECK(cfg_.weight_decay >= 0 && std::isfinite(cfg_.weight_decay), "adamw: weight_decay must be >= 0, got {}",
           cfg_.weight_decay);
  m_.mirror_layout(params);
  v_.mirror_layout(params);
  if (allocate) {
    m_.allocate();
    v_.allocate();
  }
  for (const Arena::Entry& e : params.entries()) {
    const bool decays = adamw_decays(e.name, e.shape);
    const int64_t end = e.offset + e.shape.numel();
    for (int64_t b = e.offset; b < end; b += kPiece) pieces_.push_back({b, std::min(b + kPiece, end), decays});
  }
}

void AdamW::shard(int64_t begin, int64_t end) {
  TF_CHECK(!sharded_ && m_.allocated(), "adamw: shard() of a sharded optimizer");
  TF_CHECK(0 <= begin && begin <= end && end <= m_.size(), "adamw: shard [{}, {}) of {} elements", begin, end,
           m_.size());
  shard_begin_ = begin;
  shard_end_ = end;
  m_shard_.assign(m_.data() + begin, m_.data() + end);
  v_shard_.assign(v_.data() + begin, v_.data() + end);
  m_.release();
  v_.release();
  sharded_ = true;
}

void AdamW::unshard() {
  TF_CHECK(sharded_, "adamw: unshard() of an optimizer that is not sharded");
  m_.allocate();
  v_.allocate();
  std::copy(m_shard_.begin(), m_shard_.end(), m_.data() + shard_begin_);
  std::copy(v_shard_.begin(), v_shard_.end(), v_.data() + shard_begin_);
  m_shard_ = {};
  v_shard_ = {};
  sharded_ = false;
}

void AdamW::check_layout(const Arena& a, const char* what) const {
  const auto& ours = m_.entries();
  const auto& theirs = a.entries();
  TF_CHECK(a.size() == m_.size() && theirs.size() == ours.size(),
           "adamw: the {} arena ({} tensors, {} elements) is not the layout the optimizer was built for "
           "({} tensors, {} elements)",
           what, theirs.size(), a.size(), ours.size(), m_.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    TF_CHECK(theirs[i].name == ours[i].name && theirs[i].shape == ours[i].shape && theirs[i].offset == ours[i].offset,
             "adamw: {} tensor {} is '{}' {}, the optimizer expects '{}' {}", what, i, theirs[i].name,
             theirs[i].shape.str(), ours[i].name, ours[i].shape.str());
  }
  TF_CHECK(a.size() == 0 || const_data(a) != nullptr, "adamw: the {} arena is not allocated", what);
}

void AdamW::set_steps(int64_t n) {
  TF_CHECK(n >= 0, "adamw: step count must be >= 0, got {}", n);
  steps_ = n;
}

void AdamW::step(Arena& params, const Arena& grads, double lr) {
  TF_CHECK(lr >= 0 && std::isfinite(lr), "adamw: learning rate must be finite and >= 0, got {}", lr);
  check_layout(params, "parameter");
  check_layout(grads, "gradient");
  ++steps_;

  // Per-step scalars in double (torch computes them as Python floats), rounded once to float.
  const double t = static_cast<double>(steps_);
  const double bias_correction1 = 1.0 - std::pow(cfg_.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(cfg_.beta2, t);
  const float decay = static_cast<float>(1.0 - lr * cfg_.weight_decay);
  const float beta1 = static_cast<float>(cfg_.beta1), one_minus_beta1 = static_cast<float>(1.0 - cfg_.beta1);
  const float beta2 = static_cast<float>(cfg_.beta2), one_minus_beta2 = static_cast<float>(1.0 - cfg_.beta2);
  const float sqrt_bc2 = static_cast<float>(std::sqrt(bias_correction2));
  const float step_size = static_cast<float>(lr / bias_correction1);
  const float eps = static_cast<float>(cfg_.eps);

  float* p = params.data();  // [size]
  const float* g = const_data(grads);
  // Sharded, the moments are indexed from shard_begin_ (m[i] is element i of the buffer: m points
  // shard_begin_ elements before the shard storage, and only i in the shard is ever used).
  float* m = sharded_ ? m_shard_.data() : m_.data();
  float* v = sharded_ ? v_shard_.data() : v_.data();
  const int64_t base = sharded_ ? shard_begin_ : 0;
  const int64_t lo = sharded_ ? shard_begin_ : 0, hi = sharded_ ? shard_end_ : params.size();
  const int64_t n_pieces = static_cast<int64_t>(pieces_.size());
  parallel_for(n_pieces, params.size() > kParallelElements, [&](int64_t k) {
    // The closure holds references: without these local copies the compiler must assume that a
    // store to p, m or v may change a captured scalar, reloads it every element and leaves the
    // loop scalar (3.5x slower on GPT-2's 124M parameters).
    Piece piece = pieces_[static_cast<size_t>(k)];
    piece.begin = std::max(piece.begin, lo);
    piece.end = std::min(piece.end, hi);
    if (piece.begin >= piece.end) return;
    const float d = piece.decays ? decay : 1.0f;
    const float b1 = beta1, c1 = one_minus_beta1, b2 = beta2, c2 = one_minus_beta2;
    const float bc2 = sqrt_bc2, lr_t = step_size, e = eps;
    float* __restrict pk = p;
    float* __restrict mk = m;
    float* __restrict vk = v;
    const float* __restrict gk = g;
    const int64_t o = base;
    for (int64_t i = piece.begin; i < piece.end; ++i) {
      const float gi = gk[i];
      const float mi = b1 * mk[i - o] + c1 * gi;
      const float vi = b2 * vk[i - o] + c2 * gi * gi;
      mk[i - o] = mi;
      vk[i - o] = vi;
      const float denom = std::sqrt(vi) / bc2 + e;
      pk[i] = pk[i] * d - lr_t * mi / denom;
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Gradient norm and clipping

void norm_piece_sums(const float* g, int64_t n, int64_t first, int64_t last, double* out) {
  parallel_for(last - first, (last - first) * kNormPiece > kParallelElements, [&](int64_t j) {
    const int64_t k = first + j;
    const int64_t end = std::min(n, (k + 1) * kNormPiece);
    // Eight interleaved partial sums (a fixed order, so the result is the same on every run and
    // thread count) let the compiler vectorise what a single in-order sum would serialise.
    double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = k * kNormPiece;
    for (; i + 8 <= end; i += 8)
      for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(g[i + l]) * static_cast<double>(g[i + l]);
    for (; i < end; ++i) lane[0] += static_cast<double>(g[i]) * static_cast<double>(g[i]);
    out[j] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
  });
}

double global_grad_norm(const Arena& grads) {
  const int64_t n = grads.size();
  if (n == 0) return 0.0;
  const float* g = const_data(grads);  // [n]
  TF_CHECK(g != nullptr, "global_grad_norm: the gradient arena is not allocated");
  const int64_t n_pieces = (n + kNormPiece - 1) / kNormPiece;
  ScratchBuffer<double> sums(0, static_cast<size_t>(n_pieces));  // [n_pieces], piece k's sum of squares
  norm_piece_sums(g, n, 0, n_pieces, sums.data());
  double total = 0;
  for (int64_t k = 0; k < n_pieces; ++k) total += sums[static_cast<size_t>(k)];  // in piece order
  return std::sqrt(total);
}

double clip_grad_norm(Arena& grads, double max_norm) {
  const double norm = global_grad_norm(grads);
  if (max_norm > 0 && norm > max_norm) {  // false for a NaN norm
    const float scale = static_cast<float>(max_norm / (norm + 1e-6));
    float* g = grads.data();
    const int64_t n = grads.size();
    // In pieces, with the scale copied into each: see AdamW::step on captured scalars.
    parallel_for((n + kPiece - 1) / kPiece, n > kParallelElements, [&](int64_t k) {
      const float s = scale;
      float* __restrict gk = g;
      const int64_t end = std::min(n, (k + 1) * kPiece);
      for (int64_t i = k * kPiece; i < end; ++i) gk[i] *= s;
    });
  }
  return norm;
}

// ---------------------------------------------------------------------------------------------
// Learning-rate schedule

double learning_rate(const LrSchedule& s, int64_t step) {
  TF_CHECK(step >= 0, "learning_rate: step must be >= 0, got {}", step);
  TF_CHECK(s.warmup >= 0, "learning_rate: warmup must be >= 0, got {}", s.warmup);
  if (step < s.warmup) return s.lr * static_cast<double>(step + 1) / static_cast<double>(s.warmup + 1);
  if (step > s.decay_steps) return s.min_lr;
  if (s.decay_steps <= s.warmup) return s.lr;  // step == warmup == decay_steps: no room for a cosine
  const double ratio = static_cast<double>(step - s.warmup) / static_cast<double>(s.decay_steps - s.warmup);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return s.min_lr + coeff * (s.lr - s.min_lr);
}

}  // namespace tformer
